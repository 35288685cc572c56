// Named scenarios for the whole cell: each sets up one fault on purpose and asserts the outcome
// VR Revisited promises for it, on top of the invariants the cluster checks after every step
// (cluster.h). Every scenario ends by quiescing (liveness) and checking linearizability.
#include <doctest/doctest.h>

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "cluster.h"
#include "core/register_machine.h"
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

// Equal op numbers, and equal entries wherever both still hold them (compacted ops are in the
// snapshots, which the cluster checks by their state machines' digests).
bool logs_equal(const Replica& a, const Replica& b)
{
    if (a.op() != b.op()) return false;
    for (Op op = std::max(a.log_base(), b.log_base()) + 1; op <= a.op(); op++)
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
    CHECK(!cluster.replica(0).is_leader());  // answered by nobody, it stepped down

    cluster.network().heal();
    cluster.stop_new_ops();
    require_reaches(cluster,
                    [&] { return in_view_of_leader(cluster, 0) && cluster.outstanding_ops() == 0; },
                    2'000, "the old leader rejoins as a follower and catches up");
    CHECK(!cluster.replica(0).is_leader());
    CHECK(logs_equal(cluster.replica(0), cluster.replica(*cluster.leader())));
    finish(cluster);
}

namespace {

// Issue 11, scenario 5: every datagram to the leader is dropped; its own still go out, so the
// followers hear its Prepares and Commits. The leader, answered by nobody, steps down; the
// followers, whose acknowledgements are never committed, give up on it too. A new view serves
// clients while the cut lasts; healed, the old leader follows it.
void leader_deaf_then_healed(Cluster& cluster)
{
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                    "100 operations before the cut");
    REQUIRE(cluster.leader() == ReplicaIndex{0});
    for (ReplicaIndex r = 1; r < cluster.replica_count(); r++) cluster.network().block(r, 0);
    const uint64_t cut_tick = cluster.now_tick();
    require_reaches(cluster, [&] { return cluster.leader().value_or(0) != 0; }, 1'000,
                    "a leader other than the deaf one");
    // A view-change timeout to notice (20 ticks), one view change: well within 100 ticks.
    CHECK(cluster.now_tick() - cut_tick < 100);
    const View new_view = cluster.replica(*cluster.leader()).view();
    const size_t completed = cluster.completed_ops();
    require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 200; }, 3'000,
                    "200 more operations while the old leader still cannot hear");
    // Alone in its view change, the old leader does not move on to later views, which would
    // take the cell through a view change each time while it cannot hear.
    CHECK(cluster.replica(*cluster.leader()).view() == new_view);
    cluster.network().heal();
    require_reaches(cluster, [&] { return in_view_of_leader(cluster, 0); }, 3'000,
                    "the old leader follows the new view");
    finish(cluster);
}

}  // namespace

TEST_CASE("a one-way cut to the leader: it hears nobody and steps down; the followers, which "
          "still hear it, change view")
{
    for (const uint8_t replica_count : {uint8_t{3}, uint8_t{5}}) {
        CAPTURE(int{replica_count});
        Cluster cluster(scenario_options(replica_count, 103));
        leader_deaf_then_healed(cluster);
    }
}

TEST_CASE("a deaf follower (every datagram to it dropped) asks whether the others lost the "
          "leader too, but deposes nobody; healed, it catches up in the same view")
{
    // Before, it started a view change that the others joined, and then one after another at
    // growing intervals while the cut lasted: each a pause in service (a tester's finding).
    for (const uint8_t replica_count : {uint8_t{3}, uint8_t{5}}) {
        CAPTURE(int{replica_count});
        Cluster cluster(scenario_options(replica_count, 107));
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                        "100 operations before the cut");
        REQUIRE(cluster.leader() == ReplicaIndex{0});
        const ReplicaIndex deaf = 1;
        for (ReplicaIndex r = 0; r < replica_count; r++)
            if (r != deaf) cluster.network().block(r, deaf);
        const size_t completed = cluster.completed_ops();
        require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 500; },
                        5'000, "500 operations while r1 hears nothing");
        CHECK(cluster.leader() == ReplicaIndex{0});
        CHECK(cluster.replica(0).view() == 0);
        CHECK(cluster.replica(deaf).status() == Status::normal);
        cluster.network().heal();
        require_reaches(cluster, [&] { return in_view_of_leader(cluster, deaf); }, 2'000,
                        "healed, r1 follows the same leader");
        CHECK(cluster.views_established() == 0);
        finish(cluster);
    }
}

