#include "ledger/row_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "ledger/journal.h"   // encode_entry_to, decode_entry
#include "ledger/pg_store.h"  // is_pg_url
#include "ledger/sqlite_store.h"

namespace ferry::ledger {

namespace {

// ---- CRC-32C (Castagnoli), with SSE4.2's instruction where the CPU has it ------------------

constexpr uint32_t kCrcPoly = 0x82F63B78;  // reflected

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ kCrcPoly : c >> 1;
    table[i] = c;
  }
  return table;
}

uint32_t crc32c_soft(uint32_t crc, const unsigned char* p, size_t n) {
  static const std::array<uint32_t, 256> table = crc_table();
  while (n-- > 0) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const unsigned char* p,
                                                     size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v = 0;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

// ---- the record's frame --------------------------------------------------------------------

constexpr char kMagic[4] = {'F', 'R', 'L', '1'};
// A record's payload is one row; anything larger is not a record of ours.
constexpr uint32_t kMaxPayload = 64u << 20;

void put_u32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// The record at `pos` when it is whole and its checksum matches: its payload.
std::optional<std::string_view> record_at(std::string_view data, size_t pos) {
  if (data.size() - pos < kRowLogHeaderBytes || std::memcmp(data.data() + pos, kMagic, 4) != 0) {
    return std::nullopt;
  }
  uint32_t len = get_u32(data.data() + pos + 4);
  if (len > kMaxPayload || data.size() - pos - kRowLogHeaderBytes < len) return std::nullopt;
  std::string_view payload = data.substr(pos + kRowLogHeaderBytes, len);
  if (crc32c(payload) != get_u32(data.data() + pos + 8)) return std::nullopt;
  return payload;
}

// Whether the record at `pos` (its header, and its payload as far as the header's length says)
// covers a 512-byte block of all zeros: a sector a crash kept from the disk. A damaged byte
// never makes one.
bool torn_at(std::string_view data, size_t pos) {
  constexpr size_t kSector = 512;
  size_t end = pos + kRowLogHeaderBytes;
  if (data.size() - pos >= kRowLogHeaderBytes && std::memcmp(data.data() + pos, kMagic, 4) == 0) {
    const uint32_t len = get_u32(data.data() + pos + 4);
    if (len <= kMaxPayload) end += len;
  }
  end = std::min(end, data.size());
  for (size_t at = pos / kSector * kSector; at < end; at += kSector) {
    if (data.substr(at, kSector).find_first_not_of('\0') == std::string_view::npos) return true;
  }
  return false;
}

Error io_error(const std::string& what, const std::string& path) {
  return Error::make(ErrorCode::kUnavailable,
                     "ledger row log " + path + ": " + what + ": " + std::strerror(errno));
}

std::string registry_key(const std::string& db_path) {
  std::error_code ec;
  auto canonical = std::filesystem::weakly_canonical(db_path, ec);
  return ec ? db_path : canonical.string();
}

struct Owners {
  std::mutex mu;
  std::map<std::string, std::function<Status()>> by_path;
};

Owners& owners() {
  static Owners o;
  return o;
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  uint32_t crc = 0xFFFFFFFFu;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  crc = hw ? crc32c_hw(crc, p, bytes.size()) : crc32c_soft(crc, p, bytes.size());
#else
  crc = crc32c_soft(crc, p, bytes.size());
#endif
  return ~crc;
}

// ---- RowLog ----------------------------------------------------------------------------------

Result<std::unique_ptr<RowLog>> RowLog::open(const std::string& db_path) {
  std::unique_ptr<RowLog> log(new RowLog());
  log->db_path_ = db_path;
  std::string lock_path = db_path + "-rowlog.lock";
  log->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (log->lock_fd_ < 0) return io_error("cannot open its lock file", lock_path);
  if (::flock(log->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Error::make(ErrorCode::kUnavailable,
                         "ledger row log " + lock_path + " is held by another process", "",
                         "row_log_locked");
    }
    return io_error("cannot lock", lock_path);
  }
  // A spare a crash left may be partly written: never used.
  (void)::unlink(log->spare_path().c_str());
  return log;
}

RowLog::~RowLog() {
  if (fd_ >= 0) ::close(fd_);
  if (lock_fd_ >= 0) {
    (void)::unlink(spare_path().c_str());
    ::close(lock_fd_);  // releases the flock
  }
}

std::string RowLog::segment_path(uint64_t n) const {
  std::string digits = std::to_string(n);
  if (digits.size() < 12) digits.insert(0, 12 - digits.size(), '0');
  return db_path_ + "-rowlog." + digits;
}

std::vector<uint64_t> RowLog::segments() const {
  std::vector<uint64_t> out;
  std::filesystem::path db(db_path_);
  std::filesystem::path dir = db.has_parent_path() ? db.parent_path() : ".";
  const std::string prefix = db.filename().string() + "-rowlog.";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string_view digits = std::string_view(name).substr(prefix.size());
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;  // the lock file
    }
    out.push_back(std::stoull(std::string(digits)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<RowLog> RowLog::of_another_process(const std::string& db_path) {
  std::unique_ptr<RowLog> log(new RowLog());
  log->db_path_ = db_path;
  return log;
}

Result<RowLog::Contents> RowLog::read_all(bool live) const {
  Contents contents;
  for (uint64_t n : segments()) {
    contents.last_segment = n;
    const std::string path = segment_path(n);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && live && errno == ENOENT) continue;  // applied and removed by its owner
    if (fd < 0) return io_error("cannot open", path);
    std::string data;
    char buf[1 << 16];
    for (;;) {
      ssize_t got = ::read(fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        Error error = io_error("cannot read", path);
        ::close(fd);
        return error;
      }
      if (got == 0) break;
      data.append(buf, static_cast<size_t>(got));
    }
    ::close(fd);
    size_t pos = 0;
    while (pos < data.size()) {
      auto payload = record_at(data, pos);
      if (!payload && live) break;  // the record the owner is writing
      if (!payload) {
        // Only zeros from here: a pre-sized segment's end, where its records stop.
        const size_t last = data.find_last_not_of('\0');
        const size_t used = last == std::string::npos ? 0 : last + 1;
        if (used <= pos) break;
        // A whole record further on means this one was damaged in place, not cut by a crash;
        // unless a sector of it is zeros: the batch was cut by a crash while the kernel wrote
        // its pages back (into a pre-sized segment, in any order), and none of its rows was
        // reported durable.
        const bool torn = torn_at(data, pos);
        for (size_t next = pos + 1; next < used && !torn; ++next) {
          if (data[next] == kMagic[0] && record_at(data, next)) {
            return Error::make(
                ErrorCode::kUnavailable,
                "ledger row log " + path + ": the record at offset " + std::to_string(pos) +
                    " is damaged and a whole record follows at offset " + std::to_string(next) +
                    ": the file was damaged, not cut by a crash. Its rows are not yet in the "
                    "ledger; move the file aside to start without them (and keep it)");
          }
        }
        contents.notes.push_back("ledger row log " + path + ": dropped " +
                                 std::to_string(used - pos) + " bytes at its end from offset " +
                                 std::to_string(pos) +
                                 " (an incomplete record: a write cut by a crash, whose rows "
                                 "were never reported durable)");
        break;
      }
      auto entry = decode_entry(*payload);
      if (!entry) {
        return Error::make(ErrorCode::kUnavailable,
                           "ledger row log " + path + ": the record at offset " +
                               std::to_string(pos) + " has a valid checksum but cannot be read (" +
                               entry.error().message + "; written by another ferry version?)");
      }
      contents.entries.push_back(std::move(*entry));
      pos += kRowLogHeaderBytes + payload->size();
    }
  }
  return contents;
}

Status RowLog::start_segment(uint64_t after) {
  const uint64_t n = after + 1;
  const std::string path = segment_path(n);
  bool spare = false;
  {
    std::lock_guard lock(spare_mu_);
    if (spare_ == Spare::kReady) {
      spare_ = Spare::kNone;
      spare = ::rename(spare_path().c_str(), path.c_str()) == 0;
    }
  }
  // A pre-sized segment is written around the page cache (O_DIRECT) where the file system
  // allows it, in whole blocks.
  int fd = spare ? ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_DIRECT) : -1;
  const bool direct = fd >= 0;
  if (spare && !direct) fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (!spare) fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", path);
  // The new name must survive a crash before a row written to it is reported durable.
  std::filesystem::path db(db_path_);
  std::string dir = db.has_parent_path() ? db.parent_path().string() : ".";
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0 || ::fsync(dir_fd) != 0) {
    Error error = io_error("cannot sync the directory of", path);
    if (dir_fd >= 0) ::close(dir_fd);
    ::close(fd);
    return error;
  }
  ::close(dir_fd);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  segment_ = n;
  size_ = 0;
  presized_ = spare;
  direct_ = direct;
  tail_.clear();
  return {};
}

