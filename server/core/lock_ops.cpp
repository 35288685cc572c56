#include "core/lock_ops.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "core/assert.h"
#include "core/auth_codec.h"
#include "core/auth_state.h"
#include "core/codec.h"
#include "core/overloaded.h"
#include "voltlock/wire.h"

namespace voltlock {

static_assert(std::variant_size_v<LockOp> == static_cast<size_t>(OpCode::withdraw_enter),
              "LockOp alternatives are the op codes in order");
static_assert(std::variant_size_v<OpResult> == std::variant_size_v<LockOp> + 1,
              "one result type per op, plus OpError");

namespace {

constexpr uint8_t kMaxOpCode = static_cast<uint8_t>(OpCode::withdraw_enter);
constexpr uint8_t kMaxErrorCode = static_cast<uint8_t>(ErrorCode::already_exists);

// Put flags.
constexpr uint8_t kPutPrevRevision = 1u << 0;
constexpr uint8_t kPutSequencer = 1u << 1;
// Delete flags.
constexpr uint8_t kDeletePrefix = 1u << 0;
constexpr uint8_t kDeletePrevRevision = 1u << 1;
constexpr uint8_t kDeleteSequencer = 1u << 2;
// Get flags.
constexpr uint8_t kGetPrefix = 1u << 0;

// The enum values an op or result may carry.
bool known(LockMode mode) { return mode == LockMode::exclusive || mode == LockMode::shared; }
bool known(ExpireReason reason)
{
    return reason == ExpireReason::lease_expired || reason == ExpireReason::evicted;
}
bool known(AcquireStatus status)
{
    return status == AcquireStatus::granted || status == AcquireStatus::waiting;
}
bool known(BarrierStatus status)
{
    return status == BarrierStatus::passed || status == BarrierStatus::waiting;
}

// The reason of the first failure, or trailing_bytes if everything read but bytes are left.
OpDecodeError op_decode_error(const codec::Reader& r)
{
    if (!r.error()) return OpDecodeError::trailing_bytes;
    switch (*r.error()) {
    case codec::ReadError::truncated: break;
    case codec::ReadError::bad_enum: return OpDecodeError::bad_enum;
    case codec::ReadError::bad_flags: return OpDecodeError::bad_flags;
    }
    return OpDecodeError::truncated;
}

}  // namespace

// ---- The layouts (codec.h), in the order of lock_ops.h ----------------------------------------

template <typename Io, codec::MaybeConst<Sequencer> R>
bool fields(Io& io, R& s)
{
    return io.template str<uint16_t>(s.lock) && io.enumeration(s.mode, known) &&
           io.u64(s.generation) && io.u64(s.session);
}

template <typename Io, codec::MaybeConst<CreateSession> R>
bool fields(Io& io, R& o)
{
    return io.u32(o.ttl_ms) && io.u32(o.lock_delay_ms) && io.template str<uint16_t>(o.name) &&
           io.template str<uint16_t>(o.owner);
}

template <typename Io, typename R>
    requires codec::MaybeConst<R, KeepAlive> || codec::MaybeConst<R, CloseSession>
bool fields(Io& io, R& o)
{
    return io.u64(o.session);
}

template <typename Io, codec::MaybeConst<ExpireSession> R>
bool fields(Io& io, R& o)
{
    return io.u64(o.session) && io.u64(o.lease_epoch) && io.enumeration(o.reason, known);
}

template <typename Io, codec::MaybeConst<Acquire> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.lock) && io.u64(o.session) &&
           io.enumeration(o.mode, known) && io.u32(o.wait_ms);
}

template <typename Io, codec::MaybeConst<Release> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.lock) && io.u64(o.session);
}

template <typename Io, codec::MaybeConst<WithdrawWait> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.lock) && io.u64(o.session) && io.u64(o.deadline_ms);
}

template <typename Io, codec::MaybeConst<WithdrawEnter> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.barrier) && io.u64(o.session) && io.u64(o.deadline_ms);
}

template <typename Io, codec::MaybeConst<CheckSequencer> R>
bool fields(Io& io, R& o)
{
    return fields(io, o.sequencer);
}