TEST_CASE("leases: a leader cut off from its peers while its clients keep talking to it stops "
          "extending leases before the new leader may expire them (clocks at the drift bound)")
{
    // Issue 11, scenario 1: the deposed leader answered keepalives for 1.94 s after the cut, and
    // the new leader expired the session 1.5 s before the lease its client held ran out. The
    // cluster checks "no two holders" after every tick (cluster.h); here with every clock as far
    // off as the bound allows. (With the old rule, the leader extending while it leads and the
    // new one waiting a TTL, it finds two holders for 69 ms although the cut-off leader now
    // steps down.)
    for (const uint64_t seed : {104, 105, 106}) {
        CAPTURE(seed);
        ClusterOptions options = scenario_options(3, seed);
        options.clocks_at_drift_bound = true;
        options.session_ttl_ms = 4'000;  // the issue's
        Cluster cluster(options);
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                        "100 operations before the cut");
        REQUIRE(cluster.leader() == ReplicaIndex{0});
        REQUIRE(cluster.replica(0).holds_leader_lease(cluster.local_clock_ms(0)));
        cluster.network().partition(isolating(cluster, 0));
        // Its lease lapses a lease period after the last heartbeat its followers echoed.
        cluster.run_ticks(25);
        CHECK_FALSE(cluster.replica(0).holds_leader_lease(cluster.local_clock_ms(0)));
        require_reaches(cluster, [&] { return cluster.leader().value_or(0) != 0; }, 1'000,
                        "a new leader");
        const ReplicaIndex leader = *cluster.leader();
        require_reaches(cluster,
                        [&] { return cluster.replica(leader).holds_leader_lease(
                                  cluster.local_clock_ms(leader)); },
                        100, "the new leader's own lease, confirmed by its follower");
        cluster.network().heal();
        finish(cluster);
        CHECK(cluster.lease_counters().leader_starts >= 2);
    }
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
        for (Op op = replica.log_base() + 1; op <= committed_before.size(); op++)
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
        require_reaches(cluster, [&] { return cluster.replica(0).status() == Status::view_change; },
                        1'000, "the leader, answered by nobody, steps down");

        // Two replicas cannot complete a view change among five: nothing commits meanwhile. Two
        // followers that lost the leader ask each other, but do not start a view change that
        // needs a third (suspect_leader).
        const size_t completed = cluster.completed_ops();
        cluster.run_ticks(300);
        require_safe(cluster);
        CHECK(cluster.completed_ops() == completed);
        for (ReplicaIndex r = 1; r < 5; r++) {
            CHECK(cluster.replica(r).status() == Status::normal);
            CHECK(cluster.replica(r).view() == 0);
        }

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

namespace {

// Electrode on every replica, every fast path on (the simulated kernels run fast_path.h).
ClusterOptions electrode_options(uint8_t replica_count, uint64_t seed, size_t client_count = 4)
{
    ClusterOptions options = scenario_options(replica_count, seed, client_count);
    // One tick for every datagram: a follower's kernel sees the leader's Prepares in order and
    // acknowledges them all.
    options.faults.max_delay_ticks = 1;
    options.electrode.assign(replica_count,
                             ElectrodeOptions{.attached = true, .enabled = VL_FAST_PATHS_ALL});
    return options;
}

bool new_leader_elected(const Cluster& cluster)
{
    const auto leader = cluster.leader();
    return leader && cluster.replica(*leader).view() > 0;
}

// The new leader's log holds every op of `committed` (the cell's committed ops when r0 died).
void require_holds(const Cluster& cluster, const std::vector<CommittedOp>& committed)
{
    const Replica& leader = cluster.replica(*cluster.leader());
    REQUIRE(leader.op() >= committed.size());
    for (Op op = leader.log_base() + 1; op <= committed.size(); op++)
        REQUIRE(leader.entry(op) == committed[op - 1].entry);
}

void restart_and_finish(Cluster& cluster)
{
    cluster.restart(0);
    const size_t completed = cluster.completed_ops();
    require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 100; }, 2'000,
                    "100 more operations in the new view");
    finish(cluster);
}

// r0, the leader, dies: the others elect a new one, and every op r0 had committed survives.
void crash_the_leader_and_keep_what_it_committed(Cluster& cluster)
{
    const std::vector<CommittedOp> committed = cluster.committed();
    cluster.crash(0);
    require_reaches(cluster, [&] { return new_leader_elected(cluster); }, 1'000,
                    "§4.2: the followers elect a new leader");
    require_holds(cluster, committed);
    restart_and_finish(cluster);
}

}  // namespace

TEST_CASE("Electrode: the followers' processes stall while their kernels acknowledge; the leader "
          "commits on those acks and dies; no committed op is lost (§4.2)")
{
    Cluster cluster(electrode_options(3, 606));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                    "100 operations with every fast path on");
    REQUIRE(cluster.leader() == ReplicaIndex{0});

    // Descheduled: their kernels go on appending to the ring and acknowledging; their cores
    // hear nothing until the processes run again.
    for (ReplicaIndex r : {ReplicaIndex{1}, ReplicaIndex{2}}) cluster.stall(r, 100);
    require_reaches(cluster,
                    [&] {
                        for (ReplicaIndex r : {ReplicaIndex{1}, ReplicaIndex{2}})
                            if (cluster.ring_records(r) < 3 ||
                                cluster.replica(r).op() + 3 > cluster.replica(0).commit())
                                return false;
                        return true;
                    },
                    100, "the leader commits 3 ops both followers hold only in their rings");
    // When they run again, each reads its ring before anything else (voltlockd's on_timer and
    // on_datagrams), so the view change they go through has those ops in its logs.
    crash_the_leader_and_keep_what_it_committed(cluster);
}

TEST_CASE("Electrode: a one-way cut to the leader is seen although the followers' kernels "
          "acknowledge its Prepares")
{
    Cluster cluster(electrode_options(3, 607));
    leader_deaf_then_healed(cluster);
}

namespace {

// After 100 operations with r0 leading, r1 is cut off from the leader and, for now, from r2
// too, and changes views: r0 commits on r2's acknowledgements alone. (A follower cut off alone
// only asks the others (suspect_leader); a StartViewChange placed for it, as from a leader that
// stepped down, takes it into the view change.)
Network& isolate_r1_from_a_working_cell(Cluster& cluster)
{
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                    "100 operations with every fast path on");
    REQUIRE(cluster.leader() == ReplicaIndex{0});
    Network& network = cluster.network();
    network.block(0, 1);
    network.block(1, 0);
    network.block(1, 2);
    network.place(Address::replica(0), Address::replica(1),
                  encode(StartViewChange{.view = 1, .replica = 0}, cluster.options().cluster_id),
                  cluster.now_tick() + 1, 0);
    require_reaches(cluster, [&] { return cluster.replica(1).status() == Status::view_change; },
                    100, "r1 changes views");
    return network;
}

// r2's kernel acknowledgement and its StartViewChange, on their way to r0 in the same tick,
// arrive in that order: these scenarios are about an op that r0 commits on the acknowledgement.
void acknowledgements_first(Cluster& cluster)
{
    Network& network = cluster.network();
    const uint32_t cluster_id = cluster.options().cluster_id;
    for (Datagram& d : network.take(Address::replica(2), Address::replica(0))) {
        const DecodeResult decoded = decode(d.bytes, cluster_id);
        const bool acknowledgement =
            decoded.ok() && std::holds_alternative<PrepareOk>(decoded.value().message);
        network.place(d.from, d.to, std::move(d.bytes), cluster.now_tick() + 1,
                      acknowledgement ? 0 : UINT64_MAX);
    }
}

}  // namespace

