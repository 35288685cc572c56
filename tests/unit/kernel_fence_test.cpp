// DESIGN.md §3: before a follower whose kernel may be acknowledging Prepares takes part in a view
// change, it switches the kernel to the slow path, drains the ring buffer, and only then builds
// the messages it sends. Otherwise an op the kernel acknowledged, and the leader committed, could
// be missing from its DoViewChange: the original Electrode code's safety bug.
#include "replica_harness.h"

using namespace voltlock;
using namespace voltlock::test;

namespace {

ReplicaConfig fast_ack_config(ReplicaIndex replica)
{
    ReplicaConfig config = test_config(replica, 3);
    config.fast_ack_allowed = true;
    return config;
}

Prepare prepare(Op op)
{
    return Prepare{.view = 0, .replica = 0, .op = op, .commit = 0,
                   .entries = {entry(op, 1, "Wv" + std::to_string(op))}};
}

}  // namespace

TEST_CASE("a follower drains the kernel before it joins a view change")
{
    TestReplica follower(fast_ack_config(2));
    follower.receive(prepare(1));
    REQUIRE(follower.effects_of<KernelStateChanged>().back().state.fast_ack == 1);

    // Replica 0 asks for view 1 (led by replica 1, to whom the DoViewChange would go).
    follower.receive(StartViewChange{.view = 1, .replica = 0});
    const auto off = follower.effects_of<KernelStateChanged>();
    REQUIRE(off.size() == 1);
    CHECK(off[0].state.fast_ack == 0);
    CHECK(off[0].state.status == VL_STATUS_NORMAL);
    REQUIRE(follower.effects_of<DrainKernel>().size() == 1);
    // The record that turns the fast path off comes before the request to drain.
    CHECK(std::holds_alternative<KernelStateChanged>(follower.effects().front()));
    CHECK(follower.broadcasts<StartViewChange>().empty());
    CHECK(follower->status() == Status::normal);

    // The ring buffer held ops 2 and 3, acknowledged by the kernel.
    follower.receive(prepare(2));
    follower.receive(prepare(3));
    CHECK(follower->op() == 3);

    follower.step(KernelDrained{});
    CHECK(follower->status() == Status::view_change);
    CHECK(follower.broadcasts<StartViewChange>().size() == 1);
    const auto dvcs = follower.sent_to<DoViewChange>(1);
    REQUIRE(dvcs.size() == 1);
    CHECK(dvcs[0].op == 3);  // every op the kernel acknowledged is in it
}

TEST_CASE("a follower that lost its leader drains the kernel before it changes views: at the "
          "ask that makes it, or at the tick its timeout acts with an ask counted already")
{
    TestReplica follower(fast_ack_config(1));
    follower.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});
    CHECK(follower.effects_of<DrainKernel>().empty());  // it hears its leader
    follower.tick(20);
    CHECK(follower.effects_of<DrainKernel>().empty());  // it asks, its fast path on
    CHECK(follower->status() == Status::normal);
    CHECK(follower.broadcasts<StartViewChange>().size() == 1);
    follower.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});
    CHECK(follower.effects_of<DrainKernel>().size() == 1);
    follower.step(KernelDrained{});
    CHECK(follower->status() == Status::view_change);
    CHECK(follower->view() == 1);

    TestReplica later(fast_ack_config(1));
    later.tick(10);
    later.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});  // counted later
    later.tick(9);
    later.tick(1);
    CHECK(later.effects_of<DrainKernel>().size() == 1);
    CHECK(later->status() == Status::normal);
    later.step(KernelDrained{});
    CHECK(later->status() == Status::view_change);
    CHECK(later->view() == 1);
}

TEST_CASE("a follower drains the kernel before it moves to a later view's log")
{
    TestReplica follower(fast_ack_config(2));
    follower.receive(prepare(1));
    follower.receive(Prepare{.view = 1, .replica = 1, .op = 5, .commit = 0,
                             .entries = {entry(5, 1, "Wx")}});
    CHECK(follower.effects_of<DrainKernel>().size() == 1);
    CHECK(follower->view() == 0);
    follower.step(KernelDrained{});
    CHECK(follower->view() == 1);
    CHECK(follower->status() == Status::view_change);  // fetching view 1's log
}

TEST_CASE("ordinary traffic and the leader never fence the kernel")
{
    TestReplica follower(fast_ack_config(1));
    follower.receive(prepare(1));
    follower.receive(Commit{.view = 0, .replica = 0, .commit = 1});
    follower.tick(5);
    CHECK(follower.effects_of<DrainKernel>().empty());

    ReplicaConfig config = test_config(0, 3);
    config.fast_ack_allowed = true;
    TestReplica leader(config);
    leader.tick(1);
    CHECK(leader.effects_of<KernelStateChanged>().back().state.fast_ack == 0);
    leader.receive(StartViewChange{.view = 1, .replica = 1, .asking = true});
    CHECK(leader.effects_of<DrainKernel>().empty());
    CHECK(leader->is_leader());
    leader.receive(StartViewChange{.view = 1, .replica = 1});
    CHECK(leader.effects_of<DrainKernel>().empty());
    CHECK(leader->status() == Status::view_change);
}

TEST_CASE("after a drain that changed nothing the fast path comes back on")
{
    TestReplica follower(fast_ack_config(2));
    follower.receive(prepare(1));
    // A StartView for a later view from a replica that does not lead it: the fence is
    // conservative and drains first; the message is then ignored.
    follower.receive(StartView{.view = 1, .replica = 0, .op = 1, .commit = 0, .first_op = 0});
    REQUIRE(follower.effects_of<DrainKernel>().size() == 1);
    follower.step(KernelDrained{});
    CHECK(follower->view() == 0);
    CHECK(follower->status() == Status::normal);
    const auto records = follower.effects_of<KernelStateChanged>();
    REQUIRE(records.size() == 1);
    CHECK(records[0].state.fast_ack == 1);
}

// Found by vr_sim's kernel model: the kernel acknowledged a Prepare into its ring; a later gap
// started a catch-up fetch, which turned the fast path off without a drain; then a view change
// came. The ring still held the acknowledged op.
TEST_CASE("a follower drains the kernel before a view change even if the fast path is off now")
{
    TestReplica follower(fast_ack_config(2));
    follower.receive(prepare(1));
    follower.receive(prepare(4));  // ops 2 and 3 missing: fetch, fast path off
    REQUIRE(follower.effects_of<KernelStateChanged>().back().state.fast_ack == 0);
    REQUIRE(follower.sent_to<GetState>(0).size() == 1);

    follower.receive(StartViewChange{.view = 1, .replica = 0});
    CHECK(follower.effects_of<DrainKernel>().size() == 1);
    CHECK(follower->status() == Status::normal);
    follower.receive(prepare(2));  // the ring held op 2, acknowledged by the kernel
    follower.step(KernelDrained{});
    CHECK(follower->status() == Status::view_change);
    CHECK(follower->op() == 2);
}
