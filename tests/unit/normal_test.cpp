// VR Revisited §4.1, normal operation, with batching and commit piggybacking.
#include "replica_harness.h"

using namespace voltlock;
using namespace voltlock::test;

TEST_CASE("§4.1: the leader batches requests into one Prepare on Flush")
{
    TestReplica leader(test_config(0, 3));
    leader.receive(request(1, 1));
    leader.receive(request(2, 1));
    leader.receive(request(3, 1));
    CHECK(leader.broadcasts<Prepare>().empty());  // a partial batch waits for Flush
    CHECK(leader->op() == 0);

    leader.flush();
    const auto prepares = leader.broadcasts<Prepare>();
    REQUIRE(prepares.size() == 1);
    CHECK(prepares[0].view == 0);
    CHECK(prepares[0].op == 3);  // a Prepare names the highest op of its batch
    CHECK(prepares[0].commit == 0);
    REQUIRE(prepares[0].entries.size() == 3);
    CHECK(prepares[0].entries[0].client_id == 1);
    CHECK(prepares[0].entries[2].client_id == 3);
    CHECK(leader->op() == 3);
}

TEST_CASE("batching: a full batch leaves at once, sized to the configured message")
{
    ReplicaConfig config = test_config(0, 3);
    config.max_message_bytes = 512;
    TestReplica leader(config);
    const Bytes payload(200, 'x');  // 226 bytes per entry: two fit in 456 bytes of body
    leader.receive(request(1, 1, payload));
    leader.receive(request(2, 1, payload));
    CHECK(leader.broadcasts<Prepare>().empty());
    leader.receive(request(3, 1, payload));
    const auto prepares = leader.broadcasts<Prepare>();
    REQUIRE(prepares.size() == 1);
    CHECK(prepares[0].entries.size() == 2);
    CHECK(encoded_size(prepares[0]) <= 512);
}

TEST_CASE("§4.1: a request too large for one datagram is refused")
{
    ReplicaConfig config = test_config(0, 3);
    config.max_message_bytes = 512;
    TestReplica leader(config);
    leader.receive(request(1, 1, Bytes(512, 'x')));
    leader.flush();
    CHECK(leader->op() == 0);
    CHECK(leader->counters().requests_dropped == 1);
}

TEST_CASE("§4.1 step 5: the leader commits once f followers acknowledged, then replies")
{
    TestReplica leader(test_config(0, 5));
    prepare_ops(leader, 2);
    CHECK(leader->commit() == 0);

    leader.receive(PrepareOk{.view = 0, .replica = 1, .op = 2});
    CHECK(leader->commit() == 0);  // one follower is not f = 2
    leader.receive(PrepareOk{.view = 0, .replica = 1, .op = 2});
    CHECK(leader->commit() == 0);  // a duplicate acknowledgement never counts twice

    leader.receive(PrepareOk{.view = 0, .replica = 3, .op = 1});
    CHECK(leader->commit() == 1);
    const auto executed = leader.effects_of<Executed>();
    REQUIRE(executed.size() == 1);
    CHECK(executed[0].op == 1);
    const auto replies = leader.effects_of<SendReply>();
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].reply.client_id == 100);
    CHECK(replies[0].reply.request_number == 1);
    CHECK(replies[0].reply.result == executed[0].result);
}

TEST_CASE("§4.1 step 6: the commit number is piggybacked on the next Prepare")
{
    TestReplica leader(test_config(0, 3));
    prepare_ops(leader, 1);
    leader.receive(PrepareOk{.view = 0, .replica = 2, .op = 1});
    REQUIRE(leader->commit() == 1);
    leader.receive(request(7, 1));
    leader.flush();
    const auto prepares = leader.broadcasts<Prepare>();
    REQUIRE(prepares.size() == 1);
    CHECK(prepares[0].commit == 1);
}

TEST_CASE("§4.1 step 6: an idle leader sends Commit every heartbeat")
{
    TestReplica leader(test_config(0, 3));
    prepare_ops(leader, 1);
    leader.receive(PrepareOk{.view = 0, .replica = 1, .op = 1});
    leader.tick(4);
    CHECK(leader.broadcasts<Commit>().empty());
    leader.tick(1);
    const auto commits = leader.broadcasts<Commit>();
    REQUIRE(commits.size() == 1);
    CHECK(commits[0].commit == 1);
}