TEST_CASE("Electrode: a follower's kernel acknowledges a Prepare after its shell last read the "
          "ring, and a StartViewChange comes later in the same batch: the drain puts the op in "
          "the DoViewChange (§4.2), and the leader, which committed it on that acknowledgement, "
          "can die")
{
    Cluster cluster(electrode_options(3, 601));
    Network& network = isolate_r1_from_a_working_cell(cluster);
    // A tick in which r0 sends a Prepare: it reaches r2 in the next.
    Op before = cluster.replica(0).op();
    require_reaches(cluster,
                    [&] {
                        const bool sent = cluster.replica(0).op() > before;
                        before = cluster.replica(0).op();
                        return sent;
                    },
                    100, "r0 sends a Prepare");
    REQUIRE(cluster.kernel_state(2)->fast_ack == 1);
    // In that next tick, r2's socket batch starts with a client's stale request (the shell reads
    // the ring: nothing new), its kernel appends and acknowledges the Prepare, and the batch
    // ends with r1's StartViewChange.
    const uint64_t next = cluster.now_tick() + 1;
    const uint32_t cluster_id = cluster.options().cluster_id;
    network.place(Address::client(0), Address::replica(2),
                  encode(Request{.view = 0, .client_id = 1, .request_number = 1,
                                 .payload = RegisterMachine::read_op()},
                         cluster_id),
                  next, 0);
    network.place(Address::replica(1), Address::replica(2),
                  encode(StartViewChange{.view = cluster.replica(1).view(), .replica = 1},
                         cluster_id),
                  next, UINT64_MAX);
    network.heal();
    network.block(0, 1);
    network.block(1, 0);
    const ElectrodeCounters counters = cluster.electrode_counters();
    cluster.run_tick();  // r2 fences on the StartViewChange, drains, then sends DoViewChange
    acknowledgements_first(cluster);
    require_safe(cluster);
    const Op acked = cluster.replica(2).op();
    CHECK(cluster.electrode_counters().drained_records > counters.drained_records);
    CHECK(cluster.replica(1).op() < acked);
    cluster.run_tick();  // r0 commits on r2's kernel acknowledgement
    require_safe(cluster);
    CHECK(cluster.committed().size() >= acked);

    crash_the_leader_and_keep_what_it_committed(cluster);
}

TEST_CASE("Electrode: a follower's kernel acknowledges a Prepare; in the same batch, the next "
          "one is lost, the one after makes its core fetch the gap (§5.2), which switches fast "
          "ack off, and a StartViewChange follows: the acknowledged op must still be in the "
          "DoViewChange")
{
    // Clients that think a while: their requests reach r0 over several ticks, and r0 has three
    // Prepares' worth in hand when r2's acknowledgements stop.
    ClusterOptions options = electrode_options(3, 601, 16);
    options.max_think_ticks = 6;
    Cluster cluster(options);
    Network& network = isolate_r1_from_a_working_cell(cluster);
    // r0's next three Prepares to r2, held back (by last op).
    const uint32_t cluster_id = cluster.options().cluster_id;
    std::map<Op, Datagram> held;
    require_reaches(cluster,
                    [&] {
                        for (Datagram& d : network.take(Address::replica(0), Address::replica(2))) {
                            DecodeResult decoded = decode(d.bytes, cluster_id);
                            if (!decoded.ok()) continue;
                            if (const auto* p = std::get_if<Prepare>(&decoded.value().message))
                                held.try_emplace(p->op, std::move(d));
                            else  // heartbeats go on, so that r2's answers keep r0 leading
                                network.place(d.from, d.to, d.bytes, cluster.now_tick() + 1, 0);
                        }
                        return held.size() >= 3;
                    },
                    100, "r0 sends three more Prepares");
    const auto first_prepare = [&](std::map<Op, Datagram>::iterator it) {
        return std::get<Prepare>(decode(it->second.bytes, cluster_id).value().message);
    };
    const Prepare appended = first_prepare(held.begin());
    REQUIRE(cluster.kernel_state(2)->fast_ack == 1);
    REQUIRE(cluster.ring_records(2) == 0);
    REQUIRE(appended.op - appended.entries.size() == cluster.replica(2).op());
    // Next tick, one batch at r2: a client's stale request (the shell reads the ring), the first
    // Prepare (the kernel appends and acknowledges it), the third (a gap: up to the core, which
    // starts fetching and says fast_ack 0), r1's StartViewChange.
    const uint64_t next = cluster.now_tick() + 1;
    network.place(Address::client(0), Address::replica(2),
                  encode(Request{.view = 0, .client_id = 1, .request_number = 1,
                                 .payload = RegisterMachine::read_op()},
                         cluster_id),
                  next, 0);
    network.place(Address::replica(0), Address::replica(2), held.begin()->second.bytes, next, 1);
    network.place(Address::replica(0), Address::replica(2),
                  std::next(held.begin(), 2)->second.bytes, next, 2);
    network.place(Address::replica(1), Address::replica(2),
                  encode(StartViewChange{.view = cluster.replica(1).view(), .replica = 1},
                         cluster_id),
                  next, UINT64_MAX);
    network.heal();
    network.block(0, 1);
    network.block(1, 0);
    cluster.run_tick();  // r2 changes view
    acknowledgements_first(cluster);
    cluster.run_tick();  // r0 gets r2's kernel acknowledgement
    require_safe(cluster);
    CHECK(cluster.replica(1).op() < appended.op);
    CHECK(cluster.committed().size() >= appended.op);

    crash_the_leader_and_keep_what_it_committed(cluster);
}

// ---- Snapshots, compaction and data directories (DESIGN.md §5) -------------------------------

