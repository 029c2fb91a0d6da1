// Tokenizer throughput: encode/count MB/s for cl100k_base and o200k_base on realistic and
// pathological text, and the time to count a ~2 KB chat prompt (OpenAI accounting and a Jinja
// chat template). Single thread. Run through bench/tokenizer_compare.sh, which measures
// OpenAI's tiktoken (npm) on the same files in the same run.
// Usage: tokenizer_bench REALISTIC.txt PATHOLOGICAL.txt CHAT.json TEMPLATE.jinja
// [BIG_PATHOLOGICAL.txt]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Median seconds of `reps` runs of fn (after one warm-up run).
template <typename Fn>
double median_seconds(int reps, Fn&& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Keeps the calling thread on one CPU, so that a fresh thread measured against it runs where
// the vocabulary already sits in cache (the figure isolates the per-thread memos).
void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s REALISTIC.txt PATHOLOGICAL.txt CHAT.json TEMPLATE.jinja\n",
                 argv[0]);
    return 2;
  }
  const std::string realistic = read_file(argv[1]);
  const std::string pathological = read_file(argv[2]);
  const std::string chat_text = read_file(argv[3]);
  const std::string template_source = read_file(argv[4]);
  const auto chat = nlohmann::ordered_json::parse(chat_text);
  const int cpu = sched_getcpu();
  pin_to(cpu);
  using ferry::tokenizer::load_tokenizer;

  for (const char* name : {"cl100k_base", "o200k_base"}) {
    const auto load_start = Clock::now();
    auto tok = load_tokenizer(name);
    const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
    if (!tok) {
      std::fprintf(stderr, "%s\n", tok.error().message.c_str());
      return 1;
    }
    std::size_t n_real = 0, n_path = 0;
    const double real_s = median_seconds(5, [&] { n_real = (*tok)->count(realistic); });
    // The repeated runs find the per-thread memos (lookups, merged pieces) warm with this very
    // text; one pass on a fresh thread starts with them empty (median of 3 such threads).
    const double fresh_s = median_seconds(3, [&] {
      std::thread([&] {
        pin_to(cpu);
        (*tok)->count(realistic);
      }).join();
    });
    const double path_s = median_seconds(5, [&] { n_path = (*tok)->count(pathological); });
    std::vector<ferry::tokenizer::TokenId> ids;
    const double enc_s = median_seconds(5, [&] {
      ids.clear();
      (*tok)->encode(realistic, ids);
    });
    std::printf(
        "ferry %-11s load %6.1f ms | realistic %7.1f MB/s count (%7.1f MB/s encode, %7.1f MB/s on "
        "a fresh "
        "thread, %zu tokens) | pathological %7.1f MB/s (%zu tokens)\n",
        name, load_s * 1e3, realistic.size() / real_s / 1e6, realistic.size() / enc_s / 1e6,
        realistic.size() / fresh_s / 1e6, n_real, pathological.size() / path_s / 1e6, n_path);

    auto openai = ferry::tokenizer::ChatFormatter::create(*tok);
    auto jinja = ferry::tokenizer::ChatFormatter::create(*tok, template_source);
    if (!openai || !jinja) {
      std::fprintf(stderr, "chat formatter failed\n");
      return 1;
    }
    if (argc > 5) {
      const std::string big = read_file(argv[5]);
      std::size_t n_big = 0;
      const double big_s = median_seconds(3, [&] { n_big = (*tok)->count(big); });
      std::printf("ferry %-11s pathological %zu bytes: %7.1f MB/s (%zu tokens)\n", name, big.size(),
                  big.size() / big_s / 1e6, n_big);
    }
    std::size_t c1 = 0, c2 = 0;
    const int iters = 2000;
    const double openai_s = median_seconds(5,
                                           [&] {
                                             for (int i = 0; i < iters; ++i)
                                               c1 = *(*openai)->count(chat);
                                           }) /
                            iters;
    const double jinja_s = median_seconds(5,
                                          [&] {
                                            for (int i = 0; i < iters; ++i)
                                              c2 = *(*jinja)->count(chat);
                                          }) /
                           iters;
    std::printf(
        "ferry %-11s chat (%zu bytes of content): %.1f us OpenAI accounting (%zu tokens), "
        "%.1f us with the Jinja template (%zu tokens)\n",
        name, chat_text.size(), openai_s * 1e6, c1, jinja_s * 1e6, c2);
  }
  return 0;
}
