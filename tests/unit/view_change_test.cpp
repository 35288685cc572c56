// VR Revisited §4.2: view changes, with the log fetched by the new leader when it lacks it.
#include "replica_harness.h"

using namespace voltlock;
using namespace voltlock::test;

namespace {

// A follower of view 0 holding `ops` ops, the first `commit` of them committed.
void follow(TestReplica& replica, int ops, Op commit)
{
    Prepare prepare{.view = 0, .replica = 0, .op = static_cast<Op>(ops), .commit = commit};
    for (int i = 1; i <= ops; i++)
        prepare.entries.push_back(entry(static_cast<ClientId>(i), 1, "Wv" + std::to_string(i)));
    replica.receive(prepare);
    REQUIRE(replica->op() == static_cast<Op>(ops));
    REQUIRE(replica->commit() == commit);
}

}  // namespace

TEST_CASE("§4.2 step 1: a follower that stops hearing from the leader asks the others, and "
          "starts a view change once f of them asked too")
{
    TestReplica follower(test_config(1, 3));
    follower.tick(19);
    CHECK(follower.broadcasts<StartViewChange>().empty());
    follower.tick(1);
    CHECK(follower->status() == Status::normal);
    CHECK(follower->view() == 0);
    const auto asks = follower.broadcasts<StartViewChange>();
    REQUIRE(asks.size() == 1);
    CHECK(asks[0] == StartViewChange{.view = 1, .replica = 1, .asking = true});
    follower.tick(3);
    CHECK(follower.broadcasts<StartViewChange>().empty());
    follower.tick(1);  // it asks again every retransmission interval
    CHECK(follower.broadcasts<StartViewChange>().size() == 1);

    follower.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});
    CHECK(follower->status() == Status::view_change);
    CHECK(follower->view() == 1);
    const auto svcs = follower.broadcasts<StartViewChange>();
    REQUIRE(svcs.size() == 1);
    CHECK(svcs[0] == StartViewChange{.view = 1, .replica = 1});
}

TEST_CASE("a follower that hears its leader, and a leader, count no other replica's asking: a "
          "replica that hears nothing deposes nobody")
{
    TestReplica follower(test_config(1, 3));
    follower.tick(10);
    follower.receive(Commit{.view = 0, .replica = 0, .commit = 0});
    follower.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});
    CHECK(follower->status() == Status::normal);
    CHECK(follower->traces().back().reason == Ignored::leader_heard);
    follower.tick(20);  // its own timeout comes: the ask it ignored is too old to count
    CHECK(follower->status() == Status::normal);
    CHECK(follower.broadcasts<StartViewChange>().size() == 1);  // it asks in turn

    TestReplica leader(test_config(0, 3));
    leader.receive(StartViewChange{.view = 1, .replica = 1, .asking = true});
    leader.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});
    CHECK(leader->is_leader());
}

TEST_CASE("in a cell of five, a follower that lost its leader starts a view change once two "
          "others asked within a view-change timeout; a recovering replica counts as one")
{
    TestReplica follower(test_config(1, 5));
    follower.tick(20);
    follower.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});
    CHECK(follower->status() == Status::normal);
    follower.tick(20);  // that ask is too old to count now
    follower.receive(StartViewChange{.view = 1, .replica = 3, .asking = true});
    CHECK(follower->status() == Status::normal);
    follower.receive(Recovery{.replica = 4, .nonce = 9});
    CHECK(follower->status() == Status::normal);
    follower.tick(1);
    CHECK(follower->status() == Status::view_change);
    CHECK(follower->view() == 1);
}

TEST_CASE("a follower joins at once a StartViewChange of a replica that left its view, and "
          "the view its leader asks for; one changing views already goes on to a view asked for")
{
    TestReplica follower(test_config(1, 3));
    follower.receive(StartViewChange{.view = 2, .replica = 2});
    CHECK(follower->status() == Status::view_change);
    CHECK(follower->view() == 2);
    follower.receive(StartViewChange{.view = 3, .replica = 0, .asking = true});
    CHECK(follower->view() == 3);

    TestReplica other(test_config(2, 3));
    other.receive(StartViewChange{.view = 1, .replica = 0});  // the leader stepped down
    CHECK(other->status() == Status::view_change);
}

