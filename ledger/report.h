// Reports and exports over a ledger file: requests, tokens and cost by kind grouped by task,
// team, project, key, model, target, rule, day or month, with savings against the reference
// model; and a streaming CSV export of the rows. Each call opens its own read-only connection
// (WAL readers never block the writer); safe from any worker thread, never an I/O thread.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/money.h"
#include "ledger/time_util.h"

namespace ferry::ledger {

enum class ReportBy : uint8_t {
  kTask,
  kTeam,
  kProject,
  kKey,
  kModel,
  kTarget,
  kRule,
  kDay,
  kMonth
};
std::string_view report_by_name(ReportBy by);
std::optional<ReportBy> parse_report_by(std::string_view name);
// "team,day" -> {kTeam, kDay}; nullopt on an unknown or repeated name.
std::optional<std::vector<ReportBy>> parse_report_by_list(std::string_view names);

// Every value is bound as a parameter; none is ever part of the SQL text.
struct ReportFilter {
  std::optional<std::string> key_id;
  std::optional<std::string> team;
  std::optional<std::string> project;
  std::optional<std::string> task_id;
  std::optional<std::string> model;  // the upstream model that answered
  std::optional<std::string> target;
  std::optional<std::string> rule_id;
  std::optional<std::string> request_id;  // the gateway's x-request-id (reads the rows)
  std::optional<CivilDate> from;          // first UTC day included
  std::optional<CivilDate> to;            // last UTC day included
};

struct ReportQuery {
  std::vector<ReportBy> by = {ReportBy::kTeam};
  ReportFilter filter;
  bool force_raw = false;  // read the rows, not the daily aggregates (used to cross-check)
  // Read `daily`, never the smaller `daily_team` (used to cross-check).
  bool force_full_aggregate = false;
  // Reading the rows: aggregate `chunk_rows` seq values at a time and merge the groups (0: one
  // query, or about kReportChunks chunks when progress is asked for). Same result either way.
  int64_t chunk_rows = 0;
  bool levers = false;  // also the savings by lever (Report::levers), read from the rows
};

inline constexpr int64_t kReportChunks = 64;

struct ReportRow {
  std::vector<std::string> group;  // one value per ReportQuery::by
  int64_t requests = 0;            // served: neither refused nor a shadow copy
  int64_t unpriced_requests = 0;   // served ones whose cost is unknown and not in the sums
  int64_t refused_requests = 0;    // refused before running (budget, policy, context)
  int64_t shadow_requests = 0;     // shadow copies; their cost is in the sums
  int64_t input_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t output_tokens = 0;
  int64_t reasoning_tokens = 0;
  Money cost_input;
  Money cost_cached;
  Money cost_output;
  Money cost_reasoning;
  Money total;           // = the four parts, exactly
  Money avoided;         // what the reference model would have charged
  Money avoided_base;    // actual cost of the rows that have an avoided cost
  int64_t first_us = 0;  // first request's start
  int64_t last_us = 0;   // last request's end

  Money average() const;  // total / requests, rounded half away from zero to the micro-unit
  Money saved() const { return avoided - avoided_base; }
  void add(const ReportRow& other);
};

// The avoided cost by lever over the request rows a filter selects (`--savings`): answered by
// a cheaper target than the reference model (avoided_cost less the actual cost of those rows),
// served from the response cache (what the answers cost when they were made), prompt tokens
// trimmed (at the input price), and rows with a reasoning budget applied (their reasoning
// tokens; no avoided cost is claimed: what an uncapped model would have spent is unknown).
struct LeverSavings {
  int64_t local_requests = 0;  // rows with an avoided cost against the reference model
  Money local_saved;
  int64_t cache_hits = 0;
  int64_t cache_tokens = 0;
  Money cache_avoided;
  int64_t trimmed_requests = 0;
  int64_t trimmed_tokens = 0;
  Money trim_avoided;
  int64_t reasoning_capped = 0;
  int64_t reasoning_tokens = 0;
  Money total() const { return local_saved + cache_avoided + trim_avoided; }
};

struct Report {
  std::vector<ReportBy> by;
  std::string currency;
  bool from_aggregate = false;
  std::vector<ReportRow> rows;         // ordered by group
  ReportRow totals;                    // the sum of the rows, to the micro-unit
  std::optional<LeverSavings> levers;  // when ReportQuery::levers
};

// `progress(done, total)` after each chunk, counted in seq values (about rows): only a report
// that reads the rows calls it; the daily aggregates answer in one quick query.
using ReportProgress = std::function<void(int64_t done, int64_t total)>;
Result<Report> run_report(const std::string& db_path, const ReportQuery& query,
                          const ReportProgress& progress = {});

enum class ReportFormat : uint8_t { kTable, kCsv, kJson };
std::optional<ReportFormat> parse_report_format(std::string_view name);
// Money in CSV and JSON is an exact decimal string ("12.345678").
std::string format_report(const Report& report, ReportFormat format, bool savings);

// Streams every row matching the filter as CSV (header first, in chain order; the columns
// are seq, request_columns(), hash, then request_id, empty where a row has none), in chunks of
// about `chunk_bytes`. `sink` returns false to stop early (client gone): the export then ends
// with an ok status.
Status export_csv(const std::string& db_path, const ReportFilter& filter,
                  const std::function<bool(std::string_view chunk)>& sink,
                  size_t chunk_bytes = 64 * 1024);

// The same for the `attempts` rows (one per try on a target, failed fallback hops included)
// of the requests matching the filter, in chain order of their request.
Status export_attempts_csv(const std::string& db_path, const ReportFilter& filter,
                           const std::function<bool(std::string_view chunk)>& sink,
                           size_t chunk_bytes = 64 * 1024);

// How many rows export_csv (or, with `attempts`, export_attempts_csv) would write: for
// progress.
Result<int64_t> count_export_rows(const std::string& db_path, const ReportFilter& filter,
                                  bool attempts);

// CSV field quoting; text that a spreadsheet would run as a formula gets a leading quote.
std::string csv_field(std::string_view text, bool is_text);

}  // namespace ferry::ledger
