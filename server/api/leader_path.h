// The leader path: an endpoint that needs the log runs where the leader is. On the leader it
// proposes; on a follower the request goes to the leader's HTTP port (X-Voltlock-Forwarded) on
// one of a few kept-alive connections (Forwarder), and the answer comes back. During a view
// change it tries again every 50 ms for up to kLeaderWaitMs, then answers 503 with Retry-After.
// A forwarded request is never forwarded again: a replica that is not the leader any more
// answers 503 with X-Voltlock-Not-Leader and the forwarder tries again.
//
// Idempotency. Every proposal carries a VR client id and request number: the client's own
// (X-Voltlock-Client-Id, X-Voltlock-Request-Number), or one from this replica's pool of internal
// ids, taken by the entry replica for the whole life of the request, retries and forwarding
// included. VR's client table keeps one latest request per client id, so each internal id has
// at most one request outstanding and its numbers only grow.
//
// Over the replication channel. An op that is proposed as it is and answered from its result
// alone (run_op: puts, deletes, CAS, linearizable gets, sessions opened and closed, locks,
// barriers) travels from a follower to the leader as a VR Request from the follower's replication
// socket, with the same client id and request number, and the leader's core answers it with the
// Reply: no forwarding thread, no second HTTP request. Without a Reply within kRequestRetransmitMs
// (doubling) the Request goes again with the same identity (the client table executes it at most
// once); when the view changes it goes to the new leader, or is proposed here if this replica
// became the leader. After kRequestSends unanswered sends to one leader, and for a payload that
// does not fit one datagram, the op falls back to HTTP forwarding (below) with the same identity:
// a leader drops without an answer a request below its client's latest number, which HTTP
// answers with 409. A wait continues at the follower from the result (the op's revision), as
// with X-Voltlock-Wait-Here. A keepalive travels the same way (run_request), but the leader's
// API takes it from the socket (Node::take_requests) and answers it from its lease tracker: its
// Reply carries the HTTP answer itself (encode_answer). A linearizable read of sessions, locks
// or barriers is etcd's ReadIndex: a no-op goes the same way, its Reply carries the leader's
// commit number, and the read is answered from this replica's state once it has applied that
// far (when_applied).
//
// A lock or barrier wait forwarded from a follower is not held at the leader: the follower asks
// (X-Voltlock-Wait-Here) to be told as soon as the op committed that it waits (202 with
// X-Voltlock-Waiting), and waits for the outcome in its own applied history, where its client
// is connected and can be seen leaving.
//
// Everything here runs on the replica's loop, except the Forwarder's threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/call.h"
#include "api/lock_service.h"
#include "shell/config.h"
#include "shell/event_loop.h"
#include "shell/node.h"

namespace voltlock::api {

// How long a request that needs the leader keeps trying (view changes, forwarding) before 503.
inline constexpr uint32_t kLeaderWaitMs = 8'000;
// How long past its deadline a lock or barrier wait looks for its outcome before 503.
inline constexpr uint32_t kWaitGraceMs = 5'000;

// A follower's Request to the leader goes again after this (doubling each time) without a Reply,
// and falls back to HTTP after kRequestSends sends to the same leader.
inline constexpr uint32_t kRequestRetransmitMs = 100;
inline constexpr uint32_t kRequestSends = 4;

inline constexpr const char* kForwardedHeader = "X-Voltlock-Forwarded";
// A request forwarded for a client known by its certificate: who that client is. Believed only
// from a peer replica (api/access.h), which checked the client's permissions already.
inline constexpr const char* kOnBehalfOfHeader = "X-Voltlock-On-Behalf-Of";
inline constexpr const char* kWaitHereHeader = "X-Voltlock-Wait-Here";
inline constexpr const char* kWaitingHeader = "X-Voltlock-Waiting";
// A follower's /v1/cluster asking the leader for its own look (api/admin.h): the leader answers
// without asking on. Believed only from a peer replica too.
inline constexpr const char* kLocalViewHeader = "X-Voltlock-Local-View";

// Requests for the leader's HTTP port, sent by a few threads on kept-alive connections. Each is
// signed with the cell's replication key (X-Voltlock-Peer-Auth), so that the leader believes the
// headers only replicas send (Access::recognise_peer); with mTLS this replica's certificate does
// the same.
class Forwarder {
public:
    struct Request {
        ReplicaIndex leader = 0;
        std::string method;
        std::string target;
        std::string body;
        std::vector<std::pair<std::string, std::string>> headers;
        uint64_t read_timeout_ms = 0;
    };
    struct Outcome {
        bool reached = false;  // false: no answer (the leader may be gone); look again
        HttpResponse response;
    };

    Forwarder(const DaemonConfig& config, EventLoop& loop, size_t threads);
    ~Forwarder();
    Forwarder(const Forwarder&) = delete;
    Forwarder& operator=(const Forwarder&) = delete;

    // Loop thread; `done` runs on the loop.
    void send(Request request, std::function<void(Outcome)> done);
    // Runs `work`, which blocks (other replicas' HTTP), on one of the threads. Loop thread.
    void run(std::function<void()> work);
    void stop();

private:
    struct Job {
        Request request;
        std::function<void(Outcome)> done;
        std::function<void()> work;  // instead of a request, when set
    };
    void work();

    const DaemonConfig& config_;
    EventLoop& loop_;
    std::mutex mutex_;
    std::condition_variable jobs_ready_;
    std::deque<Job> jobs_;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

class LeaderPath {
public:
    // What a request served at the leader knows: its VR identity, and when to give up.
    struct AtLeader {
        ClientIdentity identity;
        SteadyTime until;
    };
    // Called when this replica turned out not to be the leader: try again (elsewhere).
    using NotLeader = std::function<void()>;
    using Serve = std::function<void(const AtLeader&, NotLeader)>;
    // What the leader's answer to a forwarded request becomes here (default: the answer).
    using Relay = std::function<void(HttpResponse)>;

