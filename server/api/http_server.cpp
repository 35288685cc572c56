#include "api/http_server.h"

#include <arpa/inet.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>

#include "api/call.h"
#include "api/request_framing.h"

namespace voltlock::api {

namespace {

uint64_t now_ms()
{
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

// Numbers the times connections begin to wait on their clients, in order: a flood accepts
// hundreds in one millisecond, and those must make room oldest first too (ties in milliseconds
// went by the records' addresses: a CI run closed the 500th of 2,056 among the first 320).
std::atomic<uint64_t> waits_begun{0};

std::string lower(std::string_view text)
{
    std::string out(text);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// The CN of the certificate the client presented on this TLS connection, if any.
std::optional<std::string> client_certificate_cn(MHD_Connection* connection)
{
    const auto* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!info || !info->tls_session) return std::nullopt;
    auto session = static_cast<gnutls_session_t>(info->tls_session);
    unsigned count = 0;
    const gnutls_datum_t* chain = gnutls_certificate_get_peers(session, &count);
    if (!chain || count == 0) return std::nullopt;
    gnutls_x509_crt_t certificate = nullptr;
    if (gnutls_x509_crt_init(&certificate) != 0) return std::nullopt;
    std::optional<std::string> cn;
    char name[256];
    size_t size = sizeof name;
    if (gnutls_x509_crt_import(certificate, &chain[0], GNUTLS_X509_FMT_DER) == 0 &&
        gnutls_x509_crt_get_dn_by_oid(certificate, GNUTLS_OID_X520_COMMON_NAME, 0, 0, name,
                                      &size) == 0)
        cn = std::string(name, size);
    gnutls_x509_crt_deinit(certificate);
    return cn;
}

// 413, and the connection closed: the rest of the body is not read.
HttpResponse too_large_answer(uint64_t max_body_bytes)
{
    HttpResponse too_large = error_response(
        ApiError{413, "too_large", "the request body is over " + std::to_string(max_body_bytes) +
                                       " bytes",
                 Json{{"limit_bytes", max_body_bytes}}});
    too_large.set_header("Connection", "close");
    return too_large;
}

// Each connection's libmicrohttpd pool holds its request line and headers, and is zeroed
// whole after every request: half of the default 32 KB halves both that memset (5% of the
// leader's CPU under puts) and a kept-alive connection's memory. A request line and headers
// of up to about 15.9 KB fit (Node's default limit is 16 KB); more is answered 431.
constexpr size_t kConnectionPoolBytes = 16 * 1024;

// libmicrohttpd 0.9.75 ends the method and the target at a raw NUL byte in the request line and
// says nothing: `PUT /v1/kv/a<NUL>b` would write the key `a`. It parses the line in place: the
// method at the line's start, the space after it made a NUL (and any further spaces), the target,
// the space before the version made a NUL, the version. So where the method's or the target's
// string ends short of where the next part begins, that part held a NUL. It is kept, up to and
// including that NUL, so the router refuses it: a target with a control byte is 400, a method
// with one has no route. `line` is the method's pointer; every pointer stays inside the
// connection's pool, and outside that layout nothing is marked.
void keep_a_nul_in_the_request_line(const char* line, const char* url, const char* version,
                                    std::string& method, std::string& target)
{
    if (!line || !url || !version || !(line < url && url < version) ||
        static_cast<size_t>(version - line) >= kConnectionPoolBytes)
        return;
    const char* after_method = line + method.size() + 1;
    if (after_method > url || std::any_of(after_method, url, [](char c) { return c != ' '; }))
        method.push_back('\0');
    if (url + target.size() + 1 != version) target.push_back('\0');
}

// Raises the open-file limit to what the system allows: every connection is a descriptor.
rlim_t raise_file_limit()
{
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
    if (limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &limit);
        ::getrlimit(RLIMIT_NOFILE, &limit);
    }
    return limit.rlim_cur;
}

}  // namespace

// libmicrohttpd's C callbacks, with access to the server's insides.
struct MhdCallbacks {
    static void* on_uri(void* self, const char* uri, MHD_Connection* connection);
    static MHD_Result on_access(void* self, MHD_Connection* connection, const char* url,
                                const char* method, const char* version, const char* upload_data,
                                size_t* upload_size, void** request_context);
    static MHD_Result on_headers(HttpServer& server, Exchange& e, MHD_Connection* connection,
                                 const char* method, const char* url, const char* version,
                                 HttpServer::ConnectionRecord* record);
    static void on_completed(void* self, MHD_Connection* connection, void** request_context,
                             MHD_RequestTerminationCode termination);
    static void on_connection(void* self, MHD_Connection* connection, void** socket_context,
                              MHD_ConnectionNotificationCode event);
    static ssize_t on_read_stream(void* reader, uint64_t position, char* out, size_t max);
    static void on_free_stream(void* reader);
    static MHD_Result on_header(void* headers, MHD_ValueKind kind, const char* name,
                                const char* value);
    // GnuTLS, in a handshake: this server's certificate now; and, with mTLS, the client's check.
    static int on_certificate(gnutls_session_t session, const gnutls_datum_t* acceptable_cas,
                              int acceptable_cas_count, const gnutls_pk_algorithm_t* algorithms,
                              int algorithms_count, gnutls_pcert_st** chain,
                              unsigned int* chain_length, gnutls_privkey_t* key);
    static int on_client_certificate(gnutls_session_t session);
};

namespace {
// The server whose passes run on this thread (its I/O thread, or the replica's loop). GnuTLS's
// certificate callbacks take no argument of ours, and they run inside MHD_run(), which only a
// pass calls.
thread_local HttpServer* server_of_this_thread = nullptr;
}  // namespace

struct HttpServer::ConnectionRecord {
    int fd = -1;
    size_t shard = 0;
    std::string address;
    uint64_t deadline_ms = 0;   // 0: none (a request is being served)
    uint64_t waiting_turn = 0;  // waits_begun when it began to wait on the client
    bool over_limit = false;
    bool evicted = false;  // closed to make room (evict_idle_connections)

