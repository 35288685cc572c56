// Issue 12's two HTTP library candidates side by side, on one minimal service served the way
// voltlockd serves its API (docs/frontend.md, "The two candidates, measured"): one thread, its own
// epoll loop, and every write answered at the end of the loop pass it arrived in, as voltlockd
// answers a batch of ops once the batch commits; so the library must hold the request open
// (libmicrohttpd: suspend and resume; h2o: answer later from the loop). Reads are answered at
// once, for the cost of a request the library does not hold.
//
//   vl_http_candidates --library mhd|h2o --port 7490 [--handoff]
//
// --handoff: the HTTP thread hands each pass's writes to a second thread that commits them and
// hands their revisions back (voltlockd's I/O-thread mode, config http_io_threads); without, it
// commits them itself (voltlockd's default: HTTP on the replica's own loop).
//
// Serves, on 127.0.0.1 (HTTP/1.1; h2o also HTTP/2 over cleartext, as h2load speaks it):
//   PUT or POST <any path> with a body:  {"revision":N}; the body becomes an event for every
//       open watch: "id: N\ndata: {"revision":N,"value":<body>}\n\n";
//   GET /watch:  text/event-stream of those events, from the next put on; a reader that falls
//       more than 1 MiB behind is cut (the stream ends), as voltlockd's bounded stream buffer does
//       (h2o keeps a cut watch's record until the server stops: a benchmark's lifetime);
//   GET <any other path>:  {"revision":N}, answered at once (a read).
// Runs until SIGTERM or SIGINT.
#include <arpa/inet.h>
#include <h2o.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

volatile std::sig_atomic_t running = 1;
void on_stop_signal(int) { running = 0; }

constexpr size_t kStreamLimitBytes = 1 << 20;
// A watch's first bytes, before any event (voltlockd's is ": watching from revision N").
constexpr const char* kWatchOpening = ": watching\n\n";

std::string revision_json(uint64_t revision)
{
    return "{\"revision\":" + std::to_string(revision) + "}";
}

// The service both libraries serve: a revision counter and the event each write makes.
struct Service {
    std::atomic<uint64_t> revision{0};

    // Takes `count` new revisions; the first of them.
    uint64_t commit(size_t count) { return revision.fetch_add(count) + 1; }

    // One put's event, in server-sent events framing.
    static std::string event(uint64_t at, const std::string& body)
    {
        return "id: " + std::to_string(at) + "\ndata: {\"revision\":" + std::to_string(at) +
               ",\"value\":" + (body.empty() ? std::string("null") : body) + "}\n\n";
    }
};

// With --handoff, the replica's loop in voltlockd's I/O-thread mode (config http_io_threads):
// the HTTP thread hands it each pass's writes as one batch, and it hands back their revisions,
// one eventfd wake-up each way per batch. Without, the HTTP thread commits them itself, as
// voltlockd does when it parses HTTP on the replica's own loop (its default).
class Core {
public:
    explicit Core(Service& service)
        : service_(service), inbox_fd_(::eventfd(0, EFD_CLOEXEC)),
          answers_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), thread_([this] { run(); })
    {
    }
    ~Core()
    {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake(inbox_fd_);
        thread_.join();
        ::close(inbox_fd_);
        ::close(answers_fd_);
    }
    Core(const Core&) = delete;
    Core& operator=(const Core&) = delete;

    // HTTP thread: a batch of `count` writes.
    void submit(size_t count)
    {
        {
            std::lock_guard lock(mutex_);
            inbox_.push_back(count);
        }
        wake(inbox_fd_);
    }
    // HTTP thread, once answers_fd() is readable: each batch's first revision, in order.
    std::vector<uint64_t> take_answers()
    {
        uint64_t ignored = 0;
        [[maybe_unused]] const ssize_t n = ::read(answers_fd_, &ignored, sizeof ignored);
        std::lock_guard lock(mutex_);
        return std::exchange(outbox_, {});
    }
    int answers_fd() const { return answers_fd_; }

