// The lock service's HTTP/JSON API (issue 5, docs/api.md) on the replica's HTTP port, and the
// admin endpoints (/v1/status, /v1/cluster, /metrics, /healthz, /readyz, /v1/openapi.json).
//
// Threads. cpp-httplib runs each request on a thread of its pool. Nothing there touches the
// replica: every look at the node or the machine, and every proposal, is posted to the event loop
// (EventLoop::post) and waited for. On the loop, LockService (below) drains the machine's events
// after every applied entry, keeps the leader's leases, and proposes ExpireSession and
// ExpireWaiters itself.
//
// Leader. An endpoint that needs the log runs where the leader is: on the leader it proposes; on
// a follower it forwards the whole HTTP request to the leader's HTTP port (X-Voltlock-Forwarded)
// and relays the answer. During a view change it retries for up to kLeaderWaitMs, then answers
// 503 with Retry-After. A forwarded request is never forwarded again: a replica that is not the
// leader any more answers 503 with X-Voltlock-Not-Leader and the forwarder tries again.
//
// Idempotency. Every proposal carries a VR client id and request number: the client's own
// (X-Voltlock-Client-Id, X-Voltlock-Request-Number), or one from this replica's pool of internal
// ids, taken by the entry replica for the whole life of the HTTP request, retries and forwarding
// included. VR's client table keeps one latest request per client id, so each internal id has
// at most one request outstanding and its numbers only grow.
//
// Waits and watches are served from the replica's own applied history (LockMachine::watch): a
// wait looks for its outcome event after the result's revision; a watch streams events from its
// start revision. Both wake when the applied revision moves (Progress).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "api/leases.h"
#include "api/translate.h"
#include "core/lock_machine.h"
#include "shell/event_loop.h"
#include "shell/node.h"
#include "shell/result.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace voltlock::api {

using SteadyTime = std::chrono::steady_clock::time_point;

// How long a request that needs the leader keeps trying (view changes, forwarding) before 503.
inline constexpr uint32_t kLeaderWaitMs = 8'000;
// How long past its deadline a lock or barrier wait looks for its outcome before 503.
inline constexpr uint32_t kWaitGraceMs = 5'000;

// The applied revision, published by the loop after every apply; HTTP threads wait on it.
class Progress {
public:
    void publish(Revision revision);
    // Returns once the applied revision is >= at_least, at `until`, or on stop(); returns the
    // revision then.
    Revision wait(Revision at_least, SteadyTime until);
    Revision revision() const;
    void stop();
    bool stopped() const { return stopped_.load(); }

private:
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    Revision revision_ = 0;
    std::atomic<bool> stopped_{false};
};

// Internal VR client ids for requests that bring none. Thread-safe.
class ClientPool {
public:
    ClientPool();
    // An id with no request outstanding, and its next request number. Blocks while all
    // kMaxIds are out, up to `until`; nullopt then.
    std::optional<ClientIdentity> take(SteadyTime until);
    std::optional<ClientIdentity> try_take();
    void give_back(ClientId id);
    size_t size() const;

    static constexpr size_t kMaxIds = 1024;

private:
    mutable std::mutex mutex_;
    std::condition_variable returned_;
    ClientId base_ = 0;  // random per process: ids never collide with an earlier run's
    std::map<ClientId, RequestNumber> next_;  // every id made so far -> its last number
    std::vector<ClientId> free_;
};

// Requests counted by endpoint and status, for /metrics. Thread-safe.
class RequestCounters {
public:
    void count(const std::string& method, const std::string& endpoint, int status);
    std::map<std::tuple<std::string, std::string, int>, uint64_t> snapshot() const;

private:
    mutable std::mutex mutex_;
    std::map<std::tuple<std::string, std::string, int>, uint64_t> counts_;
};

// The loop's half of the lock service: events, leases, deadlines, internal proposals. Every
// member function runs on the loop thread.
class LockService {
public:
    LockService(EventLoop& loop, Node& node, LockMachine& machine, ClientPool& pool,
                Progress& progress);
    Result<Ok> start();

    // A keepalive at this replica: not the leader, no such session, or the renewal.
    struct KeepAliveAnswer {
        bool leader = false;
        bool known = false;
        LeaseTracker::Renewal renewal;
    };
    KeepAliveAnswer keep_alive(SessionId session);
    // The lease deadline the leader enforces, when this replica is the leader.
    std::optional<uint64_t> lease_deadline_ms(SessionId session) const;
    size_t leases_tracked() const { return leases_.size(); }

    // VR drops a request whose number is below its client's latest (executed, or on its way),
    // without an answer. The API refuses those at once instead, from a mirror of the client
    // table kept from the entries this replica applied and the proposals it has in flight.
    // Returns the client's latest number when `number` is below it.
    std::optional<RequestNumber> stale_request(ClientId client, RequestNumber number) const;
    void proposing(ClientId client, RequestNumber number);
    void proposed(ClientId client, RequestNumber number);
    uint64_t expiries_proposed() const { return expiries_proposed_; }
    uint64_t expire_waiters_proposed() const { return expire_waiters_proposed_; }

private:
    void on_executed(const Executed& executed);
    void on_lease_timer();
    void on_deadline_timer();
    void check_leadership();
    void arm_deadline_timer();
    void maybe_expire_waiters();
    // Proposes an op of the leader's own (ExpireSession, ExpireWaiters) with a pooled id.
    bool propose_internal(const LockOp& op, std::function<void(const ProposeOutcome&)> done);

