// Closed-loop load on ZooKeeper for the service benchmark (bench/service.py), the same discipline
// as vl_http_load: N clients, each its own session (one connection) with one op outstanding,
// spread round-robin over the given servers, for a fixed time, all driven by one thread. It uses
// Debian's single-threaded C client (libzookeeper_st), whose async API hands the sockets to the
// caller's poll loop, so one thread drives every session as vl_http_load drives every HTTP
// connection; the multithreaded library would run two threads per session (512 at 256 clients).
//
//   vl_zk_load --targets 127.0.0.1:21810,127.0.0.1:21811 --clients 64 --seconds 5
//              --workload put|get|stale_get|lock|lock_one [--lock-name NAME]
//
// One op of each workload (the ZooKeeper client's calls):
//   put        setData of one of 16 znodes of the client (created in setup)
//   get        sync + getData, pipelined on the session (ZooKeeper answers a session's requests
//              in order, so the read sees every write committed before the sync)
//   stale_get  getData (served by the server the session is connected to)
//   lock       the lock recipe, uncontended (a lock node per client): create an ephemeral
//              sequential child, getChildren, ours is the lowest = held; delete it = released
//   lock_one   the same recipe with every client on one lock node (/NAME); a client that is not the
//              lowest watches its predecessor (exists with a watch) and checks again when it goes
// Prints one JSON object: ops, ops_per_s, p50_us, p99_us, max_us, errors, reconnects (0: a
// session is never re-created).
#include <poll.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

enum class Workload { put, get, stale_get, lock, lock_one };

constexpr int znodes_per_client = 16;

struct Client {
    int id = 0;
    zhandle_t* zh = nullptr;
    bool connected = false;
    int setup_pending = 0;  // creates of the setup still unanswered
    bool setup_done = false;
    uint64_t counter = 0;
    Clock::time_point started;
    std::string lock_dir;   // the lock's node (lock, lock_one)
    std::string own_node;   // our ephemeral sequential child's name, while we hold or wait
};

struct Run {
    Workload workload = Workload::put;
    std::string contended_lock_dir = "/bench-lock-one";
    std::vector<Client> clients;
    std::vector<uint64_t> latencies_us;
    bool measuring = false;
    bool closing = false;  // time is up: the answers zookeeper_close cancels are not errors
    uint64_t ops = 0;
    uint64_t errors = 0;
};

Run run;

Client& client_of(const void* data)
{
    return run.clients[static_cast<size_t>(reinterpret_cast<intptr_t>(data))];
}

const void* data_of(const Client& c)
{
    return reinterpret_cast<const void*>(static_cast<intptr_t>(c.id));
}

std::string znode(const Client& c, uint64_t k)
{
    return "/bench-" + std::to_string(c.id) + "-" + std::to_string(k % znodes_per_client);
}

void failed(const char* what, int rc)
{
    if (run.closing) return;
    run.errors += 1;
    if (run.errors <= 3) std::fprintf(stderr, "vl_zk_load: %s: %s\n", what, zerror(rc));
}

void start_op(Client& c);

void op_done(Client& c, bool ok)
{
    if (ok && run.measuring && !run.closing) {
        run.ops += 1;
        run.latencies_us.push_back(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - c.started)
                .count()));
    }
    c.counter += 1;
    start_op(c);
}

// --- put, get, stale_get ---

void stat_answered(int rc, const Stat*, const void* data)
{
    if (rc != ZOK) failed("setData", rc);
    op_done(client_of(data), rc == ZOK);
}

void data_answered(int rc, const char*, int, const Stat*, const void* data)
{
    if (rc != ZOK) failed("getData", rc);
    op_done(client_of(data), rc == ZOK);
}

void sync_answered(int rc, const char*, const void*)
{
    if (rc != ZOK) failed("sync", rc);  // its getData, already sent, finishes the op
}

// --- the lock recipe ---

void check_lock(Client& c);

void deleted(int rc, const void* data)
{
    if (rc != ZOK) failed("delete", rc);
    Client& c = client_of(data);
    c.own_node.clear();
    op_done(c, rc == ZOK);
}

void predecessor_changed(zhandle_t*, int type, int, const char*, void* context)
{
    if (type == ZOO_DELETED_EVENT) check_lock(client_of(context));
}

void predecessor_checked(int rc, const Stat*, const void* data)
{
    // Gone before the watch was set: look again. Otherwise the watch calls check_lock.
    if (rc == ZNONODE) check_lock(client_of(data));
    else if (rc != ZOK) failed("exists", rc);
}

