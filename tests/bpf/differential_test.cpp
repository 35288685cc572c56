// Differential tests: the loaded XDP program and its C++ model (model.cpp, made of fast_path.h)
// get the same state and the same frames; they must agree on the verdict, the exit counter, the
// frame afterwards, the ring buffer, the kernel's last op, the quorum slots and the acked ops.
// A table of (state, Prepare) cases for the follower, then seeded random sequences for a
// follower and a leader.
#include <doctest/doctest.h>

#include <array>

#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <cstring>
#include <random>
#include <sstream>

#include "harness.h"
#include "model.h"

using namespace voltlock;
using namespace voltlock::bpf_test;

namespace {

std::string state_text(const vl_state_value& v, const vl_fast_ack_log& log)
{
    std::ostringstream out;
    out << "status=" << int{v.state.status} << " view=" << v.state.view
        << " last_op=" << v.state.last_op << " leader=" << int{v.state.leader}
        << " fast_ack=" << int{v.state.fast_ack} << " enabled=" << v.enabled
        << " log=(" << log.view << "," << log.last_op << ")";
    return out.str();
}

struct Pair {
    explicit Pair(const Config& config) : electrode(config)
    {
        model.replication_port = replication_port;
        model.cluster_id = cluster_id;
        model.replica = config.replica;
        model.replica_count = config.replica_count;
        model.quorum_slot_mask = config.quorum_slot_mask;
        for (uint8_t r = 0; r < VL_MAX_REPLICAS; r++) model.peers[r] = electrode.peer(r);
    }

    void set_state(const vl_kernel_state& state, uint32_t enabled)
    {
        electrode.set_state(state, enabled);
        model.state.state = state;
        model.state.enabled = enabled;
    }

    void set_log(const vl_fast_ack_log& log)
    {
        electrode.set_fast_ack_log(log);
        model.log = log;
    }

    // Runs `frame` through both and compares everything observable.
    void xdp(std::span<const uint8_t> frame)
    {
        const Stats before = electrode.stats();
        const std::string context = state_text(model.state, model.log);
        const XdpOutcome expected = model_xdp(model, frame);
        const RunResult got = electrode.run_xdp(frame);
        const Stats after = electrode.stats();
        INFO(context << " expected " << vl_stat_name(expected.stat));
        CHECK(got.retval == expected.action);
        CHECK(exits_between(before, after, is_xdp_exit) == 1);
        CHECK(after[expected.stat] - before[expected.stat] == 1);
        CHECK(got.out == expected.frame);
        const vl_fast_ack_log log = electrode.fast_ack_log();
        CHECK(log.view == model.log.view);
        CHECK(log.last_op == model.log.last_op);
        CHECK(electrode.drain_ring() == model.ring);
        model.ring.clear();
        runs++;
    }

    // The leader's Prepare(view, op) leaves through TC: both arm, and exit the same way.
    void tc_prepare(View view, Op op)
    {
        const Stats before = electrode.stats();
        const std::vector<uint8_t> frame =
            message_frame(replica_endpoint(model.replica), replica_endpoint(1),
                          make_prepare(view, model.replica, op, 1));
        CHECK(electrode.run_tc(frame).retval == TC_ACT_OK);
        const Stats after = electrode.stats();
        const electrode_model::TcPayloadOutcome expected = electrode_model::model_tc_payload(
            model, std::span<const uint8_t>(frame).subspan(42), 1);
        CHECK(after[expected.stat] - before[expected.stat] == 1);
        if (model.state.enabled & VL_FAST_PATH_QUORUM) {
            CHECK(after[expected.armed_event] - before[expected.armed_event] == 1);
        } else {
            CHECK(expected.armed_event == VL_STAT_NONE);
            CHECK(after[VL_STAT_TC_ARMED] == before[VL_STAT_TC_ARMED]);
        }
    }

    void check_quorum_maps()
    {
        for (uint8_t r = 0; r < model.replica_count; r++) {
            const vl_follower_ack a = electrode.acked(r);
            CHECK(a.view == model.acked[r].view);
            CHECK(a.op == model.acked[r].op);
        }
        for (uint32_t i = 0; i <= model.quorum_slot_mask; i++) {
            const vl_quorum_slot s = electrode.slot(i);
            const vl_quorum_slot& m = model.slots[i];
            CHECK((s.view == m.view && s.op == m.op && s.acked == m.acked &&
                   s.completed == m.completed));
        }
    }

