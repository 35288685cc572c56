// The replica's data directory: an embedded RocksDB holding the cell identity, the view, the
// newest snapshot of the state machine and the log entries after it (DESIGN.md §5).
//
// What survives a restart is exactly what load() returns: the snapshot is the base, the log is
// the ops after it, in order, with no gap. Two writes keep it so:
//   - write_snapshot(op) stores one snapshot: its chunks first, in a table file taken in whole
//     under keys nothing names yet, then one atomic batch that names them and drops every other
//     snapshot and every log entry <= op, so a crash leaves either the old base or the new one;
//   - write(StorageBatch) replaces a suffix of the log and/or the view (group commit), and is
//     refused if it would leave a gap after the stored log or rewrite ops under the snapshot.
// Snapshots carry their own CRC-32C, per 1 MiB chunk and whole, on top of RocksDB's block
// checksums: a snapshot that fails either is refused at load (reported, not loaded), because a
// replica that starts from a damaged base would replicate the damage: it must recover from its
// peers instead.
//
// Every error names the data directory: "data directory <path>: <what>: <reason>".
// A write that fails (a full disk, say) is atomic like any other: the previous state stays
// intact, and the write either never happened or, if its record reached the WAL before the
// failure, takes effect when the database is next opened. The next write reopens the database
// first, so writing succeeds again once space is freed.
// Not thread-safe: callers serialize every call (RocksDB is, but the extent kept in memory and
// the reopening after a failed write are not).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/types.h"
#include "shell/result.h"

namespace rocksdb {
class DB;
class WriteBatch;
struct WriteOptions;
}  // namespace rocksdb

namespace voltlock {

namespace storage_records {
struct SnapshotManifest;
}  // namespace storage_records

// Which replica of which cell a data directory belongs to. Written when the directory is created
// and checked on every open, so a replica never starts from another replica's (or cell's) state.
struct CellIdentity {
    uint32_t cluster_id = 0;
    uint8_t replica = 0;
    uint8_t replica_count = 0;

