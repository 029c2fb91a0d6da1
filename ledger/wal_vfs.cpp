#include "ledger/wal_vfs.h"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>

namespace ferry::ledger {

namespace {

std::atomic<int64_t> g_sqlite_writes{0};
std::atomic<int64_t> g_file_writes{0};

sqlite3_vfs* g_real = nullptr;  // the system's default VFS, wrapped
sqlite3_vfs g_vfs;              // ours: a copy of it with xOpen (and the forwarders) replaced

// Gathered bytes beyond this are written before more are taken (a large transaction's spill).
constexpr size_t kMaxPending = 4u << 20;
// A buffer that grew past this is given back after it is written.
constexpr size_t kKeepCapacity = 1u << 20;

// A WAL file: ours in front, the system VFS's file object behind it in the same allocation.
struct WalFile {
  sqlite3_file base;  // pMethods = &kWalMethods
  sqlite3_file* real;
  std::string* pending;  // gathered bytes not yet written (null until the first write)
  sqlite3_int64 pending_at;
};

constexpr size_t kRealOffset = (sizeof(WalFile) + 15) & ~size_t{15};

WalFile* wal(sqlite3_file* f) {
  return reinterpret_cast<WalFile*>(f);
}
sqlite3_file* real(sqlite3_file* f) {
  return wal(f)->real;
}

// The most one write to the system VFS may carry: its unix write takes the size modulo
// 128 KiB (`nBuf &= 0x1ffff` in seekAndWriteFd), so a larger write can come out short (a
// remainder that is a multiple of 128 KiB writes nothing, which SQLite reports as a full disk).
constexpr size_t kMaxWrite = 0x1f000;

// Writes what is gathered: one call for a commit's frames (each call at most kMaxWrite).
int flush(WalFile* w) {
  if (w->pending == nullptr || w->pending->empty()) return SQLITE_OK;
  int rc = SQLITE_OK;
  for (size_t done = 0; done < w->pending->size() && rc == SQLITE_OK; done += kMaxWrite) {
    const size_t n = std::min(kMaxWrite, w->pending->size() - done);
    rc = w->real->pMethods->xWrite(w->real, w->pending->data() + done, static_cast<int>(n),
                                   w->pending_at + static_cast<sqlite3_int64>(done));
    g_file_writes.fetch_add(1, std::memory_order_relaxed);
  }
  w->pending->clear();
  if (w->pending->capacity() > kKeepCapacity) std::string().swap(*w->pending);
  return rc;
}

int wal_close(sqlite3_file* f) {
  WalFile* w = wal(f);
  int flushed = flush(w);
  int rc = w->real->pMethods->xClose(w->real);
  delete w->pending;
  w->pending = nullptr;
  return flushed != SQLITE_OK ? flushed : rc;
}

int wal_read(sqlite3_file* f, void* out, int amount, sqlite3_int64 offset) {
  if (int rc = flush(wal(f)); rc != SQLITE_OK) return rc;
  return real(f)->pMethods->xRead(real(f), out, amount, offset);
}

int wal_write(sqlite3_file* f, const void* data, int amount, sqlite3_int64 offset) {
  g_sqlite_writes.fetch_add(1, std::memory_order_relaxed);
  WalFile* w = wal(f);
  if (w->pending == nullptr) w->pending = new std::string();
  std::string& pending = *w->pending;
  const bool follows = !pending.empty() &&
                       offset == w->pending_at + static_cast<sqlite3_int64>(pending.size()) &&
                       pending.size() + static_cast<size_t>(amount) <= kMaxPending;
  if (!follows) {
    // Elsewhere in the file (a rewritten frame, the header of a restarted WAL): what is
    // gathered goes first, in order.
    if (int rc = flush(w); rc != SQLITE_OK) return rc;
    w->pending_at = offset;
  }
  pending.append(static_cast<const char*>(data), static_cast<size_t>(amount));
  return SQLITE_OK;
}

int wal_truncate(sqlite3_file* f, sqlite3_int64 size) {
  if (int rc = flush(wal(f)); rc != SQLITE_OK) return rc;
  return real(f)->pMethods->xTruncate(real(f), size);
}

int wal_sync(sqlite3_file* f, int flags) {
  if (int rc = flush(wal(f)); rc != SQLITE_OK) return rc;
  return real(f)->pMethods->xSync(real(f), flags);
}

int wal_file_size(sqlite3_file* f, sqlite3_int64* size) {
  if (int rc = flush(wal(f)); rc != SQLITE_OK) return rc;
  return real(f)->pMethods->xFileSize(real(f), size);
}

int wal_lock(sqlite3_file* f, int level) {
  return real(f)->pMethods->xLock(real(f), level);
}
int wal_unlock(sqlite3_file* f, int level) {
  return real(f)->pMethods->xUnlock(real(f), level);
}
int wal_check_reserved(sqlite3_file* f, int* out) {
  return real(f)->pMethods->xCheckReservedLock(real(f), out);
}

int wal_file_control(sqlite3_file* f, int op, void* arg) {
  if (int rc = flush(wal(f)); rc != SQLITE_OK) return rc;
  return real(f)->pMethods->xFileControl(real(f), op, arg);
}

int wal_sector_size(sqlite3_file* f) {
  return real(f)->pMethods->xSectorSize(real(f));
}
int wal_device_characteristics(sqlite3_file* f) {
  return real(f)->pMethods->xDeviceCharacteristics(real(f));
}

// Shared memory and memory mapping: the system VFS's (SQLite uses neither on a WAL file).
int wal_shm_map(sqlite3_file* f, int page, int size, int extend, void volatile** out) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  return m->iVersion >= 2 && m->xShmMap != nullptr ? m->xShmMap(real(f), page, size, extend, out)
                                                   : SQLITE_IOERR;
}
int wal_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  return m->iVersion >= 2 && m->xShmLock != nullptr ? m->xShmLock(real(f), offset, n, flags)
                                                    : SQLITE_IOERR;
}
void wal_shm_barrier(sqlite3_file* f) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  if (m->iVersion >= 2 && m->xShmBarrier != nullptr) m->xShmBarrier(real(f));
}
int wal_shm_unmap(sqlite3_file* f, int delete_flag) {
  const sqlite3_io_methods* m = real(f)->pMethods;
  return m->iVersion >= 2 && m->xShmUnmap != nullptr ? m->xShmUnmap(real(f), delete_flag)
                                                     : SQLITE_OK;
}
int wal_fetch(sqlite3_file* f, sqlite3_int64, int, void** out) {
  *out = nullptr;  // no mapping: SQLite reads instead
  if (int rc = flush(wal(f)); rc != SQLITE_OK) return rc;
  return SQLITE_OK;
}
int wal_unfetch(sqlite3_file*, sqlite3_int64, void*) {
  return SQLITE_OK;
}