    struct Proposed {
        // reused: the request number was used before for another request (docs/api.md)
        enum class Kind { committed, not_leader, timed_out, stale, reused } kind = Kind::timed_out;
        RequestNumber latest = 0;  // stale: the client's latest request number
        Bytes result;
        // committed at a follower: the leader's commit number in its Reply (0 at the leader,
        // where the op is applied already)
        Op commit = 0;
        Json snapshot;  // what `snapshot` returned right after the commit
    };

    LeaderPath(EventLoop& loop, Node& node, LockService* service, ClientPool& pool,
               Forwarder& forwarder);

    // What became of an op (run_op): committed, stale, reused or timed out, never not_leader.
    using Finish = std::function<void(const ClientIdentity&, Proposed)>;

    // Runs `serve` where the leader is, or forwards the call there; `relay` set means the call
    // may wait at this replica (the leader answers a wait with 202 at commit).
    void at_leader(const CallPtr& call, uint32_t wait_ms, Serve serve, Relay relay = {});
    // Proposes `payload` where the leader is and hands `finish` what became of it; at a follower
    // the op travels as a VR Request (above), or, failing that, the call is forwarded over HTTP
    // like at_leader's (with `relay`).
    // How a follower's run_op reaches the leader: as a VR Request where it can, over HTTP only
    // (the leader must see the client's credentials), or as a VR Request only, sent again until
    // the deadline (an op of the replica's own, which has no HTTP form).
    enum class Route { any, http, replication };
    void run_op(const CallPtr& call, Bytes payload, uint32_t wait_ms, Finish finish,
                Relay relay = {}, Route route = Route::any);
    // As run_op, but at the leader `serve` answers the call (not a proposal of `payload`), and a
    // follower's Request is answered by the leader's API, which takes it from the socket.
    void run_request(const CallPtr& call, Bytes payload, Serve serve, Finish finish);
    // Runs `ready` once this replica has applied every op up to `commit` (at once if it has),
    // or `late` if it has not by `until`. Loop thread.
    void when_applied(Op commit, SteadyTime until, std::function<void()> ready,
                      std::function<void()> late);
    // Proposes `payload`; `done` runs once, on the loop: committed (with `snapshot` taken right
    // after the apply), not the leader, stale, or timed out at `until`.
    void propose(const ClientIdentity& identity, Bytes payload, SteadyTime until,
                 std::function<Json()> snapshot, std::function<void(Proposed)> done);

    // Answers that came from the leader, by either way.
    uint64_t forwarded() const { return forwarded_; }
    // Ops answered by the leader's Reply to this replica's Request.
    uint64_t forwarded_as_requests() const { return forwarded_as_requests_; }
    // Requests sent again for want of a Reply (to the same leader, or to the next one).
    uint64_t request_retransmits() const { return request_retransmits_; }
    // Ops that could have travelled as a Request and were forwarded over HTTP instead.
    uint64_t request_fallbacks() const { return request_fallbacks_; }
    // Reads answered here after waiting for the leader's commit point (ReadIndex).
    uint64_t reads_at_commit_point() const { return reads_at_commit_point_; }

private:
    struct Attempt;
    using RequestKey = std::pair<ClientId, RequestNumber>;
    void attempt(const std::shared_ptr<Attempt>& attempt);
    std::shared_ptr<Attempt> start_attempt(const CallPtr& call, uint32_t wait_ms, Serve serve,
                                           Relay relay);
    void send_request(const std::shared_ptr<Attempt>& attempt, ReplicaIndex leader);
    void transmit_request(const std::shared_ptr<Attempt>& attempt);
    void request_timer(const std::shared_ptr<Attempt>& attempt);
    void forget_request(const std::shared_ptr<Attempt>& attempt);
    void fall_back_to_http(const std::shared_ptr<Attempt>& attempt, ReplicaIndex leader);
    void on_reply(const Reply& reply);
    void on_applied();
    void start_request(const CallPtr& call, Bytes payload, uint32_t wait_ms, Serve serve,
                       Finish finish, Relay relay, Route route);
    void try_again(const std::shared_ptr<Attempt>& attempt, SteadyTime started);
    void forward(const std::shared_ptr<Attempt>& attempt, ReplicaIndex leader,
                 SteadyTime started);

    EventLoop& loop_;
    Node& node_;
    LockService* service_;
    ClientPool& pool_;
    Forwarder& forwarder_;
    uint64_t forwarded_ = 0;
    uint64_t forwarded_as_requests_ = 0;
    uint64_t request_retransmits_ = 0;
    uint64_t request_fallbacks_ = 0;
    uint64_t reads_at_commit_point_ = 0;
    // Reads waiting for this replica to apply up to a commit point, by that commit point.
    struct AppliedWait {
        std::function<void()> ready;
        EventLoop::TimerId deadline;
    };
    std::multimap<Op, AppliedWait> applied_waits_;
    // This replica's Requests waiting for the leader's Reply, by VR identity (a client may send
    // the same identity twice, say a retry while its first try is still on its way).
    std::map<RequestKey, std::vector<std::shared_ptr<Attempt>>> requests_;
};

std::optional<std::string> response_header(const HttpResponse& response, std::string_view name);

// An HTTP answer made at the leader for a follower's Request, as the Reply's result: what the
// follower answers its client with, unchanged. nullopt: not such an answer (a leader that
// proposed the op as it is).
Bytes encode_answer(const HttpResponse& response);
std::optional<HttpResponse> decode_answer(std::string_view bytes);

}  // namespace voltlock::api
