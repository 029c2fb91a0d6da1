// `ferry ledger verify`: checks a ledger file's hash chain, that every total equals the sum
// of its parts (cost kinds, attempts), that adjustments point at earlier requests, and that
// the daily aggregates match the rows. Opens its own read-only connection; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace ferry::ledger {

struct VerifyResult {
  int64_t rows = 0;
  int64_t attempts = 0;
  int64_t adjustments = 0;
  int64_t problem_count = 0;
  std::vector<std::string> problems;  // the first ones, each naming the row
  std::string head;                   // "seq:hash" of the last row
  bool ok() const { return problem_count == 0; }
};

// Err only when the file cannot be read; a broken ledger is an ok result with problems.
// A postgresql:// URL verifies that database (verify_pg_ledger).
Result<VerifyResult> verify_ledger(const std::string& db_path);
// PostgreSQL: every instance's chain (links, hashes over the instance id, the head recorded in
// chain_heads), costs, attempts, adjustments, and the daily aggregates against the rows.
// `head` lists "instance=seq:hash" per chain.
Result<VerifyResult> verify_pg_ledger(const std::string& url);

// Whether each row's hash-chain link verifies (its hash over its values and attempts, and its
// prev_hash equal to the hash of the row before it), by seq; a seq with no row is left out.
// A SQLite file.
Result<std::map<int64_t, bool>> verify_links(const std::string& db_path,
                                             const std::vector<int64_t>& seqs);

}  // namespace ferry::ledger
