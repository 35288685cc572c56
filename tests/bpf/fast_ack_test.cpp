// XDP fast acknowledge on a follower (Electrode §4.2, §6), run with BPF_PROG_TEST_RUN on the
// loaded program: frame in, verdict + frame out + counters + ring buffer + kernel last op.
#include <doctest/doctest.h>

#include <array>

#include <linux/bpf.h>

#include <cstring>

#include "harness.h"

using namespace voltlock;
using namespace voltlock::bpf_test;

namespace {

constexpr View view = 6;  // of 3 replicas: led by replica 0
constexpr uint8_t self = 1;

struct Follower {
    explicit Follower(Op last_op = 0, Config config = Config{.replica = self})
        : electrode(config)
    {
        electrode.set_state(normal_state(view, last_op, self, config.replica_count));
    }

    std::vector<uint8_t> prepare(Op op, uint16_t count = 1, View v = view, ReplicaIndex from = 0,
                                 size_t payload_bytes = 24) const
    {
        return message_frame(replica_endpoint(from), replica_endpoint(self),
                             make_prepare(v, from, op, count, op > 3 ? op - 3 : 0, payload_bytes));
    }

    Electrode electrode;
};

// The frame went up untouched, and nothing else happened.
void check_untouched(Follower& f, std::span<const uint8_t> in, const RunResult& r,
                     const vl_fast_ack_log& log_before)
{
    CHECK(r.retval == XDP_PASS);
    CHECK(std::equal(in.begin(), in.end(), r.out.begin(), r.out.end()));
    CHECK(f.electrode.drain_ring().empty());
    const vl_fast_ack_log log = f.electrode.fast_ack_log();
    CHECK(log.view == log_before.view);
    CHECK(log.last_op == log_before.last_op);
}

// `r` is the PrepareOK(view, op) from replica `self` for the Prepare frame `in`.
void check_prepare_ok(std::span<const uint8_t> in, const RunResult& r, View v, Op op)
{
    REQUIRE(r.retval == XDP_TX);
    CHECK(r.out.size() == 14 + 20 + 8 + VL_HEADER_BYTES);
    const ParsedFrame got = parse_frame(r.out);
    const ParsedFrame sent = parse_frame(in);
    CHECK(got.dst_mac == sent.src_mac);
    CHECK(got.src_mac == sent.dst_mac);
    CHECK(got.src_ip == sent.dst_ip);
    CHECK(got.dst_ip == sent.src_ip);
    CHECK(got.src_port == sent.dst_port);
    CHECK(got.dst_port == sent.src_port);
    CHECK(got.ip_checksum_ok);
    CHECK(got.ip_total_length == 20 + 8 + VL_HEADER_BYTES);
    CHECK(got.udp_length == 8 + VL_HEADER_BYTES);
    CHECK(got.udp_checksum == 0);
    const DecodeResult decoded = decode(got.payload, cluster_id);
    REQUIRE_MESSAGE(decoded.ok(), "decode: " << decode_error_name(decoded.error()));
    CHECK(decoded.value().flags == VL_FLAG_KERNEL_ACK);
    CHECK(std::get<PrepareOk>(decoded.value().message) ==
          PrepareOk{.view = v, .replica = self, .op = op});
    CHECK(got.payload == encode(PrepareOk{.view = v, .replica = self, .op = op}, cluster_id,
                                VL_FLAG_KERNEL_ACK));
}

std::vector<uint8_t> payload_of(std::span<const uint8_t> frame)
{
    return {frame.begin() + 42, frame.end()};
}

}  // namespace

TEST_CASE("fast ack: in-order Prepares are appended whole, acknowledged and advance last op")
{
    VL_REQUIRE_KERNEL();
    Follower f;
    const StatsDelta delta(f.electrode);
    Op last = 0;
    for (const uint16_t count : std::array<uint16_t, 5>{1, 1, 3, 1, 7}) {
        const Op op = last + count;
        const std::vector<uint8_t> in = f.prepare(op, count);
        const RunResult r = f.electrode.run_xdp(in);
        check_prepare_ok(in, r, view, op);

        const std::vector<std::vector<uint8_t>> ring = f.electrode.drain_ring();
        REQUIRE(ring.size() == 1);
        CHECK(ring[0] == payload_of(in));  // the whole Prepare, byte for byte
        const DecodeResult record = decode(ring[0], cluster_id);
        REQUIRE(record.ok());
        CHECK(std::get<Prepare>(record.value().message) ==
              make_prepare(view, 0, op, count, op > 3 ? op - 3 : 0));
        const vl_fast_ack_log log = f.electrode.fast_ack_log();
        CHECK(log.view == view);
        CHECK(log.last_op == op);
        last = op;
    }
    CHECK(delta[VL_STAT_FA_APPENDED] == 5);
    CHECK(delta.xdp_exits() == 5);
    // The record user space wrote is left alone: the kernel's progress is its own map.
    CHECK(f.electrode.state().state.last_op == 0);
}

