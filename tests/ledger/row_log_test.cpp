// The SQLite ledger's row log (ledger/row_log.h): records framed and checksummed, a torn tail
// dropped with a note, a damaged record in the middle refused, rows left in the log by a crash
// applied at the next open (once each), and readers that see every row reported durable.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>

#include "ledger/journal.h"
#include "ledger/report.h"
#include "ledger/row_log.h"
#include "ledger/verify.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::catalog_from;
using testing::record_durably;
using testing::simple_record;
using testing::TempDir;
using testing::tokens_of;

using testing::kGpuLargePrices;

LedgerEntry entry_with(const std::string& id, int64_t input) {
  LedgerEntry e;
  e.record = simple_record("gpu-large", tokens_of(input, 0, 1, 0));
  e.record.id = id;
  e.cost = catalog_from(kGpuLargePrices).price("gpu-large", e.record.tokens, e.record.started_us);
  return e;
}

int64_t count_rows(const std::string& path, const std::string& where = "1") {
  auto db = ledger_db_open(path, true);
  EXPECT_TRUE(db) << (db ? "" : db.error().message);
  auto stmt = db->prepare("SELECT COUNT(*) FROM requests WHERE " + where);
  EXPECT_TRUE(stmt);
  EXPECT_TRUE(*stmt->step());
  return stmt->int_at(0);
}

std::vector<std::filesystem::path> segments_of(const std::string& db) {
  std::vector<std::filesystem::path> out;
  const std::string prefix = std::filesystem::path(db).filename().string() + "-rowlog.0";
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(db).parent_path())) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<Ledger> open_ledger(const std::string& db, int64_t apply_ms = 100,
                                    int64_t retry_ms = 200) {
  LedgerConfig config;
  config.path = db;
  config.apply_ms = apply_ms;
  config.retry_ms = retry_ms;
  auto ledger = Ledger::open(config, catalog_from(kGpuLargePrices), {});
  EXPECT_TRUE(ledger) << (ledger ? "" : ledger.error().message);
  return ledger ? std::move(*ledger) : nullptr;
}

// The served requests by team, read from the rows.
Result<Report> team_report(const std::string& db) {
  ReportQuery q;
  q.by = {ReportBy::kTeam};
  q.force_raw = true;
  return run_report(db, q);
}

// Writes `entries` to the log of `db` as a server would have left it at a crash.
void leave_in_log(const std::string& db, std::vector<LedgerEntry> entries) {
  auto log = RowLog::open(db);
  ASSERT_TRUE(log) << log.error().message;
  auto contents = (*log)->read_all();
  ASSERT_TRUE(contents);
  ASSERT_TRUE((*log)->start_segment(contents->last_segment));
  std::vector<LedgerEntry*> batch;
  for (auto& e : entries) batch.push_back(&e);
  ASSERT_TRUE((*log)->append(batch));
}

TEST(RowLog, Crc32cIsCastagnoli) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  // Lengths around the 8-byte steps agree with a byte-wise definition (the same input split).
  std::string text(100, 'x');
  for (size_t n = 0; n < text.size(); ++n) text[n] = static_cast<char>(n * 7);
  EXPECT_NE(crc32c(text.substr(0, 99)), crc32c(text));
}

TEST(RowLog, RecordsComeBackInOrderAndOneProcessOwnsTheLog) {
  TempDir dir;
  std::string db = dir.file("l.db");
  {
    auto log = RowLog::open(db);
    ASSERT_TRUE(log);
    // A second owner (another process, or another ledger of this one) is refused.
    auto second = RowLog::open(db);
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error().type_code, "row_log_locked");
    ASSERT_TRUE((*log)->start_segment(0));
    for (int b = 0; b < 3; ++b) {
      std::vector<LedgerEntry> entries{entry_with("a" + std::to_string(b), 10 + b),
                                       entry_with("b" + std::to_string(b), 20 + b)};
      std::vector<LedgerEntry*> batch{&entries[0], &entries[1]};
      ASSERT_TRUE((*log)->append(batch));
    }
    ASSERT_TRUE((*log)->start_segment((*log)->segment()));
    std::vector<LedgerEntry> last{entry_with("c", 30)};
    std::vector<LedgerEntry*> batch{&last[0]};
    ASSERT_TRUE((*log)->append(batch));
    auto contents = (*log)->read_all();
    ASSERT_TRUE(contents);
    EXPECT_TRUE(contents->notes.empty());
    EXPECT_EQ(contents->last_segment, 2u);
    std::vector<std::string> ids;
    for (const auto& e : contents->entries) ids.push_back(e.record.id);
    EXPECT_EQ(ids, (std::vector<std::string>{"a0", "b0", "a1", "b1", "a2", "b2", "c"}));
    EXPECT_EQ(contents->entries[3].record.tokens.input.count, 21);
    (*log)->remove_before(2);
    EXPECT_EQ(segments_of(db).size(), 1u);
  }
  EXPECT_TRUE(RowLog::open(db));  // the lock went with the first owner
}