const sqlite3_io_methods kWalMethods = {
    .iVersion = 3,
    .xClose = wal_close,
    .xRead = wal_read,
    .xWrite = wal_write,
    .xTruncate = wal_truncate,
    .xSync = wal_sync,
    .xFileSize = wal_file_size,
    .xLock = wal_lock,
    .xUnlock = wal_unlock,
    .xCheckReservedLock = wal_check_reserved,
    .xFileControl = wal_file_control,
    .xSectorSize = wal_sector_size,
    .xDeviceCharacteristics = wal_device_characteristics,
    .xShmMap = wal_shm_map,
    .xShmLock = wal_shm_lock,
    .xShmBarrier = wal_shm_barrier,
    .xShmUnmap = wal_shm_unmap,
    .xFetch = wal_fetch,
    .xUnfetch = wal_unfetch,
};

int vfs_open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags, int* out_flags) {
  if ((flags & SQLITE_OPEN_WAL) == 0) {
    // Not a WAL: the system VFS's own file object, in the space SQLite gave us.
    return g_real->xOpen(g_real, name, f, flags, out_flags);
  }
  WalFile* w = wal(f);
  w->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(f) + kRealOffset);
  w->pending = nullptr;
  w->pending_at = 0;
  w->real->pMethods = nullptr;
  int rc = g_real->xOpen(g_real, name, w->real, flags, out_flags);
  if (rc != SQLITE_OK) {
    // SQLite closes what has methods; the system VFS cleaned up after itself.
    if (w->real->pMethods != nullptr) w->real->pMethods->xClose(w->real);
    f->pMethods = nullptr;
    return rc;
  }
  f->pMethods = &kWalMethods;
  return SQLITE_OK;
}