template <typename Io, codec::MaybeConst<Put> R>
bool fields(Io& io, R& o)
{
    uint8_t flags = (o.prev_revision ? kPutPrevRevision : 0) | (o.sequencer ? kPutSequencer : 0);
    return io.flags(flags, kPutPrevRevision | kPutSequencer) &&
           io.template str<uint16_t>(o.key) && io.template str<uint16_t>(o.value) &&
           io.u64(o.session) && io.optional(o.prev_revision, flags & kPutPrevRevision) &&
           io.optional(o.sequencer, flags & kPutSequencer);
}

template <typename Io, codec::MaybeConst<Delete> R>
bool fields(Io& io, R& o)
{
    uint8_t flags = (o.prefix ? kDeletePrefix : 0) | (o.prev_revision ? kDeletePrevRevision : 0) |
                    (o.sequencer ? kDeleteSequencer : 0);
    return io.flags(flags, kDeletePrefix | kDeletePrevRevision | kDeleteSequencer) &&
           io.implied(o.prefix, (flags & kDeletePrefix) != 0) &&
           io.template str<uint16_t>(o.key) &&
           io.optional(o.prev_revision, flags & kDeletePrevRevision) &&
           io.optional(o.sequencer, flags & kDeleteSequencer);
}

template <typename Io, codec::MaybeConst<Get> R>
bool fields(Io& io, R& o)
{
    uint8_t flags = o.prefix ? kGetPrefix : 0;
    return io.flags(flags, kGetPrefix) && io.implied(o.prefix, (flags & kGetPrefix) != 0) &&
           io.template str<uint16_t>(o.key) && io.template str<uint16_t>(o.after) &&
           io.u32(o.limit) && io.u32(o.max_result_bytes);
}

template <typename Io, codec::MaybeConst<BarrierEnter> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.barrier) && io.u64(o.session) && io.u32(o.count) &&
           io.u32(o.wait_ms);
}

template <typename Io, codec::MaybeConst<BarrierLeave> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.barrier) && io.u64(o.session) && io.u32(o.wait_ms);
}

// Results: the layouts of the fields after op code, error code and revision.

template <typename Io, codec::MaybeConst<OpError> R>
bool fields(Io& io, R& e)
{
    return io.u64(e.detail);
}

template <typename Io, codec::MaybeConst<CreateSessionResult> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.session) && io.u64(r.lease_epoch) && io.u64(r.deadline_ms);
}

template <typename Io, codec::MaybeConst<KeepAliveResult> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.lease_epoch) && io.u64(r.deadline_ms);
}

template <typename Io, typename R>
    requires codec::MaybeConst<R, CloseSessionResult> ||
             codec::MaybeConst<R, ExpireSessionResult>
bool fields(Io& io, R& r)
{
    return io.boolean(r.ended) && io.u32(r.locks_released) && io.u32(r.keys_deleted);
}

template <typename Io, codec::MaybeConst<AcquireResult> R>
bool fields(Io& io, R& r)
{
    return io.enumeration(r.status, known) &&
           (r.status == AcquireStatus::granted ? fields(io, r.sequencer)
                                               : io.u64(r.deadline_ms) && io.u32(r.position));
}

template <typename Io, codec::MaybeConst<ReleaseResult> R>
bool fields(Io& io, R& r)
{
    return io.boolean(r.released) && io.boolean(r.wait_withdrawn) && io.u32(r.granted);
}

template <typename Io, codec::MaybeConst<WithdrawWaitResult> R>
bool fields(Io& io, R& r)
{
    return io.boolean(r.withdrawn) && io.u32(r.granted);
}

template <typename Io, codec::MaybeConst<WithdrawEnterResult> R>
bool fields(Io& io, R& r)
{
    return io.boolean(r.withdrawn);
}

template <typename Io, codec::MaybeConst<CheckSequencerResult> R>
bool fields(Io& io, R& r)
{
    return io.boolean(r.valid);
}

template <typename Io, codec::MaybeConst<PutResult> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.prev_mod_revision) && io.u64(r.create_revision) && io.u64(r.version);
}

template <typename Io, codec::MaybeConst<DeleteResult> R>
bool fields(Io& io, R& r)
{
    return io.u32(r.deleted);
}

template <typename Io, codec::MaybeConst<KeyValue> R>
bool fields(Io& io, R& kv)
{
    return io.template str<uint16_t>(kv.key) && io.template str<uint16_t>(kv.value) &&
           io.u64(kv.create_revision) && io.u64(kv.mod_revision) && io.u64(kv.version) &&
           io.u64(kv.session);
}