TEST(RowLog, ATornTailIsDroppedWithANoteAndADamagedMiddleIsRefused) {
  TempDir dir;
  std::string db = dir.file("l.db");
  leave_in_log(db, {entry_with("one", 1), entry_with("two", 2), entry_with("three", 3)});
  auto segments = segments_of(db);
  ASSERT_EQ(segments.size(), 1u);
  const auto whole = std::filesystem::file_size(segments[0]);
  {
    // A crash cut the last record: the two before it are read, the rest is noted.
    std::filesystem::resize_file(segments[0], whole - 5);
    auto log = RowLog::open(db);
    ASSERT_TRUE(log);
    auto contents = (*log)->read_all();
    ASSERT_TRUE(contents) << contents.error().message;
    ASSERT_EQ(contents->entries.size(), 2u);
    ASSERT_EQ(contents->notes.size(), 1u);
    EXPECT_NE(contents->notes[0].find("incomplete record"), std::string::npos);
  }
  {
    // A flipped byte in the first record, with whole records after it: damage, not a crash.
    std::fstream f(segments[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  auto log = RowLog::open(db);
  ASSERT_TRUE(log);
  auto contents = (*log)->read_all();
  ASSERT_FALSE(contents);
  EXPECT_NE(contents.error().message.find("damaged"), std::string::npos);
  EXPECT_NE(contents.error().message.find(segments[0].string()), std::string::npos);
  log->reset();
  // The ledger refuses to start rather than leave the rows out, and says where.
  LedgerConfig config;
  config.path = db;
  auto ledger = Ledger::open(config, catalog_from(kGpuLargePrices), {});
  ASSERT_FALSE(ledger);
  EXPECT_NE(ledger.error().message.find("move the file aside"), std::string::npos);
}

// The bytes of `path` up to its last non-zero one (a pre-sized segment's records).
int64_t written_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t last = data.find_last_not_of('\0');
  return last == std::string::npos ? 0 : static_cast<int64_t>(last) + 1;
}

TEST(RowLog, APresizedSegmentIsWrittenInPlaceAndItsZerosEndIt) {
  TempDir dir;
  std::string db = dir.file("l.db");
  auto log = RowLog::open(db);
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->start_segment(0));
  EXPECT_FALSE((*log)->presized());
  EXPECT_FALSE((*log)->wants_spare()) << "an idle log writes no spare";
  std::vector<LedgerEntry> first;
  for (int i = 0; (*log)->size() < kRowLogSpareAfterBytes; ++i) {
    first = {entry_with("g" + std::to_string(i), i)};
    std::vector<LedgerEntry*> batch{&first[0]};
    ASSERT_TRUE((*log)->append(batch));
    ASSERT_LT(i, 100000);
  }
  EXPECT_TRUE((*log)->wants_spare());
  ASSERT_TRUE((*log)->prepare_spare());
  EXPECT_TRUE((*log)->spare_ready());
  EXPECT_FALSE((*log)->wants_spare());
  const std::filesystem::path spare = db + "-rowlog.spare";
  EXPECT_EQ(std::filesystem::file_size(spare), static_cast<uintmax_t>(kRowLogSegmentBytes));
  ASSERT_TRUE((*log)->start_segment((*log)->segment()));
  EXPECT_TRUE((*log)->presized());
  EXPECT_FALSE(std::filesystem::exists(spare)) << "the spare became the segment";
  EXPECT_TRUE((*log)->wants_spare()) << "a pre-sized segment asks for the next spare at once";
  std::vector<LedgerEntry> rows{entry_with("p1", 1), entry_with("p2", 2), entry_with("p3", 3)};
  std::vector<LedgerEntry*> batch{&rows[0], &rows[1], &rows[2]};
  ASSERT_TRUE((*log)->append(batch));
  // Batches of one row each: most start and end inside a block (written whole again).
  for (int i = 0; i < 40; ++i) {
    std::vector<LedgerEntry> one{entry_with("q" + std::to_string(i), i)};
    std::vector<LedgerEntry*> single{&one[0]};
    ASSERT_TRUE((*log)->append(single));
  }
  const auto path = segments_of(db).back();
  // Written in place: the file keeps its size; the records are where the zeros were (a record
  // may end in zero bytes itself: the reader takes whole records first, zeros only after).
  EXPECT_EQ(std::filesystem::file_size(path), static_cast<uintmax_t>(kRowLogSegmentBytes));
  EXPECT_GT(written_bytes(path), (*log)->size() / 2);
  EXPECT_LE(written_bytes(path), (*log)->size());
  auto contents = (*log)->read_all();
  ASSERT_TRUE(contents) << contents.error().message;
  EXPECT_TRUE(contents->notes.empty()) << contents->notes[0];
  ASSERT_GE(contents->entries.size(), 43u);
  const size_t p1 = contents->entries.size() - 43;
  for (size_t i = 0; i < 43; ++i) {
    EXPECT_EQ(contents->entries[p1 + i].record.id,
              i < 3 ? "p" + std::to_string(i + 1) : "q" + std::to_string(i - 3));
  }
  // A spare the owner leaves (a clean stop) is removed; one a crash left is never used.
  ASSERT_TRUE((*log)->prepare_spare());
  EXPECT_TRUE(std::filesystem::exists(spare));
  log->reset();
  EXPECT_FALSE(std::filesystem::exists(spare));
}

// A crash while the kernel wrote a batch back into a pre-sized segment can keep any of its
// sectors from the disk, the first ones too: a sector of zeros inside a record is such a cut
// (the rest dropped, noted), while a damaged byte with whole records after it is refused.
TEST(RowLog, ABatchCutInAPresizedSegmentIsDroppedAndDamageStillRefused) {
  for (const bool zeroed : {true, false}) {
    SCOPED_TRACE(zeroed ? "a sector of zeros" : "a damaged byte");
    TempDir dir;
    std::string db = dir.file("l.db");
    int64_t first_end = 0;
    int64_t second_end = 0;
    {
      auto log = RowLog::open(db);
      ASSERT_TRUE(log);
      ASSERT_TRUE((*log)->prepare_spare());
      ASSERT_TRUE((*log)->start_segment(0));
      ASSERT_TRUE((*log)->presized());
      std::vector<LedgerEntry> acked{entry_with("a1", 1), entry_with("a2", 2)};
      std::vector<LedgerEntry*> batch{&acked[0], &acked[1]};
      ASSERT_TRUE((*log)->append(batch));
      first_end = (*log)->size();
      std::vector<LedgerEntry> cut;
      for (int i = 0; i < 40; ++i) cut.push_back(entry_with("c" + std::to_string(i), i));
      batch.clear();
      for (auto& e : cut) batch.push_back(&e);
      ASSERT_TRUE((*log)->append(batch));
      second_end = (*log)->size();
    }
    // A sector in the middle of the second batch, with whole records of it on either side.
    const int64_t sector = (first_end + 1024) / 512 * 512 + 512;
    ASSERT_LT(sector + 2048, second_end);
    const auto path = segments_of(db).back();
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(sector);
      if (zeroed) {
        f.write(std::string(512, '\0').data(), 512);
      } else {
        f.seekp(sector + 100);
        f.put('\x7f');
      }
    }
    auto log = RowLog::open(db);
    ASSERT_TRUE(log);
    auto contents = (*log)->read_all();
    if (!zeroed) {
      ASSERT_FALSE(contents);
      EXPECT_NE(contents.error().message.find("damaged"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(contents) << contents.error().message;
    ASSERT_EQ(contents->notes.size(), 1u);
    EXPECT_NE(contents->notes[0].find("incomplete record"), std::string::npos);
    // The first batch whole, the second up to the record the zeros cut.
    ASSERT_GE(contents->entries.size(), 3u);
    EXPECT_LT(contents->entries.size(), 42u);
    EXPECT_EQ(contents->entries[0].record.id, "a1");
    EXPECT_EQ(contents->entries[1].record.id, "a2");
    for (size_t i = 2; i < contents->entries.size(); ++i) {
      EXPECT_EQ(contents->entries[i].record.id, "c" + std::to_string(i - 2));
    }
  }
}

// A busy ledger moves to pre-sized segments (the spare prepared off the writer's thread) and
// loses nothing on the way; a clean stop leaves neither segments nor a spare.
TEST(RowLog, ABusyLedgerWritesIntoPresizedSegments) {
  TempDir dir;
  std::string db = dir.file("l.db");
  auto ledger = open_ledger(db);
  ASSERT_TRUE(ledger);
  auto presized = [&] {
    for (const auto& path : segments_of(db)) {
      if (std::filesystem::file_size(path) == static_cast<uintmax_t>(kRowLogSegmentBytes)) {
        return true;
      }
    }
    return false;
  };
  int64_t rows = 0;
  while (!presized()) {
    // Rows in groups of 64 until a batch finds the spare ready.
    std::vector<std::promise<Status>> done(64);
    for (auto& d : done) {
      ledger->record(simple_record("gpu-large", tokens_of(1, 0, 1, 0)),
                     [&d](const Status& st) { d.set_value(st); });
    }
    for (auto& d : done) ASSERT_TRUE(d.get_future().get());
    rows += 64;
    ASSERT_LT(rows, 1000000) << "no pre-sized segment";
  }
  ASSERT_TRUE(record_durably(*ledger, simple_record("gpu-large", tokens_of(1, 0, 1, 0))));
  ++rows;
  for (const auto& path : segments_of(db)) EXPECT_LE(written_bytes(path), kRowLogSegmentBytes);
  ledger.reset();
  EXPECT_TRUE(segments_of(db).empty());
  EXPECT_FALSE(std::filesystem::exists(db + "-rowlog.spare"));
  auto verified = verify_ledger(db);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok()) << verified->problems[0];
  EXPECT_EQ(verified->rows, rows);
}

TEST(RowLog, RowsACrashLeftInTheLogAreAppliedOnceAtTheNextOpen) {
  TempDir dir;
  std::string db = dir.file("l.db");
  {
    auto ledger = open_ledger(db);
    ASSERT_TRUE(ledger);
    ASSERT_TRUE(record_durably(*ledger, simple_record("gpu-large", tokens_of(5, 0, 1, 0))));
  }
  // "applied" is in SQLite already (its segment's removal was cut by the crash), "new" not.
  LedgerEntry applied = entry_with("applied", 7);
  {
    auto ledger = open_ledger(db, 0);
    ASSERT_TRUE(ledger);
    ASSERT_TRUE(record_durably(*ledger, applied.record));
  }
  leave_in_log(db, {entry_with("applied", 7), entry_with("new-1", 8), entry_with("new-2", 9)});
  auto ledger = open_ledger(db);
  ASSERT_TRUE(ledger);
  EXPECT_TRUE(ledger->has_row_log());
  EXPECT_EQ(count_rows(db), 4);
  EXPECT_EQ(count_rows(db, "id='applied'"), 1);
  EXPECT_EQ(count_rows(db, "id IN ('new-1','new-2')"), 2);
  ledger.reset();
  EXPECT_TRUE(segments_of(db).empty());  // a clean stop leaves no log behind
  auto verified = verify_ledger(db);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok());
  EXPECT_EQ(verified->rows, 4);
}

// A second ledger of the same file in one process commits directly at once: the owner is known
// here (the registry), so it does not wait for the lock as for a CLI applying the log.
TEST(RowLog, ASecondLedgerOfThisProcessCommitsDirectlyWithoutWaitingForTheLock) {
  TempDir dir;
  std::string db = dir.file("l.db");
  EXPECT_FALSE(row_log_owned_here(db));
  auto first = open_ledger(db, 60000);
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->has_row_log());
  EXPECT_TRUE(row_log_owned_here(db));
  ::testing::internal::CaptureStderr();
  auto second = open_ledger(db);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->has_row_log());
  EXPECT_NE(said.find("held by another ledger of this process"), std::string::npos) << said;
  ASSERT_TRUE(record_durably(*first, simple_record("gpu-large", tokens_of(1, 0, 1, 0))));
  ASSERT_TRUE(record_durably(*second, simple_record("gpu-large", tokens_of(2, 0, 1, 0))));
  EXPECT_EQ(count_rows(db), 2);  // the first's row applied for the read, the second's direct
  second.reset();
  first.reset();
  EXPECT_FALSE(row_log_owned_here(db));
  auto report = team_report(db);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->totals.input_tokens, 3);
  auto verified = verify_ledger(db);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok());
  EXPECT_EQ(verified->rows, 2);
}

