#include "api/http_api.h"

#include <spdlog/spdlog.h>

#include "api/replica_statuses.h"
#include "api/ui_assets.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <limits>

namespace voltlock::api {

namespace {

using Clock = std::chrono::steady_clock;
using Proposed = LeaderPath::Proposed;
using Where = Router::Where;

Parsed<ValueEncoding> encoding_param(const Call& call)
{
    return parse_encoding_param(call.param("encoding").value_or(""));
}

// A put, a new session, an acquire or a barrier entry: the ops that may add a record, refused
// over the quota. What frees space (deletes, releases, closes) and keepalives go through.
bool adds_records(const LockOp& op)
{
    return std::holds_alternative<Put>(op) || std::holds_alternative<CreateSession>(op) ||
           std::holds_alternative<Acquire>(op) || std::holds_alternative<BarrierEnter>(op);
}

// A withdrawal's result: whether the wait was still there to withdraw.
bool withdrawn(const OpResult& result)
{
    if (const auto* lock = std::get_if<WithdrawWaitResult>(&result)) return lock->withdrawn;
    if (const auto* barrier = std::get_if<WithdrawEnterResult>(&result)) return barrier->withdrawn;
    return false;
}

ApiError quota_exceeded(uint64_t stored_bytes, uint64_t quota_bytes)
{
    return ApiError{507, "quota_exceeded",
                    "the cell's records take " + std::to_string(stored_bytes) +
                        " bytes, its quota_bytes is " + std::to_string(quota_bytes) +
                        ": delete keys or close sessions first (deletes, releases and closes "
                        "go through)",
                    Json{{"stored_bytes", stored_bytes}, {"quota_bytes", quota_bytes}}};
}

ApiError too_many_streams(uint32_t limit)
{
    return unavailable("too many watches and waits held open at this replica "
                       "(http_max_streams " + std::to_string(limit) + "): try another replica, "
                       "or again later");
}

// ---- State as JSON (loop thread) ---------------------------------------------------------------

Json names_json(const std::set<std::string>& names) { return Json(names); }

Json session_json(SessionId id, const SessionRecord& s, std::optional<uint64_t> lease_deadline)
{
    Json json{{"session", id},
              {"name", s.name},
              {"owner", s.owner},
              {"ttl_ms", s.ttl_ms},
              {"lock_delay_ms", s.lock_delay_ms},
              {"lease_epoch", s.lease_epoch},
              {"deadline_ms", s.deadline_ms},
              {"created_ms", s.created_ms},
              {"held_locks", names_json(s.held_locks)},
              {"waiting_locks", names_json(s.waiting_locks)},
              {"barriers", names_json(s.barriers)},
              {"ephemeral_keys", names_json(s.ephemeral_keys)}};
    if (lease_deadline) json["lease_deadline_ms"] = *lease_deadline;
    return json;
}

Json lock_json(const std::string& name, const LockRecord* lock)
{
    Json holders = Json::array();
    Json waiters = Json::array();
    if (lock) {
        for (const LockHolder& h : lock->holders) {
            const Sequencer sequencer{.lock = name, .mode = h.mode, .generation = h.generation,
                                      .session = h.session};
            holders.push_back(object_of("session", h.session, "mode", lock_mode_name(h.mode),
                                        "generation", h.generation, "granted_ms", h.granted_ms,
                                        "sequencer", sequencer_json(sequencer)));
        }
        for (const LockWaiter& w : lock->waiters)
            waiters.push_back(object_of("session", w.session, "mode", lock_mode_name(w.mode),
                                        "deadline_ms", w.deadline_ms, "since_ms", w.since_ms));
    }
    return object_of("name", name,
                     "holders", std::move(holders),
                     "waiters", std::move(waiters),
                     "generation", lock ? lock->generation : 0,
                     "delay_until_ms", lock ? lock->delay_until_ms : 0);
}

Json barrier_json(const std::string& name, const BarrierRecord& b)
{
    Json members = Json::array();
    for (const BarrierMember& m : b.members)
        members.push_back(Json{{"session", m.session}, {"leaving", m.leaving},
                               {"deadline_ms", m.deadline_ms}});
    return Json{{"name", name},
                {"count", b.count},
                {"phase", b.phase == BarrierPhase::entering ? "entering" : "entered"},
                {"members", members}};
}

// A snapshot that found nothing says so as {"status", "code", "message", "details"}.
void send_snapshot(Call& call, const Json& snapshot)
{
    if (snapshot.contains("code"))
        return call.fail(ApiError{snapshot.value("status", 404), snapshot["code"],
                                  snapshot["message"], snapshot.value("details", Json::object())});
    call.answer_json(200, snapshot);
}

// A Get result as the HTTP answer: a listing with prefix, else the one key or 404.
void answer_get(Call& call, const GetResult& r, bool prefix, ValueEncoding encoding, Json extra)
{
    Json body;
    if (prefix) {
        body = result_json(r, encoding);
        if (r.more && !r.kvs.empty()) body["next_after"] = r.kvs.back().key;
    } else if (r.kvs.empty()) {
        return call.fail(ApiError{404, "key_not_found", "no such key",
                                  Json{{"revision", r.revision}}});
    } else {
        body = key_value_json(r.kvs.front(), encoding);
        body["revision"] = r.revision;
    }
    if (!extra.is_null()) body.update(extra);
    call.answer_json(200, body);
}

Parsed<uint8_t> spaces_param(const Call& call)
{
    const auto given = call.param("spaces");
    if (!given) return static_cast<uint8_t>(EventSpace::kv);
    const std::string& text = *given;
    uint8_t spaces = 0;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        const std::string word = text.substr(start, comma - start);
        if (word == "kv") spaces |= uint8_t(EventSpace::kv);
        else if (word == "session") spaces |= uint8_t(EventSpace::session);
        else if (word == "lock") spaces |= uint8_t(EventSpace::lock);
        else if (word == "barrier") spaces |= uint8_t(EventSpace::barrier);
        else if (word == "all") spaces |= kAllEventSpaces;
        else
            return ApiError{400, "invalid_argument",
                            "spaces: a comma-separated list of kv, session, lock, barrier or "
                            "all, not '" + text + "'",
                            Json{{"field", "spaces"}}};
        start = comma + 1;
    }
    return spaces;
}

}  // namespace

