// The bpf tier's harness: loads the skeleton voltlockd loads (voltlock/electrode.skel.h), runs its
// programs on packets with BPF_PROG_TEST_RUN, and reads and writes its maps.
//
// The kernel tests need root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN for a private network
// namespace). main.cpp probes once; without them every kernel test returns early through
// VL_REQUIRE_KERNEL() and the binary exits 77, which ctest reports as skipped. The tests run in
// a network namespace of their own (main.cpp unshares one), so clones and attached programs never
// touch the host's interfaces.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "core/message.h"
#include "voltlock/fast_path.h"
#include "voltlock/wire.h"

struct bpf_test_run_opts;  // libbpf's <bpf/bpf.h>

struct electrode_bpf;

namespace voltlock::bpf_test {

// ---- Availability --------------------------------------------------------------------------

// Why the kernel tests cannot run here; empty if they can. Set once by main().
const std::string& kernel_unavailable_reason();
void set_kernel_unavailable_reason(std::string reason);
// Kernel tests that returned early because of it.
int& kernel_tests_skipped();

#define VL_REQUIRE_KERNEL()                                                                       \
    do {                                                                                         \
        if (!::voltlock::bpf_test::kernel_unavailable_reason().empty()) {                        \
            ::voltlock::bpf_test::kernel_tests_skipped() += 1;                                   \
            return;                                                                              \
        }                                                                                        \
    } while (0)

// ---- A cell on paper -----------------------------------------------------------------------

inline constexpr uint32_t cluster_id = 0x00C0FFEE;
inline constexpr uint16_t replication_port = 7400;

struct Endpoint {
    std::array<uint8_t, 6> mac{};
    uint32_t ipv4 = 0;  // host byte order
    uint16_t port = 0;  // host byte order
};

// Replica r of a test cell: 10.0.0.(r+1):7400, MAC 02:00:00:00:00:(r+1). With `loopback`,
// 127.0.0.(r+1) and MAC zero (what lo expects), for tests that deliver over lo.
Endpoint replica_endpoint(uint8_t replica, bool loopback = false);
vl_peer peer_entry(const Endpoint& endpoint, bool resolved = true);

// ---- Frames --------------------------------------------------------------------------------

// Ethernet II + IPv4 (no options, DF, TTL 64, valid checksum) + UDP (valid checksum, or zero).
std::vector<uint8_t> udp_frame(const Endpoint& from, const Endpoint& to,
                               std::span<const uint8_t> payload, bool udp_checksum = true);
std::vector<uint8_t> message_frame(const Endpoint& from, const Endpoint& to,
                                   const Message& message, uint16_t flags = 0,
                                   const CellWire& wire = cluster_id);

struct ParsedFrame {
    std::array<uint8_t, 6> dst_mac{};
    std::array<uint8_t, 6> src_mac{};
    uint32_t src_ip = 0, dst_ip = 0;  // host byte order
    uint16_t src_port = 0, dst_port = 0;
    uint16_t ip_total_length = 0, udp_length = 0, udp_checksum = 0;
    bool ip_checksum_ok = false;
    bool udp_checksum_ok = false;  // zero (none) or correct
    std::vector<uint8_t> payload;
};
// Parses what udp_frame() builds; CHECK-fails and returns {} on anything else.
ParsedFrame parse_frame(std::span<const uint8_t> frame);

// A Prepare of `count` entries ending at `op` (payloads of `payload_bytes` each).
Prepare make_prepare(View view, ReplicaIndex leader, Op op, uint16_t count = 1,
                     Op commit = 0, size_t payload_bytes = 24);

// ---- The loaded programs -------------------------------------------------------------------

struct Config {
    uint8_t replica = 1;
    uint8_t replica_count = 3;
    uint32_t quorum_slot_mask = VL_QUORUM_SLOTS - 1;
    uint32_t ring_bytes = 0;  // 0: the object's VL_RING_BYTES
    bool loopback = false;    // peers at 127.0.0.x (see replica_endpoint)
    bool configure_peers = true;
};

struct RunResult {
    uint32_t retval = 0;
    std::vector<uint8_t> out;
    uint32_t mark = 0;  // TC: skb->mark afterwards
};

using Stats = std::array<uint64_t, VL_STAT_SLOTS>;

// One loaded skeleton. Construction REQUIREs that open and load (the verifier) succeed.
class Electrode {
public:
    explicit Electrode(const Config& config = {});
    ~Electrode();
    Electrode(const Electrode&) = delete;
    Electrode& operator=(const Electrode&) = delete;

