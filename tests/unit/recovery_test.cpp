// VR Revisited §4.3: a replica that lost its state recovers it before taking part again.
#include "replica_harness.h"

using namespace voltlock;
using namespace voltlock::test;

namespace {

uint64_t recovery_nonce_sent(TestReplica& recovering)
{
    recovering.tick();
    const auto recoveries = recovering.broadcasts<Recovery>();
    REQUIRE(recoveries.size() == 1);
    return recoveries[0].nonce;
}

}  // namespace

TEST_CASE("§4.3 step 1: a recovering replica broadcasts Recovery with a nonce")
{
    TestReplica recovering(test_config(2, 3), StartRecovering{.nonce = 1000});
    CHECK(recovering->status() == Status::recovering);
    const uint64_t nonce = recovery_nonce_sent(recovering);
    recovering.receive(request(1, 1));
    recovering.receive(Prepare{.view = 0, .replica = 0, .op = 1, .commit = 0,
                               .entries = {entry(1, 1, "Wa")}});
    CHECK(recovering->op() == 0);  // it takes no part until recovered
    // A new round draws a new nonce, so answers to the old round are not taken.
    recovering.tick(20);
    const auto again = recovering.broadcasts<Recovery>();
    REQUIRE(!again.empty());
    CHECK(again.back().nonce != nonce);
}

TEST_CASE("§4.3 step 2: replicas in normal status answer Recovery; one changing views answers "
          "with a view past its last normal view, which step 3 does not count")
{
    TestReplica normal(test_config(0, 3));
    normal.receive(Recovery{.replica = 2, .nonce = 77});
    const auto responses = normal.sent_to<RecoveryResponse>(2);
    REQUIRE(responses.size() == 1);
    CHECK(responses[0].nonce == 77);
    CHECK(responses[0].view == 0);

    TestReplica changing(test_config(1, 3));
    changing.tick(20);
    REQUIRE(changing->status() == Status::view_change);
    changing.receive(Recovery{.replica = 2, .nonce = 77});
    const auto changing_responses = changing.sent_to<RecoveryResponse>(2);
    REQUIRE(changing_responses.size() == 1);  // a restart must not leave its state out
    CHECK(changing_responses[0].view > changing_responses[0].last_normal_view);

    TestReplica recovering(test_config(2, 3), StartRecovering{.nonce = 5});
    const uint64_t nonce = recovery_nonce_sent(recovering);
    for (const ReplicaIndex r : {ReplicaIndex{0}, ReplicaIndex{1}})
        recovering.receive(RecoveryResponse{.view = 1, .replica = r, .nonce = nonce, .op = 1,
                                            .commit = 1, .last_normal_view = 0});
    // Counted as normal, r1 would be view 1's leader among f + 1 answers: a fetch from it.
    CHECK(recovering.sent_to<GetState>(1).empty());
    CHECK(recovering->status() == Status::recovering);
}

TEST_CASE("§4.3 step 3: f + 1 answers including the latest view's leader, then the log")
{
    TestReplica recovering(test_config(2, 3), StartRecovering{.nonce = 5});
    const uint64_t nonce = recovery_nonce_sent(recovering);

    recovering.receive(RecoveryResponse{.view = 3, .replica = 1, .nonce = nonce + 1, .op = 9,
                                        .commit = 9, .last_normal_view = 3});
    recovering.receive(RecoveryResponse{.view = 3, .replica = 1, .nonce = nonce, .op = 1,
                                        .commit = 1, .last_normal_view = 3});
    CHECK(recovering.sent_to<GetState>(0).empty());  // one answer is not f + 1
    recovering.receive(RecoveryResponse{.view = 2, .replica = 0, .nonce = nonce, .op = 1,
                                        .commit = 1, .last_normal_view = 2});
    CHECK(recovering.sent_to<GetState>(0).empty());  // replica 0 does not lead view 3

    recovering.receive(RecoveryResponse{.view = 3, .replica = 0, .nonce = nonce, .op = 2,
                                        .commit = 1, .last_normal_view = 3});
    const auto fetches = recovering.sent_to<GetState>(0);  // leader of view 3
    REQUIRE(fetches.size() == 1);
    CHECK(fetches[0].view == 3);
    CHECK(fetches[0].op == 0);
    CHECK(recovering->status() == Status::recovering);

    recovering.receive(NewState{.view = 3, .replica = 0, .op = 2, .commit = 1, .first_op = 0,
                                .entries = {entry(1, 1, "Wa"), entry(2, 1, "Wb")}});
    CHECK(recovering->status() == Status::normal);
    CHECK(recovering->view() == 3);
    CHECK(recovering->op() == 2);
    CHECK(recovering->commit() == 1);
    CHECK(recovering->counters().recoveries == 1);
    CHECK(recovering.machine().version() == 1);
    CHECK(recovering.sent_to<PrepareOk>(0).size() == 1);
}

TEST_CASE("§4.3: recovery stays until the whole log reported by the leader is fetched")
{
    TestReplica recovering(test_config(1, 3), StartRecovering{.nonce = 5});
    const uint64_t nonce = recovery_nonce_sent(recovering);
    recovering.receive(RecoveryResponse{.view = 0, .replica = 0, .nonce = nonce, .op = 3,
                                        .commit = 3});
    recovering.receive(RecoveryResponse{.view = 0, .replica = 2, .nonce = nonce, .op = 3,
                                        .commit = 3});
    recovering.receive(NewState{.view = 0, .replica = 0, .op = 3, .commit = 3, .first_op = 0,
                                .entries = {entry(1, 1, "Wa")}});
    CHECK(recovering->status() == Status::recovering);
    const auto more = recovering.sent_to<GetState>(0);
    REQUIRE(more.size() == 1);
    CHECK(more[0].op == 1);
}
