// Named scenarios for the whole cell: each sets up one fault on purpose and asserts the outcome
// VR Revisited promises for it, on top of the invariants the cluster checks after every step
// (cluster.h). Every scenario ends by quiescing (liveness) and checking linearizability.
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "cluster.h"
#include "simulation.h"
#include "text.h"

namespace voltlock::sim {

namespace {

constexpr uint64_t quiesce_ticks = 5'000;

// A prompt, reliable network and clients that keep busy: the scenario's own fault is the only
// one. The op budget is effectively unlimited; scenarios stop the clients when they need to.
ClusterOptions scenario_options(uint8_t replica_count, uint64_t seed, size_t client_count = 4)
{
    return ClusterOptions{
        .seed = seed,
        .replica_count = replica_count,
        .faults = NetworkFaults{.max_delay_ticks = 2},
        .client_count = client_count,
        .max_think_ticks = 1,
        .op_budget = 1'000'000,
    };
}

void require_safe(const Cluster& cluster)
{
    if (cluster.violation()) FAIL(*cluster.violation());
}

// Runs until `done`, failing the scenario (with what the replicas look like) if it never holds.
void require_reaches(Cluster& cluster, const std::function<bool()>& done, uint64_t max_ticks,
                     const char* what)
{
    const bool reached = cluster.run_until(done, max_ticks);
    require_safe(cluster);
    if (!reached)
        FAIL(strprintf("not reached within %llu ticks: %s; %s",
                       static_cast<unsigned long long>(max_ticks), what,
                       cluster.describe_replicas().c_str()));
}

void finish(Cluster& cluster)
{
    cluster.quiesce(quiesce_ticks);
    cluster.check_linearizability();
    require_safe(cluster);
}

// Replica `isolated` alone on one side, everyone else on the other.
std::vector<uint8_t> isolating(const Cluster& cluster, ReplicaIndex isolated)
{
    std::vector<uint8_t> group_of(cluster.replica_count(), 0);
    group_of[isolated] = 1;
    return group_of;
}

bool in_view_of_leader(const Cluster& cluster, ReplicaIndex r)
{
    const std::optional<ReplicaIndex> leader = cluster.leader();
    if (!leader || cluster.crashed(r)) return false;
    const Replica& follower = cluster.replica(r);
    const Replica& lead = cluster.replica(*leader);
    return follower.status() == Status::normal && follower.view() == lead.view() &&
           follower.op() == lead.op() && follower.commit() == lead.commit();
}

bool logs_equal(const Replica& a, const Replica& b)
{
    if (a.op() != b.op()) return false;
    for (Op op = 1; op <= a.op(); op++)
        if (a.entry(op) != b.entry(op)) return false;
    return true;
}

}  // namespace

TEST_CASE("leader isolated: the rest change view and serve clients; healed, it follows")
{
    Cluster cluster(scenario_options(3, 101));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                    "100 operations before the partition");
    REQUIRE(cluster.leader() == ReplicaIndex{0});

    cluster.network().partition(isolating(cluster, 0));
    require_reaches(cluster, [&] { return cluster.leader().value_or(0) != 0; }, 1'000,
                    "§4.2: a view change elects a leader among the majority");
    const ReplicaIndex new_leader = *cluster.leader();
    const View new_view = cluster.replica(new_leader).view();
    CHECK(new_view > 0);

    // Clients time out on the old leader, retry to every replica, and learn the new view.
    const size_t completed = cluster.completed_ops();
    require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 200; }, 3'000,
                    "200 more operations with the old leader cut off");
    CHECK(cluster.replica(0).view() < new_view);

    cluster.network().heal();
    cluster.stop_new_ops();
    require_reaches(cluster,
                    [&] { return in_view_of_leader(cluster, 0) && cluster.outstanding_ops() == 0; },
                    2'000, "the old leader rejoins as a follower and catches up");
    CHECK(!cluster.replica(0).is_leader());
    CHECK(logs_equal(cluster.replica(0), cluster.replica(*cluster.leader())));
    finish(cluster);
}

TEST_CASE("a follower that missed thousands of ops catches up by state transfer (§5.2)")
{
    Cluster cluster(scenario_options(3, 202, 16));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 50; }, 1'000,
                    "50 operations before the partition");

    const ReplicaIndex lagging = 2;
    const Op lagging_op = cluster.replica(lagging).op();
    cluster.network().partition(isolating(cluster, lagging));
    const size_t completed = cluster.completed_ops();
    require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 2'500; }, 20'000,
                    "2500 operations without the lagging follower");
    CHECK(cluster.replica(lagging).op() <= lagging_op + 10);  // only what was already on its way

    cluster.network().heal();
    cluster.stop_new_ops();
    require_reaches(cluster, [&] { return in_view_of_leader(cluster, lagging); }, 3'000,
                    "the lagging follower holds the leader's whole log");
    CHECK(cluster.replica(lagging).counters().state_transfers > 0);
    CHECK(logs_equal(cluster.replica(lagging), cluster.replica(*cluster.leader())));
    finish(cluster);
}

