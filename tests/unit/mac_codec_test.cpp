// Authenticated replication in the codec (docs/security.md): in a cell with a replication key,
// encode() tags every datagram with SipHash-2-4 and decode() refuses, with a named reason, any
// datagram that none of the cell's keys tagged, before it reads anything of the body. This file
// also runs as wire_tests_asan.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/message.h"
#include "mac_keys.h"
#include "voltlock/wire.h"

namespace voltlock {
namespace {

using test_support::keys_of;

using Datagram = std::vector<uint8_t>;

constexpr uint32_t cluster = 0x00C0FFEEu;
constexpr vl_mac_key key_old{0x0123456789ABCDEFull, 0xFEDCBA9876543210ull};
constexpr vl_mac_key key_new{0x1111111122222222ull, 0x3333333344444444ull};

const CellWire signed_old(cluster, keys_of({key_old}));
const CellWire signed_new(cluster, keys_of({key_new}));
const CellWire unkeyed(cluster);

std::vector<Message> samples()
{
    Prepare prepare{.view = 7, .replica = 0, .op = 12, .commit = 10};
    for (uint64_t i = 0; i < 3; i++)
        prepare.entries.push_back(Entry{.timestamp_ms = 1000 + i, .client_id = 5,
                                        .request_number = 40 + i, .payload = "lock db/primary"});
    return {
        Request{.view = 7, .client_id = 5, .request_number = 41, .payload = "acquire"},
        Reply{.view = 7, .replica = 0, .client_id = 5, .request_number = 41, .result = "ok"},
        prepare,
        PrepareOk{.view = 7, .replica = 2, .op = 12},
        Commit{.view = 7, .replica = 0, .commit = 12, .heartbeat = 99},
        StartViewChange{.view = 8, .replica = 1},
        DoViewChange{.view = 8, .replica = 1, .last_normal_view = 7, .op = 12, .commit = 10},
        Recovery{.replica = 2, .nonce = 0xABCDEF},
        CommitOk{.view = 7, .replica = 1, .heartbeat = 99},
    };
}

std::string outcome(const Datagram& d, const CellWire& wire)
{
    const DecodeResult r = decode(d, wire);
    return r.ok() ? "ok" : decode_error_name(r.error());
}

}  // namespace

TEST_CASE("mac codec: every message signed with the cell's key decodes to what was sent")
{
    for (const Message& m : samples()) {
        CAPTURE(message_name(m));
        const Datagram d = encode(m, signed_old);
        const DecodeResult r = decode(d, signed_old);
        REQUIRE_MESSAGE(r.ok(), decode_error_name(r.error()));
        CHECK(r.value().message == m);
        // The tag is the reference SipHash-2-4 of the datagram with the tag field zeroed.
        Datagram zeroed = d;
        std::memset(zeroed.data() + offsetof(vl_header, checksum), 0, 8);
        uint64_t tag = 0;
        std::memcpy(&tag, d.data() + offsetof(vl_header, checksum), 8);
        CHECK(tag == vl_siphash_bytes(zeroed.data(), static_cast<uint32_t>(zeroed.size()),
                                      static_cast<uint32_t>(zeroed.size()), &key_old));
    }
}

TEST_CASE("mac codec: a wrong key, or no key, is bad_mac; a keyed datagram to a keyless cell is "
          "bad_checksum")
{
    for (const Message& m : samples()) {
        CAPTURE(message_name(m));
        CHECK(outcome(encode(m, signed_new), signed_old) == "bad_mac");
        CHECK(outcome(encode(m, unkeyed), signed_old) == "bad_mac");  // no downgrade
        CHECK(outcome(encode(m, signed_old), unkeyed) == "bad_checksum");
    }
}

TEST_CASE("mac codec: during a rotation both keys verify; the first one signs")
{
    const CellWire rotating(cluster, keys_of({key_new, key_old}));
    for (const Message& m : samples()) {
        CAPTURE(message_name(m));
        CHECK(outcome(encode(m, signed_old), rotating) == "ok");
        CHECK(outcome(encode(m, signed_new), rotating) == "ok");
        CHECK(encode(m, rotating) == encode(m, signed_new));
        const CellWire stranger(cluster, keys_of({vl_mac_key{7, 8}}));
        CHECK(outcome(encode(m, stranger), rotating) == "bad_mac");
    }
}

TEST_CASE("mac codec: every single-bit flip is refused, as bad_mac unless an earlier check fires")
{
    auto expected = [](size_t offset, const Datagram& corrupted) -> std::string {
        if (offset < 4) return "bad_magic";
        if (offset == 4) return "bad_version";
        if (offset == offsetof(vl_header, type)) {
            const uint8_t type = corrupted[offset];
            return type >= VL_MSG_TYPE_MIN && type <= VL_MSG_TYPE_MAX ? "bad_mac" : "unknown_type";
        }
        if (offset >= 8 && offset < 12) return "wrong_cluster";
        if (offset >= 40 && offset < 44) return "bad_length";
        return "bad_mac";
    };
    size_t flips = 0;
    for (const Message& m : samples()) {
        const Datagram d = encode(m, signed_old);
        for (size_t offset = 0; offset < d.size(); offset++)
            for (unsigned bit = 0; bit < 8; bit++) {
                Datagram corrupted = d;
                corrupted[offset] ^= static_cast<uint8_t>(1u << bit);
                const std::string got = outcome(corrupted, signed_old);
                if (got != expected(offset, corrupted)) {
                    CAPTURE(message_name(m));
                    CAPTURE(offset);
                    CAPTURE(bit);
                    CHECK(got == expected(offset, corrupted));
                }
                flips++;
            }
    }
    CHECK(flips > 8 * 9 * VL_HEADER_BYTES);
}

TEST_CASE("mac codec: a truncated MAC or datagram is refused with its reason")
{
    const Datagram d = encode(samples()[2], signed_old);  // the Prepare
    // Cut inside the tag (or anywhere in the header): truncated.
    for (size_t len = 0; len < VL_HEADER_BYTES; len++)
        CHECK(outcome(Datagram(d.begin(), d.begin() + static_cast<long>(len)), signed_old) ==
              "truncated");
    // Cut in the body: the header's length disagrees.
    CHECK(outcome(Datagram(d.begin(), d.end() - 1), signed_old) == "bad_length");
    // A tag cut to fewer bits (its top bytes zeroed): bad_mac.
    for (size_t kept = 0; kept < 8; kept++) {
        Datagram short_tag = d;
        std::memset(short_tag.data() + offsetof(vl_header, checksum) + kept, 0, 8 - kept);
        CHECK(outcome(short_tag, signed_old) == "bad_mac");
    }
}

TEST_CASE("mac codec: bad_mac has its name")
{
    CHECK(std::string(decode_error_name(DecodeError::bad_mac)) == "bad_mac");
}

}  // namespace voltlock
