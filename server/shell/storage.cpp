#include "shell/storage.h"

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/rate_limiter.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <shared_mutex>
#include <string_view>
#include <utility>

#include "core/assert.h"
#include "core/checksum.h"
#include "core/codec.h"
#include "shell/storage_records.h"

namespace voltlock {

// ---- Key layout -------------------------------------------------------------------------------
//   "identity"          format version u32, cluster_id u32, replica u8, replica_count u8
//   "view"              view u64, last_normal_view u64
//   "clean_stop"        empty; present: the log and view are whole (durability snapshot)
//   "log/" op           timestamp_ms u64, client_id u64, request_number u64, payload length u32,
//                       payload
//   "snapshot/" op      the manifest: op u64, size u64, chunk bytes u32, chunk count u32,
//                       whole CRC-32C u32, then each chunk's CRC-32C u32
//   "chunk/" op index   the snapshot's bytes [index * chunk bytes, ...)
// Ops (u64) and chunk indexes (u32) are big-endian so that keys sort by them; values are
// little-endian, as everywhere else (codec.h).

// ---- Values -----------------------------------------------------------------------------------

// The log entry's layout at rest (codec.h); on the wire, entries go as message.cpp lays them out.
template <typename Io, codec::MaybeConst<Entry> R>
bool fields(Io& io, R& entry)
{
    return io.u64(entry.timestamp_ms) && io.u64(entry.client_id) &&
           io.u64(entry.request_number) && io.template str<uint32_t>(entry.payload);
}

namespace storage_records {

template <typename Io, codec::MaybeConst<IdentityRecord> R>
bool fields(Io& io, R& r)
{
    return io.u32(r.format_version) && io.u32(r.identity.cluster_id) &&
           io.u8(r.identity.replica) && io.u8(r.identity.replica_count);
}

template <typename Io, codec::MaybeConst<ViewsRecord> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.view) && io.u64(r.last_normal_view);
}

template <typename Io, codec::MaybeConst<SnapshotManifest> R>
bool fields(Io& io, R& m)
{
    uint32_t chunk_count = static_cast<uint32_t>(m.chunk_crcs.size());
    return io.u64(m.op) && io.u64(m.size_bytes) && io.u32(m.chunk_bytes) &&
           io.u32(chunk_count) && io.u32(m.crc) && io.items(m.chunk_crcs, chunk_count);
}

// Records are small and written whole: the layouts above fit them by construction.
template <typename Record>
Bytes encode_record(const Record& record)
{
    auto bytes = codec::encode(record);
    VL_ASSERT(bytes, "a record's strings fit their length fields");
    return *std::move(bytes);
}

Bytes encode_identity(const IdentityRecord& record) { return encode_record(record); }
std::optional<IdentityRecord> decode_identity(std::string_view in)
{
    return codec::decode<IdentityRecord>(in);
}

Bytes encode_views(const ViewsRecord& record) { return encode_record(record); }
std::optional<ViewsRecord> decode_views(std::string_view in)
{
    return codec::decode<ViewsRecord>(in);
}

Bytes encode_entry(const Entry& entry) { return encode_record(entry); }
std::optional<Entry> decode_entry(std::string_view in) { return codec::decode<Entry>(in); }

Bytes encode_manifest(const SnapshotManifest& manifest) { return encode_record(manifest); }
std::optional<SnapshotManifest> decode_manifest(std::string_view in)
{
    auto manifest = codec::decode<SnapshotManifest>(in);
    // Every chunk of the snapshot has its checksum.
    if (!manifest || manifest->chunk_bytes == 0 ||
        manifest->chunk_crcs.size() !=
            (manifest->size_bytes + manifest->chunk_bytes - 1) / manifest->chunk_bytes)
        return std::nullopt;
    return manifest;
}

}  // namespace storage_records