TEST(RowLog, AReaderWithoutAnOwnerAppliesTheLogFirst) {
  TempDir dir;
  std::string db = dir.file("l.db");
  {
    auto ledger = open_ledger(db);
    ASSERT_TRUE(ledger);
  }
  leave_in_log(db, {entry_with("left-1", 1), entry_with("left-2", 2)});
  // A report (as `ferry ledger report` after a killed server) includes them.
  auto report = team_report(db);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->totals.requests, 2);
  EXPECT_TRUE(segments_of(db).empty());
  EXPECT_EQ(count_rows(db), 2);
}

TEST(RowLog, EveryRowReportedDurableIsReadByTheNextReportWithoutAFlush) {
  TempDir dir;
  std::string db = dir.file("l.db");
  auto ledger = open_ledger(db, 60000);  // nothing applied by the timer during the test
  ASSERT_TRUE(ledger);
  ASSERT_TRUE(ledger->has_row_log());
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(record_durably(*ledger, simple_record("gpu-large", tokens_of(i, 0, 1, 0))));
    auto report = team_report(db);
    ASSERT_TRUE(report) << report.error().message;
    EXPECT_EQ(report->totals.requests, i);
    EXPECT_EQ(report->totals.input_tokens, i * (i + 1) / 2);
  }
  // An adjustment finds its original though it waited in the log.
  std::string id;
  ASSERT_TRUE(record_durably(*ledger, simple_record("gpu-large", tokens_of(1, 0, 0, 0)), &id));
  Adjustment adj;
  adj.adjusts_id = id;
  adj.input = Money::from_micros(-1);
  std::promise<Status> done;
  ledger->adjust(adj, [&](const Status& st) { done.set_value(st); });
  EXPECT_TRUE(done.get_future().get());
  // A row whose id the caller chose and repeats is refused to its caller, not dropped later.
  RequestRecord twice = simple_record("gpu-large", tokens_of(1, 0, 1, 0));
  twice.id = "chosen";
  ASSERT_TRUE(record_durably(*ledger, twice));
  Status again = record_durably(*ledger, twice);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(count_rows(db), 8);
}

