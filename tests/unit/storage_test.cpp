// The data directory (server/shell/storage.h) on a real RocksDB, each case in a fresh temporary
// directory: what is written loads back after a reopen; a damaged snapshot is refused, not
// loaded; a damaged directory, log or identity is an error naming the path; and a full disk
// fails the write that hit it, leaves the previous state intact, and does not stop later writes
// once space is freed.
#include <doctest/doctest.h>
#include <rocksdb/db.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "noise.h"
#include "shell/storage.h"

namespace voltlock {
namespace {

namespace fs = std::filesystem;

constexpr CellIdentity cell{.cluster_id = 7, .replica = 1, .replica_count = 3};
constexpr size_t mib = 1 << 20;

// A directory of its own, removed with everything in it at the end of the case.
class TempDir {
public:
    TempDir()
    {
        std::string name = (fs::temp_directory_path() / "voltlock-storage-XXXXXX").string();
        REQUIRE(::mkdtemp(name.data()) != nullptr);
        path_ = name;
    }
    ~TempDir()
    {
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string path(const std::string& name) const { return (path_ / name).string(); }
    std::string path() const { return path_.string(); }

private:
    fs::path path_;
};

template <typename T>
std::string error_text(const Result<T>& result)
{
    return result.ok() ? "" : result.error().message();
}

std::unique_ptr<Storage> open_storage(const std::string& dir, const CellIdentity& identity = cell)
{
    auto storage = Storage::open(dir, identity);
    INFO(error_text(storage));
    REQUIRE(storage.ok());
    return std::move(storage.value());
}

StoredState load(const Storage& storage)
{
    auto state = storage.load();
    INFO(error_text(state));
    REQUIRE(state.ok());
    return std::move(state.value());
}

void require_ok(const Result<Ok>& result)
{
    INFO(error_text(result));
    REQUIRE(result.ok());
}

bool contains(const std::string& text, const std::string& part)
{
    return text.find(part) != std::string::npos;
}

Entry entry(Op op, const std::string& tag = "")
{
    return Entry{.timestamp_ms = 1'700'000'000'000 + op,
                 .client_id = 0xC11E'0000 + op,
                 .request_number = 100 + op,
                 .payload = "op " + std::to_string(op) + tag + Bytes("\0\xFF", 2)};
}

std::vector<Entry> entries(Op first, Op last, const std::string& tag = "")
{
    std::vector<Entry> out;
    for (Op op = first; op <= last; op++) out.push_back(entry(op, tag));
    return out;
}

// One batch with one log replacement, synced.
Result<Ok> replace_log_after(Storage& storage, Op after, std::vector<Entry> log)
{
    StorageBatch batch;
    batch.replace_log_after(after, std::move(log));
    return storage.write(batch, true);
}

// The data directory opened with RocksDB itself, to damage what Storage wrote.
std::unique_ptr<rocksdb::DB> open_raw(const std::string& dir)
{
    rocksdb::DB* db = nullptr;
    const auto status = rocksdb::DB::Open(rocksdb::Options{}, dir, &db);
    INFO(status.ToString());
    REQUIRE(status.ok());
    return std::unique_ptr<rocksdb::DB>(db);
}

void raw_put(const std::string& dir, const Bytes& key, const Bytes& value)
{
    REQUIRE(open_raw(dir)->Put(rocksdb::WriteOptions{}, key, value).ok());
}

Bytes raw_get(const std::string& dir, const Bytes& key)
{
    std::string value;
    REQUIRE(open_raw(dir)->Get(rocksdb::ReadOptions{}, key, &value).ok());
    return value;
}

bool raw_has(const std::string& dir, const Bytes& key)
{
    std::string value;
    return open_raw(dir)->Get(rocksdb::ReadOptions{}, key, &value).ok();
}

// ---- Opening ----------------------------------------------------------------------------------

TEST_CASE("a new data directory is created, given its identity, and initialized from then on")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    StoredState fresh = load(*open_storage(dir));
    CHECK_FALSE(fresh.initialized);
    CHECK_FALSE(fresh.snapshot_op);
    CHECK_FALSE(fresh.snapshot_refused);
    CHECK(fresh.log.empty());
    CHECK(fresh.view == 0);
    CHECK(fresh.last_normal_view == 0);

    auto storage = open_storage(dir);
    CHECK(storage->path() == dir);
    CHECK(load(*storage).initialized);
}

TEST_CASE("another replica's or cell's data directory is refused, naming both identities")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    open_storage(dir, CellIdentity{.cluster_id = 7, .replica = 2, .replica_count = 3});

