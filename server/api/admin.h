// The admin endpoints: /healthz, /readyz, /v1/status, /v1/cluster, /metrics, the OpenAPI
// document and the snapshot chunks peers fetch.
//
// /healthz and /readyz are answered on the I/O thread, never waiting for the replica's loop: the
// loop publishes its role every 100 ms (RoleBoard). Ready means: in normal status, and, on the
// leader, no op has waited for its commit for kQuorumLostMs. An idle leader knows nothing of its
// followers (VR's heartbeats are not answered), so a /readyz or /v1/cluster that finds nothing
// in flight asks for a no-op (at most one per kProbeMs): an idle cell's log grows only while it
// is being asked. On the leader, /v1/cluster marks a follower that left an op unacknowledged for
// kQuorumLostMs as "down" (role "down", "reachable": false). A follower hears only from the
// leader, so its /v1/cluster asks the leader's (kLocalViewHeader: the leader answers from its own
// look, never asking on) within kLeaderViewDeadlineMs and shows who the leader sees down; a
// leader that does not answer in time is itself "down" there.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "api/call.h"
#include "api/leader_path.h"
#include "api/lock_service.h"
#include "api/router.h"
#include "core/lock_machine.h"
#include "shell/event_loop.h"
#include "shell/node.h"

namespace voltlock::api {

inline constexpr uint64_t kQuorumLostMs = 2'000;
inline constexpr uint64_t kProbeMs = 500;
inline constexpr uint64_t kLeaderViewDeadlineMs = 800;

// This replica's state as of the loop's last look, for any thread.
class RoleBoard {
public:
    struct Role {
        Status status = Status::recovering;
        View view = 0;
        std::optional<ReplicaIndex> leader;  // Replica::known_leader
        bool is_leader = false;
        bool quorum_confirmed = false;  // leader: a quorum answered lately
    };
    void publish(const Role& role);
    Role role() const;

private:
    mutable std::mutex mutex_;
    Role role_;
};

// Staleness of this replica's state, for ?stale=true answers. Loop thread.
Json staleness_json(const Node& node, const LockMachine* machine);

class Admin {
public:
    // `api_stats`: the API's own figures for /v1/cluster's "api" (loop thread).
    // `forwarder`: a follower's way to the leader's /v1/cluster.
    Admin(EventLoop& loop, Node& node, LockMachine* machine, LockService* service,
          RequestCounters& counters, Forwarder& forwarder, std::function<Json()> api_stats);

    void install(Router& router);
    // Starts the loop's look at the role and the followers every 100 ms.
    void start();

private:
    void look();  // loop thread
    Json cluster_json() const;
    // GET /v1/cluster: this replica's look, at a follower with the leader's (below).
    void serve_cluster(const CallPtr& call);
    // A follower's /v1/cluster: cluster_json() with the members' liveness as `leader` sees it.
    void cluster_at_follower(const CallPtr& call);
    // GET /v1/internal/snapshot (I/O thread): a chunk of the snapshot this replica serves.
    Served serve_snapshot_chunk(const CallPtr& call) const;
    // GET /readyz (I/O thread): 200 in normal status with a quorum, else 503 not_ready.
    Served serve_readyz(const CallPtr& call);

    EventLoop& loop_;
    Node& node_;
    LockMachine* machine_;
    LockService* service_;
    RequestCounters& counters_;
    Forwarder& forwarder_;
    std::function<Json()> api_stats_;
    RoleBoard board_;
    // Loop thread: the leader's view of its quorum and followers.
    std::atomic<bool> probe_wanted_{false};  // set by /readyz (I/O thread) and /v1/cluster
    bool was_leader_ = false;
    Op last_commit_ = 0;
    uint64_t uncommitted_since_ms_ = 0;  // 0: nothing waits for a commit
    uint64_t last_probe_ms_ = 0;
    bool probe_in_flight_ = false;
    std::vector<Op> last_acked_;
    std::vector<uint64_t> acked_changed_ms_;
};

}  // namespace voltlock::api