namespace {

// Every replica snapshots (and compacts its log) every 20 ops; the data directory's writes and
// fetches take a few ticks and never fail unless the scenario says so.
ClusterOptions storage_options(uint8_t replica_count, uint64_t seed, bool sync,
                               size_t client_count = 4)
{
    ClusterOptions options = scenario_options(replica_count, seed, client_count);
    options.snapshot_every_ops = 20;
    options.durability_sync = sync;
    options.max_snapshot_write_ticks = 3;
    options.max_snapshot_fetch_ticks = 5;
    return options;
}

bool compacted_past(const Cluster& cluster, Op op)
{
    const auto leader = cluster.leader();
    return leader && cluster.replica(*leader).log_base() > op;
}

// Converged, and the state machines agree.
void require_converged(Cluster& cluster)
{
    cluster.stop_new_ops();
    require_reaches(cluster, [&] { return cluster.outstanding_ops() == 0 && cluster.converged(); },
                    3'000, "every operation completes and the replicas converge");
    for (ReplicaIndex r = 1; r < cluster.replica_count(); r++) {
        CHECK(logs_equal(cluster.replica(r), cluster.replica(0)));
        CHECK(cluster.machine(r).state_digest() == cluster.machine(0).state_digest());
    }
}

void restart_all_from_disk(Cluster& cluster)
{
    for (ReplicaIndex r = 0; r < cluster.replica_count(); r++) cluster.restart_from_disk(r);
}

// After a whole-cell restart: the cell serves 100 more operations, converges, and still holds
// every op committed before it, at the same op (the cluster checks every later commit against
// them too, and every reply a client accepted).
void require_serves_keeping(Cluster& cluster, const std::vector<CommittedOp>& committed)
{
    const size_t completed = cluster.completed_ops();
    require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 100; }, 3'000,
                    "100 more operations after the restart");
    require_converged(cluster);
    REQUIRE(cluster.committed().size() >= committed.size());
    for (Op op = 1; op <= committed.size(); op++)
        REQUIRE(cluster.committed()[op - 1].entry == committed[op - 1].entry);
}

}  // namespace

TEST_CASE("§5.2: a follower cut off while the others compact past it catches up by installing "
          "their snapshot")
{
    Cluster cluster(storage_options(3, 701, false));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 50; }, 1'000,
                    "50 operations before the partition");
    const ReplicaIndex lagging = 2;
    cluster.network().partition(isolating(cluster, lagging));
    const Op lagging_op = cluster.replica(lagging).op();
    require_reaches(cluster, [&] { return compacted_past(cluster, lagging_op + 100); }, 5'000,
                    "the others compact 100 ops past the cut-off follower");
    CHECK(cluster.replica(lagging).counters().snapshots_installed == 0);

    cluster.network().heal();
    require_converged(cluster);
    CHECK(cluster.replica(lagging).counters().snapshots_installed >= 1);
    CHECK(cluster.disk_snapshot_op(lagging) > lagging_op + 100);  // it serves it, and keeps it
    finish(cluster);
}

TEST_CASE("§4.3 + §5.2: a replica restarted from its data directory after the others compacted "
          "past it installs their snapshot, then fetches the rest")
{
    for (const bool sync : {false, true}) {
        CAPTURE(sync);
        Cluster cluster(storage_options(3, 702, sync));
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                        "100 operations before the crash");
        cluster.crash(1);
        const Op on_disk = cluster.disk_last_op(1);
        REQUIRE(on_disk > 0);
        require_reaches(cluster, [&] { return compacted_past(cluster, on_disk + 100); }, 5'000,
                        "the others compact 100 ops past what r1's data directory holds");

        cluster.restart_from_disk(1);
        CHECK(cluster.replica(1).commit() == cluster.disk_snapshot_op(1));  // restored
        require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 2'000,
                        "r1 recovers");
        CHECK(cluster.replica(1).counters().recoveries == 1);
        CHECK(cluster.replica(1).counters().snapshots_installed == 1);
        require_converged(cluster);
        finish(cluster);
    }
}

TEST_CASE("§4.3 + §5.2: a replica that lost its disk recovers from nothing by installing the "
          "leader's snapshot")
{
    Cluster cluster(storage_options(5, 703, true, 8));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                    "100 operations before the crash");
    cluster.crash(3);
    require_reaches(cluster, [&] { return compacted_past(cluster, 200); }, 5'000,
                    "the others compact past op 200");
    cluster.restart(3);  // a new, empty disk: StartRecovering
    CHECK(cluster.disk_last_op(3) == 0);
    require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 2'000,
                    "r3 recovers (§4.3)");
    CHECK(cluster.replica(3).counters().snapshots_installed == 1);
    CHECK(cluster.disk_snapshot_op(3) > 200);  // written before the log persisted after it
    require_converged(cluster);
    finish(cluster);
}

namespace {

// 50 operations, then 100 more with `lagging` cut off, held by r0 (the leader) and the third
// replica alone: every op committed so far.
std::vector<CommittedOp> commit_while_cut_off(Cluster& cluster, ReplicaIndex lagging)
{
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 50; }, 1'000,
                    "50 operations before the partition");
    REQUIRE(cluster.leader() == ReplicaIndex{0});
    cluster.network().partition(isolating(cluster, lagging));
    const size_t completed = cluster.completed_ops();
    require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 100; }, 3'000,
                    "100 operations held by the leader and one follower alone");
    return cluster.committed();
}

}  // namespace

TEST_CASE("a replica that lost its disk, started without --recover while the other holder of "
          "the newest ops is down, waits for it rather than starting a new cell")
{
    // Before, voltlockd started it as StartFresh: with the replica that missed those ops it
    // formed a view without them, and they were lost once the holder came back.
    Cluster cluster(storage_options(3, 705, true));
    const ReplicaIndex lagging = 1;
    const ReplicaIndex wiped = 2;
    const std::vector<CommittedOp> committed = commit_while_cut_off(cluster, lagging);
    cluster.crash(wiped);
    cluster.crash(0);
    cluster.network().heal();
    cluster.restart(wiped, /*without --recover*/ true);
    cluster.run_ticks(500);  // many recovery rounds
    CHECK(cluster.replica(wiped).status() == Status::recovering);
    CHECK(cluster.replica(wiped).counters().bootstraps == 0);
    CHECK(cluster.replica(lagging).status() != Status::normal);

    cluster.restart_from_disk(0);
    require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 3'000,
                    "r0 back with its log, r2 recovered from it");
    CHECK(cluster.replica(wiped).counters().bootstraps == 0);
    CHECK(cluster.replica(wiped).counters().recoveries == 1);
    require_serves_keeping(cluster, committed);
    CHECK(cluster.storage_counters().committed_ops_lost == 0);
    finish(cluster);
}