TEST_CASE("§4.2 step 2: after f StartViewChange messages, DoViewChange goes to the new leader")
{
    TestReplica replica(test_config(2, 3));
    follow(replica, 2, 1);
    replica.receive(StartViewChange{.view = 1, .replica = 0});
    CHECK(replica->status() == Status::view_change);
    CHECK(replica.broadcasts<StartViewChange>().size() == 1);  // it joins the change
    const auto dvcs = replica.sent_to<DoViewChange>(1);       // leader of view 1 is replica 1
    REQUIRE(dvcs.size() == 1);
    CHECK(dvcs[0].view == 1);
    CHECK(dvcs[0].last_normal_view == 0);
    CHECK(dvcs[0].op == 2);
    CHECK(dvcs[0].commit == 1);
}

TEST_CASE("§4.2 step 3: the new leader fetches the selected log, then sends StartView")
{
    TestReplica leader(test_config(1, 3));  // leader of view 1
    follow(leader, 1, 0);
    leader.receive(StartViewChange{.view = 1, .replica = 2});
    CHECK(leader->status() == Status::view_change);
    // Replica 2 holds more of view 0's log: the rule selects it.
    leader.receive(DoViewChange{.view = 1, .replica = 2, .last_normal_view = 0, .op = 3,
                                .commit = 1});
    const auto fetches = leader.sent_to<GetState>(2);
    REQUIRE(fetches.size() == 1);
    CHECK(fetches[0].view == 1);
    CHECK(fetches[0].op == 1);  // same last normal view: its own log is a prefix
    CHECK(leader->status() == Status::view_change);

    leader.receive(NewState{.view = 1, .replica = 2, .op = 3, .commit = 1, .first_op = 1,
                            .entries = {entry(2, 1, "Wv2"), entry(3, 1, "Wv3")}});
    CHECK(leader->status() == Status::normal);
    CHECK(leader->is_leader());
    CHECK(leader->op() == 3);
    CHECK(leader->commit() == 1);  // the largest commit among the DoViewChange messages
    for (const ReplicaIndex to : {ReplicaIndex{0}, ReplicaIndex{2}}) {
        const auto start_views = leader.sent_to<StartView>(to);
        REQUIRE(start_views.size() == 1);
        CHECK(start_views[0].op == 3);
        CHECK(start_views[0].commit == 1);
        CHECK(start_views[0].first_op == 1);
        CHECK(start_views[0].entries.size() == 2);
    }
}

TEST_CASE("§4.2 step 3: a later last-normal view wins over a longer log")
{
    TestReplica leader(test_config(1, 3));  // leader of view 4
    follow(leader, 5, 1);
    leader.receive(DoViewChange{.view = 4, .replica = 2, .last_normal_view = 3, .op = 3,
                                .commit = 1});
    // Its own ops 2..5 of view 0 may be lost uncommitted ops: it fetches after op 1, and keeps
    // its log as it is until the selected one has arrived whole.
    const auto fetches = leader.sent_to<GetState>(2);
    REQUIRE(fetches.size() == 1);
    CHECK(fetches[0].op == 1);
    CHECK(leader->op() == 5);
    CHECK(leader->status() == Status::view_change);

    leader.receive(NewState{.view = 4, .replica = 2, .op = 3, .commit = 1, .first_op = 1,
                            .entries = {entry(20, 1, "Wx"), entry(21, 1, "Wy")}});
    CHECK(leader->is_leader());
    CHECK(leader->op() == 3);
    CHECK(leader->entry(2).client_id == 20);
}

TEST_CASE("§4.2 step 3: with its own log selected the new leader starts the view at once")
{
    TestReplica leader(test_config(1, 3));
    follow(leader, 3, 1);
    leader.receive(DoViewChange{.view = 1, .replica = 0, .last_normal_view = 0, .op = 2,
                                .commit = 2});
    CHECK(leader->is_leader());
    CHECK(leader->op() == 3);
    CHECK(leader->commit() == 2);
    CHECK(leader.sent_to<StartView>(0).size() == 1);
    CHECK(leader.sent_to<StartView>(2).size() == 1);
}