    auto wrong_replica = Storage::open(dir, cell);
    REQUIRE_FALSE(wrong_replica.ok());
    CHECK(wrong_replica.error().message() ==
          "data directory " + dir +
              ": identity: belongs to cluster 7 replica 2 of 3, not cluster 7 replica 1 of 3");

    auto wrong_cell = Storage::open(dir, CellIdentity{.cluster_id = 8, .replica = 2,
                                                      .replica_count = 3});
    REQUIRE_FALSE(wrong_cell.ok());
    CHECK(contains(wrong_cell.error().message(), "not cluster 8 replica 2 of 3"));
}

TEST_CASE("a path that cannot hold a data directory is an error naming the path")
{
    TempDir temp;
    const std::string file = temp.path("not-a-directory");
    std::ofstream(file) << "hello";
    auto on_file = Storage::open(file, cell);
    REQUIRE_FALSE(on_file.ok());
    MESSAGE(on_file.error().message());
    CHECK(contains(on_file.error().message(), "data directory " + file + ": opening: "));

    const std::string orphan = temp.path("missing-parent/data");
    auto without_parent = Storage::open(orphan, cell);
    REQUIRE_FALSE(without_parent.ok());
    CHECK(without_parent.error().message() ==
          "data directory " + orphan +
              ": opening: creating the directory: No such file or directory");
}

TEST_CASE("a garbage CURRENT file is an error naming the path")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    open_storage(dir);
    std::ofstream(temp.path("data/CURRENT"), std::ios::trunc) << "\x01garbage";
    auto storage = Storage::open(dir, cell);
    REQUIRE_FALSE(storage.ok());
    MESSAGE(storage.error().message());
    CHECK(contains(storage.error().message(), "data directory " + dir + ": opening: "));
}

// ---- Snapshots --------------------------------------------------------------------------------

TEST_CASE("a snapshot loads back after a reopen: empty, small, and over several chunks")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    const Bytes small = "lock table \0 with a NUL";
    const Bytes chunks = noise(3 * mib + mib / 2, 1);  // three full chunks and a half
    {
        auto storage = open_storage(dir);
        require_ok(storage->write_snapshot(3, Bytes{}));
        StoredState state = load(*storage);
        CHECK(state.snapshot_op == Op{3});
        CHECK(state.snapshot.empty());

        require_ok(storage->write_snapshot(4, small));
        CHECK(load(*storage).snapshot == small);
        require_ok(storage->write_snapshot(9, chunks));
    }
    StoredState state = load(*open_storage(dir));
    CHECK(state.snapshot_op == Op{9});
    CHECK(state.snapshot == chunks);
    CHECK_FALSE(state.snapshot_refused);
    CHECK(state.log.empty());
}

TEST_CASE("a newer snapshot replaces the older one and drops the log entries it covers")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    {
        auto storage = open_storage(dir);
        require_ok(replace_log_after(*storage, 0, entries(1, 10)));
        require_ok(storage->write_snapshot(6, noise(2 * mib + 1, 6)));
        StoredState state = load(*storage);
        CHECK(state.snapshot_op == Op{6});
        CHECK(state.log == entries(7, 10));

        // Past the end of the log, as after a state transfer: no entry survives it.
        require_ok(storage->write_snapshot(12, "twelve"));
        state = load(*storage);
        CHECK(state.snapshot_op == Op{12});
        CHECK(state.snapshot == "twelve");
        CHECK(state.log.empty());
        require_ok(replace_log_after(*storage, 12, entries(13, 14)));

    }
    // The older snapshot's chunks are gone, not only unreferenced.
    CHECK_FALSE(raw_has(dir, storage_keys::snapshot_chunk(6, 0)));
    CHECK_FALSE(raw_has(dir, storage_keys::log_entry(10)));
    {
        auto storage = open_storage(dir);
        StoredState state = load(*storage);
        CHECK(state.snapshot_op == Op{12});
        CHECK(state.log == entries(13, 14));
        // An older snapshot (a replica that gave up its state for its cell's) replaces it all.
        require_ok(storage->write_snapshot(11, "eleven"));
    }
    StoredState state = load(*open_storage(dir));
    CHECK(state.snapshot_op == Op{11});
    CHECK(state.snapshot == "eleven");
    CHECK(state.log.empty());
    CHECK_FALSE(raw_has(dir, storage_keys::log_entry(13)));
    CHECK_FALSE(raw_has(dir, storage_keys::snapshot_chunk(12, 0)));
}