TEST_CASE("durability snapshot: a leader that stepped down and was stopped in its view change "
          "goes on with it once restarted; the replica it left in the same view change follows")
{
    // As above, but the leader first steps down (it hears no quorum) and is stopped gracefully.
    // Before, the restarted leader joined only a later view change, and the lagging replica,
    // changing to the same view with too few others, climbs no further: no leader for good
    // (CI, 2026-11-29, test_safety_edges scenario 10).
    Cluster cluster(storage_options(3, 706, false));
    const ReplicaIndex lagging = 1;
    const ReplicaIndex wiped = 2;
    const std::vector<CommittedOp> committed = commit_while_cut_off(cluster, lagging);
    cluster.crash(wiped);
    require_reaches(cluster, [&] { return cluster.replica(0).status() == Status::view_change; },
                    1'000, "r0 steps down");
    const View stopped_in = cluster.replica(0).view();
    cluster.stop(0);
    cluster.network().heal();
    cluster.restart(wiped, /*without --recover*/ true);
    require_reaches(cluster,
                    [&] { return cluster.replica(lagging).status() == Status::view_change; },
                    1'000, "r1 changes views, asked by r2's recovery");
    cluster.run_ticks(300);
    REQUIRE(cluster.replica(lagging).view() == stopped_in);

    cluster.restart_from_disk(0);
    require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 3'000,
                    "r0 and r1 finish that view change, r2 recovers");
    CHECK(cluster.replica(wiped).counters().bootstraps == 0);
    require_serves_keeping(cluster, committed);
    CHECK(cluster.storage_counters().acknowledged_ops_lost == 0);
    finish(cluster);
}

TEST_CASE("a replica on a lost disk restarted before it recovered holds nothing: it does not "
          "restart the cell with an older snapshot while the replica holding the writes is down")
{
    // Before, its second start restored a state of op 0 from the directory its first start had
    // made, and voted with a crashed replica's older snapshot to restart the cell without the
    // survivor, stopped meanwhile: acknowledged writes lost (an operator's finding, 2026-11-29).
    Cluster cluster(storage_options(3, 707, false));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 50; }, 1'000,
                    "50 operations before the crash");
    REQUIRE(cluster.leader() == ReplicaIndex{0});
    const ReplicaIndex crashed = 1;
    const ReplicaIndex wiped = 2;
    cluster.crash(crashed);
    const size_t completed = cluster.completed_ops();
    require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 100; }, 3'000,
                    "100 operations held by r0 and r2 alone");
    const std::vector<CommittedOp> committed = cluster.committed();
    cluster.crash(wiped);
    cluster.restart(wiped, /*without --recover*/ true);
    cluster.run_ticks(200);  // r0 alone runs no view: nothing to recover from
    REQUIRE(cluster.replica(wiped).status() == Status::recovering);
    cluster.crash(wiped);
    cluster.restart_from_disk(wiped);
    CHECK(cluster.disk_last_op(wiped) == 0);
    cluster.stop(0);
    cluster.restart_from_disk(crashed);
    cluster.run_ticks(500);  // many recovery rounds
    CHECK(cluster.replica(crashed).status() != Status::normal);
    CHECK(cluster.replica(wiped).status() != Status::normal);

    cluster.restart_from_disk(0);
    require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 3'000,
                    "the cell restarts with r0's state, the others recover");
    require_serves_keeping(cluster, committed);
    CHECK(cluster.storage_counters().committed_ops_lost == 0);
    finish(cluster);
}

TEST_CASE("a new cell that crashes whole before its first snapshot restarts the cell, not a new "
          "one: its replicas recorded that they held its state")
{
    // In view 0 nothing else is on disk: without the record each would start as on a new
    // directory, and the cell anew, giving out its revisions again.
    ClusterOptions options = storage_options(3, 708, false);
    options.start_blank = true;
    options.snapshot_every_ops = 100'000;
    Cluster cluster(options);
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 30; }, 1'000,
                    "30 operations in view 0");
    REQUIRE(cluster.replica(0).view() == 0);
    cluster.crash_cell();
    for (ReplicaIndex r = 0; r < 3; r++) {
        CHECK_FALSE(cluster.disk_holds_nothing(r));
        cluster.restart_from_disk(r);
    }
    require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 3'000,
                    "the cell restarts");
    for (ReplicaIndex r = 0; r < 3; r++) {
        CHECK(cluster.replica(r).counters().bootstraps == 0);
        CHECK(cluster.replica(r).counters().cell_restarts == 1);
    }
    finish(cluster);
}

TEST_CASE("a new cell of replicas on new data directories (no --recover) starts once every one "
          "answers, in view 0, led by its first leader")
{
    for (const uint8_t replica_count : {uint8_t{1}, uint8_t{3}, uint8_t{5}}) {
        CAPTURE(int{replica_count});
        ClusterOptions options = scenario_options(replica_count, 706, 4);
        options.start_blank = true;
        Cluster cluster(options);
        if (replica_count > 1) {
            const ReplicaIndex late = replica_count - 1;
            cluster.network().partition(isolating(cluster, late));
            cluster.run_ticks(200);
            for (ReplicaIndex r = 0; r < replica_count; r++)
                CHECK(cluster.replica(r).status() == Status::recovering);
            cluster.network().heal();
        }
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                        "100 operations");
        CHECK(cluster.leader() == ReplicaIndex{0});
        for (ReplicaIndex r = 0; r < replica_count; r++) {
            CHECK(cluster.replica(r).counters().bootstraps == 1);
            CHECK(cluster.replica(r).view() == 0);
        }
        finish(cluster);
    }
}

TEST_CASE("durability sync: the whole cell loses power; every acknowledged op survives")
{
    for (const uint8_t replica_count : {uint8_t{3}, uint8_t{5}}) {
        CAPTURE(int{replica_count});
        Cluster cluster(storage_options(replica_count, 704, true, 8));
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 300; }, 3'000,
                        "300 operations before the power cut");
        const std::vector<CommittedOp> committed = cluster.committed();
        cluster.crash_cell();
        cluster.run_ticks(20);
        restart_all_from_disk(cluster);
        require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 3'000,
                        "the cell restarts (§4.2 among the restarting)");
        require_serves_keeping(cluster, committed);
        CHECK(cluster.storage_counters().acknowledged_ops_lost == 0);
        CHECK(cluster.storage_counters().committed_ops_lost == 0);
        size_t restarted = 0;
        for (ReplicaIndex r = 0; r < replica_count; r++)
            restarted += cluster.replica(r).counters().cell_restarts;
        CHECK(restarted >= cluster.max_faulty() + 1u);
        finish(cluster);
    }
}