void children_answered(int rc, const String_vector* children, const void* data)
{
    Client& c = client_of(data);
    if (rc != ZOK) {
        failed("getChildren", rc);
        return;
    }
    // Sequential names end in the same-width counter, so name order is sequence order.
    std::vector<std::string> names(children->data, children->data + children->count);
    std::sort(names.begin(), names.end());
    const auto ours = std::find(names.begin(), names.end(), c.own_node);
    if (ours == names.end()) {
        failed("getChildren", ZNONODE);
        return;
    }
    if (ours == names.begin()) {  // held: release it
        const std::string path = c.lock_dir + "/" + c.own_node;
        zoo_adelete(c.zh, path.c_str(), -1, deleted, data_of(c));
        return;
    }
    const std::string predecessor = c.lock_dir + "/" + *(ours - 1);
    zoo_awexists(c.zh, predecessor.c_str(), predecessor_changed,
                 const_cast<void*>(data_of(c)), predecessor_checked, data_of(c));
}

void check_lock(Client& c)
{
    zoo_aget_children(c.zh, c.lock_dir.c_str(), 0, children_answered, data_of(c));
}

void created_lock_node(int rc, const char* path, const void* data)
{
    Client& c = client_of(data);
    if (rc != ZOK) {
        failed("create", rc);
        op_done(c, false);
        return;
    }
    c.own_node = std::string(path).substr(c.lock_dir.size() + 1);
    check_lock(c);
}

void start_op(Client& c)
{
    if (run.closing) return;
    c.started = Clock::now();
    switch (run.workload) {
    case Workload::put:
        zoo_aset(c.zh, znode(c, c.counter).c_str(), "v", 1, -1, stat_answered, data_of(c));
        break;
    case Workload::get:
        zoo_async(c.zh, znode(c, 0).c_str(), sync_answered, data_of(c));
        zoo_aget(c.zh, znode(c, 0).c_str(), 0, data_answered, data_of(c));
        break;
    case Workload::stale_get:
        zoo_aget(c.zh, znode(c, 0).c_str(), 0, data_answered, data_of(c));
        break;
    case Workload::lock:
    case Workload::lock_one: {
        const std::string prefix = c.lock_dir + "/lock-";
        zoo_acreate(c.zh, prefix.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                    created_lock_node, data_of(c));
        break;
    }
    }
}

// --- setup: the znodes each workload needs, created before the clock starts ---

void setup_created(int rc, const char*, const void* data)
{
    Client& c = client_of(data);
    if (rc != ZOK && rc != ZNODEEXISTS) failed("create (setup)", rc);
    if (--c.setup_pending == 0) c.setup_done = true;
}

void start_setup(Client& c)
{
    std::vector<std::string> paths;
    if (run.workload == Workload::lock) {
        c.lock_dir = "/bench-lock-" + std::to_string(c.id);
        paths.push_back(c.lock_dir);
    } else if (run.workload == Workload::lock_one) {
        c.lock_dir = run.contended_lock_dir;
        paths.push_back(c.lock_dir);
    } else {
        for (int k = 0; k < znodes_per_client; k++) paths.push_back(znode(c, k));
    }
    c.setup_pending = static_cast<int>(paths.size());
    for (const auto& path : paths)
        zoo_acreate(c.zh, path.c_str(), "v", 1, &ZOO_OPEN_ACL_UNSAFE, 0, setup_created,
                    data_of(c));
}

void session_event(zhandle_t*, int type, int state, const char*, void* context)
{
    if (type != ZOO_SESSION_EVENT) return;
    Client& c = client_of(context);
    if (state == ZOO_CONNECTED_STATE && !c.connected) {
        c.connected = true;
        start_setup(c);
    } else if (state != ZOO_CONNECTED_STATE) {
        failed("session", ZCONNECTIONLOSS);
    }
}

// Every session's socket in one poll, then each session processes what is ready (and its timers).
void poll_sessions(std::vector<pollfd>& fds)
{
    int timeout_ms = 100;
    for (size_t i = 0; i < fds.size(); i++) {
        int fd = -1, interest = 0;
        timeval tv{};
        zookeeper_interest(run.clients[i].zh, &fd, &interest, &tv);
        fds[i].fd = fd;
        fds[i].events = static_cast<short>(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                           ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0));
        fds[i].revents = 0;
        timeout_ms =
            std::min<int>(timeout_ms, static_cast<int>(tv.tv_sec * 1000 + tv.tv_usec / 1000));
    }
    ::poll(fds.data(), fds.size(), std::max(timeout_ms, 0));
    for (size_t i = 0; i < fds.size(); i++) {
        const short ready = fds[i].revents;
        const int events = ((ready & (POLLIN | POLLERR | POLLHUP)) ? ZOOKEEPER_READ : 0) |
                           ((ready & POLLOUT) ? ZOOKEEPER_WRITE : 0);
        zookeeper_process(run.clients[i].zh, events);
    }
}

