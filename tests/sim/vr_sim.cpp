// vr_sim: runs seeded whole-cell simulations of the VR core and stops at the first violation,
// printing the command that replays it.
//
//   vr_sim [--seeds N] [--seed S] [--replicas R[,R...]] [--ops K] [--electrode on|off|mixed]
//          [--durability snapshot|sync|mixed] [--snapshot-every-ops N]
//          [--cell-crashes all|sync|off] [--verbose]
//
// Runs seeds S..S+N-1 (default S=1, N=1) for each replica count R (odd, 1..15; default 3), each
// with K client operations (default 1000). --electrode: which seeds run the Electrode fast paths,
// each replica's kernel modelled by fast_path.h (default mixed: a quarter of the seeds without).
// --durability: which seeds persist the log (default mixed: half of them). --snapshot-every-ops:
// how many committed ops between snapshots (default: 20..50, drawn per seed; 0: none by count,
// only on the timer half the seeds have).
// --cell-crashes: which seeds may lose power as a whole cell (default sync: those with durability
// sync; see simulation.h).
// --verbose traces every event (for one seed).
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "simulation.h"
#include "text.h"

namespace {

using voltlock::sim::CellCrashMode;
using voltlock::sim::DurabilityMode;
using voltlock::sim::ElectrodeCounters;
using voltlock::sim::ElectrodeMode;
using voltlock::sim::SeedOptions;
using voltlock::sim::SeedResult;
using voltlock::sim::strprintf;
using ull = unsigned long long;

constexpr uint64_t default_ops = 1000;

struct Arguments {
    uint64_t first_seed = 1;
    uint64_t seed_count = 1;
    std::vector<uint8_t> replica_counts{3};
    uint64_t ops = default_ops;
    ElectrodeMode electrode = ElectrodeMode::mixed;
    DurabilityMode durability = DurabilityMode::mixed;
    std::optional<uint64_t> snapshot_every_ops;
    CellCrashMode cell_crashes = CellCrashMode::sync;
    bool verbose = false;
};

void usage(const char* program)
{
    std::fprintf(stderr,
                 "usage: %s [--seeds N] [--seed S] [--replicas R[,R...]] [--ops K]\n"
                 "          [--electrode on|off|mixed] [--durability snapshot|sync|mixed]\n"
                 "          [--snapshot-every-ops N] [--cell-crashes all|sync|off] [--verbose]\n"
                 "  runs seeds S..S+N-1 (default S=1, N=1) for each replica count R (odd, "
                 "1..15; default 3),\n  each with K client operations (default %llu); "
                 "--electrode: which seeds run the Electrode\n  fast paths (default mixed: "
                 "a quarter of them without); --durability: which seeds persist\n  the log "
                 "(default mixed: half of them); --snapshot-every-ops: committed ops between\n"
                 "  snapshots (default 20..50, drawn per seed; 0: only on the timer half the seeds "
                 "have);\n  --cell-crashes: which seeds may lose power as a whole cell (default "
                 "sync: those with\n  durability sync)\n",
                 program, ull(default_ops));
}

std::optional<uint64_t> parse_number(const std::string& text)
{
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
    return std::strtoull(text.c_str(), nullptr, 10);
}

std::optional<std::vector<uint8_t>> parse_replica_counts(const std::string& text)
{
    std::vector<uint8_t> counts;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        const auto count = parse_number(text.substr(start, comma - start));
        if (!count || *count < 1 || *count > VL_MAX_REPLICAS || *count % 2 == 0)
            return std::nullopt;
        counts.push_back(static_cast<uint8_t>(*count));
        start = comma + 1;
    }
    return counts;
}