HttpLimits http_limits(const DaemonConfig& config)
{
    return HttpLimits{.max_connections = config.http_max_connections,
                      .max_connections_per_address = config.http_max_connections_per_address,
                      .max_streams = config.http_max_streams,
                      .listen_backlog = config.http_listen_backlog,
                      .header_timeout_ms = config.http_header_timeout_ms,
                      .body_timeout_ms = config.http_body_timeout_ms,
                      .idle_timeout_ms = config.http_idle_timeout_ms,
                      .max_body_bytes = 1 << 20,
                      .stream_buffer_bytes = config.http_stream_buffer_bytes};
}

// ---- HttpApi -----------------------------------------------------------------------------------

HttpApi::HttpApi(EventLoop& loop, Node& node, LockMachine* machine)
    : loop_(loop),
      node_(node),
      machine_(machine),
      max_message_bytes_(node.config().max_message_bytes),
      limits_(http_limits(node.config())),
      quota_bytes_(node.config().quota_bytes),
      service_(machine ? std::make_unique<LockService>(loop, node, *machine, pool_, progress_)
                       : nullptr),
      forwarder_(node.config(), loop, node.config().http_forward_threads),
      leader_(loop, node, service_.get(), pool_, forwarder_),
      admin_(loop, node, machine, service_.get(), counters_, forwarder_,
             [this] { return api_stats(); }),
      auth_admin_(
          machine, node.config().max_message_bytes, leader_,
          [this](const CallPtr& call, const LockOp& op, AuthAdmin::Answer answer) {
              run_op(call, op, 0, std::move(answer));
          },
          [this](const CallPtr& call, std::function<Json()> body) {
              return read_state(call, ReadAt::commit_point, std::move(body));
          }),
      access_(node.config(), [&node] { return node.cell_clock_ms(); }),
      router_(loop, counters_, access_),
      server_(limits_,
              HttpTls{.cert_file = node.config().tls_cert_file,
                      .key_file = node.config().tls_key_file,
                      .client_ca_file = node.config().tls_client_ca_file},
              [this](const std::shared_ptr<Exchange>& e) { router_.on_request(e); },
              [this] { router_.flush(); }, &Router::exempt)
{
    if (machine_)
        waits_ = std::make_unique<WaitService>(
            loop, *machine_, progress_, limits_.max_streams,
            [this](WaitKind kind, const std::string& name, SessionId session,
                   uint64_t deadline_ms) { withdraw(kind, name, session, deadline_ms); },
            [this] { return node_.cell_clock_ms(); },
            access_.on() ? WaitService::Authorize([this](Call& call) {
                return access_.check(call);
            })
                         : WaitService::Authorize{});
    install_routes();
    if (service_)
        node_.take_requests([this](const Request& request) {
            return take_keepalive_request(request);
        });
}

HttpApi::~HttpApi() { stop(); }

Result<Ok> HttpApi::reload_auth()
{
    auto loaded = access_.load();
    if (loaded.ok() && waits_) waits_->authorize_watches();
    return loaded;
}

Result<Ok> HttpApi::reload_tls()
{
    if (auto loaded = server_.reload_tls(); !loaded.ok()) return loaded;
    tls_expiries_ = tls_certificate_expiries(node_.config());
    return Ok{};
}

Result<Ok> HttpApi::start(const std::string& ip, uint16_t port)
{
    if (service_)
        if (auto started = service_->start(); !started.ok()) return started.error();
    admin_.start();
    if (auto loaded = access_.load(); !loaded.ok()) return loaded.error();
    if (machine_) {
        // The replicated users, roles and tokens, as of every op and snapshot applied here.
        const auto publish_auth = [this] {
            if (access_.publish(machine_->state().auth)) waits_->authorize_watches();
        };
        publish_auth();
        node_.on_executed([publish_auth](const Executed&) { publish_auth(); });
        node_.on_snapshot_installed(publish_auth);
    }
    if (!access_.on())
        spdlog::warn("r{}: AUTH IS OFF: any client that reaches {}:{} may read, write, lock and "
                     "close every session; set auth_token_file (docs/security-auth.md)",
                     node_.config().replica, ip, port);
    // The files the server loads as it starts (below).
    tls_expiries_ = tls_certificate_expiries(node_.config());
    return server_.start(ip, port, node_.config().http_io_threads == 0 ? &loop_ : nullptr);
}

