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
    changing.receive(StartViewChange{.view = 1, .replica = 0});
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

// ---- A new data directory without --recover (StartRecovering::may_bootstrap) -----------------

namespace {

StartRecovering new_data_directory(uint64_t nonce)
{
    return StartRecovering{.nonce = nonce, .may_bootstrap = true};
}

RecoveryResponse blank_answer(ReplicaIndex from, uint64_t nonce)
{
    return RecoveryResponse{.view = 0, .replica = from, .nonce = nonce,
                            .standing = Standing::blank};
}

}  // namespace

TEST_CASE("a replica recovering from nothing answers Recovery as blank, holding nothing")
{
    TestReplica recovering(test_config(1, 3), StartRecovering{.nonce = 5});
    recovering.receive(Recovery{.replica = 2, .nonce = 77});
    const auto answers = recovering.sent_to<RecoveryResponse>(2);
    REQUIRE(answers.size() == 1);
    CHECK(answers[0] == blank_answer(1, 77));
}

TEST_CASE("a new cell: view 0's leader starts once every other replica answered blank, and the "
          "others once it runs")
{
    TestReplica first(test_config(0, 3), new_data_directory(5));
    const uint64_t nonce = recovery_nonce_sent(first);
    first.receive(blank_answer(1, nonce));
    CHECK(first->status() == Status::recovering);  // every other replica must answer
    first.receive(blank_answer(2, nonce));
    CHECK(first->is_leader());
    CHECK(first->view() == 0);
    CHECK(first->counters().bootstraps == 1);

    TestReplica second(test_config(1, 3), new_data_directory(6));
    const uint64_t second_nonce = recovery_nonce_sent(second);
    second.receive(blank_answer(0, second_nonce));
    second.receive(blank_answer(2, second_nonce));
    CHECK(second->status() == Status::recovering);  // view 0's leader first
    // It runs, and took a request already: uncommitted, fetched from it.
    second.receive(RecoveryResponse{.view = 0, .replica = 0, .nonce = second_nonce, .op = 1});
    CHECK(second->status() == Status::normal);
    CHECK(second->view() == 0);
    CHECK(second->counters().bootstraps == 1);
}

TEST_CASE("a replica on a new data directory never starts a cell some other replica holds "
          "committed ops of: it recovers them")
{
    TestReplica wiped(test_config(2, 3), new_data_directory(5));
    const uint64_t nonce = recovery_nonce_sent(wiped);
    wiped.receive(RecoveryResponse{.view = 0, .replica = 0, .nonce = nonce, .op = 5,
                                   .commit = 5});
    wiped.receive(blank_answer(1, nonce));  // lost its disk too, or missed everything
    wiped.tick(10);
    CHECK(wiped->status() == Status::recovering);
    CHECK(wiped.sent_to<GetState>(0).empty());  // a blank answer is not f + 1's
    wiped.receive(RecoveryResponse{.view = 0, .replica = 1, .nonce = nonce, .op = 5,
                                   .commit = 5});
    CHECK(wiped.sent_to<GetState>(0).size() == 1);  // §4.3 from view 0's leader
    CHECK(wiped->counters().bootstraps == 0);

    SUBCASE("one that only followed view 0's leader counts for nothing: it may lack what the "
            "leader committed with us before our disk was lost")
    {
        TestReplica follower_side(test_config(2, 3), new_data_directory(7));
        const uint64_t n = recovery_nonce_sent(follower_side);
        follower_side.receive(RecoveryResponse{.view = 0, .replica = 1, .nonce = n, .op = 3});
        follower_side.receive(blank_answer(0, n));
        follower_side.tick(15);
        CHECK(follower_side->status() == Status::recovering);
    }
    SUBCASE("without an answer from every replica it waits, even if the others hold nothing")
    {
        TestReplica waiting(test_config(2, 3), new_data_directory(8));
        const uint64_t n = recovery_nonce_sent(waiting);
        waiting.receive(blank_answer(1, n));
        waiting.tick(15);
        CHECK(waiting->status() == Status::recovering);
    }
}

TEST_CASE("with --recover a replica holding nothing never starts a new cell")
{
    TestReplica recovering(test_config(0, 3), StartRecovering{.nonce = 5});
    const uint64_t nonce = recovery_nonce_sent(recovering);
    recovering.receive(blank_answer(1, nonce));
    recovering.receive(blank_answer(2, nonce));
    recovering.tick(15);
    CHECK(recovering->status() == Status::recovering);
    CHECK(recovering->counters().bootstraps == 0);
}

TEST_CASE("view 0's leader on a new data directory, the others running view 0 with nothing, "
          "changes views after half a round rather than leading view 0 again")
{
    // Its Prepares from before its disk was lost may still be on their way to them.
    TestReplica first(test_config(0, 3), new_data_directory(5));
    const uint64_t nonce = recovery_nonce_sent(first);
    first.receive(RecoveryResponse{.view = 0, .replica = 1, .nonce = nonce});
    first.receive(blank_answer(2, nonce));
    CHECK(first->status() == Status::recovering);
    first.tick(9);
    CHECK(first->status() == Status::recovering);
    first.tick(2);
    CHECK(first->status() == Status::view_change);
    CHECK(first->view() == 1);
    CHECK(first.broadcasts<StartViewChange>().size() == 1);
    CHECK(first->counters().bootstraps == 1);
}
