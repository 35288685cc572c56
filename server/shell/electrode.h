// The Electrode fast paths from voltlockd's side (docs/electrode.md is the contract): the eBPF
// skeleton embedded in the binary, loaded with this cell's configuration, attached to the
// replication interface, and fed the core's kernel-state records. One object per process; its
// destructor detaches what it attached. XDP is attached through a bpf_link, so a crashed process
// leaves no XDP program behind; the TC filter is replaced by the next start.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shell/config.h"
#include "shell/result.h"
#include "voltlock/wire.h"

struct electrode_bpf;
struct ring_buffer;

namespace voltlock {

class Electrode {
public:
    // Loads and attaches the programs, with the fast paths in `enabled` (enum vl_fast_path).
    // The error says why in one line: no privileges, no BTF, no such interface, the verifier.
    static Result<std::unique_ptr<Electrode>> start(const DaemonConfig& config, uint32_t enabled);
    ~Electrode();
    Electrode(const Electrode&) = delete;
    Electrode& operator=(const Electrode&) = delete;

    // Mirrors the core's record into the kernel (BPF_F_LOCK): from when this returns, the kernel
    // acts on it (with fast_ack 0, it acknowledges nothing more).
    Result<Ok> write_state(const vl_kernel_state& state);
    // The ring buffer's epoll descriptor, for the event loop.
    int ring_fd() const;
    // Hands every record now in the ring (a Prepare datagram the kernel acknowledged) to
    // `on_record`.
    void consume(const std::function<void(std::span<const uint8_t>)>& on_record);
    // Re-reads the neighbour table into the peers map; true if every other replica resolves.
    bool refresh_peers();
    bool peers_resolved() const { return peers_resolved_; }
    // Broadcast by cloning is on and every other replica's MAC is known.
    bool can_broadcast() const;
    // The highest (view, op) each replica acknowledged, as the leader's XDP saw it.
    std::vector<vl_follower_ack> acked_ops() const;

    uint32_t enabled() const { return enabled_; }
    bool xdp_native() const { return xdp_native_; }
    nlohmann::json status() const;
    // The kernel's counters by wire.h's names, summed over CPUs.
    nlohmann::json counters() const;

private:
    Electrode(const DaemonConfig& config, uint32_t enabled);
    Result<Ok> load();
    Result<Ok> attach();
    void detach();

    const DaemonConfig config_;
    const uint32_t enabled_;
    int ifindex_ = 0;
    electrode_bpf* skeleton_ = nullptr;
    int xdp_link_fd_ = -1;
    bool xdp_native_ = false;
    bool tc_attached_ = false;
    bool tc_hook_created_ = false;
    ring_buffer* ring_ = nullptr;
    const std::function<void(std::span<const uint8_t>)>* on_record_ = nullptr;
    bool peers_resolved_ = false;
    vl_kernel_state last_state_{};
};

}  // namespace voltlock