TEST_CASE("§4.1 step 4: a follower appends in order, acknowledges, and executes to the commit")
{
    TestReplica follower(test_config(1, 3));
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 2, .commit = 0,
                             .entries = {entry(1, 1, "Wa"), entry(2, 1, "Wb")}});
    CHECK(follower->op() == 2);
    auto acks = follower.sent_to<PrepareOk>(0);
    REQUIRE(acks.size() == 1);
    CHECK(acks[0].op == 2);
    CHECK(follower->commit() == 0);

    follower.receive(Prepare{.view = 0, .replica = 0, .op = 3, .commit = 2,
                             .entries = {entry(3, 1, "Wc")}});
    CHECK(follower->op() == 3);
    CHECK(follower->commit() == 2);
    CHECK(follower.effects_of<Executed>().size() == 2);
    CHECK(follower.effects_of<SendReply>().empty());  // only the leader replies

    follower.receive(Commit{.view = 0, .replica = 0, .commit = 3});
    CHECK(follower->commit() == 3);
    CHECK(follower.machine().version() == 3);
}

TEST_CASE("§4.1: a retransmitted Prepare is acknowledged again, not appended twice")
{
    TestReplica follower(test_config(1, 3));
    const Prepare prepare{.view = 0, .replica = 0, .op = 1, .commit = 0,
                          .entries = {entry(1, 1, "Wa")}};
    follower.receive(prepare);
    follower.receive(prepare);
    CHECK(follower->op() == 1);
    const auto acks = follower.sent_to<PrepareOk>(0);
    REQUIRE(acks.size() == 1);
    CHECK(acks[0].op == 1);
}

TEST_CASE("§4.1: only the leader of the view may send Prepares; followers drop requests")
{
    TestReplica follower(test_config(1, 3));
    follower.receive(Prepare{.view = 0, .replica = 2, .op = 1, .commit = 0,
                             .entries = {entry(1, 1, "Wa")}});
    CHECK(follower->op() == 0);
    follower.receive(request(1, 1));
    follower.flush();
    CHECK(follower->op() == 0);
    CHECK(follower->counters().requests_dropped == 1);
}

TEST_CASE("retransmission: unacknowledged Prepares go again, only to who lacks them")
{
    TestReplica leader(test_config(0, 5));
    prepare_ops(leader, 1);
    leader.receive(PrepareOk{.view = 0, .replica = 1, .op = 1});
    leader.tick(3);
    CHECK(leader.sent_to<Prepare>(2).empty());
    leader.tick(1);
    CHECK(leader.sent_to<Prepare>(1).empty());
    CHECK(leader.sent_to<Prepare>(2).size() == 1);
    CHECK(leader.sent_to<Prepare>(3).size() == 1);
    CHECK(leader.sent_to<Prepare>(4).size() == 1);
    CHECK(leader->counters().retransmissions == 1);
}

TEST_CASE("pipeline: the leader keeps at most pipeline_ops uncommitted")
{
    ReplicaConfig config = test_config(0, 3);
    config.pipeline_ops = 2;
    TestReplica leader(config);
    prepare_ops(leader, 3);
    CHECK(leader->op() == 2);
    leader.receive(PrepareOk{.view = 0, .replica = 1, .op = 2});
    leader.flush();
    CHECK(leader->op() == 3);  // room freed by the commit
}

TEST_CASE("a cell of one commits on its own")
{
    TestReplica solo(test_config(0, 1));
    solo.receive(request(1, 1, "Wa"));
    solo.flush();
    CHECK(solo->commit() == 1);
    CHECK(solo.effects_of<SendReply>().size() == 1);
    CHECK(solo.broadcasts<Prepare>().empty());
}

TEST_CASE("the kernel-state record follows status, view and op, with a rising version")
{
    ReplicaConfig config = test_config(1, 3);
    config.fast_ack_allowed = true;
    TestReplica follower(config);
    follower.tick();
    auto records = follower.effects_of<KernelStateChanged>();
    REQUIRE(records.size() == 1);
    CHECK(records[0].state.status == VL_STATUS_NORMAL);
    CHECK(records[0].state.fast_ack == 1);
    CHECK(records[0].state.leader == 0);
    const uint64_t first_version = records[0].state.version;

    follower.tick();
    CHECK(follower.effects_of<KernelStateChanged>().empty());  // nothing changed

    follower.receive(Prepare{.view = 0, .replica = 0, .op = 1, .commit = 0,
                             .entries = {entry(1, 1, "Wa")}});
    records = follower.effects_of<KernelStateChanged>();
    REQUIRE(records.size() == 1);
    CHECK(records[0].state.last_op == 1);
    CHECK(records[0].state.version == first_version + 1);

    follower.tick(20);  // the leader went quiet: it asks the others
    // Another asks too: first the fast path goes off...
    follower.receive(StartViewChange{.view = 1, .replica = 2, .asking = true});
    records = follower.effects_of<KernelStateChanged>();
    REQUIRE(!records.empty());
    CHECK(records.back().state.status == VL_STATUS_NORMAL);
    CHECK(records.back().state.fast_ack == 0);
    follower.step(KernelDrained{});  // ...then, drained, the view change
    records = follower.effects_of<KernelStateChanged>();
    REQUIRE(records.size() == 1);
    CHECK(records[0].state.status == VL_STATUS_VIEW_CHANGE);
    CHECK(records[0].state.fast_ack == 0);
}