void HttpApi::stop()
{
    server_.stop();
    forwarder_.stop();
}

Json HttpApi::api_stats() const
{
    const HttpServerCounters& http = server_.counters();
    Json tls_certificates = Json::array();
    for (const CertificateExpiry& expiry : tls_expiries_)
        tls_certificates.push_back(
            Json{{"file", expiry.file}, {"not_after_unix_s", expiry.not_after_unix_s}});
    return Json{{"forwarded", leader_.forwarded()},
                {"forwarded_as_requests", leader_.forwarded_as_requests()},
                {"request_retransmits", leader_.request_retransmits()},
                {"request_fallbacks", leader_.request_fallbacks()},
                {"keepalives_as_requests", keepalives_as_requests_},
                {"keepalive_requests_served", keepalive_requests_served_},
                {"keepalives_asked_again", keepalives_asked_again_},
                {"withdrawals_too_late", withdrawals_too_late_},
                {"reads_at_commit_point", leader_.reads_at_commit_point()},
                {"watchers", waits_ ? waits_->watchers() : 0},
                {"waiters", waits_ ? waits_->waiters() : 0},
                {"client_ids", pool_.size()},
                {"client_table", node_.replica().client_table_size()},
                {"connections", http.connections.load()},
                {"connections_refused", http.refused.load()},
                {"connections_timed_out", http.timed_out.load()},
                {"connections_evicted", http.evicted.load()},
                {"clients_hung_up", http.hung_up.load()},
                {"slow_readers_cut", waits_ ? waits_->slow_readers_cut() : 0},
                {"watches_unauthorized_cut", waits_ ? waits_->unauthorized_cut() : 0},
                {"waits_withdrawn", waits_ ? waits_->waits_withdrawn() : 0},
                {"tls_certificates", tls_certificates}};
}

void HttpApi::install_routes()
{
    // Names and keys may contain '/' and ':' ({name+}: the suffix is anchored at the path's end),
    // and any other byte (control characters then get their 400 from the translators).
    auto add = [this](const char* method, const char* pattern, const char* endpoint,
                      std::vector<std::string> params, Router::Handler handler) {
        router_.add(method, pattern, endpoint, std::move(params), Where::loop,
                    [this, handler = std::move(handler)](const CallPtr& call) -> Served {
                        if (!machine_)
                            return ApiError{501, "not_lock_service",
                                            "this cell replicates the register machine, not the "
                                            "lock service (config \"machine\")",
                                            Json::object()};
                        return handler(call);
                    });
    };
    add("POST", "/v1/sessions", "/v1/sessions", {}, [this](auto& c) { return create_session(c); });
    add("POST", "/v1/sessions/{id}:keepalive", "/v1/sessions/{id}:keepalive", {},
        [this](auto& c) { return keep_alive(c); });
    add("DELETE", "/v1/sessions/{id}", "/v1/sessions/{id}", {},
        [this](auto& c) { return close_session(c); });
    add("GET", "/v1/sessions", "/v1/sessions", {"stale"},
        [this](auto& c) { return get_sessions(c, false); });
    add("GET", "/v1/sessions/{id}", "/v1/sessions/{id}", {"stale"},
        [this](auto& c) { return get_sessions(c, true); });

    add("POST", "/v1/locks/{name+}:acquire", "/v1/locks/{name}:acquire", {},
        [this](auto& c) { return acquire(c); });
    add("POST", "/v1/locks/{name+}:release", "/v1/locks/{name}:release", {},
        [this](auto& c) { return release(c); });
    add("GET", "/v1/locks", "/v1/locks", {"stale"},
        [this](auto& c) { return get_locks(c, false); });
    add("GET", "/v1/locks/{name+}", "/v1/locks/{name}", {"stale"},
        [this](auto& c) { return get_locks(c, true); });
    add("POST", "/v1/sequencers:check", "/v1/sequencers:check", {},
        [this](auto& c) { return check_sequencer(c); });

    add("GET", "/v1/kv/{key*}", "/v1/kv/{key}",
        {"prefix", "after", "limit", "encoding", "stale"}, [this](auto& c) { return get_kv(c); });
    add("PUT", "/v1/kv/{key+}", "/v1/kv/{key}", {}, [this](auto& c) { return put_kv(c); });
    add("DELETE", "/v1/kv/{key*}", "/v1/kv/{key}", {"prefix", "prev_revision"},
        [this](auto& c) { return delete_kv(c); });
    add("GET", "/v1/watch/{key*}", "/v1/watch/{key}",
        {"prefix", "start_revision", "spaces", "encoding"}, [this](auto& c) { return watch(c); });

    add("POST", "/v1/barriers/{name+}:enter", "/v1/barriers/{name}:enter", {},
        [this](auto& c) { return barrier(c, true); });
    add("POST", "/v1/barriers/{name+}:leave", "/v1/barriers/{name}:leave", {},
        [this](auto& c) { return barrier(c, false); });
    add("GET", "/v1/barriers", "/v1/barriers", {"stale"},
        [this](auto& c) { return get_barriers(c, false); });
    add("GET", "/v1/barriers/{name+}", "/v1/barriers/{name}", {"stale"},
        [this](auto& c) { return get_barriers(c, true); });

    admin_.install(router_);
    auth_admin_.install(add);
    install_cluster_and_ui_routes();
}

