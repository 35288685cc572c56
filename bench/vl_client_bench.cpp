// libvoltlock against raw keep-alive HTTP, side by side (issue 14's measurement).
//
//   vl_client_bench ENDPOINT [--threads 1,16] [--seconds 5]
//
// For each thread count: put (one key per thread) and lock+unlock (one session and one lock per
// thread), first through the library, then with one kept-alive cpp-httplib connection per
// thread sending the same requests by hand. Prints operations per second and latency
// percentiles, and the library's throughput as a share of raw HTTP's. ENDPOINT should be the
// leader, so neither side pays for forwarding.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "voltlock.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
    double ops_per_second = 0;
    double p50_us = 0, p99_us = 0;
    long errors = 0;
};

// Runs op(thread, i) on `threads` threads for `seconds`; each call is one timed operation.
template <class Op>
Result measure(int threads, double seconds, Op op)
{
    std::vector<std::vector<double>> latencies(threads);
    std::atomic<long> errors{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> workers;
    const auto start = Clock::now();
    for (int t = 0; t < threads; t++) {
        workers.emplace_back([&, t] {
            for (long i = 0; !stop; i++) {
                const auto before = Clock::now();
                if (!op(t, i)) errors++;
                latencies[t].push_back(
                    std::chrono::duration<double, std::micro>(Clock::now() - before).count());
            }
        });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& w : workers) w.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<double> all;
    for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
    std::sort(all.begin(), all.end());
    Result r;
    r.ops_per_second = double(all.size()) / elapsed;
    if (!all.empty()) {
        r.p50_us = all[all.size() / 2];
        r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
    }
    r.errors = errors;
    return r;
}

void print(const char* what, int threads, const Result& lib, const Result& raw)
{
    std::printf("| %s | %d | %.0f | %.0f / %.0f | %.0f | %.0f / %.0f | %.2f | %ld / %ld |\n", what,
                threads, lib.ops_per_second, lib.p50_us, lib.p99_us, raw.ops_per_second,
                raw.p50_us, raw.p99_us, raw.ops_per_second / std::max(lib.ops_per_second, 1.0),
                lib.errors, raw.errors);
    std::fflush(stdout);
}

std::unique_ptr<httplib::Client> raw_client(const std::string& endpoint)
{
    auto c = std::make_unique<httplib::Client>(endpoint);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);
    return c;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s ENDPOINT [--threads 1,16] [--seconds 5]\n", argv[0]);
        return 2;
    }
    const std::string endpoint = argv[1];
    std::vector<int> thread_counts{1, 16};
    double seconds = 5;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--seconds") {
            seconds = std::atof(argv[i + 1]);
        } else if (flag == "--threads") {
            thread_counts.clear();
            std::string list = argv[i + 1];
            for (size_t at = 0; at < list.size();) {
                const size_t comma = std::min(list.find(',', at), list.size());
                thread_counts.push_back(std::atoi(list.substr(at, comma - at).c_str()));
                at = comma + 1;
            }
        }
    }
    char why[256];
    vl_client* c = nullptr;
    if (vl_client_open(endpoint.c_str(), nullptr, why, sizeof why, &c) != VL_OK) {
        std::fprintf(stderr, "%s\n", why);
        return 2;
    }
    std::printf(
        "| op | threads | library ops/s | library p50 / p99 µs | raw ops/s | raw p50 / p99 µs "
        "| raw / library | errors library / raw |\n|---|---|---|---|---|---|---|---|\n");
    for (const int threads : thread_counts) {
        // put: one key per thread.
        const Result lib_put = measure(threads, seconds, [&](int t, long) {
            const std::string key = "bench/put/" + std::to_string(t);
            return vl_put(c, key.c_str(), "v", 1, nullptr, nullptr) == VL_OK;
        });
        std::vector<std::unique_ptr<httplib::Client>> raws;
        for (int t = 0; t < threads; t++) raws.push_back(raw_client(endpoint));
        const Result raw_put = measure(threads, seconds, [&](int t, long) {
            auto r = raws[t]->Put("/v1/kv/bench/raw/" + std::to_string(t), R"({"value":"v"})",
                                  "application/json");
            return r && r->status == 200;
        });
        print("put", threads, lib_put, raw_put);

        // lock+unlock: one session and one lock per thread.
        std::vector<vl_session*> sessions(threads);
        std::vector<uint64_t> raw_sessions(threads);
        for (int t = 0; t < threads; t++) {
            vl_session_open(c, 30000, nullptr, &sessions[t]);
            auto r = raws[t]->Post("/v1/sessions", R"({"ttl_ms":30000})", "application/json");
            raw_sessions[t] = nlohmann::json::parse(r->body)["session"].get<uint64_t>();
        }
        const Result lib_lock = measure(threads, seconds, [&](int t, long) {
            const std::string name = "bench/lock/" + std::to_string(t);
            return vl_lock_acquire(sessions[t], name.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) ==
                       VL_OK &&
                   vl_lock_release(sessions[t], name.c_str()) == VL_OK;
        });
        const Result raw_lock = measure(threads, seconds, [&](int t, long) {
            const std::string name = "/v1/locks/bench/raw-lock/" + std::to_string(t);
            const std::string body = R"({"session":)" + std::to_string(raw_sessions[t]) + "}";
            auto a = raws[t]->Post(name + ":acquire", body, "application/json");
            auto r = raws[t]->Post(name + ":release", body, "application/json");
            return a && a->status == 200 && r && r->status == 200;
        });
        print("lock+unlock", threads, lib_lock, raw_lock);
        for (int t = 0; t < threads; t++) {
            vl_session_close(sessions[t]);
            raws[t]->Delete("/v1/sessions/" + std::to_string(raw_sessions[t]));
        }
    }
    vl_client_close(c);
    return 0;
}
