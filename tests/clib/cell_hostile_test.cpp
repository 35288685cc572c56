// libvoltlock when things go wrong: a dead endpoint first in the list, the leader killed with -9
// while a session holds a lock, a watch streams and a wait is in flight, the leader stopped, the
// client cut off until its session is lost, and calls that must give up in time.
#include <doctest/doctest.h>

#include <atomic>
#include <csignal>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "rig.h"

namespace {

constexpr auto kSecond = std::chrono::milliseconds(1000);

struct LostSignal {
    std::atomic<int> calls{0};
    std::atomic<int> why{VL_OK};
    std::atomic<vl_session*> session{nullptr};
};

void on_lost(vl_session* s, vl_status why, void* user_data)
{
    auto* signal = static_cast<LostSignal*>(user_data);
    signal->session = s;
    signal->why = why;
    signal->calls++;
}

// A session of `ttl_ms` whose loss `lost` records.
vl_session* open_session_noting_loss(vl_client* c, uint32_t ttl_ms, LostSignal& lost)
{
    vl_session_options options;
    vl_session_options_init(&options);
    options.on_session_lost = on_lost;
    options.user_data = &lost;
    vl_session* s = nullptr;
    REQUIRE(vl_session_open(c, ttl_ms, &options, &s) == VL_OK);
    return s;
}

// Cuts the client namespace off from every replica (the replicas still reach each other).
void cut_client_off()
{
    for (int r = 0; r < 3; r++) rig::cell("partition", std::to_string(r) + " --peers client");
}

// The network whole, the killed replica (if any) restarted, a leader elected.
void restore_cell(int killed = -1)
{
    rig::cell("heal");
    if (killed >= 0) rig::cell("start", std::to_string(killed));
    rig::cell("wait");
}

}  // namespace

TEST_CASE("a dead endpoint first in the list costs one dial timeout, once")
{
    // 10.77.0.99 is on the cell's subnet but nobody answers: connects to it hang, not fail.
    vl_client* c = rig::open_client(10000, "http://10.77.0.99:7480," + rig::endpoints());
    const std::string key = rig::unique("dead-first");
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(vl_put(c, key.c_str(), "v", 1, nullptr, nullptr) == VL_OK);
    CHECK(rig::elapsed_ms(start) < 3000);
    // The live endpoint is now preferred: the next calls do not pay again.
    const auto again = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; i++) {
        vl_kv* kv = nullptr;
        REQUIRE(vl_get(c, key.c_str(), 0, &kv) == VL_OK);
        vl_kv_free(kv);
    }
    CHECK(rig::elapsed_ms(again) < 2000);  // paying the dial timeout again: 5 x 500 ms
    CHECK(std::string(vl_client_current_endpoint(c)) != "http://10.77.0.99:7480");
    vl_client_close(c);
}

TEST_CASE("no call blocks past its deadline when nothing answers")
{
    vl_client* c = rig::open_client(1500, "http://10.77.0.98:7480,http://10.77.0.99:7480");
    vl_kv* kv = nullptr;
    auto start = std::chrono::steady_clock::now();
    const vl_status status = vl_get(c, "anything", 0, &kv);
    CHECK((status == VL_ERR_TIMEOUT || status == VL_ERR_TRANSPORT));
    CHECK(rig::elapsed_ms(start) < 3000);
    vl_session* s = nullptr;
    start = std::chrono::steady_clock::now();
    CHECK(vl_session_open(c, 5000, nullptr, &s) != VL_OK);
    CHECK(rig::elapsed_ms(start) < 3000);
    vl_watch* w = nullptr;
    start = std::chrono::steady_clock::now();
    CHECK(vl_watch_open(c, "anything", nullptr, &w) == VL_ERR_TIMEOUT);
    CHECK(rig::elapsed_ms(start) < 3000);
    vl_client_close(c);
}

TEST_CASE("a watch that cannot open gives up at the command timeout, a dial in flight included")
{
    // A dial timeout longer than the command timeout: the connect still running at the deadline
    // used to hold vl_watch_open up to a whole dial timeout past it.
    vl_client_options options;
    vl_client_options_init(&options);
    options.command_timeout_ms = 1000;
    options.dial_timeout_ms = 3000;
    char why[256];
    vl_client* c = nullptr;
    REQUIRE(vl_client_open("http://10.77.0.99:7480", &options, why, sizeof why, &c) == VL_OK);
    vl_watch* w = nullptr;
    const auto start = std::chrono::steady_clock::now();
    CHECK(vl_watch_open(c, "anything", nullptr, &w) == VL_ERR_TIMEOUT);
    CHECK(rig::elapsed_ms(start) < 1500);
    CHECK(w == nullptr);
    vl_client_close(c);
}