TEST_CASE("fast ack: a retransmission is acknowledged again, never appended twice")
{
    VL_REQUIRE_KERNEL();
    Follower f;
    for (Op op = 1; op <= 3; op++) REQUIRE(f.electrode.run_xdp(f.prepare(op)).retval == XDP_TX);
    REQUIRE(f.electrode.drain_ring().size() == 3);

    const StatsDelta delta(f.electrode);
    for (const Op op : {Op{3}, Op{2}, Op{1}, Op{3}}) {
        const std::vector<uint8_t> in = f.prepare(op);
        // PrepareOK(v, n) = "I hold every op up to n in view v": re-ack the op asked about.
        check_prepare_ok(in, f.electrode.run_xdp(in), view, op);
    }
    // A batch wholly held.
    const std::vector<uint8_t> batch = f.prepare(3, 3);
    check_prepare_ok(batch, f.electrode.run_xdp(batch), view, 3);
    CHECK(f.electrode.drain_ring().empty());
    CHECK(f.electrode.fast_ack_log().last_op == 3);
    CHECK(delta[VL_STAT_FA_REACKED] == 5);
    CHECK(delta.xdp_exits() == 5);
}

TEST_CASE("fast ack: the kernel's last op combines with the one user space writes")
{
    VL_REQUIRE_KERNEL();
    Follower f(5);  // user space holds ops 1..5
    const std::vector<uint8_t> six = f.prepare(6);
    check_prepare_ok(six, f.electrode.run_xdp(six), view, 6);
    // User space mirrors a record that is behind the kernel (it has not read the ring yet).
    f.electrode.set_state(normal_state(view, 5, self, 3));
    const std::vector<uint8_t> seven = f.prepare(7);
    check_prepare_ok(seven, f.electrode.run_xdp(seven), view, 7);
    // And one ahead of it (it processed Prepares that went up): the record wins.
    f.electrode.set_state(normal_state(view, 20, self, 3));
    const std::vector<uint8_t> twenty_one = f.prepare(21);
    check_prepare_ok(twenty_one, f.electrode.run_xdp(twenty_one), view, 21);
    CHECK(f.electrode.drain_ring().size() == 3);
    // What the kernel appended in an earlier view counts for nothing in a later one.
    f.electrode.set_state(normal_state(view + 3, 2, self, 3));  // view 9, leader 0 again
    const StatsDelta delta(f.electrode);
    const std::vector<uint8_t> stale_progress = f.prepare(4, 1, view + 3);
    check_untouched(f, stale_progress, f.electrode.run_xdp(stale_progress),
                    f.electrode.fast_ack_log());
    CHECK(delta[VL_STAT_FA_GAP] == 1);
    const std::vector<uint8_t> three = f.prepare(3, 1, view + 3);
    check_prepare_ok(three, f.electrode.run_xdp(three), view + 3, 3);
    CHECK(f.electrode.drain_ring().size() == 1);
    CHECK(f.electrode.fast_ack_log().view == view + 3);
    CHECK(f.electrode.fast_ack_log().last_op == 3);
}

