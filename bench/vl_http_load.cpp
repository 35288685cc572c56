// Closed-loop HTTP/1.1 load on kept-alive connections, for the service benchmark (bench/run
// service): N clients, each one connection with one request outstanding, spread round-robin over
// the given endpoints, for a fixed time; one epoll thread, so the client costs little CPU.
// Speaks Voltlock's API and etcd 3.4's JSON gateway (/v3/...), so both are measured the same way.
//
//   vl_http_load --targets 10.77.0.10:7480,10.77.0.11:7480 --clients 64 --seconds 5
//                --workload put|get|stale_get|lock|lock_one|keepalive|lock_read|watch
//                [--system voltlock|etcd]
//                [--lock-name NAME] [--watch-path PATH]
//
// Prints one JSON object: ops, ops_per_s, p50_us, p99_us, max_us, errors, reconnects (a server
// that closed a connection). A lock op is one acquire and its release: `lock` on a lock of its
// own per client (uncontended), `lock_one` with every client on the lock --lock-name (contended:
// Voltlock's acquire waits with wait_ms, etcd's /v3/lock/lock waits by itself). keepalive (a
// session's keepalive) and lock_read (a linearizable GET of a lock the client holds) are
// Voltlock's only. `watch` opens one server-sent events stream per client (GET --watch-path)
// and counts the events that arrive while it runs (ops are events; no latencies); a stream the
// server ends is opened again and counted as a reconnect.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Endpoint {
    sockaddr_in address{};
};

std::string base64(const std::string& in)
{
    static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 |
                           (unsigned char)in[i + 2];
        out += table[v >> 18 & 63], out += table[v >> 12 & 63], out += table[v >> 6 & 63],
            out += table[v & 63];
    }
    if (i + 1 == in.size()) {
        const unsigned v = (unsigned char)in[i] << 16;
        out += table[v >> 18 & 63], out += table[v >> 12 & 63], out += "==";
    } else if (i + 2 == in.size()) {
        const unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
        out += table[v >> 18 & 63], out += table[v >> 12 & 63], out += table[v >> 6 & 63],
            out += '=';
    }
    return out;
}

// The value of "field" in a flat JSON answer: a string's contents or a number's digits.
std::optional<std::string> json_field(const std::string& body, const std::string& field)
{
    const std::string name = "\"" + field + "\":";
    size_t at = body.find(name);
    if (at == std::string::npos) return std::nullopt;
    at += name.size();
    while (at < body.size() && body[at] == ' ') at++;
    if (at < body.size() && body[at] == '"') {
        const size_t end = body.find('"', at + 1);
        if (end == std::string::npos) return std::nullopt;
        return body.substr(at + 1, end - at - 1);
    }
    size_t end = at;
    while (end < body.size() && (std::isdigit((unsigned char)body[end]) || body[end] == '-')) end++;
    if (end == at) return std::nullopt;
    return body.substr(at, end - at);
}

enum class System { voltlock, etcd };
enum class Workload { put, get, stale_get, lock, lock_one, keepalive, lock_read, watch };

struct Client {
    int id = 0;
    int fd = -1;
    std::string out;
    size_t written = 0;
    std::string in;
    Clock::time_point started;
    uint64_t counter = 0;
    // Lock workload: the session or lease, the step (acquire or release), etcd's lock key.
    std::string owner;
    bool holding = false;
    std::string lock_key;
    bool setup_done = false;
    // Watch workload: the stream's body so far, de-chunked and not yet scanned.
    bool chunked = false;
    size_t chunk_left = 0;
    std::string stream;
};

struct Load {
    System system = System::voltlock;
    Workload workload = Workload::put;
    std::string contended_lock_name = "bench-lock-one";
    std::string watch_path = "/v1/watch/bench/?prefix=true";
    std::vector<uint64_t> latencies_us;
    uint64_t errors = 0;

    bool locks() const { return workload == Workload::lock || workload == Workload::lock_one; }
    // Workloads whose client opens a session (an etcd lease) first.
    bool has_session() const
    {
        return locks() || workload == Workload::keepalive || workload == Workload::lock_read;
    }

