#include "common/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace ferry {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);
constexpr auto kPlainEvery = std::chrono::seconds(30);  // plain lines when the total is unknown
constexpr int kBarWidth = 30;

// FERRY_PROGRESS=always shows progress however quickly the work ends (scripts, tests).
bool always_shown() {
  const char* v = std::getenv("FERRY_PROGRESS");
  return v != nullptr && std::string_view(v) == "always";
}

}  // namespace

Progress::Progress(std::string what, uint64_t total, std::FILE* out, int terminal,
                   std::chrono::milliseconds quiet_for)
    : what_(std::move(what)),
      total_(total),
      out_(out),
      terminal_(terminal < 0 ? ::isatty(::fileno(out)) == 1 : terminal != 0),
      quiet_for_(always_shown() ? std::chrono::milliseconds(0) : quiet_for),
      started_(Clock::now()),
      last_draw_(started_) {}

Progress::~Progress() {
  finish();
}

std::string Progress::format_duration(std::chrono::seconds s) {
  int64_t t = std::max<int64_t>(s.count(), 0);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60));
  } else if (t >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  }
  return buf;
}

void Progress::update(uint64_t done) {
  if (finished_) return;
  done_ = std::max(done_, done);
  auto now = Clock::now();
  if (!shown_ && now - started_ < quiet_for_) return;
  if (terminal_) {
    if (shown_ && now - last_draw_ < kRedrawEvery) return;
  } else if (total_ > 0) {
    int tenth = static_cast<int>(std::min<uint64_t>(done_, total_) * 10 / total_);
    if (tenth <= last_tenth_ || tenth >= 10) return;  // 100% is the final line
    last_tenth_ = tenth;
  } else if (shown_ && now - last_draw_ < kPlainEvery) {
    return;
  }
  last_draw_ = now;
  shown_ = true;
  draw(done_, false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!shown_) return;
  if (total_ > 0) done_ = std::max(done_, total_);
  draw(done_, true);
}

void Progress::draw(uint64_t done, bool final) {
  auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started_);
  std::string line = what_ + ": ";
  if (total_ > 0) {
    uint64_t capped = std::min(done, total_);
    int pct = static_cast<int>(capped * 100 / total_);
    if (terminal_) {
      int filled = static_cast<int>(capped * kBarWidth / total_);
      line += "[" + std::string(static_cast<size_t>(filled), '#') +
              std::string(static_cast<size_t>(kBarWidth - filled), '.') + "] ";
    }
    line +=
        std::to_string(pct) + "% (" + std::to_string(capped) + "/" + std::to_string(total_) + ")";
    if (!final && capped > 0) {
      // Time left at the average rate so far.
      double rate = static_cast<double>(elapsed.count()) / static_cast<double>(capped);
      auto left =
          std::chrono::seconds(static_cast<int64_t>(rate * static_cast<double>(total_ - capped)));
      line += ", " + format_duration(left) + " left";
    }
  } else {
    line += std::to_string(done);
  }
  if (final) line += ", done in " + format_duration(elapsed);
  if (terminal_) {
    std::fprintf(out_, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace ferry