uint64_t directory_bytes(const std::string& dir)
{
    uint64_t total = 0;
    for (const auto& file : fs::directory_iterator(dir))
        if (file.is_regular_file()) total += file.file_size();
    return total;
}

TEST_CASE("each stored snapshot frees the space of the one before")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    auto storage = open_storage(dir);
    for (Op op = 10; op <= 60; op += 10) {
        require_ok(storage->write_snapshot(op, noise(8 * mib, op)));
        const uint64_t bytes = directory_bytes(dir);
        INFO("after snapshot op " << op << ": " << bytes << " bytes in " << dir);
        CHECK(bytes < 12 * mib);  // one snapshot and RocksDB's own files, not two snapshots
    }
    CHECK(load(*storage).snapshot == noise(8 * mib, 60));
}

TEST_CASE("a big snapshot piles up no level-0 files, past 20 of which RocksDB slows every write")
{
    // Each level-0 file is one more place every read looks, and from 20 of them RocksDB delays
    // every write, the loop's synced log among them, and stops them at 36: seconds of a stopped
    // loop at a 140 MiB snapshot when its chunks went through 4 MiB memtables (docs/storage.md).
    TempDir temp;
    const std::string dir = temp.path("data");
    require_ok(open_storage(dir)->write_snapshot(100, noise(100 * mib, 100)));

    rocksdb::Options options;
    options.disable_auto_compactions = true;  // the files as write_snapshot left them
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(options, dir, &raw).ok());
    const std::unique_ptr<rocksdb::DB> db(raw);
    std::string level0_files;
    REQUIRE(db->GetProperty("rocksdb.num-files-at-level0", &level0_files));
    MESSAGE("level-0 files after a 100 MiB snapshot: " << level0_files);
    // At most the final batch's flush, and the WAL replayed at this open.
    CHECK(std::stoul(level0_files) <= 2);
}

TEST_CASE("a flipped byte in a stored snapshot chunk: the snapshot is refused, and its log too")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    {
        auto storage = open_storage(dir);
        require_ok(storage->write_snapshot(20, noise(2 * mib + 100, 20)));
        require_ok(replace_log_after(*storage, 20, entries(21, 23)));
    }
    Bytes chunk = raw_get(dir, storage_keys::snapshot_chunk(20, 1));
    chunk[12345] = static_cast<char>(chunk[12345] ^ 0x10);
    raw_put(dir, storage_keys::snapshot_chunk(20, 1), chunk);

    StoredState state = load(*open_storage(dir));
    CHECK_FALSE(state.snapshot_op);
    CHECK(state.snapshot.empty());
    CHECK(state.log.empty());
    REQUIRE(state.snapshot_refused);
    MESSAGE(*state.snapshot_refused);
    CHECK(contains(*state.snapshot_refused,
                   "data directory " + dir + ": snapshot op 20: chunk 2 of 3 fails its CRC-32C"));
}

TEST_CASE("a snapshot in a damaged RocksDB block is refused like one that fails its own CRC")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    const Bytes snapshot = noise(mib, 30);
    {
        auto storage = open_storage(dir);
        require_ok(storage->write_snapshot(30, snapshot));
    }
    // Reopening replays the WAL into a table file: find the snapshot's bytes there and flip one.
    open_storage(dir);
    const Bytes needle = snapshot.substr(mib / 2, 64);
    bool flipped = false;
    for (const auto& file : fs::directory_iterator(dir)) {
        if (file.path().extension() != ".sst") continue;
        std::fstream table(file.path(), std::ios::in | std::ios::out | std::ios::binary);
        const Bytes bytes{std::istreambuf_iterator<char>(table), {}};
        const size_t at = bytes.find(needle);
        if (at == Bytes::npos) continue;
        table.seekp(static_cast<std::streamoff>(at));
        table.put(static_cast<char>(bytes[at] ^ 0x01));
        flipped = true;
    }
    REQUIRE(flipped);

    StoredState state = load(*open_storage(dir));
    CHECK_FALSE(state.snapshot_op);
    CHECK(state.snapshot.empty());
    REQUIRE(state.snapshot_refused);
    MESSAGE(*state.snapshot_refused);
    CHECK(contains(*state.snapshot_refused, "data directory " + dir + ": snapshot op 30: "));
    CHECK(contains(*state.snapshot_refused, "Corruption"));
}

