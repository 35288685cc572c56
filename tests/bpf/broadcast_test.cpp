// Broadcast on TC egress (Electrode §4.1). Test-run shows the decision, the counters and the
// restored original; with lo up in the test's private network namespace, the clones that
// bpf_clone_redirect hands to lo are delivered to sockets, which proves their addresses and
// checksums (the receiving stack verifies both). The last cases attach the programs to lo for
// real: a socket's send goes through TC egress, the clones come back through it (recursion
// guard), and an XDP fast ack travels back to the leader's socket.
#include <doctest/doctest.h>

#include <array>

#include <linux/bpf.h>
#include <linux/if_link.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "harness.h"

using namespace voltlock;
using namespace voltlock::bpf_test;

namespace {

constexpr uint8_t leader = 0;
constexpr uint32_t lo_ifindex = 1;

struct LoopbackCell {
    explicit LoopbackCell(uint8_t n, uint8_t self = leader)
        : count(n),
          electrode(Config{.replica = self, .replica_count = n, .loopback = true})
    {
        set_loopback_up(true);
        electrode.set_state(normal_state(n, 0, self, n));  // view n: led by replica 0
        for (uint8_t r = 0; r < n; r++)
            sockets.push_back(std::make_unique<UdpSocket>(replica_endpoint(r, true)));
    }
    ~LoopbackCell() { set_loopback_up(false); }

    Endpoint endpoint(uint8_t r) const { return replica_endpoint(r, true); }

    std::vector<uint8_t> frame(const Message& m, uint16_t flags, uint8_t to = 1) const
    {
        return message_frame(endpoint(leader), endpoint(to), m, flags);
    }

    uint8_t count;
    Electrode electrode;
    std::vector<std::unique_ptr<UdpSocket>> sockets;
};

std::vector<uint8_t> payload_of(std::span<const uint8_t> frame)
{
    return {frame.begin() + 42, frame.end()};
}

// Attaches a program to lo for the scope: TC egress (clsact) or XDP in generic mode.
class TcEgress {
public:
    TcEgress(int prog_fd)
    {
        hook_.sz = sizeof hook_;
        hook_.ifindex = lo_ifindex;
        hook_.attach_point = BPF_TC_EGRESS;
        const int err = bpf_tc_hook_create(&hook_);
        REQUIRE_MESSAGE((err == 0 || err == -EEXIST), "clsact on lo: " << std::strerror(-err));
        opts_.sz = sizeof opts_;
        opts_.prog_fd = prog_fd;
        REQUIRE(bpf_tc_attach(&hook_, &opts_) == 0);
    }
    ~TcEgress()
    {
        hook_.attach_point = static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS);
        bpf_tc_hook_destroy(&hook_);
    }

private:
    bpf_tc_hook hook_{};
    bpf_tc_opts opts_{};
};

class GenericXdp {
public:
    explicit GenericXdp(int prog_fd)
    {
        const int err = bpf_xdp_attach(lo_ifindex, prog_fd, XDP_FLAGS_SKB_MODE, nullptr);
        REQUIRE_MESSAGE(err == 0, "generic XDP on lo: " << std::strerror(-err));
    }
    ~GenericXdp() { bpf_xdp_detach(lo_ifindex, XDP_FLAGS_SKB_MODE, nullptr); }
};

}  // namespace

