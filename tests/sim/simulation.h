// Seeded random runs of a whole cell (TigerBeetle's VOPR, for our VR core). A seed fixes
// everything: the fault regime (how lossy, slow and partition- or crash-prone this run is, so
// that different seeds explore calm and harsh worlds), the schedule of partitions, crashes and
// restarts, the network's every decision and the clients' workload.
//
// A run: the clients invoke their operations under faults; then the faults stop and crashed
// replicas restart, every outstanding operation must complete (liveness), and the history must be
// linearizable. The cluster checks the safety invariants after every step (cluster.h).
//
// Every seed snapshots and compacts its log often (every 20..50 ops unless told otherwise), so
// that state transfer by snapshot happens all the time, and runs one of the two durability
// modes: snapshot (only snapshots are written) or sync (the log and view too). Crashed replicas
// restart from their data directory, or now and then from nothing (the disk lost); some seeds
// crash the whole cell at once and restart it from the data directories.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cluster.h"

namespace voltlock::sim {

// How often this seed's world goes wrong.
struct FaultRegime {
    NetworkFaults network;
    double partition_per_tick = 0;       // chance a partition starts, while none is active
    uint32_t max_partition_ticks = 0;    // it heals after 1..this many ticks
    double one_way_fraction = 0;         // of partitions, the share that cut one direction only
    double crash_per_tick = 0;           // chance a replica crashes, while fewer than f are down
    uint32_t max_down_ticks = 0;         // a crashed replica restarts after 1..this many ticks
    double leader_victim_fraction = 0;   // of partitions and crashes, the share aimed at the leader
    double lose_disk_fraction = 0;       // of restarts, the share from nothing (the disk lost)
    double cell_crash_per_tick = 0;      // chance the whole cell crashes, while none is down
    uint32_t max_cell_down_ticks = 0;    // it restarts, from disk, after 1..this many ticks
    double graceful_fraction = 0;        // of crashes, the share that are graceful stops
    double cell_stop_per_tick = 0;       // chance the whole cell stops gracefully (all seeds)
};

FaultRegime draw_fault_regime(Prng& prng);
std::string describe(const FaultRegime& regime);

// Starts and heals partitions, crashes and restarts replicas, as the regime says, never taking
// more than f replicas down at once (VR's failure model; a recovering replica counts as down).
class FaultScheduler {
public:
    FaultScheduler(const FaultRegime& regime, uint8_t replica_count, Prng prng);
    // Called before each tick.
    void on_tick(Cluster& cluster);

private:
    void maybe_partition(Cluster& cluster);
    void start_symmetric_partition(Cluster& cluster);
    void start_one_way_partition(Cluster& cluster);
    void maybe_crash(Cluster& cluster);
    void crash_cell(Cluster& cluster);
    void restart_cell_later(Cluster& cluster);
    ReplicaIndex pick_victim(Cluster& cluster);

    FaultRegime regime_;
    Prng prng_;
    std::optional<uint64_t> heal_at_tick_;
    std::vector<std::optional<uint64_t>> restart_at_tick_;  // per replica, while crashed
    std::vector<bool> restart_from_disk_;  // per replica: a whole-cell crash's restart
};

// Which seeds run the Electrode fast paths (docs/electrode.md), modelled by fast_path.h.
enum class ElectrodeMode : uint8_t {
    off,    // none: VR in user space only
    on,     // every seed: all three paths on most, a subset on the rest
    mixed,  // a quarter of the seeds off, the rest as `on`
};
const char* electrode_mode_name(ElectrodeMode mode);

// This seed's Electrode: on which replicas, which paths, how big the ring, how slow the shell
// to read it.
void draw_electrode(ElectrodeMode mode, Prng& prng, ClusterOptions& options);
std::string describe_electrode(const ClusterOptions& options);

// Which seeds persist the log (ReplicaConfig::persist_log).
enum class DurabilityMode : uint8_t {
    snapshot,  // only snapshots: a whole-cell crash may lose what came after the newest
    sync,      // the log and the view too: nothing acknowledged is ever lost
    mixed,     // half the seeds each
};
const char* durability_mode_name(DurabilityMode mode);

// Which seeds may crash the whole cell at once (a share of them do, now and then). The default
// is sync: with durability snapshot, the core does not yet restart a whole cell safely (a
// replica whose restored state is newer than the state the restart selected goes on with it,
// and its state machine diverges; vr_sim --cell-crashes=all --durability=snapshot finds it in
// about 1 seed in 30); `all` runs those seeds too.
enum class CellCrashMode : uint8_t {
    off,
    sync,  // only seeds with durability sync
    all,
};
const char* cell_crash_mode_name(CellCrashMode mode);

// This seed's snapshots, durability and storage faults.
void draw_storage(DurabilityMode mode, std::optional<uint64_t> snapshot_every_ops, Prng& prng,
                  ClusterOptions& options);
std::string describe_storage(const ClusterOptions& options);

struct SeedOptions {
    uint64_t seed = 1;
    uint8_t replica_count = 3;
    uint64_t ops = 1000;
    ElectrodeMode electrode = ElectrodeMode::mixed;
    DurabilityMode durability = DurabilityMode::mixed;
    std::optional<uint64_t> snapshot_every_ops;  // none: 20..50, drawn per seed; 0: by count, never
    CellCrashMode cell_crashes = CellCrashMode::sync;
    bool verbose = false;
};

struct SeedResult {
    std::optional<std::string> violation;
    uint64_t ticks = 0;
    uint64_t committed_ops = 0;
    uint64_t completed_ops = 0;
    uint64_t views_established = 0;
    uint64_t corrupted_rejected = 0;
    ReplicaCounters counters;
    uint32_t electrode_paths = 0;  // the VL_FAST_PATH_* bits this seed ran (0: Electrode off)
    ElectrodeCounters electrode;
    bool durability_sync = false;
    Cluster::StorageCounters storage;
    Cluster::LeaseCounters leases;
};

SeedResult run_seed(const SeedOptions& options);

}  // namespace voltlock::sim
