// A process killed with SIGKILL while many threads write: every row it reported durable is in
// the file, the chain verifies, and after reopening the chain continues.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include "ledger/row_log.h"
#include "ledger/sqlite_db.h"
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

// `logged`: the ledger's ids (the row log; its rows applied to SQLite only past 1,024 of them,
// so a kill leaves many in the log) and each row named by its task id; else ids chosen here
// (committed to SQLite directly).
[[noreturn]] void child_writer(const std::string& path, int fd, bool logged) {
  LedgerConfig config;
  config.path = path;
  if (logged) config.apply_ms = 60000;
  auto ledger = Ledger::open(config, catalog_from(kGpuLargePrices), {});
  if (!ledger) _exit(3);
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0;; ++i) {
        RequestRecord r = simple_record("gpu-large", tokens_of(100 + i, 0, c + 1, 0));
        std::string id = "c" + std::to_string(c) + "-" + std::to_string(i);
        (logged ? r.task_id : r.id) = id;
        std::promise<void> done;
        (*ledger)->record(r, [&, id](const Status& st) {
          if (st) {
            std::string line = id + "\n";
            if (write(fd, line.data(), line.size()) < 0) _exit(4);
          }
          done.set_value();
        });
        done.get_future().wait();  // like a client waiting for its response
      }
    });
  }
  for (auto& t : clients) t.join();
  _exit(0);
}

// Whether a segment of the row log in `dir` is pre-sized (its file at the full segment size).
bool presized_segment_in(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("crash.db-rowlog.0", 0) == 0 &&
        e.file_size() == static_cast<uintmax_t>(kRowLogSegmentBytes)) {
      return true;
    }
  }
  return false;
}

class Crash : public ::testing::TestWithParam<bool> {};

TEST_P(Crash, SigkillLosesNoAcknowledgedRow) {
  const bool logged = GetParam();
  TempDir dir;
  std::string path = dir.file("crash.db");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    child_writer(path, fds[1], logged);
  }
  close(fds[1]);
  std::set<std::string> acked;
  std::string pending;
  char buf[4096];
  bool killed = false;
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      acked.insert(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
    // With the row log, the kill comes once the log writes a pre-sized segment (O_DIRECT,
    // ledger/row_log.h) too: the child logs rows until then.
    if (!killed && acked.size() >= 2000 && (!logged || presized_segment_in(dir.file("")))) {
      kill(pid, SIGKILL);
      killed = true;
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(killed) << "child ended early, status " << status;
  ASSERT_TRUE(WIFSIGNALED(status));
  if (logged) {
    // The kill left rows in the log that only it holds: the reads below apply them.
    auto left = RowLog::of_another_process(path)->read_all();
    ASSERT_TRUE(left) << left.error().message;
    EXPECT_FALSE(left->entries.empty());
  }

  auto verified = verify_ledger(path);
  ASSERT_TRUE(verified) << verified.error().message;
  EXPECT_TRUE(verified->ok()) << verified->problems[0];
  EXPECT_GE(verified->rows, static_cast<int64_t>(acked.size()));
  {
    auto db = ledger_db_open(path, true);
    ASSERT_TRUE(db);
    auto stmt = db->prepare(std::string("SELECT COUNT(*) FROM requests WHERE ") +
                            (logged ? "task_id" : "id") + " = ?");
    ASSERT_TRUE(stmt);
    int64_t missing = 0;
    for (const auto& id : acked) {
      stmt->bind(1, id);
      ASSERT_TRUE(*stmt->step());
      missing += stmt->int_at(0) == 1 ? 0 : 1;
      stmt->reset();
    }
    EXPECT_EQ(missing, 0) << "rows reported durable but lost";
  }
  // Reopen: the chain continues from the last row that reached the disk.
  LedgerConfig config;
  config.path = path;
  auto ledger = Ledger::open(config, catalog_from(kGpuLargePrices), {});
  ASSERT_TRUE(ledger);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(record_durably(**ledger, simple_record("gpu-large", tokens_of(1, 0, 1, 0))));
  }
  ledger->reset();
  auto again = verify_ledger(path);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->ok()) << again->problems[0];
  EXPECT_EQ(again->rows, verified->rows + 5);
}

INSTANTIATE_TEST_SUITE_P(Ledger, Crash, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "RowLog" : "Direct"; });

}  // namespace
}  // namespace ferry::ledger