TEST(RowLog, AReaderInAnotherProcessSeesEveryRowTheOwnerReportedDurable) {
  TempDir dir;
  std::string db = dir.file("l.db");
  int to_parent[2];
  int to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The owner: rows durable in its log only (its applier would wait a minute).
    LedgerConfig config;
    config.path = db;
    config.apply_ms = 60000;
    auto ledger = Ledger::open(config, catalog_from(kGpuLargePrices), {});
    if (!ledger || !(*ledger)->has_row_log()) _exit(3);
    for (int i = 1; i <= 10; ++i) {
      if (!record_durably(**ledger, simple_record("gpu-large", tokens_of(i, 0, 1, 0)))) _exit(4);
    }
    char c = 'r';
    if (write(to_parent[1], &c, 1) != 1) _exit(5);
    if (read(to_child[0], &c, 1) != 1) _exit(6);  // the reader is done: stop cleanly
    for (int i = 11; i <= 12; ++i) {
      if (!record_durably(**ledger, simple_record("gpu-large", tokens_of(i, 0, 1, 0)))) _exit(4);
    }
    ledger->reset();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);
  auto report = team_report(db);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->totals.requests, 10);
  EXPECT_EQ(report->totals.input_tokens, 55);
  EXPECT_FALSE(segments_of(db).empty()) << "only the owner removes its segments";
  ASSERT_EQ(write(to_child[1], &c, 1), 1);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  // The owner's applier found the ten there and skipped them: every row once, chain whole.
  EXPECT_EQ(count_rows(db), 12);
  EXPECT_TRUE(segments_of(db).empty());
  auto verified = verify_ledger(db);
  ASSERT_TRUE(verified);
  EXPECT_TRUE(verified->ok()) << verified->problems[0];
  EXPECT_EQ(verified->rows, 12);
}

TEST(RowLog, ALogWriteThatFailsIsRetriedAndNeverReportedDurableBefore) {
  TempDir dir;
  std::string db = dir.file("l.db");
  auto ledger = open_ledger(db, 100, 20);
  ASSERT_TRUE(ledger);
  ledger->inject_commit_failures(2);
  std::promise<Status> done;
  auto fut = done.get_future();
  ledger->record(simple_record("gpu-large", tokens_of(1, 0, 1, 0)),
                 [&](const Status& st) { done.set_value(st); });
  EXPECT_TRUE(fut.get());
  EXPECT_EQ(ledger->stats().write_failures, 2);
  EXPECT_TRUE(ledger->health());
  EXPECT_EQ(count_rows(db), 1);
}

}  // namespace
}  // namespace ferry::ledger
