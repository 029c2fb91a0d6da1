// constrain_walks: random walks of the constraint engine for an outside validator
// (tests/constrain/node/validate_walks.mjs runs it and checks every output with ajv).
//   constrain_walks --cases FILE --out FILE [--budget N] --vocab NAME[:LIMIT[:SEEDS]]...
// FILE holds a JSON array of cases: {"id", "schema"} or {"id", "tools": [{"name",
// "parameters"}], "tool_choice": "auto"|"none"|"required"|{"name"}, "parallel": bool}. Each
// vocabulary walks the first LIMIT cases (all by default) SEEDS times (1 by default). A walk
// picks uniformly among the allowed tokens until the end of generation, at most kMaxSteps
// tokens; in free text (tools auto/none) the end of generation weighs as a twentieth of the
// choices so that text ends in a few dozen tokens. Writes one JSON line per walk: id, vocab,
// seed, error (a compile error), ended, steps, output. With --budget N each walk gets a token
// budget (Matcher::set_token_budget) of its shortest completion + 1 (the end of generation)
// plus 0 to N-1 more, and also writes budget and shortest: a walk must then end within it.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "constrain/matcher.h"
#include "constrain/schema.h"
#include "constrain/tools.h"
#include "tests/constrain/test_vocab.h"

namespace ferry::constrain {
namespace {

constexpr int kMaxSteps = 4000;

CompileOptions walk_options() {
  CompileOptions o;
  o.max_string_chars = 16;
  o.max_array_items = 4;
  o.max_object_members = 4;
  o.max_any_depth = 3;
  return o;
}

Result<Grammar> compile_case(const nlohmann::json& c) {
  if (c.contains("schema")) return compile_json_schema(c["schema"].dump(), walk_options());
  ToolSpec spec;
  for (const auto& t : c["tools"]) {
    spec.functions.push_back(ToolFunction{t["name"].get<std::string>(),
                                          t.contains("parameters") ? t["parameters"].dump() : ""});
  }
  const auto& choice = c["tool_choice"];
  if (choice.is_object()) {
    spec.choice = ToolChoice::kNamed;
    spec.named = choice["name"].get<std::string>();
  } else if (choice == "none") {
    spec.choice = ToolChoice::kNone;
  } else if (choice == "required") {
    spec.choice = ToolChoice::kRequired;
  }
  spec.parallel_tool_calls = c.value("parallel", true);
  spec.max_calls = 3;
  return compile_tools(spec, walk_options());
}

nlohmann::json walk(const std::shared_ptr<const Grammar>& g, const testing::TestVocab& tv,
                    std::uint64_t seed, std::uint64_t budget_spread) {
  Matcher m(g, tv.vocab);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  const std::uint64_t shortest = m.shortest_completion();
  if (budget_spread > 0) m.set_token_budget(shortest + 1 + rng() % budget_spread);
  const std::uint64_t budget = m.token_budget();
  std::vector<std::uint64_t> mask;
  std::vector<TokenId> allowed;
  std::string out;
  int steps = 0;
  for (; steps < kMaxSteps && !m.ended(); ++steps) {
    m.fill_mask(mask);
    allowed.clear();
    TokenId eos = 0;
    bool has_eos = false;
    for (std::size_t w = 0; w < mask.size(); ++w) {
      for (std::uint64_t bits = mask[w]; bits; bits &= bits - 1) {
        const auto id =
            static_cast<TokenId>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits)));
        if (tv.vocab->is_eos(id)) {
          eos = id;
          has_eos = true;
        } else {
          allowed.push_back(id);
        }
      }
    }
    if (allowed.empty() && !has_eos) break;
    // The end of generation: one choice among all, or a twentieth of them in long free text.
    const std::size_t n = allowed.size();
    const bool text = n > tv.vocab->size() / 2;
    const double p_end = !has_eos ? 0.0
                                  : (n == 0 ? 1.0
                                     : text ? 0.05
                                            : 1.0 / static_cast<double>(n + 1));
    const bool end = std::uniform_real_distribution<double>(0, 1)(rng) < p_end;
    const TokenId t = end ? eos : allowed[rng() % n];
    if (!m.accept_token(t)) break;
    if (!end) out += tv.vocab->bytes(t);
  }
  nlohmann::json r;
  r["ended"] = m.ended();
  r["steps"] = steps;
  r["output"] = out;
  if (budget_spread > 0) {
    r["budget"] = budget;
    r["shortest"] = shortest;
  }
  return r;
}

int run(int argc, char** argv) {
  std::string cases_path;
  std::string out_path;
  std::vector<std::string> vocab_specs;
  std::uint64_t budget_spread = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--budget") budget_spread = std::stoull(argv[i + 1]);
    if (a == "--cases") cases_path = argv[i + 1];
    if (a == "--out") out_path = argv[i + 1];
    if (a == "--vocab") vocab_specs.emplace_back(argv[i + 1]);
  }
  if (cases_path.empty() || out_path.empty() || vocab_specs.empty()) {
    std::cerr << "usage: constrain_walks --cases FILE --out FILE --vocab NAME[:LIMIT[:SEEDS]]...\n";
    return 2;
  }
  std::ifstream in(cases_path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json cases = nlohmann::json::parse(text.str());
  std::ofstream out(out_path);
  for (const std::string& spec : vocab_specs) {
    std::stringstream parts(spec);
    std::string name, limit_s, seeds_s;
    std::getline(parts, name, ':');
    std::getline(parts, limit_s, ':');
    std::getline(parts, seeds_s, ':');
    const std::size_t limit = limit_s.empty() ? cases.size() : std::stoul(limit_s);
    const std::uint64_t seeds = seeds_s.empty() ? 1 : std::stoull(seeds_s);
    const testing::TestVocab* tv = testing::test_vocab(name);
    if (!tv) {
      nlohmann::json r = {{"vocab", name}, {"skipped", true}};
      out << r.dump() << "\n";
      continue;
    }
    for (std::size_t i = 0; i < cases.size() && i < limit; ++i) {
      const nlohmann::json& c = cases[i];
      auto g = compile_case(c);
      const auto grammar = g ? std::make_shared<const Grammar>(std::move(g).value()) : nullptr;
      for (std::uint64_t seed = 0; seed < seeds; ++seed) {
        nlohmann::json r;
        if (grammar) {
          r = walk(grammar, *tv, seed, budget_spread);
        } else {
          r["error"] = g.error().message;
        }
        r["id"] = c["id"];
        r["vocab"] = name;
        r["seed"] = seed;
        out << r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        if (!g) break;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace ferry::constrain

int main(int argc, char** argv) {
  return ferry::constrain::run(argc, argv);
}
