#include "local_engine/kernels/trace.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ferry::kernels {
namespace {

struct TraceState {
  std::mutex mu;
  std::string dir;
  FILE* index = nullptr;
  int step = -1;
  int serial = 0;
};

TraceState* state() {
  static TraceState* instance = [] {
    const char* dir = std::getenv("FERRY_TRACE_DIR");
    if (dir == nullptr || *dir == '\0') return static_cast<TraceState*>(nullptr);
    auto* s = new TraceState();  // lives for the process
    s->dir = dir;
    s->index = std::fopen((s->dir + "/index.txt").c_str(), "w");
    if (s->index == nullptr) {
      delete s;
      return static_cast<TraceState*>(nullptr);
    }
    return s;
  }();
  return instance;
}

}  // namespace

bool trace_enabled() {
  return state() != nullptr;
}

void trace_next_step() {
  TraceState* s = state();
  if (s == nullptr) return;
  std::lock_guard lock(s->mu);
  ++s->step;
}

void trace_tensor(std::string_view name, int64_t layer, const float* data, int64_t rows,
                  int64_t cols) {
  TraceState* s = state();
  if (s == nullptr) return;
  std::lock_guard lock(s->mu);
  char file[32];
  std::snprintf(file, sizeof(file), "f%05d.bin", s->serial++);
  FILE* f = std::fopen((s->dir + "/" + file).c_str(), "wb");
  if (f == nullptr) return;
  std::fwrite(data, sizeof(float), static_cast<size_t>(rows * cols), f);
  std::fclose(f);
  std::fprintf(s->index, "%d %.*s %lld %lld %lld %s\n", s->step, static_cast<int>(name.size()),
               name.data(), static_cast<long long>(layer), static_cast<long long>(rows),
               static_cast<long long>(cols), file);
  std::fflush(s->index);
}

}  // namespace ferry::kernels