    std::string request(const std::string& method, const std::string& path,
                        const std::string& body) const
    {
        std::string r = method + " " + path + " HTTP/1.1\r\nHost: bench\r\n";
        if (!body.empty() || method != "GET")
            r += "Content-Type: application/json\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\n";
        return r + "\r\n" + body;
    }

    std::string key(const Client& c) const
    {
        return "bench/" + std::to_string(c.id) + "/" + std::to_string(c.counter % 16);
    }

    // The next request of client `c` (setup first, where the workload needs it).
    std::string next(Client& c) const
    {
        const bool etcd = system == System::etcd;
        if (!c.setup_done && workload != Workload::watch) {
            if (workload == Workload::lock_read && !c.owner.empty())  // then a lock to read
                return request("POST", "/v1/locks/bench-lock-" + c.owner + ":acquire",
                               R"({"session":)" + c.owner + "}");
            if (has_session())
                return etcd ? request("POST", "/v3/lease/grant", R"({"TTL": 120})")
                            : request("POST", "/v1/sessions", R"({"ttl_ms": 120000})");
            // Reads need the key to be there: one put first.
            return etcd ? request("POST", "/v3/kv/put",
                                  R"({"key":")" + base64(key(c)) + R"(","value":"dg=="})")
                        : request("PUT", "/v1/kv/" + key(c), R"({"value":"v"})");
        }
        switch (workload) {
        case Workload::put:
            return etcd ? request("POST", "/v3/kv/put",
                                  R"({"key":")" + base64(key(c)) + R"(","value":"dg=="})")
                        : request("PUT", "/v1/kv/" + key(c), R"({"value":"v"})");
        case Workload::get:
        case Workload::stale_get: {
            const bool stale = workload == Workload::stale_get;
            Client first = c;
            first.counter = 0;
            if (etcd)
                return request("POST", "/v3/kv/range",
                               R"({"key":")" + base64(key(first)) + "\"" +
                                   (stale ? R"(,"serializable":true)" : "") + "}");
            return request("GET", "/v1/kv/" + key(first) + (stale ? "?stale=true" : ""), "");
        }
        case Workload::keepalive:
            return request("POST", "/v1/sessions/" + c.owner + ":keepalive", "");
        case Workload::watch:
            return request("GET", watch_path, "");
        case Workload::lock_read:
            return request("GET", "/v1/locks/bench-lock-" + c.owner, "");
        case Workload::lock:
        case Workload::lock_one: {
            // Uncontended: named after the session (lease), so a lock left held by an earlier
            // run against the same cell (its session still alive) is never this client's.
            const bool contended = workload == Workload::lock_one;
            const std::string name = contended ? contended_lock_name : "bench-lock-" + c.owner;
            if (etcd)
                return c.holding ? request("POST", "/v3/lock/unlock",
                                           R"({"key":")" + c.lock_key + "\"}")
                                 : request("POST", "/v3/lock/lock",
                                           R"({"name":")" + base64(name) + R"(","lease":")" +
                                               c.owner + "\"}");
            if (c.holding)
                return request("POST", "/v1/locks/" + name + ":release",
                               R"({"session":)" + c.owner + "}");
            return request("POST", "/v1/locks/" + name + ":acquire",
                           R"({"session":)" + c.owner +
                               (contended ? R"(,"wait_ms":60000})" : "}"));
        }
        }
        return {};
    }

    // Takes client `c`'s answer; true if it counts as one finished op.
    bool answered(Client& c, int status, const std::string& body)
    {
        const bool ok =
            status == 200 || status == 201 || (status == 404 && system == System::voltlock);
        if (!ok) {
            errors += 1;
            if (errors <= 3) std::fprintf(stderr, "vl_http_load: %d %s\n", status, body.c_str());
        }
        if (!c.setup_done) {
            if (workload == Workload::lock_read && !c.owner.empty()) {  // the lock, acquired
                c.setup_done = ok;
                return false;
            }
            if (has_session()) {
                auto owner = json_field(body, system == System::etcd ? "ID" : "session");
                if (!owner) return false;
                c.owner = *owner;
                if (workload == Workload::lock_read) return false;
            }
            c.setup_done = ok;
            return false;
        }
        c.counter += 1;
        if (!locks()) return ok;
        if (!c.holding) {
            if (!ok) return false;
            if (system == System::etcd) c.lock_key = json_field(body, "key").value_or("");
            c.holding = true;
            return false;
        }
        c.holding = false;
        return ok;
    }
};