TEST_CASE("leader kill -9: the session and its lock survive, a waiting acquire completes, the "
          "watch resumes with no gap and no duplicate")
{
    vl_client* c = rig::open_client(15000);
    const std::string lock = rig::unique("failover-lock");
    const std::string waited = rig::unique("failover-wait");
    const std::string prefix = rig::unique("failover-watch") + "/";
    LostSignal lost;
    vl_session* holder = open_session_noting_loss(c, 6000, lost);
    vl_session* waiter = open_session_noting_loss(c, 6000, lost);
    vl_sequencer* seq = nullptr;
    REQUIRE(vl_lock_acquire(holder, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, &seq) == VL_OK);
    REQUIRE(vl_lock_acquire(holder, waited.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_OK);

    vl_watch_options watch_options{};
    watch_options.prefix = true;
    vl_watch* w = nullptr;
    REQUIRE(vl_watch_open(c, prefix.c_str(), &watch_options, &w) == VL_OK);

    // A wait in flight across the kill: granted when the holder releases, after the failover.
    std::atomic<int> wait_status{-1};
    std::thread wait_thread([&] {
        wait_status = vl_lock_acquire(waiter, waited.c_str(), VL_LOCK_EXCLUSIVE, 30000, nullptr);
    });

    // A writer that records every acknowledged revision, before, during and after the kill.
    std::atomic<bool> stop_writing{false};
    std::mutex acked_mutex;
    std::map<uint64_t, std::string> acked;  // revision -> value
    std::atomic<int> write_failures{0};
    std::thread writer([&] {
        for (int i = 0; !stop_writing; i++) {
            const std::string value = std::to_string(i);
            vl_put_result result{};
            const std::string key = prefix + std::to_string(i % 5);
            if (vl_put(c, key.c_str(), value.data(), value.size(), nullptr, &result) == VL_OK) {
                std::lock_guard guard(acked_mutex);
                acked[result.revision] = value;
            } else {
                write_failures++;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    });
    auto acked_count = [&] {
        std::lock_guard guard(acked_mutex);
        return acked.size();
    };
    REQUIRE(rig::eventually(10 * kSecond, [&] { return acked_count() >= 20; }));
    const int old_leader = rig::leader(c);
    rig::cell("kill", std::to_string(old_leader));
    const size_t at_kill = acked_count();
    REQUIRE(rig::eventually(20 * kSecond, [&] { return acked_count() >= at_kill + 30; }));
    REQUIRE(vl_lock_release(holder, waited.c_str()) == VL_OK);
    stop_writing = true;
    writer.join();
    wait_thread.join();
    CHECK(wait_status == VL_OK);

    // Every acknowledged write appears exactly once, in revision order, with no revision of
    // the prefix skipped (writes whose answer was lost may appear too: they committed).
    std::map<uint64_t, std::string> events;
    uint64_t previous = 0;
    bool ordered = true;
    const uint64_t last_acked = acked.rbegin()->first;
    while (previous < last_acked) {
        vl_event* e = nullptr;
        const vl_status status = vl_watch_next(w, 15000, &e);
        REQUIRE_MESSAGE(status == VL_OK, vl_watch_errstr(w));
        ordered = ordered && e->revision > previous;
        previous = e->revision;
        events[e->revision] = std::string(reinterpret_cast<char*>(e->value), e->value_len);
        vl_event_free(e);
    }
    CHECK(ordered);
    for (const auto& [revision, value] : acked) {
        CAPTURE(revision);
        REQUIRE(events.count(revision) == 1);
        CHECK(events[revision] == value);
    }
    CHECK(events.size() <= acked.size() + size_t(write_failures.load()));
    vl_watch_close(w);

    // The session and its lock survived: still held, still fencing.
    CHECK(lost.calls == 0);
    CHECK(vl_session_status(holder) == VL_OK);
    bool valid = false;
    REQUIRE(vl_sequencer_check(c, seq, &valid) == VL_OK);
    CHECK(valid);
    CHECK(vl_lock_acquire(waiter, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) ==
          VL_ERR_LOCK_BUSY);
    vl_sequencer_free(seq);
    CHECK(vl_session_close(holder) == VL_OK);
    CHECK(vl_session_close(waiter) == VL_OK);
    vl_client_close(c);
    restore_cell(old_leader);
}

TEST_CASE("leader cut off from everything: a 4 s session and its lock survive the failover")
{
    // The keepalive at the silent leader used to wait 3 s for an answer, past the lease: a
    // TTL under about 4.5 s was lost though a new leader is elected in about 1.5 s.
    constexpr uint32_t kTtlMs = 4000;
    vl_client* c = rig::open_client();
    const std::string lock = rig::unique("cut-leader-lock");
    LostSignal lost;
    vl_session* s = open_session_noting_loss(c, kTtlMs, lost);
    vl_sequencer* seq = nullptr;
    REQUIRE(vl_lock_acquire(s, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, &seq) == VL_OK);
    const int old_leader = rig::leader(c);
    rig::cell("partition", std::to_string(old_leader));
    const auto cut = std::chrono::steady_clock::now();
    // The lease runs past cut + TTL only once a keepalive sent after the cut was answered.
    const auto renewed_after_cut = [&] {
        return vl_session_status(s) == VL_OK &&
               rig::elapsed_ms(cut) + static_cast<long long>(vl_session_lease_remaining_ms(s)) >
                   kTtlMs + 100;
    };
    CHECK(rig::eventually(10 * kSecond, renewed_after_cut));
    CHECK(lost.calls == 0);
    CHECK(vl_session_status(s) == VL_OK);
    bool valid = false;
    REQUIRE(vl_sequencer_check(c, seq, &valid) == VL_OK);
    CHECK(valid);
    vl_session* rival = nullptr;
    REQUIRE(vl_session_open(c, 10000, nullptr, &rival) == VL_OK);
    CHECK(vl_lock_acquire(rival, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) ==
          VL_ERR_LOCK_BUSY);
    CHECK(vl_lock_release(s, lock.c_str()) == VL_OK);
    vl_sequencer_free(seq);
    CHECK(vl_session_close(rival) == VL_OK);
    CHECK(vl_session_close(s) == VL_OK);
    vl_client_close(c);
    restore_cell();
}

TEST_CASE("leader stopped (SIGSTOP) mid-call: the call completes elsewhere in time")
{
    vl_client* c = rig::open_client(15000);
    vl_session* s = nullptr;
    REQUIRE(vl_session_open(c, 10000, nullptr, &s) == VL_OK);
    const int old_leader = rig::leader(c);
    const int pid = rig::pid(old_leader);
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    const std::string key = rig::unique("stopped-leader");
    const auto start = std::chrono::steady_clock::now();
    const vl_status status = vl_put(c, key.c_str(), "v", 1, nullptr, nullptr);
    const long long took = rig::elapsed_ms(start);
    ::kill(pid, SIGCONT);
    CHECK(status == VL_OK);
    CHECK(took < 15000);
    CHECK(vl_session_status(s) == VL_OK);
    CHECK(vl_session_close(s) == VL_OK);
    vl_client_close(c);
    restore_cell();
}

namespace {

// A waiter waits at the replica its client talks to; `harm` (given that replica's index) cuts it
// off or stops it; the holder releases (elsewhere, after 3 s): the waiter learns of its grant
// within `within_ms` of the release, its place in line kept, and the cell says it holds the lock.
// The waiter's 60 s wait would otherwise last to its end.
void check_a_waiter_gets_its_grant(const std::string& what, const std::function<void(int)>& harm,
                                   const std::function<void(int)>& undo, long long within_ms)
{
    vl_client* c = rig::open_client(10000);
    vl_session* holder = nullptr;
    vl_session* waiter = nullptr;
    REQUIRE(vl_session_open(c, 10000, nullptr, &holder) == VL_OK);
    REQUIRE(vl_session_open(c, 10000, nullptr, &waiter) == VL_OK);
    const std::string lock = rig::unique(what);
    REQUIRE(vl_lock_acquire(holder, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_OK);
    const std::string waiting_at = vl_client_current_endpoint(c);
    int harmed = -1;
    for (size_t i = 0; i < vl_client_endpoint_count(c); i++)
        if (waiting_at == vl_client_endpoint(c, i)) harmed = int(i);
    REQUIRE(harmed >= 0);
    const int elsewhere = (harmed + 1) % 3;
    std::atomic<int> status{-1};
    std::jthread waiting([&] {
        status = vl_lock_acquire(waiter, lock.c_str(), VL_LOCK_EXCLUSIVE, 60000, nullptr);
    });
    const auto info = [&](const std::string& path, int replica) {
        char* text = nullptr;
        if (vl_info_get(c, path.c_str(), replica, &text) != VL_OK) return nlohmann::json();
        const nlohmann::json state = nlohmann::json::parse(text);
        vl_string_free(text);
        return state;
    };
    const auto lock_state = [&] { return info("/v1/locks/" + lock, elsewhere); };
    REQUIRE(rig::eventually(5 * kSecond, [&] {
        const nlohmann::json state = lock_state();
        return state.is_object() && state["waiters"].size() == 1;
    }));
    // The wait is held at the replica to be harmed (not elsewhere already).
    REQUIRE(info("/v1/cluster", harmed)["api"]["waiters"].get<int>() >= 1);
    harm(harmed);
    std::unique_ptr<int, std::function<void(int*)>> undone(&harmed, [&](int* replica) {
        undo(*replica);  // also when a check below fails, for the tests after this one
    });
    REQUIRE(vl_lock_release(holder, lock.c_str()) == VL_OK);
    const auto released = std::chrono::steady_clock::now();
    waiting.join();
    CHECK(status == VL_OK);
    CHECK(rig::elapsed_ms(released) < within_ms);
    undone.reset();
    nlohmann::json holders;
    REQUIRE(rig::eventually(5 * kSecond, [&] {
        holders = lock_state()["holders"];
        return holders.size() == 1;
    }));
    CHECK(holders.at(0).at("session") == vl_session_id(waiter));
    CHECK(vl_session_close(holder) == VL_OK);
    CHECK(vl_session_close(waiter) == VL_OK);
    vl_client_close(c);
}

}  // namespace

TEST_CASE("a wait at a replica cut off from the client gets its grant within seconds")
{
    // The kernel's probes give the silent connection up; the same request asked again elsewhere
    // finds the grant the cell made meanwhile.
    check_a_waiter_gets_its_grant(
        "cut-off-wait",
        [](int replica) { rig::cell("partition", std::to_string(replica) + " --peers client"); },
        [](int) { rig::cell("heal"); }, 8000);
}

TEST_CASE("a wait at a stopped replica gets its grant within seconds")
{
    // SIGSTOP: the replica's kernel still answers the probes, so only the client's /healthz
    // checks see it gone. The wait is left there, its connection open while the request asked
    // again elsewhere waits for the grant (a replica that saw it close would withdraw the wait
    // the retry joined); closed once the call ends, when a withdrawal finds the grant made.
    check_a_waiter_gets_its_grant(
        "stopped-wait", [](int replica) { ::kill(rig::pid(replica), SIGSTOP); },
        [](int replica) { ::kill(rig::pid(replica), SIGCONT); }, 10000);
}

TEST_CASE("a client cut off from the cell learns its session is lost, at once and only once")
{
    vl_client* c = rig::open_client(3000);
    const std::string lock = rig::unique("partition-lock");
    LostSignal lost;
    vl_session* s = open_session_noting_loss(c, 2000, lost);
    REQUIRE(vl_lock_acquire(s, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_OK);

    // A wait in flight when the lease runs out returns then, not at its own deadline.
    vl_client* other = rig::open_client(3000);
    vl_session* rival = nullptr;
    REQUIRE(vl_session_open(other, 10000, nullptr, &rival) == VL_OK);
    const std::string rivals_lock = rig::unique("partition-rival");
    REQUIRE(vl_lock_acquire(rival, rivals_lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_OK);
    std::atomic<int> wait_status{-1};
    std::atomic<long long> wait_took{0};
    cut_client_off();
    const auto cut = std::chrono::steady_clock::now();
    std::thread waiting([&] {
        const auto start = std::chrono::steady_clock::now();
        wait_status = vl_lock_acquire(s, rivals_lock.c_str(), VL_LOCK_EXCLUSIVE, 60000, nullptr);
        wait_took = rig::elapsed_ms(start);
    });
    REQUIRE(rig::eventually(5 * kSecond, [&] { return lost.calls.load() > 0; }));
    const long long noticed = rig::elapsed_ms(cut);
    CHECK(noticed <= 2500);  // the 2 s lease ran from before the cut was whole; + scheduling
    CHECK(lost.why == VL_ERR_SESSION_LOST);
    CHECK(lost.session == s);
    CHECK(vl_session_status(s) == VL_ERR_SESSION_LOST);
    CHECK(vl_session_lease_remaining_ms(s) == 0);
    waiting.join();
    CHECK(wait_status == VL_ERR_SESSION_LOST);
    CHECK(wait_took < 4000);
    CHECK(vl_lock_acquire(s, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_ERR_SESSION_LOST);
    rig::cell("heal");

    // The cell expired it too: the rival takes the lock once the lease is gone there.
    CHECK(rig::eventually(10 * kSecond, [&] {
        return vl_lock_acquire(rival, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_OK;
    }));
    CHECK(lost.calls == 1);
    CHECK(vl_session_close(s) == VL_OK);  // nothing left to end
    CHECK(vl_session_close(rival) == VL_OK);
    vl_client_close(other);
    vl_client_close(c);
}

TEST_CASE("a session ended by someone else is reported as lost by the keepalive thread")
{
    vl_client* c = rig::open_client();
    LostSignal lost;
    vl_session* s = open_session_noting_loss(c, 3000, lost);
    REQUIRE(vl_session_revoke_id(c, vl_session_id(s)) == VL_OK);
    REQUIRE(rig::eventually(3 * kSecond, [&] { return lost.calls.load() > 0; }));
    CHECK(lost.why == VL_ERR_UNKNOWN_SESSION);
    CHECK(vl_session_status(s) == VL_ERR_UNKNOWN_SESSION);
    CHECK(vl_lock_acquire(s, "any", VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_ERR_UNKNOWN_SESSION);
    CHECK(vl_session_close(s) == VL_OK);
    vl_client_close(c);
}