    // The client has `timeout_ms` from now for its next step: a request, its headers, its body.
    void wait_for_client(uint64_t timeout_ms)
    {
        waiting_turn = waits_begun.fetch_add(1, std::memory_order_relaxed);
        deadline_ms = now_ms() + timeout_ms;
    }
};

// What libmicrohttpd's stream callback holds: the stream and where it goes.
struct StreamReader {
    HttpServer* server;
    std::shared_ptr<Stream> stream;
    std::shared_ptr<Exchange> exchange;
};

bool equal_ignoring_case(std::string_view a, std::string_view b)
{
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

void HttpResponse::set_header(std::string name, std::string value)
{
    for (auto& [n, v] : headers)
        if (equal_ignoring_case(n, name)) {
            v = std::move(value);
            return;
        }
    headers.emplace_back(std::move(name), std::move(value));
}

// ---- Stream ------------------------------------------------------------------------------------

Stream::Stream(HttpServer& server, std::weak_ptr<Exchange> exchange, size_t limit)
    : server_(server), exchange_(std::move(exchange)), buffer_(limit), last_push_ms_(now_ms())
{
}

bool Stream::push(std::string_view bytes)
{
    bool wake = false;
    {
        std::lock_guard lock(mutex_);
        if (ended_) return true;
        if (!buffer_.push(bytes)) return false;
        last_push_ms_ = now_ms();
        wake = std::exchange(waiting_, false);
    }
    if (wake)
        if (auto exchange = exchange_.lock()) server_.schedule_resume(exchange);
    return true;
}

void Stream::end(std::string_view last)
{
    bool wake = false;
    {
        std::lock_guard lock(mutex_);
        if (ended_) return;
        buffer_.append(last);
        ended_ = true;
        wake = std::exchange(waiting_, false);
    }
    if (wake)
        if (auto exchange = exchange_.lock()) server_.schedule_resume(exchange);
}

bool Stream::ended() const
{
    std::lock_guard lock(mutex_);
    return ended_;
}

bool Stream::finished() const { return gone_.load() || ended(); }

uint64_t Stream::last_push_ms() const
{
    std::lock_guard lock(mutex_);
    return last_push_ms_;
}

bool Stream::has_room()
{
    std::lock_guard lock(mutex_);
    return buffer_.has_room();
}

void Stream::on_drained(std::function<void()> callback)
{
    std::lock_guard lock(mutex_);
    on_drained_ = std::move(callback);
}

Stream::Read Stream::take(char* out, size_t max, size_t& taken)
{
    std::unique_lock lock(mutex_);
    taken = 0;
    if (gone_) return Read::end;
    if (!buffer_.empty()) {
        const StreamBuffer::Taken took = buffer_.take(out, max);
        taken = took.bytes;
        if (took.drained && on_drained_) {
            const std::function<void()> drained = on_drained_;
            lock.unlock();
            drained();
        }
        return Read::data;
    }
    if (ended_) return Read::end;
    waiting_ = true;
    return Read::empty;
}

// ---- Exchange ----------------------------------------------------------------------------------

std::optional<std::string> Exchange::header(std::string_view name) const
{
    for (const auto& [n, value] : headers)
        if (equal_ignoring_case(n, name)) return value;
    return std::nullopt;
}

void Exchange::answer(HttpResponse response)
{
    {
        std::lock_guard lock(mutex_);
        if (response_) return;
        response_ = std::move(response);
    }
    server_.schedule_resume(shared_from_this());
}

std::shared_ptr<Stream> Exchange::stream(HttpResponse head)
{
    std::shared_ptr<Stream> stream(
        new Stream(server_, weak_from_this(), server_.limits().stream_buffer_bytes));
    {
        std::lock_guard lock(mutex_);
        if (response_) return nullptr;
        response_ = std::move(head);
        stream_ = stream;
    }
    server_.schedule_resume(shared_from_this());
    return stream;
}

bool Exchange::answered() const
{
    std::lock_guard lock(mutex_);
    return response_.has_value();
}

void Exchange::on_hangup(std::function<void()> callback)
{
    std::lock_guard lock(mutex_);
    on_hangup_ = std::move(callback);
}

// ---- HttpServer --------------------------------------------------------------------------------

HttpServer::HttpServer(HttpLimits limits, HttpTls tls, OnRequest on_request,
                       OnBatchEnd on_batch_end, Exempt exempt)
    : limits_(limits),
      tls_(std::move(tls)),
      on_request_(std::move(on_request)),
      on_batch_end_(std::move(on_batch_end)),
      exempt_(std::move(exempt))
{
}

HttpServer::~HttpServer() { stop(); }

Result<Ok> HttpServer::reload_tls()
{
    if (!tls_.on()) return Ok{};
    auto identity = TlsIdentity::load(tls_.cert_file, tls_.key_file);
    if (!identity.ok()) return identity.error();
    std::shared_ptr<const TlsClientTrust> trust;
    if (!tls_.client_ca_file.empty()) {
        auto loaded = TlsClientTrust::load(tls_.client_ca_file);
        if (!loaded.ok()) return loaded.error();
        trust = loaded.value();
    }
    std::lock_guard lock(tls_mutex_);
    if (identity_) earlier_identities_.push_back(identity_);
    identity_ = identity.value();
    client_trust_ = trust;
    spdlog::info("http: TLS certificate {}{}", identity_->description(),
                 trust ? ", client certificates required (" + tls_.client_ca_file + ")" : "");
    return Ok{};
}

namespace {

// The listening socket is ours, so that its backlog is what the config says (issue 12: a backlog
// of 5 dropped SYNs, and each cost the client a second).
Result<FileDescriptor> listen_on(const std::string& ip, uint16_t port, uint32_t backlog)
{
    FileDescriptor listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (listener.get() < 0) return os_error("socket");
    const int one = 1;
    ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    if (::inet_pton(AF_INET, ip.c_str(), &address.sin_addr) != 1)
        return Error{0, "HTTP address " + ip + " is not an IPv4 address"};
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
        return os_error("bind HTTP " + ip + ":" + std::to_string(port));
    if (::listen(listener.get(), static_cast<int>(backlog)) != 0)
        return os_error("listen HTTP " + ip + ":" + std::to_string(port));
    return listener;
}

}  // namespace

Result<Ok> HttpServer::start(const std::string& ip, uint16_t port, EventLoop* on_loop)
{
    listener_ = VL_TRY(listen_on(ip, port, limits_.listen_backlog));

    // Connections over the limits are still accepted, to be told 503; past this many more the
    // descriptors would run out, and the idle connections make room (evict_idle_connections).
    const rlim_t files = raise_file_limit();
    const uint64_t reserve = std::max<uint64_t>(256, limits_.max_connections / 8);
    uint64_t hard_limit = uint64_t{limits_.max_connections} + reserve;
    if (files > 512 && hard_limit > files - 256) {
        hard_limit = files - 256;
        spdlog::warn("http: the open-file limit ({}) allows {} connections, fewer than "
                     "http_max_connections {} + {} to answer 503 on",
                     files, hard_limit, limits_.max_connections, reserve);
    }

    epoll_ = FileDescriptor(::epoll_create1(EPOLL_CLOEXEC));
    wakeup_ = FileDescriptor(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    hangup_epoll_ = FileDescriptor(::epoll_create1(EPOLL_CLOEXEC));
    if (epoll_.get() < 0 || wakeup_.get() < 0 || hangup_epoll_.get() < 0)
        return os_error("http: epoll/eventfd");

    connection_cap_ = hard_limit;
    unsigned flags =
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO | MHD_USE_NO_LISTEN_SOCKET;
    std::vector<MHD_OptionItem> tls_options;
    if (tls_.on()) {
        if (!MHD_is_feature_supported(MHD_FEATURE_TLS) ||
            !MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK))
            return Error{0, "http: this libmicrohttpd has no TLS (built without GnuTLS)"};
        if (auto loaded = reload_tls(); !loaded.ok()) return loaded.error();
        flags |= MHD_USE_TLS;
        tls_options = {
            {MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
             reinterpret_cast<void*>(&MhdCallbacks::on_certificate)},
            {MHD_OPTION_HTTPS_PRIORITIES, 0, const_cast<char*>(kTlsPriorities)},
        };
    }
    tls_options.push_back({MHD_OPTION_END, 0, nullptr});

    const unsigned idle_seconds = std::max<unsigned>(1, limits_.idle_timeout_ms / 1000);
    shards_.resize((hard_limit + kConnectionsPerShard - 1) / kConnectionsPerShard);
    for (Shard& shard : shards_) {
        // Each may take any number: which one a connection goes to is accept_connections'.
        shard.daemon = MHD_start_daemon(
            flags, 0, nullptr, nullptr,
            reinterpret_cast<MHD_AccessHandlerCallback>(&MhdCallbacks::on_access), this,
            MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(hard_limit),
            MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionPoolBytes,
            MHD_OPTION_URI_LOG_CALLBACK, &MhdCallbacks::on_uri, this,
            MHD_OPTION_NOTIFY_COMPLETED, &MhdCallbacks::on_completed, this,
            MHD_OPTION_NOTIFY_CONNECTION, &MhdCallbacks::on_connection, this,
            MHD_OPTION_ARRAY, tls_options.data(),
            MHD_OPTION_END);
        if (!shard.daemon) return Error{0, "http: libmicrohttpd did not start on " + ip};
        shard.epoll_fd = MHD_get_daemon_info(shard.daemon, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd;
    }

    std::vector<int> watched{listener_.get(), wakeup_.get(), hangup_epoll_.get()};
    for (const Shard& shard : shards_) watched.push_back(shard.epoll_fd);
    for (int fd : watched) {
        epoll_event event{};
        event.events = EPOLLIN;
        event.data.fd = fd;
        if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0)
            return os_error("http: epoll_ctl");
    }
    running_ = true;
    if (!on_loop) {
        thread_ = std::thread([this] { run(); });
        return Ok{};
    }
    on_loop_ = on_loop;
    VL_TRY(on_loop_->watch(epoll_.get(), [this] { pass_on_loop(); }));
    arm_loop_timer();
    return Ok{};
}

void HttpServer::stop()
{
    if (shards_.empty()) return;
    running_ = false;
    if (thread_.joinable()) {
        wake();
        thread_.join();
    }
    // libmicrohttpd must not stop with suspended connections: resume them; not running, they
    // are closed without an answer.
    watch_still_suspended();  // then every suspended exchange is in watched_for_hangup_
    for (auto& [fd, weak] : watched_for_hangup_)
        if (auto exchange = weak.lock();
            exchange && exchange->connection_ && exchange->suspended_) {
            exchange->suspended_ = false;
            MHD_resume_connection(exchange->connection_);
        }
    watched_for_hangup_.clear();
    server_of_this_thread = this;
    for (Shard& shard : shards_) {
        if (!shard.daemon) continue;  // start() failed before it
        MHD_run(shard.daemon);
        MHD_stop_daemon(shard.daemon);
    }
    server_of_this_thread = nullptr;
    shards_.clear();
    listener_ = FileDescriptor();
}

void HttpServer::wake()
{
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t written = ::write(wakeup_.get(), &one, sizeof one);
}

void HttpServer::schedule_resume(const std::shared_ptr<Exchange>& exchange)
{
    bool first = false;
    {
        std::lock_guard lock(resume_mutex_);
        to_resume_.push_back(exchange);
        first = !std::exchange(wake_pending_, true);
    }
    if (!first) return;
    // On the loop's own thread the answers of this turn go out in a pass at its end: no eventfd
    // write and read, and no turn of their own.
    if (on_loop_ && on_loop_->on_loop_thread())
        on_loop_->at_end_of_turn([this] { pass_on_loop(); });
    else
        wake();
}

namespace {
constexpr int kMaxEvents = 32;
// Connections accepted in one pass at most, so that a flood of them cannot hold the loop.
constexpr int kAcceptsPerPass = 64;
// With TLS, libmicrohttpd 0.9.75 asks to be run again at once (timeout 0) for as long as a
// handshake waits for the client's next flight: a busy loop that took 5 ms of CPU per handshake
// and slowed the client sharing the cores. After this many passes in a row with a zero wait and
// no event, a pass waits up to 1 ms instead.
constexpr int kIdlePassesBeforeWaiting = 16;
}  // namespace

int HttpServer::next_wait_ms()
{
    int wait = 200;
    for (const Shard& shard : shards_) {
        if (shard.connections == 0) continue;  // no connection, no timeout
        MHD_UNSIGNED_LONG_LONG mhd_timeout = 0;
        if (MHD_get_timeout(shard.daemon, &mhd_timeout) == MHD_YES)
            wait = std::min(wait, static_cast<int>(std::min<MHD_UNSIGNED_LONG_LONG>(
                                      mhd_timeout, 200)));
    }
    if (wait == 0 && tls_.on() && idle_zero_wait_passes_ >= kIdlePassesBeforeWaiting) wait = 1;
    planned_wait_ms_ = wait;
    return wait;
}

void HttpServer::run()
{
    server_of_this_thread = this;
    epoll_event events[kMaxEvents];
    while (running_) {
        const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, next_wait_ms());
        pass(events, std::max(n, 0));
    }
}

void HttpServer::pass_on_loop()
{
    if (!running_) return;
    server_of_this_thread = this;
    epoll_event events[kMaxEvents];
    // libmicrohttpd wants a second pass at once after most answers (the connection stays on its
    // ready list until a read says EAGAIN): run it here rather than through a timer and a turn
    // of the loop. Bounded, as a TLS handshake can ask for passes for milliseconds.
    constexpr int kPassesAtOnce = 3;
    for (int passes = 0; passes < kPassesAtOnce; passes++) {
        const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, 0);
        pass(events, std::max(n, 0));
        if (next_wait_ms() != 0) break;
    }
    arm_loop_timer();
}