TEST_CASE("fast ack: everything the paper sends up goes up untouched, with its reason")
{
    VL_REQUIRE_KERNEL();
    struct Case {
        const char* name;
        uint32_t stat;
        vl_kernel_state state;
        uint32_t enabled;
        std::vector<uint8_t> frame;
    };
    Follower f(2);
    const vl_kernel_state normal = normal_state(view, 2, self, 3);
    vl_kernel_state view_change = normal;
    view_change.status = VL_STATUS_VIEW_CHANGE;
    view_change.fast_ack = 0;
    vl_kernel_state view_change_fast = normal;  // even if a record said fast_ack
    view_change_fast.status = VL_STATUS_VIEW_CHANGE;
    vl_kernel_state recovering = normal;
    recovering.status = VL_STATUS_RECOVERING;
    vl_kernel_state fast_ack_off = normal;
    fast_ack_off.fast_ack = 0;
    vl_kernel_state leading = normal_state(view + 1, 2, self, 3);  // view 7: we lead
    leading.fast_ack = 1;  // the core never says so for a leader; the kernel checks anyway
    const uint32_t all = VL_FAST_PATHS_ALL;

    const std::vector<Case> cases = {
        {"gap", VL_STAT_FA_GAP, normal, all, f.prepare(4)},
        {"gap (batch)", VL_STAT_FA_GAP, normal, all, f.prepare(6, 2)},
        {"overlap", VL_STAT_FA_OVERLAP, normal, all, f.prepare(4, 3)},
        {"stale view", VL_STAT_FA_STALE_VIEW, normal, all, f.prepare(3, 1, view - 3)},
        {"newer view", VL_STAT_FA_NEWER_VIEW, normal, all, f.prepare(3, 1, view + 3)},
        {"view change", VL_STAT_FA_NOT_NORMAL, view_change, all, f.prepare(3)},
        {"view change, fast_ack set", VL_STAT_FA_NOT_NORMAL, view_change_fast, all, f.prepare(3)},
        {"recovering", VL_STAT_FA_NOT_NORMAL, recovering, all, f.prepare(3)},
        {"fast_ack off in the record", VL_STAT_FA_DISABLED, fast_ack_off, all, f.prepare(3)},
        {"fast ack path disabled", VL_STAT_FA_DISABLED, normal,
         all & ~uint32_t{VL_FAST_PATH_FAST_ACK}, f.prepare(3)},
        {"not from the leader", VL_STAT_FA_NOT_FROM_LEADER, normal, all, f.prepare(3, 1, view, 2)},
        {"we lead the view", VL_STAT_FA_IS_LEADER, leading, all, f.prepare(3, 1, view + 1, 1)},
        {"no state written yet", VL_STAT_FA_NOT_NORMAL, vl_kernel_state{}, 0, f.prepare(3)},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        f.electrode.set_state(c.state, c.enabled);
        const vl_fast_ack_log log = f.electrode.fast_ack_log();
        const StatsDelta delta(f.electrode);
        const RunResult r = f.electrode.run_xdp(c.frame);
        check_untouched(f, c.frame, r, log);
        CHECK_MESSAGE(delta[c.stat] == 1, delta.describe());
        CHECK(delta.xdp_exits() == 1);
    }
}