TEST_CASE("durability sync: the whole cell loses power with a log longer than the pipeline; the "
          "new leader commits it all and goes on")
{
    // Issue 11, scenario 4: restored, every replica's commit number is its snapshot's (none
    // here), so the selected log is all uncommitted, longer than the pipeline; every candidate
    // leader stopped at the pipeline invariant in turn, and the cell never came back.
    ClusterOptions options = storage_options(3, 711, true, 8);
    options.snapshot_every_ops = 0;
    options.pipeline_ops = 16;
    Cluster cluster(options);
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 200; }, 3'000,
                    "200 operations before the power cut");
    const std::vector<CommittedOp> committed = cluster.committed();
    cluster.crash_cell();
    REQUIRE(cluster.disk_last_op(0) > 10 * options.pipeline_ops);
    restart_all_from_disk(cluster);
    require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 3'000,
                    "the cell restarts with its whole log");
    const size_t completed = cluster.completed_ops();
    require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 100; }, 3'000,
                    "100 more operations after the restart");
    require_converged(cluster);
    for (Op op = 1; op <= committed.size(); op++)
        REQUIRE(cluster.committed()[op - 1].entry == committed[op - 1].entry);
    finish(cluster);
}

TEST_CASE("durability sync: the whole cell loses power with a log that takes many view-change "
          "timeouts to fetch; the first leader that starts commits it and is not deposed")
{
    // The long-log restart of docs/fault-testing.md: with thousands of entries after the last
    // snapshot (none here), the followers fetch the selected log from the new leader in
    // datagram-sized pieces for far longer than a view-change timeout. The leader, hearing no
    // heartbeat answers meanwhile, stepped down; followers that had the log waited for a commit
    // that could not come yet and suspected it; the cell changed views for ever.
    for (const uint8_t replica_count : {uint8_t{3}, uint8_t{5}}) {
        CAPTURE(int{replica_count});
        ClusterOptions options = storage_options(replica_count, 713, true, 16);
        options.snapshot_every_ops = 0;
        options.pipeline_ops = 64;
        Cluster cluster(options);
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 3'000; }, 20'000,
                        "3,000 operations before the power cut");
        const std::vector<CommittedOp> committed = cluster.committed();
        cluster.crash_cell();
        const Op log_length = cluster.disk_last_op(0);
        REQUIRE(log_length > 40 * options.pipeline_ops);
        restart_all_from_disk(cluster);
        const uint64_t restart_tick = cluster.now_tick();
        // Fetched at some 15 entries per round trip, the log takes ~10 view-change timeouts
        // to reach the followers; many more than that is the endless round of views.
        const size_t completed = cluster.completed_ops();
        require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 100; },
                        6'000, "100 more operations after the restart");
        MESSAGE("log of " << log_length << " ops: serving again after "
                          << cluster.now_tick() - restart_tick << " ticks");
        uint64_t views_entered = 0;
        for (ReplicaIndex r = 0; r < replica_count; r++)
            views_entered = std::max(views_entered, cluster.replica(r).counters().view_changes);
        CHECK(views_entered <= 2);  // the restart's view, perhaps one more: never a round of them
        require_converged(cluster);
        for (Op op = 1; op <= committed.size(); op++)
            REQUIRE(cluster.committed()[op - 1].entry == committed[op - 1].entry);
        CHECK(cluster.storage_counters().acknowledged_ops_lost == 0);
        finish(cluster);
    }
}

TEST_CASE("a graceful stop of the whole cell (SIGTERM to every replica) and a restart lose "
          "nothing acknowledged, in either durability mode")
{
    // Issue 11, scenario 3: with durability snapshot, a stop used to be a crash: every write
    // since the newest snapshot was lost. Now each replica writes a snapshot of what it applied
    // and the log of what it acknowledged after it, and the restart takes part in the view
    // change with them as durability sync would.
    for (const bool sync : {false, true}) {
        CAPTURE(sync);
        ClusterOptions options = storage_options(3, 712, sync, 8);
        options.snapshot_every_ops = 100;
        Cluster cluster(options);
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 250; }, 3'000,
                        "250 operations before the stop");
        const std::vector<CommittedOp> committed = cluster.committed();
        Op newest_snapshot = 0;  // what a crash now would come back with, at most
        for (ReplicaIndex r = 0; r < 3; r++)
            newest_snapshot = std::max(newest_snapshot, cluster.disk_snapshot_op(r));
        CHECK(newest_snapshot + 20 < committed.size());
        cluster.stop_cell();
        cluster.run_ticks(20);
        restart_all_from_disk(cluster);
        require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 3'000,
                        "the cell restarts");
        require_serves_keeping(cluster, committed);
        CHECK(cluster.storage_counters().acknowledged_ops_lost == 0);
        CHECK(!cluster.resumed_op().has_value());  // no history was cut
        finish(cluster);
    }
}

TEST_CASE("durability snapshot: a stopped replica restarts with its log and joins the live "
          "cell's view change with it; one killed does not")
{
    ClusterOptions options = storage_options(3, 713, false);
    options.snapshot_every_ops = 1'000;
    Cluster cluster(options);
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 100; }, 2'000,
                    "100 operations");
    cluster.stop(1);
    CHECK(cluster.disk_last_op(1) >= cluster.committed().size() - 5);  // its log, on disk
    cluster.restart_from_disk(1);
    CHECK(!cluster.replica(1).state_unconfirmed());
    CHECK(cluster.replica(1).op() > cluster.replica(1).commit());  // the log after its snapshot
    require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 2'000, "r1 recovers");
    require_converged(cluster);
    finish(cluster);
}