void HttpApi::install_cluster_and_ui_routes()
{
    // Every replica's /v1/status as this one gets it (api/replica_statuses.h): the peers are
    // asked over HTTP with a deadline, on a forwarding thread, never on the loop.
    router_.add("GET", "/v1/cluster/replicas", "/v1/cluster/replicas", {}, Where::loop,
                [this](const CallPtr& call) {
                    forwarder_.run([call, own = node_.status(), config = &node_.config()] {
                        call->answer_json(200, replica_statuses(
                                                   *config,
                                                   [&own] { return std::optional<Json>(own); },
                                                   call->header("Authorization")));
                    });
                    return Served(answering);
                });
    // The web UI's embedded files (api/ui_assets.h), on the I/O thread; "/" leads there.
    const auto serve_ui = [](const CallPtr& call) {
        const std::string& path = call->parsed.path;
        const UiResponse ui =
            ui_response(path == "/" ? "/ui" : path, call->header("If-None-Match").value_or(""));
        HttpResponse response;
        response.status = ui.status;
        response.content_type = ui.content_type;
        response.body = std::string(ui.body);
        response.headers = ui.headers;
        call->answer(std::move(response));
        return Served(answering);
    };
    for (const char* pattern : {"/", "/ui", "/ui/{file*}"})
        router_.add("GET", pattern, "/ui", {}, Where::io_thread, serve_ui);
}

// ---- Proposing ---------------------------------------------------------------------------------

void HttpApi::run_op_answering_result(const CallPtr& call, const LockOp& op)
{
    run_op(call, op, 0, [call](const OpResult& result) {
        call->answer_json(200, result_json(result, ValueEncoding::automatic));
    });
}

bool HttpApi::owner_unknown_here(const Call& call, SessionId session) const
{
    return !call.user.empty() && !call.admin && machine_ && session != 0 &&
           !machine_->state().sessions.contains(session);
}

std::optional<ApiError> HttpApi::foreign_session(const Call& call, SessionId session) const
{
    if (call.user.empty() || call.admin || !machine_ || session == 0) return std::nullopt;
    const auto& sessions = machine_->state().sessions;
    const auto found = sessions.find(session);
    // Not here (yet): the leader checks it, as the client's token goes with the request.
    if (found == sessions.end() || found->second.owner == call.user) return std::nullopt;
    return ApiError{403, "permission_denied",
                    "session " + std::to_string(session) + " belongs to another identity: only "
                    "the identity that opened it, or an admin, may use it",
                    Json{{"session", session}, {"user", call.user}}};
}

void HttpApi::run_op(const CallPtr& call, const LockOp& op, uint32_t wait_ms, Answer answer,
                     LeaderPath::Relay relay)
{
    const SessionId session = std::visit(
        [](const auto& o) -> SessionId {
            if constexpr (requires { SessionId{o.session}; }) return o.session;
            return 0;
        },
        op);
    if (auto refused = foreign_session(*call, session)) return call->fail(*refused);
    // Judged on this replica's records, which a follower has as of its last apply: a soft
    // limit, as etcd's, that ops already on their way may pass by a little.
    if (quota_bytes_ != 0 && machine_ && adds_records(op) &&
        machine_->stored_bytes() >= quota_bytes_)
        return call->fail(quota_exceeded(machine_->stored_bytes(), quota_bytes_));
    auto finish = [call, answer = std::move(answer)](const ClientIdentity& identity,
                                                     Proposed proposed) {
        switch (proposed.kind) {
        case Proposed::Kind::not_leader:  // the leader path tries again; never here
        case Proposed::Kind::timed_out:
            return call->fail(
                outcome_unknown(*call, "the op was not committed in time: no quorum answered"));
        case Proposed::Kind::stale:
            return call->fail(stale_request_error(identity, proposed.latest));
        case Proposed::Kind::reused:
            return call->fail(reused_request_error(identity));
        case Proposed::Kind::committed:
            break;
        }
        auto decoded = decode_result(proposed.result);
        if (!decoded.ok())
            return call->fail(ApiError{500, "internal", "the result did not decode",
                                       Json::object()});
        const OpResult& result = decoded.value();
        if (const auto* error = std::get_if<OpError>(&result)) return call->fail(op_error(*error));
        answer(result);
    };
    // A session this replica has not applied yet: the leader checks its owner, which it can only
    // with the client's credentials, and those travel over HTTP, not in a VR Request.
    const auto route = owner_unknown_here(*call, session) ? LeaderPath::Route::http
                                                          : LeaderPath::Route::any;
    leader_.run_op(call, encode_op(op), wait_ms, std::move(finish), std::move(relay), route);
}

void HttpApi::read_at_leader(const CallPtr& call, std::function<Json()> snapshot)
{
    leader_.at_leader(call, 0, [this, call, snapshot = std::move(snapshot)](
                                   const LeaderPath::AtLeader& at,
                                   LeaderPath::NotLeader not_leader) {
        leader_.propose(at.identity, encode_op(ExpireWaiters{}), at.until, snapshot,
                        [call, not_leader, identity = at.identity](Proposed proposed) {
            switch (proposed.kind) {
            case Proposed::Kind::not_leader:
                return not_leader();
            case Proposed::Kind::stale:
                return call->fail(stale_request_error(identity, proposed.latest));
            case Proposed::Kind::reused:
                return call->fail(reused_request_error(identity));
            case Proposed::Kind::timed_out:
                return call->fail(
                    unavailable("the read could not be confirmed by a quorum in time"));
            case Proposed::Kind::committed:
                return send_snapshot(*call, proposed.snapshot);
            }
        });
    });
}