template <typename Io, codec::MaybeConst<GetResult> R>
bool fields(Io& io, R& r)
{
    return io.boolean(r.more) && io.template sequence<uint32_t>(r.kvs);
}

template <typename Io, typename R>
    requires codec::MaybeConst<R, BarrierEnterResult> ||
             codec::MaybeConst<R, BarrierLeaveResult>
bool fields(Io& io, R& r)
{
    return io.enumeration(r.status, known) && io.u64(r.deadline_ms);
}

template <typename Io, typename R>
    requires codec::MaybeConst<R, ExpireWaiters> || codec::MaybeConst<R, ExpireWaitersResult>
bool fields(Io&, R&)
{
    return true;
}

namespace {

// An op: its code, then its fields.
template <typename Io>
bool op_fields(Io& io, const LockOp& op)
{
    return io.u8(static_cast<uint8_t>(op_code(op))) &&
           std::visit([&](const auto& o) { return fields(io, o); }, op);
}

// A result: its op code, its error code and the revision, then the error's detail or the
// result's fields.
template <typename Io>
bool result_fields(Io& io, const OpResult& result)
{
    const auto* error = std::get_if<OpError>(&result);
    VL_ASSERT(!error || error->code != ErrorCode::ok, "an OpError carries an error");
    return io.u8(static_cast<uint8_t>(result_op_code(result))) &&
           io.u8(static_cast<uint8_t>(error ? error->code : ErrorCode::ok)) &&
           io.u64(result_revision(result)) &&
           std::visit([&](const auto& r) { return fields(io, r); }, result);
}

// Measured first, so that the bytes are allocated once.
template <typename Value, typename Layout>
Bytes encode_with(const Value& value, Layout layout)
{
    codec::Counter counter;
    layout(counter, value);
    Bytes out(counter.size(), '\0');
    codec::Writer writer(out);
    const bool written = layout(writer, value);
    VL_ASSERT(written, "validate() keeps every string within its u16 length");
    return out;
}

// ---- Validation helpers --------------------------------------------------------------------

std::optional<Invalid> check(Violation v, const char* field)
{
    if (v == Violation::none) return std::nullopt;
    return Invalid{v, field};
}

// A key or name that may be empty (a prefix, a session's name), else validate_name's rules.
Violation validate_optional_name(std::string_view name, size_t max_bytes)
{
    if (name.empty()) return Violation::none;
    if (name.size() > max_bytes) return Violation::name_too_long;
    return validate_name(name);
}

std::optional<Invalid> check_session(SessionId session)
{
    return session == 0 ? std::optional<Invalid>(Invalid{Violation::session_missing, "session"})
                        : std::nullopt;
}

std::optional<Invalid> check_wait(uint32_t wait_ms)
{
    return wait_ms > kMaxWaitMs
               ? std::optional<Invalid>(Invalid{Violation::wait_out_of_range, "wait_ms"})
               : std::nullopt;
}

std::optional<Invalid> check_count(uint32_t count)
{
    return count < 1 || count > kMaxBarrierCount
               ? std::optional<Invalid>(Invalid{Violation::count_out_of_range, "count"})
               : std::nullopt;
}

std::optional<Invalid> first_of(std::initializer_list<std::optional<Invalid>> checks)
{
    for (const auto& c : checks)
        if (c) return c;
    return std::nullopt;
}

// A lock's or a barrier's name (`field`) and a session's id (Release, the withdrawals).
std::optional<Invalid> check_name_and_session(const std::string& name, const char* field,
                                              SessionId session)
{
    return first_of({check(validate_name(name), field), check_session(session)});
}

std::optional<Invalid> check_sequencer_field(const std::optional<Sequencer>& s)
{
    if (!s) return std::nullopt;
    return check(validate_name(s->lock), "sequencer.lock");
}

}  // namespace

// ---- Names ---------------------------------------------------------------------------------

