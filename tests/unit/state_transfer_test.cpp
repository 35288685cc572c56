// VR Revisited §5.2: state transfer for a replica that fell behind.
#include "replica_harness.h"

using namespace voltlock;
using namespace voltlock::test;

TEST_CASE("§5.2: a follower that sees a gap asks the leader for what it lacks")
{
    TestReplica follower(test_config(1, 3));
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 3, .commit = 2,
                             .entries = {entry(3, 1, "Wc")}});
    CHECK(follower->op() == 0);
    CHECK(follower.sent_to<PrepareOk>(0).empty());
    const auto fetches = follower.sent_to<GetState>(0);
    REQUIRE(fetches.size() == 1);
    CHECK(fetches[0].op == 0);

    follower.receive(NewState{.view = 0, .replica = 0, .op = 3, .commit = 2, .first_op = 0,
                              .entries = {entry(1, 1, "Wa"), entry(2, 1, "Wb"),
                                          entry(3, 1, "Wc")}});
    CHECK(follower->op() == 3);
    CHECK(follower->commit() == 2);
    const auto acks = follower.sent_to<PrepareOk>(0);
    REQUIRE(acks.size() == 1);
    CHECK(acks[0].op == 3);
}

TEST_CASE("§5.2: a Commit beyond the log also starts a state transfer")
{
    TestReplica follower(test_config(2, 3));
    follower.receive(Commit{.view = 0, .replica = 0, .commit = 4});
    CHECK(follower.sent_to<GetState>(0).size() == 1);
    CHECK(follower->counters().state_transfers == 1);
}

TEST_CASE("§5.2: NewState carries what fits in one datagram; the follower asks until done")
{
    ReplicaConfig leader_config = test_config(0, 3);
    leader_config.max_message_bytes = 512;
    TestReplica leader(leader_config);
    const Bytes payload = "W" + Bytes(100, 'p');
    for (ClientId c = 1; c <= 40; c++) {
        leader.receive(request(c, 1, payload));
        leader.flush();
        leader.receive(PrepareOk{.view = 0, .replica = 1, .op = leader->op()});
    }
    REQUIRE(leader->commit() == 40);

    ReplicaConfig follower_config = test_config(2, 3);
    follower_config.max_message_bytes = 512;
    TestReplica follower(follower_config);
    follower.receive(Commit{.view = 0, .replica = 0, .commit = 40});
    int round_trips = 0;
    for (auto asks = follower.sent_to<GetState>(0); !asks.empty();
         asks = follower.sent_to<GetState>(0)) {
        REQUIRE(++round_trips < 100);
        leader.receive(asks.at(0));
        const auto answers = leader.sent_to<NewState>(2);
        REQUIRE(answers.size() == 1);
        CHECK(encoded_size(answers[0]) <= 512);
        CHECK(!answers[0].entries.empty());
        follower.receive(answers[0]);
    }
    CHECK(follower->op() == 40);
    CHECK(follower->commit() == 40);
    CHECK(round_trips == 14);  // 3 entries of 127 bytes fit in 512 - 56 - 8 bytes
    CHECK(follower.machine().digest() == leader.machine().digest());
    CHECK(follower->counters().state_transfers == 1);
}

TEST_CASE("§5.2: a replica answers GetState only for its own view")
{
    TestReplica leader(test_config(0, 3));
    prepare_ops(leader, 2);
    leader.receive(GetState{.view = 1, .replica = 1, .op = 0});
    CHECK(leader.sent_to<NewState>(1).empty());
    leader.receive(GetState{.view = 0, .replica = 1, .op = 0});
    CHECK(leader.sent_to<NewState>(1).size() == 1);
}