TEST_CASE("durability snapshot: f + 1 replicas restart from older snapshots while one that "
          "holds every committed op runs on; its state wins, nothing committed is dropped")
{
    // Issue 11, scenario 2: r0 killed; ops committed by r1 and r2; r2 killed; r0 and r2 restart
    // from their snapshots. They used to restart the cell between them, from their snapshots,
    // and r1, which never stopped, installed their state and dropped the ops it held. Down for
    // long, r1 has stepped down (it hears no quorum) and is changing views when they come back.
    const uint64_t timeout_ticks = ReplicaConfig{}.view_change_timeout_ticks;
    for (const auto& [electrode, down_ticks] :
         {std::pair{false, uint64_t{10}}, std::pair{true, uint64_t{10}},
          std::pair{false, 10 * timeout_ticks}, std::pair{true, 10 * timeout_ticks}}) {
        CAPTURE(electrode);
        CAPTURE(down_ticks);
        ClusterOptions options = storage_options(3, 714, false);
        if (electrode)
            options.electrode.assign(3, ElectrodeOptions{.attached = true,
                                                         .enabled = VL_FAST_PATHS_ALL});
        Cluster cluster(options);
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 30; }, 1'000,
                        "30 operations");
        cluster.crash(0);
        const size_t completed = cluster.completed_ops();
        require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 100; },
                        3'000, "100 more operations on r1 and r2");
        cluster.crash(2);
        const std::vector<CommittedOp> committed = cluster.committed();
        REQUIRE(cluster.disk_snapshot_op(0) < committed.size());
        REQUIRE(cluster.disk_snapshot_op(2) < committed.size());
        cluster.run_ticks(down_ticks);
        cluster.restart_from_disk(0);
        cluster.restart_from_disk(2);
        require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 3'000,
                        "the cell runs again, with r1's state");
        require_converged(cluster);
        REQUIRE(cluster.committed().size() >= committed.size());
        for (Op op = 1; op <= committed.size(); op++)
            REQUIRE(cluster.committed()[op - 1].entry == committed[op - 1].entry);
        CHECK(!cluster.resumed_op().has_value());
        finish(cluster);
    }
}

TEST_CASE("durability snapshot: the whole cell loses power; it comes back with everything up to "
          "the newest snapshot of the replicas that restart it")
{
    Cluster cluster(storage_options(3, 705, false, 8));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 300; }, 3'000,
                    "300 operations before the power cut");
    const std::vector<CommittedOp> committed = cluster.committed();
    cluster.crash_cell();
    ReplicaIndex newest = 0;
    for (ReplicaIndex r = 1; r < 3; r++)
        if (cluster.disk_snapshot_op(r) > cluster.disk_snapshot_op(newest)) newest = r;
    const Op snapshot_op = cluster.disk_snapshot_op(newest);
    REQUIRE(snapshot_op > 0);
    INFO("committed ", committed.size(), " ops; snapshots r0 ", cluster.disk_snapshot_op(0),
            " r1 ", cluster.disk_snapshot_op(1), " r2 ", cluster.disk_snapshot_op(2));

    // The replica with the newest snapshot and one other restart the cell; the third comes back
    // once it runs, and recovers from it (§4.3).
    const auto other = static_cast<ReplicaIndex>((newest + 1) % 3);
    const auto late = static_cast<ReplicaIndex>((newest + 2) % 3);
    cluster.run_ticks(20);
    cluster.restart_from_disk(newest);
    cluster.restart_from_disk(other);
    require_reaches(cluster, [&] { return !cluster.cell_restart_unsettled(); }, 3'000,
                    "the two restart the cell and commit its first op since");
    cluster.restart_from_disk(late);
    require_reaches(cluster, [&] { return cluster.down_count() == 0; }, 3'000,
                    "the third recovers");
    require_converged(cluster);

    REQUIRE(cluster.resumed_op().has_value());
    CHECK(*cluster.resumed_op() >= snapshot_op);
    for (Op op = 1; op <= snapshot_op; op++)
        REQUIRE(cluster.committed()[op - 1].entry == committed[op - 1].entry);
    finish(cluster);
}

TEST_CASE("durability snapshot: a replica restarted from its snapshot takes no part in the live "
          "cell's view change, which could otherwise lose the ops it acknowledged after it")
{
    // vr_sim seed 1 x 3 found it: r0 led, with ops committed on r1's acknowledgements beyond its
    // snapshot; restarted from the snapshot, it joined r2's view change, and the two lost them.
    Cluster cluster(storage_options(3, 706, false));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 60; }, 2'000,
                    "60 operations");
    REQUIRE(cluster.leader() == ReplicaIndex{0});
    cluster.network().partition(isolating(cluster, 2));  // r0 commits with r1 alone
    require_reaches(cluster,
                    [&] {
                        const Op commit = cluster.replica(0).commit();
                        return commit >= cluster.disk_snapshot_op(0) + 10 &&
                               commit >= cluster.replica(2).op() + 10;
                    },
                    2'000, "r0 commits 10 ops beyond its snapshot, which r2 does not hold");
    cluster.crash(0);
    cluster.network().heal();
    cluster.network().partition(isolating(cluster, 1));  // now r1, which holds them, is away
    cluster.restart_from_disk(0);
    // r2, which lost its leader, counts r0's Recovery as one more replica without it and
    // changes views; r0 must not join it.
    require_reaches(cluster, [&] { return cluster.replica(2).status() == Status::view_change; },
                    300, "r2 changes views");
    cluster.run_ticks(300);
    require_safe(cluster);
    CHECK(cluster.replica(0).status() == Status::recovering);
    CHECK(cluster.replica(0).counters().cell_restarts == 0);
    CHECK(!cluster.leader().has_value());  // r0 and r2 cannot form a view without r1

    cluster.network().heal();
    require_converged(cluster);
    finish(cluster);
}