void HttpApi::read_at_commit_point(const CallPtr& call, std::function<Json()> snapshot)
{
    // Linearizable: the no-op is appended after this read began, so its commit point is at or
    // past every write acknowledged before; this replica answers once it has applied that far,
    // from a state at least that new.
    auto finish = [this, call, snapshot = std::move(snapshot)](const ClientIdentity& identity,
                                                                Proposed proposed) {
        switch (proposed.kind) {
        case Proposed::Kind::not_leader:  // the leader path tries again; never here
        case Proposed::Kind::timed_out:
            return call->fail(unavailable("the read could not be confirmed by a quorum in time"));
        case Proposed::Kind::stale:
            return call->fail(stale_request_error(identity, proposed.latest));
        case Proposed::Kind::reused:
            return call->fail(reused_request_error(identity));
        case Proposed::Kind::committed:
            break;
        }
        // The leader's name, set for the answer made now, goes on the one made when applied.
        auto ready = [call, snapshot, headers = call->answer_headers] {
            call->answer_headers = headers;
            send_snapshot(*call, snapshot());
        };
        auto late = [call] {
            call->fail(unavailable("this replica did not apply the leader's commit point in "
                                   "time: read from the leader, or with stale=true"));
        };
        const SteadyTime until = Clock::now() + std::chrono::milliseconds(kLeaderWaitMs);
        leader_.when_applied(proposed.commit, until, std::move(ready), std::move(late));
    };
    leader_.run_op(call, encode_op(ExpireWaiters{}), 0, std::move(finish));
}

Served HttpApi::read_state(const CallPtr& call, ReadAt at, std::function<Json()> snapshot)
{
    const bool stale = VL_TRY(bool_param(*call, "stale"));
    if (!stale && at == ReadAt::leader) read_at_leader(call, std::move(snapshot));
    else if (!stale) read_at_commit_point(call, std::move(snapshot));
    else {
        Json body = snapshot();
        if (!body.contains("code")) body["stale"] = staleness_json(node_, machine_);
        send_snapshot(*call, body);
    }
    return answering;
}

// ---- Waits -------------------------------------------------------------------------------------

void HttpApi::await_outcome(const CallPtr& call, WaitKind kind, const std::string& name,
                            SessionId session, Revision after, uint64_t deadline_ms)
{
    // At the leader for a follower's client (X-Voltlock-Wait-Here): the follower waits.
    if (call->header(kWaitHereHeader)) {
        HttpResponse response = json_response(202, Json{{"revision", after},
                                                        {"deadline_ms", deadline_ms}});
        response.set_header(kWaitingHeader, "1");
        return call->answer(std::move(response));
    }
    waits_->await_outcome(call, kind, name, session, after, deadline_ms);
}

LeaderPath::Relay HttpApi::wait_here(const CallPtr& call, WaitKind kind, std::string name,
                                     SessionId session)
{
    return [this, call, kind, name = std::move(name), session](HttpResponse response) {
        if (response.status != 202 || !response_header(response, kWaitingHeader))
            return call->answer(std::move(response));
        const Json body = Json::parse(response.body, nullptr, false);
        if (!body.is_object() || !body.contains("revision") || !body.contains("deadline_ms"))
            return call->fail(ApiError{502, "bad_gateway",
                                       "the leader's answer to a wait did not parse",
                                       Json::object()});
        waits_->await_outcome(call, kind, name, session, body["revision"].get<Revision>(),
                              body["deadline_ms"].get<uint64_t>());
    };
}

void HttpApi::withdraw(WaitKind kind, const std::string& name, SessionId session,
                       uint64_t deadline_ms)
{
    // The replica's own request, through the leader like any other, as a VR Request only (it
    // has no HTTP form). WithdrawWait takes the session out of the lock's line, WithdrawEnter out
    // of the barrier; a lock granted or a barrier passed meanwhile stays so, as the client may
    // have asked again elsewhere and been told.
    const bool lock = kind == WaitKind::lock;
    const char* what = lock ? "lock" : "barrier";
    spdlog::info("r{}: the client waiting for {} '{}' as session {} left: withdrawing the wait",
                 node_.config().replica, what, name, session);
    auto call = std::make_shared<Call>();
    call->method = "POST";
    call->endpoint = "withdraw";
    const Bytes op =
        lock ? encode_op(WithdrawWait{.lock = name, .session = session, .deadline_ms = deadline_ms})
             : encode_op(
                   WithdrawEnter{.barrier = name, .session = session, .deadline_ms = deadline_ms});
    leader_.run_op(
        call, op, 0,
        [this, what, name, session](const ClientIdentity&, Proposed proposed) {
            if (proposed.kind != Proposed::Kind::committed) return;  // the session's end will do
            auto decoded = decode_result(proposed.result);
            if (decoded.ok() && withdrawn(decoded.value())) return;
            withdrawals_too_late_ += 1;
            spdlog::info("r{}: session {}'s wait for {} '{}' was over before its withdrawal "
                         "(granted or passed, timed out, or the session ended): nothing withdrawn",
                         node_.config().replica, session, what, name);
        },
        {}, LeaderPath::Route::replication);
}