TEST_CASE("broadcast: a marked Prepare or Commit is cloned to every other peer, checksums valid")
{
    VL_REQUIRE_KERNEL();
    for (const uint8_t n : std::array<uint8_t, 3>{3, 5, 7}) {
        CAPTURE(n);
        LoopbackCell cell(n);
        for (const bool prepare : {true, false}) {
            CAPTURE(prepare);
            const Message m = prepare ? Message{make_prepare(n, leader, 2, 2)}
                                      : Message{Commit{.view = n, .replica = leader, .commit = 1}};
            const std::vector<uint8_t> in = cell.frame(m, VL_FLAG_BROADCAST, 1);
            const StatsDelta delta(cell.electrode);
            const RunResult r = cell.electrode.run_tc(in, 0, lo_ifindex);
            CHECK(r.retval == TC_ACT_OK);
            CHECK(r.out == in);  // the original, readdressed back to replica 1
            CHECK(r.mark == 0);
            CHECK(delta[VL_STAT_TC_BROADCAST] == 1);
            CHECK(delta[VL_STAT_TC_CLONES] == n - 2u);
            CHECK(delta.tc_exits() == 1);
            // Test-run does not send the original; every other follower got its clone.
            CHECK(cell.sockets[1]->receive_all(20).empty());
            for (uint8_t peer = 2; peer < n; peer++) {
                CAPTURE(peer);
                const auto got = cell.sockets[peer]->receive_all(50, 1);
                REQUIRE(got.size() == 1);
                CHECK(got[0] == payload_of(in));
                CHECK(decode(got[0], cluster_id).ok());  // the flag stays; still valid
            }
            CHECK(cell.sockets[leader]->receive_all(10).empty());
        }
    }
}

TEST_CASE("broadcast: addressed to any one peer, the others get the clones")
{
    VL_REQUIRE_KERNEL();
    LoopbackCell cell(5);
    const std::vector<uint8_t> in =
        cell.frame(Commit{.view = 5, .replica = leader, .commit = 3}, VL_FLAG_BROADCAST, 3);
    const RunResult r = cell.electrode.run_tc(in, 0, lo_ifindex);
    CHECK(r.out == in);
    for (const uint8_t peer : std::array<uint8_t, 3>{1, 2, 4})
        CHECK(cell.sockets[peer]->receive_all(50, 1).size() == 1);
    CHECK(cell.sockets[3]->receive_all(10).empty());
}

TEST_CASE("broadcast: clone failures are counted, the original still goes")
{
    VL_REQUIRE_KERNEL();
    LoopbackCell cell(3);
    set_loopback_up(false);  // lo down: the clone cannot be transmitted
    const std::vector<uint8_t> in = cell.frame(make_prepare(3, leader, 1), VL_FLAG_BROADCAST);
    const StatsDelta delta(cell.electrode);
    const RunResult r = cell.electrode.run_tc(in, 0, lo_ifindex);
    CHECK(r.retval == TC_ACT_OK);
    CHECK(r.out == in);
    CHECK(delta[VL_STAT_TC_CLONE_FAILED] == 1);
    CHECK(delta[VL_STAT_TC_CLONES] == 0);
    CHECK(delta[VL_STAT_TC_BROADCAST] == 1);
}

TEST_CASE("broadcast: an unresolved peer, or the path off, leaves the packet to one peer")
{
    VL_REQUIRE_KERNEL();
    LoopbackCell cell(5);
    const std::vector<uint8_t> in = cell.frame(make_prepare(5, leader, 1), VL_FLAG_BROADCAST);

    cell.electrode.set_peer(3, peer_entry(cell.endpoint(3), false));
    StatsDelta delta(cell.electrode);
    RunResult r = cell.electrode.run_tc(in, 0, lo_ifindex);
    CHECK(r.retval == TC_ACT_OK);
    CHECK(r.out == in);
    CHECK(delta[VL_STAT_TC_UNRESOLVED] == 1);
    CHECK(delta[VL_STAT_TC_CLONES] == 0);
    // The slow path is user space's: the kernel sent no partial broadcast.
    for (uint8_t peer = 1; peer < 5; peer++) CHECK(cell.sockets[peer]->receive_all(10).empty());
    // The addressed peer itself may be unresolved (the stack resolved it for the original).
    cell.electrode.set_peer(3, peer_entry(cell.endpoint(3), true));
    cell.electrode.set_peer(1, peer_entry(cell.endpoint(1), false));
    CHECK(cell.electrode.run_tc(in, 0, lo_ifindex).out == in);
    CHECK(delta[VL_STAT_TC_BROADCAST] == 1);
    for (uint8_t peer = 2; peer < 5; peer++)
        CHECK(cell.sockets[peer]->receive_all(50, 1).size() == 1);

    cell.electrode.set_state(normal_state(5, 0, leader, 5),
                             VL_FAST_PATH_FAST_ACK | VL_FAST_PATH_QUORUM);
    r = cell.electrode.run_tc(in, 0, lo_ifindex);
    CHECK(r.out == in);
    CHECK(delta[VL_STAT_TC_BROADCAST_OFF] == 1);
    for (uint8_t peer = 2; peer < 5; peer++) CHECK(cell.sockets[peer]->receive_all(10).empty());
}

