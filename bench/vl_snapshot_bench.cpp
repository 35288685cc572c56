// vl_snapshot_bench: what a snapshot of the lock service costs at a given size, measured on the
// code paths the daemon runs (server/shell/node.cpp, server/main/voltlockd.cpp). Used by
// `bench/run snapshot`, which runs `write` and then `restore` in a second process, so that each
// phase's peak RSS is its own.
//
//   write:   fills a single-replica Replica (replica_count 1, a LockMachine) through its one entry
//            point with N Puts (32-byte keys, 64-byte values) plus sessions holding and waiting
//            for locks; then, for the WriteSnapshot a Tick asks for, times what stops the event
//            loop now (forking the child that encodes it: ForkedEncoding::start), the child's
//            encode until its bytes are in hand (finish), and next to them the same encode on
//            this thread, which stopped the loop before (Replica::encode_snapshot:
//            LockMachine::snapshot() wrapped with the client table and a CRC-32C; both encodings
//            must be the same bytes); then the CRC the writer thread computes to serve it
//            (make_served_snapshot), Storage::write_snapshot into a new data directory
//            (RocksDB, synced), and the replica's step that learns it is written and drops the
//            log it covers (on the loop again; with --snapshot-every-ops above the op count,
//            the whole fill's log).
//   restore: what voltlockd does at start on that directory: Storage::open (RocksDB replays its
//            WAL), Storage::load, the readability check and the served CRC, and the construction
//            of a Replica with StartRestored (decode + LockMachine::restore); then checks that
//            the machine's state digest is the one written.
//
// While filling, the replica snapshots every 100,000 ops as the daemon does by default (so its
// log stays as short as the daemon's); those intermediate snapshots are acknowledged at once and
// not written. The measured snapshot is the one a Tick asks for after the fill.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "command_line.h"
#include "core/assert.h"
#include "core/lock_machine.h"
#include "core/lock_ops.h"
#include "core/replica.h"
#include "shell/forked_encoding.h"
#include "shell/snapshot_transfer.h"
#include "shell/storage.h"

namespace {

using namespace voltlock;
using Clock = std::chrono::steady_clock;

constexpr const char* usage = R"(usage: vl_snapshot_bench write --dir DIR --keys N [options]
       vl_snapshot_bench restore --dir DIR

  --dir DIR               the data directory: write makes it (it must not exist yet)
  --keys N                keys to put (write)
  --key-bytes B           bytes per key (default 32)
  --value-bytes B         bytes per value (default 64)
  --keys-per-session K    one session per K keys, at least 10 (default 1000); each holds an
                          exclusive lock, a shared lock, and waits for another session's lock
  --snapshot-every-ops N  the replica's trigger while filling (default 100000, the daemon's)

Prints one JSON object. Times in milliseconds, sizes in bytes.
)";

constexpr uint32_t kClusterId = 1;
constexpr size_t kClients = 64;  // VR client ids the fill's requests come from

struct Options {
    std::string command;
    std::string dir;
    uint64_t keys = 0;
    size_t key_bytes = 32;
    size_t value_bytes = 64;
    uint64_t keys_per_session = 1000;
    uint64_t snapshot_every_ops = 100'000;
};

double ms_since(Clock::time_point start)
{
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Peak and current resident set from /proc/self/status, in bytes.
uint64_t status_kib(const std::string& field)
{
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.starts_with(field + ":")) return std::stoull(line.substr(field.size() + 1));
    return 0;
}
uint64_t peak_rss_bytes() { return status_kib("VmHWM") * 1024; }
uint64_t rss_bytes() { return status_kib("VmRSS") * 1024; }
// Starts a new peak (Linux: "5" > clear_refs resets VmHWM to the current RSS).
void reset_peak_rss()
{
    malloc_trim(0);
    std::ofstream("/proc/self/clear_refs") << "5";
}

ReplicaConfig single_replica(uint64_t snapshot_every_ops)
{
    ReplicaConfig config;
    config.cluster_id = kClusterId;
    config.replica = 0;
    config.replica_count = 1;
    config.snapshot_every_ops = snapshot_every_ops;
    // Never due while filling (no Tick arrives then); due at the first Tick after it.
    config.snapshot_every_ticks = 1;
    return config;
}

CellIdentity identity() { return CellIdentity{.cluster_id = kClusterId, .replica = 0,
                                              .replica_count = 1}; }

