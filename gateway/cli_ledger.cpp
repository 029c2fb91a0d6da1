// ferry ledger subcommands for finance and operators: report, export, verify, adjust.
// Single-threaded CLI; each command opens the ledger file itself (read-only where it can).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "common/progress.h"
#include "gateway/cli_commands.h"
#include "ledger/ledger.h"
#include "ledger/report.h"
#include "ledger/verify.h"

namespace ferry::cli {

namespace {

struct FilterArgs {
  std::string from;
  std::string to;
  std::string team;
  std::string project;
  std::string key;
  std::string task;
  std::string model;
  std::string target;
  std::string rule;
  std::string request_id;
};

void add_filter_options(CLI::App* cmd, FilterArgs& f) {
  cmd->add_option("--from", f.from, "first UTC day included (YYYY-MM-DD)");
  cmd->add_option("--to", f.to, "last UTC day included (YYYY-MM-DD)");
  cmd->add_option("--team", f.team, "only this team");
  cmd->add_option("--project", f.project, "only this project");
  cmd->add_option("--key", f.key, "only this API key id");
  cmd->add_option("--task", f.task, "only this task id");
  cmd->add_option("--model", f.model, "only this upstream model");
  cmd->add_option("--target", f.target, "only this target");
  cmd->add_option("--rule", f.rule, "only this policy rule");
  cmd->add_option("--request-id", f.request_id, "only the row of this x-request-id");
}

// Builds the filter; prints the problem and returns nullopt on a bad date.
std::optional<ledger::ReportFilter> make_filter(const FilterArgs& f) {
  ledger::ReportFilter filter;
  auto opt = [](const std::string& v) -> std::optional<std::string> {
    if (v.empty()) return std::nullopt;
    return v;
  };
  filter.team = opt(f.team);
  filter.project = opt(f.project);
  filter.key_id = opt(f.key);
  filter.task_id = opt(f.task);
  filter.model = opt(f.model);
  filter.target = opt(f.target);
  filter.rule_id = opt(f.rule);
  filter.request_id = opt(f.request_id);
  for (auto [text, slot, name] :
       {std::tuple{&f.from, &filter.from, "--from"}, std::tuple{&f.to, &filter.to, "--to"}}) {
    if (text->empty()) continue;
    auto date = ledger::parse_civil_date(*text);
    if (!date) {
      std::cerr << "ferry ledger: " << name << " must be YYYY-MM-DD, got '" << *text << "'\n";
      return std::nullopt;
    }
    *slot = *date;
  }
  return filter;
}

std::optional<Money> parse_amount(const std::string& text, const char* name) {
  if (text.empty()) return Money();
  auto money = Money::parse(text);
  if (!money) std::cerr << "ferry ledger adjust: " << name << " must be an exact decimal\n";
  return money;
}

// ferry ledger report
void add_report_command(CLI::App* ledger_cmd, int& exit_code) {
  auto* cmd = ledger_cmd->add_subcommand("report", "requests, tokens and cost grouped");
  auto db = std::make_shared<std::string>();
  auto by = std::make_shared<std::string>("team");
  auto format = std::make_shared<std::string>("table");
  auto savings = std::make_shared<bool>(false);
  auto filter = std::make_shared<FilterArgs>();
  cmd->add_option("--db", *db, "ledger file")->required();
  cmd->add_option("--by", *by,
                  "group by task|team|project|key|model|target|rule|day|month; several with "
                  "commas, e.g. team,day");
  cmd->add_option("--format", *format, "table|csv|json");
  cmd->add_flag("--savings", *savings,
                "actual versus avoided cost (reference model), and the avoided cost by lever");
  add_filter_options(cmd, *filter);
  cmd->callback([=, &exit_code] {
    auto by_list = ledger::parse_report_by_list(*by);
    auto fmt = ledger::parse_report_format(*format);
    auto f = make_filter(*filter);
    if (!by_list) {
      std::cerr << "ferry ledger report: --by must list task, team, project, key, model, "
                   "target, rule, day or month (each once)\n";
      exit_code = 2;
      return;
    }
    if (!fmt) {
      std::cerr << "ferry ledger report: --format must be table, csv or json\n";
      exit_code = 2;
      return;
    }
    if (!f) {
      exit_code = 2;
      return;
    }
    ledger::ReportQuery query;
    query.by = *by_list;
    query.filter = *f;
    query.levers = *savings;
    // Only a report that reads the rows calls back (in chunks); the daily aggregates are quick.
    Progress progress("ferry ledger report: rows", 0);
    auto report = ledger::run_report(*db, query, [&progress](int64_t done, int64_t total) {
      progress.set_total(static_cast<uint64_t>(total));
      progress.update(static_cast<uint64_t>(done));
    });
    progress.finish();
    if (!report) {
      std::cerr << "ferry ledger report: " << report.error().message << "\n";
      exit_code = 1;
      return;
    }
    std::cout << ledger::format_report(*report, *fmt, *savings);
    exit_code = 0;
  });
}

// ferry ledger export
void add_export_command(CLI::App* ledger_cmd, int& exit_code) {
  auto* cmd = ledger_cmd->add_subcommand("export", "every row as CSV, in chain order");
  auto db = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto filter = std::make_shared<FilterArgs>();
  auto attempts = std::make_shared<bool>(false);
  cmd->add_option("--db", *db, "ledger file")->required();
  cmd->add_option("--out", *out, "write to this file instead of stdout");
  cmd->add_flag("--attempts", *attempts,
                "export the attempts of the matching requests instead (one row per try on a "
                "target, failed fallback hops included)");
  add_filter_options(cmd, *filter);
  cmd->callback([=, &exit_code] {
    auto f = make_filter(*filter);
    if (!f) {
      exit_code = 2;
      return;
    }
    std::ofstream file;
    std::ostream* sink = &std::cout;
    if (!out->empty()) {
      file.open(*out, std::ios::binary | std::ios::trunc);
      if (!file) {
        std::cerr << "ferry ledger export: cannot write " << *out << "\n";
        exit_code = 1;
        return;
      }
      sink = &file;
    }
    auto export_rows = *attempts ? ledger::export_attempts_csv : ledger::export_csv;
    auto total = ledger::count_export_rows(*db, *f, *attempts);
    Progress progress("ferry ledger export: rows", total ? static_cast<uint64_t>(*total) : 0);
    uint64_t lines = 0;  // the header's included: one more than the rows
    auto st = export_rows(
        *db, *f,
        [&](std::string_view chunk) {
          sink->write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
          lines += static_cast<uint64_t>(std::count(chunk.begin(), chunk.end(), '\n'));
          progress.update(lines > 0 ? lines - 1 : 0);
          return static_cast<bool>(*sink);
        },
        64 * 1024);
    progress.finish();
    sink->flush();
    if (!st || !*sink) {
      std::cerr << "ferry ledger export: " << (st ? "write failed" : st.error().message) << "\n";
      exit_code = 1;
      return;
    }
    exit_code = 0;
  });
}

// ferry ledger verify
void add_verify_command(CLI::App* ledger_cmd, int& exit_code) {
  auto* cmd = ledger_cmd->add_subcommand(
      "verify", "check the hash chain and that every total equals the sum of its parts");
  auto db = std::make_shared<std::string>();
  cmd->add_option("--db", *db, "ledger file")->required();
  cmd->callback([=, &exit_code] {
    auto result = ledger::verify_ledger(*db);
    if (!result) {
      std::cerr << "ferry ledger verify: " << result.error().message << "\n";
      exit_code = 1;
      return;
    }
    if (result->ok()) {
      std::cout << "ok: " << result->rows << " rows (" << result->adjustments << " adjustments), "
                << result->attempts << " attempt rows; chain head " << result->head << "\n";
      exit_code = 0;
      return;
    }
    std::cout << "FAILED: " << result->problem_count << " problem(s) in " << result->rows
              << " rows\n";
    for (const auto& p : result->problems) std::cout << "  " << p << "\n";
    if (result->problem_count > static_cast<int64_t>(result->problems.size())) {
      std::cout << "  ... and "
                << result->problem_count - static_cast<int64_t>(result->problems.size())
                << " more\n";
    }
    exit_code = 1;
  });
}

// ferry ledger adjust
void add_adjust_command(CLI::App* ledger_cmd, int& exit_code) {
  auto* cmd = ledger_cmd->add_subcommand(
      "adjust", "append a correction row pointing at a request (amounts are deltas)");
  auto db = std::make_shared<std::string>();
  auto request = std::make_shared<std::string>();
  auto note = std::make_shared<std::string>();
  auto amounts = std::make_shared<std::array<std::string, 4>>();
  cmd->add_option("--db", *db, "ledger file")->required();
  cmd->add_option("--request", *request, "id of the request row to correct")->required();
  cmd->add_option("--note", *note, "why (kept in the row)")->required();
  cmd->add_option("--input", (*amounts)[0], "delta of the input cost, e.g. -0.25");
  cmd->add_option("--cached-input", (*amounts)[1], "delta of the cached input cost");
  cmd->add_option("--output", (*amounts)[2], "delta of the output cost");
  cmd->add_option("--reasoning", (*amounts)[3], "delta of the reasoning cost");
  cmd->callback([=, &exit_code] {
    ledger::Adjustment adj;
    adj.adjusts_id = *request;
    adj.note = *note;
    auto input = parse_amount((*amounts)[0], "--input");
    auto cached = parse_amount((*amounts)[1], "--cached-input");
    auto output = parse_amount((*amounts)[2], "--output");
    auto reasoning = parse_amount((*amounts)[3], "--reasoning");
    if (!input || !cached || !output || !reasoning) {
      exit_code = 2;
      return;
    }
    adj.input = *input;
    adj.cached_input = *cached;
    adj.output = *output;
    adj.reasoning = *reasoning;
    ledger::LedgerConfig config;
    config.path = *db;
    config.apply_ms = 0;  // one row: committed to SQLite itself, no row log
    auto ledger = ledger::Ledger::open(config, ledger::PriceCatalog(), {});
    if (!ledger) {
      std::cerr << "ferry ledger adjust: " << ledger.error().message << "\n";
      exit_code = 1;
      return;
    }
    std::promise<Status> done;
    std::string id = (*ledger)->adjust(adj, [&done](const Status& st) { done.set_value(st); });
    Status st = done.get_future().get();
    if (!st) {
      std::cerr << "ferry ledger adjust: " << st.error().message << "\n";
      exit_code = 1;
      return;
    }
    std::cout << id << "\n";
    exit_code = 0;
  });
}

}  // namespace

void add_ledger_commands(CLI::App& app, int& exit_code) {
  auto* ledger_cmd = app.add_subcommand("ledger", "the cost ledger: reports, exports, checks");
  ledger_cmd->require_subcommand(1);
  add_report_command(ledger_cmd, exit_code);
  add_export_command(ledger_cmd, exit_code);
  add_verify_command(ledger_cmd, exit_code);
  add_adjust_command(ledger_cmd, exit_code);
}

}  // namespace ferry::cli
