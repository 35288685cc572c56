// Connections and limits: the HTTP/1.1 server under the API, event-driven on epoll (issue 12).
//
// libmicrohttpd parses HTTP (keep-alive, pipelining, chunked bodies) in external-epoll mode on
// ONE I/O thread of ours: no thread per connection. A request whose headers and body have
// arrived is an Exchange, handed to the `on_request` callback on the I/O thread; at the end of
// each pass over the ready sockets `on_batch_end` runs, so the router can hand everything that
// arrived together to the replica's event loop with one wake-up. An exchange that is not
// answered at once is suspended: it costs its record and its socket, nothing else, until
// answer() (from any thread) queues it back to the I/O thread, again one wake-up per batch.
//
// Limits that protect the cell (docs/frontend.md): a total and a per-address connection cap
// (a connection over either gets 503 with Retry-After and Connection: close on its first
// request; /healthz and /readyz are still answered), a time to send each request's headers and
// body (slowloris), an idle time between requests, a bounded buffer per stream, and a listen
// backlog that does not drop bursts of SYNs. While an exchange is suspended its socket is watched
// for the client's hang-up (libmicrohttpd does not look at suspended sockets): the owner of the
// exchange learns of it (on_hangup) and can withdraw what the client was waiting for.
//
// TLS (docs/security-tls.md): libmicrohttpd's GnuTLS, TLS 1.2+ (shell/tls.h's priorities). The
// certificate comes from a callback at each handshake, so reload_tls() (SIGHUP) puts a new one
// in place for the next handshake while connections already open keep theirs. With a client
// CA, a client must present a certificate of it, or the handshake fails.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/stream_buffer.h"
#include "shell/event_loop.h"
#include "shell/result.h"
#include "shell/tls.h"

struct MHD_Daemon;
struct MHD_Connection;
struct epoll_event;

namespace voltlock::api {

class HttpServer;
struct MhdCallbacks;

// The config's http_* keys (shell/config.h has the defaults).
struct HttpLimits {
    uint32_t max_connections = 0;
    uint32_t max_connections_per_address = 0;
    uint32_t max_streams = 0;  // watches and lock/barrier waits held open at once
    uint32_t listen_backlog = 0;
    uint32_t header_timeout_ms = 0;  // from the request line (or connect) to the last header
    uint32_t body_timeout_ms = 0;    // from the last header to the last body byte
    uint32_t idle_timeout_ms = 0;    // a kept-alive connection between requests
    uint32_t max_body_bytes = 0;
    uint32_t stream_buffer_bytes = 0;  // per watch stream: a reader further behind is cut
};

// The config's tls_* keys the server uses; TLS is on when cert_file is set.
struct HttpTls {
    std::string cert_file;
    std::string key_file;
    std::string client_ca_file;  // set: mTLS

    bool on() const { return !cert_file.empty(); }
};

// Whether two ASCII strings are equal with case ignored: header names (RFC 9110 5.1), the
// Authorization scheme. Compares in place, with no lower-cased copies.
bool equal_ignoring_case(std::string_view a, std::string_view b);

struct HttpResponse {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;

    void set_header(std::string name, std::string value);
};

// The bytes of one streamed answer (server-sent events), produced on the replica's loop and
// sent by the I/O thread as the client reads them. Bounded (StreamBuffer): a producer asks
// has_room() first, and is told (on_drained) when a full buffer has been sent.
class Stream {
public:
    // StreamBuffer::has_room; if not, `on_drained` runs (I/O thread) once it is all sent.
    bool has_room();
    void on_drained(std::function<void()> callback);
    // StreamBuffer::push: false (nothing added, the buffer full) when it does not fit.
    bool push(std::string_view bytes);
    // Adds `last` whatever the limit, and ends the stream once it is sent.
    void end(std::string_view last = {});
    bool ended() const;
    // The client hung up, or the stream ended: the producer can forget it.
    bool finished() const;
    // Steady-clock milliseconds of the last push, for heartbeats.
    uint64_t last_push_ms() const;

private:
    friend class HttpServer;
    friend struct MhdCallbacks;
    friend class Exchange;
    Stream(HttpServer& server, std::weak_ptr<class Exchange> exchange, size_t limit);
    // The I/O thread's side: copies out up to `max` bytes; 0 and suspended=true when empty.
    enum class Read { data, empty, end };
    Read take(char* out, size_t max, size_t& taken);

