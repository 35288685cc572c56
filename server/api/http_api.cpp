#include "api/http_api.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <future>

#include "api/metrics.h"
#include "api/openapi.h"
#include "api/replica_statuses.h"
#include "api/ui_assets.h"
#include "core/message.h"

namespace voltlock::api {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kJsonType = "application/json";

void send_json(httplib::Response& res, int status, const Json& body)
{
    res.status = status;
    res.set_content(body.dump(), kJsonType);
}

void send_error(httplib::Response& res, const ApiError& error)
{
    res.status = error.status;
    if (error.status == 503) res.set_header("Retry-After", "1");
    res.set_content(error_body(error).dump(), kJsonType);
}

std::optional<std::string> header(const httplib::Request& req, const char* name)
{
    if (!req.has_header(name)) return std::nullopt;
    return req.get_header_value(name);
}

// Query parameters, each parsed or the 400 that names it.
Parsed<bool> bool_param(const httplib::Request& req, const char* name)
{
    if (!req.has_param(name)) return false;
    return parse_bool_param(name, req.get_param_value(name));
}

Parsed<std::optional<uint64_t>> u64_param(const httplib::Request& req, const char* name)
{
    if (!req.has_param(name)) return std::optional<uint64_t>{};
    auto value = parse_u64_param(name, req.get_param_value(name));
    if (!value.ok()) return value.error();
    return std::optional<uint64_t>{value.value()};
}

Parsed<ValueEncoding> encoding_param(const httplib::Request& req)
{
    return parse_encoding_param(req.has_param("encoding") ? req.get_param_value("encoding") : "");
}

std::string match(const httplib::Request& req, size_t i)
{
    return i < req.matches.size() ? std::string(req.matches[i]) : std::string();
}

ApiError stale_request_error(const ClientIdentity& identity, RequestNumber latest)
{
    return ApiError{409, "request_number_stale",
                    "X-Voltlock-Request-Number " + std::to_string(identity.request_number) +
                        " is below this client id's latest, " + std::to_string(latest) +
                        ": a new request needs a higher number",
                    Json{{"request_number", identity.request_number}, {"latest", latest}}};
}

Result<FileDescriptor> make_timer(int clock)
{
    FileDescriptor fd(::timerfd_create(clock, TFD_NONBLOCK | TFD_CLOEXEC));
    if (fd.get() < 0) return os_error("timerfd_create");
    return fd;
}

void drain_timer(int fd)
{
    uint64_t expirations = 0;
    [[maybe_unused]] ssize_t got = ::read(fd, &expirations, sizeof expirations);
}

// ---- State as JSON (loop thread) ---------------------------------------------------------------

Json names_json(const std::set<std::string>& names) { return Json(names); }

Json session_json(SessionId id, const SessionRecord& s, std::optional<uint64_t> lease_deadline)
{
    Json json{{"session", id},
              {"name", s.name},
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
            holders.push_back(Json{{"session", h.session}, {"mode", lock_mode_name(h.mode)},
                                   {"generation", h.generation}, {"granted_ms", h.granted_ms},
                                   {"sequencer", sequencer_json(sequencer)}});
        }
        for (const LockWaiter& w : lock->waiters)
            waiters.push_back(Json{{"session", w.session}, {"mode", lock_mode_name(w.mode)},
                                   {"deadline_ms", w.deadline_ms}, {"since_ms", w.since_ms}});
    }
    return Json{{"name", name},
                {"holders", holders},
                {"waiters", waiters},
                {"generation", lock ? lock->generation : 0},
                {"delay_until_ms", lock ? lock->delay_until_ms : 0}};
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

}  // namespace

// ---- Progress ----------------------------------------------------------------------------------

void Progress::publish(Revision revision)
{
    {
        std::lock_guard lock(mutex_);
        if (revision == revision_) return;
        revision_ = revision;
    }
    changed_.notify_all();
}

Revision Progress::wait(Revision at_least, SteadyTime until)
{
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, until, [&] { return revision_ >= at_least || stopped_.load(); });
    return revision_;
}

Revision Progress::revision() const
{
    std::lock_guard lock(mutex_);
    return revision_;
}

void Progress::stop()
{
    {
        std::lock_guard lock(mutex_);
        stopped_ = true;
    }
    changed_.notify_all();
}

// ---- ClientPool --------------------------------------------------------------------------------

