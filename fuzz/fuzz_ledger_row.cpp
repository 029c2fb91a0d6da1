// Fuzzes the ledger's row encoding: what a request row holds (ids, tags with any bytes, facts,
// attempts, token counts, timestamps) goes through the real Ledger (pricing, the writer
// thread, the SQLite append and its hash chain) and `ferry ledger verify` must then find the
// file intact: every value read back hashes as it was written. Every row must become durable
// (nothing lost), and the canonical encoding itself must decode back to the values it
// encodes (two different rows never hash the same text).
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ledger/ledger.h"
#include "ledger/store.h"
#include "ledger/verify.h"
#include "ledger_values.h"

using namespace ferry;
using namespace ferry::ledger;
using ferry::fuzz::record;

namespace {

constexpr int kRowsPerFile = 64;

// Decodes canonical_values() text strictly; false when it is not exactly such a text.
bool decode_canonical(std::string_view text, std::vector<Value>& out) {
  auto read_int = [&](size_t& at, int64_t& v) {
    size_t start = at;
    if (at < text.size() && text[at] == '-') ++at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    if (at == start) return false;
    v = std::stoll(std::string(text.substr(start, at - start)));
    return true;
  };
  for (size_t at = 0; at < text.size();) {
    char tag = text[at++];
    if (tag == 'N') {
      out.emplace_back(std::monostate{});
    } else if (tag == 'I') {
      int64_t v = 0;
      if (!read_int(at, v)) return false;
      out.emplace_back(v);
    } else if (tag == 'T') {
      int64_t len = 0;
      if (!read_int(at, len) || len < 0 || at >= text.size() || text[at++] != ':' ||
          static_cast<uint64_t>(len) > text.size() - at) {
        return false;
      }
      out.emplace_back(std::string(text.substr(at, static_cast<size_t>(len))));
      at += static_cast<size_t>(len);
    } else {
      return false;
    }
    if (at >= text.size() || text[at++] != ';') return false;
  }
  return true;
}

void check_canonical(FuzzedDataProvider& in) {
  std::vector<Value> values;
  for (int n = in.ConsumeIntegralInRange(0, 6); n > 0; --n) {
    switch (in.ConsumeIntegralInRange(0, 2)) {
      case 0:
        values.emplace_back(std::monostate{});
        break;
      case 1:
        values.emplace_back(in.ConsumeIntegral<int64_t>());
        break;
      default:
        values.emplace_back(in.ConsumeRandomLengthString(64));
    }
  }
  std::vector<Value> decoded;
  if (!decode_canonical(canonical_values(values), decoded) || decoded != values) {
    __builtin_trap();
  }
}

// The ledger file, started afresh every kRowsPerFile inputs. The Ledger itself is opened for
// each input and closed after it, so that no allocation outlives an input (libFuzzer runs a
// leak check after every input whose allocations and frees do not balance).
const char* ledger_path() {
  static char path[64] = {0};
  if (path[0] == 0) {
    // In memory when there is a tmpfs: the ledger syncs every commit (synchronous=FULL).
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::snprintf(path, sizeof path, "%s/ferry-fuzz-ledger-%d.db", dir, static_cast<int>(getpid()));
  }
  return path;
}

void remove_ledger_files() {
  char name[80];
  for (const char* suffix : {"", "-wal", "-shm", "-rowlog.lock"}) {
    std::snprintf(name, sizeof name, "%s%s", ledger_path(), suffix);
    unlink(name);
  }
}

std::unique_ptr<Ledger> open_ledger() {
  static int rows = 0;
  if (rows == 0) std::atexit(remove_ledger_files);  // nothing left in /dev/shm after a run
  if (rows++ % kRowsPerFile == 0) remove_ledger_files();
  LedgerConfig config;
  config.path = ledger_path();
  config.reference_model = "priced";
  PriceCatalog prices;
  PriceEntry entry;
  entry.model = "priced";
  entry.input = *Money::parse("2.5");
  entry.cached_input = *Money::parse("1.25");
  entry.output = *Money::parse("10");
  entry.reasoning = *Money::parse("10");
  prices.add(entry);
  auto opened = Ledger::open(config, std::move(prices), {});
  if (!opened) __builtin_trap();
  return std::move(*opened);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  check_canonical(in);

  std::atomic<int> lost{0};
  auto durable = [&lost](const Status& st) {
    if (!st) lost.fetch_add(1);
  };
  constexpr int64_t kNow = int64_t{1'790'000'000} * 1'000'000;
  {
    std::unique_ptr<Ledger> ledger = open_ledger();
    std::string id = ledger->record(record(in, kNow), durable);
    if (in.ConsumeBool()) {
      Adjustment adj;
      adj.adjusts_id = id;
      adj.input = Money::from_micros(in.ConsumeIntegralInRange<int64_t>(-1'000'000, 1'000'000));
      adj.output = Money::from_micros(in.ConsumeIntegralInRange<int64_t>(-1'000'000, 1'000'000));
      adj.note = in.ConsumeRandomLengthString(32);
      ledger->adjust(std::move(adj), durable);
    }
  }  // closing drains the queue: every accepted row is written
  if (lost.load() != 0) __builtin_trap();  // a row was not written
  auto verified = verify_ledger(ledger_path());
  if (!verified || !verified->ok()) __builtin_trap();  // the chain or a total does not check
  return 0;
}
