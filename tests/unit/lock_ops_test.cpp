// The lock service's op and result codec (server/core/lock_ops.h): every op and result survives a
// round trip, every malformed buffer is rejected with its named reason and never read out of
// bounds, each encoding is the only one of its value (a deterministic fuzz re-encodes whatever
// decodes), and validation names each rule an op breaks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/lock_ops.h"
#include "core/message.h"
#include "split_mix64.h"
#include "voltlock/wire.h"

namespace voltlock {
namespace {

using test_support::SplitMix64;  // a fixed, seeded sequence: the fuzz runs the same bytes

Bytes binary_value()
{
    const char raw[] = {'\0', 'v', '\0', '\x01', '\xFF', '\x80', '/', '\0'};
    return Bytes(raw, sizeof raw);
}

Sequencer sample_sequencer()
{
    return Sequencer{.lock = "db/primary", .mode = LockMode::shared,
                     .generation = 0x1122334455667788, .session = 42};
}

// At least one op of every kind, and every optional field both present and absent.
std::vector<LockOp> sample_ops()
{
    return {
        CreateSession{.ttl_ms = 12'000, .lock_delay_ms = 5'000, .name = "worker-7"},
        CreateSession{.ttl_ms = kMinTtlMs, .lock_delay_ms = 0, .name = ""},
        CreateSession{.ttl_ms = 12'000, .lock_delay_ms = 0, .name = "w", .owner = "alice"},
        KeepAlive{.session = 0x0102030405060708},
        CloseSession{.session = 9},
        ExpireSession{.session = 9, .lease_epoch = 77, .reason = ExpireReason::lease_expired},
        ExpireSession{.session = 9, .lease_epoch = 78, .reason = ExpireReason::evicted},
        Acquire{.lock = "db/primary", .session = 3, .mode = LockMode::exclusive, .wait_ms = 0},
        Acquire{.lock = "jobs/ä/üñí", .session = 4, .mode = LockMode::shared,
                .wait_ms = kMaxWaitMs},
        Release{.lock = "db/primary", .session = 3},
        CheckSequencer{.sequencer = sample_sequencer()},
        Put{.key = "config/a", .value = "1"},
        Put{.key = "config/b", .value = binary_value(), .session = 5, .prev_revision = 0},
        Put{.key = "config/c", .value = "", .prev_revision = 12, .sequencer = sample_sequencer()},
        Put{.key = "config/d", .value = Bytes(1000, 'x'), .sequencer = sample_sequencer()},
        Delete{.key = "config/a"},
        Delete{.key = "config/", .prefix = true},
        Delete{.key = "", .prefix = true, .sequencer = sample_sequencer()},
        Delete{.key = "config/a", .prev_revision = 3, .sequencer = sample_sequencer()},
        Get{.key = "config/a"},
        Get{.key = "config/", .prefix = true, .after = "config/b", .limit = 10,
            .max_result_bytes = 1400},
        BarrierEnter{.barrier = "phase/1", .session = 6, .count = 3, .wait_ms = 1000},
        BarrierLeave{.barrier = "phase/1", .session = 6, .wait_ms = 0},
        ExpireWaiters{},
        WithdrawWait{.lock = "jobs/ä/üñí", .session = 4, .deadline_ms = 1'700'000'000'000},
        WithdrawEnter{.barrier = "phase/ä", .session = 6, .deadline_ms = 1'700'000'000'000},
        AuthOp{PutRole{.role = "reader",
                       .grants = {RoleGrant{.permissions = 9, .scope = GrantScope::key,
                                            .prefix = "app/"}}}},
        AuthOp{CreateToken{.user = "billing", .hash = {}, .ttl_ms = 60'000}},
    };
}

std::vector<OpResult> sample_results()
{
    return {
        OpError{.op = OpCode::put, .code = ErrorCode::cas_mismatch, .revision = 10, .detail = 7},
        OpError{.op = OpCode::none, .code = ErrorCode::malformed, .revision = 10, .detail = 2},
        CreateSessionResult{.revision = 5, .session = 5, .lease_epoch = 5, .deadline_ms = 17'000},
        KeepAliveResult{.revision = 6, .lease_epoch = 6, .deadline_ms = 18'000},
        CloseSessionResult{.revision = 7, .ended = true, .locks_released = 2, .keys_deleted = 3},
        ExpireSessionResult{.revision = 7, .ended = false},
        ExpireSessionResult{.revision = 8, .ended = true, .locks_released = 1, .keys_deleted = 0},
        AcquireResult{.revision = 9, .status = AcquireStatus::granted,
                      .sequencer = sample_sequencer()},
        AcquireResult{.revision = 9, .status = AcquireStatus::waiting, .deadline_ms = 99,
                      .position = 2},
        ReleaseResult{.revision = 10, .released = true, .wait_withdrawn = false, .granted = 3},
        ReleaseResult{.revision = 10, .released = false, .wait_withdrawn = true, .granted = 0},
        CheckSequencerResult{.revision = 11, .valid = true},
        CheckSequencerResult{.revision = 11, .valid = false},
        PutResult{.revision = 12, .prev_mod_revision = 4, .create_revision = 2, .version = 3},
        DeleteResult{.revision = 13, .deleted = 4},
        GetResult{.revision = 14},
        GetResult{.revision = 14,
                  .kvs = {KeyValue{.key = "a", .value = binary_value(), .create_revision = 1,
                                   .mod_revision = 2, .version = 2, .session = 0},
                          KeyValue{.key = "a/b", .value = "", .create_revision = 3,
                                   .mod_revision = 3, .version = 1, .session = 5}},
                  .more = true},
        BarrierEnterResult{.revision = 15, .status = BarrierStatus::waiting, .deadline_ms = 123},
        BarrierEnterResult{.revision = 15, .status = BarrierStatus::passed},
        BarrierLeaveResult{.revision = 16, .status = BarrierStatus::passed},
        ExpireWaitersResult{.revision = 17},
        AuthResult{.revision = 17, .auth_revision = 3},
        WithdrawWaitResult{.revision = 18, .withdrawn = true, .granted = 1},
        WithdrawWaitResult{.revision = 18, .withdrawn = false, .granted = 0},
        WithdrawEnterResult{.revision = 19, .withdrawn = true},
        WithdrawEnterResult{.revision = 19, .withdrawn = false},
    };
}

Bytes with_byte(Bytes b, size_t at, int value)
{
    b[at] = static_cast<char>(value);
    return b;
}

// ---- Round trips -------------------------------------------------------------------------------

TEST_CASE("lock ops: every op survives a round trip, and encoded_size is exact")
{
    std::vector<bool> seen(std::variant_size_v<LockOp>, false);
    for (const LockOp& op : sample_ops()) {
        CAPTURE(op_code_name(op_code(op)));
        REQUIRE(!validate(op));
        const Bytes bytes = encode_op(op);
        CHECK(bytes.size() == encoded_size(op));
        CHECK(static_cast<uint8_t>(bytes[0]) == static_cast<uint8_t>(op_code(op)));
        const auto decoded = decode_op(bytes);
        REQUIRE(decoded.ok());
        CHECK(decoded.value() == op);
        seen[op.index()] = true;
    }
    for (size_t i = 0; i < seen.size(); i++) CHECK_MESSAGE(seen[i], "no sample of op " << i + 1);
}

TEST_CASE("lock ops: every result survives a round trip")
{
    std::vector<bool> seen(std::variant_size_v<OpResult>, false);
    for (const OpResult& result : sample_results()) {
        CAPTURE(op_code_name(result_op_code(result)));
        const auto decoded = decode_result(encode_result(result));
        REQUIRE(decoded.ok());
        CHECK(decoded.value() == result);
        CHECK(result_revision(decoded.value()) == result_revision(result));
        seen[result.index()] = true;
    }
    for (size_t i = 0; i < seen.size(); i++) CHECK_MESSAGE(seen[i], "no sample of result " << i);
}

TEST_CASE("lock ops: the layout is little-endian fields after a one-byte op code")
{
    const Bytes keep_alive = encode_op(KeepAlive{.session = 0x0102030405060708});
    CHECK(keep_alive == Bytes("\x02\x08\x07\x06\x05\x04\x03\x02\x01", 9));

    const Bytes acquire = encode_op(
        Acquire{.lock = "L", .session = 1, .mode = LockMode::shared, .wait_ms = 0x0A0B});
    CHECK(acquire == Bytes("\x05"                              // op code
                           "\x01\x00" "L"                      // str lock
                           "\x01\x00\x00\x00\x00\x00\x00\x00"  // u64 session
                           "\x02"                              // mode shared
                           "\x0B\x0A\x00\x00",                 // u32 wait_ms
                           1 + 3 + 8 + 1 + 4));

    const Bytes error = encode_result(
        OpError{.op = OpCode::acquire, .code = ErrorCode::busy, .revision = 1, .detail = 2});
    CHECK(error == Bytes("\x05\x06\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00",
                         18));
}

// ---- Rejections: ops ---------------------------------------------------------------------------

TEST_CASE("lock ops: an empty payload and unknown op codes are rejected")
{
    CHECK(decode_op("").error() == OpDecodeError::empty);
    for (const int code : {0, 17, 0x7F, 0xFF})
        CHECK(decode_op(Bytes(1, static_cast<char>(code))).error() == OpDecodeError::unknown_op);
}

TEST_CASE("lock ops: every truncation of every op is rejected as truncated")
{
    for (const LockOp& op : sample_ops()) {
        const Bytes bytes = encode_op(op);
        for (size_t len = 1; len < bytes.size(); len++) {
            CAPTURE(op_code_name(op_code(op)));
            CAPTURE(len);
            const auto decoded = decode_op(bytes.substr(0, len));
            REQUIRE(!decoded.ok());
            CHECK(decoded.error() == OpDecodeError::truncated);
        }
    }
}

TEST_CASE("lock ops: bytes after the last field are rejected")
{
    for (const LockOp& op : sample_ops()) {
        CAPTURE(op_code_name(op_code(op)));
        CHECK(decode_op(encode_op(op) + '\0').error() == OpDecodeError::trailing_bytes);
    }
}

TEST_CASE("lock ops: unknown flag bits are rejected")
{
    // The flags byte follows the op code in Put, Delete and Get.
    const Bytes put = encode_op(Put{.key = "k", .value = "v"});
    const Bytes del = encode_op(Delete{.key = "k"});
    const Bytes get = encode_op(Get{.key = "k"});
    for (const int bit : {0x04, 0x08, 0x80})
        CHECK(decode_op(with_byte(put, 1, bit)).error() == OpDecodeError::bad_flags);
    for (const int bit : {0x08, 0x40})
        CHECK(decode_op(with_byte(del, 1, bit)).error() == OpDecodeError::bad_flags);
    for (const int bit : {0x02, 0x80})
        CHECK(decode_op(with_byte(get, 1, bit)).error() == OpDecodeError::bad_flags);
}

TEST_CASE("lock ops: lock modes and expiry reasons out of range are rejected")
{
    const Bytes acquire = encode_op(Acquire{.lock = "L", .session = 1, .wait_ms = 0});
    const size_t mode_at = 1 + 3 + 8;
    CHECK(decode_op(with_byte(acquire, mode_at, 0)).error() == OpDecodeError::bad_enum);
    CHECK(decode_op(with_byte(acquire, mode_at, 3)).error() == OpDecodeError::bad_enum);

    const Bytes expire = encode_op(ExpireSession{.session = 1, .lease_epoch = 1});
    CHECK(decode_op(with_byte(expire, 17, 0)).error() == OpDecodeError::bad_enum);
    CHECK(decode_op(with_byte(expire, 17, 3)).error() == OpDecodeError::bad_enum);

    const Bytes check = encode_op(CheckSequencer{.sequencer = {.lock = "L", .generation = 1}});
    CHECK(decode_op(with_byte(check, 1 + 3, 9)).error() == OpDecodeError::bad_enum);
}

TEST_CASE("lock ops: a string length beyond the buffer is truncated, not read")
{
    // Put with a key length of 0xFFFF and three bytes behind it.
    const Bytes put("\x08\x00\xFF\xFF" "abc", 7);
    CHECK(decode_op(put).error() == OpDecodeError::truncated);
}

// ---- Rejections: results -----------------------------------------------------------------------

TEST_CASE("lock ops: malformed results are rejected with their reason")
{
    CHECK(decode_result("").error() == OpDecodeError::empty);
    CHECK(decode_result(Bytes(1, '\x11')).error() == OpDecodeError::unknown_op);

    for (const OpResult& result : sample_results()) {
        const Bytes bytes = encode_result(result);
        CAPTURE(op_code_name(result_op_code(result)));
        for (size_t len = 1; len < bytes.size(); len++)
            CHECK(decode_result(bytes.substr(0, len)).error() == OpDecodeError::truncated);
        CHECK(decode_result(bytes + 'x').error() == OpDecodeError::trailing_bytes);
    }

    const Bytes ok_check = encode_result(CheckSequencerResult{.revision = 1, .valid = true});
    // An error code beyond the enum, a bool that is neither 0 nor 1.
    CHECK(decode_result(with_byte(ok_check, 1, 15)).error() == OpDecodeError::bad_enum);
    CHECK(decode_result(with_byte(ok_check, 10, 2)).error() == OpDecodeError::bad_enum);
    // Only an error may answer an op without a known code.
    CHECK(decode_result(with_byte(ok_check, 0, 0)).error() == OpDecodeError::unknown_op);

    const Bytes waiting = encode_result(
        AcquireResult{.revision = 1, .status = AcquireStatus::waiting, .deadline_ms = 5});
    CHECK(decode_result(with_byte(waiting, 10, 3)).error() == OpDecodeError::bad_enum);

    // A GetResult claiming more keys than it carries runs out of bytes, not of memory.
    Bytes get = encode_result(GetResult{.revision = 1});
    get[11] = get[12] = get[13] = get[14] = '\xFF';
    CHECK(decode_result(get).error() == OpDecodeError::truncated);
}

// ---- Fuzz --------------------------------------------------------------------------------------

// Whatever decodes must re-encode to the same bytes (one encoding per value): otherwise two
// replicas could disagree about what a payload means.
TEST_CASE("lock ops: deterministic fuzz: random and mutated buffers never decode ambiguously")
{
    SplitMix64 prng(20240611);
    std::vector<Bytes> corpus;
    for (const LockOp& op : sample_ops()) corpus.push_back(encode_op(op));
    std::vector<Bytes> result_corpus;
    for (const OpResult& r : sample_results()) result_corpus.push_back(encode_result(r));

    size_t ops_accepted = 0;
    size_t results_accepted = 0;
    for (int round = 0; round < 60'000; round++) {
        Bytes buf;
        const bool results = round % 2 == 1;
        const auto& source = results ? result_corpus : corpus;
        switch (prng.below(4)) {
        case 0:  // random bytes, with a valid-looking first byte half of the time
            buf.resize(prng.below(48));
            for (char& c : buf) c = prng.byte();
            if (!buf.empty() && prng.below(2) == 0) buf[0] = static_cast<char>(1 + prng.below(13));
            break;
        case 1:  // flip a few bytes of a valid encoding
            buf = source[prng.below(source.size())];
            for (size_t n = 1 + prng.below(3); n > 0; n--)
                buf[prng.below(buf.size())] = prng.byte();
            break;
        case 2:  // cut a valid encoding short, or extend it
            buf = source[prng.below(source.size())];
            if (prng.below(2) == 0) buf.resize(prng.below(buf.size()));
            else buf.push_back(prng.byte());
            break;
        default:  // splice two encodings
        {
            const Bytes& head = source[prng.below(source.size())];
            const Bytes& tail = source[prng.below(source.size())];
            buf = head.substr(0, 1 + prng.below(8)) +
                  tail.substr(std::min(tail.size(), prng.below(8)));
        }
            break;
        }
        if (results) {
            const auto decoded = decode_result(buf);
            if (decoded.ok()) {
                results_accepted += 1;
                REQUIRE(encode_result(decoded.value()) == buf);
            }
        } else {
            const auto decoded = decode_op(buf);
            if (decoded.ok()) {
                ops_accepted += 1;
                REQUIRE(encode_op(decoded.value()) == buf);
                REQUIRE(encoded_size(decoded.value()) == buf.size());
            }
        }
    }
    // The fuzz reaches the accepting paths too, not only the first check.
    CHECK(ops_accepted > 100);
    CHECK(results_accepted > 100);
}

// ---- Validation --------------------------------------------------------------------------------

TEST_CASE("lock ops: names are non-empty UTF-8 of at most 512 bytes without control characters")
{
    CHECK(validate_name("db/primary") == Violation::none);
    CHECK(validate_name("/") == Violation::none);
    CHECK(validate_name("ключ/鍵/🔒") == Violation::none);
    CHECK(validate_name(std::string(kMaxNameBytes, 'a')) == Violation::none);
    CHECK(validate_name("") == Violation::name_empty);
    CHECK(validate_name(std::string(kMaxNameBytes + 1, 'a')) == Violation::name_too_long);
    CHECK(validate_name(Bytes("a\0b", 3)) == Violation::name_control_character);
    CHECK(validate_name("a\nb") == Violation::name_control_character);
    CHECK(validate_name("a\x7F") == Violation::name_control_character);
    CHECK(validate_name("\xFF") == Violation::name_not_utf8);
    CHECK(validate_name("\xC0\xAF") == Violation::name_not_utf8);          // overlong '/'
    CHECK(validate_name("\xED\xA0\x80") == Violation::name_not_utf8);      // a surrogate
    CHECK(validate_name("\xF4\x90\x80\x80") == Violation::name_not_utf8);  // beyond U+10FFFF
    CHECK(validate_name("\xE2\x82") == Violation::name_not_utf8);          // cut short
    CHECK(validate_name("\x80") == Violation::name_not_utf8);              // continuation first
}

TEST_CASE("lock ops: validation names the rule and the field each op breaks")
{
    struct Case {
        LockOp op;
        Violation violation;
        const char* field;
    };
    const std::vector<Case> cases = {
        {CreateSession{.ttl_ms = kMinTtlMs - 1}, Violation::ttl_out_of_range, "ttl_ms"},
        {CreateSession{.ttl_ms = kMaxTtlMs + 1}, Violation::ttl_out_of_range, "ttl_ms"},
        {CreateSession{.ttl_ms = 5000, .lock_delay_ms = kMaxLockDelayMs + 1},
         Violation::lock_delay_out_of_range, "lock_delay_ms"},
        {CreateSession{.ttl_ms = 5000, .name = std::string(kMaxSessionNameBytes + 1, 'n')},
         Violation::name_too_long, "name"},
        {CreateSession{.ttl_ms = 5000, .name = "a\tb"}, Violation::name_control_character, "name"},
        {KeepAlive{.session = 0}, Violation::session_missing, "session"},
        {CloseSession{.session = 0}, Violation::session_missing, "session"},
        {ExpireSession{.session = 0}, Violation::session_missing, "session"},
        {Acquire{.lock = "", .session = 1}, Violation::name_empty, "lock"},
        {Acquire{.lock = "L", .session = 0}, Violation::session_missing, "session"},
        {Acquire{.lock = "L", .session = 1, .wait_ms = kMaxWaitMs + 1},
         Violation::wait_out_of_range, "wait_ms"},
        {Release{.lock = "L\x01", .session = 1}, Violation::name_control_character, "lock"},
        {WithdrawWait{.lock = "L", .session = 0}, Violation::session_missing, "session"},
        {WithdrawEnter{.barrier = "", .session = 1}, Violation::name_empty, "barrier"},
        {WithdrawEnter{.barrier = "B", .session = 0}, Violation::session_missing, "session"},
        {CheckSequencer{.sequencer = {.lock = ""}}, Violation::name_empty, "sequencer.lock"},
        {Put{.key = "", .value = "v"}, Violation::name_empty, "key"},
        {Put{.key = "k", .value = Bytes(kMaxValueBytes + 1, 'v')}, Violation::value_too_long,
         "value"},
        {Put{.key = "k", .sequencer = Sequencer{.lock = "\xFF"}}, Violation::name_not_utf8,
         "sequencer.lock"},
        {Delete{.key = ""}, Violation::name_empty, "key"},
        {Delete{.key = "a/", .prefix = true, .prev_revision = 3},
         Violation::prev_revision_with_prefix, "prev_revision"},
        {Get{.key = ""}, Violation::name_empty, "key"},
        {Get{.key = "k", .after = "j"}, Violation::after_without_prefix, "after"},
        {Get{.key = "", .prefix = true, .after = "\x02"}, Violation::name_control_character,
         "after"},
        {BarrierEnter{.barrier = "B", .session = 1, .count = 0}, Violation::count_out_of_range,
         "count"},
        {BarrierEnter{.barrier = "B", .session = 1, .count = kMaxBarrierCount + 1},
         Violation::count_out_of_range, "count"},
        {BarrierEnter{.barrier = "", .session = 1, .count = 2}, Violation::name_empty, "barrier"},
        {BarrierLeave{.barrier = "B", .session = 1, .wait_ms = kMaxWaitMs + 1},
         Violation::wait_out_of_range, "wait_ms"},
    };
    for (const Case& c : cases) {
        CAPTURE(op_code_name(op_code(c.op)));
        CAPTURE(violation_name(c.violation));
        const auto invalid = validate(c.op);
        REQUIRE(invalid);
        CHECK(invalid->violation == c.violation);
        CHECK(std::string(invalid->field) == c.field);
        CHECK(describe(*invalid).rfind(std::string(c.field) + ": ", 0) == 0);
    }
    // Prefix operations may name every key.
    CHECK(!validate(Get{.key = "", .prefix = true}));
    CHECK(!validate(Delete{.key = "", .prefix = true}));
    CHECK(describe({Violation::name_too_long, "key"}) ==
          "key: longer than 512 bytes (session names: 128)");
}

// ---- Size limits -------------------------------------------------------------------------------

TEST_CASE("lock ops: payload and result budgets follow the datagram size")
{
    // docs/replication.md: 1381 payload bytes at the default 1472-byte message.
    CHECK(max_entry_payload_bytes(VL_DEFAULT_MESSAGE_BYTES) == 1381);
    CHECK(max_reply_result_bytes(VL_DEFAULT_MESSAGE_BYTES) == VL_DEFAULT_MESSAGE_BYTES - 56 - 16);
    CHECK(max_entry_payload_bytes(10) == 0);
    CHECK(get_result_bytes(3, 5) ==
          encode_result(GetResult{.kvs = {KeyValue{.key = "abc", .value = "12345"}}}).size());
}

TEST_CASE("lock ops: max_value_bytes is the exact value limit for an op and its read-back")
{
    const size_t op_budget = max_entry_payload_bytes(VL_DEFAULT_MESSAGE_BYTES);
    const size_t result_budget = max_reply_result_bytes(VL_DEFAULT_MESSAGE_BYTES);
    for (const Put& shape : {Put{.key = "k"}, Put{.key = std::string(kMaxNameBytes, 'k')},
                             Put{.key = "k", .session = 3, .prev_revision = 9,
                                 .sequencer = Sequencer{.lock = std::string(300, 'L')}}}) {
        const auto limit = max_value_bytes(shape, op_budget, result_budget);
        REQUIRE(limit);
        Put put = shape;
        put.value.assign(*limit, 'v');
        CHECK(encoded_size(put) <= op_budget);
        CHECK(get_result_bytes(put.key.size(), put.value.size()) <= result_budget);
        // Exact: one more byte breaks one of the two budgets.
        put.value.push_back('v');
        CHECK((encoded_size(put) > op_budget ||
               get_result_bytes(put.key.size(), put.value.size()) > result_budget));
    }
    // The numbers docs/lock-service.md quotes for the default datagram.
    CHECK(max_value_bytes(Put{.key = "k"}, op_budget, result_budget) == 1348);
    CHECK(max_value_bytes(Put{.key = std::string(kMaxNameBytes, 'k')}, op_budget, result_budget) ==
          837);
    // A key and sequencer too long for a small datagram leave no room at all.
    CHECK(!max_value_bytes(Put{.key = std::string(kMaxNameBytes, 'k'),
                               .sequencer = Sequencer{.lock = std::string(kMaxNameBytes, 'L')}},
                           max_entry_payload_bytes(1000), max_reply_result_bytes(1000)));
}

}  // namespace
}  // namespace voltlock
