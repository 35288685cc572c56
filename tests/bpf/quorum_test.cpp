// Wait-on-quorum on the leader (Electrode §4.3): TC egress arms a slot per outgoing Prepare, XDP
// counts PrepareOKs, drops all but the one that completes the quorum, passes that one up marked.
#include <doctest/doctest.h>

#include <array>

#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>

#include "harness.h"

using namespace voltlock;
using namespace voltlock::bpf_test;

namespace {

constexpr uint8_t leader = 0;

struct Leader {
    explicit Leader(uint8_t n, uint32_t slot_mask = VL_QUORUM_SLOTS - 1)
        : count(n), electrode(Config{.replica = leader, .replica_count = n,
                                     .quorum_slot_mask = slot_mask})
    {
        set_view(n);  // view n of n replicas is led by replica 0
    }

    void set_view(View v, uint32_t enabled = VL_FAST_PATHS_ALL)
    {
        view = v;
        electrode.set_state(normal_state(v, 0, leader, count), enabled);
    }

    // The leader's Prepare for (view, op) leaves through TC egress.
    RunResult send_prepare(Op op, uint16_t flags = 0, uint16_t batch = 1) const
    {
        const std::vector<uint8_t> frame =
            message_frame(replica_endpoint(leader), replica_endpoint(1),
                          make_prepare(view, leader, op, batch), flags);
        const RunResult r = electrode.run_tc(frame);
        CHECK(r.retval == TC_ACT_OK);
        return r;
    }

    std::vector<uint8_t> ack_frame(uint8_t from, Op op, View v, uint16_t flags) const
    {
        return message_frame(replica_endpoint(from), replica_endpoint(leader),
                             PrepareOk{.view = v, .replica = from, .op = op}, flags);
    }

    RunResult ack(uint8_t from, Op op, std::optional<View> v = {},
                  uint16_t flags = VL_FLAG_KERNEL_ACK) const
    {
        return electrode.run_xdp(ack_frame(from, op, v.value_or(view), flags));
    }

    uint32_t slot_of(Op op) const
    {
        return static_cast<uint32_t>(op) & electrode.config().quorum_slot_mask;
    }

    uint8_t count;
    View view = 0;
    Electrode electrode;
};

// `r` is the ack `in` passed up marked VL_FLAG_QUORUM: same frame but for the flag, the message
// checksum and the UDP checksum (dropped to zero).
void check_marked(std::span<const uint8_t> in, const RunResult& r, View v, uint8_t from, Op op,
                  uint16_t flags = VL_FLAG_KERNEL_ACK)
{
    REQUIRE(r.retval == XDP_PASS);
    REQUIRE(r.out.size() == in.size());
    CHECK(std::equal(in.begin(), in.begin() + 40, r.out.begin()));  // Ethernet, IP, UDP ports+len
    const ParsedFrame got = parse_frame(r.out);
    CHECK(got.udp_checksum == 0);
    const DecodeResult decoded = decode(got.payload, cluster_id);
    REQUIRE_MESSAGE(decoded.ok(), decode_error_name(decoded.error()));
    CHECK(decoded.value().flags == (VL_FLAG_QUORUM | flags));
    CHECK(std::get<PrepareOk>(decoded.value().message) ==
          PrepareOk{.view = v, .replica = from, .op = op});
}

}  // namespace