namespace {

constexpr uint32_t format_version = 1;
constexpr uint32_t snapshot_chunk_bytes = 1 << 20;

// Chunk `index` of a snapshot's bytes, as RocksDB takes a value.
rocksdb::Slice chunk_of(std::string_view snapshot, uint32_t index)
{
    const std::string_view piece =
        snapshot.substr(size_t{index} * snapshot_chunk_bytes, snapshot_chunk_bytes);
    return rocksdb::Slice(piece.data(), piece.size());
}
constexpr int64_t kBackgroundWriteBytesPerSecond = 64 << 20;

const Bytes identity_key = "identity";
const Bytes view_key = "view";
const Bytes clean_stop_key = "clean_stop";
const Bytes log_prefix = "log/";
const Bytes manifest_prefix = "snapshot/";
const Bytes chunk_prefix = "chunk/";

void append_big_endian(Bytes& out, uint64_t v, int count)
{
    for (int i = count - 1; i >= 0; i--) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint64_t read_big_endian(std::string_view in)
{
    uint64_t v = 0;
    for (const char ch : in) v = (v << 8) | static_cast<uint8_t>(ch);
    return v;
}

Bytes op_key(const Bytes& prefix, Op op)
{
    Bytes key = prefix;
    append_big_endian(key, op, 8);
    return key;
}

// The first key after every key that starts with `prefix`: the exclusive end of its range.
Bytes prefix_end(Bytes prefix)
{
    prefix.back() = static_cast<char>(prefix.back() + 1);
    return prefix;
}

// The smallest key greater than `key`: makes an exclusive range end include `key` itself.
Bytes key_after(Bytes key)
{
    key.push_back('\0');
    return key;
}

// The op in a key made by op_key(prefix, op); nullopt for a key of another shape.
std::optional<Op> key_op(std::string_view key, const Bytes& prefix)
{
    if (key.size() != prefix.size() + 8 || !key.starts_with(prefix)) return std::nullopt;
    return read_big_endian(key.substr(prefix.size()));
}

std::string_view view_of(const rocksdb::Slice& slice) { return {slice.data(), slice.size()}; }

std::string describe(const CellIdentity& identity)
{
    return "cluster " + std::to_string(identity.cluster_id) + " replica " +
           std::to_string(identity.replica) + " of " + std::to_string(identity.replica_count);
}

storage_records::SnapshotManifest make_manifest(Op op, const Bytes& snapshot)
{
    storage_records::SnapshotManifest manifest{.op = op, .size_bytes = snapshot.size(),
                              .chunk_bytes = snapshot_chunk_bytes};
    const std::string_view bytes = snapshot;
    for (size_t offset = 0; offset < bytes.size(); offset += snapshot_chunk_bytes) {
        const std::string_view chunk = bytes.substr(offset, snapshot_chunk_bytes);
        manifest.chunk_crcs.push_back(crc32c(chunk));
        manifest.crc = crc32c(chunk, manifest.crc);
    }
    return manifest;
}

std::string hex(uint32_t v)
{
    static constexpr char digits[] = "0123456789abcdef";
    std::string out = "0x";
    for (int shift = 28; shift >= 0; shift -= 4) out.push_back(digits[(v >> shift) & 0xF]);
    return out;
}

// ---- RocksDB ----------------------------------------------------------------------------------

// RocksDB's own log goes to the daemon's, not to a LOG file in the data directory: on a full disk
// that file fails too, and the next line written to it trips an assertion in RocksDB builds that
// keep them (Debian's does) instead of returning an error. Only warnings and errors: the
// informational lines (flushes, compactions, statistics) would drown the replica's own.
class RocksdbLogger : public rocksdb::Logger {
public:
    RocksdbLogger(std::string path, ReplicaIndex replica)
        : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), path_(std::move(path)),
          replica_(replica)
    {
    }
    using rocksdb::Logger::Logv;
    void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override
    {
        spdlog::level::level_enum spdlog_level;
        switch (level) {
        case rocksdb::InfoLogLevel::WARN_LEVEL: spdlog_level = spdlog::level::warn; break;
        case rocksdb::InfoLogLevel::ERROR_LEVEL:
        case rocksdb::InfoLogLevel::FATAL_LEVEL: spdlog_level = spdlog::level::err; break;
        default: return;
        }
        char line[1024];
        std::vsnprintf(line, sizeof line, format, ap);
        std::string_view text = line;
        while (text.ends_with('\n')) text.remove_suffix(1);
        // Said of the first ingested table file a process opens (ingest_chunks), and of every
        // thousandth after: RocksDB keeps no unique ID for those to check against its manifest.
        // The chunks in them carry CRC-32Cs of their own.
        if (text.find("opened without unique ID to verify") != std::string_view::npos) return;
        spdlog::log(spdlog_level, "r{}: data directory {}: rocksdb: {}", replica_, path_, text);
    }

private:
    std::string path_;
    ReplicaIndex replica_;
};

// Options for a small database that may live on a small disk: the defaults preallocate tens of
// MiB (a 4 MiB MANIFEST, WAL and SST files fallocated to their expected size), which can fill a
// small filesystem before any data is written.
rocksdb::Options database_options(const std::string& path, const CellIdentity& identity)
{
    rocksdb::Options options;
    options.create_if_missing = true;
    options.paranoid_checks = true;
    options.info_log = std::make_shared<RocksdbLogger>(path, identity.replica);
    options.allow_fallocate = false;
    options.manifest_preallocation_size = 64 << 10;
    options.max_manifest_file_size = 4 << 20;
    // A snapshot's chunks pass no memtable (ingest_chunks), but a rewrite of the stored
    // snapshot's own op goes as one batch and so lands in one memtable whatever its size; a small
    // write buffer flushes it soon after, which lets the WAL that also holds it be deleted.
    options.write_buffer_size = 4 << 20;
    options.max_write_buffer_number = 2;
    // Each snapshot deletes the log it covers; compacting after two L0 files rather than four
    // reclaims that space sooner.
    options.level0_file_num_compaction_trigger = 2;
    // A snapshot's table file is written, and the memtables flushed and compacted, in the
    // background while the loop fsyncs each step's log (durability sync): background writes
    // (ingest_chunks' too, at IO_LOW) go out a MiB at a time and at most
    // kBackgroundWriteBytesPerSecond, so that they never queue a burst of tens of MiB on the
    // disk ahead of the loop's small sync (docs/frontend.md, "The loop around a snapshot").
    options.bytes_per_sync = 1 << 20;
    options.rate_limiter.reset(rocksdb::NewGenericRateLimiter(kBackgroundWriteBytesPerSecond));
    return options;
}

rocksdb::ReadOptions read_options()
{
    rocksdb::ReadOptions options;
    options.verify_checksums = true;
    return options;
}

std::string data_directory_error(const std::string& path, const std::string& what,
                                 const std::string& reason)
{
    return "data directory " + path + ": " + what + ": " + reason;
}

// Opens the database in `path`, creating it if absent; `what` is the action errors name.
Result<std::unique_ptr<rocksdb::DB>> open_database(const std::string& path,
                                                   const CellIdentity& identity,
                                                   const std::string& what)
{
    // Creating the directory here rather than in RocksDB spares every new data directory a
    // misleading error line from RocksDB ("Error when reading <path> dir NotFound").
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
        return os_error(data_directory_error(path, what, "creating the directory"));
    rocksdb::DB* opened = nullptr;
    const auto status = rocksdb::DB::Open(database_options(path, identity), path, &opened);
    if (!status.ok()) return Error{0, data_directory_error(path, what, status.ToString())};
    return std::unique_ptr<rocksdb::DB>(opened);
}

// Reads the identity from an open database, or writes `identity` into a new one. Returns
// whether the directory was initialized before.
Result<bool> check_identity(rocksdb::DB& db, const std::string& path,
                            const CellIdentity& identity)
{
    const auto failure = [&](const std::string& reason) {
        return Error{0, data_directory_error(path, "identity", reason)};
    };
    std::string stored;
    auto status = db.Get(read_options(), identity_key, &stored);
    if (status.IsNotFound()) {
        rocksdb::WriteOptions sync;
        sync.sync = true;
        status = db.Put(sync, identity_key,
                        storage_records::encode_identity({format_version, identity}));
        if (!status.ok())
            return failure("writing " + describe(identity) + ": " + status.ToString());
        return false;
    }
    if (!status.ok()) return failure(status.ToString());
    const auto found = storage_records::decode_identity(stored);
    if (!found) return failure("garbled record");
    if (found->format_version != format_version)
        return failure("format version " + std::to_string(found->format_version) +
                       ", this build reads " + std::to_string(format_version));
    if (found->identity != identity)
        return failure("belongs to " + describe(found->identity) + ", not " +
                       describe(identity));
    return true;
}

// The largest op among the keys op_key(prefix, op); 0 if there are none.
Result<Op> last_op_under(rocksdb::DB& db, const std::string& path, const Bytes& prefix)
{
    const Bytes end = prefix_end(prefix);
    const rocksdb::Slice lower(prefix), upper(end);
    rocksdb::ReadOptions options = read_options();
    options.iterate_lower_bound = &lower;
    options.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(options));
    // Forward from the prefix, not SeekToLast: that reads the last block of every file below
    // the bound, such as a file of snapshot chunks alone (ingest_chunks), and a damaged
    // chunk there would fail this instead of the snapshot that holds it (refused, recovered from
    // peers).
    Op last = 0;
    for (it->Seek(lower); it->Valid(); it->Next()) {
        const auto op = key_op(view_of(it->key()), prefix);
        if (!op) return Error{0, data_directory_error(path, "finding the last " + prefix + " key",
                                                      "garbled key")};
        last = *op;
    }
    if (!it->status().ok())
        return Error{0, data_directory_error(path, "finding the last " + prefix + " key",
                                             it->status().ToString())};
    return last;
}

}  // namespace