    HttpServer& server_;
    std::weak_ptr<Exchange> exchange_;
    mutable std::mutex mutex_;
    StreamBuffer buffer_;
    bool ended_ = false;
    bool waiting_ = false;  // the I/O thread found it empty and suspended the connection
    std::function<void()> on_drained_;
    std::atomic<bool> gone_{false};
    uint64_t last_push_ms_ = 0;
};

// One request and its answer. The request fields are set on the I/O thread before the exchange
// is handed on, and never change after; answer() and stream() may be called from any thread,
// once (a later call is ignored).
class Exchange : public std::enable_shared_from_this<Exchange> {
public:
    std::string method;
    std::string target;  // as sent: path and query, still percent-encoded
    std::string body;
    std::string client_address;
    // With mTLS: the CN of the client certificate the handshake verified (an identity for auth).
    std::optional<std::string> client_certificate_cn;
    std::vector<std::pair<std::string, std::string>> headers;  // names in lower case

    std::optional<std::string> header(std::string_view name) const;  // any case

    void answer(HttpResponse response);
    // Answers with `head` (status, type, headers) and a body that streams from the result.
    std::shared_ptr<Stream> stream(HttpResponse head);
    bool answered() const;
    // Runs (on the I/O thread) if the client hangs up before the answer was sent, or a stream's
    // before the stream ended, once.
    void on_hangup(std::function<void()> callback);
    bool hung_up() const { return hung_up_.load(); }

private:
    friend class HttpServer;
    friend struct MhdCallbacks;
    friend class Stream;
    explicit Exchange(HttpServer& server) : server_(server) {}

    HttpServer& server_;
    mutable std::mutex mutex_;
    std::optional<HttpResponse> response_;
    std::shared_ptr<Stream> stream_;
    std::function<void()> on_hangup_;
    std::atomic<bool> hung_up_{false};
    // I/O thread only.
    MHD_Connection* connection_ = nullptr;  // null once libmicrohttpd is done with the request
    bool dispatched_ = false;
    bool suspended_ = false;
    bool hangup_watched_ = false;  // its socket is in the hang-up epoll set
    bool queued_ = false;
    bool refused_ = false;  // answered before its body (503 over a limit, 400 bad framing)
    bool too_large_ = false;
    int fd_ = -1;
};

struct HttpServerCounters {
    std::atomic<uint64_t> connections{0};  // open now
    std::atomic<uint64_t> accepted{0};
    std::atomic<uint64_t> refused{0};    // 503: over a connection limit
    std::atomic<uint64_t> timed_out{0};  // closed: headers, body or idle time ran out
    std::atomic<uint64_t> evicted{0};    // idle, closed to make room at the connection cap
    std::atomic<uint64_t> hung_up{0};    // clients gone while their request waited
    std::atomic<uint64_t> suspended{0};  // exchanges waiting for an answer or stream bytes now
};

// The most connections on one libmicrohttpd daemon before the next is used (HttpServer::Shard).
inline constexpr uint32_t kConnectionsPerShard = 512;

class HttpServer {
public:
    using OnRequest = std::function<void(const std::shared_ptr<Exchange>&)>;
    using OnBatchEnd = std::function<void()>;
    // Paths answered even on a connection over a limit.
    using Exempt = std::function<bool(std::string_view target)>;

    HttpServer(HttpLimits limits, HttpTls tls, OnRequest on_request, OnBatchEnd on_batch_end,
               Exempt exempt);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Serves on `ip`:`port` from an I/O thread of its own, or, with `on_loop`, on that event
    // loop's thread (config http_io_thread false): no hand-off between threads per request, at
    // the price of parsing HTTP on the thread that runs the replica.
    Result<Ok> start(const std::string& ip, uint16_t port, EventLoop* on_loop);
    void stop();
    // Loads the certificate, key and client CA again, for handshakes from now on; on an error
    // the ones in use stay (and the error says why). Any thread.
    Result<Ok> reload_tls();

    const HttpLimits& limits() const { return limits_; }
    const HttpServerCounters& counters() const { return counters_; }

private:
    friend class Exchange;
    friend class Stream;
    friend struct MhdCallbacks;
    struct ConnectionRecord;