void HttpServer::arm_loop_timer()
{
    const auto due = EventLoop::Clock::now() + std::chrono::milliseconds(next_wait_ms());
    if (loop_timer_ && loop_timer_->first <= due) return;  // that pass arms the next timer
    if (loop_timer_) on_loop_->cancel(*loop_timer_);
    loop_timer_ = on_loop_->after(std::chrono::milliseconds(planned_wait_ms_), [this] {
        loop_timer_.reset();
        pass_on_loop();
    });
}

void HttpServer::pass(const epoll_event* events, int count)
{
    idle_zero_wait_passes_ = count == 0 && planned_wait_ms_ <= 1 ? idle_zero_wait_passes_ + 1 : 0;
    bool hangups_ready = false;  // only then is the hang-up set worth an epoll_wait
    for (int i = 0; i < count; i++) {
        const int fd = events[i].data.fd;
        if (fd == wakeup_.get()) {
            uint64_t value = 0;
            [[maybe_unused]] ssize_t got = ::read(wakeup_.get(), &value, sizeof value);
        } else if (fd == hangup_epoll_.get()) {
            hangups_ready = true;
        } else if (fd == listener_.get()) {
            accept_connections();
        } else {
            for (Shard& shard : shards_)
                if (shard.epoll_fd == fd) shard.run_wanted = true;
        }
    }
    resume_scheduled();
    if (hangups_ready) take_hangups();
    run_shards();
    on_batch_end_();
    if (now_ms() >= next_deadline_check_ms_) {
        if (std::exchange(listener_paused_, false)) {
            epoll_event event{};
            event.events = EPOLLIN;
            event.data.fd = listener_.get();
            ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &event);
        }
        enforce_deadlines();
        watch_still_suspended();
        next_deadline_check_ms_ = now_ms() + 100;
    }
}