TEST_CASE("two of five replicas crash, lose their state and recover (§4.3); nothing committed "
          "is lost")
{
    Cluster cluster(scenario_options(5, 303, 8));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 300; }, 3'000,
                    "300 operations before the crashes");
    REQUIRE(cluster.leader() == ReplicaIndex{0});
    const std::vector<CommittedOp> committed_before = cluster.committed();

    // The leader and a follower: f = 2 replicas down, the most VR tolerates.
    for (ReplicaIndex r : {ReplicaIndex{0}, ReplicaIndex{3}}) cluster.crash(r);
    const size_t completed = cluster.completed_ops();
    require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 200; }, 3'000,
                    "200 operations served by the three survivors");

    for (ReplicaIndex r : {ReplicaIndex{0}, ReplicaIndex{3}}) cluster.restart(r);
    require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 2'000,
                    "both restarted replicas complete recovery");
    CHECK(cluster.replica(0).counters().recoveries == 1);
    CHECK(cluster.replica(3).counters().recoveries == 1);

    cluster.stop_new_ops();
    require_reaches(cluster, [&] { return cluster.converged(); }, 2'000,
                    "all five replicas hold the same log");
    for (ReplicaIndex r = 0; r < cluster.replica_count(); r++) {
        const Replica& replica = cluster.replica(r);
        REQUIRE(replica.commit() >= committed_before.size());
        for (Op op = 1; op <= committed_before.size(); op++)
            REQUIRE(replica.entry(op) == committed_before[op - 1].entry);
    }
    finish(cluster);
}

TEST_CASE("a partition heals in the middle of a view change")
{
    SUBCASE("no side has a majority: the view change stalls until the heal, then completes")
    {
        Cluster cluster(scenario_options(5, 404));
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                        "100 operations before the partition");
        cluster.network().partition({0, 1, 1, 2, 2});  // {r0} {r1 r2} {r3 r4}
        require_reaches(cluster,
                        [&] {
                            for (ReplicaIndex r = 1; r < 5; r++)
                                if (cluster.replica(r).status() != Status::view_change)
                                    return false;
                            return true;
                        },
                        1'000, "every follower starts a view change");

        // Two replicas cannot complete a view change among five: nothing commits meanwhile.
        const size_t completed = cluster.completed_ops();
        cluster.run_ticks(300);
        require_safe(cluster);
        CHECK(cluster.completed_ops() == completed);
        for (ReplicaIndex r = 1; r < 5; r++)
            CHECK(cluster.replica(r).status() == Status::view_change);

        cluster.network().heal();
        require_reaches(cluster,
                        [&] {
                            const auto leader = cluster.leader();
                            return leader && cluster.replica(*leader).view() > 0 &&
                                   cluster.completed_ops() >= completed + 100;
                        },
                        3'000, "a new view forms after the heal and serves 100 operations");
        finish(cluster);
    }

    SUBCASE("healed as soon as the first replica starts the view change")
    {
        Cluster cluster(scenario_options(3, 405));
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                        "100 operations before the partition");
        cluster.network().partition(isolating(cluster, 0));
        require_reaches(cluster,
                        [&] {
                            return cluster.replica(1).status() == Status::view_change ||
                                   cluster.replica(2).status() == Status::view_change;
                        },
                        1'000, "a follower starts a view change");
        cluster.network().heal();

        const size_t completed = cluster.completed_ops();
        require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 100; },
                        3'000, "100 operations after the heal");
        finish(cluster);
    }
}

TEST_CASE("random seeds for cells of 1, 3, 5 and 7 replicas")
{
    for (const uint8_t replica_count : std::initializer_list<uint8_t>{1, 3, 5, 7}) {
        for (uint64_t seed = 1; seed <= 5; seed++) {
            const SeedResult result = run_seed(SeedOptions{.seed = seed,
                                                           .replica_count = replica_count,
                                                           .ops = 300});
            INFO("reproduce with: vr_sim --seed=", seed, " --replicas=", int{replica_count},
                 " --ops=300");
            CHECK_MESSAGE(!result.violation, result.violation.value_or(""));
            CHECK(result.completed_ops == 300);
        }
    }
}

}  // namespace voltlock::sim