bool RowLog::spare_ready() const {
  std::lock_guard lock(spare_mu_);
  return spare_ == Spare::kReady;
}

bool RowLog::wants_spare() const {
  std::lock_guard lock(spare_mu_);
  return spare_ == Spare::kNone && (presized_ || size_ >= kRowLogSpareAfterBytes);
}

Status RowLog::prepare_spare() {
  {
    std::lock_guard lock(spare_mu_);
    if (spare_ != Spare::kNone) return {};
    spare_ = Spare::kPreparing;
  }
  const std::string path = spare_path();
  Status status;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    status = io_error("cannot create", path);
  } else {
    const std::string zeros(1 << 20, '\0');
    for (int64_t at = 0; status && at < kRowLogSegmentBytes;) {
      ssize_t n = ::pwrite(fd, zeros.data(),
                           static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(zeros.size()),
                                                                 kRowLogSegmentBytes - at)),
                           static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) status = io_error("cannot write", path);
      at += n > 0 ? n : 0;
    }
    // The zeros and the size are on the disk before a record is reported durable in them.
    if (status && ::fdatasync(fd) != 0) status = io_error("fdatasync failed", path);
    ::close(fd);
  }
  if (!status) (void)::unlink(path.c_str());
  std::lock_guard lock(spare_mu_);
  spare_ = status ? Spare::kReady : Spare::kFailed;
  return status;
}