// Deterministic filler bytes: names stay valid UTF-8 without control characters.
std::string padded(const std::string& prefix, uint64_t n, size_t bytes)
{
    std::string text = prefix + std::to_string(n);
    if (text.size() < bytes) text.append(bytes - text.size(), '.');
    return text;
}
Bytes value_bytes(uint64_t n, size_t bytes)
{
    Bytes value(bytes, '\0');
    uint64_t x = n * 0x9E3779B97F4A7C15ull + 1;
    for (char& ch : value) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ch = static_cast<char>(x);
    }
    return value;
}

// A one-replica cell's leader, driven as the shell drives it: requests in, effects out.
class Cell {
public:
    explicit Cell(uint64_t snapshot_every_ops)
        : replica_(single_replica(snapshot_every_ops), machine_, StartFresh{})
    {
    }

    // Queues an op; it commits as soon as a Prepare's worth is queued, or at flush().
    void submit(const LockOp& op)
    {
        const ClientId client = 1 + (submitted_ % kClients);
        submitted_ += 1;
        step(Receive{.message = Request{.view = 0, .client_id = client,
                                        .request_number = ++request_numbers_[client - 1],
                                        .payload = encode_op(op)}});
    }
    void flush() { step(Flush{}); }
    // Submits, commits and returns the op's result.
    OpResult run(const LockOp& op)
    {
        submit(op);
        flush();
        auto decoded = decode_result(last_result_);
        VL_ASSERT(decoded.ok(), "the machine's results decode");
        return decoded.value();
    }

    // The step that asks for the measured snapshot; its bytes, or nullopt if it asked for none.
    std::optional<WriteSnapshot> tick_for_snapshot()
    {
        Effects effects;
        replica_.step(Tick{.now_ms = 1}, effects);
        for (Effect& effect : effects)
            if (auto* write = std::get_if<WriteSnapshot>(&effect)) return std::move(*write);
        return std::nullopt;
    }

    // The step in which the core learns that the measured snapshot is durable and drops the
    // log it covers.
    void snapshot_written(Op op) { step(SnapshotWritten{.op = op, .ok = true}); }

    Replica& replica() { return replica_; }
    LockMachine& machine() { return machine_; }
    uint64_t fill_snapshots() const { return fill_snapshots_; }

private:
    void step(const Input& input)
    {
        effects_.clear();
        replica_.step(input, effects_);
        std::optional<Op> written;
        for (Effect& effect : effects_) {
            if (const auto* executed = std::get_if<Executed>(&effect))
                last_result_ = executed->result;
            else if (const auto* write = std::get_if<WriteSnapshot>(&effect))
                written = write->op;
        }
        if (written) {  // acknowledged at once: only the last snapshot is measured
            fill_snapshots_ += 1;
            effects_.clear();
            replica_.step(SnapshotWritten{.op = *written, .ok = true}, effects_);
        }
    }

    LockMachine machine_;
    Replica replica_;
    Effects effects_;
    Bytes last_result_;
    uint64_t submitted_ = 0;
    RequestNumber request_numbers_[kClients] = {};
    uint64_t fill_snapshots_ = 0;
};

template <typename T>
T expect(const OpResult& result, const char* what)
{
    if (const auto* value = std::get_if<T>(&result)) return *value;
    std::fprintf(stderr, "vl_snapshot_bench: %s failed\n", what);
    std::exit(1);
}

struct Filled {
    uint64_t sessions = 0;
    uint64_t locks = 0;
    uint64_t waiters = 0;
};