private:
    static void wake(int fd)
    {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
    }

    void run()
    {
        while (true) {
            uint64_t ignored = 0;
            [[maybe_unused]] const ssize_t n = ::read(inbox_fd_, &ignored, sizeof ignored);
            std::vector<size_t> batches;
            {
                std::lock_guard lock(mutex_);
                if (stopping_) return;
                batches.swap(inbox_);
            }
            std::vector<uint64_t> firsts;
            for (const size_t count : batches) firsts.push_back(service_.commit(count));
            {
                std::lock_guard lock(mutex_);
                outbox_.insert(outbox_.end(), firsts.begin(), firsts.end());
            }
            wake(answers_fd_);
        }
    }

    Service& service_;
    std::mutex mutex_;
    std::vector<size_t> inbox_;
    std::vector<uint64_t> outbox_;
    bool stopping_ = false;
    const int inbox_fd_;
    const int answers_fd_;
    std::thread thread_;  // last: it starts once the rest is built
};

// ---- libmicrohttpd: external epoll, suspend/resume (voltlockd's mode) ----

struct MhdWatch {
    MHD_Connection* connection = nullptr;
    std::string pending;
    size_t sent = 0;  // of `pending`: the front libmicrohttpd has taken
    bool suspended = false;
    bool cut = false;
};

struct MhdRequest {
    MHD_Connection* connection = nullptr;
    std::string body;
    bool answered = false;  // the pass it arrived in has ended: its answer can be queued
    std::string answer;
    MhdWatch* watch = nullptr;
};

struct MhdServer {
    Service service;
    std::unique_ptr<Core> core;          // with --handoff
    std::vector<MhdRequest*> suspended;  // writes waiting for the end of the pass
    std::deque<std::vector<MhdRequest*>> at_core;  // batches handed to the core, in order
    std::list<MhdWatch> watches;

    static ssize_t read_watch(void* cls, uint64_t, char* out, size_t max)
    {
        auto* watch = static_cast<MhdWatch*>(cls);
        if (watch->sent == watch->pending.size()) {
            watch->pending.clear();
            watch->sent = 0;
            if (watch->cut || !running) return MHD_CONTENT_READER_END_OF_STREAM;
            // Nothing to send: out of libmicrohttpd's polling until the next event.
            watch->suspended = true;
            MHD_suspend_connection(watch->connection);
            return 0;
        }
        const size_t n = std::min(max, watch->pending.size() - watch->sent);
        std::memcpy(out, watch->pending.data() + watch->sent, n);
        watch->sent += n;
        // The sent front goes once it is at least half: a move per byte sent, at most.
        if (watch->sent * 2 >= watch->pending.size()) {
            watch->pending.erase(0, watch->sent);
            watch->sent = 0;
        }
        return static_cast<ssize_t>(n);
    }