// Runs the load; the seconds it measured (0: the setup did not finish).
double drive(double seconds)
{
    // Setup (sessions, znodes) is not measured: the clock starts when every client is set up.
    Clock::time_point measure_start, deadline = Clock::now() + std::chrono::seconds(30);
    std::vector<pollfd> fds(run.clients.size());
    while (Clock::now() < deadline) {
        if (!run.measuring && std::all_of(run.clients.begin(), run.clients.end(),
                                          [](const Client& c) { return c.setup_done; })) {
            run.measuring = true;
            measure_start = Clock::now();
            deadline =
                measure_start + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
            for (Client& c : run.clients) start_op(c);
        }
        poll_sessions(fds);
    }
    if (!run.measuring) return 0;
    return std::chrono::duration<double>(Clock::now() - measure_start).count();
}

void print_result(double elapsed)
{
    auto& lat = run.latencies_us;
    std::sort(lat.begin(), lat.end());
    auto at = [&](double q) -> unsigned long long {
        if (lat.empty()) return 0;
        return lat[std::min(lat.size() - 1, static_cast<size_t>(q * static_cast<double>(
                                                                        lat.size())))];
    };
    std::printf("{\"ops\": %llu, \"ops_per_s\": %.0f, \"p50_us\": %llu, \"p99_us\": %llu, "
                "\"max_us\": %llu, \"errors\": %llu, \"reconnects\": 0}\n",
                (unsigned long long)run.ops,
                elapsed > 0 ? static_cast<double>(run.ops) / elapsed : 0.0, at(0.5), at(0.99),
                (unsigned long long)(lat.empty() ? 0 : lat.back()),
                (unsigned long long)run.errors);
}

bool parse_workload(const std::string& name)
{
    if (name == "put") run.workload = Workload::put;
    else if (name == "get") run.workload = Workload::get;
    else if (name == "stale_get") run.workload = Workload::stale_get;
    else if (name == "lock") run.workload = Workload::lock;
    else if (name == "lock_one") run.workload = Workload::lock_one;
    else return false;
    return true;
}

}  // namespace

int main(int argc, char** argv)
{
    std::vector<std::string> targets;
    int clients = 1;
    double seconds = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--targets") {
            size_t start = 0;
            while (start < value.size()) {
                const size_t comma = std::min(value.find(',', start), value.size());
                targets.push_back(value.substr(start, comma - start));
                start = comma + 1;
            }
        } else if (flag == "--clients") {
            clients = std::atoi(value.c_str());
        } else if (flag == "--seconds") {
            seconds = std::atof(value.c_str());
        } else if (flag == "--lock-name") {
            run.contended_lock_dir = "/" + value;
        } else if (flag == "--workload" && !parse_workload(value)) {
            std::fprintf(stderr, "vl_zk_load: unknown workload %s\n", value.c_str());
            return 2;
        }
    }
    if (targets.empty() || clients < 1) {
        std::fprintf(stderr, "usage: vl_zk_load --targets HOST:PORT[,...] --clients N "
                             "--seconds S --workload put|get|stale_get|lock|lock_one "
                             "[--lock-name NAME]\n");
        return 2;
    }
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    run.clients.resize(static_cast<size_t>(clients));
    for (int i = 0; i < clients; i++) {
        Client& c = run.clients[static_cast<size_t>(i)];
        c.id = i;
        const std::string& host = targets[static_cast<size_t>(i) % targets.size()];
        c.zh = zookeeper_init(host.c_str(), session_event, 30000, nullptr,
                              const_cast<void*>(data_of(c)), 0);
        if (!c.zh) {
            std::perror("vl_zk_load: zookeeper_init");
            return 1;
        }
    }
    const double elapsed = drive(seconds);
    if (!run.measuring) std::fprintf(stderr, "vl_zk_load: the setup did not finish in 30 s\n");
    run.closing = true;
    for (Client& c : run.clients) zookeeper_close(c.zh);  // ends the sessions (and their locks)
    print_result(elapsed);
    return run.measuring ? 0 : 1;
}