TEST_CASE("quorum: exactly one ack per op is passed up, marked (3, 5 and 7 replicas)")
{
    VL_REQUIRE_KERNEL();
    std::mt19937_64 rng(11);
    for (const uint8_t n : std::array<uint8_t, 3>{3, 5, 7}) {
        CAPTURE(n);
        Leader l(n);
        const size_t f = (n - 1u) / 2u;
        const StatsDelta delta(l.electrode);
        size_t acks_sent = 0;
        for (Op op = 1; op <= 6; op++) {
            CAPTURE(op);
            l.send_prepare(op, op % 2 ? VL_FLAG_BROADCAST : 0);
            // Every follower acks once or twice, in a random interleaving.
            std::vector<uint8_t> from;
            for (uint8_t r = 1; r < n; r++) {
                from.push_back(r);
                if (rng() % 2) from.push_back(r);
            }
            std::shuffle(from.begin(), from.end(), rng);
            std::vector<bool> seen(n);
            size_t distinct = 0;
            int marked = 0;
            for (const uint8_t r : from) {
                const std::vector<uint8_t> in = l.ack_frame(r, op, l.view, VL_FLAG_KERNEL_ACK);
                const RunResult out = l.electrode.run_xdp(in);
                acks_sent++;
                const bool duplicate = seen[r];
                if (!duplicate) {
                    seen[r] = true;
                    distinct++;
                }
                if (!duplicate && distinct == f) {
                    check_marked(in, out, l.view, r, op);
                    marked++;
                } else {
                    CHECK(out.retval == XDP_DROP);
                }
            }
            CHECK(marked == 1);
            const vl_quorum_slot slot = l.electrode.slot(l.slot_of(op));
            CHECK(slot.view == l.view);
            CHECK(slot.op == op);
            CHECK(slot.completed == 1);
            CHECK(slot.acked == ((1u << n) - 2u));  // every follower's bit, not the leader's
        }
        CHECK(delta[VL_STAT_Q_COMPLETE] == 6);
        CHECK(delta[VL_STAT_TC_ARMED] == 6);
        CHECK(delta.xdp_exits() == acks_sent);
        CHECK(delta[VL_STAT_Q_COUNTED] + delta[VL_STAT_Q_LATE] + delta[VL_STAT_Q_DUPLICATE] +
                  delta[VL_STAT_Q_COMPLETE] ==
              acks_sent);
    }
}

TEST_CASE("quorum: a duplicate ack never counts twice")
{
    VL_REQUIRE_KERNEL();
    Leader l(5);  // f = 2
    l.send_prepare(1);
    const StatsDelta delta(l.electrode);
    CHECK(l.ack(1, 1).retval == XDP_DROP);
    CHECK(l.ack(1, 1).retval == XDP_DROP);  // would complete a counter, not a bitset
    CHECK(l.ack(1, 1, {}, 0).retval == XDP_DROP);  // the same ack from user space
    CHECK(l.electrode.slot(1).completed == 0);
    const std::vector<uint8_t> in = l.ack_frame(3, 1, l.view, VL_FLAG_KERNEL_ACK);
    check_marked(in, l.electrode.run_xdp(in), l.view, 3, 1);
    CHECK(delta[VL_STAT_Q_DUPLICATE] == 2);
    CHECK(delta[VL_STAT_Q_COUNTED] == 1);
    CHECK(delta[VL_STAT_Q_COMPLETE] == 1);
    // A retransmitted Prepare re-arms the slot without forgetting: no second marked ack.
    l.send_prepare(1);
    CHECK(l.ack(2, 1).retval == XDP_DROP);
    CHECK(l.ack(4, 1).retval == XDP_DROP);
    CHECK(delta[VL_STAT_TC_REARMED] == 1);
    CHECK(delta[VL_STAT_Q_LATE] == 2);
    CHECK(delta[VL_STAT_Q_COMPLETE] == 1);
}