TEST_CASE("broadcast: unmarked and foreign packets are untouched; clones are not re-cloned")
{
    VL_REQUIRE_KERNEL();
    LoopbackCell cell(3);
    const Prepare p = make_prepare(3, leader, 1);
    Endpoint other_port = cell.endpoint(leader);
    other_port.port = 5555;
    Endpoint stranger = cell.endpoint(1);
    stranger.ipv4 = 0x7F000063;
    std::vector<uint8_t> arp = cell.frame(p, VL_FLAG_BROADCAST);
    arp[12] = 0x08;
    arp[13] = 0x06;
    std::vector<uint8_t> tcp = cell.frame(p, VL_FLAG_BROADCAST);
    tcp[14 + 9] = 6;
    std::vector<uint8_t> options = cell.frame(p, VL_FLAG_BROADCAST);
    options[14] = 0x46;
    std::vector<uint8_t> short_udp =
        udp_frame(cell.endpoint(leader), cell.endpoint(1), std::vector<uint8_t>(20));

    struct Case {
        const char* name;
        uint32_t stat;
        std::vector<uint8_t> frame;
        uint32_t mark = 0;
        uint32_t gso_size = 0;
    };
    const std::vector<Case> cases = {
        {"unmarked Prepare", VL_STAT_TC_UNICAST, cell.frame(p, 0)},
        {"unmarked Commit", VL_STAT_TC_UNICAST,
         cell.frame(Commit{.view = 3, .replica = leader, .commit = 1}, 0)},
        {"marked StartViewChange", VL_STAT_TC_OTHER_TYPE,
         cell.frame(StartViewChange{.view = 4, .replica = leader}, VL_FLAG_BROADCAST)},
        {"from another port", VL_STAT_TC_NOT_OUR_PORT,
         message_frame(other_port, cell.endpoint(1), p, VL_FLAG_BROADCAST)},
        {"to a stranger", VL_STAT_TC_NOT_PEER,
         message_frame(cell.endpoint(leader), stranger, p, VL_FLAG_BROADCAST)},
        {"to ourselves", VL_STAT_TC_NOT_PEER,
         message_frame(cell.endpoint(leader), cell.endpoint(leader), p, VL_FLAG_BROADCAST)},
        {"other cluster", VL_STAT_TC_NOT_OURS,
         message_frame(cell.endpoint(leader), cell.endpoint(1), p, VL_FLAG_BROADCAST,
                       cluster_id + 1)},
        {"sent in another replica's name", VL_STAT_TC_NOT_OURS,
         cell.frame(make_prepare(3, 2, 1), VL_FLAG_BROADCAST)},
        {"too short", VL_STAT_TC_NOT_OURS, short_udp},
        {"ARP", VL_STAT_TC_NOT_IPV4, arp},
        {"TCP", VL_STAT_TC_NOT_UDP, tcp},
        {"IP options", VL_STAT_TC_NOT_UDP, options},
        {"our own clone coming back", VL_STAT_TC_CLONE_SEEN, cell.frame(p, VL_FLAG_BROADCAST),
         VL_CLONE_MARK},
        {"a UDP GSO super-packet", VL_STAT_TC_NOT_OURS, cell.frame(p, VL_FLAG_BROADCAST), 0, 100},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        const StatsDelta delta(cell.electrode);
        const RunResult r = cell.electrode.run_tc(c.frame, c.mark, lo_ifindex, c.gso_size);
        CHECK(r.retval == TC_ACT_OK);
        CHECK(r.out == c.frame);
        CHECK(r.mark == 0);
        CHECK_MESSAGE(delta[c.stat] == 1, delta.describe());
        CHECK(delta.tc_exits() == 1);
        CHECK(delta[VL_STAT_TC_CLONES] == 0);
    }
    for (uint8_t peer = 1; peer < 3; peer++) CHECK(cell.sockets[peer]->receive_all(10).empty());
}