const char* op_code_name(OpCode code)
{
    switch (code) {
    case OpCode::none: return "none";
    case OpCode::create_session: return "create_session";
    case OpCode::keep_alive: return "keep_alive";
    case OpCode::close_session: return "close_session";
    case OpCode::expire_session: return "expire_session";
    case OpCode::acquire: return "acquire";
    case OpCode::release: return "release";
    case OpCode::check_sequencer: return "check_sequencer";
    case OpCode::put: return "put";
    case OpCode::erase: return "delete";
    case OpCode::get: return "get";
    case OpCode::barrier_enter: return "barrier_enter";
    case OpCode::barrier_leave: return "barrier_leave";
    case OpCode::expire_waiters: return "expire_waiters";
    case OpCode::auth: return "auth";
    case OpCode::withdraw_wait: return "withdraw_wait";
    case OpCode::withdraw_enter: return "withdraw_enter";
    }
    return "unknown";
}

const char* lock_mode_name(LockMode mode)
{
    switch (mode) {
    case LockMode::exclusive: return "exclusive";
    case LockMode::shared: return "shared";
    }
    return "unknown";
}

const char* error_code_name(ErrorCode code)
{
    switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::malformed: return "malformed";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::unknown_session: return "unknown_session";
    case ErrorCode::cas_mismatch: return "cas_mismatch";
    case ErrorCode::sequencer_invalid: return "sequencer_invalid";
    case ErrorCode::busy: return "busy";
    case ErrorCode::not_held: return "not_held";
    case ErrorCode::mode_conflict: return "mode_conflict";
    case ErrorCode::count_mismatch: return "count_mismatch";
    case ErrorCode::barrier_in_use: return "barrier_in_use";
    case ErrorCode::not_member: return "not_member";
    case ErrorCode::too_large: return "too_large";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::already_exists: return "already_exists";
    }
    return "unknown";
}

const char* violation_name(Violation violation)
{
    switch (violation) {
    case Violation::none: return "none";
    case Violation::name_empty: return "name_empty";
    case Violation::name_too_long: return "name_too_long";
    case Violation::name_not_utf8: return "name_not_utf8";
    case Violation::name_control_character: return "name_control_character";
    case Violation::session_missing: return "session_missing";
    case Violation::ttl_out_of_range: return "ttl_out_of_range";
    case Violation::lock_delay_out_of_range: return "lock_delay_out_of_range";
    case Violation::wait_out_of_range: return "wait_out_of_range";
    case Violation::count_out_of_range: return "count_out_of_range";
    case Violation::value_too_long: return "value_too_long";
    case Violation::prev_revision_with_prefix: return "prev_revision_with_prefix";
    case Violation::after_without_prefix: return "after_without_prefix";
    case Violation::permissions_invalid: return "permissions_invalid";
    case Violation::too_many: return "too_many";
    case Violation::reserved_name: return "reserved_name";
    }
    return "unknown";
}

const char* op_decode_error_name(OpDecodeError error)
{
    switch (error) {
    case OpDecodeError::empty: return "empty";
    case OpDecodeError::unknown_op: return "unknown_op";
    case OpDecodeError::truncated: return "truncated";
    case OpDecodeError::trailing_bytes: return "trailing_bytes";
    case OpDecodeError::bad_flags: return "bad_flags";
    case OpDecodeError::bad_enum: return "bad_enum";
    }
    return "unknown";
}

OpCode op_code(const LockOp& op) { return static_cast<OpCode>(op.index() + 1); }

OpCode result_op_code(const OpResult& result)
{
    if (const auto* error = std::get_if<OpError>(&result)) return error->op;
    return static_cast<OpCode>(result.index());  // OpError is alternative 0
}

Revision result_revision(const OpResult& result)
{
    return std::visit([](const auto& r) { return r.revision; }, result);
}

// ---- Validation --------------------------------------------------------------------------------