void HttpServer::accept_connections()
{
    for (int accepted = 0; accepted < kAcceptsPerPass; accepted++) {
        sockaddr_storage address{};
        socklen_t length = sizeof address;
        const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&address), &length,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                // The socket stays readable: out of epoll until the next deadline check, or
                // every pass would find it so.
                spdlog::warn("http: out of file descriptors: not accepting for 100 ms");
                epoll_event event{};
                event.data.fd = listener_.get();
                ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &event);
                listener_paused_ = true;
            }
            return;  // EAGAIN: all taken; or an error of that connection alone
        }
        if (counters_.connections - evicting_ >= connection_cap_) evict_idle_connections();
        if (counters_.connections - evicting_ >= connection_cap_) {
            ::close(fd);  // every connection is busy: the only silence left (docs/frontend.md)
            continue;
        }
        // The lowest shard with room: a few hundred connections all on the first.
        const auto roomy = std::find_if(shards_.begin(), shards_.end(), [](const Shard& shard) {
            return shard.connections < kConnectionsPerShard;
        });
        Shard& shard = roomy != shards_.end() ? *roomy : shards_.back();
        // On failure libmicrohttpd has closed the socket; it said why on its log.
        if (MHD_add_connection(shard.daemon, fd, reinterpret_cast<sockaddr*>(&address),
                               length) == MHD_YES)
            shard.run_wanted = true;
    }
}