    const Config& config() const { return config_; }
    electrode_bpf* skeleton() const { return skel_; }
    int xdp_fd() const;
    int tc_fd() const;

    // vl_state, written as user space will: whole value, BPF_F_LOCK.
    void set_state(const vl_kernel_state& state, uint32_t enabled = VL_FAST_PATHS_ALL);
    vl_state_value state() const;
    vl_fast_ack_log fast_ack_log() const;
    void set_fast_ack_log(const vl_fast_ack_log& log);
    void set_peer(uint8_t replica, const vl_peer& peer);
    // vl_mac_keys, as voltlockd writes it before attaching (default: none, the checksum).
    void set_mac_keys(const vl_mac_keys& keys);
    vl_peer peer(uint8_t replica) const;
    vl_quorum_slot slot(uint32_t index) const;
    vl_follower_ack acked(uint8_t replica) const;
    Stats stats() const;  // summed over CPUs

    // Every record in the ring buffer, oldest first; consumes them.
    std::vector<std::vector<uint8_t>> drain_ring();

    RunResult run_xdp(std::span<const uint8_t> frame) const;
    RunResult run_tc(std::span<const uint8_t> frame, uint32_t mark = 0, uint32_t ifindex = 0,
                     uint32_t gso_size = 0) const;

private:
    Config config_;
    electrode_bpf* skel_ = nullptr;
};

// The record a follower replica `self` of `count` mirrors in NORMAL status.
vl_kernel_state normal_state(View view, Op last_op, uint8_t self, uint8_t count,
                             bool fast_ack = true);

// Counter deltas around a block of runs.
class StatsDelta {
public:
    explicit StatsDelta(const Electrode& electrode);
    uint64_t operator[](uint32_t stat) const;  // change since construction
    // Sum of the exit counters of XDP (ingress) or TC (egress): one per packet.
    uint64_t xdp_exits() const;
    uint64_t tc_exits() const;
    // "name=delta ..." for every counter that changed, for failure messages.
    std::string describe() const;

private:
    const Electrode& electrode_;
    Stats before_;
};

// The options of one BPF_PROG_TEST_RUN of `frame`, run once, its output frame into `out` (sized
// by the caller: the program may grow the frame).
void set_test_run(bpf_test_run_opts& opts, std::span<const uint8_t> frame,
                  std::vector<uint8_t>& out);

bool is_xdp_exit(uint32_t stat);
bool is_tc_exit(uint32_t stat);
// How much the exit counters `is_exit` picks (is_xdp_exit or is_tc_exit) grew from `before` to
// `after`: one per packet the program ran on.
uint64_t exits_between(const Stats& before, const Stats& after, bool (*is_exit)(uint32_t));

// ---- Network namespace ---------------------------------------------------------------------

// Brings lo of the current (private) namespace up or down, and lets lo take 127.0.0.0/8
// packets that arrive without a route, as test-run clones do (route_localnet, accept_local).
void set_loopback_up(bool up);

// A UDP socket bound to `endpoint` (non-blocking); closed on destruction.
class UdpSocket {
public:
    explicit UdpSocket(const Endpoint& endpoint);
    ~UdpSocket();
    UdpSocket(const UdpSocket&) = delete;
    UdpSocket& operator=(const UdpSocket&) = delete;
    void send_to(const Endpoint& to, std::span<const uint8_t> payload) const;
    // Datagrams that arrive within `timeout_ms` of the last one (or of the call); returns as
    // soon as `expect` have arrived (waiting on for more would only prove there are none).
    std::vector<std::vector<uint8_t>> receive_all(int timeout_ms = 100,
                                                  size_t expect = SIZE_MAX) const;

private:
    int fd_ = -1;
};

}  // namespace voltlock::bpf_test