void RowLog::FreeBlock::operator()(char* p) const {
  std::free(p);
}

Status RowLog::append(const std::vector<LedgerEntry*>& entries) {
  buffer_.clear();
  // Direct writes start at the block where the segment ends: its bytes there come first.
  const size_t lead = direct_ ? tail_.size() : 0;
  buffer_.append(tail_.data(), lead);
  for (const LedgerEntry* e : entries) {
    // The payload is encoded in place after its header, whose length and checksum follow.
    const size_t header = buffer_.size();
    buffer_.append(kRowLogHeaderBytes, '\0');
    encode_entry_to(*e, buffer_);
    const size_t length = buffer_.size() - header - kRowLogHeaderBytes;
    const uint32_t crc = crc32c(std::string_view(buffer_).substr(header + kRowLogHeaderBytes));
    std::memcpy(buffer_.data() + header, kMagic, 4);
    put_u32(buffer_.data() + header + 4, static_cast<uint32_t>(length));
    put_u32(buffer_.data() + header + 8, crc);
  }
  const std::string path = segment_path(segment_);
  auto fail = [&](const char* what) {
    Error error = io_error(what, path);
    // Nothing of the batch counts: cut back, so a retry writes it whole at the same place
    // (a pre-sized segment loses its zeros and grows from here).
    (void)::ftruncate(fd_, size_);
    presized_ = false;
    return error;
  };
  // What is written, from where: the records at the end, or (direct) whole blocks from the
  // block the segment ends in, zeros after the records. The bytes before the end are written
  // again unchanged, so a crash that tears that write leaves them as they were.
  const char* data = buffer_.data();
  size_t bytes = buffer_.size();
  const auto at = static_cast<off_t>(size_ - static_cast<int64_t>(lead));
  if (direct_) {
    bytes = (bytes + kDirectBlock - 1) / kDirectBlock * kDirectBlock;
    if (block_capacity_ < bytes) {
      void* p = nullptr;
      if (::posix_memalign(&p, kDirectBlock, bytes) != 0) return fail("out of memory");
      block_.reset(static_cast<char*>(p));
      block_capacity_ = bytes;
    }
    std::memcpy(block_.get(), buffer_.data(), buffer_.size());
    std::memset(block_.get() + buffer_.size(), 0, bytes - buffer_.size());
    data = block_.get();
  }
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pwrite(fd_, data + done, bytes - done, at + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write failed");
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0) return fail("fdatasync failed");
  size_ += static_cast<int64_t>(buffer_.size() - lead);
  if (direct_) {
    tail_.assign(buffer_, buffer_.size() - static_cast<size_t>(size_ % kDirectBlock));
  }
  return {};
}