ClientPool::ClientPool()
{
    uint64_t random = 0;
    while (getrandom(&random, sizeof random, 0) != sizeof random) {
    }
    // Top bits 01: never 0, never near the wrap, and unlike the small ids tools pick by hand.
    base_ = (random & 0x3fff'ffff'ffff'0000ULL) | 0x4000'0000'0000'0000ULL;
}

std::optional<ClientIdentity> ClientPool::take(SteadyTime until)
{
    std::unique_lock lock(mutex_);
    while (free_.empty() && next_.size() >= kMaxIds)
        if (returned_.wait_until(lock, until) == std::cv_status::timeout) return std::nullopt;
    ClientId id = 0;
    if (!free_.empty()) {
        id = free_.back();
        free_.pop_back();
    } else {
        id = base_ + next_.size() + 1;
    }
    const RequestNumber number = ++next_[id];
    return ClientIdentity{id, number};
}

std::optional<ClientIdentity> ClientPool::try_take() { return take(Clock::now()); }

void ClientPool::give_back(ClientId id)
{
    {
        std::lock_guard lock(mutex_);
        free_.push_back(id);
    }
    returned_.notify_one();
}

size_t ClientPool::size() const
{
    std::lock_guard lock(mutex_);
    return next_.size();
}

// ---- RequestCounters ---------------------------------------------------------------------------

void RequestCounters::count(const std::string& method, const std::string& endpoint, int status)
{
    std::lock_guard lock(mutex_);
    counts_[{method, endpoint, status}] += 1;
}

std::map<std::tuple<std::string, std::string, int>, uint64_t> RequestCounters::snapshot() const
{
    std::lock_guard lock(mutex_);
    return counts_;
}

// ---- LockService (loop thread) -----------------------------------------------------------------

LockService::LockService(EventLoop& loop, Node& node, LockMachine& machine, ClientPool& pool,
                         Progress& progress)
    : loop_(loop), node_(node), machine_(machine), pool_(pool), progress_(progress)
{
}

Result<Ok> LockService::start()
{
    auto lease_timer = make_timer(CLOCK_MONOTONIC);
    if (!lease_timer.ok()) return lease_timer.error();
    auto deadline_timer = make_timer(CLOCK_REALTIME);
    if (!deadline_timer.ok()) return deadline_timer.error();
    lease_timer_ = std::move(lease_timer.value());
    deadline_timer_ = std::move(deadline_timer.value());

    // Leases are checked every 100 ms: TTLs are whole seconds at least.
    itimerspec every{};
    every.it_interval.tv_nsec = 100'000'000;
    every.it_value = every.it_interval;
    if (::timerfd_settime(lease_timer_.get(), 0, &every, nullptr) != 0)
        return os_error("timerfd_settime");
    if (auto watched = loop_.watch(lease_timer_.get(), [this] { on_lease_timer(); });
        !watched.ok())
        return watched.error();
    if (auto watched = loop_.watch(deadline_timer_.get(), [this] { on_deadline_timer(); });
        !watched.ok())
        return watched.error();
    node_.on_executed([this](const Executed& executed) { on_executed(executed); });
    node_.on_snapshot_installed([this] {
        // The machine jumped ahead: waiters and watches look again, from its history.
        machine_.drain_events();
        progress_.publish(machine_.revision());
        arm_deadline_timer();
    });
    progress_.publish(machine_.revision());
    return Ok{};
}

std::optional<RequestNumber> LockService::stale_request(ClientId client,
                                                       RequestNumber number) const
{
    RequestNumber latest = 0;
    if (const auto it = executed_.find(client); it != executed_.end()) latest = it->second;
    if (const auto it = in_flight_.find(client); it != in_flight_.end())
        latest = std::max(latest, it->second);
    if (number < latest) return latest;
    return std::nullopt;
}

void LockService::proposing(ClientId client, RequestNumber number)
{
    RequestNumber& latest = in_flight_[client];
    latest = std::max(latest, number);
}

void LockService::proposed(ClientId client, RequestNumber number)
{
    if (const auto it = in_flight_.find(client); it != in_flight_.end() && it->second <= number)
        in_flight_.erase(it);
}

void LockService::on_executed(const Executed& executed)
{
    RequestNumber& latest = executed_[executed.entry.client_id];
    latest = std::max(latest, executed.entry.request_number);

    // Events pile up in the machine until drained; the history keeps what waits and watches read.
    const std::vector<WatchEvent> events = machine_.drain_events();
    if (leases_.active()) {
        const uint64_t now = wall_clock_ms();
        const auto& sessions = machine_.state().sessions;
        for (const WatchEvent& e : events) {
            switch (e.type) {
            case EventType::session_create:
                if (const auto it = sessions.find(e.session); it != sessions.end())
                    leases_.on_created(e.session, it->second.ttl_ms, it->second.lease_epoch, now);
                break;
            case EventType::session_keepalive:
                if (const auto it = sessions.find(e.session); it != sessions.end())
                    leases_.on_renewed(e.session, it->second.lease_epoch, now);
                break;
            case EventType::session_close:
            case EventType::session_expire:
                leases_.on_ended(e.session);
                break;
            default:
                break;
            }
        }
    }
    progress_.publish(machine_.revision());
    arm_deadline_timer();
}

void LockService::check_leadership()
{
    const Replica& replica = node_.replica();
    if (replica.is_leader()) {
        if (!leases_.active() || leader_view_ != replica.view()) {
            // DESIGN.md §4: a new leader grants every session a fresh lease before expiring any.
            leases_.become_leader(wall_clock_ms(), machine_.session_leases(),
                                  replica.config().leader_lease_ms);
            leader_view_ = replica.view();
            spdlog::info("r{} v{}: leader: {} sessions get a fresh lease", replica.replica(),
                         replica.view(), leases_.size());
            arm_deadline_timer();
        }
    } else if (leases_.active()) {
        leases_.step_down();
        leader_view_.reset();
    }
}

void LockService::on_lease_timer()
{
    drain_timer(lease_timer_.get());
    check_leadership();
    if (!leases_.active()) return;
    const Replica& replica = node_.replica();
    for (const ExpireSession& expiry : leases_.take_expired(wall_clock_ms())) {
        spdlog::info("r{} v{}: session {} lease ran out: proposing its expiry", replica.replica(),
                     replica.view(), expiry.session);
        const SessionId session = expiry.session;
        const bool proposed = propose_internal(expiry, [this, session](const ProposeOutcome&) {
            leases_.expiry_finished(session);
        });
        if (proposed) expiries_proposed_ += 1;
        else leases_.expiry_finished(session);  // no free id: next time
    }
    // A safety net for the deadline timer (a wait must never hang on a missed wakeup).
    maybe_expire_waiters();
}

void LockService::on_deadline_timer()
{
    drain_timer(deadline_timer_.get());
    armed_at_ms_ = 0;
    maybe_expire_waiters();
    arm_deadline_timer();
}

void LockService::maybe_expire_waiters()
{
    if (!node_.replica().is_leader() || expire_waiters_in_flight_) return;
    const std::optional<uint64_t> deadline = machine_.next_deadline_ms();
    const uint64_t now = wall_clock_ms();
    if (!deadline || *deadline > now) return;
    // The leader stamps entries with its clock as of its last tick: an ExpireWaiters proposed
    // right at the deadline may be stamped just before it. Do not propose again within a tick.
    if (now < last_expire_waiters_ms_ + node_.config().tick_ms) return;
    const bool proposed = propose_internal(ExpireWaiters{}, [this](const ProposeOutcome&) {
        expire_waiters_in_flight_ = false;
        arm_deadline_timer();
    });
    if (!proposed) return;
    expire_waiters_in_flight_ = true;
    last_expire_waiters_ms_ = now;
    expire_waiters_proposed_ += 1;
}

void LockService::arm_deadline_timer()
{
    uint64_t at = 0;
    if (node_.replica().is_leader()) {
        if (const std::optional<uint64_t> deadline = machine_.next_deadline_ms())
            at = std::max(*deadline, last_expire_waiters_ms_ + node_.config().tick_ms);
    }
    if (at == armed_at_ms_) return;
    armed_at_ms_ = at;
    itimerspec when{};  // all zero: disarmed
    if (at != 0) {
        when.it_value.tv_sec = static_cast<time_t>(at / 1000);
        when.it_value.tv_nsec = static_cast<long>(at % 1000) * 1'000'000L;
    }
    ::timerfd_settime(deadline_timer_.get(), at != 0 ? TFD_TIMER_ABSTIME : 0, &when, nullptr);
}

bool LockService::propose_internal(const LockOp& op,
                                   std::function<void(const ProposeOutcome&)> done)
{
    const std::optional<ClientIdentity> id = pool_.try_take();
    if (!id) return false;
    node_.propose(id->client_id, id->request_number, encode_op(op),
                  [this, client = id->client_id, done = std::move(done)](const ProposeOutcome& o) {
                      pool_.give_back(client);
                      done(o);
                  });
    return true;
}

LockService::KeepAliveAnswer LockService::keep_alive(SessionId session)
{
    check_leadership();
    KeepAliveAnswer answer;
    // docs/leases.md: a lease is extended only under a leader lease a quorum confirmed; a
    // leader cut off from its followers stops here and the client looks for the new one.
    answer.leader = node_.replica().holds_leader_lease(monotonic_clock_ms());
    if (!answer.leader) return answer;
    answer.known = machine_.state().sessions.contains(session);
    if (!answer.known) return answer;
    const std::optional<LeaseTracker::Renewal> renewal =
        leases_.keep_alive(session, wall_clock_ms());
    answer.known = renewal.has_value();
    if (renewal) answer.renewal = *renewal;
    return answer;
}

std::optional<uint64_t> LockService::lease_deadline_ms(SessionId session) const
{
    return leases_.deadline_ms(session);
}

// ---- HttpApi -----------------------------------------------------------------------------------

template <typename F>
auto HttpApi::on_loop(F work, std::chrono::milliseconds within) -> std::optional<decltype(work())>
{
    using R = decltype(work());
    auto promise = std::make_shared<std::promise<R>>();
    std::future<R> future = promise->get_future();
    loop_.post([promise, work = std::move(work)]() mutable { promise->set_value(work()); });
    if (future.wait_for(within) != std::future_status::ready) return std::nullopt;
    return future.get();
}

HttpApi::HttpApi(EventLoop& loop, Node& node, LockMachine* machine)
    : loop_(loop),
      node_(node),
      machine_(machine),
      max_message_bytes_(node.config().max_message_bytes),
      server_(std::make_unique<httplib::Server>())
{
    if (machine_) service_ = std::make_unique<LockService>(loop, node, *machine_, pool_, progress_);
    // Lock waits and watches hold a thread each for as long as they last.
    server_->new_task_queue = [] { return new httplib::ThreadPool(256); };
    // Headers and body go out in separate writes: without this, Nagle holds the body back until
    // the client acknowledges the headers, which a delayed ACK makes 40 ms on a kept connection.
    server_->set_tcp_nodelay(true);
    server_->set_payload_max_length(1 << 20);
    server_->set_keep_alive_max_count(1000);
    server_->set_read_timeout(30, 0);
    server_->set_write_timeout(10, 0);
    install_routes();
}

HttpApi::~HttpApi() { stop(); }

Result<Ok> HttpApi::start(const std::string& ip, uint16_t port)
{
    if (service_)
        if (auto started = service_->start(); !started.ok()) return started.error();
    if (!server_->bind_to_port(ip.c_str(), port))
        return Error{0, "bind HTTP " + ip + ":" + std::to_string(port) +
                            ": address in use or not available"};
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    return Ok{};
}

void HttpApi::stop()
{
    progress_.stop();  // waits and watches end now
    if (thread_.joinable()) {
        server_->stop();
        thread_.join();
    }
}

void HttpApi::route(const char* method, const char* pattern, std::string endpoint,
                    std::function<void(const Request&, Response&)> handler, bool needs_machine)
{
    auto wrapped = [this, method, endpoint, handler = std::move(handler),
                    needs_machine](const Request& req, Response& res) {
        if (needs_machine && !machine_) {
            send_error(res, ApiError{501, "not_lock_service",
                                     "this cell replicates the register machine, not the lock "
                                     "service (config \"machine\")",
                                     Json::object()});
        } else {
            handler(req, res);
        }
        counters_.count(method, endpoint, res.status);
    };
    const std::string m = method;
    routes_.push_back(Route{m, std::regex(pattern), wrapped});
    if (m == "GET") server_->Get(pattern, wrapped);
    else if (m == "POST") server_->Post(pattern, wrapped);
    else if (m == "PUT") server_->Put(pattern, wrapped);
    else if (m == "DELETE") server_->Delete(pattern, wrapped);
}

void HttpApi::snapshot_chunk(const Request& req, Response& res)
{
    // State transfer by snapshot (shell/snapshot_transfer.h): one chunk of the snapshot this
    // replica serves, from byte `offset`; `op`, when given, must still be the one served.
    auto offset = u64_param(req, "offset");
    if (!offset.ok()) return send_error(res, offset.error());
    auto op = u64_param(req, "op");
    if (!op.ok()) return send_error(res, op.error());
    const auto served = node_.served_snapshot();  // immutable once served: no loop needed
    if (!served)
        return send_error(res, ApiError{404, "no_snapshot",
                                        "this replica has no snapshot to serve yet",
                                        Json::object()});
    if (op.value() && *op.value() != served->op)
        return send_error(res, ApiError{409, "snapshot_replaced",
                                        "the snapshot asked for was replaced by a newer one; "
                                        "start again from offset 0",
                                        Json{{"op", served->op}}});
    const uint64_t from = offset.value().value_or(0);
    if (from > served->bytes.size())
        return send_error(res, ApiError{400, "invalid_argument",
                                        "offset: must be at most the snapshot's size, " +
                                            std::to_string(served->bytes.size()),
                                        Json{{"field", "offset"}}});
    respond_with_snapshot_chunk(*served, from, res);
}

void HttpApi::install_routes()
{
    using namespace std::placeholders;
    // Names and keys may contain '/' and ':' (the patterns are greedy and anchored), and any other
    // character: [\s\S], not '.', which does not match '\r' or '\n' (those names are then 400).
    route("POST", "/v1/sessions", "/v1/sessions",
          [this](auto& q, auto& s) { create_session(q, s); }, true);
    route("POST", R"(/v1/sessions/([^/]+):keepalive)", "/v1/sessions/{id}:keepalive",
          [this](auto& q, auto& s) { keep_alive(q, s); }, true);
    route("DELETE", R"(/v1/sessions/([^/]+))", "/v1/sessions/{id}",
          [this](auto& q, auto& s) { close_session(q, s); }, true);
    route("GET", "/v1/sessions", "/v1/sessions",
          [this](auto& q, auto& s) { get_sessions(q, s, false); }, true);
    route("GET", R"(/v1/sessions/([^/]+))", "/v1/sessions/{id}",
          [this](auto& q, auto& s) { get_sessions(q, s, true); }, true);

    route("POST", R"(/v1/locks/([\s\S]+):acquire)", "/v1/locks/{name}:acquire",
          [this](auto& q, auto& s) { acquire(q, s); }, true);
    route("POST", R"(/v1/locks/([\s\S]+):release)", "/v1/locks/{name}:release",
          [this](auto& q, auto& s) { release(q, s); }, true);
    route("GET", "/v1/locks", "/v1/locks", [this](auto& q, auto& s) { get_locks(q, s, false); },
          true);
    route("GET", R"(/v1/locks/([\s\S]+))", "/v1/locks/{name}",
          [this](auto& q, auto& s) { get_locks(q, s, true); }, true);
    route("POST", "/v1/sequencers:check", "/v1/sequencers:check",
          [this](auto& q, auto& s) { check_sequencer(q, s); }, true);

    route("GET", R"(/v1/kv/([\s\S]*))", "/v1/kv/{key}",
          [this](auto& q, auto& s) { get_kv(q, s); }, true);
    route("PUT", R"(/v1/kv/([\s\S]+))", "/v1/kv/{key}",
          [this](auto& q, auto& s) { put_kv(q, s); }, true);
    route("DELETE", R"(/v1/kv/([\s\S]*))", "/v1/kv/{key}",
          [this](auto& q, auto& s) { delete_kv(q, s); }, true);
    route("GET", R"(/v1/watch/([\s\S]*))", "/v1/watch/{key}",
          [this](auto& q, auto& s) { watch(q, s); }, true);

    route("POST", R"(/v1/barriers/([\s\S]+):enter)", "/v1/barriers/{name}:enter",
          [this](auto& q, auto& s) { barrier(q, s, true); }, true);
    route("POST", R"(/v1/barriers/([\s\S]+):leave)", "/v1/barriers/{name}:leave",
          [this](auto& q, auto& s) { barrier(q, s, false); }, true);
    route("GET", "/v1/barriers", "/v1/barriers",
          [this](auto& q, auto& s) { get_barriers(q, s, false); }, true);
    route("GET", R"(/v1/barriers/([\s\S]+))", "/v1/barriers/{name}",
          [this](auto& q, auto& s) { get_barriers(q, s, true); }, true);

    route("GET", "/v1/status", "/v1/status", [this](const Request& req, Response& res) {
        auto digest = bool_param(req, "digest");
        if (!digest.ok()) return send_error(res, digest.error());
        auto status = on_loop([this, with_digest = digest.value()] {
            return node_.status(with_digest);
        });
        if (!status) return send_error(res, unavailable("the replica's event loop did not "
                                                        "answer within 2 s"));
        send_json(res, 200, *status);
    }, false);
    route("GET", "/v1/cluster", "/v1/cluster", [this](auto& q, auto& s) { cluster(q, s); },
          false);
    route("GET", "/v1/cluster/replicas", "/v1/cluster/replicas",
          [this](const Request&, Response& res) {
              const DaemonConfig& config = node_.config();
              send_json(res, 200, replica_statuses(config.replicas, config.replica, [this] {
                  return on_loop([this] { return node_.status(); }, kPeerStatusDeadline);
              }));
          }, false);
    // The web UI's embedded files (api/ui_assets.h); "/" leads there.
    route("GET", R"(/|/ui(/[\s\S]*)?)", "/ui", [](const Request& req, Response& res) {
        const UiResponse ui = ui_response(req.path == "/" ? "/ui" : req.path,
                                          req.get_header_value("If-None-Match"));
        res.status = ui.status;
        for (const auto& [name, value] : ui.headers) res.set_header(name, value);
        res.set_content(std::string(ui.body), ui.content_type);
    }, false);
    route("GET", kSnapshotPath, kSnapshotPath, [this](auto& q, auto& s) { snapshot_chunk(q, s); },
          false);
    route("GET", "/v1/openapi.json", "/v1/openapi.json", [](const Request&, Response& res) {
        res.set_content(openapi_json(), kJsonType);
    }, false);
    route("GET", "/metrics", "/metrics", [this](auto& q, auto& s) { metrics(q, s); }, false);
    route("GET", "/healthz", "/healthz", [](const Request&, Response& res) {
        send_json(res, 200, Json{{"ok", true}});
    }, false);
    route("GET", "/readyz", "/readyz", [this](auto& q, auto& s) { readyz(q, s); }, false);

    server_->set_pre_routing_handler([this](const Request& req, Response& res) {
        return dispatch_without_body(req, res) ? httplib::Server::HandlerResponse::Handled
                                               : httplib::Server::HandlerResponse::Unhandled;
    });
    server_->set_error_handler([](const Request& req, Response& res) {
        if (!res.body.empty()) return;  // our own error, already JSON
        if (res.status == 404) return send_error(res, not_found_route(req.method, req.path));
        if (res.status == 413)
            return send_error(res, ApiError{413, "too_large", "the request body is over 1 MiB",
                                            Json{{"limit_bytes", 1 << 20}}});
        send_error(res, ApiError{res.status, "bad_request", "the HTTP request was not accepted",
                                 Json::object()});
    });
    server_->set_exception_handler(
        [](const Request& req, Response& res, std::exception_ptr error) {
            std::string what = "unknown";
            try {
                if (error) std::rethrow_exception(error);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            spdlog::error("http {} {}: {}", req.method, req.path, what);
            send_error(res, ApiError{500, "internal", "internal error: " + what, Json::object()});
        });
}

bool HttpApi::dispatch_without_body(const Request& req, Response& res)
{
    if (req.method != "POST" && req.method != "PUT") return false;
    if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding")) return false;
    for (const Route& route : routes_) {
        if (route.method != req.method) continue;
        Request copy = req;
        if (!std::regex_match(copy.path, copy.matches, route.pattern)) continue;
        route.handler(copy, res);
        return true;
    }
    send_error(res, not_found_route(req.method, req.path));
    return true;
}

// ---- The leader plumbing -----------------------------------------------------------------------

void HttpApi::at_leader(const Request& req, Response& res, uint32_t wait_ms, const Serve& serve)
{
    auto given = parse_identity(header(req, "X-Voltlock-Client-Id"),
                                header(req, "X-Voltlock-Request-Number"));
    if (!given.ok()) return send_error(res, given.error());
    SteadyTime until = Clock::now() + milliseconds(kLeaderWaitMs);
    ClientIdentity identity;
    ClientId pooled = 0;
    if (given.value()) {
        identity = *given.value();
    } else {
        const std::optional<ClientIdentity> taken = pool_.take(until);
        if (!taken) return send_error(res, unavailable("too many requests in flight here"));
        identity = *taken;
        pooled = identity.client_id;
    }
    struct GiveBack {
        ClientPool& pool;
        ClientId id;
        ~GiveBack()
        {
            if (id != 0) pool.give_back(id);
        }
    } give_back{pool_, pooled};

    const bool forwarded = req.has_header("X-Voltlock-Forwarded");
    struct Role {
        bool leader = false;
        bool normal = false;
        ReplicaIndex leader_index = 0;
    };
    while (true) {
        const auto role = on_loop([this] {
            const Replica& r = node_.replica();
            return Role{r.is_leader(), r.status() == Status::normal, r.leader()};
        });
        if (!role) return send_error(res, unavailable("the replica's event loop did not answer"));
        const SteadyTime attempt = Clock::now();
        if (role->leader) {
            if (serve(AtLeader{identity, until}, res)) return;
        } else if (forwarded) {
            // The forwarder picks the leader again; a forwarded request never travels twice.
            res.set_header("X-Voltlock-Not-Leader", "1");
            ApiError error = unavailable("this replica is not the leader");
            error.code = "not_leader";
            if (role->normal) error.details = Json{{"leader", role->leader_index}};
            return send_error(res, error);
        } else if (role->normal && role->leader_index != node_.config().replica) {
            if (forward(req, res, role->leader_index, identity, wait_ms)) return;
        }
        // An attempt that lasted (a wait held at a leader that then died) starts a new outage:
        // the bound is on how long no leader answers, not on how long the request has run.
        if (Clock::now() - attempt > milliseconds(1000))
            until = std::max(until, Clock::now() + milliseconds(kLeaderWaitMs));
        if (progress_.stopped() || Clock::now() >= until)
            return send_error(
                res, unavailable("no leader with a quorum answered within " +
                                 std::to_string(kLeaderWaitMs / 1000) +
                                 " s (a view change, or too few replicas up). The request may "
                                 "still take effect: retry it with the same "
                                 "X-Voltlock-Client-Id and X-Voltlock-Request-Number"));
        std::this_thread::sleep_for(milliseconds(50));
    }
}

bool HttpApi::forward(const Request& req, Response& res, ReplicaIndex leader,
                      const ClientIdentity& identity, uint32_t wait_ms)
{
    const PeerAddress& peer = node_.config().replicas.at(leader);
    httplib::Client client(peer.ip, peer.http_port);
    client.set_url_encode(false);  // the target is passed on as it came, still encoded
    client.set_keep_alive(false);
    client.set_tcp_nodelay(true);
    client.set_connection_timeout(1, 0);
    const uint64_t read_ms = uint64_t(kLeaderWaitMs) + wait_ms + kWaitGraceMs + 2'000;
    client.set_read_timeout(static_cast<time_t>(read_ms / 1000),
                            static_cast<time_t>(read_ms % 1000) * 1000);
    client.set_write_timeout(5, 0);

    httplib::Request out;
    out.method = req.method;
    out.path = req.target.empty() ? req.path : req.target;
    out.body = req.body;
    out.set_header("Content-Type", req.has_header("Content-Type")
                                       ? req.get_header_value("Content-Type")
                                       : kJsonType);
    out.set_header("X-Voltlock-Client-Id", std::to_string(identity.client_id));
    out.set_header("X-Voltlock-Request-Number", std::to_string(identity.request_number));
    out.set_header("X-Voltlock-Forwarded", std::to_string(node_.config().replica));
    httplib::Result answer = client.send(out);
    if (!answer) {
        spdlog::debug("r{}: forwarding {} {} to r{}: {}", node_.config().replica, req.method,
                      req.path, leader, httplib::to_string(answer.error()));
        return false;  // the leader may be gone: look again
    }
    if (answer->has_header("X-Voltlock-Not-Leader")) return false;
    res.status = answer->status;
    res.body = answer->body;
    for (const char* name : {"Content-Type", "Retry-After"})
        if (answer->has_header(name)) res.set_header(name, answer->get_header_value(name));
    res.set_header("X-Voltlock-Leader", std::to_string(leader));
    forwarded_ += 1;
    return true;
}

HttpApi::Proposed HttpApi::propose(const ClientIdentity& identity, Bytes payload, SteadyTime until,
                                   std::function<Json()> snapshot)
{
    auto promise = std::make_shared<std::promise<Proposed>>();
    std::future<Proposed> future = promise->get_future();
    LockService* service = service_.get();
    loop_.post([this, service, identity, payload = std::move(payload),
                snapshot = std::move(snapshot), promise]() mutable {
        if (service) {
            if (const auto latest = service->stale_request(identity.client_id,
                                                           identity.request_number)) {
                promise->set_value(Proposed{.kind = Proposed::Kind::stale, .latest = *latest});
                return;
            }
            service->proposing(identity.client_id, identity.request_number);
        }
        node_.propose(identity.client_id, identity.request_number, std::move(payload),
                      [promise, snapshot, service, identity](const ProposeOutcome& outcome) {
                          if (service)
                              service->proposed(identity.client_id, identity.request_number);
                          Proposed proposed;
                          if (!outcome.committed) {
                              proposed.kind = Proposed::Kind::not_leader;
                          } else {
                              proposed.kind = Proposed::Kind::committed;
                              proposed.result = outcome.result;
                              if (snapshot) proposed.snapshot = snapshot();
                          }
                          try {
                              promise->set_value(std::move(proposed));
                          } catch (const std::future_error&) {
                              // `done` runs once; this only guards against a second call.
                          }
                      });
    });
    while (future.wait_for(milliseconds(100)) != std::future_status::ready)
        if (progress_.stopped() || Clock::now() >= until) return Proposed{};
    return future.get();
}

void HttpApi::run_op(const Request& req, Response& res, const LockOp& op, uint32_t wait_ms,
                     const Answer& answer)
{
    const Bytes payload = encode_op(op);
    const OpCode code = op_code(op);
    at_leader(req, res, wait_ms, [&](const AtLeader& at, Response& out) {
        const Proposed proposed = propose(at.identity, payload, at.until);
        if (proposed.kind == Proposed::Kind::not_leader) return false;
        if (proposed.kind == Proposed::Kind::stale) {
            send_error(out, stale_request_error(at.identity, proposed.latest));
            return true;
        }
        if (proposed.kind == Proposed::Kind::timed_out) {
            send_error(out, unavailable("the op was not committed in time: no quorum answered. "
                                        "It may still take effect: retry with the same "
                                        "X-Voltlock-Client-Id and X-Voltlock-Request-Number"));
            return true;
        }
        auto decoded = decode_result(proposed.result);
        if (!decoded.ok()) {
            send_error(out, ApiError{500, "internal", "the result did not decode",
                                     Json::object()});
            return true;
        }
        const OpResult& result = decoded.value();
        if (result_op_code(result) != code) {
            // VR answered with the client table's result for this request number, and it was
            // another op: the client reused a request number.
            send_error(out, ApiError{409, "request_number_reused",
                                     "this X-Voltlock-Request-Number was already used by this "
                                     "client id for another request; use a higher one",
                                     Json{{"request_number", at.identity.request_number}}});
            return true;
        }
        if (const auto* error = std::get_if<OpError>(&result)) {
            send_error(out, op_error(*error));
            return true;
        }
        answer(result, out);
        return true;
    });
}

void HttpApi::read_at_leader(const Request& req, Response& res, std::function<Json()> snapshot)
{
    const Bytes payload = encode_op(ExpireWaiters{});
    at_leader(req, res, 0, [&](const AtLeader& at, Response& out) {
        const Proposed proposed = propose(at.identity, payload, at.until, snapshot);
        if (proposed.kind == Proposed::Kind::not_leader) return false;
        if (proposed.kind == Proposed::Kind::stale) {
            send_error(out, stale_request_error(at.identity, proposed.latest));
            return true;
        }
        if (proposed.kind == Proposed::Kind::timed_out) {
            send_error(out, unavailable("the read could not be confirmed by a quorum in time"));
            return true;
        }
        send_snapshot(out, proposed.snapshot);
        return true;
    });
}

void HttpApi::read_state(const Request& req, Response& res, bool stale,
                         std::function<Json()> snapshot)
{
    if (!stale) return read_at_leader(req, res, snapshot);
    auto local = on_loop([this, snapshot] {
        Json body = snapshot();
        body["stale"] = staleness_json();
        return body;
    });
    if (!local) return send_error(res, unavailable("the replica's event loop did not answer"));
    send_snapshot(res, *local);
}

void HttpApi::send_snapshot(Response& res, const Json& snapshot)
{
    // A snapshot that found nothing says so as {"status", "code", "message", "details"}.
    if (snapshot.contains("code"))
        return send_error(res, ApiError{snapshot.value("status", 404), snapshot["code"],
                                        snapshot["message"],
                                        snapshot.value("details", Json::object())});
    send_json(res, 200, snapshot);
}

std::variant<Json, ApiError> HttpApi::await_outcome(WaitKind kind, const std::string& name,
                                                    SessionId session, Revision after,
                                                    uint64_t deadline_ms)
{
    waiters_ += 1;
    struct Count {
        std::atomic<uint64_t>& n;
        ~Count() { n -= 1; }
    } count{waiters_};
    const int64_t remaining_ms = int64_t(deadline_ms) - int64_t(wall_clock_ms());
    const SteadyTime until =
        Clock::now() + milliseconds(std::max<int64_t>(remaining_ms, 0) + kWaitGraceMs);
    const WatchFilter filter{.key = name, .prefix = false,
                             .spaces = static_cast<uint8_t>(kind == WaitKind::lock
                                                                ? EventSpace::lock
                                                                : EventSpace::barrier)};
    Revision next = after + 1;
    LockMachine* machine = machine_;
    while (true) {
        const auto batch = on_loop([machine, next, filter] {
            return machine->watch(next, filter, 0);
        });
        if (!batch) return unavailable("the replica's event loop did not answer");
        // Fell out of the history (a very busy cell): the same request again finds out.
        if (batch->compacted) return wait_unknown(kind);
        for (const WatchEvent& e : batch->events)
            if (auto outcome = wait_outcome(kind, session, e)) return *outcome;
        next = batch->next_revision;
        if (progress_.stopped() || Clock::now() >= until) return wait_unknown(kind);
        progress_.wait(next, std::min(until, Clock::now() + milliseconds(1000)));
    }
}

// ---- Sessions ----------------------------------------------------------------------------------

void HttpApi::create_session(const Request& req, Response& res)
{
    auto op = create_session_op(req.body, max_message_bytes_);
    if (!op.ok()) return send_error(res, op.error());
    const CreateSession create = std::get<CreateSession>(op.value());
    run_op(req, res, op.value(), 0, [&](const OpResult& result, Response& out) {
        Json body = result_json(result, ValueEncoding::automatic);
        body["ttl_ms"] = create.ttl_ms;
        body["lock_delay_ms"] = create.lock_delay_ms;
        body["name"] = create.name;
        send_json(out, 201, body);
    });
}

void HttpApi::keep_alive(const Request& req, Response& res)
{
    auto session = parse_session_id(match(req, 1));
    if (!session.ok()) return send_error(res, session.error());
    const SessionId id = session.value();
    LockService* service = service_.get();
    at_leader(req, res, 0, [&](const AtLeader& at, Response& out) {
        const auto answer = on_loop([service, id] { return service->keep_alive(id); });
        if (!answer) {
            send_error(out, unavailable("the replica's event loop did not answer"));
            return true;
        }
        if (!answer->leader) return false;
        if (!answer->known) {
            send_error(out, op_error(OpError{.op = OpCode::keep_alive,
                                             .code = ErrorCode::unknown_session}));
            return true;
        }
        const LeaseTracker::Renewal& renewal = answer->renewal;
        Json body{{"session", id}, {"ttl_ms", renewal.ttl_ms},
                  {"lease_deadline_ms", renewal.deadline_ms},
                  {"lease_epoch", renewal.lease_epoch}, {"replicated", false}};
        if (!renewal.replicate) {
            send_json(out, 200, body);
            return true;
        }
        const Proposed proposed = propose(at.identity, encode_op(KeepAlive{.session = id}),
                                          at.until);
        if (proposed.kind == Proposed::Kind::not_leader) return false;
        if (proposed.kind == Proposed::Kind::stale) {
            send_error(out, stale_request_error(at.identity, proposed.latest));
            return true;
        }
        if (proposed.kind == Proposed::Kind::timed_out) {
            send_error(out, unavailable("the keepalive was not committed in time"));
            return true;
        }
        auto decoded = decode_result(proposed.result);
        if (!decoded.ok()) {
            send_error(out, ApiError{500, "internal", "the result did not decode",
                                     Json::object()});
            return true;
        }
        if (const auto* error = std::get_if<OpError>(&decoded.value())) {
            send_error(out, op_error(*error));
            return true;
        }
        if (const auto* renewed = std::get_if<KeepAliveResult>(&decoded.value())) {
            body["lease_epoch"] = renewed->lease_epoch;
            body["revision"] = renewed->revision;
        }
        body["replicated"] = true;
        send_json(out, 200, body);
        return true;
    });
}

void HttpApi::close_session(const Request& req, Response& res)
{
    auto session = parse_session_id(match(req, 1));
    if (!session.ok()) return send_error(res, session.error());
    run_op(req, res, CloseSession{.session = session.value()}, 0,
           [](const OpResult& result, Response& out) {
               send_json(out, 200, result_json(result, ValueEncoding::automatic));
           });
}

void HttpApi::get_sessions(const Request& req, Response& res, bool one)
{
    SessionId id = 0;
    if (one) {
        auto session = parse_session_id(match(req, 1));
        if (!session.ok()) return send_error(res, session.error());
        id = session.value();
    }
    auto stale = bool_param(req, "stale");
    if (!stale.ok()) return send_error(res, stale.error());
    LockMachine* machine = machine_;
    LockService* service = service_.get();
    auto snapshot = [machine, service, id, one] {
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
    };
    read_state(req, res, stale.value(), snapshot);
}

// ---- Locks -------------------------------------------------------------------------------------

void HttpApi::acquire(const Request& req, Response& res)
{
    auto op = acquire_op(match(req, 1), req.body, max_message_bytes_);
    if (!op.ok()) return send_error(res, op.error());
    const Acquire acquire = std::get<Acquire>(op.value());
    run_op(req, res, op.value(), acquire.wait_ms, [&](const OpResult& result, Response& out) {
        const auto& r = std::get<AcquireResult>(result);
        if (r.status == AcquireStatus::granted)
            return send_json(out, 200, result_json(result, ValueEncoding::automatic));
        auto outcome = await_outcome(WaitKind::lock, acquire.lock, acquire.session, r.revision,
                                     r.deadline_ms);
        if (auto* error = std::get_if<ApiError>(&outcome)) return send_error(out, *error);
        send_json(out, 200, std::get<Json>(outcome));
    });
}

void HttpApi::release(const Request& req, Response& res)
{
    auto op = release_op(match(req, 1), req.body, max_message_bytes_);
    if (!op.ok()) return send_error(res, op.error());
    run_op(req, res, op.value(), 0, [](const OpResult& result, Response& out) {
        send_json(out, 200, result_json(result, ValueEncoding::automatic));
    });
}

void HttpApi::get_locks(const Request& req, Response& res, bool one)
{
    const std::string name = one ? match(req, 1) : std::string();
    if (one)
        if (auto bad = check_name("lock", name, false)) return send_error(res, *bad);
    auto stale = bool_param(req, "stale");
    if (!stale.ok()) return send_error(res, stale.error());
    LockMachine* machine = machine_;
    auto snapshot = [machine, name, one] {
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
    };
    read_state(req, res, stale.value(), snapshot);
}

void HttpApi::check_sequencer(const Request& req, Response& res)
{
    auto op = check_sequencer_op(req.body, max_message_bytes_);
    if (!op.ok()) return send_error(res, op.error());
    run_op(req, res, op.value(), 0, [](const OpResult& result, Response& out) {
        send_json(out, 200, result_json(result, ValueEncoding::automatic));
    });
}

// ---- Key/value ---------------------------------------------------------------------------------

namespace {

// A Get result as the HTTP answer: a listing with prefix, else the one key or 404.
void answer_get(httplib::Response& res, const GetResult& r, bool prefix, ValueEncoding encoding,
                Json extra)
{
    Json body;
    if (prefix) {
        body = result_json(r, encoding);
        if (r.more && !r.kvs.empty()) body["next_after"] = r.kvs.back().key;
    } else if (r.kvs.empty()) {
        return send_error(res, ApiError{404, "key_not_found", "no such key",
                                        Json{{"revision", r.revision}}});
    } else {
        body = key_value_json(r.kvs.front(), encoding);
        body["revision"] = r.revision;
    }
    if (!extra.is_null()) body.update(extra);
    send_json(res, 200, body);
}

}  // namespace

void HttpApi::get_kv(const Request& req, Response& res)
{
    const std::string key = match(req, 1);
    auto prefix = bool_param(req, "prefix");
    if (!prefix.ok()) return send_error(res, prefix.error());
    auto stale = bool_param(req, "stale");
    if (!stale.ok()) return send_error(res, stale.error());
    auto limit = u64_param(req, "limit");
    if (!limit.ok()) return send_error(res, limit.error());
    auto encoding = encoding_param(req);
    if (!encoding.ok()) return send_error(res, encoding.error());
    const std::string after = req.has_param("after") ? req.get_param_value("after") : "";
    if (!prefix.value() && (!after.empty() || limit.value()))
        return send_error(res, ApiError{400, "invalid_argument",
                                        "after and limit apply only with prefix=true",
                                        Json{{"field", after.empty() ? "limit" : "after"}}});
    if (auto bad = check_name("key", key, prefix.value())) return send_error(res, *bad);
    const uint32_t page = static_cast<uint32_t>(
        std::min<uint64_t>(limit.value().value_or(0), std::numeric_limits<uint32_t>::max()));
    auto op = get_op(key, prefix.value(), after, page, max_message_bytes_);
    if (!op.ok()) return send_error(res, op.error());
    const bool is_prefix = prefix.value();
    const ValueEncoding enc = encoding.value();
    if (!stale.value()) {
        return run_op(req, res, op.value(), 0, [&](const OpResult& result, Response& out) {
            answer_get(out, std::get<GetResult>(result), is_prefix, enc, Json());
        });
    }
    // A stale read: this replica's state as of its last apply, and how far behind it may be.
    const Get get = std::get<Get>(op.value());
    LockMachine* machine = machine_;
    auto local = on_loop([this, machine, get] {
        return std::make_pair(machine->get(get), staleness_json());
    });
    if (!local) return send_error(res, unavailable("the replica's event loop did not answer"));
    if (const auto* error = std::get_if<OpError>(&local->first))
        return send_error(res, op_error(*error));
    answer_get(res, std::get<GetResult>(local->first), is_prefix, enc,
               Json{{"stale", local->second}});
}

void HttpApi::put_kv(const Request& req, Response& res)
{
    auto op = put_op(match(req, 1), req.body, max_message_bytes_);
    if (!op.ok()) return send_error(res, op.error());
    run_op(req, res, op.value(), 0, [](const OpResult& result, Response& out) {
        send_json(out, 200, result_json(result, ValueEncoding::automatic));
    });
}

void HttpApi::delete_kv(const Request& req, Response& res)
{
    const std::string key = match(req, 1);
    auto prefix = bool_param(req, "prefix");
    if (!prefix.ok()) return send_error(res, prefix.error());
    auto prev = u64_param(req, "prev_revision");
    if (!prev.ok()) return send_error(res, prev.error());
    if (auto bad = check_name("key", key, prefix.value())) return send_error(res, *bad);
    auto op = delete_op(key, prefix.value(), prev.value(), req.body, max_message_bytes_);
    if (!op.ok()) return send_error(res, op.error());
    run_op(req, res, op.value(), 0, [](const OpResult& result, Response& out) {
        send_json(out, 200, result_json(result, ValueEncoding::automatic));
    });
}

// ---- Watches -----------------------------------------------------------------------------------

namespace {

Parsed<uint8_t> spaces_param(const httplib::Request& req)
{
    if (!req.has_param("spaces")) return static_cast<uint8_t>(EventSpace::kv);
    const std::string text = req.get_param_value("spaces");
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

struct WatchStream {
    WatchFilter filter;
    ValueEncoding encoding = ValueEncoding::automatic;
    Revision next = 0;
    std::optional<WatchBatch> pending;  // the first batch, read before answering
    bool started = false;
    SteadyTime last_write;
};

std::string sse_events(const WatchBatch& batch, ValueEncoding encoding)
{
    std::string out;
    for (size_t i = 0; i < batch.events.size(); i++) {
        const WatchEvent& e = batch.events[i];
        // The id marks a revision as complete: a client resumes from the last id + 1.
        const bool last_of_revision =
            i + 1 == batch.events.size() || batch.events[i + 1].revision != e.revision;
        if (last_of_revision) out += "id: " + std::to_string(e.revision) + "\n";
        out += std::string("event: ") + event_type_name(e.type) + "\n";
        out += "data: " + event_json(e, encoding).dump() + "\n\n";
    }
    return out;
}

}  // namespace

void HttpApi::watch(const Request& req, Response& res)
{
    const std::string key = match(req, 1);
    auto prefix = bool_param(req, "prefix");
    if (!prefix.ok()) return send_error(res, prefix.error());
    auto start = u64_param(req, "start_revision");
    if (!start.ok()) return send_error(res, start.error());
    auto spaces = spaces_param(req);
    if (!spaces.ok()) return send_error(res, spaces.error());
    auto encoding = encoding_param(req);
    if (!encoding.ok()) return send_error(res, encoding.error());
    if (auto bad = check_name("key", key, prefix.value())) return send_error(res, *bad);
    std::optional<Revision> from = start.value();
    if (!from && req.has_header("Last-Event-ID")) {
        auto last = parse_u64_param("Last-Event-ID", req.get_header_value("Last-Event-ID"));
        if (!last.ok()) return send_error(res, last.error());
        from = last.value() + 1;
    }

    auto stream = std::make_shared<WatchStream>();
    stream->filter = WatchFilter{.key = key, .prefix = prefix.value(), .spaces = spaces.value()};
    stream->encoding = encoding.value();
    LockMachine* machine = machine_;
    const WatchFilter filter = stream->filter;
    auto first = on_loop([machine, from, filter] {
        // Without a start revision the watch sees what happens from now on.
        const Revision begin = from ? std::max<Revision>(*from, 1) : machine->revision() + 1;
        return std::make_pair(begin, machine->watch(begin, filter, 256));
    });
    if (!first) return send_error(res, unavailable("the replica's event loop did not answer"));
    if (first->second.compacted)
        return send_error(res, compacted(first->second.oldest_revision, first->first));
    stream->next = first->first;
    stream->pending = std::move(first->second);

    watchers_ += 1;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Voltlock-Start-Revision", std::to_string(stream->next));
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, stream, machine](size_t, httplib::DataSink& sink) {
            auto write = [&](const std::string& text) {
                stream->last_write = Clock::now();
                return sink.write(text.data(), text.size());
            };
            if (!stream->started) {
                stream->started = true;
                return write("retry: 1000\n: watching from revision " +
                             std::to_string(stream->next) + "\n\n");
            }
            std::optional<WatchBatch> batch;
            if (stream->pending) {
                batch = std::move(stream->pending);
                stream->pending.reset();
            } else {
                progress_.wait(stream->next, Clock::now() + milliseconds(5000));
                if (progress_.stopped()) {
                    sink.done();
                    return true;
                }
                const Revision next = stream->next;
                const WatchFilter wanted = stream->filter;
                batch = on_loop([machine, next, wanted] {
                    return machine->watch(next, wanted, 256);
                }).value_or(WatchBatch{.next_revision = next});
            }
            if (batch->compacted) {
                // Fell behind the history while streaming: say so, and end the stream.
                Json error = error_body(compacted(batch->oldest_revision, stream->next));
                write("event: error\ndata: " + error.dump() + "\n\n");
                sink.done();
                return true;
            }
            if (!batch->events.empty()) {
                stream->next = batch->next_revision;
                return write(sse_events(*batch, stream->encoding));
            }
            stream->next = std::max(stream->next, batch->next_revision);
            if (Clock::now() - stream->last_write > milliseconds(10000))
                return write(": heartbeat\n\n");  // also finds out that a client has gone
            return sink.is_writable();
        },
        [this](bool) { watchers_ -= 1; });
}

// ---- Barriers ----------------------------------------------------------------------------------

void HttpApi::barrier(const Request& req, Response& res, bool enter)
{
    const std::string name = match(req, 1);
    auto op = enter ? barrier_enter_op(name, req.body, max_message_bytes_)
                    : barrier_leave_op(name, req.body, max_message_bytes_);
    if (!op.ok()) return send_error(res, op.error());
    const SessionId session = enter ? std::get<BarrierEnter>(op.value()).session
                                    : std::get<BarrierLeave>(op.value()).session;
    const uint32_t wait_ms = enter ? std::get<BarrierEnter>(op.value()).wait_ms
                                   : std::get<BarrierLeave>(op.value()).wait_ms;
    run_op(req, res, op.value(), wait_ms, [&](const OpResult& result, Response& out) {
        BarrierStatus status = BarrierStatus::passed;
        Revision revision = 0;
        uint64_t deadline = 0;
        if (const auto* r = std::get_if<BarrierEnterResult>(&result))
            status = r->status, revision = r->revision, deadline = r->deadline_ms;
        if (const auto* r = std::get_if<BarrierLeaveResult>(&result))
            status = r->status, revision = r->revision, deadline = r->deadline_ms;
        if (status == BarrierStatus::passed)
            return send_json(out, 200, Json{{"passed", true}, {"revision", revision}});
        auto outcome = await_outcome(enter ? WaitKind::barrier_enter : WaitKind::barrier_leave,
                                     name, session, revision, deadline);
        if (auto* error = std::get_if<ApiError>(&outcome)) return send_error(out, *error);
        send_json(out, 200, std::get<Json>(outcome));
    });
}

void HttpApi::get_barriers(const Request& req, Response& res, bool one)
{
    const std::string name = one ? match(req, 1) : std::string();
    if (one)
        if (auto bad = check_name("barrier", name, false)) return send_error(res, *bad);
    auto stale = bool_param(req, "stale");
    if (!stale.ok()) return send_error(res, stale.error());
    LockMachine* machine = machine_;
    auto snapshot = [machine, name, one] {
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
    };
    read_state(req, res, stale.value(), snapshot);
}

// ---- Admin -------------------------------------------------------------------------------------

Json HttpApi::staleness_json()
{
    const Replica& r = node_.replica();
    return Json{{"replica", r.replica()},
                {"status", status_name(r.status())},
                {"view", r.view()},
                {"is_leader", r.is_leader()},
                {"leader", r.status() == Status::normal ? Json(r.leader()) : Json()},
                {"op", r.op()},
                {"commit", r.commit()},
                {"revision", machine_ ? machine_->revision() : 0},
                // Ops this replica has prepared but not applied: a lower bound of how far
                // behind the leader it is (it cannot know what it has not been sent).
                {"uncommitted_ops", r.op() - r.commit()}};
}

Json HttpApi::cluster_json()
{
    const Replica& r = node_.replica();
    const DaemonConfig& config = node_.config();
    const std::vector<Op>& acked = r.acked_ops();
    Json members = Json::array();
    for (size_t i = 0; i < config.replicas.size(); i++) {
        const PeerAddress& peer = config.replicas[i];
        Json member{{"replica", i},
                    {"ip", peer.ip},
                    {"udp_port", peer.udp_port},
                    {"http_port", peer.http_port},
                    {"self", i == config.replica},
                    {"role", r.status() == Status::normal && i == r.leader() ? "leader"
                                                                             : "follower"}};
        // The leader knows what each follower acknowledged in this view; others do not.
        if (r.is_leader()) {
            const Op op = i == config.replica ? r.op() : (i < acked.size() ? acked[i] : 0);
            member["acked_op"] = op;
            member["lag_ops"] = r.op() - std::min(op, r.op());
        } else if (i == config.replica) {
            member["acked_op"] = r.op();
        }
        members.push_back(member);
    }
    const Json status = node_.status();
    Json api{{"forwarded", forwarded_.load()},
             {"watchers", watchers_.load()},
             {"waiters", waiters_.load()},
             {"client_ids", pool_.size()}};
    if (machine_) {
        const LockServiceState& s = machine_->state();
        api["sessions"] = s.sessions.size();
        api["locks"] = s.locks.size();
        api["keys"] = s.kv.size();
        api["barriers"] = s.barriers.size();
        api["revision"] = s.revision;
        api["oldest_revision"] = machine_->oldest_revision();
        api["leases_tracked"] = service_->leases_tracked();
        api["expiries_proposed"] = service_->expiries_proposed();
        api["expire_waiters_proposed"] = service_->expire_waiters_proposed();
    }
    return Json{{"cluster_id", config.cluster_id},
                {"replica", config.replica},
                {"status", status_name(r.status())},
                {"view", r.view()},
                {"leader", r.status() == Status::normal ? Json(r.leader()) : Json()},
                {"is_leader", r.is_leader()},
                {"op", r.op()},
                {"commit", r.commit()},
                {"members", members},
                {"electrode", config.electrode == ElectrodeMode::on ? "on" : "off"},
                {"counters", status["counters"]},
                {"api", api}};
}

void HttpApi::cluster(const Request&, Response& res)
{
    auto body = on_loop([this] { return cluster_json(); });
    if (!body) return send_error(res, unavailable("the replica's event loop did not answer"));
    send_json(res, 200, *body);
}

void HttpApi::metrics(const Request&, Response& res)
{
    auto body = on_loop([this] { return cluster_json(); });
    if (!body) return send_error(res, unavailable("the replica's event loop did not answer"));
    res.set_content(render_metrics(*body, counters_.snapshot()),
                    "text/plain; version=0.0.4; charset=utf-8");
}

void HttpApi::readyz(const Request&, Response& res)
{
    auto role = on_loop([this] {
        const Replica& r = node_.replica();
        return Json{{"status", status_name(r.status())},
                    {"view", r.view()},
                    {"leader", r.status() == Status::normal ? Json(r.leader()) : Json()}};
    });
    if (!role) return send_error(res, unavailable("the replica's event loop did not answer"));
    // Ready: in normal status, so a leader is known and requests can be served or forwarded.
    if ((*role)["status"] != "normal")
        return send_error(res, ApiError{503, "not_ready",
                                        "the replica is not in normal status (a view change or "
                                        "recovery is under way)",
                                        *role});
    Json body = *role;
    body["ready"] = true;
    send_json(res, 200, body);
}

}  // namespace voltlock::api
