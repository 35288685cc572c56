// fast_path.h compiled as C++: the decisions the kernel runs, checked against the codec
// (server/core/message.h) and against the paper's rules. No kernel needed: suite "pure".
#include <doctest/doctest.h>

#include <array>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

using namespace voltlock;
using namespace voltlock::bpf_test;

namespace {

// A buffer laid out as the kernel's scratch copy: 8-byte aligned, VL_MESSAGE_WORDS words.
struct Scratch {
    alignas(8) uint8_t bytes[VL_MESSAGE_WORDS * 8];
};

// Every check the XDP program makes on a Prepare datagram before deciding, in its order.
uint32_t pure_prepare_checks(std::span<const uint8_t> datagram, uint8_t replica_count = 3)
{
    Scratch s;
    std::memset(s.bytes, 0xA5, sizeof s.bytes);  // stale bytes past the message must not count
    if (datagram.size() > VL_MAX_MESSAGE_BYTES) return VL_STAT_XDP_TOO_BIG;
    std::memcpy(s.bytes, datagram.data(), datagram.size());
    const auto* h = reinterpret_cast<const vl_header*>(s.bytes);
    const auto len = static_cast<uint32_t>(datagram.size());
    if (len < VL_HEADER_BYTES) return VL_STAT_XDP_TRUNCATED;
    uint32_t stat = vl_check_header(h, len, cluster_id, replica_count);
    if (stat != VL_STAT_NONE) return stat;
    if (h->type != VL_MSG_PREPARE) return VL_STAT_XDP_OTHER_TYPE;
    stat = vl_check_prepare(h);
    if (stat != VL_STAT_NONE) return stat;
    if (vl_checksum_words(s.bytes, len) != h->checksum) return VL_STAT_XDP_BAD_CHECKSUM;
    if (!vl_prepare_entries_ok(s.bytes + VL_HEADER_BYTES, len - VL_HEADER_BYTES, h->batch_count))
        return VL_STAT_XDP_MALFORMED;
    return VL_STAT_NONE;
}

vl_header header_of(const std::vector<uint8_t>& datagram)
{
    vl_header h{};
    std::memcpy(&h, datagram.data(), sizeof h);
    return h;
}

vl_header prepare_header(View view, ReplicaIndex leader, Op op, uint16_t count)
{
    return header_of(encode(make_prepare(view, leader, op, count), cluster_id));
}

}  // namespace