TEST_CASE("§4.2 step 4: a follower replaces its uncommitted suffix with the StartView log")
{
    TestReplica follower(test_config(2, 3));
    follow(follower, 3, 1);
    follower.receive(StartView{.view = 1, .replica = 1, .op = 2, .commit = 1, .first_op = 1,
                               .entries = {entry(50, 1, "Wnew")}});
    CHECK(follower->status() == Status::normal);
    CHECK(follower->view() == 1);
    CHECK(follower->op() == 2);
    CHECK(follower->entry(2).client_id == 50);
    const auto acks = follower.sent_to<PrepareOk>(1);
    REQUIRE(acks.size() == 1);
    CHECK(acks[0].view == 1);
    CHECK(acks[0].op == 2);
}

TEST_CASE("§4.2 step 4: a StartView that does not carry everything leads to a fetch")
{
    TestReplica follower(test_config(2, 3));
    follower.receive(StartView{.view = 1, .replica = 1, .op = 9, .commit = 5, .first_op = 5,
                               .entries = {}});
    CHECK(follower->status() == Status::view_change);  // not normal before the log is whole
    CHECK(follower->view() == 1);
    const auto fetches = follower.sent_to<GetState>(1);
    REQUIRE(fetches.size() == 1);
    CHECK(fetches[0].op == 0);

    NewState rest{.view = 1, .replica = 1, .op = 9, .commit = 5, .first_op = 0};
    for (ClientId c = 1; c <= 9; c++) rest.entries.push_back(entry(c, 1, "Wv"));
    follower.receive(rest);
    CHECK(follower->status() == Status::normal);
    CHECK(follower->op() == 9);
    CHECK(follower->commit() == 5);
    CHECK(follower.sent_to<PrepareOk>(1).size() == 1);
}

// Found by vr_sim seed 6: a follower that truncated to its commit point on a StartView, before
// fetching, then reported the short log in the next view change, and a committed op was lost.
TEST_CASE("§4.2: a replica waiting for a new view's log keeps what it acknowledged")
{
    TestReplica follower(test_config(2, 3));
    follow(follower, 3, 2);  // op 3 acknowledged, not yet known committed here
    follower.receive(StartView{.view = 1, .replica = 1, .op = 3, .commit = 3, .first_op = 3,
                               .entries = {}});
    CHECK(follower->status() == Status::view_change);
    CHECK(follower->op() == 3);
    CHECK(follower->last_normal_view() == 0);

    // The leader of view 1 dies before answering; the next view change sees the whole log.
    follower.receive(StartViewChange{.view = 4, .replica = 0});  // view 4 is led by replica 1
    const auto dvcs = follower.sent_to<DoViewChange>(1);
    REQUIRE(dvcs.size() == 1);
    CHECK(dvcs[0].last_normal_view == 0);
    CHECK(dvcs[0].op == 3);
}

TEST_CASE("§5.2: a Prepare of a later view makes a follower fetch the view's log")
{
    TestReplica follower(test_config(2, 3));
    follow(follower, 3, 1);
    follower.receive(Prepare{.view = 1, .replica = 1, .op = 6, .commit = 4,
                             .entries = {entry(6, 1, "Wv6")}});
    CHECK(follower->status() == Status::view_change);
    CHECK(follower->view() == 1);
    CHECK(follower->op() == 3);  // untouched until the new log is whole
    const auto fetches = follower.sent_to<GetState>(1);
    REQUIRE(fetches.size() == 1);
    CHECK(fetches[0].op == 1);  // after its commit point

    NewState rest{.view = 1, .replica = 1, .op = 6, .commit = 4, .first_op = 1};
    for (ClientId c = 2; c <= 6; c++) rest.entries.push_back(entry(c, 1, "Wn"));
    follower.receive(rest);
    CHECK(follower->status() == Status::normal);
    CHECK(follower->op() == 6);
    CHECK(follower->entry(3).payload == "Wn");
    CHECK(follower->commit() == 4);
}

TEST_CASE("§4.2: messages of older views are ignored")
{
    TestReplica follower(test_config(2, 3));
    follower.receive(StartView{.view = 1, .replica = 1, .op = 0, .commit = 0, .first_op = 0});
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 1, .commit = 0,
                             .entries = {entry(1, 1, "Wa")}});
    CHECK(follower->op() == 0);
    CHECK(follower->view() == 1);
}