void HttpServer::run_shards()
{
    for (Shard& shard : shards_) {
        MHD_UNSIGNED_LONG_LONG timeout = 1;
        if (!std::exchange(shard.run_wanted, false) &&
            (shard.connections == 0 ||
             !(MHD_get_timeout(shard.daemon, &timeout) == MHD_YES && timeout == 0)))
            continue;
        MHD_run(shard.daemon);
    }
}

void HttpServer::want_run(MHD_Connection* connection)
{
    if (const ConnectionRecord* record = record_of(connection))
        shards_[record->shard].run_wanted = true;
}

void HttpServer::resume_scheduled()
{
    std::vector<std::shared_ptr<Exchange>> batch;
    {
        std::lock_guard lock(resume_mutex_);
        batch.swap(to_resume_);
        wake_pending_ = false;
    }
    for (const auto& exchange : batch)
        if (exchange->connection_ && exchange->suspended_) unsuspend(*exchange);
}

void HttpServer::suspend(Exchange& exchange)
{
    exchange.suspended_ = true;
    counters_.suspended += 1;
    MHD_suspend_connection(exchange.connection_);
    // Most answers come back within milliseconds: watching their sockets for a hang-up would
    // cost two epoll_ctl calls per request for nothing. Those still suspended at the next
    // deadline check (at most 100 ms from now) are watched from then on; EPOLLRDHUP is level-
    // triggered, so a client that left before that is still seen.
    not_yet_watched_.push_back(exchange.weak_from_this());
}

void HttpServer::watch_still_suspended()
{
    for (const auto& weak : not_yet_watched_) {
        const std::shared_ptr<Exchange> exchange = weak.lock();
        if (!exchange || !exchange->connection_ || !exchange->suspended_ ||
            exchange->hangup_watched_)
            continue;
        epoll_event event{};
        event.events = EPOLLRDHUP;
        event.data.fd = exchange->fd_;
        if (::epoll_ctl(hangup_epoll_.get(), EPOLL_CTL_ADD, exchange->fd_, &event) == 0) {
            watched_for_hangup_[exchange->fd_] = weak;
            exchange->hangup_watched_ = true;
        }
    }
    not_yet_watched_.clear();
}

void HttpServer::unwatch(Exchange& exchange)
{
    if (!exchange.hangup_watched_) return;
    ::epoll_ctl(hangup_epoll_.get(), EPOLL_CTL_DEL, exchange.fd_, nullptr);
    watched_for_hangup_.erase(exchange.fd_);
    exchange.hangup_watched_ = false;
}