    static MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url,
                                 const char* method, const char*, const char* upload,
                                 size_t* upload_size, void** context)
    {
        auto& server = *static_cast<MhdServer*>(cls);
        auto* request = static_cast<MhdRequest*>(*context);
        if (!request) {
            request = new MhdRequest;
            request->connection = connection;
            *context = request;
            return MHD_YES;
        }
        if (*upload_size > 0) {
            request->body.append(upload, *upload_size);
            *upload_size = 0;
            return MHD_YES;
        }
        const bool write = std::strcmp(method, "PUT") == 0 || std::strcmp(method, "POST") == 0;
        MHD_Response* response = nullptr;
        if (std::strcmp(method, "GET") == 0 && std::strcmp(url, "/watch") == 0) {
            MhdWatch& watch = server.watches.emplace_back();
            watch.connection = connection;
            watch.pending = kWatchOpening;
            request->watch = &watch;
            response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                         &read_watch, &watch, nullptr);
            MHD_add_response_header(response, "Content-Type", "text/event-stream");
        } else if (write && !request->answered) {
            // Stopping, it must not hold a connection (libmicrohttpd would abort).
            if (!running) return MHD_NO;
            MHD_suspend_connection(connection);
            server.suspended.push_back(request);
            return MHD_YES;
        } else {
            const std::string body =
                write ? request->answer : revision_json(server.service.revision);
            response = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                       MHD_RESPMEM_MUST_COPY);
            MHD_add_response_header(response, "Content-Type", "application/json");
        }
        const MHD_Result queued = MHD_queue_response(connection, MHD_HTTP_OK, response);
        MHD_destroy_response(response);
        return queued;
    }

    static void on_completed(void* cls, MHD_Connection*, void** context,
                             MHD_RequestTerminationCode)
    {
        auto& server = *static_cast<MhdServer*>(cls);
        auto* request = static_cast<MhdRequest*>(*context);
        if (!request) return;
        if (request->watch)
            server.watches.remove_if([&](const MhdWatch& w) { return &w == request->watch; });
        delete request;
        *context = nullptr;
    }

    // The end of a pass: the writes that arrived in it are committed as one batch, here or by
    // the core. True if it resumed a connection.
    bool end_pass()
    {
        if (suspended.empty()) return false;
        std::vector<MhdRequest*> batch = std::exchange(suspended, {});
        if (core) {
            core->submit(batch.size());
            at_core.push_back(std::move(batch));
            return false;
        }
        answer(batch, service.commit(batch.size()));
        return true;
    }

    // The batches the core has committed.
    void take_committed()
    {
        for (const uint64_t first : core->take_answers()) {
            answer(at_core.front(), first);
            at_core.pop_front();
        }
    }

    // A committed batch, from revision `first` on: each write is answered and its event goes
    // to every watch.
    void answer(const std::vector<MhdRequest*>& batch, uint64_t first)
    {
        uint64_t at = first;
        for (MhdRequest* request : batch) {
            request->answer = revision_json(at);
            request->answered = true;
            MHD_resume_connection(request->connection);
            const std::string event = Service::event(at, request->body);
            for (MhdWatch& watch : watches) {
                if (watch.cut) continue;
                if (watch.pending.size() - watch.sent + event.size() > kStreamLimitBytes)
                    watch.cut = true;
                else
                    watch.pending += event;
                if (watch.suspended) {
                    watch.suspended = false;
                    MHD_resume_connection(watch.connection);
                }
            }
            at += 1;
        }
    }

    int run(uint16_t port)
    {
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(port);
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        MHD_Daemon* daemon = MHD_start_daemon(
            MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO, port, nullptr, nullptr,
            &on_request, this, MHD_OPTION_SOCK_ADDR, &address,
            MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u,
            MHD_OPTION_CONNECTION_LIMIT, 60000u, MHD_OPTION_NOTIFY_COMPLETED, &on_completed,
            this, MHD_OPTION_END);
        if (!daemon) {
            std::fprintf(stderr, "vl_http_candidates: libmicrohttpd did not start on %u\n", port);
            return 1;
        }
        // libmicrohttpd's epoll set sits inside ours, as in voltlockd: waiting on its set
        // directly would take the edge-triggered events MHD_run needs.
        const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
        const int mhd_epoll = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd;
        epoll_event ready{};
        ready.events = EPOLLIN;
        ::epoll_ctl(epoll, EPOLL_CTL_ADD, mhd_epoll, &ready);
        if (core) {
            ready.data.fd = core->answers_fd();
            ::epoll_ctl(epoll, EPOLL_CTL_ADD, core->answers_fd(), &ready);
        }
        epoll_event events[2];
        while (running) {
            MHD_UNSIGNED_LONG_LONG timeout = 100;
            if (MHD_get_timeout(daemon, &timeout) != MHD_YES || timeout > 100) timeout = 100;
            const int n = ::epoll_wait(epoll, events, 2, static_cast<int>(timeout));
            for (int i = 0; i < n; i++)
                if (core && events[i].data.fd == core->answers_fd()) take_committed();
            MHD_run(daemon);
            // The answers go out in this pass, as voltlockd's do (HttpServer::pass).
            if (end_pass()) MHD_run(daemon);
        }
        // libmicrohttpd must not stop with a connection suspended: the core answers first.
        while (!at_core.empty()) {
            ::epoll_wait(epoll, events, 2, 100);
            take_committed();
        }
        for (MhdWatch& watch : watches)
            if (watch.suspended) MHD_resume_connection(watch.connection);
        MHD_run(daemon);
        MHD_stop_daemon(daemon);
        ::close(epoll);
        return 0;
    }
};