    Electrode electrode;
    KernelModel model;
    size_t runs = 0;
};

std::vector<uint8_t> prepare_frame(View view, ReplicaIndex from, Op op, uint16_t count,
                                   uint8_t to, int corruption)
{
    Endpoint source = replica_endpoint(from);
    uint32_t cluster = cluster_id;
    if (corruption == 2) cluster += 1;
    if (corruption == 3) source.ipv4 += 50;
    std::vector<uint8_t> frame = message_frame(source, replica_endpoint(to),
                                               make_prepare(view, from, op, count), 0, cluster);
    if (corruption == 1) frame[42 + 60] ^= 0x10;  // inside the body: only the checksum notices
    return frame;
}

}  // namespace

TEST_CASE("differential: the follower's fast-ack decision, table of states and Prepares")
{
    VL_REQUIRE_KERNEL();
    const uint8_t self = 1;
    Pair pair(Config{.replica = self, .replica_count = 3});
    const View view = 6;  // leader 0
    for (const uint8_t status : std::array<uint8_t, 2>{VL_STATUS_NORMAL, VL_STATUS_VIEW_CHANGE}) {
        for (const uint8_t fast_ack : std::array<uint8_t, 2>{0, 1}) {
            for (const uint32_t enabled : {uint32_t{VL_FAST_PATHS_ALL},
                                           uint32_t{VL_FAST_PATHS_ALL & ~VL_FAST_PATH_FAST_ACK}}) {
                for (const Op last_op : {Op{0}, Op{4}}) {
                    for (const vl_fast_ack_log log : {vl_fast_ack_log{0, 0}, vl_fast_ack_log{6, 7},
                                                      vl_fast_ack_log{3, 9}}) {
                        vl_kernel_state s = normal_state(view, last_op, self, 3);
                        s.status = status;
                        s.fast_ack = fast_ack;
                        for (const View pview : {View{5}, View{6}, View{7}}) {
                            for (const bool from_leader : {true, false}) {
                                const auto from = static_cast<ReplicaIndex>(
                                    from_leader ? pview % 3 : (pview % 3 + 2) % 3);
                                for (const Op op : {Op{1}, Op{3}, Op{5}, Op{8}, Op{10}}) {
                                    for (const uint16_t count : std::array<uint16_t, 2>{1, 3}) {
                                        if (op < count) continue;
                                        pair.set_state(s, enabled);
                                        pair.set_log(log);
                                        CAPTURE(pview);
                                        CAPTURE(int{from});
                                        CAPTURE(op);
                                        CAPTURE(count);
                                        pair.xdp(prepare_frame(pview, from, op, count, self, 0));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // Corruptions on an otherwise acceptable Prepare.
    for (int corruption = 1; corruption <= 3; corruption++) {
        pair.set_state(normal_state(view, 4, self, 3), VL_FAST_PATHS_ALL);
        pair.set_log({0, 0});
        CAPTURE(corruption);
        pair.xdp(prepare_frame(view, 0, 5, 1, self, corruption));
    }
    MESSAGE(pair.runs << " frames compared");
}

TEST_CASE("differential: random sequences on a follower")
{
    VL_REQUIRE_KERNEL();
    const uint8_t self = 2;
    Pair pair(Config{.replica = self, .replica_count = 5});
    std::mt19937_64 rng(20240601);
    View view = 5;  // leader 0
    pair.set_state(normal_state(view, 0, self, 5), VL_FAST_PATHS_ALL);
    Op next = 1;
    for (int step = 0; step < 1500; step++) {
        CAPTURE(step);
        const uint64_t dice = rng() % 100;
        if (dice < 6) {
            // The core moves on: a new record (sometimes behind the kernel, sometimes a new
            // view, sometimes a status change), sometimes the enabled paths.
            if (rng() % 3 == 0) view += 1 + rng() % 2;
            vl_kernel_state s = normal_state(view, rng() % (next + 2), self, 5);
            if (rng() % 4 == 0) s.status = VL_STATUS_VIEW_CHANGE;
            if (rng() % 6 == 0) s.fast_ack = 0;
            const uint32_t enabled =
                rng() % 8 == 0 ? uint32_t{VL_FAST_PATH_QUORUM} : uint32_t{VL_FAST_PATHS_ALL};
            pair.set_state(s, enabled);
            if (s.view != pair.model.log.view) next = s.last_op + 1;
        } else if (dice < 85) {
            // The leader's traffic: mostly the next op, sometimes retransmissions, gaps,
            // overlaps, other senders and views, corruption.
            const auto count = static_cast<uint16_t>(1 + rng() % 3);
            Op op = next + count - 1;
            const uint64_t shape = rng() % 10;
            if (shape == 0) op = std::max<Op>(count, op - 1 - rng() % 5);
            if (shape == 1) op += 1 + rng() % 3;
            View pview = view;
            if (rng() % 15 == 0) pview = view + 1 - rng() % 3;
            auto from = static_cast<ReplicaIndex>(pview % 5);
            if (rng() % 15 == 0) from = static_cast<ReplicaIndex>(rng() % 5);
            const int corruption = rng() % 20 == 0 ? static_cast<int>(1 + rng() % 3) : 0;
            pair.xdp(prepare_frame(pview, from, op, count, self, corruption));
            const vl_fast_ack_log log = pair.model.log;
            if (log.view == view && log.last_op + 1 > next) next = log.last_op + 1;
            if (rng() % 3 == 0 && pair.model.state.state.view == view) {
                // User space catches up with what it consumed.
                vl_kernel_state s = pair.model.state.state;
                s.last_op = std::max(s.last_op, log.view == view ? log.last_op : 0);
                pair.set_state(s, pair.model.state.enabled);
            }
        } else {
            // Noise: PrepareOKs from others (this replica does not lead), other types.
            const auto from = static_cast<ReplicaIndex>(rng() % 5);
            pair.xdp(message_frame(replica_endpoint(from), replica_endpoint(self),
                                   PrepareOk{.view = view, .replica = from, .op = rng() % 9}));
        }
    }
    pair.check_quorum_maps();
    MESSAGE(pair.runs << " frames compared");
}

TEST_CASE("differential: random sequences on a leader")
{
    VL_REQUIRE_KERNEL();
    for (const uint8_t n : std::array<uint8_t, 3>{3, 5, 7}) {
        CAPTURE(n);
        Pair pair(Config{.replica = 0, .replica_count = n, .quorum_slot_mask = 15});
        std::mt19937_64 rng(n);
        View view = n;  // led by 0
        pair.set_state(normal_state(view, 0, 0, n), VL_FAST_PATHS_ALL);
        Op sent = 0;
        for (int step = 0; step < 800; step++) {
            CAPTURE(step);
            const uint64_t dice = rng() % 100;
            if (dice < 3) {
                view += n;  // a later view this replica leads again
                pair.set_state(normal_state(view, sent, 0, n), VL_FAST_PATHS_ALL);
            } else if (dice < 5) {
                pair.set_state(normal_state(view, sent, 0, n),
                               rng() % 2 ? VL_FAST_PATHS_ALL : VL_FAST_PATH_BROADCAST);
            } else if (dice < 30) {
                // New Prepares, and retransmissions of old ones.
                const Op op = rng() % 4 == 0 && sent > 0 ? 1 + rng() % sent : ++sent;
                pair.tc_prepare(view, op);
            } else {
                // Acks: recent ops, duplicates, old views, strays; some from user space.
                const auto from = static_cast<ReplicaIndex>(rng() % n);
                const Op op = sent == 0 ? 1 : sent - std::min<Op>(sent - 1, rng() % 20);
                const View v = rng() % 10 == 0 ? view - n : view;
                uint16_t flags = rng() % 2 ? VL_FLAG_KERNEL_ACK : 0;
                if (rng() % 50 == 0) flags |= VL_FLAG_QUORUM;
                pair.xdp(message_frame(replica_endpoint(from), replica_endpoint(0),
                                       PrepareOk{.view = v, .replica = from, .op = op}, flags));
            }
        }
        pair.check_quorum_maps();
        MESSAGE(pair.runs << " frames compared for " << int{n} << " replicas");
    }
}