TEST_CASE("quorum: a slot reused by a later op passes the old op's acks up unmarked")
{
    VL_REQUIRE_KERNEL();
    Leader l(5, 7);  // 8 slots: ops 3 and 11 share slot 3
    l.send_prepare(3);
    CHECK(l.ack(1, 3).retval == XDP_DROP);
    l.send_prepare(11);
    const vl_quorum_slot slot = l.electrode.slot(3);
    CHECK((slot.op == 11 && slot.acked == 0 && slot.completed == 0));
    const StatsDelta delta(l.electrode);
    const std::vector<uint8_t> late = l.ack_frame(2, 3, l.view, VL_FLAG_KERNEL_ACK);
    const RunResult r = l.electrode.run_xdp(late);
    CHECK(r.retval == XDP_PASS);
    CHECK(r.out == late);  // unmarked, untouched
    CHECK(delta[VL_STAT_Q_UNTRACKED] == 1);
    // Op 11 completes on its own acks.
    CHECK(l.ack(1, 11).retval == XDP_DROP);
    const std::vector<uint8_t> in = l.ack_frame(4, 11, l.view, VL_FLAG_KERNEL_ACK);
    check_marked(in, l.electrode.run_xdp(in), l.view, 4, 11);
    // A late retransmission of op 3 does not take the slot back from op 11.
    l.send_prepare(3);
    CHECK(delta[VL_STAT_TC_ARM_STALE] == 1);
    CHECK(l.electrode.slot(3).op == 11);
}

TEST_CASE("quorum: acks from an old view pass up unmarked")
{
    VL_REQUIRE_KERNEL();
    Leader l(3);
    l.send_prepare(4);
    const View old_view = l.view;
    l.set_view(2 * l.count);  // a later view this replica leads again
    l.send_prepare(4);
    const StatsDelta delta(l.electrode);
    const std::vector<uint8_t> old_ack = l.ack_frame(1, 4, old_view, VL_FLAG_KERNEL_ACK);
    const RunResult r = l.electrode.run_xdp(old_ack);
    CHECK(r.retval == XDP_PASS);
    CHECK(r.out == old_ack);
    CHECK(delta[VL_STAT_Q_UNTRACKED] == 1);
    const std::vector<uint8_t> in = l.ack_frame(2, 4, l.view, 0);  // sent by user space
    check_marked(in, l.electrode.run_xdp(in), l.view, 2, 4, 0);
}

TEST_CASE("quorum: senders out of range or ourselves, forged marks, bad checksums")
{
    VL_REQUIRE_KERNEL();
    Leader l(3);
    l.send_prepare(1);
    struct Case {
        const char* name;
        uint32_t stat;
        uint32_t retval;
        std::vector<uint8_t> frame;
    };
    std::vector<uint8_t> bad_checksum = l.ack_frame(1, 1, l.view, VL_FLAG_KERNEL_ACK);
    bad_checksum[42 + offsetof(vl_header, checksum) + 3] ^= 1;
    Endpoint fake = replica_endpoint(1);
    fake.ipv4 = 0x0A000009;
    const std::vector<Case> cases = {
        {"replica 5 of 3", VL_STAT_XDP_BAD_REPLICA, XDP_PASS,
         message_frame(replica_endpoint(1), replica_endpoint(leader),
                       PrepareOk{.view = l.view, .replica = 5, .op = 1})},
        {"replica 15", VL_STAT_XDP_BAD_REPLICA, XDP_PASS,
         message_frame(replica_endpoint(1), replica_endpoint(leader),
                       PrepareOk{.view = l.view, .replica = 15, .op = 1})},
        {"from ourselves", VL_STAT_Q_INVALID, XDP_PASS,
         message_frame(replica_endpoint(leader), replica_endpoint(leader),
                       PrepareOk{.view = l.view, .replica = leader, .op = 1})},
        {"from a stranger", VL_STAT_XDP_NOT_PEER, XDP_PASS,
         message_frame(fake, replica_endpoint(leader),
                       PrepareOk{.view = l.view, .replica = 1, .op = 1})},
        {"marked on the wire", VL_STAT_Q_FORGED, XDP_DROP,
         l.ack_frame(1, 1, l.view, VL_FLAG_QUORUM | VL_FLAG_KERNEL_ACK)},
        {"bad checksum", VL_STAT_XDP_BAD_CHECKSUM, XDP_PASS, bad_checksum},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        const StatsDelta delta(l.electrode);
        const RunResult r = l.electrode.run_xdp(c.frame);
        CHECK(r.retval == c.retval);
        if (c.retval == XDP_PASS) CHECK(r.out == c.frame);
        CHECK_MESSAGE(delta[c.stat] == 1, delta.describe());
        CHECK(delta.xdp_exits() == 1);
    }
    CHECK(l.electrode.slot(1).acked == 0);
    CHECK(l.electrode.acked(1).op == 0);
}

