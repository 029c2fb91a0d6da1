#include "common/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ferry {
namespace {

// Everything written to a temporary FILE*, split into lines.
std::vector<std::string> lines_of(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::vector<std::string> lines;
  std::string cur;
  for (int c; (c = std::fgetc(f)) != EOF;) {
    if (c == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(c);
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

TEST(Progress, PlainOutputIsALineAtEachTenthThenTheFinalLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("export", 1000, f, /*terminal=*/0, std::chrono::milliseconds(0));
    for (uint64_t done = 0; done <= 1000; done += 7) p.update(done);
  }
  auto lines = lines_of(f);
  std::fclose(f);
  ASSERT_EQ(lines.size(), 10u);  // 10%, 20%, ... 90%, then the final line
  EXPECT_EQ(lines[0].rfind("export: 10% (10", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(" left"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[8].rfind("export: 90% (", 0), 0u) << lines[8];
  EXPECT_EQ(lines[9].rfind("export: 100% (1000/1000), done in ", 0), 0u) << lines[9];
}

TEST(Progress, TerminalOutputRedrawsOneLineWithABar) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("quantize", 4, f, /*terminal=*/1, std::chrono::milliseconds(0));
    p.update(1);
    p.finish();
  }
  std::fflush(f);
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text += static_cast<char>(c);
  std::fclose(f);
  EXPECT_EQ(text.find("\rquantize: ["), 0u) << text;
  EXPECT_NE(text.find("] 100% (4/4), done in "), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

TEST(Progress, QuickWorkPrintsNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("replay", 10, f, /*terminal=*/0, std::chrono::hours(1));
    for (uint64_t done = 0; done <= 10; ++done) p.update(done);
  }
  EXPECT_TRUE(lines_of(f).empty());
  std::fclose(f);
}

TEST(Progress, AlwaysInTheEnvironmentShowsEvenQuickWork) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ::setenv("FERRY_PROGRESS", "always", 1);
  {
    Progress p("replay", 10, f, /*terminal=*/0, std::chrono::hours(1));
    for (uint64_t done = 0; done <= 10; ++done) p.update(done);
  }
  ::unsetenv("FERRY_PROGRESS");
  auto lines = lines_of(f);
  std::fclose(f);
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[0].rfind("replay: 10% (1/10)", 0), 0u) << lines[0];
  EXPECT_EQ(lines[9].rfind("replay: 100% (10/10), done in ", 0), 0u) << lines[9];
}

TEST(Progress, DurationsReadAsHoursMinutesSeconds) {
  EXPECT_EQ(Progress::format_duration(std::chrono::seconds(12)), "12s");
  EXPECT_EQ(Progress::format_duration(std::chrono::seconds(187)), "3m07s");
  EXPECT_EQ(Progress::format_duration(std::chrono::seconds(3720)), "1h02m");
}

}  // namespace
}  // namespace ferry
