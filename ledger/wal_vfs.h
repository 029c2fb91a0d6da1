// The SQLite VFS of ferry's writable ledger connections: the system's own VFS, but a WAL
// file's writes are gathered and reach the file as one pwrite when SQLite syncs it.
//
// Why: SQLite writes each WAL frame with two pwrites (its 24-byte header, then the page), so a
// ledger commit of one row (about ten pages) costs twenty system calls before its fdatasync;
// on a virtual machine where a system call costs microseconds that is ~45 us of CPU a commit
// (bench/README.md, issue 17). Gathered, the same bytes go in one call.
//
// Why it is safe: nothing else sees a frame before SQLite syncs the WAL. With synchronous=FULL
// (every writable ledger connection: Db::open) SQLite syncs the WAL at the end of every commit
// before it publishes the new frames in the wal-index (sqlite3WalFrames), and that sync writes
// the gathered bytes first; any read, size query, truncation, file control or close of the
// WAL by this connection writes them first too. A process that dies before the sync loses only
// frames of a transaction that had not committed, as it would without this VFS. Only WAL files
// are wrapped; the database and its -shm file are the system VFS's own objects.
//
// Thread-safety: registered once (any thread); a file belongs to one connection, which SQLite
// uses from one thread at a time.
#pragma once

#include <cstdint>

namespace ferry::ledger {

// The VFS's name for sqlite3_open_v2 (registered on first call; not the default VFS).
const char* wal_gathering_vfs();

// pwrite calls this VFS made to WAL files so far, and the xWrite calls SQLite made to them (for
// tests and benchmarks: a commit of n frames is 2n writes and one pwrite).
struct WalWriteCounts {
  int64_t sqlite_writes = 0;
  int64_t file_writes = 0;
};
WalWriteCounts wal_write_counts();

}  // namespace ferry::ledger