TEST_CASE("Electrode §4.3: a PrepareOK the kernel marked as completing a quorum commits")
{
    TestReplica leader(test_config(0, 5));
    prepare_ops(leader, 2);
    leader.step(Receive{.message = PrepareOk{.view = 0, .replica = 3, .op = 2},
                        .flags = VL_FLAG_QUORUM});
    CHECK(leader->commit() == 2);
    CHECK(leader.effects_of<SendReply>().size() == 2);
}

TEST_CASE("ReadIndex: the leader's Reply carries its commit number, also when from the table")
{
    TestReplica leader(test_config(0, 3));
    prepare_ops(leader, 2);
    leader.receive(PrepareOk{.view = 0, .replica = 1, .op = 2});
    const auto replies = leader.effects_of<SendReply>();
    REQUIRE(replies.size() == 2);
    CHECK(replies[0].reply.commit == 1);  // each op's Reply leaves as it executes
    CHECK(replies[1].reply.commit == 2);

    prepare_ops(leader, 1, 200);  // op 3, of another client
    leader.receive(PrepareOk{.view = 0, .replica = 1, .op = 3});
    leader.receive(request(100, 1));  // a retransmit of op 1: answered from the client table
    const auto again = leader.effects_of<SendReply>();
    REQUIRE(again.size() == 1);
    CHECK(again[0].reply.request_number == 1);
    CHECK(again[0].reply.commit == 3);  // the commit number now, past the op itself
}

TEST_CASE("ReadIndex: a follower learns the commit number from its leader's Reply")
{
    TestReplica follower(test_config(1, 3));
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 2, .commit = 0,
                             .entries = {entry(1, 1, "Wa"), entry(2, 1, "Wb")}});
    REQUIRE(follower->commit() == 0);

    // From a replica that does not lead the view: nothing.
    follower.receive(Reply{.view = 0, .replica = 2, .client_id = 9, .request_number = 1,
                           .commit = 2, .result = {}});
    CHECK(follower->commit() == 0);
    // From another view: nothing.
    follower.receive(Reply{.view = 2, .replica = 2, .client_id = 9, .request_number = 1,
                           .commit = 2, .result = {}});
    CHECK(follower->commit() == 0);

    // The leader's: applied at once, as far as the log goes (no fetch for the rest).
    follower.receive(Reply{.view = 0, .replica = 0, .client_id = 9, .request_number = 1,
                           .commit = 5, .result = {}});
    CHECK(follower->commit() == 2);
    CHECK(follower.effects_of<Executed>().size() == 2);
    CHECK(follower.sent_to<GetState>(0).empty());
}

TEST_CASE("Requests: the leader takes each of a follower's Requests as a Request")
{
    TestReplica leader(test_config(0, 3));
    leader.receive(Requests{.view = 0,
                            .replica = 1,
                            .items = {{.client_id = 100, .request_number = 1, .payload = "Wa"},
                                      {.client_id = 101, .request_number = 1, .payload = "Wb"}}});
    leader.flush();
    const auto prepares = leader.sent_to<Prepare>(1);
    REQUIRE(prepares.size() == 1);
    REQUIRE(prepares[0].entries.size() == 2);
    CHECK(prepares[0].entries[0].client_id == 100);
    CHECK(prepares[0].entries[1].client_id == 101);
}

TEST_CASE("ReadIndex: a follower takes each Reply of its leader's Replies as a Reply")
{
    TestReplica follower(test_config(1, 3));
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 3, .commit = 0,
                             .entries = {entry(1, 1, "Wa"), entry(2, 1, "Wb"), entry(3, 1, "Wc")}});
    // From a replica that does not lead the view: nothing.
    follower.receive(Replies{.view = 0, .replica = 2, .items = {{.client_id = 9, .commit = 3}}});
    CHECK(follower->commit() == 0);
    // The leader's: each commit number in turn, the highest last.
    follower.receive(Replies{.view = 0,
                             .replica = 0,
                             .items = {{.client_id = 9, .request_number = 1, .commit = 1},
                                         {.client_id = 10, .request_number = 1, .commit = 2}}});
    CHECK(follower->commit() == 2);
    CHECK(follower.effects_of<Executed>().size() == 2);
}