TEST_CASE("durability sync: a replica that installed a snapshot while joining a view, and "
          "crashed before it had the log after it, restarts with its own last normal view")
{
    // vr_sim seed 191 x 5 found it: restored, it took the snapshot's writer's last normal view
    // as its own, for a log persisted after the snapshot that came from an older view.
    ClusterOptions options = storage_options(3, 709, true);
    // Fetches drag on while the new leader snapshots anew, within ticks of the view change.
    options.snapshot_fetch_failure = 0.8;
    options.snapshot_every_ticks = 3;
    Cluster cluster(options);
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 50; }, 1'000,
                    "50 operations before the partition");
    const ReplicaIndex lagging = 2;
    cluster.network().partition(isolating(cluster, lagging));
    const Op lagging_op = cluster.replica(lagging).op();
    require_reaches(cluster, [&] { return compacted_past(cluster, lagging_op + 60); }, 5'000,
                    "the others compact past the cut-off replica");
    // r1 stops hearing r0 a while: r0, answered by nobody, steps down, and the two start a view
    // after the one the cut-off replica last ran.
    cluster.network().block(0, 1);
    require_reaches(cluster, [&] { return cluster.replica(0).status() == Status::view_change; },
                    1'000, "r0 steps down");
    cluster.network().heal();
    cluster.network().partition(isolating(cluster, lagging));
    require_reaches(cluster, [&] { return new_leader_elected(cluster); }, 1'000,
                    "r0 and r1 run a later view");
    // Healed, the cut-off replica joins that view; it installs a snapshot the new leader wrote
    // in it while it still waits for the view's log.
    cluster.network().heal();
    require_reaches(cluster,
                    [&] {
                        const Replica& r = cluster.replica(lagging);
                        if (r.counters().snapshots_installed == 0) return false;
                        const auto installed =
                            decode_replica_snapshot(cluster.disk_snapshot(lagging));
                        return r.status() == Status::view_change && installed &&
                               installed->view == r.view() &&
                               installed->last_normal_view > r.last_normal_view();
                    },
                    3'000, "it installs a snapshot of its view, written by a replica normal in it");
    const View last_normal_view = cluster.replica(lagging).last_normal_view();
    cluster.crash(lagging);
    cluster.restart_from_disk(lagging);
    require_safe(cluster);  // its data directory holds what it restored (cluster.h)
    CHECK(cluster.replica(lagging).last_normal_view() == last_normal_view);
    require_converged(cluster);
    finish(cluster);
}

TEST_CASE("a cell of one replica restarts from its data directory on its own")
{
    for (const bool sync : {false, true}) {
        CAPTURE(sync);
        Cluster cluster(storage_options(1, 710, sync));
        require_reaches(cluster, [&] { return cluster.completed_ops() >= 50; }, 1'000,
                        "50 operations");
        cluster.crash_cell();
        cluster.restart_from_disk(0);
        const size_t completed = cluster.completed_ops();
        require_reaches(cluster, [&] { return cluster.completed_ops() >= completed + 50; }, 1'000,
                        "50 more operations after the restart");
        CHECK(cluster.replica(0).counters().cell_restarts == 1);
        finish(cluster);
    }
}

TEST_CASE("§5.2: a fetched snapshot with a flipped byte is refused by its checksum; the next "
          "fetch installs it")
{
    Cluster cluster(storage_options(3, 707, true));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 50; }, 1'000,
                    "50 operations before the partition");
    const ReplicaIndex lagging = 1;
    cluster.network().partition(isolating(cluster, lagging));
    const Op lagging_op = cluster.replica(lagging).op();
    require_reaches(cluster, [&] { return compacted_past(cluster, lagging_op + 60); }, 5'000,
                    "the others compact past the cut-off follower");

    cluster.corrupt_snapshot_fetches(1);
    cluster.network().heal();
    require_converged(cluster);
    CHECK(cluster.storage_counters().snapshot_fetches_corrupted == 1);
    CHECK(cluster.replica(lagging).counters().snapshots_refused == 1);
    CHECK(cluster.replica(lagging).counters().snapshots_installed >= 1);
    finish(cluster);
}

TEST_CASE("DESIGN.md §5: a snapshot write that fails (a full disk) leaves the log whole; the "
          "next one succeeds and compacts it")
{
    Cluster cluster(storage_options(3, 708, false));
    require_reaches(cluster, [&] { return cluster.completed_ops() >= 50; }, 1'000,
                    "50 operations");
    REQUIRE(cluster.leader() == ReplicaIndex{0});
    const Op base = cluster.replica(0).log_base();
    const Op on_disk = cluster.disk_snapshot_op(0);
    REQUIRE(base > 0);
    const uint64_t failed = cluster.storage_counters().snapshot_writes_failed;
    cluster.fail_snapshot_writes(3);  // the next write of every replica, near enough
    require_reaches(cluster,
                    [&] { return cluster.storage_counters().snapshot_writes_failed == failed + 3; },
                    2'000, "three snapshot writes fail");
    // Whatever replica wrote them, nothing was compacted on their account: r0's log still starts
    // where its last durable snapshot ends.
    CHECK(cluster.replica(0).log_base() == cluster.disk_snapshot_op(0));
    const Op held = cluster.replica(0).op() - cluster.replica(0).log_base();
    CHECK(held > 20);  // more than one interval: the failed write compacted nothing
    CHECK(on_disk == base);

    const Op after_failure = cluster.disk_snapshot_op(0);
    require_reaches(cluster, [&] { return cluster.replica(0).log_base() > after_failure; }, 2'000,
                    "r0's next snapshot is written and compacts its log");
    CHECK(cluster.disk_snapshot_op(0) == cluster.replica(0).log_base());
    require_converged(cluster);
    finish(cluster);
}

TEST_CASE("seeds that found violations after whole-cell crashes in durability snapshot")
{
    // A seed's path changes with the code, so these pin little on their own; the long runs in
    // docs/storage.md are the check. 2850: an uncommitted restart fence won a view change
    // (agreement); 4922: a new cell's replicas restarted with --recover (liveness); 5375, 5718,
    // 5813: a restart before the first snapshot reused views (two lease holders).
    struct Found {
        uint64_t seed;
        uint8_t replica_count;
    };
    for (const Found found : {Found{2850, 3}, Found{4922, 3}, Found{5375, 3}, Found{5718, 3},
                              Found{5813, 5}}) {
        const SeedResult result = run_seed(SeedOptions{.seed = found.seed,
                                                       .replica_count = found.replica_count,
                                                       .durability = DurabilityMode::snapshot,
                                                       .cell_crashes = CellCrashMode::all});
        INFO("reproduce with: vr_sim --seed=", found.seed, " --replicas=",
             int{found.replica_count}, " --durability=snapshot --cell-crashes=all");
        CHECK_MESSAGE(!result.violation, result.violation.value_or(""));
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