// The head of the response at the front of `in`, which ends at `head_end`.
struct ResponseHead {
    int status = 0;
    std::string lowered;  // the head in lower case, to find header names in
    bool chunked = false;
};

ResponseHead read_head(const std::string& in, size_t head_end)
{
    ResponseHead head;
    head.status = std::atoi(in.c_str() + in.find(' ') + 1);
    head.lowered = in.substr(0, head_end);
    for (char& ch : head.lowered) ch = static_cast<char>(std::tolower((unsigned char)ch));
    head.chunked = head.lowered.find("transfer-encoding: chunked") != std::string::npos;
    return head;
}

// Parses one whole response at the front of `in`; nullopt while incomplete.
std::optional<std::pair<int, std::string>> take_response(std::string& in)
{
    const size_t head_end = in.find("\r\n\r\n");
    if (head_end == std::string::npos) return std::nullopt;
    const ResponseHead head = read_head(in, head_end);
    const int status = head.status;
    const size_t body_at = head_end + 4;
    if (head.chunked) {
        std::string body;
        size_t at = body_at;
        while (true) {
            const size_t line_end = in.find("\r\n", at);
            if (line_end == std::string::npos) return std::nullopt;
            const size_t size = std::strtoul(in.c_str() + at, nullptr, 16);
            if (in.size() < line_end + 2 + size + 2) return std::nullopt;
            if (size == 0) {
                in.erase(0, line_end + 4);
                return std::make_pair(status, body);
            }
            body.append(in, line_end + 2, size);
            at = line_end + 2 + size + 2;
        }
    }
    size_t length = 0;
    if (const size_t at = head.lowered.find("content-length:"); at != std::string::npos)
        length = std::strtoul(head.lowered.c_str() + at + 15, nullptr, 10);
    if (in.size() < body_at + length) return std::nullopt;
    std::string body = in.substr(body_at, length);
    in.erase(0, body_at + length);
    return std::make_pair(status, body);
}

// Moves the payload of the chunked body at the front of `c.in` to `out`, as far as it has
// arrived; the chunk framing stays out of it (it could split an event's marker).
void dechunk(Client& c, std::string& out)
{
    size_t at = 0;
    while (at < c.in.size()) {
        if (c.chunk_left > 0) {
            const size_t n = std::min(c.chunk_left, c.in.size() - at);
            out.append(c.in, at, n);
            at += n;
            c.chunk_left -= n;
            continue;
        }
        // A chunk-size line, or the empty line that ends a chunk's data.
        const size_t line_end = c.in.find("\r\n", at);
        if (line_end == std::string::npos) break;
        if (line_end > at) c.chunk_left = std::strtoul(c.in.c_str() + at, nullptr, 16);
        at = line_end + 2;
    }
    c.in.erase(0, at);
}

// A watch stream's bytes: its head (once), then how many events arrived ("data:" lines).
uint64_t take_events(Client& c, Load& load)
{
    if (!c.setup_done) {
        const size_t head_end = c.in.find("\r\n\r\n");
        if (head_end == std::string::npos) return 0;
        const ResponseHead head = read_head(c.in, head_end);
        if (head.status != 200) {
            load.errors += 1;
            if (load.errors <= 3) std::fprintf(stderr, "vl_http_load: %s\n", c.in.c_str());
        }
        c.chunked = head.chunked;
        c.chunk_left = 0;
        c.stream.clear();
        c.in.erase(0, head_end + 4);
        c.setup_done = true;
    }
    if (c.chunked) {
        dechunk(c, c.stream);
    } else {
        c.stream += c.in;
        c.in.clear();
    }
    constexpr std::string_view marker = "data:";
    uint64_t events = 0;
    size_t at = 0, consumed = 0;
    while ((at = c.stream.find(marker, at)) != std::string::npos) {
        events += 1;
        at += marker.size();
        consumed = at;
    }
    // Keeps only the bytes that may begin a marker the next read completes.
    c.stream.erase(0, std::max(consumed, c.stream.size() -
                                             std::min(c.stream.size(), marker.size() - 1)));
    return events;
}