TEST_CASE("§4.2: the leader of a view answers a late StartViewChange with StartView")
{
    TestReplica leader(test_config(1, 3));
    leader.receive(DoViewChange{.view = 1, .replica = 0, .last_normal_view = 0, .op = 0,
                                .commit = 0});
    REQUIRE(leader->is_leader());
    leader.receive(StartViewChange{.view = 1, .replica = 2});
    CHECK(leader.sent_to<StartView>(2).size() == 1);
}

TEST_CASE("§4.2: a view change that a quorum took part in and that does not finish moves on, "
          "backing off each time; one that too few joined waits for them")
{
    TestReplica replica(test_config(2, 5));
    for (const ReplicaIndex r : {ReplicaIndex{0}, ReplicaIndex{1}})
        replica.receive(StartViewChange{.view = 1, .replica = r});
    REQUIRE(replica->view() == 1);
    replica.tick(20);
    CHECK(replica->view() == 2);
    replica.tick(100);  // alone in view 2's change: it asks again, and waits
    CHECK(replica->view() == 2);
    CHECK(replica.broadcasts<StartViewChange>().size() == 25);
    for (const ReplicaIndex r : {ReplicaIndex{0}, ReplicaIndex{1}})
        replica.receive(StartViewChange{.view = 2, .replica = r});
    replica.tick(39);
    CHECK(replica->view() == 2);  // the second failed change doubles the timeout
    replica.tick(1);
    CHECK(replica->view() == 3);
}

// Failure detection that sees one-way loss (docs/replication.md; issue 11, scenario 5).

TEST_CASE("a leader whose heartbeats no quorum answers (CommitOk) steps down after the view-change "
          "timeout")
{
    TestReplica leader(test_config(0, 3));
    leader.tick(5);
    const auto heartbeats = leader.broadcasts<Commit>();
    REQUIRE(heartbeats.size() == 1);
    CHECK(heartbeats[0].heartbeat == 1005);  // its monotonic clock: what the answers echo
    leader.receive(CommitOk{.view = 0, .replica = 2, .heartbeat = 1005});
    leader.tick(19);  // tick 24: r2 answered 19 ticks ago
    CHECK(leader->is_leader());
    leader.receive(CommitOk{.view = 1, .replica = 1, .heartbeat = 1005});  // another view's
    leader.tick(1);
    CHECK(leader->status() == Status::view_change);
    CHECK(leader->view() == 1);
    CHECK(leader.broadcasts<StartViewChange>().size() == 1);
}

TEST_CASE("a leader answered by f followers keeps leading; busy, it still sends heartbeats")
{
    TestReplica leader(test_config(0, 3));
    for (int i = 0; i < 10; i++) {
        leader.receive(request(static_cast<ClientId>(100 + i), 1));  // a Prepare every tick or so
        leader.step(Flush{});
        leader.tick(5);
        const auto heartbeats = leader.broadcasts<Commit>();
        REQUIRE(heartbeats.size() == 1);
        leader.receive(CommitOk{.view = 0, .replica = 1, .heartbeat = heartbeats[0].heartbeat});
    }
    CHECK(leader->is_leader());
}

TEST_CASE("a follower answers each Commit with a CommitOk echoing its heartbeat")
{
    TestReplica follower(test_config(1, 3));
    follower.receive(Commit{.view = 0, .replica = 0, .commit = 0, .heartbeat = 35});
    const auto answers = follower.sent_to<CommitOk>(0);
    REQUIRE(answers.size() == 1);
    CHECK(answers[0] == CommitOk{.view = 0, .replica = 1, .heartbeat = 35});
}

TEST_CASE("a follower that hears the leader but never sees what it acknowledged committed asks "
          "for a view change")
{
    TestReplica follower(test_config(1, 3));
    follow(follower, 2, 0);  // acknowledged ops 1 and 2
    for (int i = 0; i < 5; i++) {  // Commits keep coming, commit stays 0: the leader is deaf
        follower.tick(5);
        follower.receive(Commit{.view = 0, .replica = 0, .commit = 0});
    }
    CHECK(follower->status() == Status::normal);  // it asks the others
    follower.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});
    CHECK(follower->status() == Status::view_change);
    CHECK(follower->view() == 1);
}