    void run();  // the own I/O thread
    // One pass over what is ready: `events` from epoll_, then libmicrohttpd and the batch end.
    void pass(const ::epoll_event* events, int count);
    // Accepts what the listening socket holds, each onto a shard (below).
    void accept_connections();
    // Runs libmicrohttpd on each shard with something to do: an event, a resumed connection, a
    // new one, or a timeout due.
    void run_shards();
    // How long the next wait may last before libmicrohttpd needs a pass (its timeouts, a
    // connection on its ready list, a TLS handshake under way), in milliseconds.
    int next_wait_ms();
    // On the replica's loop: a pass when epoll_ is readable or the time of next_wait_ms() is up.
    void pass_on_loop();
    void arm_loop_timer();
    void wake();
    // Any thread: the exchange has an answer or stream bytes; the I/O thread resumes it.
    void schedule_resume(const std::shared_ptr<Exchange>& exchange);
    void resume_scheduled();
    void take_hangups();
    void enforce_deadlines();
    // At connection_cap_: closes the connections that have waited longest on their client, to
    // make room for new ones (accept_connections).
    void evict_idle_connections();
    void suspend(Exchange& exchange);
    void unsuspend(Exchange& exchange);
    void watch_still_suspended();  // puts exchanges suspended since the last check in the set
    void unwatch(Exchange& exchange);
    // Queues the exchange's answer (or stream) on its connection.
    bool send_answer(Exchange& exchange);
    ConnectionRecord* record_of(MHD_Connection* connection);
    // The shard that a connection's resumption must run (via its record).
    void want_run(MHD_Connection* connection);

    const HttpLimits limits_;
    const HttpTls tls_;
    // What handshakes use now. Each identity loaded stays alive until the server stops, as a
    // handshake under way may still point into an older one (a few KB per reload).
    std::mutex tls_mutex_;
    std::shared_ptr<const TlsIdentity> identity_;
    std::shared_ptr<const TlsClientTrust> client_trust_;
    std::vector<std::shared_ptr<const TlsIdentity>> earlier_identities_;
    OnRequest on_request_;
    OnBatchEnd on_batch_end_;
    Exempt exempt_;
    // libmicrohttpd walks all of a daemon's suspended connections whenever it resumes any one
    // (resume_suspended_connections, 0.9.75 to 1.0): with 10,000 watches or waits held, every
    // answer's pass walked 10,000. So the connections are spread over daemons ("shards") of at
    // most kConnectionsPerShard each, filled lowest first: a few hundred connections are all
    // on one, as with a single daemon, and a pass walks the suspended ones of its shard only.
    // The listening socket is ours; each accepted connection goes to its shard with
    // MHD_add_connection.
    struct Shard {
        MHD_Daemon* daemon = nullptr;
        int epoll_fd = -1;  // libmicrohttpd's own, in epoll_
        uint32_t connections = 0;
        bool run_wanted = false;
    };
    std::vector<Shard> shards_;
    FileDescriptor listener_;
    uint64_t connection_cap_ = 0;  // at it, idle connections make room for new ones
    uint64_t evicting_ = 0;        // closed for room, not yet gone (I/O thread only)
    bool listener_paused_ = false;  // out of descriptors: accepting again at the next check
    FileDescriptor epoll_;
    FileDescriptor wakeup_;        // eventfd: answers are queued
    FileDescriptor hangup_epoll_;  // suspended exchanges' sockets, for EPOLLRDHUP
    std::atomic<bool> running_{false};
    std::thread thread_;
    EventLoop* on_loop_ = nullptr;  // set: passes run on this loop, not on thread_
    // On the loop: the timer of the next pass (one at a time; an earlier one replaces it).
    std::optional<EventLoop::TimerId> loop_timer_;
    HttpServerCounters counters_;

    std::mutex resume_mutex_;
    std::vector<std::shared_ptr<Exchange>> to_resume_;
    bool wake_pending_ = false;  // under resume_mutex_: one eventfd write per batch

    // I/O thread only.
    std::unordered_map<MHD_Connection*, std::unique_ptr<ConnectionRecord>> connections_;
    std::unordered_map<std::string, uint32_t> per_address_;
    std::unordered_map<int, std::weak_ptr<Exchange>> watched_for_hangup_;  // by socket
    std::vector<std::weak_ptr<Exchange>> not_yet_watched_;  // suspended since the last check
    uint64_t next_deadline_check_ms_ = 0;
    // With TLS, passes in a row that planned no wait and found nothing (next_wait_ms()).
    int idle_zero_wait_passes_ = 0;
    int planned_wait_ms_ = 0;
};

}  // namespace voltlock::api