Filled fill(Cell& cell, const Options& options)
{
    Filled filled;
    filled.sessions = std::max<uint64_t>(10, options.keys / options.keys_per_session);
    std::vector<SessionId> sessions;
    for (uint64_t i = 0; i < filled.sessions; i++) {
        const auto created = expect<CreateSessionResult>(
            cell.run(CreateSession{.ttl_ms = 60'000, .lock_delay_ms = 0,
                                   .name = padded("bench-", i, 16)}),
            "CreateSession");
        sessions.push_back(created.session);
    }
    for (uint64_t i = 0; i < options.keys; i++)
        cell.submit(Put{.key = padded("key/", i, options.key_bytes),
                        .value = value_bytes(i, options.value_bytes)});
    cell.flush();
    // Every session holds an exclusive lock of its own and one of 16 shared locks, and waits
    // (an hour) for the next session's exclusive lock: holders, waiters and timers all appear.
    for (uint64_t i = 0; i < sessions.size(); i++) {
        cell.submit(Acquire{.lock = padded("lock/", i, 32), .session = sessions[i]});
        cell.submit(Acquire{.lock = padded("shared/", i % 16, 32), .session = sessions[i],
                            .mode = LockMode::shared});
    }
    cell.flush();
    for (uint64_t i = 0; i < sessions.size(); i++)
        cell.submit(Acquire{.lock = padded("lock/", (i + 1) % sessions.size(), 32),
                            .session = sessions[i], .wait_ms = 3'600'000});
    cell.flush();
    const LockServiceState& state = cell.machine().state();
    VL_ASSERT(state.kv.size() == options.keys, "every key was put");
    filled.locks = state.locks.size();
    for (const auto& [name, lock] : state.locks) filled.waiters += lock.waiters.size();
    // The measured snapshot must have something new to cover: if the last op triggered one,
    // one more op (a KeepAlive) makes the Tick's snapshot due.
    if (cell.replica().commit() == cell.replica().log_base())
        (void)cell.run(KeepAlive{.session = sessions.front()});
    return filled;
}

int write_command(const Options& options)
{
    nlohmann::json report = {{"keys", options.keys}, {"key_bytes", options.key_bytes},
                             {"value_bytes", options.value_bytes}};
    std::optional<Cell> cell(std::in_place, options.snapshot_every_ops);
    auto started = Clock::now();
    const Filled filled = fill(*cell, options);
    report["fill_ms"] = ms_since(started);
    report["sessions"] = filled.sessions;
    report["locks"] = filled.locks;
    report["lock_waiters"] = filled.waiters;
    report["history_events"] = cell->machine().state().history.size();
    report["ops"] = cell->replica().commit();
    report["fill_snapshots"] = cell->fill_snapshots();
    report["rss_before_snapshot_bytes"] = rss_bytes();
    reset_peak_rss();

    // The replica's step that emits WriteSnapshot, then the fork: on the daemon's event loop.
    started = Clock::now();
    std::optional<WriteSnapshot> write = cell->tick_for_snapshot();
    report["step_ms"] = ms_since(started);
    if (!write) {
        std::fprintf(stderr, "vl_snapshot_bench: the Tick asked for no snapshot\n");
        return 1;
    }
    started = Clock::now();
    auto encoding = ForkedEncoding::start([&] { return cell->replica().encode_snapshot(); });
    report["fork_ms"] = ms_since(started);
    if (!encoding.ok()) {
        std::fprintf(stderr, "vl_snapshot_bench: %s\n", encoding.error().message().c_str());
        return 1;
    }
    auto encoded = encoding.value().finish();
    report["child_encode_ms"] = ms_since(started);
    if (!encoded.ok()) {
        std::fprintf(stderr, "vl_snapshot_bench: %s\n", encoded.error().message().c_str());
        return 1;
    }
    // What the loop paid before the child did it.
    started = Clock::now();
    write->snapshot = cell->replica().encode_snapshot();
    report["encode_ms"] = ms_since(started);
    if (encoded.value() != write->snapshot) {
        std::fprintf(stderr, "vl_snapshot_bench: the child encoded other bytes\n");
        return 1;
    }
    report["snapshot_op"] = write->op;
    report["snapshot_bytes"] = write->snapshot.size();
    report["state_digest"] = cell->machine().state_digest();
    // Its parts: the machine's own serialization (done once more, for the split).
    started = Clock::now();
    const size_t machine_bytes = cell->machine().snapshot().size();
    report["machine_snapshot_ms"] = ms_since(started);
    report["machine_snapshot_bytes"] = machine_bytes;
    // The shell's CRC for serving it (on the writer thread).
    started = Clock::now();
    const auto served = make_served_snapshot(write->op, std::move(write->snapshot));
    report["served_crc_ms"] = ms_since(started);

    // The writer thread's part: one RocksDB batch, synced.
    auto storage = Storage::open(options.dir, identity());
    if (!storage.ok()) {
        std::fprintf(stderr, "vl_snapshot_bench: %s\n", storage.error().message().c_str());
        return 1;
    }
    started = Clock::now();
    auto written = storage.value()->write_snapshot(served->op, served->bytes);
    report["write_ms"] = ms_since(started);
    if (!written.ok()) {
        std::fprintf(stderr, "vl_snapshot_bench: %s\n", written.error().message().c_str());
        return 1;
    }
    report["peak_rss_snapshot_bytes"] = peak_rss_bytes();
    // On the event loop again: the core drops the log the snapshot covers.
    report["log_entries_dropped"] = served->op - cell->replica().log_base();
    started = Clock::now();
    cell->snapshot_written(served->op);
    report["compact_ms"] = ms_since(started);
    started = Clock::now();
    storage.value().reset();  // closes the database, as a daemon that stops
    report["close_ms"] = ms_since(started);
    std::printf("%s\n", report.dump().c_str());
    return 0;
}