// Accepts "--name value" and "--name=value".
std::optional<Arguments> parse_arguments(int argc, char** argv)
{
    Arguments arguments;
    for (int i = 1; i < argc; i++) {
        std::string name = argv[i];
        std::optional<std::string> value;
        if (const size_t equals = name.find('='); equals != std::string::npos) {
            value = name.substr(equals + 1);
            name.resize(equals);
        }
        if (name == "--verbose" && !value) {
            arguments.verbose = true;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) return std::nullopt;
            value = argv[++i];
        }
        if (name == "--seeds") {
            const auto n = parse_number(*value);
            if (!n || *n == 0) return std::nullopt;
            arguments.seed_count = *n;
        } else if (name == "--seed") {
            const auto s = parse_number(*value);
            if (!s) return std::nullopt;
            arguments.first_seed = *s;
        } else if (name == "--replicas") {
            auto counts = parse_replica_counts(*value);
            if (!counts) return std::nullopt;
            arguments.replica_counts = std::move(*counts);
        } else if (name == "--electrode") {
            if (*value == "on")
                arguments.electrode = ElectrodeMode::on;
            else if (*value == "off")
                arguments.electrode = ElectrodeMode::off;
            else if (*value == "mixed")
                arguments.electrode = ElectrodeMode::mixed;
            else
                return std::nullopt;
        } else if (name == "--durability") {
            if (*value == "snapshot")
                arguments.durability = DurabilityMode::snapshot;
            else if (*value == "sync")
                arguments.durability = DurabilityMode::sync;
            else if (*value == "mixed")
                arguments.durability = DurabilityMode::mixed;
            else
                return std::nullopt;
        } else if (name == "--cell-crashes") {
            if (*value == "all")
                arguments.cell_crashes = CellCrashMode::all;
            else if (*value == "sync")
                arguments.cell_crashes = CellCrashMode::sync;
            else if (*value == "off")
                arguments.cell_crashes = CellCrashMode::off;
            else
                return std::nullopt;
        } else if (name == "--snapshot-every-ops") {
            const auto n = parse_number(*value);
            if (!n) return std::nullopt;
            arguments.snapshot_every_ops = *n;
        } else if (name == "--ops") {
            const auto k = parse_number(*value);
            if (!k) return std::nullopt;
            arguments.ops = *k;
        } else {
            return std::nullopt;
        }
    }
    return arguments;
}

// The command that replays one seed, kept where a signal handler can print it: a replica that
// finds itself inconsistent aborts (VL_ASSERT), and the seed must not be lost with it.
char reproduce_line[512];

void print_reproduce_line(int signal_number)
{
    const ssize_t written = write(STDERR_FILENO, reproduce_line, std::strlen(reproduce_line));
    (void)written;  // nothing more to do if stderr is gone
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
}

void set_reproduce_line(const char* program, const SeedOptions& seed)
{
    std::string options = seed.ops == default_ops ? "" : strprintf(" --ops=%llu", ull(seed.ops));
    if (seed.electrode != ElectrodeMode::mixed)
        options += strprintf(" --electrode=%s", electrode_mode_name(seed.electrode));
    if (seed.durability != DurabilityMode::mixed)
        options += strprintf(" --durability=%s", durability_mode_name(seed.durability));
    if (seed.snapshot_every_ops)
        options += strprintf(" --snapshot-every-ops=%llu", ull(*seed.snapshot_every_ops));
    if (seed.cell_crashes != CellCrashMode::sync)
        options += strprintf(" --cell-crashes=%s", cell_crash_mode_name(seed.cell_crashes));
    std::snprintf(reproduce_line, sizeof reproduce_line,
                  "reproduce with: %s --seed=%llu --replicas=%u%s (add --verbose to trace)\n",
                  program, ull(seed.seed), seed.replica_count, options.c_str());
}

std::string join(const std::vector<uint8_t>& counts)
{
    std::string text;
    for (uint8_t count : counts) text += (text.empty() ? "" : ",") + std::to_string(count);
    return text;
}

// What the summary line adds up over the seeds.
struct Totals {
    uint64_t seeds_run = 0;
    uint64_t committed_ops = 0;
    uint64_t completed_ops = 0;
    uint64_t view_changes = 0;
    uint64_t recoveries = 0;
    uint64_t state_transfers = 0;
    uint64_t corrupted_rejected = 0;
    double slowest_seed_ms = 0;
    std::string slowest_seed;
    uint64_t electrode_all_paths = 0;  // seeds with all three fast paths
    uint64_t electrode_some_paths = 0;
    ElectrodeCounters electrode;
    uint64_t sync_seeds = 0;
    voltlock::ReplicaCounters replica;
    voltlock::sim::Cluster::StorageCounters storage;
    voltlock::sim::Cluster::LeaseCounters leases;

