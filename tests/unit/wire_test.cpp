// The wire codec (server/core/message.h) and the header it shares with the eBPF programs
// (bpf/include/voltlock/wire.h): every message type survives a round trip, and every malformed
// datagram is rejected with its named reason, never accepted and never read out of bounds.
// This file also runs as wire_tests_asan, under AddressSanitizer and UBSan.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/message.h"
#include "split_mix64.h"
#include "voltlock/wire.h"

namespace voltlock {
namespace {

using Datagram = std::vector<uint8_t>;

constexpr uint32_t cluster = 0x00C0FFEEu;

// ---- Sample messages --------------------------------------------------------------------------

// `len` bytes that run through every value, NUL included.
Bytes patterned_bytes(size_t len, size_t seed)
{
    Bytes b(len, '\0');
    for (size_t i = 0; i < len; i++) b[i] = static_cast<char>((i * 31 + seed * 7) & 0xFF);
    return b;
}

// A payload that a C string would cut short.
Bytes binary_payload()
{
    const char raw[] = {'\0', 'W', '\0', '\x01', '\xFF', 'l', 'o', 'c', 'k', '\0'};
    return Bytes(raw, sizeof raw);
}

Entry sample_entry(uint64_t n, Bytes payload)
{
    return Entry{.timestamp_ms = 1'700'000'000'000 + n,
                 .client_id = 0xC11E'0000 + n,
                 .request_number = 100 + n,
                 .payload = std::move(payload)};
}

// Entries with an empty, a short text and a binary payload, in turn.
std::vector<Entry> sample_entries(size_t count)
{
    std::vector<Entry> entries;
    for (size_t i = 0; i < count; i++) {
        Bytes payload = i % 3 == 0 ? Bytes{} : i % 3 == 1 ? Bytes("W v=" + std::to_string(i))
                                                          : binary_payload();
        entries.push_back(sample_entry(i + 1, std::move(payload)));
    }
    return entries;
}

// `count` entries whose encoding takes exactly `body_bytes`.
std::vector<Entry> entries_filling(size_t body_bytes, size_t count)
{
    REQUIRE(count * VL_ENTRY_FIXED_BYTES <= body_bytes);
    const size_t payload_total = body_bytes - count * VL_ENTRY_FIXED_BYTES;
    std::vector<Entry> entries;
    for (size_t i = 0; i < count; i++) {
        const size_t len = payload_total / count + (i < payload_total % count ? 1 : 0);
        entries.push_back(sample_entry(i + 1, patterned_bytes(len, i)));
    }
    return entries;
}

Request sample_request()
{
    return Request{.view = 9, .client_id = 0xC11E'0001, .request_number = 42,
                   .payload = "W hello"};
}

// ops (9, 12], commit 10
Prepare sample_prepare()
{
    return Prepare{.view = 9, .replica = 0, .op = 12, .commit = 10,
                   .entries = sample_entries(3)};
}

// ops (17, 20]: first_op + entries == op, the most the header allows
StartView sample_start_view()
{
    return StartView{.view = 9, .replica = 0, .op = 20, .commit = 17, .first_op = 17,
                     .entries = sample_entries(3)};
}

NewState sample_new_state()
{
    return NewState{.view = 9, .replica = 2, .op = 50, .commit = 45, .first_op = 40,
                    .entries = sample_entries(4), .state_unconfirmed = true};
}

DoViewChange sample_do_view_change()
{
    return DoViewChange{.view = 9, .replica = 1, .last_normal_view = 7, .op = 20, .commit = 17};
}

// One message of every type, in the order of enum vl_message_type.
std::vector<Message> one_of_each_type()
{
    return {
        sample_request(),
        Reply{.view = 9, .replica = 0, .client_id = 0xC11E'0001, .request_number = 42,
              .result = binary_payload()},
        sample_prepare(),
        PrepareOk{.view = 9, .replica = 2, .op = 12},
        Commit{.view = 9, .replica = 0, .commit = 12, .heartbeat = 310},
        StartViewChange{.view = 10, .replica = 1},
        sample_do_view_change(),
        sample_start_view(),
        Recovery{.replica = 2, .nonce = 0x5EED'0000'0000'0001},
        RecoveryResponse{.view = 9, .replica = 0, .nonce = 0x5EED'0000'0000'0001, .op = 20,
                         .commit = 17, .last_normal_view = 8, .standing = Standing::restarting},
        GetState{.view = 9, .replica = 1, .op = 17},
        sample_new_state(),
        SnapshotOffer{.view = 9, .replica = 2, .op = 40, .state_unconfirmed = true},
        CommitOk{.view = 9, .replica = 1, .heartbeat = 310},
        Replies{.view = 9,
                .replica = 0,
                .items = {{.client_id = 0xC11E'0001, .request_number = 42, .commit = 12,
                             .result = binary_payload()},
                            {.client_id = 0xC11E'0002, .request_number = 7, .commit = 12}}},
        Requests{.view = 9,
                 .replica = 2,
                 .items = {{.client_id = 0xC11E'0003, .request_number = 5,
                            .payload = binary_payload()},
                           {.client_id = 0xC11E'0004, .request_number = 1}}},
    };
}

// ---- Datagram surgery -------------------------------------------------------------------------

// (A plain test rather than REQUIRE, which would count as an assertion on every fuzz iteration.)
template <typename T>
void poke(Datagram& d, size_t offset, T value)
{
    if (offset + sizeof value > d.size()) FAIL("poke at " << offset << " past " << d.size());
    std::memcpy(d.data() + offset, &value, sizeof value);
}

template <typename T>
T peek(const Datagram& d, size_t offset)
{
    T value{};
    if (offset + sizeof value > d.size()) FAIL("peek at " << offset << " past " << d.size());
    std::memcpy(&value, d.data() + offset, sizeof value);
    return value;
}

void fix_body_len(Datagram& d)
{
    poke(d, offsetof(vl_header, body_len), static_cast<uint32_t>(d.size() - VL_HEADER_BYTES));
}

// Recomputes the checksum, so that a deliberate lie elsewhere is what decode has to catch.
void fix_checksum(Datagram& d)
{
    poke(d, offsetof(vl_header, checksum), vl_checksum(d.data(), static_cast<uint32_t>(d.size())));
}

// `message` encoded, then edited by `edit`, with a checksum that matches the edited bytes.
template <typename Edit>
Datagram forge(const Message& message, Edit edit)
{
    Datagram d = encode(message, cluster);
    REQUIRE(!d.empty());
    edit(d);
    fix_checksum(d);
    return d;
}

// Decodes from a heap block of exactly the datagram's size, so that ASan sees any read past the
// end (a vector's spare capacity would hide it).
DecodeResult decode_exact(const uint8_t* data, size_t len, uint32_t cluster_id = cluster)
{
    const std::unique_ptr<uint8_t[]> exact(new uint8_t[len]);
    if (len > 0) std::memcpy(exact.get(), data, len);
    return decode(std::span<const uint8_t>(exact.get(), len), cluster_id);
}

DecodeResult decode_exact(const Datagram& d, uint32_t cluster_id = cluster)
{
    return decode_exact(d.data(), d.size(), cluster_id);
}

// "accepted", or the name of the reason for the rejection.
std::string outcome(const Datagram& d, uint32_t cluster_id = cluster)
{
    const DecodeResult r = decode_exact(d, cluster_id);
    return r.ok() ? "accepted" : decode_error_name(r.error());
}

// Offset of entry `index`'s payload_len field in an encoded Prepare, StartView or NewState.
size_t payload_len_offset(const std::vector<Entry>& entries, size_t index, size_t body_prefix)
{
    size_t offset = VL_HEADER_BYTES + body_prefix;
    for (size_t i = 0; i < index; i++) offset += entry_wire_bytes(entries[i]);
    return offset + 24;  // after timestamp_ms, client_id, request_number
}

Decoded round_trip(const Message& message, uint16_t flags = 0)
{
    const Datagram d = encode(message, cluster, flags);
    REQUIRE(d.size() == encoded_size(message));
    const DecodeResult r = decode_exact(d);
    REQUIRE_MESSAGE(r.ok(), "rejected: " << std::string(decode_error_name(r.error())));
    return r.value();
}

using test_support::SplitMix64;

// For CAPTURE, which prints a const char* as a pointer.
std::string name_of(const Message& message) { return message_name(message); }

std::string hex(const Datagram& d)
{
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    for (uint8_t b : d) {
        s += digits[b >> 4];
        s += digits[b & 0xF];
    }
    return s;
}

}  // namespace

// ---- The header -------------------------------------------------------------------------------

TEST_CASE("wire.h: vl_header is VL_HEADER_BYTES long with every field at its stated offset")
{
    // wire.h static_asserts these; checked again here so a failure names the field at run time.
    CHECK(sizeof(vl_header) == VL_HEADER_BYTES);
    CHECK(VL_HEADER_BYTES == 56);
    CHECK(offsetof(vl_header, magic) == 0);
    CHECK(offsetof(vl_header, version) == 4);
    CHECK(offsetof(vl_header, type) == 5);
    CHECK(offsetof(vl_header, flags) == 6);
    CHECK(offsetof(vl_header, cluster_id) == 8);
    CHECK(offsetof(vl_header, replica) == 12);
    CHECK(offsetof(vl_header, reserved0) == 13);
    CHECK(offsetof(vl_header, batch_count) == 14);
    CHECK(offsetof(vl_header, view) == 16);
    CHECK(offsetof(vl_header, op) == 24);
    CHECK(offsetof(vl_header, commit) == 32);
    CHECK(offsetof(vl_header, body_len) == 40);
    CHECK(offsetof(vl_header, reserved1) == 44);
    CHECK(offsetof(vl_header, checksum) == 48);
    CHECK(VL_MAX_BODY_BYTES == VL_MAX_MESSAGE_BYTES - VL_HEADER_BYTES);
    CHECK(VL_ENTRY_FIXED_BYTES == 8 + 8 + 8 + 2);

    // "VLK1" as bytes on the wire: the magic is little-endian.
    const Datagram d = encode(Commit{.view = 1, .replica = 0, .commit = 1}, cluster);
    REQUIRE(d.size() == VL_HEADER_BYTES);
    CHECK(std::string(d.begin(), d.begin() + 4) == "VLK1");
}

TEST_CASE("wire.h: a Commit encodes to exactly these golden bytes, checksum included")
{
    // Pinned once from this implementation and cross-checked against an independent Python
    // transcription of wire.h's checksum description. If this fails, the wire format or
    // vl_checksum changed: every deployed replica, client and eBPF program would disagree with
    // this build. Change it only together with VL_WIRE_VERSION.
    const Datagram golden = {
        0x56, 0x4C, 0x4B, 0x31, 0x01, 0x05, 0x01, 0x00,  // "VLK1", version 1, Commit, broadcast
        0xEE, 0xFF, 0xC0, 0x00, 0x02, 0x00, 0x00, 0x00,  // cluster, replica 2, reserved0, count 0
        0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // view 7
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // op 0
        0x29, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // commit 41
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // body_len 0, reserved1 0
        0xF3, 0x61, 0x78, 0x00, 0x38, 0xEE, 0x22, 0x83,  // checksum 0x8322EE38007861F3
    };
    const Message commit = Commit{.view = 7, .replica = 2, .commit = 41};
    CHECK(hex(encode(commit, cluster, VL_FLAG_BROADCAST)) == hex(golden));
    CHECK(vl_checksum(golden.data(), static_cast<uint32_t>(golden.size())) ==
          0x8322EE38007861F3ull);
    const DecodeResult r = decode_exact(golden);
    REQUIRE(r.ok());
    CHECK(r.value().message == commit);
    CHECK(r.value().flags == VL_FLAG_BROADCAST);
}

TEST_CASE("vl_checksum: golden value over bytes that end in a partial word")
{
    // 61 bytes 0x00, 0x01, ...: seven whole words (the checksum field's word, bytes 48..55,
    // taken as zero) and a 5-byte tail. Pinned once, like the golden Commit above.
    Datagram bytes(61);
    for (size_t i = 0; i < bytes.size(); i++) bytes[i] = static_cast<uint8_t>(i);
    CHECK(vl_checksum(bytes.data(), 61) == 0xC9FEE69792DEC697ull);
    CHECK(vl_checksum(bytes.data(), 0) == 0xE5B6ED7B3165EF61ull);
}

TEST_CASE("vl_checksum: ignores the checksum field's own bytes and covers the length")
{
    const Datagram d = encode(sample_prepare(), cluster);
    REQUIRE(d.size() % 8 != 0);  // ends in a partial word
    const uint64_t sum = vl_checksum(d.data(), static_cast<uint32_t>(d.size()));
    for (size_t i = offsetof(vl_header, checksum); i < VL_HEADER_BYTES; i++) {
        Datagram other = d;
        other[i] ^= 0xFF;
        CHECK(vl_checksum(other.data(), static_cast<uint32_t>(other.size())) == sum);
    }
    // A zero byte more fills the same zero-padded last word: only the length tells them apart.
    Datagram longer = d;
    longer.push_back(0);
    CHECK(vl_checksum(longer.data(), static_cast<uint32_t>(longer.size())) != sum);
}

// ---- Round trips ------------------------------------------------------------------------------

TEST_CASE("round trip: one message of every type decodes to the message encoded")
{
    const std::vector<Message> messages = one_of_each_type();
    REQUIRE(messages.size() == VL_MSG_TYPE_MAX - VL_MSG_TYPE_MIN + 1);
    for (const Message& message : messages) {
        CAPTURE(name_of(message));
        const Datagram d = encode(message, cluster);
        CHECK(d[offsetof(vl_header, type)] == message_type(message));
        CHECK(d.size() == encoded_size(message));
        CHECK(round_trip(message).message == message);
    }
}

TEST_CASE("round trip: a StartViewChange that asks carries 1 in header.op; 2 is refused")
{
    const StartViewChange asking{.view = 10, .replica = 1, .asking = true};
    CHECK(round_trip(asking).message == Message{asking});
    CHECK(encode(asking, cluster)[offsetof(vl_header, op)] == 1);
    const auto op_2 = [](Datagram& d) { poke<uint64_t>(d, offsetof(vl_header, op), 2); };
    CHECK(outcome(forge(asking, op_2)) != "accepted");
}

TEST_CASE("round trip: empty, text and binary (NUL-bearing) payloads and results")
{
    const Bytes payloads[] = {Bytes{}, Bytes("W x"), binary_payload(), patterned_bytes(700, 3)};
    for (const Bytes& payload : payloads) {
        CAPTURE(payload.size());
        Request request = sample_request();
        request.payload = payload;
        CHECK(round_trip(request).message == Message{request});

        const Reply reply{.view = 3, .replica = 14, .client_id = 1, .request_number = 2,
                          .result = payload};
        CHECK(round_trip(reply).message == Message{reply});

        Prepare prepare = sample_prepare();
        prepare.entries = {sample_entry(1, payload), sample_entry(2, payload),
                           sample_entry(3, payload)};
        CHECK(round_trip(prepare).message == Message{prepare});
    }
}

TEST_CASE("round trip: field values at their limits")
{
    const uint64_t max = UINT64_MAX;
    const Request request{.view = max, .client_id = max, .request_number = max, .payload = {}};
    CHECK(round_trip(request).message == Message{request});
    // A Prepare may start at op 1: ops (0, 3].
    Prepare first = sample_prepare();
    first.op = 3;
    CHECK(round_trip(first).message == Message{first});
    // A retransmitted Prepare carries the leader's current commit, which may be past its ops.
    Prepare old = sample_prepare();
    old.commit = 500;
    CHECK(round_trip(old).message == Message{old});
    const DoViewChange same_view{.view = 9, .replica = 14, .last_normal_view = 9, .op = max,
                                 .commit = max};
    CHECK(round_trip(same_view).message == Message{same_view});
    const StartView empty{.view = 9, .replica = 0, .op = 20, .commit = 20, .first_op = 20,
                          .entries = {}};
    CHECK(round_trip(empty).message == Message{empty});
    const NewState whole_log{.view = 1, .replica = 0, .op = 4, .commit = 0, .first_op = 0,
                             .entries = sample_entries(4)};
    CHECK(round_trip(whole_log).message == Message{whole_log});
}

TEST_CASE("round trip: flags come back as sent, for every combination of known flags")
{
    for (uint16_t flags = 0; flags <= VL_FLAGS_KNOWN; flags++) {
        for (const Message& message : one_of_each_type()) {
            CAPTURE(flags);
            CAPTURE(name_of(message));
            const Decoded decoded = round_trip(message, flags);
            CHECK(decoded.flags == flags);
            CHECK(decoded.message == message);
        }
    }
}

TEST_CASE("round trip: batches that exactly fill VL_DEFAULT_MESSAGE_BYTES")
{
    constexpr size_t body = VL_DEFAULT_MESSAGE_BYTES - VL_HEADER_BYTES;
    constexpr size_t max_count = body / VL_ENTRY_FIXED_BYTES;  // 54 empty-ish entries
    for (size_t count : {size_t{1}, size_t{7}, max_count}) {
        CAPTURE(count);
        Prepare prepare = sample_prepare();
        prepare.op = 1000;
        prepare.entries = entries_filling(body, count);
        StartView start_view = sample_start_view();
        start_view.op = 1000;
        start_view.entries = entries_filling(body - kStateTransferPrefixBytes, count);
        NewState new_state = sample_new_state();
        new_state.op = 1000;
        new_state.entries = entries_filling(body - kStateTransferPrefixBytes, count);

        for (const Message& message : {Message{prepare}, Message{start_view}, Message{new_state}}) {
            CAPTURE(name_of(message));
            REQUIRE(encoded_size(message) == VL_DEFAULT_MESSAGE_BYTES);
            std::vector<uint8_t> out(VL_DEFAULT_MESSAGE_BYTES);
            REQUIRE(encode(message, cluster, 0, out) == VL_DEFAULT_MESSAGE_BYTES);
            CHECK(peek<uint16_t>(out, offsetof(vl_header, batch_count)) == count);
            CHECK(round_trip(message).message == message);
        }
    }
}

// ---- Encoding bounds --------------------------------------------------------------------------

TEST_CASE("encode returns 0 when the datagram does not fit the buffer, and writes nothing")
{
    for (const Message& message : one_of_each_type()) {
        CAPTURE(name_of(message));
        const size_t size = encoded_size(message);
        std::vector<uint8_t> exact(size);
        CHECK(encode(message, cluster, 0, exact) == size);
        // Exactly sized heap blocks: ASan reports any write past the end.
        std::vector<uint8_t> short_by_one(size - 1, 0xAB);
        CHECK(encode(message, cluster, 0, short_by_one) == 0);
        CHECK(short_by_one == std::vector<uint8_t>(size - 1, 0xAB));
        CHECK(encode(message, cluster, 0, std::span<uint8_t>{}) == 0);
    }
    Prepare full = sample_prepare();
    full.op = 1000;
    full.entries = entries_filling(VL_DEFAULT_MESSAGE_BYTES - VL_HEADER_BYTES, 5);
    full.entries.back().payload += 'x';
    std::vector<uint8_t> out(VL_DEFAULT_MESSAGE_BYTES);
    CHECK(encode(full, cluster, 0, out) == 0);
}

TEST_CASE("encode refuses a message over VL_MAX_MESSAGE_BYTES however large the buffer")
{
    constexpr size_t max_payload = VL_MAX_MESSAGE_BYTES - VL_HEADER_BYTES - VL_REQUEST_FIXED_BYTES;
    std::vector<uint8_t> roomy(2 * VL_MAX_MESSAGE_BYTES);

    Request request = sample_request();
    request.payload = patterned_bytes(max_payload, 1);
    CHECK(encode(request, cluster, 0, roomy) == VL_MAX_MESSAGE_BYTES);
    CHECK(round_trip(request).message == Message{request});
    request.payload += 'x';
    CHECK(encode(request, cluster, 0, roomy) == 0);
    CHECK(encode(request, cluster).empty());

    Prepare prepare = sample_prepare();
    prepare.op = 1000;
    prepare.entries = entries_filling(VL_MAX_BODY_BYTES, VL_MAX_BODY_BYTES / VL_ENTRY_FIXED_BYTES);
    CHECK(encode(prepare, cluster, 0, roomy) == VL_MAX_MESSAGE_BYTES);
    CHECK(round_trip(prepare).message == Message{prepare});
    prepare.entries.push_back(sample_entry(999, {}));
    CHECK(encode(prepare, cluster, 0, roomy) == 0);
    CHECK(encode(prepare, cluster).empty());

    // A payload beyond the 16-bit payload_len field.
    Prepare huge = sample_prepare();
    huge.entries[0].payload = Bytes(70'000, 'x');
    std::vector<uint8_t> huge_buffer(80'000);
    CHECK(encode(huge, cluster, 0, huge_buffer) == 0);
    CHECK(encode(huge, cluster).empty());
}

// ---- Rejections, one reason at a time ---------------------------------------------------------

TEST_CASE("decode rejects as truncated every datagram shorter than a header (0..55 bytes)")
{
    for (const Message& message : one_of_each_type()) {
        const Datagram d = encode(message, cluster);
        for (size_t len = 0; len < VL_HEADER_BYTES; len++) {
            CAPTURE(len);
            CHECK(outcome(Datagram(d.begin(), d.begin() + static_cast<ptrdiff_t>(len))) ==
                  "truncated");
        }
    }
}

TEST_CASE("decode rejects a wrong magic as bad_magic")
{
    for (size_t i = 0; i < 4; i++) {
        CAPTURE(i);
        CHECK(outcome(forge(sample_prepare(), [&](Datagram& d) { d[i] ^= 0x20; })) ==
              "bad_magic");
    }
    // The magic written big-endian, as a port from a big-endian host would.
    CHECK(outcome(forge(sample_prepare(), [](Datagram& d) {
              poke<uint32_t>(d, 0, __builtin_bswap32(VL_MAGIC));
          })) == "bad_magic");
}

TEST_CASE("decode rejects any other version as bad_version")
{
    for (uint8_t version : {uint8_t{0}, uint8_t{2}, uint8_t{255}}) {
        CAPTURE(int{version});
        CHECK(outcome(forge(sample_prepare(), [&](Datagram& d) { d[4] = version; })) ==
              "bad_version");
    }
}

TEST_CASE("decode rejects types 0, 17 and 255 as unknown_type")
{
    for (uint8_t type : {uint8_t{0}, uint8_t{17}, uint8_t{255}}) {
        CAPTURE(int{type});
        CHECK(outcome(forge(Commit{.view = 1, .commit = 1}, [&](Datagram& d) {
                  d[offsetof(vl_header, type)] = type;
              })) == "unknown_type");
    }
}

TEST_CASE("decode rejects another cell's message as wrong_cluster")
{
    const Datagram d = encode(sample_prepare(), cluster);
    CHECK(outcome(d, cluster + 1) == "wrong_cluster");
    CHECK(outcome(d, 0) == "wrong_cluster");
    CHECK(outcome(d, cluster) == "accepted");
}

TEST_CASE("decode rejects a body_len that lies about the datagram's length as bad_length")
{
    for (const Message& message : one_of_each_type()) {
        CAPTURE(name_of(message));
        const Datagram d = encode(message, cluster);
        const auto body_len = static_cast<uint32_t>(d.size() - VL_HEADER_BYTES);
        for (uint32_t claimed : {body_len + 1, body_len - 1, body_len + 8, uint32_t{0},
                                 uint32_t{UINT32_MAX}}) {
            if (claimed == body_len) continue;  // body_len 0 on an empty-bodied type
            CAPTURE(claimed);
            CHECK(outcome(forge(message, [&](Datagram& e) {
                      poke(e, offsetof(vl_header, body_len), claimed);
                  })) == "bad_length");
        }
        // The datagram cut short or padded, body_len left as it was.
        if (body_len > 0)
            CHECK(outcome(forge(message, [](Datagram& e) { e.pop_back(); })) == "bad_length");
        CHECK(outcome(forge(message, [](Datagram& e) { e.push_back(0); })) == "bad_length");
    }
}

TEST_CASE("decode rejects every single-byte flip: bad_checksum unless an earlier check fires")
{
    // Which reason a corrupted byte at `offset` must produce: the fields checked before the
    // checksum give their own reason; everything else, the checksum field included, gives
    // bad_checksum.
    auto expected = [](size_t offset, const Datagram& corrupted) -> std::string {
        if (offset < 4) return "bad_magic";
        if (offset == 4) return "bad_version";
        if (offset == offsetof(vl_header, type)) {
            const uint8_t type = corrupted[offset];
            return type >= VL_MSG_TYPE_MIN && type <= VL_MSG_TYPE_MAX ? "bad_checksum"
                                                                      : "unknown_type";
        }
        if (offset >= 8 && offset < 12) return "wrong_cluster";
        if (offset >= 40 && offset < 44) return "bad_length";
        return "bad_checksum";
    };
    std::vector<Message> messages = one_of_each_type();
    Prepare full = sample_prepare();
    full.op = 1000;
    full.entries = entries_filling(VL_DEFAULT_MESSAGE_BYTES - VL_HEADER_BYTES, 9);
    messages.push_back(full);
    size_t flips = 0;
    for (const Message& message : messages) {
        const Datagram d = encode(message, cluster);
        for (size_t offset = 0; offset < d.size(); offset++) {
            for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x10}, uint8_t{0x80}, uint8_t{0xFF}}) {
                Datagram corrupted = d;
                corrupted[offset] ^= mask;
                const std::string got = outcome(corrupted);
                if (got != expected(offset, corrupted)) {
                    CAPTURE(name_of(message));
                    CAPTURE(offset);
                    CAPTURE(int{mask});
                    CHECK(got == expected(offset, corrupted));
                }
                flips++;
            }
        }
    }
    CHECK(flips > 4 * VL_DEFAULT_MESSAGE_BYTES);
}

TEST_CASE("decode rejects unknown flag bits as bad_flags")
{
    for (unsigned bit = 3; bit < 16; bit++) {
        CAPTURE(bit);
        const auto flags = static_cast<uint16_t>(1u << bit);
        CHECK(outcome(forge(sample_prepare(), [&](Datagram& d) {
                  poke(d, offsetof(vl_header, flags), flags);
              })) == "bad_flags");
        // encode does not filter flags: what it writes, decode refuses.
        CHECK(outcome(encode(sample_prepare(), cluster, flags)) == "bad_flags");
    }
}

TEST_CASE("decode rejects nonzero reserved0 or reserved1 as bad_reserved")
{
    for (const Message& message : one_of_each_type()) {
        CAPTURE(name_of(message));
        CHECK(outcome(forge(message, [](Datagram& d) {
                  d[offsetof(vl_header, reserved0)] = 1;
              })) == "bad_reserved");
        CHECK(outcome(forge(message, [](Datagram& d) {
                  poke<uint32_t>(d, offsetof(vl_header, reserved1), 0x8000'0000);
              })) == "bad_reserved");
    }
}

TEST_CASE("decode rejects a Request not from VL_CLIENT_SENDER as bad_replica")
{
    for (unsigned replica = 0; replica < VL_CLIENT_SENDER; replica++) {
        CAPTURE(replica);
        CHECK(outcome(forge(sample_request(), [&](Datagram& d) {
                  d[offsetof(vl_header, replica)] = static_cast<uint8_t>(replica);
              })) == "bad_replica");
    }
}

TEST_CASE("decode rejects a replica message from index >= VL_MAX_REPLICAS as bad_replica")
{
    const std::vector<Message> messages = one_of_each_type();
    for (size_t i = 1; i < messages.size(); i++) {  // all but the Request
        CAPTURE(name_of(messages[i]));
        for (unsigned replica : {0u, VL_MAX_REPLICAS - 1}) {
            CHECK(outcome(forge(messages[i], [&](Datagram& d) {
                      d[offsetof(vl_header, replica)] = static_cast<uint8_t>(replica);
                  })) == "accepted");
        }
        for (unsigned replica : {VL_MAX_REPLICAS, VL_MAX_REPLICAS + 1, 200u, VL_CLIENT_SENDER}) {
            CAPTURE(replica);
            CHECK(outcome(forge(messages[i], [&](Datagram& d) {
                      d[offsetof(vl_header, replica)] = static_cast<uint8_t>(replica);
                  })) == "bad_replica");
        }
    }
    // encode does not check the index either.
    Prepare prepare = sample_prepare();
    prepare.replica = VL_MAX_REPLICAS;
    CHECK(outcome(encode(prepare, cluster)) == "bad_replica");
}

TEST_CASE("decode rejects a batch_count that lies high or low as bad_body")
{
    const Prepare prepare = sample_prepare();  // 3 entries, op 12
    const auto set_count = [](uint16_t count) {
        return [=](Datagram& d) { poke(d, offsetof(vl_header, batch_count), count); };
    };
    CHECK(outcome(forge(prepare, set_count(3))) == "accepted");
    CHECK(outcome(forge(prepare, set_count(2))) == "bad_body");  // one entry left over
    CHECK(outcome(forge(prepare, set_count(1))) == "bad_body");
    CHECK(outcome(forge(prepare, set_count(4))) == "bad_body");  // runs out of entries
    CHECK(outcome(forge(prepare, set_count(12))) == "bad_body");
    // So many that they could not fit even empty: refused before anything is allocated.
    Prepare high = prepare;
    high.op = UINT64_MAX;
    CHECK(outcome(forge(high, set_count(UINT16_MAX))) == "bad_body");

    for (const Message& message : {Message{sample_start_view()}, Message{sample_new_state()}}) {
        CAPTURE(name_of(message));
        const Datagram d = encode(message, cluster);
        const auto count = peek<uint16_t>(d, offsetof(vl_header, batch_count));
        CHECK(outcome(forge(message, set_count(static_cast<uint16_t>(count - 1)))) == "bad_body");
        CHECK(outcome(forge(message, set_count(static_cast<uint16_t>(count + 1)))) == "bad_body");
        CHECK(outcome(forge(message, set_count(0))) == "bad_body");
    }
}

TEST_CASE("decode rejects a batch_count on a type without entries as bad_body")
{
    for (const Message& message : one_of_each_type()) {
        const vl_message_type type = message_type(message);
        if (type == VL_MSG_PREPARE || type == VL_MSG_START_VIEW || type == VL_MSG_NEW_STATE)
            continue;
        CAPTURE(name_of(message));
        CHECK(outcome(forge(message, [](Datagram& d) {
                  poke<uint16_t>(d, offsetof(vl_header, batch_count), 1);
              })) == "bad_body");
    }
}

TEST_CASE("decode rejects an entry whose payload_len runs past the end as bad_body")
{
    const Prepare prepare = sample_prepare();
    const size_t last = prepare.entries.size() - 1;
    const size_t offset = payload_len_offset(prepare.entries, last, 0);
    const auto len = static_cast<uint16_t>(prepare.entries[last].payload.size());
    for (uint16_t claimed : {static_cast<uint16_t>(len + 1), uint16_t{UINT16_MAX}}) {
        CAPTURE(claimed);
        CHECK(outcome(forge(prepare, [&](Datagram& d) { poke(d, offset, claimed); })) ==
              "bad_body");
    }
    // The first entry's length too long: the rest misparses, and the count no longer fits.
    const size_t first = payload_len_offset(prepare.entries, 0, 0);
    CHECK(outcome(forge(prepare, [&](Datagram& d) { poke<uint16_t>(d, first, 30); })) ==
          "bad_body");

    const StartView start_view = sample_start_view();
    const size_t sv_offset = payload_len_offset(start_view.entries, 2, 8);
    CHECK(outcome(forge(start_view, [&](Datagram& d) { poke<uint16_t>(d, sv_offset, 500); })) ==
          "bad_body");
}

TEST_CASE("decode rejects trailing bytes after the body as bad_body, for every type")
{
    for (const Message& message : one_of_each_type()) {
        CAPTURE(name_of(message));
        for (size_t extra : {1, 7, 8, 26}) {
            CAPTURE(extra);
            const Datagram d = forge(message, [&](Datagram& e) {
                e.insert(e.end(), extra, 0);
                fix_body_len(e);
            });
            // A Request or Reply takes the rest of the body as its payload: no garbage there.
            const vl_message_type type = message_type(message);
            CHECK(outcome(d) == (type == VL_MSG_REQUEST || type == VL_MSG_REPLY ? "accepted"
                                                                               : "bad_body"));
        }
    }
}

TEST_CASE("decode rejects a body too short for its fixed fields as bad_body")
{
    for (const Message& message : {Message{sample_request()},
                                   Message{Reply{.view = 1, .replica = 0, .result = {}}},
                                   Message{sample_do_view_change()},
                                   Message{Recovery{.replica = 1, .nonce = 5}},
                                   Message{RecoveryResponse{.view = 2, .replica = 1, .nonce = 5}},
                                   Message{sample_start_view()}, Message{sample_new_state()}}) {
        CAPTURE(name_of(message));
        const Datagram d = encode(message, cluster);
        // Cut inside the fixed fields that precede any payload.
        for (size_t body : {size_t{0}, size_t{7}}) {
            CAPTURE(body);
            CHECK(outcome(forge(message, [&](Datagram& e) {
                      e.resize(VL_HEADER_BYTES + body);
                      fix_body_len(e);
                  })) == "bad_body");
        }
        CHECK(d.size() > VL_HEADER_BYTES + 7);
    }
}

TEST_CASE("decode rejects a Replies with none, or with a count or length past the end")
{
    CHECK(outcome(encode(Replies{.view = 1, .replica = 0}, cluster)) == "bad_body");
    CHECK(outcome(encode(Requests{.view = 1, .replica = 1}, cluster)) == "bad_body");
    const Replies two{.view = 1,
                      .replica = 0,
                      .items = {{.client_id = 1, .request_number = 1, .result = "ab"},
                                  {.client_id = 2, .request_number = 1, .result = "cd"}}};
    CHECK(outcome(encode(two, cluster)) == "accepted");
    // The count, the first u16 of the body: one more than there are.
    CHECK(outcome(forge(two, [](Datagram& d) { poke<uint16_t>(d, VL_HEADER_BYTES, 3); })) ==
          "bad_body");
    // The second result's length (the body's last 2 + 2 bytes are its length and bytes).
    CHECK(outcome(forge(two, [](Datagram& d) { poke<uint16_t>(d, d.size() - 4, 3); })) ==
          "bad_body");
}

// Each of `batches` through the wire, each within the default size, and every item taken back
// as the single it stands for (`single_of`: reply_of or request_of), in order.
template <typename Batch, typename SingleOf>
auto through_the_wire(const std::vector<Message>& batches, SingleOf single_of)
{
    std::vector<decltype(single_of(Batch{}, Batch{}.items.front()))> back;
    for (const Message& message : batches) {
        CHECK(encoded_size(message) <= VL_DEFAULT_MESSAGE_BYTES);
        const auto decoded = decode(encode(message, cluster), cluster);
        REQUIRE(decoded.ok());
        const auto& batch = std::get<Batch>(decoded.value().message);
        CHECK(sender_of(decoded.value().message) == batch.replica);
        for (const auto& item : batch.items) back.push_back(single_of(batch, item));
    }
    return back;
}

TEST_CASE("batch_replies: a Reply for one alone, Replies that each fit, in order")
{
    const auto reply = [](ClientId client, size_t result_bytes, View view = 4) {
        return Reply{.view = view,
                     .replica = 1,
                     .client_id = client,
                     .request_number = client * 10,
                     .commit = 100 + client,
                     .result = Bytes(result_bytes, 'r')};
    };
    // One Reply goes as it is.
    CHECK(batch_replies({reply(1, 5)}, VL_DEFAULT_MESSAGE_BYTES) ==
          std::vector<Message>{reply(1, 5)});
    // 100 small ones: Replies, each within the size, that give back every Reply in order.
    std::vector<Reply> many;
    for (ClientId c = 1; c <= 100; c++) many.push_back(reply(c, 30));
    const std::vector<Message> out = batch_replies(many, VL_DEFAULT_MESSAGE_BYTES);
    CHECK(out.size() == 4);  // (1472 - 56 - 2) / (26 + 30): 25 in each datagram
    CHECK(through_the_wire<Replies>(out, reply_of) == many);
    // A Reply too big to share a datagram goes alone, between the batches before and after it;
    // a Reply of another view starts a batch of its own.
    const size_t alone = VL_DEFAULT_MESSAGE_BYTES - VL_HEADER_BYTES - VL_REPLY_FIXED_BYTES;
    const std::vector<Message> mixed = batch_replies(
        {reply(1, 5), reply(2, 5), reply(3, alone), reply(4, 5), reply(5, 5, 5), reply(6, 5, 5)},
        VL_DEFAULT_MESSAGE_BYTES);
    REQUIRE(mixed.size() == 4);
    CHECK(std::get<Replies>(mixed[0]).items.size() == 2);
    CHECK(mixed[1] == Message{reply(3, alone)});
    CHECK(encoded_size(mixed[1]) == VL_DEFAULT_MESSAGE_BYTES);
    CHECK(mixed[2] == Message{reply(4, 5)});
    CHECK(std::get<Replies>(mixed[3]).view == 5);
    CHECK(batch_replies({}, VL_DEFAULT_MESSAGE_BYTES).empty());
}

TEST_CASE("batch_requests: from their sender, each back as the Request it was, in order")
{
    std::vector<Request> requests;
    for (ClientId c = 1; c <= 40; c++)
        requests.push_back(Request{.view = 3, .client_id = c, .request_number = c,
                                   .payload = Bytes(c, 'p')});
    const std::vector<Message> out = batch_requests(requests, 2, VL_DEFAULT_MESSAGE_BYTES);
    CHECK(out.size() == 2);  // 40 items of 18 + 1..40 bytes: 1,540 bytes in all
    for (const Message& message : out) CHECK(std::get<Requests>(message).replica == 2);
    CHECK(through_the_wire<Requests>(out, request_of) == requests);
    CHECK(batch_requests({requests[0]}, 2, VL_DEFAULT_MESSAGE_BYTES) ==
          std::vector<Message>{requests[0]});
}

TEST_CASE("decode rejects a Prepare with batch_count 0 as bad_body")
{
    // encode writes it (it does not validate); decode refuses it.
    Prepare empty = sample_prepare();
    empty.entries.clear();
    CHECK(outcome(encode(empty, cluster)) == "bad_body");
    CHECK(outcome(forge(sample_prepare(), [](Datagram& d) {
              poke<uint16_t>(d, offsetof(vl_header, batch_count), 0);
              d.resize(VL_HEADER_BYTES);
              fix_body_len(d);
          })) == "bad_body");
}

TEST_CASE("decode rejects a Prepare whose op < batch_count (ops below 1) as bad_body")
{
    Prepare prepare = sample_prepare();  // 3 entries
    for (Op op : {Op{0}, Op{1}, Op{2}}) {
        CAPTURE(op);
        prepare.op = op;
        CHECK(outcome(encode(prepare, cluster)) == "bad_body");
    }
    prepare.op = 3;  // ops (0, 3]: the boundary is accepted
    CHECK(outcome(encode(prepare, cluster)) == "accepted");
}

TEST_CASE("decode rejects a DoViewChange with last_normal_view > view as bad_body")
{
    DoViewChange m = sample_do_view_change();
    m.last_normal_view = m.view + 1;
    CHECK(outcome(encode(m, cluster)) == "bad_body");
    m.last_normal_view = UINT64_MAX;
    CHECK(outcome(encode(m, cluster)) == "bad_body");
    m.last_normal_view = m.view;
    CHECK(outcome(encode(m, cluster)) == "accepted");
}

TEST_CASE("decode rejects commit > op in DoViewChange, StartView, NewState, RecoveryResponse")
{
    DoViewChange dvc = sample_do_view_change();
    dvc.commit = dvc.op + 1;
    CHECK(outcome(encode(dvc, cluster)) == "bad_body");
    StartView sv = sample_start_view();
    sv.commit = sv.op + 1;
    CHECK(outcome(encode(sv, cluster)) == "bad_body");
    NewState ns = sample_new_state();
    ns.commit = ns.op + 1;
    CHECK(outcome(encode(ns, cluster)) == "bad_body");
    RecoveryResponse rr{.view = 3, .replica = 0, .nonce = 1, .op = 5, .commit = 6};
    CHECK(outcome(encode(rr, cluster)) == "bad_body");
}

TEST_CASE("decode rejects a DoViewChange with fence_view > view")
{
    DoViewChange m = sample_do_view_change();  // view 9
    m.fence_view = 9;
    CHECK(outcome(encode(m, cluster)) == "accepted");
    m.fence_view = 10;
    CHECK(outcome(encode(m, cluster)) == "bad_body");
}

TEST_CASE("decode rejects a RecoveryResponse with last_normal_view > view or an unknown standing")
{
    RecoveryResponse rr{.view = 3, .replica = 0, .nonce = 1, .op = 5, .commit = 4,
                        .last_normal_view = 3, .standing = Standing::restarting};
    CHECK(outcome(encode(rr, cluster)) == "accepted");
    rr.last_normal_view = 4;
    CHECK(outcome(encode(rr, cluster)) == "bad_body");
    rr.last_normal_view = 2;
    Datagram d = encode(rr, cluster);
    d.back() = 3;  // the standing byte ends the body; 0, 1 and 2 are known
    fix_checksum(d);
    CHECK(outcome(d) == "bad_body");
}

TEST_CASE("decode rejects a state_unconfirmed byte other than 0 or 1")
{
    // StartView and NewState: the byte after first_op; SnapshotOffer: its whole body.
    for (const Message& message : {Message{sample_start_view()}, Message{sample_new_state()},
                                   Message{SnapshotOffer{.view = 9, .replica = 2, .op = 40}}}) {
        CAPTURE(name_of(message));
        Datagram d = encode(message, cluster);
        const size_t flag_at =
            VL_HEADER_BYTES + (std::holds_alternative<SnapshotOffer>(message) ? 0 : 8);
        CHECK(d[flag_at] <= 1);
        d[flag_at] = 1 - d[flag_at];
        fix_checksum(d);
        CHECK(outcome(d) == "accepted");
        d[flag_at] = 2;
        fix_checksum(d);
        CHECK(outcome(d) == "bad_body");
    }
}

TEST_CASE("decode rejects a StartView or NewState with first_op + count > op as bad_body")
{
    StartView sv = sample_start_view();  // first_op 17, 3 entries, op 20
    NewState ns = sample_new_state();    // first_op 40, 4 entries, op 50
    ns.first_op = 46;                    // 46 + 4 == 50: accepted
    CHECK(outcome(encode(sv, cluster)) == "accepted");
    CHECK(outcome(encode(ns, cluster)) == "accepted");
    sv.first_op = 18;
    ns.first_op = 47;
    CHECK(outcome(encode(sv, cluster)) == "bad_body");
    CHECK(outcome(encode(ns, cluster)) == "bad_body");
    // first_op past op (where op - first_op would wrap) and near 2^64 (where first_op + count
    // would wrap).
    for (Op first_op : {Op{21}, Op{UINT64_MAX - 1}, Op{UINT64_MAX}}) {
        CAPTURE(first_op);
        sv.first_op = first_op;
        CHECK(outcome(encode(sv, cluster)) == "bad_body");
    }
    sv.op = UINT64_MAX;
    sv.commit = 0;
    sv.first_op = UINT64_MAX - 1;  // ops (2^64 - 2, 2^64 + 1]: past the largest op
    CHECK(outcome(encode(sv, cluster)) == "bad_body");
}

// The datagram -> message mapping must be one-to-one: a header field that a type does not carry
// (wire.h's body table) must be zero, or two different datagrams decode to the same message, a
// re-encoded message differs from what arrived, and whatever reads the header in place (the XDP
// fast path) sees a value the core never saw.
TEST_CASE("decode rejects header fields the type does not carry unless they are zero")
{
    struct Unused {
        Message message;
        size_t offset;
        const char* field;
    };
    const std::vector<Unused> cases = {
        {sample_request(), offsetof(vl_header, op), "op"},
        {sample_request(), offsetof(vl_header, commit), "commit"},
        {Reply{.view = 1, .result = {}}, offsetof(vl_header, op), "op"},
        {PrepareOk{.view = 1, .op = 1}, offsetof(vl_header, commit), "commit"},
        {CommitOk{.view = 1, .heartbeat = 1}, offsetof(vl_header, commit), "commit"},
        {StartViewChange{.view = 1}, offsetof(vl_header, op), "op"},
        {StartViewChange{.view = 1}, offsetof(vl_header, commit), "commit"},
        {Recovery{.nonce = 1}, offsetof(vl_header, view), "view"},
        {Recovery{.nonce = 1}, offsetof(vl_header, op), "op"},
        {Recovery{.nonce = 1}, offsetof(vl_header, commit), "commit"},
        {GetState{.view = 1, .op = 1}, offsetof(vl_header, commit), "commit"},
        {Replies{.view = 1, .items = {{.client_id = 1}}}, offsetof(vl_header, op), "op"},
        {Replies{.view = 1, .items = {{.client_id = 1}}}, offsetof(vl_header, commit),
         "commit"},
        {Requests{.view = 1, .items = {{.client_id = 1}}}, offsetof(vl_header, op), "op"},
    };
    for (const Unused& c : cases) {
        CAPTURE(name_of(c.message));
        CAPTURE(std::string(c.field));
        CHECK(outcome(forge(c.message, [&](Datagram& d) { poke<uint64_t>(d, c.offset, 5); })) !=
              "accepted");
    }
}

// ---- Hostile input, at random -----------------------------------------------------------------

namespace {

// Valid datagrams to mutate: one of each type, plus batches large and small.
std::vector<Datagram> fuzz_seeds()
{
    std::vector<Datagram> seeds;
    for (const Message& message : one_of_each_type()) seeds.push_back(encode(message, cluster));
    Prepare full = sample_prepare();
    full.op = 60;
    full.entries = entries_filling(VL_DEFAULT_MESSAGE_BYTES - VL_HEADER_BYTES, 54);
    seeds.push_back(encode(full, cluster));
    NewState one{.view = 2, .replica = 1, .op = 1, .commit = 0, .first_op = 0,
                 .entries = sample_entries(1)};
    seeds.push_back(encode(one, cluster, VL_FLAG_QUORUM));
    return seeds;
}

// Values that sit on the boundaries decode checks.
uint64_t interesting_value(SplitMix64& rng)
{
    static constexpr uint64_t values[] = {0, 1, 2, 3, 4, 25, 26, 27, 0x7F, 0x80, 0xFF, 0x100,
                                          0x7FFF, 0xFFFF, 0x10000, 0xFFFF'FFFF, UINT64_MAX - 1,
                                          UINT64_MAX};
    return values[rng.below(std::size(values))];
}

void mutate_bytes(Datagram& d, SplitMix64& rng)
{
    const size_t edits = 1 + rng.below(4);
    for (size_t i = 0; i < edits && !d.empty(); i++) {
        const size_t at = rng.below(d.size());
        switch (rng.below(5)) {
        case 0: d[at] ^= static_cast<uint8_t>(1u << rng.below(8)); break;
        case 1: d[at] = rng.byte(); break;
        case 2: {  // a little-endian field set to a boundary value
            const uint64_t v = interesting_value(rng);
            const size_t width = size_t{1} << rng.below(4);
            for (size_t b = 0; b < width && at + b < d.size(); b++)
                d[at + b] = static_cast<uint8_t>(v >> (8 * b));
            break;
        }
        case 3: d.insert(d.begin() + static_cast<ptrdiff_t>(at), 1 + rng.below(30), rng.byte());
            break;
        default:
            d.erase(d.begin() + static_cast<ptrdiff_t>(at),
                    d.begin() + static_cast<ptrdiff_t>(std::min(d.size(), at + 1 + rng.below(30))));
            break;
        }
    }
}

// A header field that decode's later checks depend on, set to a boundary value.
void mutate_header_field(Datagram& d, SplitMix64& rng)
{
    static constexpr size_t offsets[] = {offsetof(vl_header, type), offsetof(vl_header, flags),
                                         offsetof(vl_header, replica),
                                         offsetof(vl_header, batch_count),
                                         offsetof(vl_header, view), offsetof(vl_header, op),
                                         offsetof(vl_header, commit), VL_HEADER_BYTES};
    static constexpr size_t widths[] = {1, 2, 1, 2, 8, 8, 8, 8};  // VL_HEADER_BYTES: first_op
    const size_t field = rng.below(std::size(offsets));
    const uint64_t v = interesting_value(rng) + (rng.below(2) ? 0 : rng.below(16));
    for (size_t b = 0; b < widths[field] && offsets[field] + b < d.size(); b++)
        d[offsets[field] + b] = static_cast<uint8_t>(v >> (8 * b));
}

// One hostile datagram: noise, a valid datagram mutated (mostly with its body_len and checksum
// made to agree, so that the mutation reaches the body parser), or a valid datagram cut short.
Datagram hostile_datagram(SplitMix64& rng, const std::vector<Datagram>& seeds)
{
    const Datagram& seed = seeds[rng.below(seeds.size())];
    Datagram d;
    const size_t kind = rng.below(10);
    if (kind == 0) {  // noise
        d.resize(rng.below(200));
        for (uint8_t& b : d) b = rng.byte();
    } else if (kind == 1) {  // a plausible header over a noise body
        d = Datagram(seed.begin(), seed.begin() + VL_HEADER_BYTES);
        d.resize(VL_HEADER_BYTES + rng.below(300));
        for (size_t i = VL_HEADER_BYTES; i < d.size(); i++) d[i] = rng.byte();
        mutate_header_field(d, rng);
    } else if (kind <= 3) {  // truncated
        d = Datagram(seed.begin(), seed.begin() + static_cast<ptrdiff_t>(rng.below(seed.size())));
    } else if (kind <= 6) {
        d = seed;
        mutate_bytes(d, rng);
    } else {
        d = seed;
        mutate_header_field(d, rng);
        if (rng.below(2)) mutate_bytes(d, rng);
    }
    if (d.size() >= VL_HEADER_BYTES && rng.below(8) != 0) {
        if (rng.below(4) != 0) fix_body_len(d);
        fix_checksum(d);
    }
    return d;
}

constexpr uint64_t fuzz_seed = 0x566F'6C74'6C6F'636Bull;  // "Voltlock"
constexpr size_t fuzz_iterations = 250'000;  // each of the two loops below; < 1 s under ASan

}  // namespace

TEST_CASE("fuzz: decode survives hostile datagrams and names a valid reason for each refusal")
{
    SplitMix64 rng(fuzz_seed);
    const std::vector<Datagram> seeds = fuzz_seeds();
    std::vector<size_t> by_reason(decode_error_count);
    size_t accepted = 0;
    for (size_t i = 0; i < fuzz_iterations; i++) {
        const Datagram d = hostile_datagram(rng, seeds);
        const DecodeResult r = decode_exact(d);
        if (r.ok()) {
            accepted++;
            continue;
        }
        const auto reason = static_cast<size_t>(r.error());
        if (reason >= decode_error_count) {
            FAIL("iteration " << i << ": reason " << reason << " out of range, datagram "
                              << hex(d));
        }
        by_reason[reason]++;
    }
    // The generator must reach every check, and past all of them, or the loop proves little.
    for (size_t reason = 0; reason < decode_error_count; reason++) {
        // A cell without a key never answers bad_mac (mac_codec_test.cpp fuzzes a keyed one).
        if (static_cast<DecodeError>(reason) == DecodeError::bad_mac) continue;
        CAPTURE(std::string(decode_error_name(static_cast<DecodeError>(reason))));
        CAPTURE(by_reason[reason]);
        CHECK(by_reason[reason] > 100);
    }
    CHECK(accepted > 1000);
}

TEST_CASE("fuzz: every hostile datagram decode accepts re-encodes to the identical bytes")
{
    SplitMix64 rng(fuzz_seed + 1);
    const std::vector<Datagram> seeds = fuzz_seeds();
    size_t accepted = 0;
    size_t mismatched = 0;
    for (size_t i = 0; i < fuzz_iterations; i++) {
        const Datagram d = hostile_datagram(rng, seeds);
        const DecodeResult r = decode_exact(d);
        if (!r.ok()) continue;
        accepted++;
        const Datagram again = encode(r.value().message, cluster, r.value().flags);
        if (again != d && mismatched++ == 0) {
            // The first mismatch in full; the total below.
            CHECK_MESSAGE(again == d, "iteration " << i << " (" << name_of(r.value().message)
                                                   << ")\n  in:  " << hex(d)
                                                   << "\n  out: " << hex(again));
        }
    }
    CHECK(accepted > 1000);
    CHECK(mismatched == 0);
}

// ---- Names ------------------------------------------------------------------------------------

TEST_CASE("decode_error_name: a distinct non-empty name for every DecodeError")
{
    std::set<std::string> names;
    for (size_t i = 0; i < decode_error_count; i++) {
        const char* name = decode_error_name(static_cast<DecodeError>(i));
        REQUIRE(name != nullptr);
        CHECK(std::string(name) != "");
        names.insert(name);
    }
    CHECK(names.size() == decode_error_count);
    CHECK(std::string(decode_error_name(DecodeError::truncated)) == "truncated");
    CHECK(std::string(decode_error_name(DecodeError::bad_body)) == "bad_body");
}

TEST_CASE("message_name and message_type: a distinct name and the wire type for every message")
{
    std::set<std::string> names;
    const std::vector<Message> messages = one_of_each_type();
    for (size_t i = 0; i < messages.size(); i++) {
        const char* name = message_name(messages[i]);
        REQUIRE(name != nullptr);
        CHECK(std::string(name) != "");
        names.insert(name);
        CHECK(message_type(messages[i]) == VL_MSG_TYPE_MIN + i);
    }
    CHECK(names.size() == messages.size());
    CHECK(std::string(message_name(Message{PrepareOk{}})) == "prepare_ok");
    CHECK(std::string(message_name(Message{NewState{}})) == "new_state");
}

TEST_CASE("message_type_name: the message's name for every type, \"unknown\" outside the enum")
{
    for (const Message& message : one_of_each_type())
        CHECK(std::string(message_type_name(message_type(message))) == message_name(message));
    // 0..31 all lie within the enum's range of values (VL_MSG_TYPE_MAX needs 5 bits).
    for (int type : {0, 17, 31}) {
        CAPTURE(type);
        CHECK(std::string(message_type_name(static_cast<vl_message_type>(type))) == "unknown");
    }
}

}  // namespace voltlock