TEST_SUITE("pure") {

TEST_CASE("vl_checksum_words equals vl_checksum for every length, ignoring bytes past the end")
{
    std::mt19937_64 rng(42);
    Scratch s;
    for (uint32_t len = 0; len <= VL_MAX_MESSAGE_BYTES; len += (len < 200 ? 1 : 37)) {
        for (auto& b : s.bytes) b = static_cast<uint8_t>(rng());
        const uint64_t expected = vl_checksum(s.bytes, len);
        CHECK(vl_checksum_words(s.bytes, len) == expected);
        // Different garbage after the message, same checksum.
        for (size_t i = len; i < sizeof s.bytes; i++) s.bytes[i] = static_cast<uint8_t>(rng());
        CHECK(vl_checksum_words(s.bytes, len) == expected);
    }
    // The checksum field counts as zero.
    for (auto& b : s.bytes) b = static_cast<uint8_t>(rng());
    const uint64_t before = vl_checksum_words(s.bytes, 200);
    s.bytes[offsetof(vl_header, checksum)] ^= 0xFF;
    CHECK(vl_checksum_words(s.bytes, 200) == before);
}

TEST_CASE("vl_prepare_ok_init writes exactly what encode() makes of the PrepareOK")
{
    for (const uint16_t flags : {uint16_t{0}, uint16_t{VL_FLAG_KERNEL_ACK},
                                 static_cast<uint16_t>(VL_FLAG_KERNEL_ACK | VL_FLAG_QUORUM)}) {
        for (const auto& [view, op] : {std::pair<View, Op>{0, 1}, {7, 1041}, {~0ull, ~0ull}}) {
            vl_header h{};
            const vl_mac_keys no_keys{};
            vl_prepare_ok_init(&h, cluster_id, 2, view, op, flags, &no_keys);
            const std::vector<uint8_t> expected =
                encode(PrepareOk{.view = view, .replica = 2, .op = op}, cluster_id, flags);
            REQUIRE(expected.size() == sizeof h);
            CHECK(std::memcmp(&h, expected.data(), sizeof h) == 0);
            const DecodeResult decoded = decode(expected, cluster_id);
            REQUIRE(decoded.ok());
            CHECK(decoded.value().flags == flags);
        }
    }
}

TEST_CASE("the kernel's Prepare checks accept what decode() accepts, and nothing it rejects")
{
    std::mt19937_64 rng(7);
    for (const uint16_t count : std::array<uint16_t, 4>{1, 2, 5, 40}) {
        const std::vector<uint8_t> good = encode(make_prepare(3, 0, 100, count, 90, 17),
                                                 cluster_id, VL_FLAG_BROADCAST);
        REQUIRE(decode(good, cluster_id).ok());
        CHECK(pure_prepare_checks(good) == VL_STAT_NONE);

        // Soundness under corruption: a datagram the kernel would acknowledge, user space
        // accepts too. Every single-byte change, and random multi-byte ones.
        for (size_t i = 0; i < good.size(); i++) {
            std::vector<uint8_t> bad = good;
            bad[i] ^= static_cast<uint8_t>(1 + rng() % 255);
            if (pure_prepare_checks(bad) == VL_STAT_NONE) CHECK(decode(bad, cluster_id).ok());
        }
        for (int round = 0; round < 2000; round++) {
            std::vector<uint8_t> bad = good;
            const int flips = 1 + static_cast<int>(rng() % 4);
            for (int f = 0; f < flips; f++) bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
            if (rng() % 4 == 0) bad.resize(rng() % (bad.size() + 1));
            if (pure_prepare_checks(bad) == VL_STAT_NONE) {
                INFO("round " << round);
                CHECK(decode(bad, cluster_id).ok());
            }
        }
        // Truncations are always caught.
        for (size_t len = 0; len < good.size(); len++)
            CHECK(pure_prepare_checks(std::span(good).first(len)) != VL_STAT_NONE);
    }
}

TEST_CASE("the entry parser agrees with decode() on crafted bodies")
{
    // Entries re-checksummed after editing, so that only the body's shape is in question.
    auto reseal = [](std::vector<uint8_t>& d) {
        vl_header h{};
        std::memcpy(&h, d.data(), sizeof h);
        h.body_len = static_cast<uint32_t>(d.size() - VL_HEADER_BYTES);
        std::memcpy(d.data(), &h, sizeof h);
        h.checksum = vl_checksum(d.data(), static_cast<uint32_t>(d.size()));
        std::memcpy(d.data(), &h, sizeof h);
    };
    const std::vector<uint8_t> good = encode(make_prepare(1, 1, 3, 3, 0, 10), cluster_id);
    for (const int delta : {-3, -1, 1, 2, 100}) {
        std::vector<uint8_t> d = good;
        const size_t len_at = VL_HEADER_BYTES + 24;  // first entry's payload_len
        const auto len = static_cast<uint16_t>(d[len_at] | (d[len_at + 1] << 8));
        const auto edited = static_cast<uint16_t>(len + delta);
        d[len_at] = static_cast<uint8_t>(edited);
        d[len_at + 1] = static_cast<uint8_t>(edited >> 8);
        reseal(d);
        INFO("delta " << delta);
        CHECK((pure_prepare_checks(d) == VL_STAT_NONE) == decode(d, cluster_id).ok());
        CHECK(pure_prepare_checks(d) != VL_STAT_NONE);
    }
    std::vector<uint8_t> extra = good;
    extra.push_back(0);  // a trailing byte after the last entry
    reseal(extra);
    CHECK(pure_prepare_checks(extra) == VL_STAT_XDP_MALFORMED);
    CHECK(!decode(extra, cluster_id).ok());
}

TEST_CASE("fast ack: each reason, in the paper's order (Electrode §6, Listing 2)")
{
    const uint8_t self = 1;
    // View 4 of 3 replicas is led by replica 1 = self; the core would not set fast_ack there,
    // the kernel checks all the same.
    vl_kernel_state normal = normal_state(4, 10, self, 3);
    normal.fast_ack = 1;
    vl_kernel_state s = normal_state(3, 10, self, 3);
    REQUIRE(s.leader == 0);
    CHECK(normal.leader == self);
    const uint32_t all = VL_FAST_PATHS_ALL;

    auto decide = [&](const vl_kernel_state& st, uint32_t enabled, uint64_t last,
                      const vl_header& h) {
        return vl_fast_ack_decide(&st, enabled, last, self, &h);
    };

    vl_header h = prepare_header(3, 0, 11, 1);
    CHECK(decide(s, all, 10, h).verdict == VL_FAST_ACK_APPEND);
    CHECK(decide(s, all, 10, h).stat == VL_STAT_FA_APPENDED);

    vl_kernel_state vc = s;
    vc.status = VL_STATUS_VIEW_CHANGE;
    CHECK(decide(vc, all, 10, h).stat == VL_STAT_FA_NOT_NORMAL);
    vc.status = VL_STATUS_RECOVERING;
    CHECK(decide(vc, all, 10, h).stat == VL_STAT_FA_NOT_NORMAL);

    vl_kernel_state off = s;
    off.fast_ack = 0;
    CHECK(decide(off, all, 10, h).stat == VL_STAT_FA_DISABLED);
    CHECK(decide(s, all & ~uint32_t{VL_FAST_PATH_FAST_ACK}, 10, h).stat == VL_STAT_FA_DISABLED);

    CHECK(decide(s, all, 10, prepare_header(2, 2, 11, 1)).stat == VL_STAT_FA_STALE_VIEW);
    CHECK(decide(s, all, 10, prepare_header(4, 1, 11, 1)).stat == VL_STAT_FA_NEWER_VIEW);
    CHECK(decide(s, all, 10, prepare_header(3, 2, 11, 1)).stat == VL_STAT_FA_NOT_FROM_LEADER);
    CHECK(decide(normal, all, 10, prepare_header(4, 1, 11, 1)).stat == VL_STAT_FA_IS_LEADER);

    // Op positions, batch of 3 = ops (op-3, op].
    CHECK(decide(s, all, 10, prepare_header(3, 0, 13, 3)).verdict == VL_FAST_ACK_APPEND);
    CHECK(decide(s, all, 10, prepare_header(3, 0, 14, 3)).stat == VL_STAT_FA_GAP);
    CHECK(decide(s, all, 10, prepare_header(3, 0, 12, 3)).stat == VL_STAT_FA_OVERLAP);
    CHECK(decide(s, all, 10, prepare_header(3, 0, 10, 3)).verdict == VL_FAST_ACK_REACK);
    CHECK(decide(s, all, 10, prepare_header(3, 0, 3, 3)).verdict == VL_FAST_ACK_REACK);
    CHECK(decide(s, all, 0, prepare_header(3, 0, 1, 1)).verdict == VL_FAST_ACK_APPEND);

    vl_header malformed = h;
    malformed.batch_count = 0;
    CHECK(decide(s, all, 10, malformed).stat == VL_STAT_XDP_MALFORMED);
    malformed.batch_count = 12;  // op 11 < 12 ops
    CHECK(decide(s, all, 10, malformed).stat == VL_STAT_XDP_MALFORMED);
}

TEST_CASE("fast ack: the kernel's last op is its own only in the view it was reached in")
{
    vl_kernel_state s = normal_state(3, 10, 1, 3);
    vl_fast_ack_log log{.view = 3, .last_op = 25};
    CHECK(vl_fast_ack_last_op(&s, &log) == 25);
    s.last_op = 30;  // user space caught up and overtook
    CHECK(vl_fast_ack_last_op(&s, &log) == 30);
    s.last_op = 5;  // user space wrote a record behind the kernel: the kernel's progress stands
    CHECK(vl_fast_ack_last_op(&s, &log) == 25);
    s.view = 4;  // a new view: what the kernel appended in view 3 says nothing about view 4
    CHECK(vl_fast_ack_last_op(&s, &log) == 5);
}

TEST_CASE("fast ack: the second look acknowledges only if the state still allows it")
{
    const uint8_t self = 1;
    vl_kernel_state s = normal_state(3, 10, self, 3);
    vl_fast_ack_log log{};
    const vl_header h = prepare_header(3, 0, 12, 2);

    vl_fast_ack_decision d = vl_fast_ack_commit(&s, VL_FAST_PATHS_ALL, &log, self, &h);
    CHECK(d.verdict == VL_FAST_ACK_APPEND);
    CHECK(d.stat == VL_STAT_FA_APPENDED);
    CHECK(log.view == 3);
    CHECK(log.last_op == 12);

    // Another CPU appended it between the looks: still held, still acknowledged.
    d = vl_fast_ack_commit(&s, VL_FAST_PATHS_ALL, &log, self, &h);
    CHECK(d.verdict == VL_FAST_ACK_REACK);
    CHECK(d.stat == VL_STAT_FA_APPENDED);
    CHECK(log.last_op == 12);

    // User space switched the fast path off between the looks: no ack, log untouched.
    vl_fast_ack_log fresh{};
    vl_kernel_state off = s;
    off.fast_ack = 0;
    d = vl_fast_ack_commit(&off, VL_FAST_PATHS_ALL, &fresh, self, &h);
    CHECK(d.verdict == VL_FAST_ACK_PASS);
    CHECK(d.stat == VL_STAT_FA_STATE_CHANGED);
    CHECK(fresh.last_op == 0);
    vl_kernel_state view_change = s;
    view_change.status = VL_STATUS_VIEW_CHANGE;
    view_change.view = 4;
    CHECK(vl_fast_ack_commit(&view_change, VL_FAST_PATHS_ALL, &fresh, self, &h).stat ==
          VL_STAT_FA_STATE_CHANGED);
}

TEST_CASE("quorum: exactly one ack per op completes it, whatever the order (Electrode §4.3)")
{
    std::mt19937_64 rng(3);
    for (const uint8_t n : std::array<uint8_t, 4>{3, 5, 7, 15}) {
        const uint8_t leader = 0;
        const uint32_t f = vl_quorum_followers_needed(n);
        CHECK(f == (n - 1u) / 2u);
        for (int round = 0; round < 50; round++) {
            vl_quorum_slot slot{};
            CHECK(vl_quorum_arm(&slot, 9, 77) == VL_STAT_TC_ARMED);
            // Each follower acks 1-3 times, in a random interleaving.
            std::vector<uint8_t> acks;
            for (uint8_t r = 1; r < n; r++)
                for (int k = 0, times = 1 + static_cast<int>(rng() % 3); k < times; k++)
                    acks.push_back(r);
            std::shuffle(acks.begin(), acks.end(), rng);
            std::set<uint8_t> counted;
            int completes = 0;
            for (const uint8_t r : acks) {
                const vl_quorum_decision d = vl_quorum_count(&slot, 9, 77, r, leader, n);
                if (counted.count(r)) {
                    CHECK(d.verdict == VL_QUORUM_DUPLICATE_DROP);
                    continue;
                }
                counted.insert(r);
                if (counted.size() == f) {
                    CHECK(d.verdict == VL_QUORUM_COMPLETE);
                    completes++;
                } else {
                    CHECK(d.verdict == VL_QUORUM_COUNT_AND_DROP);
                    CHECK(d.stat == (counted.size() < f ? VL_STAT_Q_COUNTED : VL_STAT_Q_LATE));
                }
                // A retransmission re-arms without forgetting.
                if (rng() % 5 == 0) CHECK(vl_quorum_arm(&slot, 9, 77) == VL_STAT_TC_REARMED);
            }
            CHECK(completes == 1);
            CHECK(vl_popcount16(slot.acked) == n - 1u);
        }
    }
}

TEST_CASE("quorum: untracked, invalid, reuse and stale arming")
{
    vl_quorum_slot slot{};
    // A zeroed slot tracks nothing, not even op 0 of view 0.
    CHECK(vl_quorum_count(&slot, 0, 0, 1, 0, 3).verdict == VL_QUORUM_UNTRACKED_PASS);
    CHECK(vl_quorum_arm(&slot, 2, 5) == VL_STAT_TC_ARMED);
    CHECK(vl_quorum_count(&slot, 2, 6, 1, 0, 3).verdict == VL_QUORUM_UNTRACKED_PASS);
    CHECK(vl_quorum_count(&slot, 1, 5, 1, 0, 3).verdict == VL_QUORUM_UNTRACKED_PASS);
    CHECK(vl_quorum_count(&slot, 2, 5, 0, 0, 3).verdict == VL_QUORUM_INVALID_PASS);  // self
    CHECK(vl_quorum_count(&slot, 2, 5, 3, 0, 3).verdict == VL_QUORUM_INVALID_PASS);  // range
    CHECK(vl_quorum_count(&slot, 2, 5, 15, 0, 15).verdict == VL_QUORUM_INVALID_PASS);
    CHECK(slot.acked == 0);
    CHECK(vl_quorum_count(&slot, 2, 5, 2, 0, 3).verdict == VL_QUORUM_COMPLETE);
    // Reused by a later op: fresh bits, may complete again.
    CHECK(vl_quorum_arm(&slot, 2, 5 + VL_QUORUM_SLOTS) == VL_STAT_TC_ARMED);
    CHECK(slot.acked == 0);
    CHECK(slot.completed == 0);
    CHECK(vl_quorum_count(&slot, 2, 5, 1, 0, 3).verdict == VL_QUORUM_UNTRACKED_PASS);
    CHECK(vl_quorum_count(&slot, 2, 5 + VL_QUORUM_SLOTS, 1, 0, 3).verdict == VL_QUORUM_COMPLETE);
    // An older op (retransmitted late) does not take the slot back; a later view does.
    CHECK(vl_quorum_arm(&slot, 2, 5) == VL_STAT_TC_ARM_STALE);
    CHECK(vl_quorum_arm(&slot, 1, 9999) == VL_STAT_TC_ARM_STALE);
    CHECK(vl_quorum_arm(&slot, 3, 5) == VL_STAT_TC_ARMED);
    CHECK(slot.view == 3);
    CHECK(slot.op == 5);
}

TEST_CASE("quorum: only the leader of the current view in normal status counts")
{
    vl_kernel_state s = normal_state(3, 10, 0, 3);  // view 3 of 3: leader 0
    CHECK(vl_quorum_active(&s, VL_FAST_PATHS_ALL, 0));
    CHECK(!vl_quorum_active(&s, VL_FAST_PATH_FAST_ACK | VL_FAST_PATH_BROADCAST, 0));
    CHECK(!vl_quorum_active(&s, VL_FAST_PATHS_ALL, 1));
    s.status = VL_STATUS_VIEW_CHANGE;
    CHECK(!vl_quorum_active(&s, VL_FAST_PATHS_ALL, 0));
    const vl_kernel_state empty{};
    CHECK(!vl_quorum_active(&empty, VL_FAST_PATHS_ALL, 0));
}

TEST_CASE("follower acks: highest (view, op)")
{
    vl_follower_ack a{};
    vl_follower_ack_update(&a, 2, 10);
    vl_follower_ack_update(&a, 2, 8);
    CHECK((a.view == 2 && a.op == 10));
    vl_follower_ack_update(&a, 1, 50);
    CHECK((a.view == 2 && a.op == 10));
    vl_follower_ack_update(&a, 3, 4);
    CHECK((a.view == 3 && a.op == 4));
}

TEST_CASE("PrepareOK checks: forged quorum marks, and fields a PrepareOK cannot carry")
{
    const std::vector<uint8_t> ok = encode(PrepareOk{.view = 1, .replica = 2, .op = 3}, cluster_id);
    const vl_header good = header_of(ok);
    CHECK(vl_check_prepare_ok(&good) == VL_STAT_NONE);
    vl_header h = good;
    h.flags = VL_FLAG_QUORUM;
    CHECK(vl_check_prepare_ok(&h) == VL_STAT_Q_FORGED);
    h = good;
    h.commit = 1;
    CHECK(vl_check_prepare_ok(&h) == VL_STAT_XDP_MALFORMED);
    h = good;
    h.batch_count = 1;
    CHECK(vl_check_prepare_ok(&h) == VL_STAT_XDP_MALFORMED);
    h = good;
    h.flags = 0x80;
    CHECK(vl_check_prepare_ok(&h) == VL_STAT_XDP_MALFORMED);
    h = good;
    h.reserved1 = 1;
    CHECK(vl_check_prepare_ok(&h) == VL_STAT_XDP_MALFORMED);
}

TEST_CASE("broadcast decisions and TC's own-message check")
{
    const vl_header commit = header_of(encode(Commit{.view = 1, .replica = 0, .commit = 4},
                                              cluster_id, VL_FLAG_BROADCAST));
    CHECK(vl_broadcast_decide(&commit, VL_FAST_PATHS_ALL) == VL_STAT_TC_BROADCAST);
    CHECK(vl_broadcast_decide(&commit, VL_FAST_PATH_QUORUM) == VL_STAT_TC_BROADCAST_OFF);
    const vl_header unmarked = prepare_header(1, 0, 4, 1);
    CHECK(vl_broadcast_decide(&unmarked, VL_FAST_PATHS_ALL) == VL_STAT_TC_UNICAST);

    CHECK(vl_tc_check(&commit, VL_HEADER_BYTES, cluster_id, 0) == VL_STAT_NONE);
    CHECK(vl_tc_check(&commit, VL_HEADER_BYTES, cluster_id, 1) == VL_STAT_TC_NOT_OURS);
    CHECK(vl_tc_check(&commit, VL_HEADER_BYTES, cluster_id + 1, 0) == VL_STAT_TC_NOT_OURS);
    CHECK(vl_tc_check(&commit, VL_HEADER_BYTES + 1, cluster_id, 0) == VL_STAT_TC_NOT_OURS);
    CHECK(vl_tc_check(&commit, VL_HEADER_BYTES - 1, cluster_id, 0) == VL_STAT_TC_NOT_OURS);
    const vl_header svc =
        header_of(encode(StartViewChange{.view = 2, .replica = 0}, cluster_id));
    CHECK(vl_tc_check(&svc, VL_HEADER_BYTES, cluster_id, 0) == VL_STAT_TC_OTHER_TYPE);

    vl_peer p = peer_entry(replica_endpoint(2), true);
    CHECK(vl_peer_resolved(&p));
    p = peer_entry(replica_endpoint(2), false);
    CHECK(!vl_peer_resolved(&p));
    p = vl_peer{};
    p.flags = VL_PEER_RESOLVED;  // a MAC for nobody
    CHECK(!vl_peer_resolved(&p));
}

TEST_CASE("IPv4 header checksum")
{
    const std::vector<uint8_t> frame =
        udp_frame(replica_endpoint(0), replica_endpoint(1), std::vector<uint8_t>(10, 1));
    uint16_t stored = 0;
    std::memcpy(&stored, &frame[14 + 10], 2);
    CHECK(vl_ipv4_header_checksum(&frame[14]) == stored);
}

TEST_CASE("counter names: one per counter, distinct")
{
    std::set<std::string> names;
    for (uint32_t s = 0; s < VL_STAT_COUNT; s++) {
        const std::string name = vl_stat_name(s);
        CHECK(name != "unknown");
        CHECK(names.insert(name).second);
    }
    CHECK(std::string(vl_stat_name(VL_STAT_COUNT)) == "unknown");
    CHECK(std::string(vl_stat_name(VL_STAT_NONE)) == "unknown");
    for (uint32_t s = 0; s < VL_STAT_COUNT; s++) CHECK((is_xdp_exit(s) || is_tc_exit(s) ||
                                                        (s >= VL_STAT_TC_ARMED)));
}

}  // TEST_SUITE("pure")
