// Authenticated replication in the kernel (docs/security.md): with the cell's keys in
// vl_mac_keys, XDP verifies every Prepare's and PrepareOK's SipHash-2-4 MAC before it
// fast-acknowledges or counts it, drops and counts (xdp_bad_mac) what none of the keys made, and
// tags every message it writes itself (the fast-ack PrepareOK, the quorum mark) so that user
// space accepts it. Run with BPF_PROG_TEST_RUN on the loaded programs; suite "pure" checks the
// word-wise MAC against the reference SipHash and the codec without a kernel.
#include <doctest/doctest.h>

#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <cstring>

#include "harness.h"
#include "mac_keys.h"

using namespace voltlock;
using namespace voltlock::bpf_test;
using voltlock::test_support::keys_of;

namespace {

constexpr View view = 6;  // of 3 replicas: led by replica 0
constexpr uint8_t leader = 0;
constexpr uint8_t follower = 1;

constexpr vl_mac_key key_a{0x0706050403020100ull, 0x0F0E0D0C0B0A0908ull};
constexpr vl_mac_key key_b{0x1122334455667788ull, 0x99AABBCCDDEEFF00ull};

const CellWire cell_a(cluster_id, keys_of({key_a}));
const CellWire cell_b(cluster_id, keys_of({key_b}));

std::vector<uint8_t> payload_of(std::span<const uint8_t> frame)
{
    return {frame.begin() + 42, frame.end()};
}

// Flips bit `bit` of the UDP payload (the VR message) in a frame, keeping the UDP checksum
// right, so that only the MAC can tell.
std::vector<uint8_t> flip_payload_bit(std::span<const uint8_t> frame, size_t bit)
{
    std::vector<uint8_t> payload = payload_of(frame);
    payload[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const ParsedFrame parsed = parse_frame(frame);
    Endpoint from{parsed.src_mac, parsed.src_ip, parsed.src_port};
    Endpoint to{parsed.dst_mac, parsed.dst_ip, parsed.dst_port};
    return udp_frame(from, to, payload);
}

struct Follower {
    explicit Follower(const vl_mac_keys& keys) : electrode(Config{.replica = follower})
    {
        electrode.set_mac_keys(keys);
        electrode.set_state(normal_state(view, 0, follower, 3));
    }
    std::vector<uint8_t> prepare(Op op, const CellWire& wire) const
    {
        return message_frame(replica_endpoint(leader), replica_endpoint(follower),
                             make_prepare(view, leader, op), 0, wire);
    }
    Electrode electrode;
};

struct Leader {
    explicit Leader(const vl_mac_keys& keys)
        : electrode(Config{.replica = leader, .replica_count = 3})
    {
        electrode.set_mac_keys(keys);
        electrode.set_state(normal_state(view, 0, leader, 3));
    }
    void send_prepare(Op op, const CellWire& wire) const
    {
        const RunResult r = electrode.run_tc(message_frame(
            replica_endpoint(leader), replica_endpoint(follower), make_prepare(view, leader, op),
            0, wire));
        REQUIRE(r.retval == TC_ACT_OK);
    }
    std::vector<uint8_t> ack(uint8_t from, Op op, const CellWire& wire) const
    {
        return message_frame(replica_endpoint(from), replica_endpoint(leader),
                             PrepareOk{.view = view, .replica = from, .op = op},
                             VL_FLAG_KERNEL_ACK, wire);
    }
    Electrode electrode;
};

// A forged or corrupted frame: dropped, counted as xdp_bad_mac, nothing appended, acknowledged
// or counted.
void check_dropped_forged(Electrode& e, std::span<const uint8_t> frame)
{
    const StatsDelta delta(e);
    const vl_fast_ack_log log_before = e.fast_ack_log();
    const RunResult r = e.run_xdp(frame);
    CHECK_MESSAGE(r.retval == XDP_DROP, delta.describe());
    CHECK_MESSAGE(delta[VL_STAT_XDP_BAD_MAC] == 1, delta.describe());
    CHECK(delta.xdp_exits() == 1);
    CHECK(e.drain_ring().empty());
    CHECK(e.fast_ack_log().last_op == log_before.last_op);
}

}  // namespace

TEST_SUITE("pure")
{
    TEST_CASE("mac: SipHash-2-4 matches the reference test vector")
    {
        // Aumasson & Bernstein's vector: key 00..0f, message 00..0e (15 bytes).
        uint8_t message[15];
        for (uint8_t i = 0; i < 15; i++) message[i] = i;
        CHECK(vl_siphash_bytes(message, 15, 15, &key_a) == 0xa129ca6149be45e5ull);
        // The empty message.
        CHECK(vl_siphash_bytes(message, 0, 0, &key_a) == 0x726fdb47dd0e0e31ull);
    }

    TEST_CASE("mac: vl_mac_words equals vl_mac for every length, ignoring bytes past the end")
    {
        struct {
            alignas(8) uint8_t bytes[VL_MESSAGE_WORDS * 8];
        } s;
        for (size_t i = 0; i < sizeof s.bytes; i++) s.bytes[i] = static_cast<uint8_t>(i * 31 + 7);
        for (uint32_t len = 0; len <= VL_MAX_MESSAGE_BYTES; len += len < 80 ? 1 : 97) {
            CAPTURE(len);
            CHECK(vl_mac_words(s.bytes, len, &key_a) == vl_mac(s.bytes, len, &key_a));
        }
        // The tag field does not count.
        const uint64_t before = vl_mac_words(s.bytes, 200, &key_a);
        s.bytes[offsetof(vl_header, checksum)] ^= 0xFF;
        CHECK(vl_mac_words(s.bytes, 200, &key_a) == before);
        CHECK(vl_mac_words(s.bytes, 200, &key_b) != before);
    }

    TEST_CASE("mac: vl_prepare_ok_init tags with key[0], as encode() does")
    {
        const vl_mac_keys rotating = keys_of({key_a, key_b});
        vl_header h{};
        vl_prepare_ok_init(&h, cluster_id, follower, view, 41, VL_FLAG_KERNEL_ACK, &rotating);
        const std::vector<uint8_t> expected = encode(
            PrepareOk{.view = view, .replica = follower, .op = 41}, cell_a, VL_FLAG_KERNEL_ACK);
        REQUIRE(expected.size() == sizeof h);
        CHECK(std::memcmp(&h, expected.data(), sizeof h) == 0);
        CHECK(vl_check_tag(&h, sizeof h, &rotating) == VL_STAT_NONE);
        const vl_mac_keys only_b = keys_of({key_b});
        CHECK(vl_check_tag(&h, sizeof h, &only_b) == VL_STAT_XDP_BAD_MAC);
        const vl_mac_keys none{};
        CHECK(vl_check_tag(&h, sizeof h, &none) == VL_STAT_XDP_BAD_CHECKSUM);
    }
}

TEST_CASE("mac: a valid Prepare is fast-acknowledged, and the kernel's PrepareOK carries a MAC")
{
    VL_REQUIRE_KERNEL();
    Follower f(keys_of({key_a}));
    const std::vector<uint8_t> in = f.prepare(1, cell_a);
    const StatsDelta delta(f.electrode);
    const RunResult r = f.electrode.run_xdp(in);
    REQUIRE_MESSAGE(r.retval == XDP_TX, delta.describe());
    CHECK(delta[VL_STAT_FA_APPENDED] == 1);
    CHECK(f.electrode.drain_ring() == std::vector<std::vector<uint8_t>>{payload_of(in)});
    const std::vector<uint8_t> ack = parse_frame(r.out).payload;
    const DecodeResult decoded = decode(ack, cell_a);
    REQUIRE_MESSAGE(decoded.ok(), decode_error_name(decoded.error()));
    CHECK(std::get<PrepareOk>(decoded.value().message) ==
          PrepareOk{.view = view, .replica = follower, .op = 1});
    // Keyed, not checksummed: a replica without the key refuses it.
    CHECK(decode(ack, cell_b).error() == DecodeError::bad_mac);
    CHECK(decode(ack, CellWire(cluster_id)).error() == DecodeError::bad_checksum);
}

TEST_CASE("mac: forged and bit-flipped Prepares are dropped and counted, never acknowledged")
{
    VL_REQUIRE_KERNEL();
    Follower f(keys_of({key_a}));
    SUBCASE("signed with another key") { check_dropped_forged(f.electrode, f.prepare(1, cell_b)); }
    SUBCASE("checksummed, as in a cell without a key (no downgrade)")
    {
        check_dropped_forged(f.electrode, f.prepare(1, CellWire(cluster_id)));
    }
    SUBCASE("one bit flipped anywhere the header checks do not catch first")
    {
        const std::vector<uint8_t> in = f.prepare(1, cell_a);
        const size_t bits = 8 * payload_of(in).size();
        // The commit number, the view's top bit, the tag, the entry's timestamp, client id,
        // request number and payload.
        const std::vector<size_t> flipped = {32 * 8 + 3, 16 * 8 + 63, 48 * 8, 55 * 8 + 7,
                                             56 * 8,     64 * 8 + 9,  72 * 8 + 1, bits - 1};
        for (const size_t bit : flipped) {
            CAPTURE(bit);
            check_dropped_forged(f.electrode, flip_payload_bit(in, bit));
        }
    }
    // The genuine one still goes through afterwards: nothing was advanced by the forgeries.
    const RunResult r = f.electrode.run_xdp(f.prepare(1, cell_a));
    CHECK(r.retval == XDP_TX);
}

TEST_CASE("mac: during a rotation either key is accepted, and the kernel signs with key[0]")
{
    VL_REQUIRE_KERNEL();
    Follower f(keys_of({key_b, key_a}));
    RunResult r = f.electrode.run_xdp(f.prepare(1, cell_a));  // a replica still on the old key
    REQUIRE(r.retval == XDP_TX);
    CHECK(decode(parse_frame(r.out).payload, cell_b).ok());
    r = f.electrode.run_xdp(f.prepare(2, cell_b));  // one already on the new key
    REQUIRE(r.retval == XDP_TX);
    CHECK(decode(parse_frame(r.out).payload, cell_b).ok());
    CHECK(f.electrode.drain_ring().size() == 2);
    const CellWire third(cluster_id, keys_of({vl_mac_key{1, 2}}));
    check_dropped_forged(f.electrode, f.prepare(3, third));
}

TEST_CASE("mac: forged PrepareOKs are dropped before the quorum count; valid ones complete it")
{
    VL_REQUIRE_KERNEL();
    Leader l(keys_of({key_a}));
    l.send_prepare(1, cell_a);
    const uint32_t slot = 1;
    // Forged acks from follower 1 (wrong key, bit flips, checksum only): none is counted.
    check_dropped_forged(l.electrode, l.ack(1, 1, cell_b));
    check_dropped_forged(l.electrode, l.ack(1, 1, CellWire(cluster_id)));
    const std::vector<uint8_t> valid = l.ack(1, 1, cell_a);
    for (const size_t bit : std::vector<size_t>{24 * 8, 16 * 8 + 1, 48 * 8 + 5})
        check_dropped_forged(l.electrode, flip_payload_bit(valid, bit));
    CHECK(l.electrode.slot(slot).acked == 0);
    CHECK(l.electrode.acked(1).op == 0);

    // The genuine ack completes the quorum of 3 (f = 1) and goes up marked, with a MAC user
    // space verifies.
    const StatsDelta delta(l.electrode);
    const RunResult r = l.electrode.run_xdp(valid);
    REQUIRE_MESSAGE(r.retval == XDP_PASS, delta.describe());
    CHECK(delta[VL_STAT_Q_COMPLETE] == 1);
    const DecodeResult decoded = decode(parse_frame(r.out).payload, cell_a);
    REQUIRE_MESSAGE(decoded.ok(), decode_error_name(decoded.error()));
    CHECK(decoded.value().flags == (VL_FLAG_QUORUM | VL_FLAG_KERNEL_ACK));
    CHECK(l.electrode.acked(1).op == 1);
}

TEST_CASE("mac: TC broadcast leaves the message, and so its MAC, as user space signed it")
{
    VL_REQUIRE_KERNEL();
    Leader l(keys_of({key_a}));
    const std::vector<uint8_t> in =
        message_frame(replica_endpoint(leader), replica_endpoint(follower),
                      make_prepare(view, leader, 1), VL_FLAG_BROADCAST, cell_a);
    const RunResult r = l.electrode.run_tc(in);
    REQUIRE(r.retval == TC_ACT_OK);
    const ParsedFrame out = parse_frame(r.out);
    CHECK(out.payload == payload_of(in));
    CHECK(decode(out.payload, cell_a).ok());
}