// "IP:PORT,IP:PORT,..."
std::vector<Endpoint> parse_endpoints(const std::string& list)
{
    std::vector<Endpoint> endpoints;
    size_t start = 0;
    while (start < list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        const std::string one = list.substr(start, comma - start);
        const size_t colon = one.find(':');
        Endpoint e;
        e.address.sin_family = AF_INET;
        e.address.sin_port = htons(static_cast<uint16_t>(std::atoi(one.c_str() + colon + 1)));
        ::inet_pton(AF_INET, one.substr(0, colon).c_str(), &e.address.sin_addr);
        endpoints.push_back(e);
        start = comma + 1;
    }
    return endpoints;
}

std::optional<Workload> parse_workload(const std::string& name)
{
    if (name == "put") return Workload::put;
    if (name == "get") return Workload::get;
    if (name == "stale_get") return Workload::stale_get;
    if (name == "lock") return Workload::lock;
    if (name == "lock_one") return Workload::lock_one;
    if (name == "keepalive") return Workload::keepalive;
    if (name == "lock_read") return Workload::lock_read;
    if (name == "watch") return Workload::watch;
    return std::nullopt;
}

int connect_to(const Endpoint& endpoint)
{
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&endpoint.address),
                  sizeof endpoint.address) != 0) {
        std::perror("vl_http_load: connect");
        std::exit(1);
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// Client `c`'s connection to its endpoint (round-robin by id), watched by `epoll`.
void connect_client(Client& c, int epoll, const std::vector<Endpoint>& endpoints)
{
    c.fd = connect_to(endpoints[static_cast<size_t>(c.id) % endpoints.size()]);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = static_cast<uint32_t>(c.id);
    ::epoll_ctl(epoll, EPOLL_CTL_ADD, c.fd, &event);
}

// Lock workloads end their sessions (etcd: revoke their leases), so no lock this run held or
// waited for outlives it: the next run finds a quiet server. Each on a fresh connection, since
// the client's own may still wait for a lock.
void end_sessions(const Load& load, const std::vector<Client>& all,
                  const std::vector<Endpoint>& endpoints)
{
    for (const Client& c : all) {
        if (c.owner.empty()) continue;
        const int fd = connect_to(endpoints[static_cast<size_t>(c.id) % endpoints.size()]);
        const timeval timeout{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        const std::string out =
            load.system == System::etcd
                ? load.request("POST", "/v3/lease/revoke", R"({"ID":")" + c.owner + "\"}")
                : load.request("DELETE", "/v1/sessions/" + c.owner, "");
        ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
        std::string in;
        char buffer[4096];
        while (!take_response(in)) {
            const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
            if (got <= 0) break;
            in.append(buffer, static_cast<size_t>(got));
        }
        ::close(fd);
    }
}

}  // namespace