namespace storage_keys {

Bytes log_entry(Op op) { return op_key(log_prefix, op); }

Bytes snapshot_chunk(Op op, uint32_t index)
{
    Bytes key = op_key(chunk_prefix, op);
    append_big_endian(key, index, 4);
    return key;
}

}  // namespace storage_keys

// ---- StorageBatch -----------------------------------------------------------------------------

void StorageBatch::replace_log_after(Op after, std::vector<Entry> entries)
{
    log_replacements_.push_back({after, std::move(entries)});
}

void StorageBatch::set_view(View view, View last_normal_view)
{
    views_ = Views{view, last_normal_view};
}

// ---- Storage ----------------------------------------------------------------------------------

Result<std::unique_ptr<Storage>> Storage::open(const std::string& dir,
                                               const CellIdentity& identity)
{
    auto db = VL_TRY(open_database(dir, identity, "opening"));
    const auto initialized = VL_TRY(check_identity(*db, dir, identity));
    std::unique_ptr<Storage> storage(new Storage(dir, identity, initialized));
    VL_TRY(storage->attach(std::move(db)));
    return storage;
}

Storage::Storage(std::string path, const CellIdentity& identity, bool initialized)
    : path_(std::move(path)), identity_(identity), initialized_(initialized)
{
}

Storage::~Storage() = default;

