// The Electrode programs (bpf/electrode_xdp.bpf.c, bpf/electrode_tc.bpf.c) as C++, made of
// fast_path.h's functions and nothing of their own but reading a datagram and keeping the maps:
// the kernel modelled by the very code it runs. Shared by the bpf tier, whose differential tests
// hold this model to the loaded programs (tests/bpf/model.h adds Ethernet/IPv4/UDP framing), and
// by the simulator, which runs it on every replica's datagrams (tests/sim/kernel_model.h).
//
// Everything here works on a replication datagram's UDP payload, after the frame checks (IPv4,
// UDP, our port, lengths). What cannot be pure is reduced to what a caller can say: the source
// address is "the configured address of these replicas" (a bit set), the ring buffer is a list of
// records and a flag for "the next bpf_ringbuf_output fails", locks are absent (one caller at a
// time: the two-step append's second look therefore always agrees with the first, and the
// concurrent cases are the bpf tier's concurrency tests).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "voltlock/fast_path.h"
#include "voltlock/wire.h"

namespace voltlock::electrode_model {

struct KernelModel {
    // Configuration (the programs' rodata).
    uint16_t replication_port = 0;
    uint32_t cluster_id = 0;
    uint8_t replica = 0;
    uint8_t replica_count = 0;
    uint32_t quorum_slot_mask = VL_QUORUM_SLOTS - 1;

    // Maps.
    vl_state_value state{};
    vl_fast_ack_log log{};
    std::array<vl_peer, VL_MAX_REPLICAS> peers{};
    std::vector<vl_quorum_slot> slots = std::vector<vl_quorum_slot>(VL_QUORUM_SLOTS);
    std::array<vl_follower_ack, VL_MAX_REPLICAS> acked{};
    vl_mac_keys keys{};                      // count 0: a cell without a key
    std::vector<std::vector<uint8_t>> ring;  // records, oldest first
    bool ring_full = false;                  // the next bpf_ringbuf_output fails
};

enum XdpAction : uint32_t { xdp_drop = 1, xdp_pass = 2, xdp_tx = 3 };  // enum xdp_action

// What XDP did with one replication datagram.
struct XdpPayloadOutcome {
    uint32_t action = xdp_pass;
    uint32_t stat = VL_STAT_NONE;  // the exit counter
    // xdp_tx: the datagram sent back to where the input came from (a PrepareOK's header).
    // xdp_pass: the payload that goes up, rewritten if `rewritten` (then with UDP checksum 0).
    std::vector<uint8_t> payload;
    bool rewritten = false;
};

// vl_xdp on `payload` (the UDP payload, to our replication port), which came from the address
// configured for each replica r with bit r of `source_peers` set.
XdpPayloadOutcome model_xdp_payload(KernelModel& model, std::span<const uint8_t> payload,
                                    uint32_t source_peers);

// What TC egress did with one datagram this replica sends to the replication port of replica
// `to`.
struct TcPayloadOutcome {
    uint32_t stat = VL_STAT_NONE;  // the exit counter
    uint32_t armed_event = VL_STAT_NONE;  // VL_STAT_TC_ARMED, _REARMED, _ARM_STALE, or none
    uint32_t clone_to = 0;  // bit r: a copy goes to replica r too (VL_STAT_TC_BROADCAST)
};

// vl_tc_egress on `payload`, addressed to the configured peer `to` (not a clone of ours).
TcPayloadOutcome model_tc_payload(KernelModel& model, std::span<const uint8_t> payload,
                                  uint8_t to);

}  // namespace voltlock::electrode_model
