#include "api/leader_path.h"

#include "shell/peer_auth.h"
#include "shell/peer_http.h"
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

namespace voltlock::api {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// VR answers a request number used before for another request with an empty result
// (core/replica.h), which no op's result is.
LeaderPath::Proposed::Kind committed_or_reused(const Bytes& result)
{
    return result.empty() ? LeaderPath::Proposed::Kind::reused
                          : LeaderPath::Proposed::Kind::committed;
}

}  // namespace

std::optional<std::string> response_header(const HttpResponse& response, std::string_view name)
{
    for (const auto& [n, value] : response.headers)
        if (equal_ignoring_case(n, name)) return value;
    return std::nullopt;
}

// ---- Forwarder (its own threads) ---------------------------------------------------------------

Forwarder::Forwarder(const DaemonConfig& config, EventLoop& loop, size_t threads)
    : config_(config), loop_(loop)
{
    for (size_t i = 0; i < std::max<size_t>(threads, 1); i++)
        threads_.emplace_back([this] { work(); });
}

Forwarder::~Forwarder() { stop(); }

void Forwarder::stop()
{
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    jobs_ready_.notify_all();
    for (std::thread& thread : threads_)
        if (thread.joinable()) thread.join();
}

void Forwarder::send(Request request, std::function<void(Outcome)> done)
{
    {
        std::lock_guard lock(mutex_);
        jobs_.push_back(Job{.request = std::move(request), .done = std::move(done), .work = {}});
    }
    jobs_ready_.notify_one();
}

void Forwarder::run(std::function<void()> work)
{
    {
        std::lock_guard lock(mutex_);
        jobs_.push_back(Job{.request = {}, .done = {}, .work = std::move(work)});
    }
    jobs_ready_.notify_one();
}

