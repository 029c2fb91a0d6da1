// The writable ledger connections' VFS (ledger/wal_vfs.h): a commit's WAL frames reach the file
// in one write, and nothing any other connection reads differs from SQLite's own VFS.
#include "ledger/wal_vfs.h"

#include <gtest/gtest.h>

#include <string>

#include "ledger/sqlite_db.h"
#include "test_util.h"

namespace ferry::ledger {
namespace {

using testing::TempDir;

int64_t count_rows(Db& db, const std::string& sql) {
  auto stmt = db.prepare(sql);
  EXPECT_TRUE(stmt) << (stmt ? "" : stmt.error().message);
  if (!stmt) return -1;
  auto row = stmt->step();
  EXPECT_TRUE(row && *row);
  return row && *row ? stmt->int_at(0) : -1;
}

TEST(WalVfs, ACommitsFramesReachTheFileInOneWrite) {
  ASSERT_NE(wal_gathering_vfs(), nullptr);
  TempDir dir;
  auto db = Db::open(dir.file("w.db"), false);
  ASSERT_TRUE(db) << db.error().message;
  ASSERT_TRUE(
      db->exec("CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b TEXT);"
               "CREATE INDEX t_a ON t(a); CREATE INDEX t_b ON t(b);"));
  for (int i = 0; i < 20; ++i) {
    const WalWriteCounts before = wal_write_counts();
    ASSERT_TRUE(
        db->exec("INSERT INTO t(a, b) VALUES (hex(randomblob(600)), hex(randomblob(600)))"));
    const WalWriteCounts after = wal_write_counts();
    // Three b-trees and the schema's pages change: several frames, each two writes by SQLite.
    EXPECT_GE(after.sqlite_writes - before.sqlite_writes, 6) << "commit " << i;
    EXPECT_EQ(after.file_writes - before.file_writes, 1) << "commit " << i;
  }
}

// Commits of every size (one row; thousands, spilling out of a 10-page cache mid-transaction
// and reading back their own frames), checkpoints by another connection between them and a
// rolled-back transaction: a reader on SQLite's own VFS sees every commit at once, the file is
// intact, and a reopened file has every row.
TEST(WalVfs, OtherConnectionsSeeEveryCommitAndTheFileIsIntact) {
  TempDir dir;
  const std::string path = dir.file("w.db");
  auto writer = Db::open(path, false);
  ASSERT_TRUE(writer) << writer.error().message;
  ASSERT_TRUE(
      writer->exec("PRAGMA cache_size=10; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
                   "CREATE INDEX t_v ON t(v);"));
  auto checkpointer = Db::open(path, false);
  ASSERT_TRUE(checkpointer) << checkpointer.error().message;
  auto reader = Db::open(path, true);
  ASSERT_TRUE(reader) << reader.error().message;
  int64_t expected = 0;
  for (int round = 0; round < 60; ++round) {
    const int rows = round % 7 == 3 ? 3000 : 1 + round % 5;
    ASSERT_TRUE(writer->exec("BEGIN IMMEDIATE"));
    auto inserted =
        writer->exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < " +
                     std::to_string(rows) + ") INSERT INTO t(v) SELECT hex(randomblob(40)) FROM n");
    ASSERT_TRUE(inserted) << "round " << round << ": " << inserted.error().message;
    // Its own rows, some of them only in frames written before the commit.
    EXPECT_EQ(count_rows(*writer, "SELECT COUNT(*) FROM t INDEXED BY t_v WHERE v > ''"),
              expected + rows);
    ASSERT_TRUE(writer->exec("COMMIT"));
    expected += rows;
    EXPECT_EQ(count_rows(*reader, "SELECT COUNT(*) FROM t"), expected) << "round " << round;
    if (round % 10 == 9) {
      ASSERT_TRUE(checkpointer->exec("PRAGMA wal_checkpoint(TRUNCATE)"));
    } else if (round % 4 == 1) {
      ASSERT_TRUE(checkpointer->exec("PRAGMA wal_checkpoint(PASSIVE)"));
    }
    if (round % 13 == 5) {
      ASSERT_TRUE(writer->exec("BEGIN IMMEDIATE; INSERT INTO t(v) VALUES ('gone'); ROLLBACK"));
    }
  }
  EXPECT_EQ(count_rows(*reader, "SELECT COUNT(*) FROM t WHERE v = 'gone'"), 0);
  auto check = reader->prepare("PRAGMA integrity_check");
  ASSERT_TRUE(check);
  auto has_row = check->step();
  ASSERT_TRUE(has_row && *has_row);
  EXPECT_EQ(check->text_at(0), "ok");
  *writer = Db();
  *checkpointer = Db();
  *reader = Db();
  auto reopened = Db::open(path, false);
  ASSERT_TRUE(reopened) << reopened.error().message;
  EXPECT_EQ(count_rows(*reopened, "SELECT COUNT(*) FROM t"), expected);
}

}  // namespace
}  // namespace ferry::ledger
