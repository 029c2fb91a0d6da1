// The SQLite ledger's row log: a batch of rows is made durable by one write and one fdatasync
// to a plain file, and applied to the SQLite file later, many batches in one transaction (the
// ledger's applier thread). One process owns a ledger's log (an flock on `<db>-rowlog.lock`);
// its segments are `<db>-rowlog.<n>`, removed once their rows are committed in SQLite. Readers
// of the SQLite file call catch_up_row_log() first (ledger_db_open does): rows of a log owned
// by this process are applied, and of a log nobody owns (a killed server) too.
// Segments are pre-sized once a log is busy: a spare, `<db>-rowlog.spare`, is filled with
// zeros and synced ahead of time (prepare_spare(), on the ledger's checkpoint thread) and
// renamed to the next segment, which is then written with O_DIRECT in whole 4 KiB blocks (the
// block the log ends in written again with the next records). Why: a growing file's
// fdatasync waits for the data's writeback, the inode (its size) and the cache flush; a direct
// overwrite is on the device when fdatasync runs, and the inode is written only when its mtime
// changed since the last sync (a clock tick: most groups at 200 req/s, few at saturation).
// Measured at 16 connections (bench/README.md, issue 17 session 24): the writer's CPU
// 9.8-11.7 -> 6.8-8.0 us a row; at 200 req/s no change. Zeros after the last record end a
// segment; a record over a 512-byte sector of zeros was cut by a crash.
// Without a spare (the first 64 KiB of a run, or a disk that refused one) a segment is created
// empty and grows, written through the page cache, as before.
// A RowLog belongs to one thread at a time (the ledger's writer; the applier removes segments),
// except prepare_spare(), which any thread may call (the spare's state is under its own mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "ledger/sqlite_db.h"
#include "ledger/store.h"

namespace ferry::ledger {

// A record: "FRL1", the payload's length (u32 LE), its CRC-32C (u32 LE), then the payload,
// encode_entry() (ledger/journal.h: a versioned binary codec).
inline constexpr size_t kRowLogHeaderBytes = 12;
// A segment is closed and a new one started past this size.
inline constexpr int64_t kRowLogSegmentBytes = 8 << 20;
// A log that grew a segment this far gets pre-sized ones from then on (an idle ledger, or one of
// a test, never writes the zeros of a spare).
inline constexpr int64_t kRowLogSpareAfterBytes = 64 << 10;

uint32_t crc32c(std::string_view bytes);

class RowLog {
 public:
  // The log's rows, oldest first, and what was dropped (a torn tail: a write a crash cut).
  struct Contents {
    std::vector<LedgerEntry> entries;
    std::vector<std::string> notes;
    uint64_t last_segment = 0;  // 0: no segment
  };

  // Takes the log's lock without waiting: kUnavailable with type_code "row_log_locked" when
  // another process (or another RowLog in this one) holds it.
  static Result<std::unique_ptr<RowLog>> open(const std::string& db_path);
  // The log of a ledger another process owns, to read only (read_all(true)).
  static std::unique_ptr<RowLog> of_another_process(const std::string& db_path);
  ~RowLog();
  RowLog(const RowLog&) = delete;
  RowLog& operator=(const RowLog&) = delete;

  // Every segment's records, oldest first. A torn or damaged last record of a segment is
  // dropped (noted); a damaged record with a valid one after it is an error (the file was
  // damaged, not cut by a crash): the ledger refuses to start rather than skip rows.
  // `live`: the owner is writing (another process): a segment it removed meanwhile is skipped,
  // and reading a segment stops quietly at its first incomplete record (being written).
  Result<Contents> read_all(bool live = false) const;
  // Starts a new segment after `after` (the spare renamed when one is ready, else created
  // empty; its directory entry synced).
  Status start_segment(uint64_t after);
  // Whether the segment being written was a spare (pre-sized; false once a failed write cut it).
  bool presized() const { return presized_; }
  // True when a spare should be prepared now: none is ready or being prepared, and the log is
  // busy enough (a pre-sized segment, or kRowLogSpareAfterBytes written to a growing one).
  // The writer's thread (it reads the segment's state).
  bool wants_spare() const;
  bool spare_ready() const;
  // Writes the spare: zeros to kRowLogSegmentBytes, then fdatasync. Any thread; does nothing
  // when a spare is ready or being prepared. A failure removes the file and is not retried by
  // wants_spare() (segments then grow as they are written).
  Status prepare_spare();
  // Writes the entries' records at the segment's end in one write, then fdatasync. On an
  // error nothing of the batch counts: the segment is cut back to where it was.
  Status append(const std::vector<LedgerEntry*>& entries);
  // The segment being written and its size.
  uint64_t segment() const { return segment_; }
  int64_t size() const { return size_; }
  // Removes the segments numbered below `segment` (their rows are committed in SQLite).
  void remove_before(uint64_t segment) const;
  const std::string& db_path() const { return db_path_; }

 private:
  RowLog() = default;
  std::string segment_path(uint64_t n) const;
  std::string spare_path() const { return db_path_ + "-rowlog.spare"; }
  std::vector<uint64_t> segments() const;

  enum class Spare { kNone, kPreparing, kReady, kFailed };

  std::string db_path_;
  int lock_fd_ = -1;
  int fd_ = -1;
  uint64_t segment_ = 0;
  int64_t size_ = 0;
  bool presized_ = false;
  // Written with O_DIRECT in whole kDirectBlock blocks (a pre-sized segment): `tail_` holds the
  // segment's bytes after its last block boundary, written again before the next records.
  static constexpr size_t kDirectBlock = 4096;
  bool direct_ = false;
  std::string tail_;
  std::string buffer_;  // the batch's records, reused
  struct FreeBlock {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, FreeBlock> block_;  // kDirectBlock-aligned copy of a direct write
  size_t block_capacity_ = 0;
  mutable std::mutex spare_mu_;
  Spare spare_ = Spare::kNone;  // guarded by spare_mu_
};

// Applies the log's rows to `store` in transactions of `max_batch` rows: a row already there
// (same id: applied before a crash cut the segment's removal) counts as applied.
// Returns the rows applied.
Result<int64_t> apply_log_rows(Store& store, std::vector<LedgerEntry>& entries, size_t max_batch);

// The process's owners of row logs (Ledger registers itself): catch_up_row_log() asks the owner
// of `db_path`'s log to apply every row logged so far before a read.
void register_row_log_owner(const std::string& db_path, std::function<Status()> apply_now);
void unregister_row_log_owner(const std::string& db_path);
// Whether a ledger of this process owns `db_path`'s log (registered above).
bool row_log_owned_here(const std::string& db_path);

// Before reading the SQLite ledger at `db_path`: the rows of its log are applied, by the owner
// in this process, or here: with the log's lock when no process owns it (a killed server; its
// segments are then removed), or, when another process owns it, its rows read as they are and
// applied here too (idempotently: the owner's applier finds them there and skips them; only
// the owner removes segments). A reader without write access reads what SQLite has.
Status catch_up_row_log(const std::string& db_path);
// catch_up_row_log, then Db::open. Every reader of the ledger's SQLite file opens it so.
Result<Db> ledger_db_open(const std::string& db_path, bool read_only);

}  // namespace ferry::ledger
