#include "transport.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <random>
#include <thread>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <httplib.h>

namespace voltlock::client {

namespace {

// A wait is silent on purpose, for as long as it was asked to be: the kernel probes every
// connection (TCP keepalive each second, given up after 3 unanswered), so a wait at a replica
// cut off from the client is left within about 4 s and asked again elsewhere with the same
// identity, where the cell's grant (or its place in line) is. The kernel gives the connection
// up without a packet to the replica, which therefore does not withdraw the wait.
void probe_connection(socket_t sock)
{
    const int on = 1;
    const int seconds = 1;
    const int probes = 3;
    ::setsockopt(sock, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    ::setsockopt(sock, IPPROTO_TCP, TCP_KEEPIDLE, &seconds, sizeof seconds);
    ::setsockopt(sock, IPPROTO_TCP, TCP_KEEPINTVL, &seconds, sizeof seconds);
    ::setsockopt(sock, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

// A replica's process can stop (SIGSTOP, a hung host) while its kernel still answers those
// probes. So while the cell holds a request, its replica is asked for /healthz every
// kHeldCheckInterval of silence, each check given kHeldCheckTimeout; after kHeldCheckMisses
// unanswered in a row the request is left there and asked again elsewhere (same identity). One
// answer stands for every wait at that replica for the next interval.
constexpr milliseconds kHeldCheckInterval{1000};
constexpr milliseconds kHeldCheckTimeout{1000};
constexpr int kHeldCheckMisses = 2;
// How often a held attempt looks for a cancel or interrupt whose stop came too early to end it
// (before its request was sent).
constexpr milliseconds kStopPoll{100};

// Idle kept-alive connections kept per endpoint.
constexpr size_t kPoolLimit = 64;
constexpr milliseconds kRoundBackoffFirst{50};
constexpr milliseconds kRoundBackoffMost{500};

std::optional<int> parse_int(std::string_view text)
{
    int value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return value;
}

// While alive, a client entered in a CancelToken (none: nothing to do), so that a cancel or an
// interrupt stops it; it leaves the token once ended, and never later than its own end.
class Entered {
public:
    Entered(CancelToken* cancel, httplib::Client* client) : cancel_(cancel), client_(client) {}
    Entered(Entered&& other) noexcept
        : cancel_(std::exchange(other.cancel_, nullptr)), client_(other.client_)
    {
    }
    Entered& operator=(Entered&&) = delete;
    ~Entered() { end(); }

    void end()
    {
        if (cancel_) cancel_->leave(client_);
        cancel_ = nullptr;
    }

private:
    CancelToken* cancel_;
    httplib::Client* client_;
};

uint64_t random_client_id()
{
    std::random_device device;
    std::mt19937_64 generator((uint64_t(device()) << 32) ^ device());
    uint64_t id = 0;
    while (id == 0) id = generator();
    return id;
}

}  // namespace

std::optional<std::vector<Endpoint>> parse_endpoints(std::string_view list, std::string* why)
{
    std::vector<Endpoint> out;
    size_t start = 0;
    while (start <= list.size()) {
        size_t end = list.find(',', start);
        if (end == std::string_view::npos) end = list.size();
        std::string_view item = list.substr(start, end - start);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        start = end + 1;
        if (item.empty()) continue;
        const bool tls = item.substr(0, 8) == "https://";
        if (tls) item.remove_prefix(8);
        else if (item.substr(0, 7) == "http://") item.remove_prefix(7);
        if (!out.empty() && out.front().tls != tls) {
            *why = "endpoints mix http:// and https://; a cell speaks one of them";
            return std::nullopt;
        }
        while (!item.empty() && item.back() == '/') item.remove_suffix(1);
        const size_t colon = item.rfind(':');
        Endpoint endpoint;
        endpoint.host = std::string(item.substr(0, colon));
        std::optional<int> port = 7480;
        if (colon != std::string_view::npos) port = parse_int(item.substr(colon + 1));
        if (endpoint.host.empty() || !port || *port <= 0 || *port > 65535 ||
            endpoint.host.find('/') != std::string::npos) {
            *why = "endpoint '" + std::string(item) +
                   "' is not host:port, http://host:port or https://host:port";
            return std::nullopt;
        }
        endpoint.port = *port;
        endpoint.tls = tls;
        endpoint.url = (tls ? "https://" : "http://") + endpoint.host + ":" +
                       std::to_string(endpoint.port);
        out.push_back(std::move(endpoint));
    }
    if (out.empty()) {
        *why = "no endpoints given";
        return std::nullopt;
    }
    return out;
}

namespace {

// An encrypted key is refused rather than asked for on the terminal (OpenSSL's default).
int no_passphrase(char*, int, int, void*) { return 0; }

std::string unreadable(const PemFile& file)
{
    std::FILE* opened = std::fopen(file.path.c_str(), "r");
    if (!opened) return file.name + " " + file.path + ": " + std::strerror(errno);
    std::fclose(opened);
    return "";
}

// The checks on one OpenSSL context, in the order that tells the mistakes apart: the key first
// (loading a certificate after it drops a key that does not match instead of failing), then the
// certificate, then whether they match.
std::string pem_problem(SSL_CTX* context, const PemFile& cacert, const PemFile& cert,
                        const PemFile& key)
{
    if (!cacert.path.empty() &&
        SSL_CTX_load_verify_locations(context, cacert.path.c_str(), nullptr) != 1)
        return cacert.name + " " + cacert.path + ": no PEM certificate in it";
    if (key.path.empty()) return "";
    if (SSL_CTX_use_PrivateKey_file(context, key.path.c_str(), SSL_FILETYPE_PEM) != 1)
        return key.name + " " + key.path + ": not an unencrypted PEM private key";
    if (SSL_CTX_use_certificate_chain_file(context, cert.path.c_str()) != 1)
        return cert.name + " " + cert.path + ": not a PEM certificate";
    if (SSL_CTX_check_private_key(context) != 1)
        return key.name + " " + key.path + " is not the key of " + cert.name + " " + cert.path;
    return "";
}

}  // namespace

std::string tls_files_problem(const PemFile& cacert, const PemFile& cert, const PemFile& key)
{
    if (cert.path.empty() != key.path.empty())
        return cert.path.empty() ? key.name + " without " + cert.name
                                 : cert.name + " without " + key.name;
    for (const PemFile* file : {&cacert, &cert, &key})
        if (!file->path.empty())
            if (std::string why = unreadable(*file); !why.empty()) return why;
    if (cacert.path.empty() && cert.path.empty()) return "";
    std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> context(SSL_CTX_new(TLS_client_method()),
                                                         SSL_CTX_free);
    if (!context) return "OpenSSL could not make a context to check the TLS files in";
    SSL_CTX_set_default_passwd_cb(context.get(), no_passphrase);
    std::string problem = pem_problem(context.get(), cacert, cert, key);
    ERR_clear_error();  // the refused loads leave nothing on the thread's OpenSSL error queue
    return problem;
}

void CancelToken::cancel()
{
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    stop_running();
}

void CancelToken::interrupt()
{
    std::lock_guard lock(mutex_);
    interrupts_++;
    stop_running();
}

void CancelToken::stop_running()
{
    for (httplib::Client* client : running_) client->stop();
}

vl_status CancelToken::stop_reason(uint64_t since) const
{
    if (cancelled_.load()) return VL_ERR_SESSION_LOST;
    return interrupts_.load() != since ? VL_ERR_CLOSED : VL_OK;
}

bool CancelToken::enter(httplib::Client* client, uint64_t since)
{
    std::lock_guard lock(mutex_);
    if (stop_reason(since) != VL_OK) return false;
    running_.insert(client);
    return true;
}

void CancelToken::leave(httplib::Client* client)
{
    std::lock_guard lock(mutex_);
    running_.erase(client);
}

Transport::Transport(std::vector<Endpoint> endpoints, TransportOptions options)
    : endpoints_(std::move(endpoints)),
      options_(options),
      idle_(endpoints_.size()),
      healthz_answered_(endpoints_.size()),
      next_client_id_(options.client_id_seed ? options.client_id_seed : random_client_id())
{
}

Transport::~Transport() = default;

Transport::Identity Transport::take_identity()
{
    std::lock_guard lock(identity_mutex_);
    if (!idle_identities_.empty()) {
        Identity identity = idle_identities_.back();
        idle_identities_.pop_back();
        return identity;
    }
    // One identity per request in flight: the cell keeps only each client id's latest request.
    Identity fresh{next_client_id_, 0};
    next_client_id_ = options_.client_id_seed ? next_client_id_ + 1 : random_client_id();
    return fresh;
}

void Transport::give_back_identity(Identity identity)
{
    std::lock_guard lock(identity_mutex_);
    idle_identities_.push_back(identity);
}

std::unique_ptr<httplib::Client> Transport::checkout(size_t index)
{
    {
        std::lock_guard lock(pool_mutex_);
        auto& idle = idle_[index];
        if (!idle.empty()) {
            auto client = std::move(idle.back());
            idle.pop_back();
            return client;
        }
    }
    return connect(index);
}

std::unique_ptr<httplib::Client> Transport::connect(size_t index)
{
    const Endpoint& endpoint = endpoints_[index];
    auto client = endpoint.tls ? std::make_unique<httplib::Client>(
                                     endpoint.url, options_.cert_file, options_.key_file)
                               : std::make_unique<httplib::Client>(endpoint.host, endpoint.port);
    if (endpoint.tls) {
        if (!options_.cacert_file.empty()) client->set_ca_cert_path(options_.cacert_file);
        client->enable_server_certificate_verification(true);
        if (SSL_CTX* context = client->ssl_context())
            SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
    }
    if (!options_.token.empty()) client->set_bearer_token_auth(options_.token);
    client->set_keep_alive(true);
    client->set_tcp_nodelay(true);  // headers and body are separate writes (docs/api.md)
    client->set_socket_options(probe_connection);
    client->set_url_encode(false);  // paths come encoded from the codec
    return client;
}

void Transport::checkin(size_t index, std::unique_ptr<httplib::Client> client)
{
    std::lock_guard lock(pool_mutex_);
    if (idle_[index].size() < kPoolLimit) idle_[index].push_back(std::move(client));
}

void Transport::note_failure(size_t index)
{
    // Connections to an endpoint that just failed are likely dead too.
    std::vector<std::unique_ptr<httplib::Client>> dropped;
    std::lock_guard lock(pool_mutex_);
    dropped.swap(idle_[index]);
}

bool Transport::answers_healthz(size_t index, CancelToken* cancel, uint64_t since)
{
    {
        std::lock_guard lock(health_mutex_);
        const auto& at = healthz_answered_[index];
        if (at && Clock::now() - *at < kHeldCheckInterval) return true;
    }
    // A connection of its own: a pooled one the replica closed while idle would count as a miss.
    auto check = connect(index);
    check->set_keep_alive(false);
    check->set_connection_timeout(kHeldCheckTimeout);
    check->set_read_timeout(kHeldCheckTimeout);
    check->set_write_timeout(kHeldCheckTimeout);
    if (cancel && !cancel->enter(check.get(), since)) return true;  // the caller sees the cancel
    Entered entered(cancel, check.get());
    auto result = check->Get("/healthz");
    if (!result || result->status != 200) return false;
    std::lock_guard lock(health_mutex_);
    healthz_answered_[index] = Clock::now();
    return true;
}

void Transport::learn_members(size_t index)
{
    std::lock_guard lock(members_mutex_);
    if (members_known_) return;
    auto client = checkout(index);
    client->set_connection_timeout(options_.dial_timeout);
    client->set_read_timeout(std::chrono::seconds(1));
    auto result = client->Get("/v1/cluster");
    if (!result || result->status != 200) return;
    const Json body = Json::parse(result->body, nullptr, false);
    if (body.is_discarded() || !body.contains("members") || !body["members"].is_array()) return;
    for (const Json& member : body["members"]) {
        if (!member.is_object()) continue;
        const std::string ip = member.value("ip", std::string{});
        const int port = member.value("http_port", 0);
        const int replica = member.value("replica", -1);
        for (size_t i = 0; i < endpoints_.size(); i++)
            if (endpoints_[i].host == ip && endpoints_[i].port == port)
                replica_to_endpoint_[replica] = i;
    }
    members_known_ = true;
    checkin(index, std::move(client));
}

void Transport::note_answer(size_t index, std::optional<int> leader_hint)
{
    if (leader_hint) {
        learn_members(index);
        std::lock_guard lock(members_mutex_);
        const auto found = replica_to_endpoint_.find(*leader_hint);
        if (found != replica_to_endpoint_.end()) {
            preferred_ = found->second;
            return;
        }
    }
    preferred_ = index;
}

namespace {

// What a call that `cancel` stopped ends with, or nullopt while it may go on.
std::optional<Outcome> stopped_outcome(const CancelToken* cancel, uint64_t since)
{
    switch (cancel ? cancel->stop_reason(since) : VL_OK) {
    case VL_ERR_SESSION_LOST:
        return Outcome{VL_ERR_SESSION_LOST, "the session was lost during the call", {}};
    case VL_ERR_CLOSED:
        return Outcome{VL_ERR_CLOSED, "the call was interrupted (vl_session_interrupt)", {}};
    default:
        return std::nullopt;
    }
}

// One attempt of `request` on one connection.
httplib::Result send_once(httplib::Client& client, const Request& request,
                          const httplib::Headers& headers)
{
    const std::string_view method = request.method;
    if (method == "GET") return client.Get(request.path, headers);
    if (method == "POST")
        return client.Post(request.path, headers, request.body, "application/json");
    if (method == "PUT") return client.Put(request.path, headers, request.body, "application/json");
    return client.Delete(request.path, headers, request.body, "application/json");
}

// One attempt of a request the cell holds, sent on a thread of its own so that the caller can
// check its replica meanwhile, and leave the attempt there without closing its connection: a
// replica that sees the connection close withdraws the wait, which the request asked again
// elsewhere (same identity) has joined. A left attempt is ended (its connection closed) when
// the call ends: by then the wait has been granted, has ended, or is given up by the caller.
class HeldAttempt {
public:
    HeldAttempt(size_t endpoint, std::unique_ptr<httplib::Client> client, Entered entered,
                const Request& request, const httplib::Headers& headers)
        : endpoint_(endpoint), client_(std::move(client)), entered_(std::move(entered))
    {
        thread_ = std::thread([this, &request, &headers] {
            std::optional<httplib::Result> result;
            try {
                result.emplace(send_once(*client_, request, headers));
            } catch (...) {  // as the C API lets no exception out, none leaves this thread
                result.emplace(nullptr, httplib::Error::Unknown);
            }
            std::lock_guard lock(mutex_);
            result_ = std::move(result);
            answer_.notify_all();
        });
    }
    HeldAttempt(const HeldAttempt&) = delete;
    HeldAttempt& operator=(const HeldAttempt&) = delete;
    ~HeldAttempt()
    {
        if (!client_) return;  // handed out by outcome()
        client_->stop();       // wakes the thread if it still waits; the replica sees the hang-up
        thread_.join();
        entered_.end();
    }

    size_t endpoint() const { return endpoint_; }
    void stop() { client_->stop(); }

    // True once the attempt has its outcome (an answer, or the transport's failure).
    bool wait_for(milliseconds wait)
    {
        std::unique_lock lock(mutex_);
        return answer_.wait_for(lock, wait, [this] { return result_.has_value(); });
    }

    // After wait_for said true: the outcome, and the connection for the pool.
    httplib::Result outcome(std::unique_ptr<httplib::Client>* client)
    {
        thread_.join();
        entered_.end();
        *client = std::move(client_);
        return std::move(*result_);
    }

private:
    const size_t endpoint_;
    std::unique_ptr<httplib::Client> client_;
    Entered entered_;
    std::mutex mutex_;
    std::condition_variable answer_;
    std::optional<httplib::Result> result_;
    std::thread thread_;
};

// False once the attempt's replica stopped answering /healthz while it held the attempt.
bool held_answer_comes(Transport& transport, HeldAttempt& held, CancelToken* cancel,
                       uint64_t since)
{
    const auto stopping = [&] { return cancel && cancel->stop_reason(since) != VL_OK; };
    int misses = 0;
    auto next_check = Clock::now() + kHeldCheckInterval;
    while (!held.wait_for(kStopPoll)) {
        if (stopping()) {
            held.stop();  // again: a stop that came before the request was sent did nothing
            continue;
        }
        if (Clock::now() < next_check) continue;
        misses = transport.answers_healthz(held.endpoint(), cancel, since) ? 0 : misses + 1;
        next_check = Clock::now() + kHeldCheckInterval;
        // An answer, or a cancel, may have come during the check.
        if (misses >= kHeldCheckMisses && !held.wait_for(milliseconds(0)) && !stopping())
            return false;
    }
    return true;
}

// One attempt at endpoint `index` on `client`, which the caller entered in `cancel`: its result,
// or none when a request the cell holds was left at a replica that stopped answering (in `left`
// until the call ends), or not sent to one where this call left it before and that still does
// not answer.
std::optional<httplib::Result> send_attempt(Transport& transport, size_t index,
                                            std::unique_ptr<httplib::Client>& client,
                                            const Request& request,
                                            const httplib::Headers& headers, CancelToken* cancel,
                                            uint64_t since,
                                            std::vector<std::unique_ptr<HeldAttempt>>& left)
{
    Entered entered(cancel, client.get());  // the caller entered it; left before it is pooled
    if (!request.waits || request.endpoint_index >= 0) return send_once(*client, request, headers);
    const bool left_there_before = std::any_of(left.begin(), left.end(), [&](const auto& held) {
        return held->endpoint() == index;
    });
    if (left_there_before && !transport.answers_healthz(index, cancel, since))
        return std::nullopt;
    auto held = std::make_unique<HeldAttempt>(index, std::move(client), std::move(entered),
                                              request, headers);
    if (held_answer_comes(transport, *held, cancel, since)) return held->outcome(&client);
    left.push_back(std::move(held));
    return std::nullopt;
}

}  // namespace

Outcome Transport::call(const Request& request, Clock::time_point deadline, CancelToken* cancel)
{
    std::optional<Identity> identity;
    httplib::Headers headers;
    if (request.mutating) {
        identity = take_identity();
        identity->last_request_number++;
        headers.emplace("X-Voltlock-Client-Id", std::to_string(identity->client_id));
        headers.emplace("X-Voltlock-Request-Number",
                        std::to_string(identity->last_request_number));
    }
    const bool pinned = request.endpoint_index >= 0;
    size_t index = pinned ? size_t(request.endpoint_index) : preferred_.load();
    Outcome last{VL_ERR_TIMEOUT, "no attempt was made before the deadline", {}};
    bool answered = false;
    size_t attempts = 0;
    const uint64_t since = cancel ? cancel->interrupts() : 0;
    // Attempts left at stopped replicas, ended with the call (after `headers`, which they use).
    std::vector<std::unique_ptr<HeldAttempt>> left;
    while (!answered) {
        if (auto stop = stopped_outcome(cancel, since)) {
            last = std::move(*stop);
            break;
        }
        const auto now = Clock::now();
        if (now >= deadline) break;
        const auto remaining = std::chrono::duration_cast<milliseconds>(deadline - now);
        const milliseconds attempt = request.attempt_within(remaining);
        const Endpoint& endpoint = endpoints_[index];
        auto client = checkout(index);
        client->set_connection_timeout(std::min(options_.dial_timeout, attempt));
        client->set_read_timeout(attempt);
        client->set_write_timeout(attempt);
        if (cancel && !cancel->enter(client.get(), since)) continue;  // the loop says why
        const std::optional<httplib::Result> sent =
            send_attempt(*this, index, client, request, headers, cancel, since, left);
        attempts++;
        std::optional<int> leader_hint;
        if (!sent) {
            last = {VL_ERR_TRANSPORT, endpoint.url + ": stopped answering /healthz", {}};
            note_failure(index);
        } else if (!*sent) {
            last = {VL_ERR_TRANSPORT, endpoint.url + ": " + httplib::to_string(sent->error()), {}};
            note_failure(index);
        } else {
            const httplib::Result& result = *sent;
            Answer answer{result->status, result->body, std::nullopt};
            if (result->has_header("X-Voltlock-Leader"))
                answer.leader_hint = parse_int(result->get_header_value("X-Voltlock-Leader"));
            Json body;
            const Failure failure = decode_answer(answer, &body);
            checkin(index, std::move(client));
            if (failure.status == VL_ERR_NOT_LEADER && body.contains("details") &&
                body["details"].is_object() && body["details"].value("leader", -1) >= 0)
                leader_hint = body["details"]["leader"].get<int>();
            if (failure.status == VL_OK || !is_retryable(failure.status)) {
                note_answer(index, answer.leader_hint);
                last = {failure.status, failure.text, std::move(body)};
                answered = true;
                break;
            }
            last = {failure.status, endpoint.url + ": " + failure.text, std::move(body)};
        }
        if (pinned) break;
        // Next: the leader if one was named, else the next endpoint round the list; after a
        // whole round without an answer, a short pause (a view change takes a moment).
        size_t next = (index + 1) % endpoints_.size();
        if (leader_hint) {
            learn_members(index);
            std::lock_guard lock(members_mutex_);
            const auto found = replica_to_endpoint_.find(*leader_hint);
            if (found != replica_to_endpoint_.end() && found->second != index)
                next = found->second;
        }
        index = next;
        if (attempts % endpoints_.size() == 0) {
            const auto rounds = attempts / endpoints_.size();
            auto pause = std::min(kRoundBackoffMost, kRoundBackoffFirst * (1 << std::min<size_t>(
                                                                             rounds - 1, 4)));
            const auto until = std::min(deadline, Clock::now() + pause);
            while (Clock::now() < until && !stopped_outcome(cancel, since))
                std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(20),
                                                                       until - Clock::now()));
        }
    }
    left.clear();
    if (identity) give_back_identity(*identity);
    const bool stopped = last.status == VL_ERR_SESSION_LOST || last.status == VL_ERR_CLOSED;
    if (!answered && !pinned && !stopped && Clock::now() >= deadline)
        last = {VL_ERR_TIMEOUT, "no answer before the deadline; last: " + last.text, {}};
    return last;
}

}  // namespace voltlock::client