TEST_CASE("a follower whose acknowledged ops are committed in time stays with its leader")
{
    TestReplica follower(test_config(1, 3));
    follow(follower, 2, 0);
    follower.tick(15);
    follower.receive(Commit{.view = 0, .replica = 0, .commit = 2});
    follower.tick(15);
    follower.receive(Commit{.view = 0, .replica = 0, .commit = 2});
    CHECK(follower->status() == Status::normal);
}

TEST_CASE("a follower whose leader commits a long log piece by piece stays with it however long "
          "the whole takes; when the commit number stops moving, it asks for a view change")
{
    TestReplica follower(test_config(1, 3));
    follow(follower, 100, 0);  // after a whole-cell restart: a long log, nothing committed
    for (Op commit = 10; commit <= 90; commit += 10) {  // 135 ticks, far past the timeout
        follower.tick(15);
        follower.receive(Commit{.view = 0, .replica = 0, .commit = commit});
    }
    CHECK(follower->status() == Status::normal);
    for (int i = 0; i < 5; i++) {  // Commits keep coming, commit stays 90: the leader is deaf
        follower.tick(5);
        follower.receive(Commit{.view = 0, .replica = 0, .commit = 90});
    }
    follower.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});
    CHECK(follower->status() == Status::view_change);
}

TEST_CASE("a leader whose followers fetch its log (GetState) for longer than the view-change "
          "timeout, answering no heartbeat meanwhile, keeps leading")
{
    TestReplica leader(test_config(0, 3));
    leader.receive(request(100, 1));
    leader.step(Flush{});
    for (int i = 0; i < 10; i++) {  // 50 ticks, the view-change timeout is 20
        leader.tick(5);
        leader.receive(GetState{.view = 0, .replica = 2, .op = 0});
    }
    CHECK(leader->is_leader());
    leader.receive(GetState{.view = 1, .replica = 2, .op = 0});  // another view's: no answer
    leader.tick(20);
    CHECK(leader->status() == Status::view_change);
}

// The leader lease (docs/leases.md; issue 11, scenario 1).

TEST_CASE("the leader lease runs a lease period from the send time of the newest heartbeat f "
          "followers echoed; it is lost with the view")
{
    ReplicaConfig config = test_config(0, 3);
    config.leader_lease_ms = 30;
    TestReplica leader(config);
    CHECK_FALSE(leader->holds_leader_lease(1'000));  // nobody confirmed it yet
    leader.tick(5);                                 // heartbeat sent at 1005
    const uint64_t sent = leader.broadcasts<Commit>().at(0).heartbeat;
    leader.receive(CommitOk{.view = 0, .replica = 2, .heartbeat = sent});
    CHECK(leader->holds_leader_lease(sent + 29));
    CHECK_FALSE(leader->holds_leader_lease(sent + 30));
    // An echo of a time it never sent (ahead of its clock) confirms nothing.
    leader.receive(CommitOk{.view = 0, .replica = 1, .heartbeat = sent + 500});
    CHECK_FALSE(leader->holds_leader_lease(sent + 30));
    leader.receive(StartViewChange{.view = 1, .replica = 1});
    CHECK_FALSE(leader->holds_leader_lease(sent + 1));
}

TEST_CASE("a restart fence a log holds uncommitted makes no epoch once another replica was "
          "normal in a later view without it: that replica's log is selected")
{
    // vr_sim seed 2850 x 3: a leader cut off with the fence it had just proposed won a later
    // view change over the two that had committed ops without it, in a view after its own.
    TestReplica leader(test_config(1, 3));  // leads view 4
    leader.receive(Prepare{.view = 0, .replica = 0, .op = 3, .commit = 2,
                           .entries = {entry(1, 1, "Wa"), entry(2, 1, "Wb"),
                                       entry(kCellClientId, 2, "")}});
    leader.receive(StartViewChange{.view = 4, .replica = 2});
    REQUIRE(leader->status() == Status::view_change);
    leader.receive(DoViewChange{.view = 4, .replica = 2, .last_normal_view = 3, .op = 5,
                                .commit = 4, .fence_view = 1});
    CHECK_FALSE(leader->is_leader());
    const auto fetches = leader.sent_to<GetState>(2);
    REQUIRE(fetches.size() == 1);
    CHECK(fetches[0].op == 0);  // its own state gives way whole
}
