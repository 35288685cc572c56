#include "simulation.h"

#include <algorithm>

#include "text.h"

namespace voltlock::sim {

namespace {

using ull = unsigned long long;

// Long enough for a harsh seed to get its operations through between partitions; a seed that
// still has operations left by then goes on to quiesce, where liveness is required.
constexpr uint64_t chaos_ticks_per_op = 100;
constexpr uint64_t chaos_min_ticks = 20'000;
// Once faults stop: time for restarted replicas to recover and fetch the log, for the view to
// settle and for every client's retry to get through.
constexpr uint64_t quiesce_ticks = 5'000;

// Draws a probability that is zero for `zero_share` of seeds, else uniform in [0, max).
double maybe_probability(Prng& prng, double zero_share, double max)
{
    return prng.chance(zero_share) ? 0 : prng.fraction() * max;
}

ClusterOptions draw_cluster_options(const SeedOptions& seed, Prng& prng)
{
    static constexpr double flush_policies[] = {0, 0.5, 1};
    return ClusterOptions{
        .seed = prng.next(),
        .replica_count = seed.replica_count,
        .cluster_id = static_cast<uint32_t>(prng.next()),
        // Small datagrams make state transfer and StartView split the log into many pieces.
        .max_message_bytes = prng.chance(0.25)
                                 ? static_cast<uint32_t>(prng.between(VL_MIN_MESSAGE_BYTES,
                                                                      VL_DEFAULT_MESSAGE_BYTES))
                                 : VL_DEFAULT_MESSAGE_BYTES,
        .client_count = prng.between(1, 8),
        .client_retry_ticks = static_cast<uint32_t>(prng.between(20, 80)),
        .max_think_ticks = static_cast<uint32_t>(prng.between(0, 5)),
        .write_fraction = 0.3 + 0.6 * prng.fraction(),
        .max_value_padding = static_cast<uint32_t>(prng.between(0, 64)),
        .op_budget = seed.ops,
        .flush_after_each_message = flush_policies[prng.below(3)],
        .start_blank = prng.chance(0.3),
        .verbose = seed.verbose,
    };
}

}  // namespace

const char* cell_crash_mode_name(CellCrashMode mode)
{
    switch (mode) {
    case CellCrashMode::off: return "off";
    case CellCrashMode::sync: return "sync";
    case CellCrashMode::all: return "all";
    }
    return "unknown";
}

const char* durability_mode_name(DurabilityMode mode)
{
    switch (mode) {
    case DurabilityMode::snapshot: return "snapshot";
    case DurabilityMode::sync: return "sync";
    case DurabilityMode::mixed: return "mixed";
    }
    return "unknown";
}

void draw_storage(DurabilityMode mode, std::optional<uint64_t> snapshot_every_ops, Prng& prng,
                  ClusterOptions& options)
{
    options.durability_sync = mode == DurabilityMode::sync ||
                              (mode == DurabilityMode::mixed && prng.chance(0.5));
    // Often, so that compaction and state transfer by snapshot happen all the time; and on a
    // timer on some seeds, which snapshots whatever was committed since.
    options.snapshot_every_ops = snapshot_every_ops.value_or(prng.between(20, 50));
    options.snapshot_every_ticks = prng.chance(0.5) ? 0 : prng.between(50, 500);
    options.max_snapshot_write_ticks = static_cast<uint32_t>(prng.between(0, 20));
    options.snapshot_write_failure = maybe_probability(prng, 0.5, 0.2);
    options.max_snapshot_fetch_ticks = static_cast<uint32_t>(prng.between(1, 30));
    options.snapshot_fetch_failure = maybe_probability(prng, 0.5, 0.3);
    options.snapshot_fetch_corruption = maybe_probability(prng, 0.6, 0.1);
}

std::string describe_storage(const ClusterOptions& options)
{
    return strprintf("durability %s, snapshot every %llu ops / %llu ticks, writes 0..%u ticks "
                     "(failing %.3f), fetches 1..%u ticks (failing %.3f, corrupt %.3f)",
                     options.durability_sync ? "sync" : "snapshot",
                     ull(options.snapshot_every_ops), ull(options.snapshot_every_ticks),
                     options.max_snapshot_write_ticks, options.snapshot_write_failure,
                     options.max_snapshot_fetch_ticks, options.snapshot_fetch_failure,
                     options.snapshot_fetch_corruption);
}

const char* electrode_mode_name(ElectrodeMode mode)
{
    switch (mode) {
    case ElectrodeMode::off: return "off";
    case ElectrodeMode::on: return "on";
    case ElectrodeMode::mixed: return "mixed";
    }
    return "unknown";
}

void draw_electrode(ElectrodeMode mode, Prng& prng, ClusterOptions& options)
{
    if (mode == ElectrodeMode::off) return;
    const double draw = prng.fraction();
    if (mode == ElectrodeMode::mixed && draw < 0.25) return;
    const bool all_paths = draw < (mode == ElectrodeMode::mixed ? 0.75 : 2.0 / 3.0);
    // Otherwise one of the six non-empty proper subsets of fast ack, quorum and broadcast.
    const auto enabled = all_paths ? VL_FAST_PATHS_ALL
                                   : static_cast<uint32_t>(prng.between(1, VL_FAST_PATHS_ALL - 1));
    // Now and then one replica's programs fail to load and it runs VR in user space alone.
    const uint8_t n = options.replica_count;
    const uint32_t without = prng.chance(0.1) ? static_cast<uint32_t>(prng.below(n)) : n;
    // A small ring fills up (room for one datagram at least): Prepares go up the slow path.
    const auto ring_bytes =
        prng.chance(0.25)
            ? static_cast<uint32_t>(prng.between(options.max_message_bytes + 16, 8 << 10))
            : 4u << 20;
    options.electrode.assign(n, ElectrodeOptions{.attached = true,
                                                 .enabled = enabled,
                                                 .ring_bytes = ring_bytes});
    if (without < n) options.electrode[without].attached = false;
    options.ring_wakeup_ticks = static_cast<uint32_t>(prng.between(0, 2));
    // Descheduled processes: their kernels acknowledge for them meanwhile.
    options.stall_per_tick = maybe_probability(prng, 0.3, 0.003);
    options.max_stall_ticks = static_cast<uint32_t>(prng.between(1, 30));
    options.socket_drop = maybe_probability(prng, 0.5, 0.05);
}

std::string describe_electrode(const ClusterOptions& options)
{
    if (options.electrode.empty()) return "electrode off";
    std::string text = "electrode";
    const ElectrodeOptions& any = options.electrode[0];  // paths and ring: the same everywhere
    if (any.enabled & VL_FAST_PATH_FAST_ACK) text += " fast-ack";
    if (any.enabled & VL_FAST_PATH_QUORUM) text += " quorum";
    if (any.enabled & VL_FAST_PATH_BROADCAST) text += " broadcast";
    for (ReplicaIndex r = 0; r < options.electrode.size(); r++)
        if (!options.electrode[r].attached) text += strprintf(" (not on r%u)", r);
    return text + strprintf(", %u-byte ring (wakeup after 0..%u ticks), stalls/tick=%.4f(1..%u), "
                            "socket drops %.3f",
                            any.ring_bytes, options.ring_wakeup_ticks, options.stall_per_tick,
                            options.max_stall_ticks, options.socket_drop);
}

FaultRegime draw_fault_regime(Prng& prng)
{
    FaultRegime regime;
    if (prng.chance(0.15)) {  // a calm world: prompt, reliable, no partitions or crashes
        regime.network.max_delay_ticks = static_cast<uint32_t>(prng.between(1, 2));
        return regime;
    }
    regime.network = NetworkFaults{
        .loss = maybe_probability(prng, 0.3, 0.15),
        .duplication = maybe_probability(prng, 0.4, 0.08),
        .corruption = maybe_probability(prng, 0.5, 0.01),
        .max_delay_ticks = static_cast<uint32_t>(prng.between(1, 6)),
        .slow_fraction = maybe_probability(prng, 0.5, 0.05),
        .slow_delay_ticks = static_cast<uint32_t>(prng.between(10, 60)),
    };
    regime.partition_per_tick = maybe_probability(prng, 0.3, 0.01);
    regime.max_partition_ticks = static_cast<uint32_t>(prng.between(20, 500));
    regime.one_way_fraction = prng.fraction() * 0.5;
    regime.crash_per_tick = maybe_probability(prng, 0.3, 0.005);
    regime.max_down_ticks = static_cast<uint32_t>(prng.between(10, 400));
    regime.leader_victim_fraction = prng.fraction();
    regime.lose_disk_fraction = prng.fraction() * 0.5;
    regime.cell_crash_per_tick = maybe_probability(prng, 0.6, 0.0005);
    regime.max_cell_down_ticks = static_cast<uint32_t>(prng.between(1, 100));
    regime.graceful_fraction = prng.fraction() * 0.5;
    regime.cell_stop_per_tick = maybe_probability(prng, 0.5, 0.0005);
    return regime;
}

std::string describe(const FaultRegime& regime)
{
    const NetworkFaults& n = regime.network;
    return strprintf("loss=%.3f dup=%.3f corrupt=%.4f delay=1..%u slow=%.3f(1..%u) "
                     "partition/tick=%.4f(1..%u, one-way %.2f) crash/tick=%.4f(1..%u) "
                     "leader-victim=%.2f disk-lost=%.2f cell-crash/tick=%.5f(1..%u) "
                     "graceful=%.2f cell-stop/tick=%.5f",
                     n.loss, n.duplication, n.corruption, n.max_delay_ticks, n.slow_fraction,
                     n.slow_delay_ticks, regime.partition_per_tick, regime.max_partition_ticks,
                     regime.one_way_fraction, regime.crash_per_tick, regime.max_down_ticks,
                     regime.leader_victim_fraction, regime.lose_disk_fraction,
                     regime.cell_crash_per_tick, regime.max_cell_down_ticks,
                     regime.graceful_fraction, regime.cell_stop_per_tick);
}

// ---- FaultScheduler ---------------------------------------------------------------------------

FaultScheduler::FaultScheduler(const FaultRegime& regime, uint8_t replica_count, Prng prng)
    : regime_(regime),
      prng_(prng),
      restart_at_tick_(replica_count),
      restart_from_disk_(replica_count, false)
{
}

void FaultScheduler::on_tick(Cluster& cluster)
{
    maybe_partition(cluster);
    for (ReplicaIndex r = 0; r < cluster.replica_count(); r++) {
        if (restart_at_tick_[r] && cluster.now_tick() >= *restart_at_tick_[r]) {
            restart_at_tick_[r].reset();
            if (restart_from_disk_[r] || !prng_.chance(regime_.lose_disk_fraction))
                cluster.restart_from_disk(r);
            else
                cluster.restart(r);
            restart_from_disk_[r] = false;
        }
    }
    maybe_crash(cluster);
}

void FaultScheduler::maybe_partition(Cluster& cluster)
{
    if (heal_at_tick_) {
        if (cluster.now_tick() < *heal_at_tick_) return;
        heal_at_tick_.reset();
        cluster.network().heal();
        cluster.trace("fault: partition healed");
        return;
    }
    if (cluster.replica_count() < 2 || !prng_.chance(regime_.partition_per_tick)) return;
    if (prng_.chance(regime_.one_way_fraction))
        start_one_way_partition(cluster);
    else
        start_symmetric_partition(cluster);
    heal_at_tick_ = cluster.now_tick() + prng_.between(1, regime_.max_partition_ticks);
}

void FaultScheduler::start_symmetric_partition(Cluster& cluster)
{
    const uint8_t n = cluster.replica_count();
    std::vector<uint8_t> group_of(n, 0);
    const std::optional<ReplicaIndex> leader = cluster.leader();
    if (leader && prng_.chance(regime_.leader_victim_fraction)) {
        group_of[*leader] = 1;
    } else {
        for (uint8_t& group : group_of) group = static_cast<uint8_t>(prng_.below(2));
        // Two non-empty groups: if the draw put everyone together, move one replica over.
        if (std::count(group_of.begin(), group_of.end(), group_of[0]) == n)
            group_of[prng_.below(n)] ^= 1;
    }
    cluster.network().partition(group_of);
    std::string groups;
    for (uint8_t group : group_of) groups += static_cast<char>('A' + group);
    cluster.trace("fault: partition, groups by replica %s", groups.c_str());
}

// One replica can hear but not speak, or speak but not hear: the asymmetric failures that trip
// timeouts (a leader whose heartbeats arrive but whose PrepareOKs never come back).
void FaultScheduler::start_one_way_partition(Cluster& cluster)
{
    const uint8_t n = cluster.replica_count();
    const std::optional<ReplicaIndex> leader = cluster.leader();
    const auto victim = leader && prng_.chance(regime_.leader_victim_fraction)
                            ? *leader
                            : static_cast<ReplicaIndex>(prng_.below(n));
    const bool mute = prng_.chance(0.5);
    for (ReplicaIndex other = 0; other < n; other++) {
        if (other == victim) continue;
        if (mute)
            cluster.network().block(victim, other);
        else
            cluster.network().block(other, victim);
    }
    cluster.trace("fault: one-way partition, r%u can %s", victim,
                  mute ? "hear but not speak" : "speak but not hear");
}

void FaultScheduler::maybe_crash(Cluster& cluster)
{
    if (cluster.down_count() == 0 && prng_.chance(regime_.cell_crash_per_tick))
        return crash_cell(cluster);
    if (cluster.down_count() == 0 && prng_.chance(regime_.cell_stop_per_tick)) {
        cluster.stop_cell();  // an operator's planned restart: nothing acknowledged is lost
        return restart_cell_later(cluster);
    }
    if (cluster.down_count() >= cluster.max_faulty() || !prng_.chance(regime_.crash_per_tick))
        return;
    const ReplicaIndex victim = pick_victim(cluster);
    if (prng_.chance(regime_.graceful_fraction)) {
        cluster.stop(victim);
        restart_from_disk_[victim] = true;
    } else {
        cluster.crash(victim);
    }
    restart_at_tick_[victim] = cluster.now_tick() + prng_.between(1, regime_.max_down_ticks);
}

// A power cut: every replica at once; they come back within a few ticks of each other, each
// from its data directory.
void FaultScheduler::crash_cell(Cluster& cluster)
{
    cluster.crash_cell();
    restart_cell_later(cluster);
}

void FaultScheduler::restart_cell_later(Cluster& cluster)
{
    const uint64_t back = cluster.now_tick() + prng_.between(1, regime_.max_cell_down_ticks);
    for (ReplicaIndex r = 0; r < cluster.replica_count(); r++) {
        restart_at_tick_[r] = back + prng_.below(4);
        restart_from_disk_[r] = true;
    }
}

ReplicaIndex FaultScheduler::pick_victim(Cluster& cluster)
{
    const std::optional<ReplicaIndex> leader = cluster.leader();
    if (leader && prng_.chance(regime_.leader_victim_fraction)) return *leader;
    std::vector<ReplicaIndex> up;
    for (ReplicaIndex r = 0; r < cluster.replica_count(); r++)
        if (!cluster.down(r)) up.push_back(r);
    return up[prng_.below(up.size())];
}

// ---- One seed ---------------------------------------------------------------------------------

SeedResult run_seed(const SeedOptions& options)
{
    Prng prng(options.seed);
    FaultRegime regime = draw_fault_regime(prng);
    ClusterOptions cluster_options = draw_cluster_options(options, prng);
    cluster_options.faults = regime.network;
    Prng scheduler_prng = prng.fork();
    // Drawn last, so that a seed's world without Electrode is the same in every mode.
    Prng storage_prng = prng.fork();
    draw_electrode(options.electrode, prng, cluster_options);
    draw_storage(options.durability, options.snapshot_every_ops, storage_prng, cluster_options);
    cluster_options.lose_disk_on_restart = regime.lose_disk_fraction;
    // Every other seed's clocks as far off real time as the lease rule allows (docs/leases.md).
    cluster_options.clocks_at_drift_bound = options.seed % 2 == 0;
    if (options.cell_crashes == CellCrashMode::off ||
        (options.cell_crashes == CellCrashMode::sync && !cluster_options.durability_sync))
        regime.cell_crash_per_tick = 0;
    if (options.cell_crashes == CellCrashMode::off) regime.cell_stop_per_tick = 0;
    Cluster cluster(cluster_options);
    FaultScheduler scheduler(regime, options.replica_count, scheduler_prng);
    cluster.trace("seed %llu: %u replicas, %zu clients, %u-byte datagrams; %s; %s; %s",
                  ull(options.seed), options.replica_count, cluster_options.client_count,
                  cluster_options.max_message_bytes, describe(regime).c_str(),
                  describe_electrode(cluster_options).c_str(),
                  describe_storage(cluster_options).c_str());

    const uint64_t chaos_ticks = std::max(chaos_min_ticks, chaos_ticks_per_op * options.ops);
    while (!cluster.violation() && cluster.ops_remaining() > 0 &&
           cluster.now_tick() < chaos_ticks) {
        scheduler.on_tick(cluster);
        cluster.run_tick();
    }
    cluster.quiesce(quiesce_ticks);
    cluster.check_linearizability();
    const NetworkStats& network = cluster.network().stats();
    cluster.trace("seed %llu done: %llu datagrams sent, %llu lost, %llu cut by partitions, "
                  "%llu duplicated, %llu corrupted",
                  ull(options.seed), ull(network.sent), ull(network.lost),
                  ull(network.cut_by_partition), ull(network.duplicated), ull(network.corrupted));

    return SeedResult{
        .violation = cluster.violation(),
        .ticks = cluster.now_tick(),
        .committed_ops = cluster.committed().size(),
        .completed_ops = cluster.completed_ops(),
        .views_established = cluster.views_established(),
        .corrupted_rejected = cluster.corrupted_rejected(),
        .counters = cluster.total_counters(),
        .electrode_paths = cluster_options.electrode.empty()
                               ? 0
                               : cluster_options.electrode[0].enabled,
        .electrode = cluster.electrode_counters(),
        .durability_sync = cluster_options.durability_sync,
        .storage = cluster.storage_counters(),
        .leases = cluster.lease_counters(),
    };
}

}  // namespace voltlock::sim
