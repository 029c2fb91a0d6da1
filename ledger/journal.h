// The local journal of a PostgreSQL ledger: rows that could not reach the database are kept,
// durably, in a SQLite file on this machine and shipped when the database answers again
// (idempotently: a row's id is its key, so a row shipped twice is counted once). Also the
// entry codec it stores them with. A Journal belongs to one thread (the ledger's writer).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "ledger/sqlite_db.h"
#include "ledger/store.h"

namespace ferry::ledger {

// A LedgerEntry as bytes (a fixed field order behind a version byte; strings length-prefixed,
// so any bytes survive) and back. decode_entry refuses truncated or unknown input.
std::string encode_entry(const LedgerEntry& entry);
// The same bytes appended to `out` (the row log writes a batch's records into one buffer).
void encode_entry_to(const LedgerEntry& entry, std::string& out);
Result<LedgerEntry> decode_entry(std::string_view bytes);

struct JournalRow {
  int64_t seq = 0;
  LedgerEntry entry;
};

class Journal {
 public:
  // Opens or creates the file (WAL, synchronous=FULL: a kept row survives a power cut).
  static Result<Journal> open(const std::string& path);

  // Keeps the entries in one transaction; durable when it returns Ok.
  Status append(const std::vector<LedgerEntry*>& entries);
  // The oldest `limit` rows still to ship, in the order they were kept.
  Result<std::vector<JournalRow>> oldest(size_t limit);
  // Forgets shipped rows (by seq), in one transaction.
  Status remove(const std::vector<int64_t>& seqs);
  // A row the database refused for good (e.g. an adjustment of an unknown request): moved to
  // the `refused` table with the reason, where an operator can see it; never dropped.
  Status set_aside(int64_t seq, std::string_view reason);
  // Rows still to ship (kept by this object; read from the file at open).
  int64_t pending() const { return pending_; }
  const std::string& path() const { return path_; }

 private:
  Db db_;
  std::string path_;
  int64_t pending_ = 0;
};

}  // namespace ferry::ledger