void HttpServer::unsuspend(Exchange& exchange)
{
    exchange.suspended_ = false;
    counters_.suspended -= 1;
    unwatch(exchange);
    MHD_resume_connection(exchange.connection_);
    want_run(exchange.connection_);
}

void HttpServer::take_hangups()
{
    constexpr int kMaxEvents = 64;
    epoll_event events[kMaxEvents];
    const int n = ::epoll_wait(hangup_epoll_.get(), events, kMaxEvents, 0);
    for (int i = 0; i < n; i++) {
        const auto it = watched_for_hangup_.find(events[i].data.fd);
        if (it == watched_for_hangup_.end()) continue;
        const std::shared_ptr<Exchange> exchange = it->second.lock();
        if (!exchange || !exchange->connection_ || !exchange->suspended_) continue;
        exchange->hung_up_ = true;
        counters_.hung_up += 1;
        std::function<void()> callback;
        std::shared_ptr<Stream> stream;
        {
            std::lock_guard lock(exchange->mutex_);
            callback = std::move(exchange->on_hangup_);
            stream = exchange->stream_;
        }
        if (stream) stream->gone_ = true;
        if (callback) callback();
        // Resumed, libmicrohttpd finds the socket closed and lets the request go.
        unsuspend(*exchange);
    }
}

void HttpServer::enforce_deadlines()
{
    const uint64_t now = now_ms();
    for (auto& [connection, record] : connections_) {
        if (record->deadline_ms == 0 || now < record->deadline_ms) continue;
        // libmicrohttpd reads the end of the stream and closes the connection.
        ::shutdown(record->fd, SHUT_RDWR);
        record->deadline_ms = 0;
        counters_.timed_out += 1;
    }
}

// A flood of idle connections (or of slow ones) cannot keep new clients out: at the cap, the
// connections that have waited longest on their client, idle between requests or still sending
// one, are closed, as nginx reuses its idle keep-alive connections when it runs out. A batch at
// a time, so that a flood costs one walk of the records per batch, not per connection. A
// connection serving a request, a wait or a watch is never closed for room.
void HttpServer::evict_idle_connections()
{
    const size_t batch = std::max<size_t>(1, (connection_cap_ - limits_.max_connections) / 8);
    std::vector<std::pair<uint64_t, ConnectionRecord*>> idle;
    for (auto& [connection, record] : connections_)
        if (record->deadline_ms != 0 && !record->evicted)
            idle.emplace_back(record->waiting_turn, record.get());
    const size_t count = std::min(batch, idle.size());
    std::nth_element(idle.begin(), idle.begin() + static_cast<std::ptrdiff_t>(count), idle.end());
    for (size_t i = 0; i < count; i++) {
        ConnectionRecord& record = *idle[i].second;
        // libmicrohttpd reads the end of the stream and closes the connection.
        ::shutdown(record.fd, SHUT_RDWR);
        record.evicted = true;
        record.deadline_ms = 0;
    }
    evicting_ += count;
    counters_.evicted += count;
}

HttpServer::ConnectionRecord* HttpServer::record_of(MHD_Connection* connection)
{
    const auto it = connections_.find(connection);
    return it == connections_.end() ? nullptr : it->second.get();
}

bool HttpServer::send_answer(Exchange& exchange)
{
    std::optional<HttpResponse> head;
    std::shared_ptr<Stream> stream;
    {
        std::lock_guard lock(exchange.mutex_);
        if (!exchange.response_ || exchange.queued_) return false;
        head = exchange.response_;
        stream = exchange.stream_;
    }
    MHD_Response* response = nullptr;
    // A stream answering HEAD is its headers alone: libmicrohttpd 0.9.75 would still send the
    // chunked body's last chunk, which the client reads as the start of the next answer.
    if (stream && exchange.method != "HEAD") {
        response = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 16 * 1024, &MhdCallbacks::on_read_stream,
            new StreamReader{this, stream, exchange.shared_from_this()},
            &MhdCallbacks::on_free_stream);
    } else {
        response = MHD_create_response_from_buffer(head->body.size(), head->body.data(),
                                                   MHD_RESPMEM_MUST_COPY);
    }
    if (!response) return false;
    if (!head->content_type.empty())
        MHD_add_response_header(response, "Content-Type", head->content_type.c_str());
    for (const auto& [name, value] : head->headers)
        MHD_add_response_header(response, name.c_str(), value.c_str());
    const MHD_Result queued =
        MHD_queue_response(exchange.connection_, static_cast<unsigned>(head->status), response);
    MHD_destroy_response(response);
    exchange.queued_ = queued == MHD_YES;
    return exchange.queued_;
}

// ---- libmicrohttpd's callbacks (I/O thread) ----------------------------------------------------