Result<Ok> Storage::attach(std::unique_ptr<rocksdb::DB> db)
{
    const auto snapshot_op = VL_TRY(last_op_under(*db, path_, manifest_prefix));
    const auto last_log_op = VL_TRY(last_op_under(*db, path_, log_prefix));
    db_ = std::move(db);
    snapshot_op_ = snapshot_op;
    last_op_ = std::max(snapshot_op, last_log_op);
    return Ok{};
}

Result<Ok> Storage::recover_from_failed_write(const std::string& what)
{
    if (!last_write_failed_) return Ok{};
    // RocksDB 7.8 cannot write again after a failed WAL write, even once resumed: the WAL
    // file's writer keeps the error (facebook/rocksdb#11643, fixed in 9.x), and builds with
    // assertions abort on the next append. Reopening replays the WAL up to the failed record
    // and starts a new one. The store's extent is read again: a write that failed after its
    // record reached the WAL takes effect now.
    std::unique_lock closing(db_lifetime_);  // no ingestion under way
    db_.reset();  // one process cannot hold the database open twice
    auto db = VL_TRY(open_database(path_, identity_, what + ": reopening after a failed write"));
    auto attached = attach(std::move(db));
    if (!attached.ok()) return attached;
    last_write_failed_ = false;
    return Ok{};
}