int main(int argc, char** argv)
{
    std::vector<Endpoint> endpoints;
    int clients = 1;
    double seconds = 5;
    Load load;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--targets") {
            endpoints = parse_endpoints(value);
        } else if (flag == "--clients") {
            clients = std::atoi(value.c_str());
        } else if (flag == "--seconds") {
            seconds = std::atof(value.c_str());
        } else if (flag == "--system") {
            load.system = value == "etcd" ? System::etcd : System::voltlock;
        } else if (flag == "--lock-name") {
            load.contended_lock_name = value;
        } else if (flag == "--watch-path") {
            load.watch_path = value;
        } else if (flag == "--workload") {
            const auto workload = parse_workload(value);
            if (!workload) {
                std::fprintf(stderr, "vl_http_load: unknown workload %s\n", value.c_str());
                return 2;
            }
            load.workload = *workload;
        }
    }
    if (endpoints.empty()) {
        std::fprintf(stderr, "usage: vl_http_load --targets IP:PORT[,...] --clients N --seconds S "
                             "--workload put|get|stale_get|lock|lock_one|keepalive|lock_read|watch "
                             "[--system etcd] [--lock-name NAME] [--watch-path PATH]\n");
        return 2;
    }

    const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
    std::vector<Client> all(static_cast<size_t>(clients));
    auto send_next = [&](Client& c) {
        c.out = load.next(c);
        c.written = 0;
        c.started = Clock::now();
        const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0) c.written = static_cast<size_t>(n);
    };
    for (int i = 0; i < clients; i++) {
        Client& c = all[static_cast<size_t>(i)];
        c.id = i;
        connect_client(c, epoll, endpoints);
        send_next(c);
    }
    // Setup (sessions, first puts) is not measured: the clock starts when every client is set up.
    bool measuring = false;
    Clock::time_point measure_start, deadline = Clock::now() + std::chrono::seconds(30);
    uint64_t ops = 0;
    uint64_t reconnects = 0;
    std::vector<epoll_event> events(256);
    char buffer[65536];
    while (Clock::now() < deadline) {
        if (!measuring &&
            std::all_of(all.begin(), all.end(), [](const Client& c) { return c.setup_done; })) {
            measuring = true;
            measure_start = Clock::now();
            deadline =
                measure_start + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
        }
        const int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), 100);
        for (int k = 0; k < n; k++) {
            Client& c = all[events[static_cast<size_t>(k)].data.u32];
            const ssize_t got = ::recv(c.fd, buffer, sizeof buffer, 0);
            if (got <= 0) {
                // The server closed the connection (it may not keep it alive): connect again
                // and send the request that was in flight once more.
                reconnects += 1;
                ::epoll_ctl(epoll, EPOLL_CTL_DEL, c.fd, nullptr);
                ::close(c.fd);
                connect_client(c, epoll, endpoints);
                c.in.clear();
                if (load.workload == Workload::watch) c.setup_done = false;
                const ssize_t sent = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
                c.written = sent > 0 ? static_cast<size_t>(sent) : 0;
                continue;
            }
            c.in.append(buffer, static_cast<size_t>(got));
            if (load.workload == Workload::watch) {
                const uint64_t arrived = take_events(c, load);
                if (measuring) ops += arrived;
                continue;
            }
            while (auto response = take_response(c.in)) {
                const auto took = std::chrono::duration_cast<std::chrono::microseconds>(
                    Clock::now() - c.started);
                if (load.answered(c, response->first, response->second) && measuring) {
                    ops += 1;
                    load.latencies_us.push_back(static_cast<uint64_t>(took.count()));
                }
                if (load.locks() && c.holding) {
                    // The latency of a lock op runs from the acquire to the release's answer.
                    const auto acquired_at = c.started;
                    send_next(c);
                    c.started = acquired_at;
                } else {
                    send_next(c);
                }
            }
        }
    }
    const double elapsed =
        measuring ? std::chrono::duration<double>(Clock::now() - measure_start).count() : 0;
    for (const Client& c : all) ::close(c.fd);
    end_sessions(load, all, endpoints);
    std::sort(load.latencies_us.begin(), load.latencies_us.end());
    auto at = [&](double q) -> uint64_t {
        if (load.latencies_us.empty()) return 0;
        return load.latencies_us[std::min(
            load.latencies_us.size() - 1,
            static_cast<size_t>(q * static_cast<double>(load.latencies_us.size())))];
    };
    std::printf("{\"ops\": %llu, \"ops_per_s\": %.0f, \"p50_us\": %llu, \"p99_us\": %llu, "
                "\"max_us\": %llu, \"errors\": %llu, \"reconnects\": %llu}\n",
                (unsigned long long)ops, elapsed > 0 ? static_cast<double>(ops) / elapsed : 0.0,
                (unsigned long long)at(0.5), (unsigned long long)at(0.99),
                (unsigned long long)(load.latencies_us.empty() ? 0 : load.latencies_us.back()),
                (unsigned long long)load.errors, (unsigned long long)reconnects);
    return 0;
}