    void add(const SeedOptions& seed, const SeedResult& result, double seed_ms)
    {
        seeds_run++;
        committed_ops += result.committed_ops;
        completed_ops += result.completed_ops;
        view_changes += result.views_established;
        recoveries += result.counters.recoveries;
        state_transfers += result.counters.state_transfers;
        corrupted_rejected += result.corrupted_rejected;
        if (result.electrode_paths == VL_FAST_PATHS_ALL)
            electrode_all_paths++;
        else if (result.electrode_paths != 0)
            electrode_some_paths++;
        electrode.add(result.electrode);
        sync_seeds += result.durability_sync ? 1 : 0;
        replica.snapshots_written += result.counters.snapshots_written;
        replica.snapshots_installed += result.counters.snapshots_installed;
        replica.snapshots_refused += result.counters.snapshots_refused;
        replica.cell_restarts += result.counters.cell_restarts;
        replica.bootstraps += result.counters.bootstraps;
        const auto& s = result.storage;
        storage.snapshot_writes_failed += s.snapshot_writes_failed;
        storage.snapshot_writes_lost += s.snapshot_writes_lost;
        storage.snapshot_fetches += s.snapshot_fetches;
        storage.snapshot_fetches_failed += s.snapshot_fetches_failed;
        storage.snapshot_fetches_corrupted += s.snapshot_fetches_corrupted;
        storage.restarts_from_disk += s.restarts_from_disk;
        storage.restarts_from_nothing += s.restarts_from_nothing;
        storage.cell_crashes += s.cell_crashes;
        storage.graceful_stops += s.graceful_stops;
        leases.leader_starts += result.leases.leader_starts;
        leases.grants += result.leases.grants;
        leases.deposed_grants += result.leases.deposed_grants;
        storage.cell_stops += s.cell_stops;
        storage.acknowledged_ops_lost += s.acknowledged_ops_lost;
        storage.committed_ops_lost += s.committed_ops_lost;
        if (seed_ms > slowest_seed_ms) {
            slowest_seed_ms = seed_ms;
            slowest_seed = strprintf("seed %llu x %u", ull(seed.seed), seed.replica_count);
        }
    }
};