Error Storage::error(const std::string& what, const std::string& reason) const
{
    return Error{0, data_directory_error(path_, what, reason)};
}

Result<StoredState> Storage::load() const
{
    if (!db_) return error("loading", "closed: reopening it after a failed write failed");
    StoredState state;
    state.initialized = initialized_;

    std::string views;
    const auto status = db_->Get(read_options(), view_key, &views);
    if (status.ok()) {
        const auto record = storage_records::decode_views(views);
        if (!record) return error("reading the view", "garbled record");
        state.view = record->view;
        state.last_normal_view = record->last_normal_view;
        state.view_stored = true;
    } else if (!status.IsNotFound()) {
        return error("reading the view", status.ToString());
    }
    // Unreadable (a damaged block, which the snapshot beside it is then refused for): not
    // clean. Without the mark the replica claims only its snapshot, which is always safe.
    std::string clean_stop;
    state.clean_stop = db_->Get(read_options(), clean_stop_key, &clean_stop).ok();

    if (snapshot_op_ != 0) {
        auto refusal = VL_TRY(read_snapshot(snapshot_op_, state.snapshot));
        if (refusal) {
            // The log holds only the ops after the snapshot: without it there is nothing to
            // apply them to.
            state.snapshot.clear();
            state.snapshot_refused = std::move(*refusal);
            return state;
        }
        state.snapshot_op = snapshot_op_;
    }
    auto log = VL_TRY(read_log(snapshot_op_));
    state.log = std::move(log);
    return state;
}

// Reads snapshot `op` into `out`. Returns why it is refused (nullopt: it passed every check), or
// an Error for a failure that says nothing about the snapshot itself.
Result<std::optional<std::string>> Storage::read_snapshot(Op op, Bytes& out) const
{
    const std::string what = "snapshot op " + std::to_string(op);
    const auto refuse = [&](const std::string& reason) -> std::optional<std::string> {
        return data_directory_error(path_, what, reason + "; not loading it");
    };
    // A snapshot is read once, at start: keep it out of the block cache.
    rocksdb::ReadOptions options = read_options();
    options.fill_cache = false;

    std::string stored_manifest;
    auto status = db_->Get(options, op_key(manifest_prefix, op), &stored_manifest);
    if (status.IsCorruption()) return refuse("manifest: " + status.ToString());
    if (!status.ok()) return error("reading " + what + " manifest", status.ToString());
    const auto manifest = storage_records::decode_manifest(stored_manifest);
    if (!manifest || manifest->op != op) return refuse("garbled manifest");

    out.clear();
    out.reserve(manifest->size_bytes);
    uint32_t crc = 0;
    const auto chunk_count = static_cast<uint32_t>(manifest->chunk_crcs.size());
    for (uint32_t index = 0; index < chunk_count; index++) {
        const std::string chunk_name =
            "chunk " + std::to_string(index + 1) + " of " + std::to_string(chunk_count);
        rocksdb::PinnableSlice chunk;
        status = db_->Get(options, db_->DefaultColumnFamily(),
                          storage_keys::snapshot_chunk(op, index), &chunk);
        if (status.IsCorruption() || status.IsNotFound())
            return refuse(chunk_name + ": " + status.ToString());
        if (!status.ok()) return error("reading " + what + " " + chunk_name, status.ToString());
        const uint64_t expected_bytes =
            std::min<uint64_t>(manifest->chunk_bytes, manifest->size_bytes - out.size());
        if (chunk.size() != expected_bytes)
            return refuse(chunk_name + " holds " + std::to_string(chunk.size()) +
                          " bytes, not " + std::to_string(expected_bytes));
        const uint32_t chunk_crc = crc32c(view_of(chunk));
        if (chunk_crc != manifest->chunk_crcs[index])
            return refuse(chunk_name + " fails its CRC-32C (stored " +
                          hex(manifest->chunk_crcs[index]) + ", computed " + hex(chunk_crc) + ")");
        crc = crc32c(view_of(chunk), crc);
        out.append(chunk.data(), chunk.size());
    }
    if (crc != manifest->crc)
        return refuse("fails its whole CRC-32C (stored " + hex(manifest->crc) + ", computed " +
                      hex(crc) + ")");
    return std::optional<std::string>{};
}

