// What the ledger fuzz targets make of their input: a request row with every kind of value
// (ids and tags of any bytes, token counts, timestamps, attempts), for fuzz_ledger_row (through
// the real Ledger) and fuzz_ledger_codec (the row log's codec and reader).
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ledger/types.h"

namespace ferry::fuzz {

// Token counts a backend could report without the cost of a row overflowing int64 micros.
inline constexpr int64_t kMaxTokens = int64_t{1} << 40;

inline ledger::TokenCount tokens(FuzzedDataProvider& in) {
  return {in.ConsumeIntegralInRange<int64_t>(0, kMaxTokens),
          static_cast<ledger::TokenSource>(in.ConsumeIntegralInRange(0, 3))};
}

inline ledger::Tokens all_tokens(FuzzedDataProvider& in) {
  return {tokens(in), tokens(in), tokens(in), tokens(in)};
}

inline std::vector<std::string> tags(FuzzedDataProvider& in) {
  std::vector<std::string> out;
  for (int n = in.ConsumeIntegralInRange(0, 3); n > 0; --n) {
    out.push_back(in.ConsumeRandomLengthString(24));
  }
  return out;
}

inline ledger::RequestRecord record(FuzzedDataProvider& in, int64_t now_us) {
  ledger::RequestRecord r;
  r.started_us = now_us - in.ConsumeIntegralInRange<int64_t>(0, int64_t{1} << 50);
  r.ended_us = r.started_us + in.ConsumeIntegralInRange<int64_t>(0, int64_t{1} << 40);
  r.key_id = in.ConsumeRandomLengthString(16);
  r.team = in.ConsumeRandomLengthString(16);
  r.project = in.ConsumeRandomLengthString(16);
  r.task_id = in.ConsumeRandomLengthString(16);
  r.trusted_tags = tags(in);
  r.claimed_tags = tags(in);
  r.requested_model = in.ConsumeRandomLengthString(16);
  r.target = in.ConsumeBool() ? "priced" : in.ConsumeRandomLengthString(16);
  r.upstream_model = in.ConsumeRandomLengthString(16);
  r.rule_id = in.ConsumeRandomLengthString(16);
  r.policy_version = in.ConsumeRandomLengthString(16);
  r.status = static_cast<ledger::RequestStatus>(in.ConsumeIntegralInRange(0, 4));
  r.http_status = in.ConsumeIntegralInRange(100, 599);
  r.error_code = in.ConsumeRandomLengthString(16);
  r.stream = in.ConsumeBool();
  r.finish_reason = in.ConsumeRandomLengthString(16);
  r.tokens = all_tokens(in);
  for (int n = in.ConsumeIntegralInRange(0, 2); n > 0; --n) {
    ledger::AttemptRecord a;
    a.target = in.ConsumeBool() ? "priced" : in.ConsumeRandomLengthString(16);
    a.upstream_model = in.ConsumeRandomLengthString(16);
    a.status = static_cast<ledger::RequestStatus>(in.ConsumeIntegralInRange(0, 4));
    a.http_status = in.ConsumeIntegralInRange(100, 599);
    a.error_code = in.ConsumeRandomLengthString(16);
    a.tokens = all_tokens(in);
    a.started_us = r.started_us;
    a.ended_us = r.ended_us;
    r.attempts.push_back(std::move(a));
  }
  r.timings = {in.ConsumeIntegral<int32_t>(), in.ConsumeIntegral<int32_t>(),
               in.ConsumeIntegral<int32_t>(), in.ConsumeIntegral<int32_t>()};
  r.facts_json = in.ConsumeRandomLengthString(64);
  return r;
}

}  // namespace ferry::fuzz
