// Traces: every early return of a handler says why (replica.h, "Traces"), so that a replica
// standing still in the fault suite can be asked what it refused and for what reason.
#include <set>
#include <string>

#include "replica_harness.h"

using namespace voltlock;
using namespace voltlock::test;

namespace {

std::string traced(const TestReplica& replica)
{
    std::string out;
    for (const Trace& trace : replica->traces())
        out += (out.empty() ? "" : "; ") + std::string(trace.event) + " v" +
               std::to_string(trace.view) + " op=" + std::to_string(trace.op) + " " +
               ignored_name(trace.reason);
    return out;
}

}  // namespace

TEST_CASE("traces: a follower names why it ignores what only a leader acts on")
{
    TestReplica follower(test_config(1, 3));
    follower.receive(PrepareOk{.view = 0, .replica = 2, .op = 4});
    CHECK(traced(follower) == "on_prepare_ok v0 op=4 not_leader");
    CHECK(follower.effects_of<Send>().empty());

    follower.receive(request(1, 1));
    CHECK(traced(follower) == "on_request v0 op=0 not_leader");
    CHECK(follower->counters().requests_dropped == 1);
}

TEST_CASE("traces: a Prepare of an old view, or from a replica not leading it, is named")
{
    TestReplica follower(test_config(1, 3));
    follower.receive(StartViewChange{.view = 1, .replica = 2});  // view 1 starts changing
    REQUIRE(follower->view() == 1);
    follower.receive(Prepare{.view = 0, .replica = 0, .op = 1, .commit = 0,
                             .entries = {entry(1, 1, "Wx")}});
    CHECK(traced(follower) == "on_prepare v1 op=1 stale_view");

    follower.receive(Prepare{.view = 1, .replica = 2, .op = 1, .commit = 0,
                             .entries = {entry(1, 1, "Wx")}});
    CHECK(traced(follower) == "on_prepare v1 op=1 not_from_leader");
}

TEST_CASE("traces: a step that acts leaves none, and each step starts with none")
{
    TestReplica leader(test_config(0, 3));
    leader.receive(PrepareOk{.view = 5, .replica = 1, .op = 1});
    CHECK(traced(leader) == "on_prepare_ok v0 op=1 other_view");
    leader.receive(request(1, 1));
    CHECK(traced(leader).empty());
    leader.flush();
    CHECK(leader.broadcasts<Prepare>().size() == 1);
    CHECK(traced(leader).empty());
}

TEST_CASE("traces: every reason has a name of its own")
{
    std::set<std::string> names;
    for (size_t reason = 0; reason < ignored_count; reason++)
        names.insert(ignored_name(static_cast<Ignored>(reason)));
    CHECK(names.size() == ignored_count);
    CHECK(names.count("unknown") == 0);
}
