#include "kernel_model.h"

#include "core/assert.h"

namespace voltlock::sim {

void ElectrodeCounters::add(const ElectrodeCounters& other)
{
    for (size_t s = 0; s < stats.size(); s++) stats[s] += other.stats[s];
    ring_records_read += other.ring_records_read;
    ring_records_given += other.ring_records_given;
    drains += other.drains;
    drained_records += other.drained_records;
    kernel_acks_fed += other.kernel_acks_fed;
    stalls += other.stalls;
    socket_drops += other.socket_drops;
    marked_acks_dropped += other.marked_acks_dropped;
}

ReplicaKernel::ReplicaKernel(uint32_t cluster_id, ReplicaIndex replica, uint8_t replica_count,
                             const ElectrodeOptions& options, ElectrodeCounters& counters)
    : ring_bytes_(options.ring_bytes), counters_(counters)
{
    VL_ASSERT(options.attached, "a kernel model only where Electrode runs");
    model_.cluster_id = cluster_id;
    model_.replica = replica;
    model_.replica_count = replica_count;
    // Electrode::start: every replica's entry configured and resolved (the simulated network has
    // no neighbour table), and a zero state until the core's first record.
    for (ReplicaIndex r = 0; r < replica_count; r++)
        model_.peers[r].flags = VL_PEER_CONFIGURED | VL_PEER_RESOLVED;
    model_.state.enabled = options.enabled;
}

electrode_model::XdpPayloadOutcome ReplicaKernel::xdp(std::span<const uint8_t> payload,
                                                      std::optional<ReplicaIndex> from,
                                                      bool& wakeup)
{
    const uint64_t needed = ring_space(payload.size());
    model_.ring_full = ring_used_ + needed > ring_bytes_;
    const size_t records = model_.ring.size();
    electrode_model::XdpPayloadOutcome out =
        electrode_model::model_xdp_payload(model_, payload, from ? 1u << *from : 0u);
    // on_prepare(): BPF_RB_FORCE_WAKEUP once more than half the ring holds data, else
    // BPF_RB_NO_WAKEUP.
    wakeup = model_.ring.size() > records && ring_used_ > ring_bytes_ / 2;
    if (model_.ring.size() > records) ring_used_ += needed;
    counters_.stats[out.stat]++;
    return out;
}

electrode_model::TcPayloadOutcome ReplicaKernel::tc_egress(std::span<const uint8_t> payload,
                                                           ReplicaIndex to)
{
    electrode_model::TcPayloadOutcome out = electrode_model::model_tc_payload(model_, payload, to);
    counters_.stats[out.stat]++;
    if (out.armed_event != VL_STAT_NONE) counters_.stats[out.armed_event]++;
    if (out.clone_to != 0) counters_.stats[VL_STAT_TC_CLONES] += __builtin_popcount(out.clone_to);
    return out;
}

std::vector<std::vector<uint8_t>> ReplicaKernel::consume_ring()
{
    std::vector<std::vector<uint8_t>> records = std::move(model_.ring);
    model_.ring.clear();
    ring_used_ = 0;
    return records;
}

}  // namespace voltlock::sim