    EventLoop& loop_;
    Node& node_;
    LockMachine& machine_;
    ClientPool& pool_;
    Progress& progress_;
    LeaseTracker leases_;
    FileDescriptor lease_timer_;
    FileDescriptor deadline_timer_;
    std::optional<View> leader_view_;
    bool expire_waiters_in_flight_ = false;
    uint64_t last_expire_waiters_ms_ = 0;
    uint64_t armed_at_ms_ = 0;
    uint64_t expiries_proposed_ = 0;
    uint64_t expire_waiters_proposed_ = 0;
    std::unordered_map<ClientId, RequestNumber> executed_;   // the client table's numbers
    std::unordered_map<ClientId, RequestNumber> in_flight_;  // proposed here, not yet answered
};

class HttpApi {
public:
    // `machine` is null when the cell replicates another state machine (the register used by
    // replication benchmarks): then only the admin endpoints answer.
    HttpApi(EventLoop& loop, Node& node, LockMachine* machine);
    ~HttpApi();
    HttpApi(const HttpApi&) = delete;
    HttpApi& operator=(const HttpApi&) = delete;

    // Binds ip:port and starts serving in the background; registers the loop's half.
    Result<Ok> start(const std::string& ip, uint16_t port);
    void stop();

private:
    using Request = httplib::Request;
    using Response = httplib::Response;

    // What a handler running at the leader knows: the request's VR identity, and when to give up.
    struct AtLeader {
        ClientIdentity identity;
        SteadyTime until;
    };
    // Runs on the leader; false if this replica turned out not to be the leader (retry).
    using Serve = std::function<bool(const AtLeader&, Response&)>;
    // Answers a committed, successful result.
    using Answer = std::function<void(const OpResult&, Response&)>;

    struct Proposed {
        enum class Kind { committed, not_leader, timed_out, stale } kind = Kind::timed_out;
        RequestNumber latest = 0;  // stale: the client's latest request number
        Bytes result;
        Json snapshot;  // what `snapshot` returned on the loop right after the commit
    };

    // Runs `work` on the loop and returns its value; nullopt if the loop does not answer in time.
    // `work` runs later on another thread: it must capture by value.
    template <typename F>
    auto on_loop(F work, std::chrono::milliseconds within = std::chrono::milliseconds(2000))
        -> std::optional<decltype(work())>;

    void install_routes();
    // cpp-httplib 0.11 reads a POST or PUT without Content-Length until the connection closes
    // (curl -XPOST sends none). Those are dispatched here, before the body read, with no body.
    bool dispatch_without_body(const Request& req, Response& res);
    void route(const char* method, const char* pattern, std::string endpoint,
               std::function<void(const Request&, Response&)> handler, bool needs_machine);

    // The leader plumbing (see the header comment).
    void at_leader(const Request& req, Response& res, uint32_t wait_ms, const Serve& serve);
    bool forward(const Request& req, Response& res, ReplicaIndex leader,
                 const ClientIdentity& identity, uint32_t wait_ms);
    Proposed propose(const ClientIdentity& identity, Bytes payload, SteadyTime until,
                     std::function<Json()> snapshot = {});
    // Proposes `op` where the leader is and answers with `answer`, or with the error.
    void run_op(const Request& req, Response& res, const LockOp& op, uint32_t wait_ms,
                const Answer& answer);
    // A linearizable read of state the ops do not return (sessions, locks, barriers): a no-op
    // through the log, then `snapshot` on the leader right after it is applied.
    void read_at_leader(const Request& req, Response& res, std::function<Json()> snapshot);
    // A read of the machine's state: through the leader (linearizable), or with ?stale=true
    // from this replica's applied state, marked with how far behind it may be.
    void read_state(const Request& req, Response& res, bool stale, std::function<Json()> snapshot);
    void send_snapshot(Response& res, const Json& snapshot);
    // Waits for the outcome of a lock or barrier wait in this replica's applied history.
    std::variant<Json, ApiError> await_outcome(WaitKind kind, const std::string& name,
                                               SessionId session, Revision after,
                                               uint64_t deadline_ms);

    // Endpoints.
    void create_session(const Request& req, Response& res);
    void keep_alive(const Request& req, Response& res);
    void close_session(const Request& req, Response& res);
    void get_sessions(const Request& req, Response& res, bool one);
    void acquire(const Request& req, Response& res);
    void release(const Request& req, Response& res);
    void get_locks(const Request& req, Response& res, bool one);
    void check_sequencer(const Request& req, Response& res);
    void get_kv(const Request& req, Response& res);
    void put_kv(const Request& req, Response& res);
    void delete_kv(const Request& req, Response& res);
    void watch(const Request& req, Response& res);
    void barrier(const Request& req, Response& res, bool enter);
    void get_barriers(const Request& req, Response& res, bool one);
    void cluster(const Request& req, Response& res);
    void snapshot_chunk(const Request& req, Response& res);
    void metrics(const Request& req, Response& res);
    void readyz(const Request& req, Response& res);

    // Loop thread only.
    Json cluster_json();
    Json staleness_json();

    EventLoop& loop_;
    Node& node_;
    LockMachine* machine_;
    const uint32_t max_message_bytes_;
    Progress progress_;
    ClientPool pool_;
    RequestCounters counters_;
    std::atomic<uint64_t> forwarded_{0};
    std::atomic<uint64_t> watchers_{0};
    std::atomic<uint64_t> waiters_{0};
    std::unique_ptr<LockService> service_;
    std::unique_ptr<httplib::Server> server_;
    std::thread thread_;
    struct Route {
        std::string method;
        std::regex pattern;
        std::function<void(const Request&, Response&)> handler;
    };
    std::vector<Route> routes_;
};

}  // namespace voltlock::api