TEST_CASE("broadcast, attached to lo: one send reaches every follower, clones pass once")
{
    VL_REQUIRE_KERNEL();
    for (const uint8_t n : std::array<uint8_t, 2>{3, 5}) {
        CAPTURE(n);
        LoopbackCell cell(n);
        TcEgress attached(cell.electrode.tc_fd());
        const StatsDelta delta(cell.electrode);

        const std::vector<uint8_t> prepare = encode(make_prepare(n, leader, 1, 3), cluster_id,
                                                    VL_FLAG_BROADCAST);
        cell.sockets[leader]->send_to(cell.endpoint(1), prepare);
        for (uint8_t peer = 1; peer < n; peer++) {
            CAPTURE(peer);
            const auto got = cell.sockets[peer]->receive_all(100, 1);
            REQUIRE(got.size() == 1);
            CHECK(got[0] == prepare);
        }
        CHECK(delta[VL_STAT_TC_BROADCAST] == 1);
        CHECK(delta[VL_STAT_TC_CLONES] == n - 2u);
        CHECK(delta[VL_STAT_TC_CLONE_SEEN] == n - 2u);  // each clone came back once, passed
        CHECK(delta[VL_STAT_TC_ARMED] == 1);
        const vl_quorum_slot slot = cell.electrode.slot(1);
        CHECK((slot.view == n && slot.op == 1));

        // Unmarked: only the addressee.
        const std::vector<uint8_t> commit =
            encode(Commit{.view = n, .replica = leader, .commit = 1}, cluster_id);
        cell.sockets[leader]->send_to(cell.endpoint(2), commit);
        CHECK(cell.sockets[2]->receive_all(100, 1).size() == 1);
        for (uint8_t peer = 1; peer < n; peer++)
            if (peer != 2) CHECK(cell.sockets[peer]->receive_all(10).empty());
        CHECK(delta[VL_STAT_TC_UNICAST] == 1);
    }
}

TEST_CASE("fast ack, attached to lo: the leader's socket gets the kernel's PrepareOK")
{
    VL_REQUIRE_KERNEL();
    const uint8_t follower = 1;
    LoopbackCell cell(3, follower);
    cell.electrode.set_state(normal_state(3, 0, follower, 3));  // view 3: leader 0
    GenericXdp attached(cell.electrode.xdp_fd());
    const StatsDelta delta(cell.electrode);

    const std::vector<uint8_t> prepare = encode(make_prepare(3, leader, 2, 2), cluster_id);
    cell.sockets[leader]->send_to(cell.endpoint(follower), prepare);
    const auto acks = cell.sockets[leader]->receive_all(200, 1);
    REQUIRE_MESSAGE(acks.size() == 1, delta.describe());
    CHECK(acks[0] == encode(PrepareOk{.view = 3, .replica = follower, .op = 2}, cluster_id,
                            VL_FLAG_KERNEL_ACK));
    CHECK(cell.sockets[follower]->receive_all(20).empty());  // the kernel answered for it
    const auto ring = cell.electrode.drain_ring();
    REQUIRE(ring.size() == 1);
    CHECK(ring[0] == prepare);
    CHECK(delta[VL_STAT_FA_APPENDED] == 1);
    // On one host the ack crosses the same XDP program on its way to the leader's socket: to
    // our port, from peers[1], but replica 1 is this program's own index, so it is not counted
    // and passes.
    CHECK(delta[VL_STAT_Q_INVALID] == 1);

    // A gap goes up to the follower's socket.
    const std::vector<uint8_t> gap = encode(make_prepare(3, leader, 9, 1), cluster_id);
    cell.sockets[leader]->send_to(cell.endpoint(follower), gap);
    const auto up = cell.sockets[follower]->receive_all(200, 1);
    REQUIRE(up.size() == 1);
    CHECK(up[0] == gap);
    CHECK(delta[VL_STAT_FA_GAP] == 1);
}