TEST_CASE("quorum: the per-follower acked op map")
{
    VL_REQUIRE_KERNEL();
    Leader l(5);
    for (Op op = 1; op <= 4; op++) l.send_prepare(op);
    l.ack(1, 3);
    l.ack(1, 1);  // reordered: the highest stays
    l.ack(2, 4);
    l.ack(3, 2, l.view - 1);  // an older view: recorded, since nothing newer is known
    CHECK((l.electrode.acked(1).view == l.view && l.electrode.acked(1).op == 3));
    CHECK((l.electrode.acked(2).view == l.view && l.electrode.acked(2).op == 4));
    CHECK((l.electrode.acked(3).view == l.view - 1 && l.electrode.acked(3).op == 2));
    CHECK((l.electrode.acked(4).view == 0 && l.electrode.acked(4).op == 0));
    l.ack(3, 1);  // the current view replaces it
    CHECK((l.electrode.acked(3).view == l.view && l.electrode.acked(3).op == 1));
    l.ack(3, 9, l.view - 1);
    CHECK((l.electrode.acked(3).view == l.view && l.electrode.acked(3).op == 1));
}

TEST_CASE("quorum: off, or not the leader, every ack goes up; the acked op map still fills")
{
    VL_REQUIRE_KERNEL();
    Leader l(3);
    l.send_prepare(1);
    l.set_view(l.view, VL_FAST_PATH_FAST_ACK | VL_FAST_PATH_BROADCAST);
    StatsDelta delta(l.electrode);
    for (const uint8_t r : std::array<uint8_t, 3>{1, 2, 1}) {
        const std::vector<uint8_t> in = l.ack_frame(r, 1, l.view, VL_FLAG_KERNEL_ACK);
        const RunResult out = l.electrode.run_xdp(in);
        CHECK(out.retval == XDP_PASS);
        CHECK(out.out == in);
    }
    CHECK(delta[VL_STAT_Q_DISABLED] == 3);
    CHECK(l.electrode.acked(2).op == 1);
    CHECK(l.electrode.slot(1).acked == 0);

    // TC does not arm with the quorum path off.
    l.send_prepare(2);
    CHECK(l.electrode.slot(2).op == 0);

    // In a view another replica leads, nothing is counted either.
    l.electrode.set_state(normal_state(l.view + 1, 0, leader, l.count));
    const std::vector<uint8_t> in = l.ack_frame(1, 1, l.view + 1, 0);
    CHECK(l.electrode.run_xdp(in).out == in);
    CHECK(delta[VL_STAT_Q_DISABLED] == 4);
}

TEST_CASE("quorum: TC arms for every Prepare, broadcast or not, and nothing else")
{
    VL_REQUIRE_KERNEL();
    Leader l(3);
    const StatsDelta delta(l.electrode);
    const RunResult r = l.send_prepare(7, 0, 3);  // a batch: the slot of its highest op
    CHECK(r.out.size() > 0);
    vl_quorum_slot slot = l.electrode.slot(7);
    CHECK((slot.view == l.view && slot.op == 7 && slot.acked == 0 && slot.completed == 0));
    CHECK(delta[VL_STAT_TC_ARMED] == 1);
    CHECK(delta[VL_STAT_TC_UNICAST] == 1);
    // A Commit arms nothing.
    const std::vector<uint8_t> commit =
        message_frame(replica_endpoint(leader), replica_endpoint(2),
                      Commit{.view = l.view, .replica = leader, .commit = 7});
    CHECK(l.electrode.run_tc(commit).out == commit);
    CHECK(delta[VL_STAT_TC_ARMED] == 1);
    CHECK(delta[VL_STAT_TC_UNICAST] == 2);
    CHECK(delta.tc_exits() == 2);
}