TEST_CASE("fast ack: only our port, our cluster, our peers")
{
    VL_REQUIRE_KERNEL();
    Follower f(2);
    const Prepare p = make_prepare(view, 0, 3, 1);
    const Endpoint leader = replica_endpoint(0);
    const Endpoint me = replica_endpoint(self);
    Endpoint other_port = me;
    other_port.port = replication_port + 1;
    Endpoint stranger = leader;
    stranger.ipv4 = 0x0A000063;  // 10.0.0.99
    Endpoint leader_other_port = leader;
    leader_other_port.port = 9999;
    Endpoint replica2 = replica_endpoint(2);  // a peer, but claiming to be replica 0

    std::vector<uint8_t> arp = message_frame(leader, me, p);
    arp[12] = 0x08;
    arp[13] = 0x06;
    std::vector<uint8_t> tcp = message_frame(leader, me, p);
    tcp[14 + 9] = 6;
    std::vector<uint8_t> options = message_frame(leader, me, p);
    options[14] = 0x46;
    std::vector<uint8_t> fragment = message_frame(leader, me, p);
    fragment[14 + 6] = 0x20;  // more fragments
    std::vector<uint8_t> later_fragment = message_frame(leader, me, p);
    later_fragment[14 + 7] = 0x10;  // offset
    std::vector<uint8_t> ipv6ish = message_frame(leader, me, p);
    ipv6ish[14] = 0x65;

    struct Case {
        const char* name;
        uint32_t stat;
        std::vector<uint8_t> frame;
    };
    const std::vector<Case> cases = {
        {"not our port", VL_STAT_XDP_NOT_OUR_PORT, message_frame(leader, other_port, p)},
        {"other cluster", VL_STAT_XDP_WRONG_CLUSTER,
         message_frame(leader, me, p, 0, cluster_id + 1)},
        {"not a peer's address", VL_STAT_XDP_NOT_PEER, message_frame(stranger, me, p)},
        {"not a peer's port", VL_STAT_XDP_NOT_PEER, message_frame(leader_other_port, me, p)},
        {"another peer's address", VL_STAT_XDP_NOT_PEER, message_frame(replica2, me, p)},
        {"not IPv4", VL_STAT_XDP_NOT_IPV4, arp},
        {"IP version", VL_STAT_XDP_NOT_IPV4, ipv6ish},
        {"not UDP", VL_STAT_XDP_NOT_UDP, tcp},
        {"IP options", VL_STAT_XDP_IP_OPTIONS, options},
        {"fragment", VL_STAT_XDP_IP_FRAGMENT, fragment},
        {"later fragment", VL_STAT_XDP_IP_FRAGMENT, later_fragment},
        {"a Commit", VL_STAT_XDP_OTHER_TYPE,
         message_frame(leader, me, Commit{.view = view, .replica = 0, .commit = 2})},
        {"a request", VL_STAT_XDP_BAD_REPLICA,
         message_frame(stranger, me,
                       Request{.view = view, .client_id = 1, .request_number = 1,
                               .payload = "x"})},
        {"replica out of range", VL_STAT_XDP_BAD_REPLICA,
         message_frame(leader, me, make_prepare(view, 3, 3, 1))},
        {"UDP, not ours", VL_STAT_XDP_TRUNCATED, udp_frame(leader, me, std::vector<uint8_t>(9))},
    };
    for (const Case& c : cases) {
        CAPTURE(c.name);
        const vl_fast_ack_log log = f.electrode.fast_ack_log();
        const StatsDelta delta(f.electrode);
        check_untouched(f, c.frame, f.electrode.run_xdp(c.frame), log);
        CHECK_MESSAGE(delta[c.stat] == 1, delta.describe());
        CHECK(delta.xdp_exits() == 1);
    }
    // Not configured at all: an unconfigured peer entry matches nobody.
    f.electrode.set_peer(0, vl_peer{});
    const std::vector<uint8_t> in = message_frame(leader, me, p);
    const StatsDelta delta(f.electrode);
    check_untouched(f, in, f.electrode.run_xdp(in), f.electrode.fast_ack_log());
    CHECK(delta[VL_STAT_XDP_NOT_PEER] == 1);
}

TEST_CASE("fast ack: every truncation and every corrupted byte goes up, never acknowledged")
{
    VL_REQUIRE_KERNEL();
    Follower f(2);
    const std::vector<uint8_t> good = f.prepare(4, 2);  // ops 3 and 4: the next ones
    const vl_fast_ack_log log = f.electrode.fast_ack_log();
    const StatsDelta delta(f.electrode);
    size_t runs = 0;

    // The frame cut short (lengths in the headers no longer hold).
    for (size_t len = 14; len < good.size(); len++) {
        CAPTURE(len);
        const std::span<const uint8_t> in(good.data(), len);
        check_untouched(f, in, f.electrode.run_xdp(in), log);
        runs++;
    }
    // The message cut short, IP and UDP lengths consistent with it.
    const std::vector<uint8_t> message = payload_of(good);
    for (size_t len = 0; len < message.size(); len++) {
        CAPTURE(len);
        const std::vector<uint8_t> in = udp_frame(replica_endpoint(0), replica_endpoint(self),
                                                  std::span(message).first(len));
        check_untouched(f, in, f.electrode.run_xdp(in), log);
        runs++;
    }
    // Every byte of the message changed (header, checksum, entries).
    for (size_t at = 42; at < good.size(); at++) {
        CAPTURE(at);
        std::vector<uint8_t> in = good;
        in[at] ^= 0x5A;
        check_untouched(f, in, f.electrode.run_xdp(in), log);
        runs++;
    }
    // Bytes after the datagram (Ethernet padding) are fine: still acknowledged.
    std::vector<uint8_t> padded = good;
    padded.resize(good.size() + 20, 0);
    check_prepare_ok(good, f.electrode.run_xdp(padded), view, 4);
    CHECK(f.electrode.drain_ring().size() == 1);

    CHECK(delta[VL_STAT_FA_APPENDED] == 1);
    CHECK(delta[VL_STAT_XDP_BAD_CHECKSUM] > 0);
    CHECK(delta[VL_STAT_XDP_TRUNCATED] > 0);
    CHECK(delta.xdp_exits() == runs + 1);
    INFO(delta.describe());
}

