// Reading request rows back (SQLite file or postgresql:// URL), with the routing facts they were
// decided on: the input of `ferry policy replay` and of audits. Each call opens its own read-only
// connection (WAL readers never block the writer); safe from any worker thread, never an I/O
// thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/error.h"
#include "ledger/types.h"

namespace ferry::ledger {

// One request row as recorded (adjustment rows are not requests).
struct RecordedRequest {
  int64_t seq = 0;  // position in the chain
  std::string id;
  int64_t started_us = 0;
  int64_t ended_us = 0;
  std::string key_id;
  std::string team;
  std::string project;
  std::string task_id;
  std::string requested_model;
  std::string target;  // the target that answered (or the last one tried)
  std::string upstream_model;
  std::string rule_id;
  std::string policy_version;
  RequestStatus status = RequestStatus::kOk;
  int http_status = 0;
  bool stream = false;
  Tokens tokens;           // the request's, summed over its attempts
  Cost cost;               // as priced when recorded
  std::string facts_json;  // policies::facts_to_json text; "" when none was recorded
};

struct HistoryQuery {
  std::optional<int64_t> from_us;  // rows that ended at or after (unix micros, UTC)
  std::optional<int64_t> to_us;    // rows that ended before
  bool with_facts_only = false;    // skip rows recorded without facts
};

// Calls `visit` for every request row whose end lies in the range, in order of their end
// (then of the chain); `visit` returns false to stop early. Err: the file cannot be read.
Status for_each_request(const std::string& db_path, const HistoryQuery& query,
                        const std::function<bool(const RecordedRequest&)>& visit);

// How many request rows for_each_request would visit, ignoring with_facts_only (for
// progress: one pass over the requests_ended index).
Result<int64_t> count_requests(const std::string& db_path, const HistoryQuery& query);

// The currency the file is kept in ("" when the file has none recorded).
Result<std::string> ledger_currency(const std::string& db_path);

}  // namespace ferry::ledger