Result<std::vector<Entry>> Storage::read_log(Op after) const
{
    const Bytes first = storage_keys::log_entry(after + 1);
    const Bytes end = prefix_end(log_prefix);
    const rocksdb::Slice lower(first), upper(end);
    rocksdb::ReadOptions options = read_options();
    options.iterate_lower_bound = &lower;
    options.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options));

    std::vector<Entry> log;
    Op expected = after + 1;
    for (it->SeekToFirst(); it->Valid(); it->Next(), expected++) {
        const std::string what = "log entry op " + std::to_string(expected);
        const auto op = key_op(view_of(it->key()), log_prefix);
        if (!op) return error(what, "garbled key");
        if (*op != expected)
            return error(what, "missing (the next stored entry is op " + std::to_string(*op) +
                                   ")");
        auto entry = storage_records::decode_entry(view_of(it->value()));
        if (!entry) return error(what, "garbled record");
        log.push_back(std::move(*entry));
    }
    if (!it->status().ok())
        return error("reading log entry op " + std::to_string(expected), it->status().ToString());
    return log;
}

Result<Ok> Storage::write_snapshot(Op op, const Bytes& snapshot)
{
    const std::string what = "writing snapshot op " + std::to_string(op) + " (" +
                             std::to_string(snapshot.size()) + " bytes)";
    if (op == 0) return error(what, "ops are numbered from 1");

    const storage_records::SnapshotManifest manifest = make_manifest(op, snapshot);
    // The chunks go under their own op's keys, which no manifest names until the final batch
    // below: a crash before it restarts from the stored snapshot, and a later snapshot drops
    // them. The stored snapshot's own op again (snapshot_write_mutex_ in Node keeps these calls
    // in turn) would rewrite chunks its manifest names: that one goes whole in the final batch.
    Op stored_op = 0;
    {
        std::lock_guard lock(mutex_);
        VL_TRY(recover_from_failed_write(what));
        stored_op = snapshot_op_;
    }
    const bool same_op = op == stored_op;
    const auto chunk_count = static_cast<uint32_t>(manifest.chunk_crcs.size());
    if (!same_op && chunk_count > 0)  // RocksDB makes no empty table file
        VL_TRY(ingest_chunks(op, snapshot, chunk_count, what));
    const auto others = other_snapshots_chunks(op, stored_op);
    VL_TRY(replace_stored_snapshot(manifest, snapshot, others, what));
    free_files_within(others, what);
    return Ok{};
}