void MhdCallbacks::on_connection(void* self, MHD_Connection* connection, void**,
                                 MHD_ConnectionNotificationCode event)
{
    auto& server = *static_cast<HttpServer*>(self);
    if (event == MHD_CONNECTION_NOTIFY_STARTED) {
        auto record = std::make_unique<HttpServer::ConnectionRecord>();
        if (const auto* info =
                MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD))
            record->fd = info->connect_fd;
        // GnuTLS sends a handshake flight and an answer's records in several writes, which
        // libmicrohttpd does not cork for TLS: with Nagle, a write behind an unacknowledged
        // one would wait for the client's delayed ACK.
        if (server.tls_.on()) {
            const int one = 1;
            ::setsockopt(record->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        if (const auto* info =
                MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
            info && info->client_addr && info->client_addr->sa_family == AF_INET) {
            char text[INET_ADDRSTRLEN] = {};
            const auto* in = reinterpret_cast<const sockaddr_in*>(info->client_addr);
            ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
            record->address = text;
        }
        const MHD_Daemon* daemon =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_DAEMON)->daemon;
        while (record->shard + 1 < server.shards_.size() &&
               server.shards_[record->shard].daemon != daemon)
            record->shard += 1;
        server.shards_[record->shard].connections += 1;
        const uint32_t from_address = ++server.per_address_[record->address];
        const uint64_t open = ++server.counters_.connections;
        server.counters_.accepted += 1;
        record->over_limit = open - server.evicting_ > server.limits_.max_connections ||
                             from_address > server.limits_.max_connections_per_address;
        record->wait_for_client(server.limits_.header_timeout_ms);
        server.connections_[connection] = std::move(record);
    } else if (event == MHD_CONNECTION_NOTIFY_CLOSED) {
        const auto it = server.connections_.find(connection);
        if (it == server.connections_.end()) return;
        if (it->second->evicted) server.evicting_ -= 1;
        const auto count = server.per_address_.find(it->second->address);
        if (count != server.per_address_.end() && --count->second == 0)
            server.per_address_.erase(count);
        server.counters_.connections -= 1;
        server.shards_[it->second->shard].connections -= 1;
        server.connections_.erase(it);
    }
}

void* MhdCallbacks::on_uri(void* self, const char* uri, MHD_Connection* connection)
{
    auto& server = *static_cast<HttpServer*>(self);
    // The request line is in: its headers have header_timeout_ms from now.
    if (auto* record = server.record_of(connection))
        record->wait_for_client(server.limits_.header_timeout_ms);
    auto* exchange = new std::shared_ptr<Exchange>(new Exchange(server));
    (*exchange)->target = uri ? uri : "";
    // The query is read from this copy of the target (request_target.h), so libmicrohttpd's own
    // reading of it, which follows this callback in its buffer, is emptied. libmicrohttpd 0.9.75
    // keeps each argument in the connection's pool, and when a few hundred of them fill it, it
    // queues a 431 and then overwrites its own state: the client heard nothing until the
    // header timeout.
    if (const size_t query = (*exchange)->target.find('?'); query != std::string::npos)
        const_cast<char*>(uri)[query + 1] = '\0';
    return exchange;
}

MHD_Result MhdCallbacks::on_header(void* headers, MHD_ValueKind, const char* name,
                                   const char* value)
{
    static_cast<std::vector<std::pair<std::string, std::string>>*>(headers)->emplace_back(
        lower(name ? name : ""), value ? value : "");
    return MHD_YES;
}

// The request's headers are in: answered at once if it is refused (over a limit, unsound
// framing, a body too large), else read on.
MHD_Result MhdCallbacks::on_headers(HttpServer& server, Exchange& e, MHD_Connection* connection,
                                    const char* method, const char* url, const char* version,
                                    HttpServer::ConnectionRecord* record)
{
    e.connection_ = connection;
    e.method = method ? method : "";
    keep_a_nul_in_the_request_line(method, url, version, e.method, e.target);
    MHD_get_connection_values(connection, MHD_HEADER_KIND, &MhdCallbacks::on_header, &e.headers);
    // Only a certificate the handshake checked against the client CA names anyone.
    if (!server.tls_.client_ca_file.empty())
        e.client_certificate_cn = client_certificate_cn(connection);
    if (record) {
        e.fd_ = record->fd;
        e.client_address = record->address;
        record->wait_for_client(server.limits_.body_timeout_ms);
    }
    // Refused before the body: it is not kept, and the connection closes after the answer.
    const auto refuse = [&](const ApiError& error) {
        e.refused_ = true;
        HttpResponse refusal = error_response(error);
        refusal.set_header("Connection", "close");
        e.answer(std::move(refusal));
        return server.send_answer(e) ? MHD_YES : MHD_NO;
    };
    if (record && record->over_limit && !server.exempt_(e.target)) {
        server.counters_.refused += 1;
        return refuse(unavailable(
            "too many connections (http_max_connections " +
            std::to_string(server.limits_.max_connections) +
            ", http_max_connections_per_address " +
            std::to_string(server.limits_.max_connections_per_address) +
            "): try again later, on a kept-alive connection"));
    }
    if (auto unframed = framing_error(e.headers)) return refuse(*unframed);
    if (auto hostless = host_error(version ? version : "", e.headers)) return refuse(*hostless);
    const auto length = e.header("content-length");
    if (length && std::strtoull(length->c_str(), nullptr, 10) > server.limits_.max_body_bytes) {
        e.too_large_ = true;
        e.answer(too_large_answer(server.limits_.max_body_bytes));
        return server.send_answer(e) ? MHD_YES : MHD_NO;
    }
    return MHD_YES;
}