    bool operator==(const CellIdentity&) const = default;
};

// A batch of changes written at once (group commit): later calls apply on top of earlier ones.
class StorageBatch {
public:
    // The log after op `after` becomes exactly `entries` (ops after+1 ...): anything past them is
    // removed. Appending at the end is the cheap, common case.
    void replace_log_after(Op after, std::vector<Entry> entries);
    void set_view(View view, View last_normal_view);
    // Durability snapshot: the log and view stored now are everything the replica acknowledged
    // (a graceful stop, PersistStopped), or no longer are (the restart that read them).
    void set_clean_stop(bool clean_stop) { clean_stop_ = clean_stop; }
    bool empty() const { return log_replacements_.empty() && !views_ && !clean_stop_; }

private:
    friend class Storage;
    struct LogReplacement {
        Op after = 0;
        std::vector<Entry> entries;
    };
    struct Views {
        View view = 0;
        View last_normal_view = 0;
    };
    std::vector<LogReplacement> log_replacements_;
    std::optional<Views> views_;
    std::optional<bool> clean_stop_;
};

struct StoredState {
    bool initialized = false;           // false: a brand-new data directory (identity just written)
    std::optional<Op> snapshot_op;      // the newest snapshot that passed its checksums
    Bytes snapshot;                     // its bytes (opaque: the core's format)
    std::optional<std::string> snapshot_refused;  // the newest snapshot failed its checksums: the
                                                  // line to log. The log is then empty: no base.
    std::vector<Entry> log;             // entries after snapshot_op (ops snapshot_op+1, ...), or
                                        // from op 1 without a snapshot; contiguous
    View view = 0;
    View last_normal_view = 0;
    bool view_stored = false;           // a view was written: the replica has held the cell's state
    bool clean_stop = false;            // set_clean_stop(true) was the last word
    // A new directory, or the identity alone: its replica waited to recover and stopped before
    // it held the cell's state (it records its view once it does).
    bool holds_nothing() const
    {
        return !initialized ||
               (!snapshot_op && !snapshot_refused && log.empty() && !view_stored && !clean_stop);
    }
};

class Storage {
public:
    // Opens (creates if absent) the RocksDB in `dir`; checks the cell identity, or writes it into
    // a new directory. Fails on a path that is not a usable directory, a damaged CURRENT or
    // MANIFEST, or another cell's or replica's directory.
    static Result<std::unique_ptr<Storage>> open(const std::string& dir,
                                                 const CellIdentity& identity);
    ~Storage();
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    // Everything stored. A snapshot that fails its checksums is not an error (snapshot_refused);
    // a missing or garbled log entry after the snapshot is.
    Result<StoredState> load() const;
    // Stores the snapshot reflecting ops 1..op, replacing the stored one and dropping the log
    // entries it covers (all of them if it is older than the stored one); synced. Its chunks go
    // into a table file of their own, written beside the database and taken into it whole, so
    // a write() from another thread meanwhile never waits for them; the snapshot replaces the
    // stored one only with its last, small write (the manifest), so a crash before leaves the
    // old one whole.
    Result<Ok> write_snapshot(Op op, const Bytes& snapshot);
    // `sync`: fsync before returning, for the changes that must survive a crash of the machine.
    Result<Ok> write(const StorageBatch& batch, bool sync);
    const std::string& path() const { return path_; }

private:
    Storage(std::string path, const CellIdentity& identity, bool initialized);
    // Takes `db` as the open database and reads where the stored state ends.
    Result<Ok> attach(std::unique_ptr<rocksdb::DB> db);
    Result<Ok> recover_from_failed_write(const std::string& what);
    Result<std::optional<std::string>> read_snapshot(Op op, Bytes& out) const;
    Result<std::vector<Entry>> read_log(Op after) const;
    Result<Ok> commit(rocksdb::WriteBatch& batch, bool sync, const std::string& what);
    Result<Ok> commit(rocksdb::WriteBatch& batch, const rocksdb::WriteOptions& options,
                      const std::string& what);
    using KeyRange = std::pair<Bytes, Bytes>;  // [first, second)
    // write_snapshot's chunks, in a table file of their own taken into the database whole.
    Result<Ok> ingest_chunks(Op op, const Bytes& snapshot, uint32_t chunk_count,
                             const std::string& what);
    // The chunk keys a snapshot of `op` drops, the stored one being `stored_op`'s.
    static std::vector<KeyRange> other_snapshots_chunks(Op op, Op stored_op);
    // The final, synced batch: the manifest, and the other snapshots and the log it covers gone.
    Result<Ok> replace_stored_snapshot(const storage_records::SnapshotManifest& manifest,
                                       const Bytes& snapshot,
                                       const std::vector<KeyRange>& other_chunks,
                                       const std::string& what);
    // Deletes the table files that hold only keys within `ranges`, dropped by the last batch.
    void free_files_within(const std::vector<KeyRange>& ranges, const std::string& what);
    Error error(const std::string& what, const std::string& reason) const;

    std::string path_;
    CellIdentity identity_;
    std::unique_ptr<rocksdb::DB> db_;  // null only after reopening it failed
    bool initialized_;
    Op snapshot_op_ = 0;  // the stored snapshot's op; 0: none
    Op last_op_ = 0;      // the last op the stored state reaches: the log's last entry, or the
                          // snapshot's
    bool last_write_failed_ = false;  // the database must be reopened before the next write
    // Held by each write (a log batch, one snapshot chunk, a snapshot's final batch) and by what
    // it reads and changes above: write() and write_snapshot() may run on two threads.
    std::mutex mutex_;
    // Shared by what uses db_ without mutex_ (ingest_chunks, free_files_within);
    // exclusive to close and reopen db_ (recover_from_failed_write, under mutex_).
    std::shared_mutex db_lifetime_;
};

// The key layout, for tests that damage stored values. Ops are big-endian so keys sort by op.
namespace storage_keys {
Bytes log_entry(Op op);                                // "log/" op
Bytes snapshot_chunk(Op op, uint32_t index);           // "chunk/" op index
}  // namespace storage_keys

}  // namespace voltlock
