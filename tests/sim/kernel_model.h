// One replica's kernel in the simulation: the Electrode programs as tests/model/electrode_model.h
// runs them (fast_path.h's decisions, the same ones the bpf tier holds to the loaded programs),
// with their maps. The shell's half of the contract (docs/electrode.md; server/shell/node.cpp:
// reading the ring, draining it, feeding the kernel's acks to the core, broadcasting) is the
// cluster's, which drives the core; this class is what the kernel alone does and keeps.
//
// A crashed replica's kernel is thrown away with it: a restarted daemon loads the programs
// again with empty maps (docs/electrode.md: the maps are not pinned).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/types.h"
#include "electrode_model.h"
#include "voltlock/wire.h"

namespace voltlock::sim {

// Electrode on one replica.
struct ElectrodeOptions {
    bool attached = false;  // false: --electrode=off, or the programs failed to load
    uint32_t enabled = 0;   // VL_FAST_PATH_* bits
    uint32_t ring_bytes = 4u << 20;  // the ring buffer's size (vl_ring's max_entries)
};

// What the kernels did (every vl_stat counter, summed over replicas and incarnations) and what
// the shells did with it.
struct ElectrodeCounters {
    std::array<uint64_t, VL_STAT_COUNT> stats{};
    uint64_t ring_records_read = 0;   // records user space took from the ring
    uint64_t ring_records_given = 0;  // ... and gave to the core as kernel-acked Prepares
    uint64_t drains = 0;              // DrainKernel effects carried out
    uint64_t drained_records = 0;     // records the drains gave to the core
    uint64_t kernel_acks_fed = 0;     // vl_acked_ops entries fed to the leader's core
    uint64_t stalls = 0;              // processes descheduled while their kernels ran on
    uint64_t socket_drops = 0;        // datagrams XDP passed up that a full socket dropped
    uint64_t marked_acks_dropped = 0;  // ... of them quorum-marked PrepareOKs

    void add(const ElectrodeCounters& other);
};

class ReplicaKernel {
public:
    ReplicaKernel(uint32_t cluster_id, ReplicaIndex replica, uint8_t replica_count,
                  const ElectrodeOptions& options, ElectrodeCounters& counters);

    uint32_t enabled() const { return model_.state.enabled; }

    // User space writes vl_state (a KernelStateChanged effect), BPF_F_LOCK.
    void write_state(const vl_kernel_state& state) { model_.state.state = state; }
    const vl_kernel_state& state() const { return model_.state.state; }
    const vl_fast_ack_log& fast_ack_log() const { return model_.log; }

    // vl_xdp on a datagram to this replica's port from replica `from` (none: a client).
    // `wakeup`: it appended a record with BPF_RB_FORCE_WAKEUP (the ring was half full).
    electrode_model::XdpPayloadOutcome xdp(std::span<const uint8_t> payload,
                                           std::optional<ReplicaIndex> from, bool& wakeup);
    // vl_tc_egress on a datagram this replica sends to replica `to`.
    electrode_model::TcPayloadOutcome tc_egress(std::span<const uint8_t> payload, ReplicaIndex to);

    // ring_buffer__consume: every record, oldest first; the ring is empty afterwards.
    std::vector<std::vector<uint8_t>> consume_ring();
    const std::vector<std::vector<uint8_t>>& ring() const { return model_.ring; }

    // vl_acked_ops[r], read with BPF_F_LOCK.
    const vl_follower_ack& acked_op(ReplicaIndex r) const { return model_.acked.at(r); }

private:
    // bpf_ringbuf_output's accounting: an 8-byte header, the record, rounded up to 8 bytes.
    static uint64_t ring_space(size_t record_bytes) { return (record_bytes + 8 + 7) / 8 * 8; }

    electrode_model::KernelModel model_;
    uint64_t ring_bytes_ = 0;
    uint64_t ring_used_ = 0;
    ElectrodeCounters& counters_;
};

}  // namespace voltlock::sim