void Forwarder::work()
{
    // One kept-alive connection per leader, per thread.
    std::map<ReplicaIndex, std::unique_ptr<httplib::Client>> clients;
    while (true) {
        Job job;
        {
            std::unique_lock lock(mutex_);
            jobs_ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
            if (stopping_) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        if (job.work) {
            job.work();
            continue;
        }
        const Request& r = job.request;
        std::unique_ptr<httplib::Client>& client = clients[r.leader];
        if (!client) {
            const PeerAddress& peer = config_.replicas.at(r.leader);
            client = peer_client(config_, peer);
            client->set_url_encode(false);  // the target is passed on as it came, still encoded
            client->set_keep_alive(true);
            client->set_tcp_nodelay(true);
            client->set_connection_timeout(1, 0);
            client->set_write_timeout(5, 0);
        }
        client->set_read_timeout(static_cast<time_t>(r.read_timeout_ms / 1000),
                                 static_cast<time_t>(r.read_timeout_ms % 1000) * 1000);
        httplib::Request out;
        out.method = r.method;
        out.path = r.target;
        out.body = r.body;
        for (const auto& [name, value] : r.headers) out.set_header(name, value);
        if (auto signature = sign_peer_request(config_, r.method, r.target, unix_ms()))
            out.set_header(kPeerAuthHeader, *signature);
        httplib::Result answer = client->send(out);
        Outcome outcome;
        if (answer) {
            outcome.reached = true;
            outcome.response.status = answer->status;
            outcome.response.body = answer->body;
            if (answer->has_header("Content-Type"))
                outcome.response.content_type = answer->get_header_value("Content-Type");
            for (const char* name : {"Retry-After", "X-Voltlock-Not-Leader", kWaitingHeader})
                if (answer->has_header(name))
                    outcome.response.set_header(name, answer->get_header_value(name));
        } else {
            spdlog::debug("r{}: forwarding {} {} to r{}: {}", config_.replica, r.method, r.target,
                          r.leader, httplib::to_string(answer.error()));
            client.reset();  // a fresh connection next time
        }
        loop_.post([done = std::move(job.done), outcome = std::move(outcome)]() mutable {
            done(std::move(outcome));
        });
    }
}

// ---- LeaderPath (loop thread) ------------------------------------------------------------------

// One request on its way to the leader. Its pooled id goes back when the last piece of work
// that could still use it lets go.
struct LeaderPath::Attempt {
    ClientPool& pool;
    CallPtr call;
    uint32_t wait_ms = 0;
    Serve serve;
    Relay relay;
    ClientIdentity identity;
    ClientId pooled = 0;
    SteadyTime until;
    bool forwarded_to_us = false;
    // run_op's: the op, and what to do with its outcome; over_http once it fell back, which
    // Route::replication never does.
    Bytes payload;
    Finish finish;
    bool over_http = false;
    bool http_allowed = true;
    // While a Request waits for the leader's Reply: to whom, how often sent, the next timeout.
    ReplicaIndex request_leader = 0;
    uint32_t sends = 0;
    uint32_t retransmit_ms = 0;
    EventLoop::TimerId retransmit_timer;
    bool requested = false;  // sent as a Request before (to this leader or another)

    ~Attempt()
    {
        if (pooled != 0) pool.give_back(pooled);
    }
};

LeaderPath::LeaderPath(EventLoop& loop, Node& node, LockService* service, ClientPool& pool,
                       Forwarder& forwarder)
    : loop_(loop), node_(node), service_(service), pool_(pool), forwarder_(forwarder)
{
    node_.on_reply([this](const Reply& reply) { on_reply(reply); });
    node_.on_executed([this](const Executed&) { on_applied(); });
    node_.on_snapshot_installed([this] { on_applied(); });
}

void LeaderPath::run_op(const CallPtr& call, Bytes payload, uint32_t wait_ms, Finish finish,
                        Relay relay, Route route)
{
    auto serve = [this, payload, finish](const AtLeader& at, NotLeader not_leader) {
        propose(at.identity, payload, at.until, {},
                [finish, not_leader, identity = at.identity](Proposed proposed) {
                    if (proposed.kind == Proposed::Kind::not_leader) return not_leader();
                    finish(identity, std::move(proposed));
                });
    };
    start_request(call, std::move(payload), wait_ms, std::move(serve), std::move(finish),
                  std::move(relay), route);
}

void LeaderPath::run_request(const CallPtr& call, Bytes payload, Serve serve, Finish finish)
{
    start_request(call, std::move(payload), 0, std::move(serve), std::move(finish), {},
                  Route::any);
}

void LeaderPath::start_request(const CallPtr& call, Bytes payload, uint32_t wait_ms, Serve serve,
                               Finish finish, Relay relay, Route route)
{
    if (auto a = start_attempt(call, wait_ms, std::move(serve), std::move(relay))) {
        a->payload = std::move(payload);
        a->finish = std::move(finish);
        a->over_http = route == Route::http;
        a->http_allowed = route != Route::replication;
        attempt(a);
    }
}

void LeaderPath::at_leader(const CallPtr& call, uint32_t wait_ms, Serve serve, Relay relay)
{
    if (auto a = start_attempt(call, wait_ms, std::move(serve), std::move(relay))) attempt(a);
}

std::shared_ptr<LeaderPath::Attempt> LeaderPath::start_attempt(const CallPtr& call,
                                                               uint32_t wait_ms, Serve serve,
                                                               Relay relay)
{
    auto given = parse_identity(call->header("X-Voltlock-Client-Id"),
                                call->header("X-Voltlock-Request-Number"));
    if (!given.ok()) {
        call->fail(given.error());
        return nullptr;
    }
    auto a = std::shared_ptr<Attempt>(
        new Attempt{.pool = pool_,
                    .call = call,
                    .wait_ms = wait_ms,
                    .serve = std::move(serve),
                    .relay = std::move(relay),
                    .identity = {},
                    .pooled = 0,
                    .until = Clock::now() + milliseconds(kLeaderWaitMs),
                    .forwarded_to_us = call->header(kForwardedHeader).has_value()});
    if (given.value()) {
        a->identity = *given.value();
    } else {
        const std::optional<ClientIdentity> taken = pool_.try_take();
        if (!taken) {
            call->fail(unavailable("too many requests in flight at this replica"));
            return nullptr;
        }
        a->identity = *taken;
        a->pooled = taken->client_id;
    }
    return a;
}

void LeaderPath::attempt(const std::shared_ptr<Attempt>& a)
{
    if (a->call->gone()) return;
    const Replica& r = node_.replica();
    const SteadyTime started = Clock::now();
    if (r.is_leader()) {
        a->serve(AtLeader{a->identity, a->until}, [this, a, started] { try_again(a, started); });
    } else if (a->forwarded_to_us) {
        // The forwarder picks the leader again; a forwarded request never travels twice.
        ApiError error = unavailable("this replica is not the leader");
        error.code = "not_leader";
        if (r.known_leader()) error.details = Json{{"leader", *r.known_leader()}};
        HttpResponse response = error_response(error);
        response.set_header("X-Voltlock-Not-Leader", "1");
        a->call->answer(std::move(response));
    } else if (const std::optional<ReplicaIndex> leader = r.known_leader()) {
        // A follower that no longer hears its leader sends it nothing: it waits for a view
        // change here, and the request fails in kLeaderWaitMs if none comes.
        if (a->finish && !a->over_http)
            send_request(a, *leader);
        else
            forward(a, *leader, started);
    } else {
        try_again(a, started);
    }
}

void LeaderPath::try_again(const std::shared_ptr<Attempt>& a, SteadyTime started)
{
    if (a->call->gone()) return;
    const SteadyTime now = Clock::now();
    // An attempt that lasted (a request held at a leader that then died) starts a new outage:
    // the bound is on how long no leader answers, not on how long the request has run.
    if (now - started > milliseconds(1000))
        a->until = std::max(a->until, now + milliseconds(kLeaderWaitMs));
    if (now >= a->until)
        return a->call->fail(outcome_unknown(
            *a->call, "no leader with a quorum answered within " +
                          std::to_string(kLeaderWaitMs / 1000) +
                          " s (a view change, or too few replicas up)"));
    loop_.after(milliseconds(50), [this, a] { attempt(a); });
}

void LeaderPath::forward(const std::shared_ptr<Attempt>& a, ReplicaIndex leader,
                         SteadyTime started)
{
    const Call& call = *a->call;
    Forwarder::Request request{
        .leader = leader,
        .method = call.method,
        .target = call.target,
        .body = call.body,
        .headers = {{"Content-Type", call.header("Content-Type").value_or("application/json")},
                    {"X-Voltlock-Client-Id", std::to_string(a->identity.client_id)},
                    {"X-Voltlock-Request-Number", std::to_string(a->identity.request_number)},
                    {kForwardedHeader, std::to_string(node_.config().replica)}},
        .read_timeout_ms = uint64_t{kLeaderWaitMs} + a->wait_ms + kWaitGraceMs + 2'000};
    if (a->relay) request.headers.emplace_back(kWaitHereHeader, "1");
    // The leader authenticates the client's token again (its certificate, with mTLS, is not
    // passed on: the leader sees this replica's, a peer's, and trusts the check made here).
    if (auto authorization = call.header("Authorization"))
        request.headers.emplace_back("Authorization", *authorization);
    else if (!call.user.empty())
        request.headers.emplace_back(kOnBehalfOfHeader, call.user);
    forwarder_.send(std::move(request), [this, a, leader, started](Forwarder::Outcome outcome) {
        if (a->call->gone()) return;
        if (!outcome.reached || response_header(outcome.response, "X-Voltlock-Not-Leader"))
            return try_again(a, started);
        forwarded_ += 1;
        outcome.response.set_header("X-Voltlock-Leader", std::to_string(leader));
        if (a->relay) return a->relay(std::move(outcome.response));
        a->call->answer(std::move(outcome.response));
    });
}

// ---- Requests over the replication channel ----------------------------------------------------

void LeaderPath::send_request(const std::shared_ptr<Attempt>& a, ReplicaIndex leader)
{
    if (a->payload.size() > max_entry_payload_bytes(node_.config().max_message_bytes))
        return fall_back_to_http(a, leader);
    if (service_)
        if (const auto latest = service_->stale_request(a->identity.client_id,
                                                        a->identity.request_number))
            return a->finish(a->identity, Proposed{.kind = Proposed::Kind::stale,
                                                   .latest = *latest});
    // One Reply answers every attempt waiting under a pair: another payload under it reused
    // the number, and must not take the first one's answer.
    std::vector<std::shared_ptr<Attempt>>& waiting =
        requests_[{a->identity.client_id, a->identity.request_number}];
    if (!waiting.empty() && waiting.front()->payload != a->payload)
        return a->finish(a->identity, Proposed{.kind = Proposed::Kind::reused});
    a->request_leader = leader;
    a->sends = 0;
    a->retransmit_ms = kRequestRetransmitMs;
    waiting.push_back(a);
    transmit_request(a);
}

void LeaderPath::transmit_request(const std::shared_ptr<Attempt>& a)
{
    node_.send_request(a->request_leader, Request{.view = node_.replica().view(),
                                                  .client_id = a->identity.client_id,
                                                  .request_number = a->identity.request_number,
                                                  .payload = a->payload});
    a->sends += 1;
    if (std::exchange(a->requested, true)) request_retransmits_ += 1;
    // Cancelled once the Request is answered or given up (forget_request); weak, so a timer
    // never keeps an attempt (and its pooled id) alive.
    a->retransmit_timer = loop_.after(milliseconds(a->retransmit_ms),
                [this, weak = std::weak_ptr<Attempt>(a)] {
                    if (auto alive = weak.lock()) request_timer(alive);
                });
    a->retransmit_ms *= 2;
}

void LeaderPath::request_timer(const std::shared_ptr<Attempt>& a)
{
    if (a->call->gone()) return forget_request(a);
    if (Clock::now() >= a->until) {
        forget_request(a);
        return a->finish(a->identity, Proposed{.kind = Proposed::Kind::timed_out});
    }
    const Replica& r = node_.replica();
    if (r.is_leader() || r.known_leader() != a->request_leader) {
        // A view change, or the leader lost: the new leader (or this replica, if it is the one)
        // is asked with the same identity, and its client table has the op if the old leader
        // committed it.
        forget_request(a);
        return attempt(a);
    }
    if (a->sends >= kRequestSends && a->http_allowed) {
        forget_request(a);
        return fall_back_to_http(a, a->request_leader);
    }
    transmit_request(a);
}

void LeaderPath::forget_request(const std::shared_ptr<Attempt>& a)
{
    loop_.cancel(a->retransmit_timer);
    const auto it = requests_.find({a->identity.client_id, a->identity.request_number});
    if (it == requests_.end()) return;
    std::erase(it->second, a);
    if (it->second.empty()) requests_.erase(it);
}

void LeaderPath::fall_back_to_http(const std::shared_ptr<Attempt>& a, ReplicaIndex leader)
{
    if (!a->http_allowed)  // too large for a Request, and no HTTP form
        return a->finish(a->identity, Proposed{.kind = Proposed::Kind::timed_out});
    request_fallbacks_ += 1;
    a->over_http = true;
    forward(a, leader, Clock::now());
}

void LeaderPath::on_reply(const Reply& reply)
{
    const auto it = requests_.find({reply.client_id, reply.request_number});
    if (it == requests_.end()) return;  // answered already (a retransmit's second Reply)
    const std::vector<std::shared_ptr<Attempt>> answered = std::move(it->second);
    requests_.erase(it);
    for (const std::shared_ptr<Attempt>& a : answered) {
        loop_.cancel(a->retransmit_timer);
        if (a->call->gone()) continue;
        forwarded_ += 1;
        forwarded_as_requests_ += 1;
        // The leader's name goes on the answer made now, as on one forwarded over HTTP; not
        // on the one a wait makes later at this replica.
        a->call->answer_headers = {{"X-Voltlock-Leader", std::to_string(reply.replica)}};
        a->finish(a->identity, Proposed{.kind = committed_or_reused(reply.result),
                                        .result = reply.result,
                                        .commit = reply.commit});
        a->call->answer_headers.clear();
    }
}

// ---- Reads at a commit point (ReadIndex) -------------------------------------------------------

void LeaderPath::when_applied(Op commit, SteadyTime until, std::function<void()> ready,
                              std::function<void()> late)
{
    // The core applies to the machine in its step, before the shell runs the effects: what it
    // committed is in the state already.
    if (node_.replica().commit() >= commit) {
        if (commit != 0) reads_at_commit_point_ += 1;
        return ready();
    }
    const auto wait = applied_waits_.emplace(commit, AppliedWait{std::move(ready), {}});
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
    // on_applied() cancels this timer when it takes the wait, so the wait is still here.
    wait->second.deadline =
        loop_.after(std::max(left, milliseconds(0)), [this, wait, late = std::move(late)] {
            applied_waits_.erase(wait);
            late();
        });
}

void LeaderPath::on_applied()
{
    const Op commit = node_.replica().commit();
    while (!applied_waits_.empty() && applied_waits_.begin()->first <= commit) {
        AppliedWait wait = std::move(applied_waits_.begin()->second);
        applied_waits_.erase(applied_waits_.begin());
        loop_.cancel(wait.deadline);
        reads_at_commit_point_ += 1;
        wait.ready();
    }
}

// ---- An answer made at the leader, carried in a Reply ------------------------------------------

namespace {

// A first byte that no op result starts with (results start with their op code, 1-127).
constexpr char kAnswerTag = static_cast<char>(0xA5);

}  // namespace

Bytes encode_answer(const HttpResponse& response)
{
    Json headers = Json::array();
    for (const auto& [name, value] : response.headers) headers.push_back({name, value});
    return kAnswerTag + Json{{"status", response.status},
                             {"content_type", response.content_type},
                             {"headers", headers},
                             {"body", response.body}}
                            .dump();
}

std::optional<HttpResponse> decode_answer(std::string_view bytes)
{
    if (bytes.empty() || bytes.front() != kAnswerTag) return std::nullopt;
    const Json json = Json::parse(bytes.substr(1), nullptr, false);
    if (!json.is_object() || !json.contains("status") || !json["status"].is_number_integer() ||
        !json.contains("body") || !json["body"].is_string() || !json.contains("headers") ||
        !json["headers"].is_array())
        return std::nullopt;
    HttpResponse response;
    response.status = json["status"].get<int>();
    response.content_type = json.value("content_type", response.content_type);
    response.body = json["body"].get<std::string>();
    for (const Json& header : json["headers"]) {
        if (!header.is_array() || header.size() != 2 || !header[0].is_string() ||
            !header[1].is_string())
            return std::nullopt;
        response.set_header(header[0].get<std::string>(), header[1].get<std::string>());
    }
    return response;
}

// ---- Proposing at the leader -------------------------------------------------------------------

void LeaderPath::propose(const ClientIdentity& identity, Bytes payload, SteadyTime until,
                         std::function<Json()> snapshot, std::function<void(Proposed)> done)
{
    if (service_) {
        if (const auto latest = service_->stale_request(identity.client_id,
                                                        identity.request_number))
            return done(Proposed{.kind = Proposed::Kind::stale, .latest = *latest});
        service_->proposing(identity.client_id, identity.request_number);
    }
    // `done` runs once: at the commit, or at `until` if none came (no quorum).
    struct Pending {
        std::function<void(Proposed)> done;
        bool finished = false;
        EventLoop::TimerId deadline;
    };
    auto pending = std::make_shared<Pending>(Pending{std::move(done)});
    node_.propose(identity.client_id, identity.request_number, std::move(payload),
                  [pending, snapshot = std::move(snapshot), service = service_, identity,
                   &loop = loop_](const ProposeOutcome& outcome) {
                      if (service) service->proposed(identity.client_id, identity.request_number);
                      if (std::exchange(pending->finished, true)) return;
                      // Most ops commit: their deadline is not kept in the loop for seconds.
                      loop.cancel(pending->deadline);
                      Proposed proposed;
                      if (!outcome.committed) {
                          proposed.kind = Proposed::Kind::not_leader;
                      } else {
                          proposed.kind = committed_or_reused(outcome.result);
                          proposed.result = outcome.result;
                          if (snapshot && proposed.kind == Proposed::Kind::committed)
                              proposed.snapshot = snapshot();
                      }
                      // Let go of what `done` holds (the call, its pooled id) now, not when the
                      // timer below fires.
                      std::exchange(pending->done, {})(std::move(proposed));
                  });
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
    pending->deadline = loop_.after(std::max(left, milliseconds(0)), [pending] {
        if (!std::exchange(pending->finished, true)) std::exchange(pending->done, {})(Proposed{});
    });
}

}  // namespace voltlock::api
