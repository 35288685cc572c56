// A C++ model of the XDP program, made of fast_path.h's functions and nothing else of its own
// but frame parsing. The differential tests feed it and the loaded program the same state and
// the same frames and require the same verdict, counter, output frame and map contents.
// The simulator can model a replica's kernel the same way.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "voltlock/fast_path.h"
#include "voltlock/wire.h"

namespace voltlock::bpf_test {

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
    std::vector<std::vector<uint8_t>> ring;
    bool ring_full = false;  // the next bpf_ringbuf_output fails
};

enum XdpAction : uint32_t { xdp_drop = 1, xdp_pass = 2, xdp_tx = 3 };  // enum xdp_action

struct XdpOutcome {
    uint32_t action = xdp_pass;
    uint32_t stat = VL_STAT_NONE;
    std::vector<uint8_t> frame;  // the frame afterwards
};

XdpOutcome model_xdp(KernelModel& model, std::span<const uint8_t> frame);

}  // namespace voltlock::bpf_test