std::vector<Storage::KeyRange> Storage::other_snapshots_chunks(Op op, Op stored_op)
{
    // Below op's chunks, every older snapshot's; above them only up to the stored snapshot's,
    // if that is newer (a replica that discarded its state for its cell's). A deletion open to
    // the end would cover the next snapshots' keys too, and RocksDB takes a table file in under
    // a deletion of its keys only after flushing it, holding every write meanwhile. Chunks of a
    // newer op that never became the stored snapshot (a crash before its manifest) go with the
    // first snapshot past them.
    std::vector<KeyRange> ranges{{chunk_prefix, op_key(chunk_prefix, op)}};
    if (stored_op > op)
        ranges.push_back({op_key(chunk_prefix, op + 1), op_key(chunk_prefix, stored_op + 1)});
    return ranges;
}

Result<Ok> Storage::replace_stored_snapshot(const storage_records::SnapshotManifest& manifest,
                                            const Bytes& snapshot,
                                            const std::vector<KeyRange>& other_chunks,
                                            const std::string& what)
{
    const Op op = manifest.op;
    std::lock_guard lock(mutex_);
    VL_TRY(recover_from_failed_write(what));
    rocksdb::WriteBatch batch;
    // Drop every other stored snapshot and the log entries this one covers, in the batch that
    // makes it the stored one, so that no crash separates the two. An older snapshot than the
    // stored one replaces everything: the whole log goes too.
    batch.DeleteRange(manifest_prefix, prefix_end(manifest_prefix));
    for (const auto& [begin, end] : other_chunks) batch.DeleteRange(begin, end);
    if (op == snapshot_op_) {
        batch.DeleteRange(op_key(chunk_prefix, op), op_key(chunk_prefix, op + 1));
        for (uint32_t index = 0; index < manifest.chunk_crcs.size(); index++)
            batch.Put(storage_keys::snapshot_chunk(op, index), chunk_of(snapshot, index));
    }
    const bool older = op < snapshot_op_;
    batch.DeleteRange(log_prefix, older ? prefix_end(log_prefix)
                                        : key_after(storage_keys::log_entry(op)));
    batch.Put(op_key(manifest_prefix, op), storage_records::encode_manifest(manifest));

    VL_TRY(commit(batch, true, what));
    snapshot_op_ = op;
    last_op_ = older ? op : std::max(last_op_, op);
    return Ok{};
}

void Storage::free_files_within(const std::vector<KeyRange>& ranges, const std::string& what)
{
    // The other snapshots' table files, ingested whole at the bottom level, would otherwise wait
    // there for a compaction to carry the deletion down to them. Only files wholly inside the
    // deleted ranges go, and no key there is wanted any more.
    std::vector<rocksdb::Slice> bounds;
    bounds.reserve(2 * ranges.size());
    std::vector<rocksdb::RangePtr> dropped;
    for (const auto& [begin, end] : ranges) {
        bounds.emplace_back(begin);
        bounds.emplace_back(end);
        dropped.emplace_back(&bounds[bounds.size() - 2], &bounds.back());
    }
    std::shared_lock alive(db_lifetime_);  // not mutex_: the loop's writes go on
    if (!db_) return;
    const auto freed = rocksdb::DeleteFilesInRanges(db_.get(), db_->DefaultColumnFamily(),
                                                    dropped.data(), dropped.size(), false);
    if (!freed.ok())
        spdlog::warn("data directory {}: {}: freeing the older snapshots' files: {} (compactions "
                     "free them later)",
                     path_, what, freed.ToString());
}

