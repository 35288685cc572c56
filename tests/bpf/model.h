// A C++ model of the XDP program: the shared payload-level model (tests/model/electrode_model.h,
// made of fast_path.h's functions) with the program's frame parsing in front of it. The
// differential tests feed it and the loaded program the same state and the same frames and
// require the same verdict, counter, output frame and map contents. The simulator runs the same
// payload-level model on every replica's datagrams.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "electrode_model.h"

namespace voltlock::bpf_test {

using electrode_model::KernelModel;
using electrode_model::XdpAction;
using electrode_model::xdp_drop;
using electrode_model::xdp_pass;
using electrode_model::xdp_tx;

struct XdpOutcome {
    uint32_t action = xdp_pass;
    uint32_t stat = VL_STAT_NONE;
    std::vector<uint8_t> frame;  // the frame afterwards
};

XdpOutcome model_xdp(KernelModel& model, std::span<const uint8_t> frame);

}  // namespace voltlock::bpf_test