void print_summary(const Arguments& arguments, const Totals& totals, double wall_s)
{
    std::printf("vr_sim: %llu seeds from %llu, replicas %s: %llu ops committed, "
                "%llu client ops completed, %llu view changes, %llu recoveries, "
                "%llu state transfers, %llu corrupted datagrams rejected; %.2f s wall "
                "(%.1f ms/seed, slowest %s: %.0f ms)\n",
                ull(totals.seeds_run), ull(arguments.first_seed),
                join(arguments.replica_counts).c_str(), ull(totals.committed_ops),
                ull(totals.completed_ops), ull(totals.view_changes), ull(totals.recoveries),
                ull(totals.state_transfers), ull(totals.corrupted_rejected), wall_s,
                1000 * wall_s / double(totals.seeds_run), totals.slowest_seed.c_str(),
                totals.slowest_seed_ms);
    // Proof that the fast paths ran: what the kernels (fast_path.h) and the shells did.
    const ElectrodeCounters& e = totals.electrode;
    const auto stat = [&](uint32_t s) { return ull(e.stats[s]); };
    std::printf("electrode %s: %llu seeds with all fast paths, %llu with some, %llu without; "
                "follower kernels appended %llu Prepares and re-acked %llu (passed up: %llu gap, "
                "%llu ring full, %llu fast ack off); shells gave the core %llu ring records, "
                "%llu of them in %llu drains; leader kernels completed %llu quorums, counted and "
                "dropped %llu acks, armed %llu slots (%llu marked acks lost to a full socket); "
                "shells fed %llu kernel acks; TC cloned %llu datagrams; %llu process stalls\n",
                electrode_mode_name(arguments.electrode), ull(totals.electrode_all_paths),
                ull(totals.electrode_some_paths),
                ull(totals.seeds_run - totals.electrode_all_paths - totals.electrode_some_paths),
                stat(VL_STAT_FA_APPENDED), stat(VL_STAT_FA_REACKED), stat(VL_STAT_FA_GAP),
                stat(VL_STAT_FA_RING_FULL), stat(VL_STAT_FA_DISABLED), ull(e.ring_records_given),
                ull(e.drained_records), ull(e.drains), stat(VL_STAT_Q_COMPLETE),
                ull(e.stats[VL_STAT_Q_COUNTED] + e.stats[VL_STAT_Q_LATE] +
                    e.stats[VL_STAT_Q_DUPLICATE]),
                stat(VL_STAT_TC_ARMED), ull(e.marked_acks_dropped), ull(e.kernel_acks_fed),
                stat(VL_STAT_TC_CLONES), ull(e.stalls));
    // Proof that snapshots, compaction, snapshot transfer and restarts from disk ran.
    const auto& s = totals.storage;
    std::printf("storage %s: %llu seeds sync, %llu snapshot; %llu snapshots written (%llu writes "
                "failed, %llu cut short by a crash), %llu installed from %llu fetches (%llu "
                "failed, %llu corrupted, %llu refused); %llu restarts from disk, %llu from "
                "nothing; %llu starts as a new cell's replica (no --recover); %llu graceful "
                "stops (%llu of the whole cell, which lose nothing); %llu whole-cell crashes "
                "(%llu cell restarts joined), %llu committed ops lost to them (%llu "
                "acknowledged), durability snapshot only\n",
                durability_mode_name(arguments.durability), ull(totals.sync_seeds),
                ull(totals.seeds_run - totals.sync_seeds), ull(totals.replica.snapshots_written),
                ull(s.snapshot_writes_failed), ull(s.snapshot_writes_lost),
                ull(totals.replica.snapshots_installed), ull(s.snapshot_fetches),
                ull(s.snapshot_fetches_failed), ull(s.snapshot_fetches_corrupted),
                ull(totals.replica.snapshots_refused), ull(s.restarts_from_disk),
                ull(s.restarts_from_nothing), ull(totals.replica.bootstraps),
                ull(s.graceful_stops), ull(s.cell_stops), ull(s.cell_crashes),
                ull(totals.replica.cell_restarts), ull(s.committed_ops_lost),
                ull(s.acknowledged_ops_lost));
    const auto& l = totals.leases;
    std::printf("leases: %llu leader starts checked against %llu ticks of leader leases held "
                "(%llu checks of a lease held while a later view had started), clocks within "
                "%.1f%%: no two holders\n",
                ull(l.leader_starts), ull(l.grants), ull(l.deposed_grants),
                static_cast<double>(voltlock::sim::ClusterOptions{}.max_clock_drift_ppm) / 1e4);
}

}  // namespace

int main(int argc, char** argv)
{
    const std::optional<Arguments> arguments = parse_arguments(argc, argv);
    if (!arguments) {
        usage(argv[0]);
        return 2;
    }
    // A trace must be complete up to the moment a replica aborts.
    if (arguments->verbose) std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::signal(SIGABRT, print_reproduce_line);
    std::signal(SIGSEGV, print_reproduce_line);

    using Clock = std::chrono::steady_clock;
    const auto started = Clock::now();
    Totals totals;
    for (uint8_t replica_count : arguments->replica_counts) {
        for (uint64_t i = 0; i < arguments->seed_count; i++) {
            const SeedOptions seed{.seed = arguments->first_seed + i,
                                   .replica_count = replica_count,
                                   .ops = arguments->ops,
                                   .electrode = arguments->electrode,
                                   .durability = arguments->durability,
                                   .snapshot_every_ops = arguments->snapshot_every_ops,
                                   .cell_crashes = arguments->cell_crashes,
                                   .verbose = arguments->verbose};
            set_reproduce_line(argv[0], seed);
            const auto seed_started = Clock::now();
            const SeedResult result = voltlock::sim::run_seed(seed);
            totals.add(seed, result,
                       std::chrono::duration<double, std::milli>(Clock::now() - seed_started)
                           .count());
            if (result.violation) {
                std::fprintf(stderr, "vr_sim: VIOLATION, seed %llu, %u replicas: %s\n%s",
                             ull(seed.seed), replica_count, result.violation->c_str(),
                             reproduce_line);
                return 1;
            }
        }
    }
    print_summary(*arguments, totals,
                  std::chrono::duration<double>(Clock::now() - started).count());
    return 0;
}