int restore_command(const Options& options)
{
    nlohmann::json report;
    report["rss_at_start_bytes"] = rss_bytes();
    auto started = Clock::now();
    auto storage = Storage::open(options.dir, identity());
    report["open_ms"] = ms_since(started);
    if (!storage.ok()) {
        std::fprintf(stderr, "vl_snapshot_bench: %s\n", storage.error().message().c_str());
        return 1;
    }
    started = Clock::now();
    auto loaded = storage.value()->load();
    report["load_ms"] = ms_since(started);
    if (!loaded.ok() || !loaded.value().snapshot_op) {
        std::fprintf(stderr, "vl_snapshot_bench: no snapshot loaded: %s\n",
                     loaded.ok() ? "none stored" : loaded.error().message().c_str());
        return 1;
    }
    StoredState& state = loaded.value();
    report["snapshot_bytes"] = state.snapshot.size();
    // voltlockd's open_data_directory: is it readable, and the copy it serves (with its CRC).
    started = Clock::now();
    const bool readable = decode_replica_snapshot(state.snapshot).has_value();
    const auto served = make_served_snapshot(*state.snapshot_op, state.snapshot);
    report["check_ms"] = ms_since(started);
    if (!readable) {
        std::fprintf(stderr, "vl_snapshot_bench: the stored snapshot does not decode\n");
        return 1;
    }
    LockMachine machine;
    started = Clock::now();
    Replica replica(single_replica(0), machine,
                    StartRestored{.nonce = 1, .snapshot = std::move(state.snapshot),
                                  .log = std::move(state.log), .view = state.view,
                                  .last_normal_view = state.last_normal_view});
    report["restore_ms"] = ms_since(started);
    if (replica.commit() != *state.snapshot_op || machine.last_applied_op() == 0) {
        std::fprintf(stderr, "vl_snapshot_bench: the replica refused the snapshot\n");
        return 1;
    }
    report["snapshot_op"] = *state.snapshot_op;
    report["keys"] = machine.state().kv.size();
    report["state_digest"] = machine.state_digest();
    report["peak_rss_restore_bytes"] = peak_rss_bytes();
    report["rss_after_restore_bytes"] = rss_bytes();
    std::printf("%s\n", report.dump().c_str());
    return 0;
}

bool parse_options(int argc, char** argv, Options& options)
{
    if (argc < 2) return false;
    options.command = argv[1];
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string arg = argv[i];
        const std::string value = argv[i + 1];
        if (arg == "--dir") options.dir = value;
        else if (arg == "--keys") options.keys = std::stoull(value);
        else if (arg == "--key-bytes") options.key_bytes = std::stoul(value);
        else if (arg == "--value-bytes") options.value_bytes = std::stoul(value);
        else if (arg == "--keys-per-session") options.keys_per_session = std::stoull(value);
        else if (arg == "--snapshot-every-ops") options.snapshot_every_ops = std::stoull(value);
        else return false;
    }
    if (argc % 2 != 0 || options.dir.empty()) return false;
    if (options.command == "write")
        return options.keys >= 1 && options.keys_per_session >= 1 && options.key_bytes >= 16 &&
               options.key_bytes <= kMaxNameBytes && options.value_bytes <= 1024;
    return options.command == "restore";
}

}  // namespace

int main(int argc, char** argv)
{
    Options options;
    if (!voltlock::bench::parse_command_line(argc, argv, options, parse_options, usage))
        return 2;
    if (options.command == "write" && access(options.dir.c_str(), F_OK) == 0) {
        std::fprintf(stderr, "vl_snapshot_bench: %s exists; write wants a new directory\n",
                     options.dir.c_str());
        return 2;
    }
    return options.command == "write" ? write_command(options) : restore_command(options);
}