// ---- Log and view -----------------------------------------------------------------------------

TEST_CASE("the log: appends, replacements, truncations, in one batch or several, survive a reopen")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    {
        auto storage = open_storage(dir);
        require_ok(replace_log_after(*storage, 0, entries(1, 5)));
        require_ok(replace_log_after(*storage, 5, entries(6, 8)));
        CHECK(load(*storage).log == entries(1, 8));

        // A new leader's log replaces ours from op 7: op 8 goes.
        require_ok(replace_log_after(*storage, 6, entries(7, 7, " v2")));
        std::vector<Entry> expected = entries(1, 6);
        expected.push_back(entry(7, " v2"));
        CHECK(load(*storage).log == expected);

        require_ok(replace_log_after(*storage, 3, {}));
        CHECK(load(*storage).log == entries(1, 3));

        // Group commit: later replacements apply on top of earlier ones in the same batch.
        StorageBatch batch;
        batch.replace_log_after(3, entries(4, 9));
        batch.replace_log_after(5, entries(6, 6, " v3"));
        batch.replace_log_after(6, entries(7, 7, " v3"));
        require_ok(storage->write(batch, false));
    }
    std::vector<Entry> expected = entries(1, 5);
    expected.push_back(entry(6, " v3"));
    expected.push_back(entry(7, " v3"));
    CHECK(load(*open_storage(dir)).log == expected);
    CHECK_FALSE(raw_has(dir, storage_keys::log_entry(8)));
}

TEST_CASE("a log change that would leave a gap or rewrite ops under the snapshot is refused")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    auto storage = open_storage(dir);
    require_ok(replace_log_after(*storage, 0, entries(1, 3)));

    auto gap = replace_log_after(*storage, 4, entries(5, 5));
    REQUIRE_FALSE(gap.ok());
    CHECK(gap.error().message() == "data directory " + dir +
                                       ": replacing the log after op 4: the log ends at op 3: "
                                       "that would leave a gap");
    StorageBatch gap_in_batch;
    gap_in_batch.replace_log_after(3, entries(4, 4));
    gap_in_batch.replace_log_after(5, entries(6, 6));
    CHECK_FALSE(storage->write(gap_in_batch, true).ok());

    require_ok(storage->write_snapshot(2, "two"));
    auto under = replace_log_after(*storage, 1, entries(2, 3));
    REQUIRE_FALSE(under.ok());
    CHECK(contains(under.error().message(), "the snapshot already covers ops up to 2"));
    CHECK(load(*storage).log == entries(3, 3));
}

TEST_CASE("a missing or garbled log entry after the snapshot is an error naming the path")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    {
        auto storage = open_storage(dir);
        require_ok(replace_log_after(*storage, 0, entries(1, 5)));
    }
    raw_put(dir, storage_keys::log_entry(4), "garbled");
    auto garbled = open_storage(dir)->load();
    REQUIRE_FALSE(garbled.ok());
    CHECK(garbled.error().message() ==
          "data directory " + dir + ": log entry op 4: garbled record");

    REQUIRE(open_raw(dir)->Delete(rocksdb::WriteOptions{}, storage_keys::log_entry(2)).ok());
    auto missing = open_storage(dir)->load();
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error().message() == "data directory " + dir +
                                           ": log entry op 2: missing (the next stored entry is "
                                           "op 3)");
}

TEST_CASE("the view and the last normal view survive a reopen; empty batches write nothing")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    {
        auto storage = open_storage(dir);
        StorageBatch batch;
        CHECK(batch.empty());
        require_ok(storage->write(batch, true));
        batch.set_view(5, 4);
        CHECK_FALSE(batch.empty());
        require_ok(storage->write(batch, true));
        StorageBatch both;
        both.set_view(9, 9);
        both.replace_log_after(0, entries(1, 2));
        require_ok(storage->write(both, true));
    }
    StoredState state = load(*open_storage(dir));
    CHECK(state.view == 9);
    CHECK(state.last_normal_view == 9);
    CHECK(state.log == entries(1, 2));
}

// ---- Size and space ---------------------------------------------------------------------------