// ---- h2o: its own epoll loop (evloop), answers sent later from the loop ----

struct H2oServer;

struct H2oWrite {
    h2o_req_t* req = nullptr;  // null once the client is gone
    std::string body;
};

struct H2oWatch {
    h2o_generator_t generator{};  // first: h2o hands it back to proceed and stop
    h2o_req_t* req = nullptr;
    H2oServer* server = nullptr;
    std::string pending;
    std::string in_flight;  // what h2o is sending now; it must stay until proceed
    bool sending = false;
    bool cut = false;
};

// What h2o allocates for our handler: its own part first, then ours.
struct H2oHandler {
    h2o_handler_t base;
    H2oServer* server;
};

struct H2oServer {
    using Batch = std::vector<std::shared_ptr<H2oWrite>>;
    Service service;
    std::unique_ptr<Core> core;  // with --handoff
    Batch waiting;               // writes waiting for the end of the pass
    std::deque<Batch> at_core;   // batches handed to the core, in order
    std::list<H2oWatch> watches;

    static void send_json(h2o_req_t* req, const std::string& body)
    {
        req->res.status = 200;
        req->res.reason = "OK";
        // Framed by its length, as libmicrohttpd frames it (h2o chunks an answer sent later).
        req->res.content_length = body.size();
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, nullptr,
                       H2O_STRLIT("application/json"));
        h2o_send_inline(req, body.data(), body.size());
    }

    // Sends what the watch has (once the previous send is done); ends it if it was cut.
    static void flush(H2oWatch& watch)
    {
        if (watch.sending || (watch.pending.empty() && !watch.cut)) return;
        watch.in_flight.swap(watch.pending);
        watch.pending.clear();
        watch.sending = true;
        h2o_iovec_t buffer = h2o_iovec_init(watch.in_flight.data(), watch.in_flight.size());
        h2o_send(watch.req, &buffer, 1,
                 watch.cut ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
    }

    static void on_proceed(h2o_generator_t* generator, h2o_req_t*)
    {
        auto& watch = *reinterpret_cast<H2oWatch*>(generator);
        watch.sending = false;
        watch.in_flight.clear();
        flush(watch);
    }

    static void on_stop(h2o_generator_t* generator, h2o_req_t*)
    {
        auto& watch = *reinterpret_cast<H2oWatch*>(generator);
        watch.server->watches.remove_if([&](const H2oWatch& w) { return &w == &watch; });
    }

    static void on_write_disposed(void* slot)
    {
        auto& write = *static_cast<std::shared_ptr<H2oWrite>*>(slot);
        write->req = nullptr;
        write.~shared_ptr();
    }

    static int on_req(h2o_handler_t* self, h2o_req_t* req)
    {
        H2oServer& server = *reinterpret_cast<H2oHandler*>(self)->server;
        const bool write = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("PUT")) ||
                           h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"));
        if (write) {
            auto pending = std::make_shared<H2oWrite>();
            pending->req = req;
            pending->body.assign(req->entity.base ? req->entity.base : "", req->entity.len);
            // Told when h2o frees the request (its client gone), so its answer is not sent.
            new (h2o_mem_alloc_shared(&req->pool, sizeof(std::shared_ptr<H2oWrite>),
                                      &on_write_disposed)) std::shared_ptr<H2oWrite>(pending);
            server.waiting.push_back(std::move(pending));
            return 0;
        }
        if (h2o_memis(req->path_normalized.base, req->path_normalized.len, H2O_STRLIT("/watch"))) {
            H2oWatch& watch = server.watches.emplace_back();
            watch.generator.proceed = &on_proceed;
            watch.generator.stop = &on_stop;
            watch.req = req;
            watch.server = &server;
            req->res.status = 200;
            req->res.reason = "OK";
            h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, nullptr,
                           H2O_STRLIT("text/event-stream"));
            h2o_start_response(req, &watch.generator);
            watch.pending = kWatchOpening;
            flush(watch);
            return 0;
        }
        send_json(req, revision_json(server.service.revision));
        return 0;
    }

    // The end of a pass: the writes that arrived in it are committed as one batch, here or by
    // the core.
    void end_pass()
    {
        if (waiting.empty()) return;
        Batch batch = std::exchange(waiting, {});
        if (core) {
            core->submit(batch.size());
            at_core.push_back(std::move(batch));
            return;
        }
        answer(batch, service.commit(batch.size()));
    }

    // The core's wake-up, read by h2o's loop: the batches it has committed.
    static void on_committed(h2o_socket_t* socket, const char* error)
    {
        auto& server = *static_cast<H2oServer*>(socket->data);
        h2o_buffer_consume(&socket->input, socket->input->size);
        if (error) return;
        // The eventfd was read by h2o, so only the outbox is left to take.
        for (const uint64_t first : server.core->take_answers()) {
            server.answer(server.at_core.front(), first);
            server.at_core.pop_front();
        }
    }

    // A committed batch, from revision `first` on: each write is answered (if its client is
    // still there) and its event goes to every watch.
    void answer(const Batch& batch, uint64_t first)
    {
        uint64_t at = first;
        for (const std::shared_ptr<H2oWrite>& write : batch) {
            const std::string event = Service::event(at, write->body);
            if (write->req) send_json(write->req, revision_json(at));
            for (H2oWatch& watch : watches) {
                if (watch.cut) continue;
                if (watch.pending.size() + event.size() > kStreamLimitBytes) watch.cut = true;
                else watch.pending += event;
            }
            at += 1;
        }
        for (H2oWatch& watch : watches) flush(watch);
    }

    static void on_accept(h2o_socket_t* listener, const char* error)
    {
        if (error) return;
        // Up to 64 per readiness, as voltlockd accepts.
        for (int i = 0; i < 64; i++) {
            h2o_socket_t* socket = h2o_evloop_socket_accept(listener);
            if (!socket) return;
            h2o_accept(static_cast<h2o_accept_ctx_t*>(listener->data), socket);
        }
    }

    int run(uint16_t port)
    {
        h2o_globalconf_t config;
        h2o_config_init(&config);
        h2o_hostconf_t* host =
            h2o_config_register_host(&config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
        h2o_pathconf_t* path = h2o_config_register_path(host, "/", 0);
        auto* handler = reinterpret_cast<H2oHandler*>(h2o_create_handler(path, sizeof(H2oHandler)));
        handler->base.on_req = &on_req;
        handler->server = this;

        h2o_context_t context;
        h2o_context_init(&context, h2o_evloop_create(), &config);
        h2o_accept_ctx_t accept_context{};
        accept_context.ctx = &context;
        accept_context.hosts = config.hosts;

        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(port);
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
            ::listen(fd, 4096) != 0) {
            std::perror("vl_http_candidates: h2o listen");
            return 1;
        }
        h2o_socket_t* listener =
            h2o_evloop_socket_create(context.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
        listener->data = &accept_context;
        h2o_socket_read_start(listener, &on_accept);
        if (core) {
            h2o_socket_t* committed = h2o_evloop_socket_create(
                context.loop, ::dup(core->answers_fd()), 0);
            committed->data = this;
            h2o_socket_read_start(committed, &on_committed);
        }
        while (running) {
            h2o_evloop_run(context.loop, 100);
            end_pass();
        }
        return 0;
    }
};

}  // namespace

int main(int argc, char** argv)
{
    std::string library;
    uint16_t port = 0;
    bool handoff = false;
    for (int i = 1; i < argc; i++) {
        const std::string flag = argv[i];
        if (flag == "--handoff") handoff = true;
        else if (flag == "--library" && i + 1 < argc) library = argv[++i];
        else if (flag == "--port" && i + 1 < argc)
            port = static_cast<uint16_t>(std::atoi(argv[++i]));
    }
    if ((library != "mhd" && library != "h2o") || port == 0) {
        std::fprintf(stderr,
                     "usage: vl_http_candidates --library mhd|h2o --port PORT [--handoff]\n");
        return 2;
    }
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGPIPE, SIG_IGN);
    auto serve = [&](auto& server) {
        if (handoff) server.core = std::make_unique<Core>(server.service);
        return server.run(port);
    };
    if (library == "mhd") {
        MhdServer server;
        return serve(server);
    }
    H2oServer server;
    return serve(server);
}
