// The lock service's HTTP/JSON API (issue 5, docs/api.md) on the replica's HTTP port, served
// event-driven (issue 12, docs/frontend.md). Laid out by concern:
//
//   http_server.h   connections and limits: libmicrohttpd on one I/O thread, epoll, suspended
//                   exchanges, timeouts, connection caps, hang-up detection, stream buffers
//   router.h        routing and translation: the target, the query, which endpoint; batches to
//                   the replica's loop
//   leader_path.h   requests that need the leader: proposing, forwarding, retries, identities
//   lock_service.h  the loop-side lease service (LeaseTracker, expiries) and Progress
//   wait_service.h  lock/barrier waits and watches as records on the loop
//   admin.h         /healthz, /readyz, /v1/status, /v1/cluster, /metrics, OpenAPI, snapshots
//   http_api.h      this file: the endpoints of the lock service, and the wiring
//
// Threads: the I/O thread parses HTTP; every endpoint below runs on the replica's event loop,
// where it reads the machine and proposes directly, and answers asynchronously.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/admin.h"
#include "api/auth_admin.h"
#include "api/call.h"
#include "api/http_server.h"
#include "api/leader_path.h"
#include "api/lock_service.h"
#include "api/router.h"
#include "api/translate.h"
#include "api/wait_service.h"
#include "core/lock_machine.h"
#include "shell/event_loop.h"
#include "shell/node.h"
#include "shell/result.h"
#include "shell/tls.h"

namespace voltlock::api {

// The HTTP settings of a replica's config (docs/frontend.md lists the keys).
HttpLimits http_limits(const DaemonConfig& config);

class HttpApi {
public:
    // `machine` is null when the cell replicates another state machine (the register used by
    // replication benchmarks): then only the admin endpoints answer.
    HttpApi(EventLoop& loop, Node& node, LockMachine* machine);
    ~HttpApi();
    HttpApi(const HttpApi&) = delete;
    HttpApi& operator=(const HttpApi&) = delete;

    // Binds ip:port and starts serving; registers the loop's half.
    Result<Ok> start(const std::string& ip, uint16_t port);
    void stop();
    // SIGHUP: the TLS certificate, key and client CA, loaded again for new connections; then
    // every TLS file's expiry read again for /metrics.
    Result<Ok> reload_tls();
    // SIGHUP: the auth token and roles files, read again (open watches authorized again); on an
    // error the ones in use stay.
    Result<Ok> reload_auth();

private:
    // Answers a committed, successful result.
    using Answer = std::function<void(const OpResult&)>;

    void install_routes();
    // /v1/cluster/replicas (on a forwarding thread) and the web UI's files (on the I/O thread).
    void install_cluster_and_ui_routes();
    // 403 when auth is on and `session` was opened by another identity than the call's (and the
    // caller is no admin), as far as this replica's state knows the session.
    std::optional<ApiError> foreign_session(const Call& call, SessionId session) const;
    // Auth is on and this replica has not applied `session` yet, so it cannot tell its owner.
    bool owner_unknown_here(const Call& call, SessionId session) const;
    // Proposes `op` where the leader is and answers with `answer`, or with the error. `relay`:
    // what a forwarded answer becomes here (waits that continue at this replica).
    void run_op(const CallPtr& call, const LockOp& op, uint32_t wait_ms, Answer answer,
                LeaderPath::Relay relay = {});
    // run_op for an op whose result is answered as it is: 200 with its JSON.
    void run_op_answering_result(const CallPtr& call, const LockOp& op);
    // A linearizable read of state the ops do not return (sessions, locks, barriers): a no-op
    // through the log, then `snapshot` on the leader right after it is applied.
    void read_at_leader(const CallPtr& call, std::function<Json()> snapshot);
    // A linearizable read here (etcd's ReadIndex): a no-op through the log, whose Reply names
    // the leader's commit number, then `snapshot` here once this replica has applied that far.
    // At the leader the same as read_at_leader.
    void read_at_commit_point(const CallPtr& call, std::function<Json()> snapshot);
    // Where a linearizable read is answered: here at the leader's commit point, or by the
    // leader (sessions: their lease deadlines are the leader's alone).
    enum class ReadAt { commit_point, leader };
    // Linearizable (where `at` says), or with ?stale=true from this replica's applied state.
    Served read_state(const CallPtr& call, ReadAt at, std::function<Json()> snapshot);
    // A keepalive at the leader: the lease tracker renews, and a KeepAlive is proposed when the
    // machine's idea of the lease needs it; `answer` gets the HTTP answer.
    void renew_at_leader(SessionId session, const LeaderPath::AtLeader& at,
                         std::function<void(HttpResponse)> answer,
                         LeaderPath::NotLeader not_leader);
    // A follower's keepalive Request, taken from the socket at the leader (Node::take_requests);
    // false for any other Request, which the core gets.
    bool take_keepalive_request(const Request& request);
    // Waits for the outcome of a wait, here; or answers 503 when too many are held.
    void await_outcome(const CallPtr& call, WaitKind kind, const std::string& name,
                       SessionId session, Revision after, uint64_t deadline_ms);
    // A wait forwarded to the leader comes back as 202 + X-Voltlock-Waiting: wait here.
    LeaderPath::Relay wait_here(const CallPtr& call, WaitKind kind, std::string name,
                                SessionId session);
    // A lock waiter's or a barrier enter's client left: withdraw its wait through the log.
    void withdraw(WaitKind kind, const std::string& name, SessionId session,
                  uint64_t deadline_ms);

    // Endpoints (loop thread): each answers its call, or returns the error to answer it with.
    Served create_session(const CallPtr& call);
    Served keep_alive(const CallPtr& call);
    Served close_session(const CallPtr& call);
    Served get_sessions(const CallPtr& call, bool one);
    Served acquire(const CallPtr& call);
    Served release(const CallPtr& call);
    Served get_locks(const CallPtr& call, bool one);
    Served check_sequencer(const CallPtr& call);
    Served get_kv(const CallPtr& call);
    Served put_kv(const CallPtr& call);
    Served delete_kv(const CallPtr& call);
    Served watch(const CallPtr& call);
    Served barrier(const CallPtr& call, bool enter);
    Served get_barriers(const CallPtr& call, bool one);

    Json api_stats() const;
    // Keepalives this follower sent the leader as VR Requests and got the leader's answer for.
    uint64_t keepalives_as_requests_ = 0;
    // Keepalive Requests from followers this replica answered as the leader.
    uint64_t keepalive_requests_served_ = 0;
    // Keepalive Requests a new leader answered with the KeepAlive op's result, asked again.
    uint64_t keepalives_asked_again_ = 0;
    // Withdrawals of hung-up waits that found the wait over already (a grant stays).
    uint64_t withdrawals_too_late_ = 0;
    // When the TLS files in use expire, as of their last load (start, SIGHUP). Loop thread.
    std::vector<CertificateExpiry> tls_expiries_;

    EventLoop& loop_;
    Node& node_;
    LockMachine* machine_;
    const uint32_t max_message_bytes_;
    const HttpLimits limits_;
    const uint64_t quota_bytes_;  // config quota_bytes: run_op refuses records past it
    Progress progress_;
    ClientPool pool_;
    RequestCounters counters_;
    std::unique_ptr<LockService> service_;
    Forwarder forwarder_;
    LeaderPath leader_;
    std::unique_ptr<WaitService> waits_;
    Admin admin_;
    AuthAdmin auth_admin_;
    Access access_;
    Router router_;
    HttpServer server_;
};

}  // namespace voltlock::api