// ---- Sessions ----------------------------------------------------------------------------------

Served HttpApi::create_session(const CallPtr& call)
{
    CreateSession create =
        std::get<CreateSession>(VL_TRY(create_session_op(call->body, max_message_bytes_)));
    create.owner = call->user;  // "" with auth off
    run_op(call, create, 0, [call, create](const OpResult& result) {
        Json body = result_json(result, ValueEncoding::automatic);
        body["ttl_ms"] = create.ttl_ms;
        body["lock_delay_ms"] = create.lock_delay_ms;
        body["name"] = create.name;
        call->answer_json(201, body);
    });
    return answering;
}

Served HttpApi::keep_alive(const CallPtr& call)
{
    const SessionId id = VL_TRY(parse_session_id(call->path_param));
    VL_TRY(parse_object(call->body, {}));
    if (auto refused = foreign_session(*call, id)) return *refused;
    auto serve = [this, call, id](const LeaderPath::AtLeader& at,
                                  LeaderPath::NotLeader not_leader) {
        auto answer = [call](HttpResponse response) { call->answer(std::move(response)); };
        renew_at_leader(id, at, std::move(answer), std::move(not_leader));
    };
    // A session this replica has not applied: the leader checks its owner with the client's
    // credentials, which travel over HTTP only.
    if (owner_unknown_here(*call, id)) {
        leader_.at_leader(call, 0, std::move(serve));
        return answering;
    }
    // From a follower: a Request that the leader's API takes and answers (take_keepalive_request)
    // with the very answer it gives at its own front end.
    leader_.run_request(
        call, encode_op(KeepAlive{.session = id}), serve,
        [this, call, serve](const ClientIdentity& identity, Proposed proposed) {
            switch (proposed.kind) {
            case Proposed::Kind::not_leader:  // the leader path tries again; never here
            case Proposed::Kind::timed_out:
                return call->fail(unavailable("the keepalive was not committed in time"));
            case Proposed::Kind::stale:
                return call->fail(stale_request_error(identity, proposed.latest));
            case Proposed::Kind::reused:
                return call->fail(reused_request_error(identity));
            case Proposed::Kind::committed:
                break;
            }
            std::optional<HttpResponse> answer = decode_answer(proposed.result);
            if (!answer) {
                // The KeepAlive op's own result: a leader proposed it for this Request and was
                // deposed before answering, and the next one committed it and answered as VR
                // does, from the client table. The lease was renewed, but the answer (the lease
                // deadline) is the leader's tracker's: ask the leader over HTTP.
                keepalives_asked_again_ += 1;
                return leader_.at_leader(call, 0, serve);
            }
            keepalives_as_requests_ += 1;
            call->answer(std::move(*answer));
        });
    return answering;
}

void HttpApi::renew_at_leader(SessionId id, const LeaderPath::AtLeader& at,
                              std::function<void(HttpResponse)> answer,
                              LeaderPath::NotLeader not_leader)
{
    const LockService::KeepAliveAnswer renewal_answer = service_->keep_alive(id);
    if (!renewal_answer.leader) return not_leader();
    if (!renewal_answer.known)
        return answer(error_response(
            op_error(OpError{.op = OpCode::keep_alive,
                             .code = ErrorCode::unknown_session,
                             .revision = machine_->revision()})));
    const LeaseTracker::Renewal& renewal = renewal_answer.renewal;
    Json body{{"session", id}, {"ttl_ms", renewal.ttl_ms},
              {"lease_deadline_ms", renewal.deadline_ms},
              {"lease_epoch", renewal.lease_epoch}, {"replicated", false}};
    if (!renewal.replicate) return answer(json_response(200, body));
    leader_.propose(
        at.identity, encode_op(KeepAlive{.session = id}), at.until, {},
        [answer = std::move(answer), body, not_leader,
         identity = at.identity](Proposed proposed) mutable {
            switch (proposed.kind) {
            case Proposed::Kind::not_leader: return not_leader();
            case Proposed::Kind::stale:
                return answer(error_response(stale_request_error(identity, proposed.latest)));
            case Proposed::Kind::reused:
                return answer(error_response(reused_request_error(identity)));
            case Proposed::Kind::timed_out:
                return answer(
                    error_response(unavailable("the keepalive was not committed in time")));
            case Proposed::Kind::committed: break;
            }
            auto decoded = decode_result(proposed.result);
            if (!decoded.ok())
                return answer(error_response(
                    ApiError{500, "internal", "the result did not decode", Json::object()}));
            if (const auto* error = std::get_if<OpError>(&decoded.value()))
                return answer(error_response(op_error(*error)));
            if (const auto* renewed = std::get_if<KeepAliveResult>(&decoded.value())) {
                body["lease_epoch"] = renewed->lease_epoch;
                body["revision"] = renewed->revision;
            }
            body["replicated"] = true;
            answer(json_response(200, body));
        });
}

