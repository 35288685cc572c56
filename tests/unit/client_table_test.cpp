// VR Revisited §4.1 steps 2 and 5: the client table gives at-most-once execution.
#include "replica_harness.h"

using namespace voltlock;
using namespace voltlock::test;

namespace {

// Commits client 9's request 1 on `leader`, replica 0 of 3.
void commit_first_request(TestReplica& leader)
{
    leader.receive(request(9, 1, "Wfirst"));
    leader.flush();
    leader.receive(PrepareOk{.view = 0, .replica = 1, .op = 1});
    REQUIRE(leader->commit() == 1);
}

}  // namespace

TEST_CASE("§4.1: a retry of the latest executed request gets the cached reply, no new op")
{
    TestReplica leader(test_config(0, 3));
    commit_first_request(leader);
    const Bytes first_result = leader.effects_of<SendReply>().at(0).reply.result;
    leader.receive(request(9, 1, "Wfirst"));
    const auto replies = leader.effects_of<SendReply>();
    leader.flush();
    CHECK(leader->op() == 1);
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].reply.result == first_result);
}

TEST_CASE("§4.1: a request older than the client's latest is dropped")
{
    TestReplica leader(test_config(0, 3));
    commit_first_request(leader);
    leader.receive(request(9, 2, "Wsecond"));
    leader.flush();
    leader.receive(request(9, 1, "Wfirst"));
    leader.flush();
    CHECK(leader->op() == 2);
    CHECK(leader.effects_of<SendReply>().empty());
}

TEST_CASE("§4.1: a retry of a request still in the pipeline is not appended again")
{
    TestReplica leader(test_config(0, 3));
    leader.receive(request(9, 1));
    leader.flush();
    leader.receive(request(9, 1));
    leader.flush();
    CHECK(leader->op() == 1);
}

TEST_CASE("a request that reached the log twice executes once, on every replica")
{
    // After a view change a retry can be appended again by the new leader; the client table,
    // replicated by execution, makes the second copy a no-op everywhere.
    TestReplica follower(test_config(1, 3));
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 3, .commit = 3,
                             .entries = {entry(9, 1, "Wa"), entry(9, 1, "Wa"),
                                         entry(9, 2, "Wb")}});
    const auto executed = follower.effects_of<Executed>();
    REQUIRE(executed.size() == 2);
    CHECK(executed[0].op == 1);
    CHECK(executed[1].op == 3);
    CHECK(follower.machine().version() == 2);
}

TEST_CASE("a request number used again with another payload is answered empty, not executed")
{
    // The client table keeps a CRC of each client's latest request: the same number with
    // another payload is not a retry, and must not get the first request's answer.
    TestReplica leader(test_config(0, 3));
    commit_first_request(leader);
    leader.receive(request(9, 1, "Wother"));
    const auto replies = leader.effects_of<SendReply>();
    leader.flush();
    CHECK(leader->op() == 1);
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].reply.request_number == 1);
    CHECK(replies[0].reply.result.empty());
    CHECK(leader->counters().requests_reused == 1);
}

TEST_CASE("a request number in the pipeline sent with another payload is answered empty")
{
    TestReplica leader(test_config(0, 3));
    leader.receive(request(9, 1, "Wa"));
    leader.flush();
    leader.receive(request(9, 1, "Wb"));
    const auto replies = leader.effects_of<SendReply>();
    leader.flush();
    CHECK(leader->op() == 1);
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].reply.result.empty());
    // The first one still commits, and its retry gets its own result.
    leader.receive(PrepareOk{.view = 0, .replica = 1, .op = 1});
    REQUIRE(leader->commit() == 1);
    const Bytes first_result = leader.effects_of<SendReply>().at(0).reply.result;
    CHECK_FALSE(first_result.empty());
    leader.receive(request(9, 1, "Wa"));
    CHECK(leader.effects_of<SendReply>().at(0).reply.result == first_result);
}

// An entry of `client`'s request `number`, stamped `at_ms` by the leader.
Entry stamped(ClientId client, RequestNumber number, Bytes payload, uint64_t at_ms)
{
    Entry e = entry(client, number, std::move(payload));
    e.timestamp_ms = at_ms;
    return e;
}

TEST_CASE("past client_table_limit, the client that executed longest ago is forgotten")
{
    // Every replica executes the same entries, so every replica forgets the same clients.
    ReplicaConfig config = test_config(1, 3);
    config.client_table_limit = 2;
    config.client_min_age_ms = 1'000;
    TestReplica follower(config);
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 4, .commit = 4,
                             .entries = {stamped(1, 1, "Wa", 0), stamped(2, 1, "Wb", 0),
                                         stamped(1, 2, "Wc", 500), stamped(3, 1, "Wd", 2'000)}});
    REQUIRE(follower.effects_of<Executed>().size() == 4);
    CHECK(follower->client_table_size() == 2);
    CHECK(follower->counters().clients_forgotten == 1);
    CHECK_FALSE(follower->latest_request(2));  // its request executed before client 1's second
    CHECK(follower->latest_request(1) == 2);
    CHECK(follower->latest_request(3) == 1);
    // The table cannot tell a forgotten client's retry from a new request: it executes again.
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 5, .commit = 5,
                             .entries = {stamped(2, 1, "Wb", 2'100)}});
    CHECK(follower.effects_of<Executed>().size() == 1);
    CHECK(follower.machine().version() == 5);
    CHECK_FALSE(follower->latest_request(1));  // executed at 500, 1.6 s before
}

TEST_CASE("the client table never forgets a client that executed within client_min_age_ms")
{
    // A flood of new client ids grows the table past its limit instead of forgetting a client
    // that may still retry.
    ReplicaConfig config = test_config(1, 3);
    config.client_table_limit = 2;
    config.client_min_age_ms = 1'000;
    TestReplica follower(config);
    std::vector<Entry> flood;
    for (ClientId c = 1; c <= 5; c++) flood.push_back(stamped(c, 1, "W", 100 * c));
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 5, .commit = 5, .entries = flood});
    CHECK(follower->client_table_size() == 5);
    CHECK(follower->counters().clients_forgotten == 0);
    // Once they are old enough, the next execution brings the table back to its limit: the
    // clients that executed at 100 to 400 go; 5's, at 500, is younger than 1 s but within it.
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 6, .commit = 6,
                             .entries = {stamped(6, 1, "W", 1'450)}});
    CHECK(follower->client_table_size() == 2);
    CHECK(follower->counters().clients_forgotten == 4);
    CHECK(follower->latest_request(5) == 1);
    CHECK(follower->latest_request(6) == 1);
}