// The rest forward to the system VFS with its own object.
int vfs_delete(sqlite3_vfs*, const char* name, int sync_dir) {
  return g_real->xDelete(g_real, name, sync_dir);
}
int vfs_access(sqlite3_vfs*, const char* name, int flags, int* out) {
  return g_real->xAccess(g_real, name, flags, out);
}
int vfs_full_pathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return g_real->xFullPathname(g_real, name, n, out);
}
void* vfs_dl_open(sqlite3_vfs*, const char* name) {
  return g_real->xDlOpen(g_real, name);
}
void vfs_dl_error(sqlite3_vfs*, int n, char* out) {
  g_real->xDlError(g_real, n, out);
}
void (*vfs_dl_sym(sqlite3_vfs*, void* handle, const char* symbol))(void) {
  return g_real->xDlSym(g_real, handle, symbol);
}
void vfs_dl_close(sqlite3_vfs*, void* handle) {
  g_real->xDlClose(g_real, handle);
}
int vfs_randomness(sqlite3_vfs*, int n, char* out) {
  return g_real->xRandomness(g_real, n, out);
}
int vfs_sleep(sqlite3_vfs*, int micros) {
  return g_real->xSleep(g_real, micros);
}
int vfs_current_time(sqlite3_vfs*, double* out) {
  return g_real->xCurrentTime(g_real, out);
}
int vfs_last_error(sqlite3_vfs*, int n, char* out) {
  return g_real->xGetLastError(g_real, n, out);
}
int vfs_current_time_int64(sqlite3_vfs*, sqlite3_int64* out) {
  return g_real->xCurrentTimeInt64(g_real, out);
}

}  // namespace

const char* wal_gathering_vfs() {
  static std::once_flag once;
  static const char* name = nullptr;
  std::call_once(once, [] {
    g_real = sqlite3_vfs_find(nullptr);
    if (g_real == nullptr || g_real->iVersion < 2) return;  // then the default VFS is used
    std::memset(&g_vfs, 0, sizeof g_vfs);
    g_vfs.iVersion = 2;  // no system-call overrides
    g_vfs.szOsFile = static_cast<int>(kRealOffset) + g_real->szOsFile;
    g_vfs.mxPathname = g_real->mxPathname;
    g_vfs.zName = "ferry-wal";
    g_vfs.xOpen = vfs_open;
    g_vfs.xDelete = vfs_delete;
    g_vfs.xAccess = vfs_access;
    g_vfs.xFullPathname = vfs_full_pathname;
    g_vfs.xDlOpen = vfs_dl_open;
    g_vfs.xDlError = vfs_dl_error;
    g_vfs.xDlSym = vfs_dl_sym;
    g_vfs.xDlClose = vfs_dl_close;
    g_vfs.xRandomness = vfs_randomness;
    g_vfs.xSleep = vfs_sleep;
    g_vfs.xCurrentTime = vfs_current_time;
    g_vfs.xGetLastError = vfs_last_error;
    g_vfs.xCurrentTimeInt64 = vfs_current_time_int64;
    if (sqlite3_vfs_register(&g_vfs, 0) == SQLITE_OK) name = g_vfs.zName;
  });
  return name;
}

WalWriteCounts wal_write_counts() {
  return {g_sqlite_writes.load(), g_file_writes.load()};
}

}  // namespace ferry::ledger