bool is_valid_utf8(std::string_view text)
{
    size_t i = 0;
    while (i < text.size()) {
        const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
        const uint8_t b0 = byte(i);
        size_t len = 0;
        uint32_t cp = 0;
        if (b0 < 0x80) {
            i += 1;
            continue;
        } else if ((b0 & 0xE0) == 0xC0) {
            len = 2;
            cp = b0 & 0x1Fu;
        } else if ((b0 & 0xF0) == 0xE0) {
            len = 3;
            cp = b0 & 0x0Fu;
        } else if ((b0 & 0xF8) == 0xF0) {
            len = 4;
            cp = b0 & 0x07u;
        } else {
            return false;  // a continuation byte first, or 0xF8..0xFF
        }
        if (len > text.size() - i) return false;
        for (size_t k = 1; k < len; k++) {
            if ((byte(i + k) & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (byte(i + k) & 0x3Fu);
        }
        const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
        if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;  // overlong, beyond Unicode, or a surrogate
        i += len;
    }
    return true;
}

Violation validate_name(std::string_view name)
{
    if (name.empty()) return Violation::name_empty;
    if (name.size() > kMaxNameBytes) return Violation::name_too_long;
    if (!is_valid_utf8(name)) return Violation::name_not_utf8;
    for (const char c : name) {
        const auto b = static_cast<uint8_t>(c);
        if (b < 0x20 || b == 0x7F) return Violation::name_control_character;
    }
    return Violation::none;
}

std::optional<Invalid> validate(const LockOp& op)
{
    return std::visit(
        Overloaded{
            [](const CreateSession& o) {
                return first_of({
                    o.ttl_ms < kMinTtlMs || o.ttl_ms > kMaxTtlMs
                        ? std::optional<Invalid>(Invalid{Violation::ttl_out_of_range, "ttl_ms"})
                        : std::nullopt,
                    o.lock_delay_ms > kMaxLockDelayMs
                        ? std::optional<Invalid>(
                              Invalid{Violation::lock_delay_out_of_range, "lock_delay_ms"})
                        : std::nullopt,
                    check(validate_optional_name(o.name, kMaxSessionNameBytes), "name"),
                });
            },
            [](const KeepAlive& o) { return check_session(o.session); },
            [](const CloseSession& o) { return check_session(o.session); },
            [](const ExpireSession& o) { return check_session(o.session); },
            [](const Acquire& o) {
                return first_of({check(validate_name(o.lock), "lock"), check_session(o.session),
                                 check_wait(o.wait_ms)});
            },
            [](const Release& o) { return check_name_and_session(o.lock, "lock", o.session); },
            [](const WithdrawWait& o) { return check_name_and_session(o.lock, "lock", o.session); },
            [](const CheckSequencer& o) { return check_sequencer_field(o.sequencer); },
            [](const Put& o) {
                return first_of({
                    check(validate_name(o.key), "key"),
                    o.value.size() > kMaxValueBytes
                        ? std::optional<Invalid>(Invalid{Violation::value_too_long, "value"})
                        : std::nullopt,
                    check_sequencer_field(o.sequencer),
                });
            },
            [](const Delete& o) {
                return first_of({
                    check(o.prefix ? validate_optional_name(o.key, kMaxNameBytes)
                                   : validate_name(o.key),
                          "key"),
                    o.prefix && o.prev_revision
                        ? std::optional<Invalid>(
                              Invalid{Violation::prev_revision_with_prefix, "prev_revision"})
                        : std::nullopt,
                    check_sequencer_field(o.sequencer),
                });
            },
            [](const Get& o) {
                return first_of({
                    check(o.prefix ? validate_optional_name(o.key, kMaxNameBytes)
                                   : validate_name(o.key),
                          "key"),
                    !o.prefix && !o.after.empty()
                        ? std::optional<Invalid>(Invalid{Violation::after_without_prefix, "after"})
                        : std::nullopt,
                    check(validate_optional_name(o.after, kMaxNameBytes), "after"),
                });
            },
            [](const BarrierEnter& o) {
                return first_of({
                    check(validate_name(o.barrier), "barrier"),
                    check_session(o.session),
                    check_count(o.count),
                    check_wait(o.wait_ms),
                });
            },
            [](const BarrierLeave& o) {
                return first_of({check(validate_name(o.barrier), "barrier"),
                                 check_session(o.session), check_wait(o.wait_ms)});
            },
            [](const WithdrawEnter& o) {
                return check_name_and_session(o.barrier, "barrier", o.session);
            },
            [](const ExpireWaiters&) { return std::optional<Invalid>{}; },
            [](const AuthOp& o) { return validate_auth_op(o); },
        },
        op);
}

std::string describe(const Invalid& invalid)
{
    std::string what;
    switch (invalid.violation) {
    case Violation::none: what = "valid"; break;
    case Violation::name_empty: what = "must not be empty"; break;
    case Violation::name_too_long:
        what = "longer than " + std::to_string(kMaxNameBytes) + " bytes (session names: " +
               std::to_string(kMaxSessionNameBytes) + ")";
        break;
    case Violation::name_not_utf8: what = "not valid UTF-8"; break;
    case Violation::name_control_character:
        what = "contains a control character (U+0000-U+001F or U+007F)";
        break;
    case Violation::session_missing: what = "a session id is required"; break;
    case Violation::ttl_out_of_range:
        what = "must be between " + std::to_string(kMinTtlMs) + " and " +
               std::to_string(kMaxTtlMs) + " ms";
        break;
    case Violation::lock_delay_out_of_range:
        what = "must be at most " + std::to_string(kMaxLockDelayMs) + " ms";
        break;
    case Violation::wait_out_of_range:
        what = "must be at most " + std::to_string(kMaxWaitMs) + " ms";
        break;
    case Violation::count_out_of_range:
        what = "must be between 1 and " + std::to_string(kMaxBarrierCount);
        break;
    case Violation::value_too_long:
        what = "longer than " + std::to_string(kMaxValueBytes) + " bytes";
        break;
    case Violation::prev_revision_with_prefix:
        what = "compare-and-set needs a single key, not a prefix";
        break;
    case Violation::after_without_prefix: what = "only for prefix listings"; break;
    case Violation::permissions_invalid:
        what = "needs permissions among read, write, lock, watch, admin, and a resource "
               "key:PREFIX, lock:PREFIX, barrier:PREFIX or *";
        break;
    case Violation::too_many:
        what = "at most " + std::to_string(kMaxRoleGrants) + " grants a role, " +
               std::to_string(kMaxUserRoles) + " roles a user";
        break;
    case Violation::reserved_name: what = "'admin' is built in and cannot be changed"; break;
    }
    return std::string(invalid.field) + ": " + what;
}

// ---- Encoding ----------------------------------------------------------------------------------

size_t encoded_size(const LockOp& op)
{
    codec::Counter counter;
    op_fields(counter, op);
    return counter.size();
}

Bytes encode_op(const LockOp& op)
{
    return encode_with(op, [](auto& io, const LockOp& o) { return op_fields(io, o); });
}

Bytes encode_result(const OpResult& result)
{
    return encode_with(result, [](auto& io, const OpResult& r) { return result_fields(io, r); });
}

std::optional<size_t> max_value_bytes(const Put& put, size_t op_budget, size_t result_budget)
{
    Put empty = put;
    empty.value.clear();
    const size_t op_base = encoded_size(empty);
    const size_t result_base = get_result_bytes(put.key.size(), 0);
    if (op_base > op_budget || result_base > result_budget) return std::nullopt;
    return std::min({op_budget - op_base, result_budget - result_base, kMaxValueBytes});
}

// ---- Decoding ----------------------------------------------------------------------------------

OpDecodeResult<LockOp> decode_op(std::string_view payload)
{
    codec::Reader r(payload);
    uint8_t code = 0;
    if (!r.u8(code)) return OpDecodeError::empty;
    if (code < 1 || code > kMaxOpCode) return OpDecodeError::unknown_op;
    auto op = codec::alternative<LockOp>(code - 1u);
    if (!std::visit([&](auto& o) { return fields(r, o); }, op) || !r.done())
        return op_decode_error(r);
    return op;
}

OpDecodeResult<OpResult> decode_result(std::string_view result)
{
    codec::Reader r(result);
    uint8_t code = 0;
    uint8_t error = 0;
    Revision revision = 0;
    if (!r.u8(code)) return OpDecodeError::empty;
    if (code > kMaxOpCode) return OpDecodeError::unknown_op;
    if (!(r.u8(error) && r.u64(revision))) return op_decode_error(r);
    if (error > kMaxErrorCode) return OpDecodeError::bad_enum;
    // Only an error may answer a payload without a known op (OpCode::none).
    if (code == 0 && error == static_cast<uint8_t>(ErrorCode::ok)) return OpDecodeError::unknown_op;
    // OpError is alternative 0, and each op's result is at its op code.
    const bool ok = error == static_cast<uint8_t>(ErrorCode::ok);
    auto out = codec::alternative<OpResult>(ok ? code : 0u);
    if (auto* e = std::get_if<OpError>(&out)) {
        e->op = static_cast<OpCode>(code);
        e->code = static_cast<ErrorCode>(error);
    }
    std::visit([&](auto& o) { o.revision = revision; }, out);
    if (!std::visit([&](auto& o) { return fields(r, o); }, out)) return op_decode_error(r);
    if (!r.done()) return OpDecodeError::trailing_bytes;
    return out;
}

}  // namespace voltlock