bool HttpApi::take_keepalive_request(const Request& request)
{
    if (request.payload.empty() ||
        static_cast<uint8_t>(request.payload.front()) != static_cast<uint8_t>(OpCode::keep_alive))
        return false;
    auto op = decode_op(request.payload);
    if (!op.ok() || !std::holds_alternative<KeepAlive>(op.value())) return false;
    keepalive_requests_served_ += 1;
    const ClientIdentity identity{request.client_id, request.request_number};
    const LeaderPath::AtLeader at{identity,
                                  Clock::now() + std::chrono::milliseconds(kLeaderWaitMs)};
    // Not the leader (or no leader lease): no answer, as VR gives none (§4.1); the follower
    // sends again, to the next leader once the view changed.
    renew_at_leader(
        std::get<KeepAlive>(op.value()).session, at,
        [this, identity](HttpResponse response) {
            Bytes answer = encode_answer(response);
            // What cannot travel in one datagram is not sent: the follower falls back to HTTP.
            if (answer.size() > max_entry_payload_bytes(max_message_bytes_)) return;
            node_.answer_request(Reply{.view = node_.replica().view(),
                                       .replica = node_.config().replica,
                                       .client_id = identity.client_id,
                                       .request_number = identity.request_number,
                                       .commit = node_.replica().commit(),
                                       .result = std::move(answer)});
        },
        [] {});
    return true;
}

Served HttpApi::close_session(const CallPtr& call)
{
    const SessionId session = VL_TRY(parse_session_id(call->path_param));
    VL_TRY(parse_object(call->body, {}));
    run_op_answering_result(call, CloseSession{.session = session});
    return answering;
}

Served HttpApi::get_sessions(const CallPtr& call, bool one)
{
    const SessionId id = one ? VL_TRY(parse_session_id(call->path_param)) : 0;
    LockMachine* machine = machine_;
    LockService* service = service_.get();
    return read_state(call, ReadAt::leader, [machine, service, id, one] {
        const auto& sessions = machine->state().sessions;
        if (one) {
            const auto it = sessions.find(id);
            if (it == sessions.end())
                return Json{{"status", 404}, {"code", "unknown_session"},
                            {"message", "no such session"},
                            {"details", Json{{"revision", machine->revision()}}}};
            Json body = session_json(id, it->second, service->lease_deadline_ms(id));
            body["revision"] = machine->revision();
            return body;
        }
        Json list = Json::array();
        for (const auto& [sid, s] : sessions)
            list.push_back(session_json(sid, s, service->lease_deadline_ms(sid)));
        return Json{{"sessions", list}, {"revision", machine->revision()}};
    });
}

// ---- Locks -------------------------------------------------------------------------------------

Served HttpApi::acquire(const CallPtr& call)
{
    const LockOp op = VL_TRY(acquire_op(call->path_param, call->body, max_message_bytes_));
    const Acquire acquire = std::get<Acquire>(op);
    if (acquire.wait_ms > 0 && waits_->full()) return too_many_streams(limits_.max_streams);
    run_op(call, op, acquire.wait_ms,
           [this, call, acquire](const OpResult& result) {
               const auto& r = std::get<AcquireResult>(result);
               if (r.status == AcquireStatus::granted)
                   return call->answer_json(200, result_json(result, ValueEncoding::automatic));
               await_outcome(call, WaitKind::lock, acquire.lock, acquire.session, r.revision,
                             r.deadline_ms);
           },
           wait_here(call, WaitKind::lock, acquire.lock, acquire.session));
    return answering;
}

Served HttpApi::release(const CallPtr& call)
{
    run_op_answering_result(call, VL_TRY(release_op(call->path_param, call->body,
                                                    max_message_bytes_)));
    return answering;
}

Served HttpApi::get_locks(const CallPtr& call, bool one)
{
    const std::string name = one ? call->path_param : std::string();
    if (one)
        if (auto bad = check_name("lock", name, false)) return *bad;
    LockMachine* machine = machine_;
    return read_state(call, ReadAt::commit_point, [machine, name, one] {
        const auto& locks = machine->state().locks;
        if (one) {
            const auto it = locks.find(name);
            Json body = lock_json(name, it == locks.end() ? nullptr : &it->second);
            body["revision"] = machine->revision();
            return body;
        }
        Json list = Json::array();
        for (const auto& [n, lock] : locks) list.push_back(lock_json(n, &lock));
        return Json{{"locks", list}, {"revision", machine->revision()}};
    });
}

Served HttpApi::check_sequencer(const CallPtr& call)
{
    run_op_answering_result(call, VL_TRY(check_sequencer_op(call->body, max_message_bytes_)));
    return answering;
}

// ---- Key/value ---------------------------------------------------------------------------------