void RowLog::remove_before(uint64_t segment) const {
  for (uint64_t n : segments()) {
    if (n < segment) (void)::unlink(segment_path(n).c_str());
  }
}

// ---- applying -----------------------------------------------------------------------------

Result<int64_t> apply_log_rows(Store& store, std::vector<LedgerEntry>& entries, size_t max_batch) {
  int64_t applied = 0;
  std::vector<LedgerEntry*> batch;
  for (size_t begin = 0; begin < entries.size(); begin += max_batch) {
    size_t end = std::min(entries.size(), begin + max_batch);
    batch.clear();
    for (size_t i = begin; i < end; ++i) batch.push_back(&entries[i]);
    auto result = store.append(batch);
    if (!result) return result.error();
    // A refused row is one already there (its id: applied before a crash cut the segment's
    // removal); the chain is unchanged by it.
    for (const Status& st : *result) applied += st ? 1 : 0;
  }
  return applied;
}

void register_row_log_owner(const std::string& db_path, std::function<Status()> apply_now) {
  Owners& o = owners();
  std::lock_guard lock(o.mu);
  o.by_path[registry_key(db_path)] = std::move(apply_now);
}

void unregister_row_log_owner(const std::string& db_path) {
  Owners& o = owners();
  std::lock_guard lock(o.mu);  // waits for a catch-up running in the owner
  o.by_path.erase(registry_key(db_path));
}

bool row_log_owned_here(const std::string& db_path) {
  Owners& o = owners();
  std::lock_guard lock(o.mu);
  return o.by_path.count(registry_key(db_path)) != 0;
}

Status catch_up_row_log(const std::string& db_path) {
  if (db_path.empty() || is_pg_url(db_path)) return {};
  {
    Owners& o = owners();
    std::lock_guard lock(o.mu);
    auto it = o.by_path.find(registry_key(db_path));
    if (it != o.by_path.end()) return it->second();
  }
  struct stat st {};
  if (::stat((db_path + "-rowlog.lock").c_str(), &st) != 0) return {};  // never had a log
  auto log = RowLog::open(db_path);
  const bool owned_elsewhere = !log && log.error().type_code == "row_log_locked";
  // Not ours to take part in (a reader without write access to the directory): read what
  // SQLite has.
  if (!log && !owned_elsewhere) return {};
  std::unique_ptr<RowLog> reader =
      owned_elsewhere ? RowLog::of_another_process(db_path) : std::move(*log);
  auto contents = reader->read_all(owned_elsewhere);
  if (!contents) return contents.error();
  if (contents->last_segment == 0) return {};
  if (!contents->entries.empty()) {
    auto store = SqliteStore::open(db_path, "");
    if (!store) {
      return Error::make(ErrorCode::kUnavailable,
                         "ledger " + db_path + ": its row log holds " +
                             std::to_string(contents->entries.size()) +
                             " rows not yet in the file, and they cannot be applied here: " +
                             store.error().message);
    }
    auto applied = apply_log_rows(*store, contents->entries, 4096);
    if (!applied) return applied.error();
  }
  if (!owned_elsewhere) reader->remove_before(contents->last_segment + 1);
  return {};
}

Result<Db> ledger_db_open(const std::string& db_path, bool read_only) {
  if (Status st = catch_up_row_log(db_path); !st) return st.error();
  return Db::open(db_path, read_only);
}

}  // namespace ferry::ledger