Result<Ok> Storage::ingest_chunks(Op op, const Bytes& snapshot, uint32_t chunk_count,
                                  const std::string& what)
{
    // A table file written beside the database and then taken into it whole: the chunks never
    // pass the memtables, so they neither fill them nor pile up level-0 files (one per 4 MiB
    // memtable, which past 20 files slowed and then stopped every write, the loop's synced log
    // among them, for seconds at 140 MiB: docs/storage.md). The file is written at the
    // background rate limit and synced a MiB at a time, like a flush, and lands at the bottom
    // level, as no other file holds this op's keys.
    const std::string file = path_ + "/snapshot-being-written.sst";  // not a name RocksDB uses
    std::remove(file.c_str());  // a crashed write's
    rocksdb::Options options;
    {
        std::lock_guard lock(mutex_);
        if (!db_) return error(what, "closed: reopening it after a failed write failed");
        options = db_->GetOptions();
    }
    rocksdb::EnvOptions file_options(options);
    // Its pages left in the page cache, as a flush leaves its file: a restart reads them back.
    rocksdb::SstFileWriter writer(file_options, options, nullptr, false, rocksdb::Env::IO_LOW);
    auto written = writer.Open(file);
    for (uint32_t index = 0; written.ok() && index < chunk_count; index++)
        written = writer.Put(storage_keys::snapshot_chunk(op, index), chunk_of(snapshot, index));
    if (written.ok()) written = writer.Finish();  // synced
    if (!written.ok()) {
        std::remove(file.c_str());
        return error(what + ": writing its table file", written.ToString());
    }
    // Without mutex_, so that the loop's writes go on; RocksDB holds them only while it adds
    // the file to its manifest. db_lifetime_ keeps a reopen from closing the database under it.
    std::shared_lock alive(db_lifetime_);
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;
    const auto ingested =
        db_ ? db_->IngestExternalFile({file}, ingest)
            : rocksdb::Status::Aborted("closed: reopening it after a failed write failed");
    std::remove(file.c_str());  // taken in, RocksDB removed this name; refused, it stays
    if (!ingested.ok()) return error(what + ": taking in its table file", ingested.ToString());
    return Ok{};
}

Result<Ok> Storage::write(const StorageBatch& batch, bool sync)
{
    if (batch.empty()) return Ok{};
    std::lock_guard lock(mutex_);
    const std::string what = "writing the log and view";
    auto recovered = recover_from_failed_write(what);
    if (!recovered.ok()) return recovered;
    rocksdb::WriteBatch write_batch;
    // Applied in order, each replacement against the log the previous ones left.
    Op last_op = last_op_;
    for (const auto& replacement : batch.log_replacements_) {
        const std::string replacing =
            "replacing the log after op " + std::to_string(replacement.after);
        if (replacement.after > last_op)
            return error(replacing, "the log ends at op " + std::to_string(last_op) +
                                   ": that would leave a gap");
        if (replacement.after < snapshot_op_)
            return error(replacing, "the snapshot already covers ops up to " +
                                   std::to_string(snapshot_op_));
        Op op = replacement.after;
        for (const Entry& entry : replacement.entries)
            write_batch.Put(storage_keys::log_entry(++op), storage_records::encode_entry(entry));
        // Entries past the new end would survive as a stale suffix; appends skip this.
        if (op < last_op)
            write_batch.DeleteRange(key_after(storage_keys::log_entry(op)),
                                    key_after(storage_keys::log_entry(last_op)));
        last_op = op;
    }
    if (batch.views_) {
        write_batch.Put(view_key, storage_records::encode_views(
                                      {batch.views_->view, batch.views_->last_normal_view}));
    }
    if (batch.clean_stop_) {
        if (*batch.clean_stop_)
            write_batch.Put(clean_stop_key, "");
        else
            write_batch.Delete(clean_stop_key);
    }

    auto committed = commit(write_batch, sync, what);
    if (!committed.ok()) return committed;
    last_op_ = last_op;
    return Ok{};
}

Result<Ok> Storage::commit(rocksdb::WriteBatch& batch, bool sync, const std::string& what)
{
    rocksdb::WriteOptions options;
    options.sync = sync;
    return commit(batch, options, what);
}

Result<Ok> Storage::commit(rocksdb::WriteBatch& batch, const rocksdb::WriteOptions& options,
                           const std::string& what)
{
    if (!db_) return error(what, "closed: reopening it after a failed write failed");
    const auto status = db_->Write(options, &batch);
    if (!status.ok()) {
        last_write_failed_ = true;
        return error(what, status.ToString());
    }
    return Ok{};
}

}  // namespace voltlock
