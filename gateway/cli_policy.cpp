// ferry policy subcommands: `check` validates a policy file (optionally against a server
// config), `explain` shows how a request would be routed without calling any backend,
// `replay` re-decides the requests recorded in a ledger with a new policy.
// Single-threaded: runs once from main().
#include <CLI/CLI.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/progress.h"
#include "config/config.h"
#include "gateway/cli_commands.h"
#include "gateway/prompt_count.h"
#include "ledger/history.h"
#include "ledger/prices.h"
#include "ledger/time_util.h"
#include "policies/loader.h"
#include "policies/policy.h"
#include "replay/replay.h"

namespace ferry::cli {

namespace {

using nlohmann::json;

struct CheckArgs {
  std::string file;
  std::string config;
};

struct ReplayArgs {
  std::string config;
  std::string policy;
  std::string ledger;
  std::string from;
  std::string to;
  std::string format = "table";
};

struct ExplainArgs {
  std::string config;
  std::string policy;
  std::string request;
  std::string key;
  bool json_output = false;
  std::optional<int64_t> prompt_tokens;
  std::optional<int64_t> at;
  std::string endpoint = "/v1/chat/completions";
};

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Loads the server config when a path is given; prints the error and returns false on failure.
bool load_config(const std::string& path, std::optional<config::Config>& out) {
  if (path.empty()) return true;
  auto cfg = config::load_config_file(path);
  if (!cfg) {
    std::cerr << cfg.error().message << "\n";
    return false;
  }
  out = std::move(*cfg);
  return true;
}

policies::LoadOptions options_for(const std::optional<config::Config>& cfg) {
  policies::LoadOptions options;
  if (cfg) {
    std::vector<std::string> names;
    for (const auto& m : cfg->models) names.push_back(m.name);
    options.known_targets = std::move(names);
  }
  return options;
}

int run_check(const CheckArgs& args) {
  std::optional<config::Config> cfg;
  if (!load_config(args.config, cfg)) return 2;
  policies::LoadResult r = policies::load_policy_file(args.file, options_for(cfg));
  for (const auto& e : r.errors) std::cerr << e.to_string() << "\n";
  for (const auto& w : r.warnings) std::cerr << "warning: " << w.to_string() << "\n";
  if (!r.ok()) {
    std::cerr << args.file << ": invalid policy (" << r.errors.size() << " error"
              << (r.errors.size() == 1 ? "" : "s") << ")\n";
    return 1;
  }
  const auto& p = *r.policy;
  std::cout << args.file << ": ok, version " << p.short_version() << ", " << p.rules().size()
            << " rules, " << p.targets().size() << " targets, models:";
  for (const auto& a : p.aliases()) std::cout << " " << a.name;
  std::cout << (cfg ? "" : " (targets not checked: no --config)") << ", " << r.warnings.size()
            << " warning" << (r.warnings.size() == 1 ? "" : "s") << "\n";
  return 0;
}

std::vector<std::string> split_tags(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Facts from an OpenAI chat request body, the principal of --key and the config's models.
// Prompt tokens are counted per target as the server counts them (gateway/prompt_count.h);
// `counted` says whether the home target's count is exact.
std::optional<policies::Facts> facts_from_request(const json& body, const std::string& raw,
                                                  const ExplainArgs& args,
                                                  const config::Config& cfg,
                                                  const policies::Policy& policy, bool& counted) {
  policies::Facts f;
  if (!body.is_object()) {
    std::cerr << args.request << ": the request must be a JSON object\n";
    return std::nullopt;
  }
  if (body.contains("model") && body["model"].is_string()) f.model = body["model"];
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    if (body.contains(key) && body[key].is_number_integer()) {
      f.max_tokens = body[key].get<int64_t>();
      break;
    }
  }
  if (body.contains("temperature") && body["temperature"].is_number()) {
    f.temperature = body["temperature"].get<double>();
  }
  if (body.contains("top_p") && body["top_p"].is_number()) f.top_p = body["top_p"].get<double>();
  f.stream = body.value("stream", false) == true;
  auto non_empty = [&](const char* key) {
    return body.contains(key) && !body[key].is_null() &&
           !(body[key].is_array() && body[key].empty());
  };
  f.tools = non_empty("tools") || non_empty("functions");
  f.response_format = non_empty("response_format");
  if (body.contains("metadata") && body["metadata"].is_object()) {
    const json& md = body["metadata"];
    if (md.contains("task_id")) f.task_id = true;
    if (md.contains("tags") && md["tags"].is_string()) f.claimed_tags = split_tags(md["tags"]);
  }
  f.role = "app";
  if (!args.key.empty()) {
    const config::ApiKey* found = nullptr;
    for (const auto& k : cfg.auth.keys) {
      if (k.id == args.key) found = &k;
    }
    if (!found) {
      std::cerr << "unknown key id '" << args.key << "' (not in " << cfg.source << ")\n";
      return std::nullopt;
    }
    f.key = found->id;
    f.team = found->team;
    f.project = found->project;
    f.role = std::string(config::role_name(found->role));
    f.tags = found->tags;
  }
  f.unix_seconds = args.at ? *args.at : unix_micros_now() / 1000000;
  auto counters = gateway::load_prompt_counters(cfg);
  if (!counters) {
    std::cerr << counters.error().message << "\n";
    return std::nullopt;
  }
  const bool chat = args.endpoint != "/v1/completions";
  const auto ordered = gateway::count_input(chat, raw);  // as the server counts
  auto count_for = [&](const std::string& ref) -> std::optional<int64_t> {
    auto it = counters->find(ref);
    return it == counters->end() ? std::nullopt : it->second.count(chat, ordered);
  };
  const int64_t estimate = gateway::estimate_prompt_tokens(raw.size());
  for (const auto& ref : policy.target_refs()) {
    policies::TargetFacts t;
    t.ref = ref;
    if (const auto* m = cfg.find_model(ref)) t.context_length = m->context_length;
    t.prompt_tokens = count_for(ref).value_or(estimate);
    f.targets.push_back(std::move(t));
  }
  // The request's own count is its home target's: the first hop of the default route.
  std::optional<int64_t> home;
  for (const auto& hop : policy.default_action().route) {
    const std::string& ref = policy.targets()[static_cast<size_t>(hop.target)].ref;
    if (cfg.find_model(ref) == nullptr) continue;
    home = count_for(ref);
    break;
  }
  counted = args.prompt_tokens || home.has_value();
  f.prompt_tokens = args.prompt_tokens ? *args.prompt_tokens : home.value_or(estimate);
  return f;
}

int run_explain(const ExplainArgs& args) {
  if (args.endpoint != "/v1/chat/completions" && args.endpoint != "/v1/completions") {
    std::cerr
        << "ferry policy explain: --endpoint must be /v1/chat/completions or /v1/completions\n";
    return 2;
  }
  std::optional<config::Config> cfg;
  if (!load_config(args.config, cfg)) return 2;
  policies::LoadResult r = policies::load_policy_file(args.policy, options_for(cfg));
  if (!r.ok()) {
    std::cerr << r.errors_text();
    return 1;
  }
  auto text = read_text(args.request);
  if (!text) {
    std::cerr << args.request << ": cannot read the file\n";
    return 2;
  }
  json body = json::parse(*text, nullptr, false);
  if (body.is_discarded()) {
    std::cerr << args.request << ": not valid JSON\n";
    return 2;
  }
  bool counted = false;
  auto facts = facts_from_request(body, *text, args, *cfg, *r.policy, counted);
  if (!facts) return 2;
  if (!facts->model.empty() && !r.policy->has_alias(facts->model)) {
    std::cerr << "note: model '" << facts->model
              << "' is not an alias of this policy; the server would answer 404\n";
  }
  policies::Explanation ex = r.policy->explain(*facts);
  if (args.json_output) {
    json out = policies::explanation_to_json(ex);
    out["prompt_tokens_source"] = args.prompt_tokens ? "--prompt-tokens"
                                  : counted          ? "tokenizer"
                                                     : "estimate";
    std::cout << out.dump(2) << "\n";
  } else {
    if (!counted) {
      std::cout << "(prompt_tokens is an estimate of about 4 bytes a token: the home target has "
                   "no tokenizer; pass --prompt-tokens for an exact count)\n";
    }
    std::cout << policies::explanation_to_text(ex);
  }
  return 0;
}

// `--from`/`--to` days (UTC, both included) as the range of the requests' ends.
bool replay_range(const ReplayArgs& args, replay::ReplayOptions& options) {
  for (auto [text, name, is_to] :
       {std::tuple{&args.from, "--from", false}, std::tuple{&args.to, "--to", true}}) {
    if (text->empty()) continue;
    auto date = ledger::parse_civil_date(*text);
    if (!date) {
      std::cerr << "ferry policy replay: " << name << " must be YYYY-MM-DD, got '" << *text
                << "'\n";
      return false;
    }
    int64_t midnight = ledger::days_from_civil(*date) * ledger::kMicrosPerDay;
    if (is_to) {
      options.to_us = midnight + ledger::kMicrosPerDay;
    } else {
      options.from_us = midnight;
    }
  }
  return true;
}

int run_replay(const ReplayArgs& args) {
  if (args.format != "table" && args.format != "json") {
    std::cerr << "ferry policy replay: --format must be table or json\n";
    return 2;
  }
  replay::ReplayOptions options;
  if (!replay_range(args, options)) return 2;
  std::optional<config::Config> cfg;
  if (!load_config(args.config, cfg)) return 2;
  policies::LoadResult r = policies::load_policy_file(args.policy, options_for(cfg));
  if (!r.ok()) {
    std::cerr << r.errors_text();
    return 1;
  }
  // Current prices: the config's `prices:` section, as the server would load it.
  ledger::PriceCatalog prices;
  if (cfg->prices.present()) {
    try {
      prices = ledger::PriceCatalog::from_yaml(cfg->prices.node, cfg->source);
    } catch (const std::exception& e) {
      std::cerr << e.what() << "\n";
      return 2;
    }
  } else {
    std::cerr << "note: " << cfg->source << " has no prices: every cost is unpriced\n";
  }
  ledger::HistoryQuery counted;
  counted.from_us = options.from_us;
  counted.to_us = options.to_us;
  auto rows = ledger::count_requests(args.ledger, counted);
  Progress progress("ferry policy replay: rows", rows ? static_cast<uint64_t>(*rows) : 0);
  options.progress = [&](uint64_t read) { progress.update(read); };
  auto result = replay::replay_ledger(*r.policy, args.ledger, prices, options);
  progress.finish();
  if (!result) {
    std::cerr << "ferry policy replay: " << result.error().message << "\n";
    return 1;
  }
  if (args.format == "json") {
    std::cout << replay::replay_to_json(*result).dump(2) << "\n";
  } else {
    std::cout << replay::replay_to_text(*result);
  }
  return 0;
}

}  // namespace

void add_policy_commands(CLI::App& app, int& exit_code) {
  CLI::App* policy = app.add_subcommand("policy", "check, explain and replay routing policies");
  policy->require_subcommand(1);

  auto check = std::make_shared<CheckArgs>();
  CLI::App* check_cmd = policy->add_subcommand(
      "check",
      "validate a policy file: errors with file:line:col, warnings for rules that "
      "can never match");
  check_cmd->add_option("FILE", check->file, "the policies.yaml to check")->required();
  check_cmd->add_option("--config", check->config, "server config: targets must name its models");
  check_cmd->callback([check, &exit_code] { exit_code = run_check(*check); });

  auto explain = std::make_shared<ExplainArgs>();
  CLI::App* explain_cmd = policy->add_subcommand(
      "explain",
      "show the facts, every rule's clauses, the chosen rule, the route and the "
      "parameter changes for one request, without calling any backend");
  explain_cmd->add_option("--config", explain->config, "server config")->required();
  explain_cmd->add_option("--policy", explain->policy, "the policies.yaml")->required();
  explain_cmd->add_option("--request", explain->request, "an OpenAI chat request body (JSON)")
      ->required();
  explain_cmd->add_option("--key", explain->key, "API key id whose team/project/role/tags apply");
  explain_cmd->add_option("--prompt-tokens", explain->prompt_tokens,
                          "prompt token count to use (default: counted with the config's "
                          "tokenizers, as the server counts)");
  explain_cmd->add_option("--endpoint", explain->endpoint,
                          "/v1/chat/completions (default) or /v1/completions");
  explain_cmd->add_option("--at", explain->at, "evaluate at this time (seconds since the epoch)");
  explain_cmd->add_flag("--json", explain->json_output, "print JSON instead of text");
  explain_cmd->callback([explain, &exit_code] { exit_code = run_explain(*explain); });

  auto replay = std::make_shared<ReplayArgs>();
  CLI::App* replay_cmd = policy->add_subcommand(
      "replay",
      "re-decide the requests recorded in a ledger with a new policy: how many would "
      "move, from which target to which, and the cost difference at current prices");
  replay_cmd->add_option("--config", replay->config, "server config (models and prices)")
      ->required();
  replay_cmd->add_option("--policy", replay->policy, "the new policies.yaml")->required();
  replay_cmd->add_option("--ledger", replay->ledger, "the ledger file, or a postgresql:// URL")
      ->required();
  replay_cmd->add_option("--from", replay->from, "first UTC day included (YYYY-MM-DD)");
  replay_cmd->add_option("--to", replay->to, "last UTC day included (YYYY-MM-DD)");
  replay_cmd->add_option("--format", replay->format, "table|json");
  replay_cmd->callback([replay, &exit_code] { exit_code = run_replay(*replay); });
}

}  // namespace ferry::cli
