// Fuzzes the SQLite ledger's row log below the Ledger: the binary codec of a row
// (ledger/journal.h) and the reader of a segment (RowLog::read_all), what ferry reads back after
// a crash, from a disk that may have damaged it. No SQLite and no thread, so it runs thousands
// of inputs a second where fuzz_ledger_row (the whole Ledger) runs tens.
// - decode_entry accepts only what encode_entry writes: bytes it decodes encode back to
//   themselves, so a damaged entry is refused, never read as a different row.
// - A row made from the input encodes, and decodes back to the same bytes; those bytes with
//   some overwritten are refused or read as what they now say.
// - A segment made of framed records (valid rows, payloads of any bytes, rows with a byte
//   changed), raw bytes and zeros is read without a crash. When it holds whole rows, then at
//   most one row cut short (a crash during the write) and zeros (a pre-sized segment's end),
//   read_all returns exactly the whole rows.
#include <fcntl.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "ledger/journal.h"
#include "ledger/row_log.h"
#include "ledger/store.h"
#include "ledger_values.h"

using namespace ferry;
using namespace ferry::ledger;

namespace {

Money money(FuzzedDataProvider& in) {
  return Money::from_micros(in.ConsumeIntegral<int64_t>());
}

Cost cost(FuzzedDataProvider& in) {
  Cost c;
  c.pricing = static_cast<Pricing>(in.ConsumeIntegralInRange(0, 2));
  c.price_version = in.ConsumeRandomLengthString(16);
  c.input = money(in);
  c.cached_input = money(in);
  c.output = money(in);
  c.reasoning = money(in);
  return c;
}

std::optional<Money> maybe_money(FuzzedDataProvider& in) {
  if (!in.ConsumeBool()) return std::nullopt;
  return money(in);
}

// A row with every field the codec writes set from the input.
LedgerEntry entry(FuzzedDataProvider& in) {
  LedgerEntry e;
  e.kind = in.ConsumeBool() ? EntryKind::kRequest : EntryKind::kAdjustment;
  e.record = fuzz::record(in, in.ConsumeIntegral<int64_t>() / 2);
  RequestRecord& r = e.record;
  r.id = in.ConsumeRandomLengthString(40);
  r.request_id = in.ConsumeRandomLengthString(40);
  r.usage_check = in.ConsumeRandomLengthString(32);
  r.constraint_mode = in.ConsumeRandomLengthString(12);
  r.schema_hash = in.ConsumeRandomLengthString(12);
  r.trimmed_tokens = in.ConsumeIntegral<int64_t>();
  r.cache = in.ConsumeRandomLengthString(8);
  r.cache_tokens = fuzz::all_tokens(in);
  r.reasoning_budget = in.ConsumeRandomLengthString(16);
  e.adjusts_id = in.ConsumeRandomLengthString(40);
  e.note = in.ConsumeRandomLengthString(32);
  e.cost = cost(in);
  for (size_t n = 0; n < r.attempts.size(); ++n) e.attempt_costs.push_back(cost(in));
  e.avoided = maybe_money(in);
  e.avoided_version = in.ConsumeRandomLengthString(16);
  e.trim_avoided = maybe_money(in);
  e.cache_avoided = maybe_money(in);
  for (int n = in.ConsumeIntegralInRange(0, 2); n > 0; --n) {
    BudgetCharge c;
    c.budget = in.ConsumeRandomLengthString(16);
    c.period_start_us = in.ConsumeIntegral<int64_t>();
    c.period_end_us = in.ConsumeIntegral<int64_t>();
    c.limit = money(in);
    c.scope = static_cast<BudgetScope>(in.ConsumeIntegralInRange(0, 2));
    c.match = in.ConsumeRandomLengthString(16);
    c.amount = money(in);
    c.from_lease = in.ConsumeBool();
    e.charges.push_back(std::move(c));
  }
  return e;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A row log record (ledger/row_log.h): "FRL1", the payload's length and CRC-32C, the payload.
std::string framed(std::string_view payload) {
  std::string out = "FRL1";
  put_u32(out, static_cast<uint32_t>(payload.size()));
  put_u32(out, crc32c(payload));
  out.append(payload);
  return out;
}

// Anything decode_entry accepts is what encode_entry writes for the row it read.
void check_decode(std::string_view bytes) {
  auto decoded = decode_entry(bytes);
  if (decoded && encode_entry(*decoded) != bytes) __builtin_trap();
}

// The directory of the segment (one per process, in memory when there is a tmpfs, removed at
// exit) and the ledger path whose row log it is.
std::string segment_dir() {
  const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(base) + "/ferry-fuzz-rowlog-" + std::to_string(getpid());
}

// The ledger's first segment (ledger/row_log.h names them so).
std::string segment_path() {
  return segment_dir() + "/ledger.db-rowlog.000000000001";
}

const std::string& db_path() {
  static const std::string path = [] {
    ::mkdir(segment_dir().c_str(), 0700);
    // Not through `path`: a static is destroyed before a handler registered while making it.
    std::atexit([] {
      ::unlink(segment_path().c_str());
      ::rmdir(segment_dir().c_str());
    });
    return segment_dir() + "/ledger.db";
  }();
  return path;
}

void write_segment(const std::string& bytes) {
  (void)db_path();  // makes the directory
  FILE* f = std::fopen(segment_path().c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    __builtin_trap();
  }
  std::fclose(f);
}

// Builds a segment from the input and reads it back.
void check_segment(FuzzedDataProvider& in) {
  std::string segment;
  std::vector<std::string> whole;  // the valid rows' encodings, in order
  // Whether the segment is still whole rows, a cut row and zeros, in that order: 0 whole rows
  // so far, 1 a row cut short was added, 2 zeros were added; -1 anything else.
  int shape = 0;
  // Whether the cut row holds the frame magic inside it. RowLog's check that a damaged record is
  // a crash's torn tail (no whole record after it) scans byte by byte, so a whole frame inside
  // the cut row's own payload makes it refuse the file (a known limit, session 35's note).
  bool cut_holds_magic = false;
  for (int chunks = 0; chunks < 12 && in.remaining_bytes() > 0; ++chunks) {
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0: {  // a whole row
        std::string bytes = encode_entry(entry(in));
        segment += framed(bytes);
        if (shape == 0) {
          whole.push_back(std::move(bytes));
        } else {
          shape = -1;
        }
        break;
      }
      case 1:  // a checksummed payload of any bytes
        segment += framed(in.ConsumeRandomLengthString(256));
        shape = -1;
        break;
      case 2: {  // a whole row with one byte changed
        std::string record = framed(encode_entry(entry(in)));
        const size_t at = in.ConsumeIntegralInRange<size_t>(0, record.size() - 1);
        record[at] = static_cast<char>(record[at] ^ in.ConsumeIntegralInRange(1, 255));
        segment += record;
        shape = -1;
        break;
      }
      case 3:  // raw bytes
        segment += in.ConsumeRandomLengthString(256);
        shape = -1;
        break;
      case 4:  // zeros
        segment.append(in.ConsumeIntegralInRange<size_t>(1, 1200), '\0');
        shape = shape >= 0 ? 2 : -1;
        break;
      default: {  // a row cut short
        std::string record = framed(encode_entry(entry(in)));
        // Cut before its last non-zero byte: a row cut only in its trailing zeros and followed
        // by zeros is that whole row, and is read as one.
        record.resize(in.ConsumeIntegralInRange<size_t>(1, record.find_last_not_of('\0')));
        cut_holds_magic = record.find("FRL1", 1) != std::string::npos;
        segment += record;
        shape = shape == 0 ? 1 : -1;
        break;
      }
    }
  }
  write_segment(segment);
  auto contents = RowLog::of_another_process(db_path())->read_all(false);
  if (contents) {
    for (const LedgerEntry& e : contents->entries) check_decode(encode_entry(e));
  }
  if (shape < 0 || (!contents && shape > 0 && cut_holds_magic)) return;
  if (!contents || contents->entries.size() != whole.size()) __builtin_trap();
  for (size_t i = 0; i < whole.size(); ++i) {
    if (encode_entry(contents->entries[i]) != whole[i]) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_decode(std::string_view(reinterpret_cast<const char*>(data), size));
  FuzzedDataProvider in(data, size);
  const std::string bytes = encode_entry(entry(in));
  auto back = decode_entry(bytes);
  if (!back || encode_entry(*back) != bytes) __builtin_trap();
  // The same bytes with up to 8 of them overwritten (a length, a count, an integer, a flag):
  // refused, or read as exactly what they now say.
  std::string damaged = bytes;
  const size_t at = in.ConsumeIntegralInRange<size_t>(0, damaged.size() - 1);
  const auto value = in.ConsumeIntegral<uint64_t>();
  std::memcpy(damaged.data() + at, &value, std::min<size_t>(8, damaged.size() - at));
  check_decode(damaged);
  check_segment(in);
  return 0;
}