Served HttpApi::get_kv(const CallPtr& call)
{
    const std::string key = call->path_param;
    const bool prefix = VL_TRY(bool_param(*call, "prefix"));
    const bool stale = VL_TRY(bool_param(*call, "stale"));
    const std::optional<uint64_t> limit = VL_TRY(u64_param(*call, "limit"));
    const ValueEncoding encoding = VL_TRY(encoding_param(*call));
    const std::string after = call->param("after").value_or("");
    if (!prefix && (!after.empty() || limit))
        return ApiError{400, "invalid_argument", "after and limit apply only with prefix=true",
                        Json{{"field", after.empty() ? "limit" : "after"}}};
    if (auto bad = check_name("key", key, prefix)) return *bad;
    const uint32_t page = static_cast<uint32_t>(
        std::min<uint64_t>(limit.value_or(0), std::numeric_limits<uint32_t>::max()));
    const LockOp op = VL_TRY(get_op(key, prefix, after, page, max_message_bytes_));
    if (!stale) {
        run_op(call, op, 0, [call, prefix, encoding](const OpResult& result) {
            answer_get(*call, std::get<GetResult>(result), prefix, encoding, Json());
        });
        return answering;
    }
    // A stale read: this replica's state as of its last apply, and how far behind it may be.
    const OpResult result = machine_->get(std::get<Get>(op));
    if (const auto* error = std::get_if<OpError>(&result)) return op_error(*error);
    answer_get(*call, std::get<GetResult>(result), prefix, encoding,
               object_of("stale", staleness_json(node_, machine_)));
    return answering;
}

Served HttpApi::put_kv(const CallPtr& call)
{
    run_op_answering_result(call, VL_TRY(put_op(call->path_param, call->body, max_message_bytes_)));
    return answering;
}

Served HttpApi::delete_kv(const CallPtr& call)
{
    const std::string key = call->path_param;
    const bool prefix = VL_TRY(bool_param(*call, "prefix"));
    const std::optional<uint64_t> prev = VL_TRY(u64_param(*call, "prev_revision"));
    if (auto bad = check_name("key", key, prefix)) return *bad;
    run_op_answering_result(
        call, VL_TRY(delete_op(key, prefix, prev, call->body, max_message_bytes_)));
    return answering;
}

// ---- Watches -----------------------------------------------------------------------------------

Served HttpApi::watch(const CallPtr& call)
{
    const std::string key = call->path_param;
    const bool prefix = VL_TRY(bool_param(*call, "prefix"));
    std::optional<Revision> from = VL_TRY(u64_param(*call, "start_revision"));
    const uint8_t spaces = VL_TRY(spaces_param(*call));
    const ValueEncoding encoding = VL_TRY(encoding_param(*call));
    if (auto bad = check_name("key", key, prefix)) return *bad;
    if (const auto last_event = call->header("Last-Event-ID"); !from && last_event)
        from = VL_TRY(parse_last_event_id(*last_event));
    if (waits_->full()) return too_many_streams(limits_.max_streams);
    const WatchFilter filter{.key = key, .prefix = prefix, .spaces = spaces};
    // Without a start revision the watch sees what happens from now on.
    const Revision begin = from ? std::max<Revision>(*from, 1) : machine_->revision() + 1;
    const WatchBatch first = machine_->watch(begin, filter, 1);
    if (first.compacted) return compacted(first.oldest_revision, begin);
    waits_->watch(call, filter, encoding, begin);
    return answering;
}

// ---- Barriers ----------------------------------------------------------------------------------

Served HttpApi::barrier(const CallPtr& call, bool enter)
{
    const std::string name = call->path_param;
    const LockOp op = VL_TRY(enter ? barrier_enter_op(name, call->body, max_message_bytes_)
                                   : barrier_leave_op(name, call->body, max_message_bytes_));
    const SessionId session =
        enter ? std::get<BarrierEnter>(op).session : std::get<BarrierLeave>(op).session;
    const uint32_t wait_ms =
        enter ? std::get<BarrierEnter>(op).wait_ms : std::get<BarrierLeave>(op).wait_ms;
    if (wait_ms > 0 && waits_->full()) return too_many_streams(limits_.max_streams);
    const WaitKind kind = enter ? WaitKind::barrier_enter : WaitKind::barrier_leave;
    run_op(call, op, wait_ms,
           [this, call, kind, name, session](const OpResult& result) {
               BarrierStatus status = BarrierStatus::passed;
               Revision revision = 0;
               uint64_t deadline = 0;
               if (const auto* r = std::get_if<BarrierEnterResult>(&result))
                   status = r->status, revision = r->revision, deadline = r->deadline_ms;
               if (const auto* r = std::get_if<BarrierLeaveResult>(&result))
                   status = r->status, revision = r->revision, deadline = r->deadline_ms;
               if (status == BarrierStatus::passed)
                   return call->answer_json(200, Json{{"passed", true}, {"revision", revision}});
               await_outcome(call, kind, name, session, revision, deadline);
           },
           wait_here(call, kind, name, session));
    return answering;
}

Served HttpApi::get_barriers(const CallPtr& call, bool one)
{
    const std::string name = one ? call->path_param : std::string();
    if (one)
        if (auto bad = check_name("barrier", name, false)) return *bad;
    LockMachine* machine = machine_;
    return read_state(call, ReadAt::commit_point, [machine, name, one] {
        const auto& barriers = machine->state().barriers;
        if (one) {
            const auto it = barriers.find(name);
            if (it == barriers.end())
                return Json{{"status", 404}, {"code", "barrier_not_found"},
                            {"message", "no such barrier (it has no members)"},
                            {"details", Json{{"revision", machine->revision()}}}};
            Json body = barrier_json(name, it->second);
            body["revision"] = machine->revision();
            return body;
        }
        Json list = Json::array();
        for (const auto& [n, b] : barriers) list.push_back(barrier_json(n, b));
        return Json{{"barriers", list}, {"revision", machine->revision()}};
    });
}

}  // namespace voltlock::api
