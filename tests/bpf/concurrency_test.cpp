// Several CPUs at once: test runs from several threads execute the programs concurrently on
// different CPUs (each BPF_PROG_TEST_RUN runs on the caller's CPU). The invariants that matter
// must hold under any interleaving: an op is acknowledged only once it is in the ring buffer,
// and exactly one PrepareOK per op completes its quorum.
#include <doctest/doctest.h>

#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstring>
#include <map>
#include <thread>

#include "harness.h"

using namespace voltlock;
using namespace voltlock::bpf_test;

namespace {

// A test run without doctest assertions (they are not thread-safe): retval and output frame.
struct RawRun {
    int err = 0;
    uint32_t retval = 0;
    std::vector<uint8_t> out;
};

RawRun raw_xdp(int prog_fd, const std::vector<uint8_t>& frame)
{
    RawRun r;
    r.out.resize(frame.size() + 256);
    bpf_test_run_opts opts{};
    set_test_run(opts, frame, r.out);
    r.err = bpf_prog_test_run_opts(prog_fd, &opts);
    r.retval = opts.retval;
    r.out.resize(opts.data_size_out);
    return r;
}

Op acked_op(const std::vector<uint8_t>& frame)
{
    vl_header h{};
    if (frame.size() < 42 + sizeof h) return 0;
    std::memcpy(&h, &frame[42], sizeof h);
    return h.op;
}

unsigned thread_count() { return std::max(2u, std::min(8u, std::thread::hardware_concurrency())); }

}  // namespace

TEST_CASE("several CPUs: racing retransmissions never acknowledge an op the ring lacks")
{
    VL_REQUIRE_KERNEL();
    const uint8_t self = 1;
    Electrode e(Config{.replica = self});
    e.set_state(normal_state(6, 0, self, 3));
    constexpr Op ops = 400;
    std::vector<std::vector<uint8_t>> frames;
    for (Op op = 1; op <= ops; op++)
        frames.push_back(message_frame(replica_endpoint(0), replica_endpoint(self),
                                       make_prepare(6, 0, op, 1)));

    // Every thread delivers the whole sequence, in order: each Prepare arrives once per thread,
    // as if the leader retransmitted everything, concurrently. A barrier per op keeps the
    // threads in step, so that they race for the same op.
    const unsigned threads = thread_count();
    std::vector<std::vector<RawRun>> results(threads);
    std::barrier step(static_cast<std::ptrdiff_t>(threads));
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; t++) {
        workers.emplace_back([&, t] {
            for (const auto& frame : frames) {
                step.arrive_and_wait();
                results[t].push_back(raw_xdp(e.xdp_fd(), frame));
            }
        });
    }
    for (auto& w : workers) w.join();

    for (unsigned t = 0; t < threads; t++) {
        CAPTURE(t);
        for (Op op = 1; op <= ops; op++) {
            const RawRun& r = results[t][op - 1];
            REQUIRE(r.err == 0);
            // Each thread sent op - 1 before op and got it acknowledged, so op is the next or
            // held: always acknowledged, always for itself.
            CHECK(r.retval == XDP_TX);
            CHECK(acked_op(r.out) == op);
        }
    }
    CHECK(e.fast_ack_log().last_op == ops);

    // The ring: every op at least once; duplicates only from true races (at most one per
    // thread); and the first record of op n comes before the first record of op n + 1 (the
    // kernel advances past n only once a record of n is in the ring).
    const auto ring = e.drain_ring();
    std::map<Op, int> copies;
    Op first_seen = 0;
    for (const auto& record : ring) {
        const DecodeResult d = decode(record, cluster_id);
        REQUIRE(d.ok());
        const Op op = std::get<Prepare>(d.value().message).op;
        if (copies[op]++ == 0) {
            CHECK(op == first_seen + 1);
            first_seen = op;
        }
    }
    CHECK(copies.size() == ops);
    for (const auto& [op, n] : copies) CHECK(n <= static_cast<int>(threads));
    MESSAGE(threads << " threads, " << ring.size() << " records for " << ops << " ops");
}

TEST_CASE("several CPUs: concurrent acks complete each quorum exactly once")
{
    VL_REQUIRE_KERNEL();
    const uint8_t n = 7;  // f = 3
    Electrode e(Config{.replica = 0, .replica_count = n});
    e.set_state(normal_state(n, 0, 0, n));
    constexpr Op ops = 300;
    for (Op op = 1; op <= ops; op++) {
        const std::vector<uint8_t> frame = message_frame(
            replica_endpoint(0), replica_endpoint(1), make_prepare(n, 0, op, 1));
        REQUIRE(e.run_tc(frame).retval == TC_ACT_OK);
    }
    // Each thread plays some followers (each follower acks every op twice).
    const unsigned threads = thread_count();
    std::vector<std::vector<std::pair<Op, RawRun>>> results(threads);
    std::vector<std::vector<std::vector<uint8_t>>> frames(threads);
    for (Op op = 1; op <= ops; op++)
        for (uint8_t r = 1; r < n; r++)
            for (int copy = 0; copy < 2; copy++)
                frames[(r + copy) % threads].push_back(message_frame(
                    replica_endpoint(r), replica_endpoint(0),
                    PrepareOk{.view = n, .replica = r, .op = op}, VL_FLAG_KERNEL_ACK));
    std::atomic<bool> go{false};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; t++) {
        workers.emplace_back([&, t] {
            while (!go.load()) std::this_thread::yield();
            for (const auto& frame : frames[t])
                results[t].emplace_back(acked_op(frame), raw_xdp(e.xdp_fd(), frame));
        });
    }
    go = true;
    for (auto& w : workers) w.join();

    std::map<Op, int> marked;
    size_t acks = 0;
    for (const auto& per_thread : results) {
        for (const auto& [op, r] : per_thread) {
            REQUIRE(r.err == 0);
            acks++;
            if (r.retval == XDP_PASS) {
                marked[op]++;
                const DecodeResult d = decode(std::span(r.out).subspan(42), cluster_id);
                REQUIRE(d.ok());
                CHECK(d.value().flags == (VL_FLAG_QUORUM | VL_FLAG_KERNEL_ACK));
            } else {
                CHECK(r.retval == XDP_DROP);
            }
        }
    }
    CHECK(acks == ops * (n - 1u) * 2u);
    CHECK(marked.size() == ops);
    for (const auto& [op, count] : marked) {
        CAPTURE(op);
        CHECK(count == 1);
        const vl_quorum_slot slot = e.slot(static_cast<uint32_t>(op));
        CHECK(slot.completed == 1);
        CHECK(slot.acked == 0x7E);
    }
    for (uint8_t r = 1; r < n; r++) CHECK(e.acked(r).op == ops);
}
