// Seeded random runs of a whole cell (TigerBeetle's VOPR, for our VR core). A seed fixes
// everything: the fault regime (how lossy, slow and partition- or crash-prone this run is, so
// that different seeds explore calm and harsh worlds), the schedule of partitions, crashes and
// restarts, the network's every decision and the clients' workload.
//
// A run: the clients invoke their operations under faults; then the faults stop and crashed
// replicas restart, every outstanding operation must complete (liveness), and the history must be
// linearizable. The cluster checks the safety invariants after every step (cluster.h).
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
    ReplicaIndex pick_victim(Cluster& cluster);

    FaultRegime regime_;
    Prng prng_;
    std::optional<uint64_t> heal_at_tick_;
    std::vector<std::optional<uint64_t>> restart_at_tick_;  // per replica, while crashed
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

struct SeedOptions {
    uint64_t seed = 1;
    uint8_t replica_count = 3;
    uint64_t ops = 1000;
    ElectrodeMode electrode = ElectrodeMode::mixed;
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
};

SeedResult run_seed(const SeedOptions& options);

}  // namespace voltlock::sim