TEST_CASE("fast ack: a bad checksum goes up")
{
    VL_REQUIRE_KERNEL();
    Follower f(2);
    std::vector<uint8_t> in = f.prepare(3);
    in[42 + offsetof(vl_header, checksum)] ^= 1;
    const StatsDelta delta(f.electrode);
    check_untouched(f, in, f.electrode.run_xdp(in), f.electrode.fast_ack_log());
    CHECK(delta[VL_STAT_XDP_BAD_CHECKSUM] == 1);
}

TEST_CASE("fast ack: a full ring buffer sends the Prepare up, and the kernel does not advance")
{
    VL_REQUIRE_KERNEL();
    // One page of ring: two Prepares of ~1.4 KB fit, the third does not.
    Follower f(0, Config{.replica = self, .ring_bytes = 4096});
    const size_t payload = 1300;
    REQUIRE(f.electrode.run_xdp(f.prepare(1, 1, view, 0, payload)).retval == XDP_TX);
    REQUIRE(f.electrode.run_xdp(f.prepare(2, 1, view, 0, payload)).retval == XDP_TX);
    const std::vector<uint8_t> third = f.prepare(3, 1, view, 0, payload);
    const StatsDelta delta(f.electrode);
    const RunResult r = f.electrode.run_xdp(third);
    CHECK(r.retval == XDP_PASS);
    CHECK(r.out == third);
    CHECK(delta[VL_STAT_FA_RING_FULL] == 1);
    CHECK(f.electrode.fast_ack_log().last_op == 2);
    // A retransmission of what is held is still acknowledged; the ring is not needed for that.
    check_prepare_ok(f.prepare(2, 1, view, 0, payload),
                     f.electrode.run_xdp(f.prepare(2, 1, view, 0, payload)), view, 2);
    // User space drains; the retransmitted third goes in.
    CHECK(f.electrode.drain_ring().size() == 2);
    check_prepare_ok(third, f.electrode.run_xdp(third), view, 3);
    CHECK(f.electrode.fast_ack_log().last_op == 3);
    CHECK(f.electrode.drain_ring().size() == 1);
}

TEST_CASE("fast ack: the largest message (multi-buffer XDP, jumbo frames)")
{
    VL_REQUIRE_KERNEL();
    Follower f(0);
    // One entry filling VL_MAX_MESSAGE_BYTES exactly.
    const size_t payload = VL_MAX_BODY_BYTES - VL_ENTRY_FIXED_BYTES;
    const std::vector<uint8_t> in = f.prepare(1, 1, view, 0, payload);
    REQUIRE(in.size() == 42 + VL_MAX_MESSAGE_BYTES);
    const RunResult r = f.electrode.run_xdp(in);
    check_prepare_ok(in, r, view, 1);
    const std::vector<std::vector<uint8_t>> ring = f.electrode.drain_ring();
    REQUIRE(ring.size() == 1);
    CHECK(ring[0] == payload_of(in));
    // One byte more is not ours to acknowledge (encode() refuses to make it: made by hand).
    std::vector<uint8_t> message = payload_of(f.prepare(2, 1, view, 0, payload));
    message.push_back(0);
    vl_header h{};
    std::memcpy(&h, message.data(), sizeof h);
    h.body_len += 1;
    h.checksum = 0;
    std::memcpy(message.data(), &h, sizeof h);
    h.checksum = vl_checksum(message.data(), static_cast<uint32_t>(message.size()));
    std::memcpy(message.data(), &h, sizeof h);
    const std::vector<uint8_t> too_big =
        udp_frame(replica_endpoint(0), replica_endpoint(self), message);
    const StatsDelta delta(f.electrode);
    CHECK(f.electrode.run_xdp(too_big).retval == XDP_PASS);
    CHECK(delta[VL_STAT_XDP_TOO_BIG] == 1);
}

TEST_CASE("verifier: the programs load for every cell size and slot mask")
{
    VL_REQUIRE_KERNEL();
    // The configuration is read-only data the verifier sees as constants, so each cell size is
    // a different program to verify.
    for (uint8_t n = 1; n <= VL_MAX_REPLICAS; n++) {
        CAPTURE(int{n});
        const Electrode e(Config{.replica = static_cast<uint8_t>(n - 1), .replica_count = n,
                                 .quorum_slot_mask = n % 2 ? VL_QUORUM_SLOTS - 1 : 63});
        CHECK(e.xdp_fd() >= 0);
        CHECK(e.tc_fd() >= 0);
    }
}