MHD_Result MhdCallbacks::on_access(void* self, MHD_Connection* connection, const char* url,
                                   const char* method, const char* version, const char* upload_data,
                                   size_t* upload_size, void** request_context)
{
    auto& server = *static_cast<HttpServer*>(self);
    if (!*request_context) return MHD_NO;
    const std::shared_ptr<Exchange> exchange = **static_cast<std::shared_ptr<Exchange>**>(
        *request_context);
    Exchange& e = *exchange;
    HttpServer::ConnectionRecord* record = server.record_of(connection);

    if (!e.connection_)
        return on_headers(server, e, connection, method, url, version, record);
    if (*upload_size != 0) {
        if (!e.refused_ && !e.too_large_) {
            if (e.body.size() + *upload_size > server.limits_.max_body_bytes) {
                e.too_large_ = true;
                e.answer(too_large_answer(server.limits_.max_body_bytes));
                server.send_answer(e);
            } else {
                e.body.append(upload_data, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (e.queued_) return MHD_YES;
    if (!e.dispatched_) {  // the whole request is in
        e.dispatched_ = true;
        if (record) record->deadline_ms = 0;  // served: no time limit while it waits
        server.on_request_(exchange);
    }
    if (server.send_answer(e)) return MHD_YES;
    if (e.hung_up_ || !server.running_) return MHD_NO;
    server.suspend(e);
    return MHD_YES;
}

void MhdCallbacks::on_completed(void* self, MHD_Connection* connection, void** request_context,
                                MHD_RequestTerminationCode)
{
    auto& server = *static_cast<HttpServer*>(self);
    if (auto* record = server.record_of(connection))
        record->wait_for_client(server.limits_.idle_timeout_ms);
    auto* exchange = static_cast<std::shared_ptr<Exchange>*>(*request_context);
    if (!exchange) return;
    Exchange& e = **exchange;
    if (e.suspended_) {  // cannot happen while suspended, but never leave a stale watch
        server.unwatch(e);
        server.counters_.suspended -= 1;
        e.suspended_ = false;
    }
    std::shared_ptr<Stream> stream;
    {
        std::lock_guard lock(e.mutex_);
        stream = e.stream_;
    }
    // Gone before the answer, or before a stream's end (the connection broke, or the client of a
    // stream left while it was being sent): as good as a hang-up.
    const bool stream_cut = stream && !stream->ended();
    if (stream) stream->gone_ = true;
    if ((!e.queued_ || stream_cut) && !e.hung_up_.exchange(true)) {
        std::function<void()> callback;
        {
            std::lock_guard lock(e.mutex_);
            callback = std::move(e.on_hangup_);
        }
        if (callback) callback();
    }
    e.connection_ = nullptr;
    delete exchange;
    *request_context = nullptr;
}

ssize_t MhdCallbacks::on_read_stream(void* reader, uint64_t, char* out, size_t max)
{
    auto& r = *static_cast<StreamReader*>(reader);
    if (!r.server->running_) return MHD_CONTENT_READER_END_OF_STREAM;
    size_t taken = 0;
    switch (r.stream->take(out, max, taken)) {
    case Stream::Read::data:
        return static_cast<ssize_t>(taken);
    case Stream::Read::end:
        return MHD_CONTENT_READER_END_OF_STREAM;
    case Stream::Read::empty:
        break;
    }
    r.server->suspend(*r.exchange);
    return 0;
}

void MhdCallbacks::on_free_stream(void* reader) { delete static_cast<StreamReader*>(reader); }

int MhdCallbacks::on_certificate(gnutls_session_t session, const gnutls_datum_t*, int,
                                 const gnutls_pk_algorithm_t*, int, gnutls_pcert_st** chain,
                                 unsigned int* chain_length, gnutls_privkey_t* key)
{
    HttpServer* server = server_of_this_thread;
    if (!server) return -1;
    std::lock_guard lock(server->tls_mutex_);
    if (!server->identity_) return -1;
    *chain = server->identity_->chain();
    *chain_length = server->identity_->chain_length();
    *key = server->identity_->key();
    // GnuTLS picks the certificate while it reads the ClientHello, before it asks the client for
    // one: in time to require it.
    if (server->client_trust_) {
        gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUIRE);
        gnutls_session_set_verify_function(session, &MhdCallbacks::on_client_certificate);
    }
    return 0;
}

int MhdCallbacks::on_client_certificate(gnutls_session_t session)
{
    HttpServer* server = server_of_this_thread;
    if (!server) return GNUTLS_E_CERTIFICATE_ERROR;
    std::shared_ptr<const TlsClientTrust> trust;
    {
        std::lock_guard lock(server->tls_mutex_);
        trust = server->client_trust_;
    }
    if (!trust) return 0;
    if (const std::optional<std::string> refusal = trust->refusal(session)) {
        spdlog::info("http: a client certificate refused: {}", *refusal);
        return GNUTLS_E_CERTIFICATE_ERROR;
    }
    return 0;
}

}  // namespace voltlock::api
