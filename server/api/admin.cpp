#include "api/admin.h"

#include <chrono>

#include "api/metrics.h"
#include "api/openapi.h"
#include "shell/snapshot_transfer.h"

namespace voltlock::api {

namespace {

using std::chrono::milliseconds;

uint64_t steady_ms()
{
    return static_cast<uint64_t>(std::chrono::duration_cast<milliseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

}  // namespace

void RoleBoard::publish(const Role& role)
{
    std::lock_guard lock(mutex_);
    role_ = role;
}

RoleBoard::Role RoleBoard::role() const
{
    std::lock_guard lock(mutex_);
    return role_;
}

Json staleness_json(const Node& node, const LockMachine* machine)
{
    const Replica& r = node.replica();
    return object_of("replica", r.replica(),
                     "status", status_name(r.status()),
                     "view", r.view(),
                     "is_leader", r.is_leader(),
                     "leader", r.known_leader() ? Json(*r.known_leader()) : Json(),
                     "op", r.op(),
                     "commit", r.commit(),
                     "revision", machine ? machine->revision() : 0,
                     // Ops this replica has prepared but not applied: a lower bound of how far
                     // behind the leader it is (it cannot know what it has not been sent).
                     "uncommitted_ops", r.op() - r.commit());
}

Admin::Admin(EventLoop& loop, Node& node, LockMachine* machine, LockService* service,
             RequestCounters& counters, Forwarder& forwarder, std::function<Json()> api_stats)
    : loop_(loop),
      node_(node),
      machine_(machine),
      service_(service),
      counters_(counters),
      forwarder_(forwarder),
      api_stats_(std::move(api_stats))
{
}

void Admin::start()
{
    look();
}

void Admin::look()
{
    const Replica& r = node_.replica();
    const uint64_t now = steady_ms();
    const size_t replicas = node_.config().replicas.size();
    if (r.is_leader()) {
        if (!was_leader_) {
            last_acked_.assign(replicas, 0);
            acked_changed_ms_.assign(replicas, now);
            last_commit_ = r.commit();
            uncommitted_since_ms_ = 0;
        }
        if (r.commit() != last_commit_ || r.op() == r.commit()) uncommitted_since_ms_ = 0;
        else if (uncommitted_since_ms_ == 0) uncommitted_since_ms_ = now;
        last_commit_ = r.commit();
        const std::vector<Op>& acked = r.acked_ops();
        for (size_t i = 0; i < replicas && i < acked.size(); i++)
            if (acked[i] != last_acked_[i] || acked[i] >= r.op()) {
                last_acked_[i] = acked[i];
                acked_changed_ms_[i] = now;
            }
        if (probe_wanted_.exchange(false) && service_ && !probe_in_flight_ &&
            r.op() == r.commit() && now - last_probe_ms_ >= kProbeMs) {
            last_probe_ms_ = now;
            probe_in_flight_ = service_->propose_internal(
                ExpireWaiters{}, [this](const ProposeOutcome&) { probe_in_flight_ = false; });
        }
    }
    was_leader_ = r.is_leader();
    board_.publish(RoleBoard::Role{
        .status = r.status(),
        .view = r.view(),
        .leader = r.known_leader(),
        .is_leader = r.is_leader(),
        .quorum_confirmed = !r.is_leader() || uncommitted_since_ms_ == 0 ||
                            now - uncommitted_since_ms_ < kQuorumLostMs});
    loop_.after(milliseconds(100), [this] { look(); });
}

Json Admin::cluster_json() const
{
    const Replica& r = node_.replica();
    const DaemonConfig& config = node_.config();
    const std::vector<Op>& acked = r.acked_ops();
    const uint64_t now = steady_ms();
    Json members = Json::array();
    for (size_t i = 0; i < config.replicas.size(); i++) {
        const PeerAddress& peer = config.replicas[i];
        const bool leader = r.known_leader() == i;
        Json member{{"replica", i},
                    {"ip", peer.ip},
                    {"udp_port", peer.udp_port},
                    {"http_port", peer.http_port},
                    {"self", i == config.replica},
                    {"role", leader ? "leader" : "follower"}};
        // The leader knows what each follower acknowledged in this view; others do not.
        if (r.is_leader()) {
            const Op op = i == config.replica ? r.op() : (i < acked.size() ? acked[i] : 0);
            member["acked_op"] = op;
            member["lag_ops"] = r.op() - std::min(op, r.op());
            const bool reachable = i == config.replica || i >= acked_changed_ms_.size() ||
                                   now - acked_changed_ms_[i] < kQuorumLostMs;
            member["reachable"] = reachable;
            if (!reachable) member["role"] = "down";
        } else if (i == config.replica) {
            member["acked_op"] = r.op();
        }
        members.push_back(member);
    }
    const Json status = node_.status();
    Json api = api_stats_();
    if (machine_) {
        const LockServiceState& s = machine_->state();
        api["sessions"] = s.sessions.size();
        api["locks"] = s.locks.size();
        api["keys"] = s.kv.size();
        api["barriers"] = s.barriers.size();
        api["stored_bytes"] = machine_->stored_bytes();
        api["quota_bytes"] = node_.config().quota_bytes;
        api["cell_clock_ahead_ms"] = node_.cell_clock_ahead_ms();
        api["revision"] = s.revision;
        api["oldest_revision"] = machine_->oldest_revision();
        api["leases_tracked"] = service_->leases_tracked();
        api["expiries_proposed"] = service_->expiries_proposed();
        api["expire_waiters_proposed"] = service_->expire_waiters_proposed();
    }
    return Json{{"cluster_id", config.cluster_id},
                {"auth", config.auth() ? "on" : "off"},
                {"replica", config.replica},
                {"version", status["version"]},
                {"status", status_name(r.status())},
                {"view", r.view()},
                {"leader", r.known_leader() ? Json(*r.known_leader()) : Json()},
                {"is_leader", r.is_leader()},
                {"op", r.op()},
                {"commit", r.commit()},
                {"members", members},
                {"electrode", config.electrode == ElectrodeMode::on ? "on" : "off"},
                {"counters", status["counters"]},
                {"event_loop", status["event_loop"]},
                {"api", api}};
}

void Admin::serve_cluster(const CallPtr& call)
{
    probe_wanted_ = true;
    const Replica& r = node_.replica();
    if (r.is_leader() || !r.known_leader() || call->header(kLocalViewHeader))
        return call->answer_json(200, cluster_json());
    cluster_at_follower(call);
}

void Admin::cluster_at_follower(const CallPtr& call)
{
    const Replica& r = node_.replica();
    const ReplicaIndex leader = r.leader();
    const View view = r.view();
    Forwarder::Request request{.leader = leader,
                               .method = "GET",
                               .target = "/v1/cluster",
                               .body = {},
                               .headers = {{kLocalViewHeader, "1"}},
                               .read_timeout_ms = kLeaderViewDeadlineMs};
    if (auto authorization = call->header("Authorization"))
        request.headers.emplace_back("Authorization", *authorization);
    forwarder_.send(std::move(request), [this, call, leader, view](Forwarder::Outcome outcome) {
        if (call->gone()) return;
        Json answer = cluster_json();
        const ReplicaIndex self = node_.config().replica;
        Json seen = outcome.reached && outcome.response.status == 200
                        ? Json::parse(outcome.response.body, nullptr, false)
                        : Json();
        // Its look is worth taking only while it still leads the view we are in.
        const bool leads = seen.is_object() && seen.value("is_leader", false) &&
                           seen.value("view", View{0}) == view && seen.contains("members") &&
                           seen["members"].size() == answer["members"].size();
        // Not reached: refused (killed), or no answer by the deadline (stopped, cut off).
        const bool answered = outcome.reached;
        for (Json& member : answer["members"]) {
            const auto i = member["replica"].get<ReplicaIndex>();
            if (i == self) {
                member["reachable"] = true;
            } else if (leads) {
                const Json& theirs = seen["members"][i];
                member["reachable"] = theirs.value("reachable", true);
                if (theirs.contains("acked_op")) member["acked_op"] = theirs["acked_op"];
                if (theirs.contains("lag_ops")) member["lag_ops"] = theirs["lag_ops"];
                if (!member["reachable"].get<bool>()) member["role"] = "down";
            } else if (i == leader && !answered) {
                member["reachable"] = false;
                member["role"] = "down";
                member["error"] = "the leader did not answer within " +
                                  std::to_string(kLeaderViewDeadlineMs) + " ms";
            }
        }
        answer["members_seen_by"] = leads ? Json(leader) : Json(self);
        call->answer_json(200, answer);
    });
}

void Admin::install(Router& router)
{
    using Where = Router::Where;
    router.add("GET", "/v1/status", "/v1/status", {"digest"}, Where::loop,
               [this](const CallPtr& call) -> Served {
                   const bool digest = VL_TRY(bool_param(*call, "digest"));
                   const std::optional<std::string> computed =
                       digest ? node_.state_digest() : std::nullopt;
                   if (digest && !computed)
                       return unavailable("a digest of another op was computed in this loop "
                                          "turn already: ask again");
                   Json status = node_.status();
                   if (computed) status["machine"]["digest"] = *computed;
                   call->answer_json(200, status);
                   return answering;
               });
    router.add("GET", "/v1/cluster", "/v1/cluster", {}, Where::loop,
               [this](const CallPtr& call) -> Served {
                   serve_cluster(call);
                   return answering;
               });
    router.add("GET", "/metrics", "/metrics", {}, Where::loop, [this](const CallPtr& call) {
        HttpResponse response;
        response.content_type = "text/plain; version=0.0.4; charset=utf-8";
        response.body = render_metrics(cluster_json(), counters_.snapshot());
        call->answer(std::move(response));
        return Served(answering);
    });
    router.add("GET", kSnapshotPath, kSnapshotPath, {"offset", "op"}, Where::io_thread,
               [this](const CallPtr& call) { return serve_snapshot_chunk(call); });
    router.add("GET", "/v1/openapi.json", "/v1/openapi.json", {}, Where::io_thread,
               [](const CallPtr& call) {
                   HttpResponse response;
                   response.body = openapi_json();
                   call->answer(std::move(response));
                   return Served(answering);
               });
    router.add("GET", "/healthz", "/healthz", {}, Where::io_thread, [](const CallPtr& call) {
        call->answer_json(200, Json{{"ok", true}});
        return Served(answering);
    });
    router.add("GET", "/readyz", "/readyz", {}, Where::io_thread,
               [this](const CallPtr& call) { return serve_readyz(call); });
}

Served Admin::serve_snapshot_chunk(const CallPtr& call) const
{
    // State transfer by snapshot (shell/snapshot_transfer.h): one chunk of the snapshot this
    // replica serves, from byte `offset`; `op`, when given, must still be the one served.
    const std::optional<uint64_t> offset = VL_TRY(u64_param(*call, "offset"));
    const std::optional<uint64_t> op = VL_TRY(u64_param(*call, "op"));
    const auto served = node_.served_snapshot();  // thread-safe, immutable
    if (!served)
        return ApiError{404, "no_snapshot", "this replica has no snapshot to serve yet",
                        Json::object()};
    if (op && *op != served->op)
        return ApiError{409, "snapshot_replaced",
                        "the snapshot asked for was replaced by a newer one; start again from "
                        "offset 0",
                        Json{{"op", served->op}}};
    const uint64_t from = offset.value_or(0);
    if (from > served->bytes.size())
        return ApiError{400, "invalid_argument",
                        "offset: must be at most the snapshot's size, " +
                            std::to_string(served->bytes.size()),
                        Json{{"field", "offset"}}};
    SnapshotChunk chunk = snapshot_chunk(*served, from);
    HttpResponse response;
    response.content_type = "application/octet-stream";
    response.body = std::move(chunk.bytes);
    response.headers = std::move(chunk.headers);
    call->answer(std::move(response));
    return answering;
}

Served Admin::serve_readyz(const CallPtr& call)
{
    probe_wanted_ = true;
    const RoleBoard::Role role = board_.role();
    Json body{{"status", status_name(role.status)},
              {"view", role.view},
              {"leader", role.leader ? Json(*role.leader) : Json()}};
    // Ready: in normal status, so a leader is known and requests can be served or forwarded;
    // a follower still hears it, and a leader still has its quorum.
    if (role.status != Status::normal)
        return ApiError{503, "not_ready",
                        "the replica is not in normal status (a view change or recovery is under "
                        "way)",
                        body};
    if (!role.leader)
        return ApiError{503, "not_ready",
                        "this follower no longer hears its leader: it asks the others to change "
                        "views",
                        body};
    if (!role.quorum_confirmed)
        return ApiError{503, "not_ready",
                        "this leader has waited " + std::to_string(kQuorumLostMs / 1000) +
                            " s for a quorum to commit an op: it cannot commit",
                        body};
    body["ready"] = true;
    call->answer_json(200, body);
    return answering;
}

}  // namespace voltlock::api