TEST_CASE("a 60 MB snapshot is written and loaded in seconds")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    const Bytes snapshot = noise(60'000'000, 60);
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point start) {
        return std::chrono::duration<double>(Clock::now() - start).count();
    };
    auto start = Clock::now();
    {
        auto storage = open_storage(dir);
        require_ok(storage->write_snapshot(60, snapshot));
    }
    const double write_s = seconds_since(start);
    start = Clock::now();
    StoredState state = load(*open_storage(dir));
    const double load_s = seconds_since(start);
    CHECK(state.snapshot == snapshot);
    MESSAGE("60 MB snapshot: write (open, write, close) " << write_s << " s, load (open, load) "
                                                          << load_s << " s");
    CHECK(write_s < 10);
    CHECK(load_s < 10);
}

// A tmpfs of `size` mounted on `dir` until destroyed; mounted() is false without the rights.
class SmallFilesystem {
public:
    SmallFilesystem(const std::string& dir, const std::string& size) : dir_(dir)
    {
        mounted_ = std::system(("mount -t tmpfs -o size=" + size + " tmpfs " + dir_ +
                                " 2>/dev/null").c_str()) == 0;
    }
    ~SmallFilesystem()
    {
        if (mounted_) CHECK(std::system(("umount " + dir_).c_str()) == 0);
    }
    SmallFilesystem(const SmallFilesystem&) = delete;
    SmallFilesystem& operator=(const SmallFilesystem&) = delete;
    bool mounted() const { return mounted_; }

private:
    std::string dir_;
    bool mounted_ = false;
};

TEST_CASE("a full disk fails the snapshot that hit it and nothing else; writes resume once freed")
{
    TempDir temp;
    SmallFilesystem disk(temp.path(), "12m");
    if (!disk.mounted()) {
        MESSAGE("skipped: mounting a tmpfs needs root (CAP_SYS_ADMIN)");
        return;
    }
    const std::string dir = temp.path("data");
    // Space to free later, so that the test can show writing resumes.
    const std::string ballast = temp.path("ballast");
    std::ofstream(ballast, std::ios::binary) << noise(3 * mib, 0);

    auto storage = open_storage(dir);
    Op op = 0;
    Bytes stored;
    std::optional<Error> failure;
    // Growing snapshots, until one no longer fits.
    for (size_t size_mib = 1; size_mib <= 12 && !failure; size_mib++) {
        Bytes snapshot = noise(size_mib * mib, size_mib);
        auto written = storage->write_snapshot(op + 1, snapshot);
        if (written.ok()) {
            op++;
            stored = std::move(snapshot);
        } else {
            failure = written.error();
        }
    }
    REQUIRE(failure);
    MESSAGE(failure->message());
    CHECK(contains(failure->message(),
                   "data directory " + dir + ": writing snapshot op " + std::to_string(op + 1)));
    CHECK(contains(failure->message(), "No space left on device"));
    REQUIRE(op >= 1);

    StoredState state = load(*storage);
    CHECK(state.snapshot_op == op);
    CHECK(state.snapshot == stored);

    // The next write reopens the database, which now has room to start a new WAL.
    std::filesystem::remove(ballast);
    const Bytes small = noise(64 << 10, 99);
    auto after_freeing = storage->write_snapshot(op + 1, small);
    INFO(error_text(after_freeing));
    REQUIRE(after_freeing.ok());
    op++;
    stored = small;
    CHECK(load(*storage).snapshot == small);

    storage.reset();
    state = load(*open_storage(dir));
    CHECK(state.snapshot_op == op);
    CHECK(state.snapshot == stored);
}

TEST_CASE("a clean stop's mark is written with the log and view, loads back, and is cleared")
{
    TempDir temp;
    const std::string dir = temp.path("data");
    {
        auto storage = open_storage(dir);
        CHECK_FALSE(load(*storage).clean_stop);
        require_ok(storage->write_snapshot(4, Bytes{"state of op 4"}));
        StorageBatch stop;
        stop.replace_log_after(4, entries(5, 7));
        stop.set_view(3, 3);
        stop.set_clean_stop(true);
        require_ok(storage->write(stop, true));
    }
    {
        auto storage = open_storage(dir);
        StoredState state = load(*storage);
        CHECK(state.clean_stop);
        CHECK(state.log == entries(5, 7));
        StorageBatch taken;
        taken.set_clean_stop(false);
        CHECK_FALSE(taken.empty());
        require_ok(storage->write(taken, true));
    }
    StoredState state = load(*open_storage(dir));
    CHECK_FALSE(state.clean_stop);
    CHECK(state.view == View{3});
}

}  // namespace
}  // namespace voltlock
