// The operations of the lock and configuration service (DESIGN.md §4) as values, and their
// compact binary encoding. One op is one log entry's payload, and a payload must fit in one
// datagram (1381 bytes at the default 1472-byte message size; docs/replication.md, "Limits"), so
// ops are packed fields, not JSON. Results are encoded the same way: the replica that executes an
// op returns the encoded result, and the HTTP layer decodes it. docs/lock-service.md describes
// what each op does; LockMachine (lock_machine.h) executes them.
//
// Encoding. All integers are little-endian, written byte by byte (no host-order memcpy).
//   str  = u16 length, then that many bytes
//   op   = u8 op code (OpCode), then the op's fields in the order its struct declares them
//   result = u8 op code, u8 error code (ErrorCode), u64 revision, then
//            u64 detail                           if the error code is not `ok`
//            the op's result fields               otherwise
// Optional fields are announced by a u8 `flags` field placed before them; an op without optional
// fields has none. Decoding never trusts the input and never reads past it: an unknown op code, a
// field cut short, bytes after the last field, unknown flag bits or an enum value out of range
// reject the whole buffer with a named reason. There is exactly one encoding per value (every
// accepted buffer re-encodes to itself), which the tests check by fuzzing.
//
// Op codes, error codes and enum values are never renumbered; a retired one stays as UNUSEDn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/auth_ops.h"
#include "core/expected.h"
#include "core/types.h"

namespace voltlock {

using SessionId = uint64_t;  // 0 means "none"; a session's id is the revision that created it
using Revision = uint64_t;   // the global write counter; 0 means "before the first write"

// ---- Limits --------------------------------------------------------------------------------
// Names (lock, barrier, key, session name) are UTF-8 without control characters (U+0000-U+001F,
// U+007F), so they are safe in JSON, URLs (percent-encoded) and logs; '/' is an ordinary
// character. The value limit below is only the encoding's; the real one is what fits in a packet
// (max_value_bytes()).
inline constexpr size_t kMaxNameBytes = 512;         // keys, lock and barrier names
inline constexpr size_t kMaxSessionNameBytes = 128;  // a session's descriptive name (may be empty)
inline constexpr size_t kMaxValueBytes = UINT16_MAX;
inline constexpr uint32_t kMinTtlMs = 1'000;
inline constexpr uint32_t kMaxTtlMs = 86'400'000;        // a day
inline constexpr uint32_t kMaxLockDelayMs = 60'000;      // Chubby caps lock-delay at a minute
inline constexpr uint32_t kMaxWaitMs = 3'600'000;        // an hour; clients wait again after
inline constexpr uint32_t kMaxBarrierCount = 1'024;

// ---- Ops -------------------------------------------------------------------------------------

enum class OpCode : uint8_t {
    none = 0,  // only in an OpError answering a payload without a known op code
    create_session = 1,
    keep_alive = 2,
    close_session = 3,
    expire_session = 4,
    acquire = 5,
    release = 6,
    check_sequencer = 7,
    put = 8,
    erase = 9,  // Delete
    get = 10,
    barrier_enter = 11,
    barrier_leave = 12,
    expire_waiters = 13,
    auth = 14,  // users, roles, tokens: core/auth_ops.h
    withdraw_wait = 15,
    withdraw_enter = 16,
};
const char* op_code_name(OpCode code);  // "unknown" outside the enum

enum class LockMode : uint8_t { exclusive = 1, shared = 2 };
const char* lock_mode_name(LockMode mode);

// Why the leader expires a session: its lease ran out, or an operator evicted it. Either way the
// locks it held fall under lock-delay.
enum class ExpireReason : uint8_t { lease_expired = 1, evicted = 2 };

// The fencing token of one grant (Chubby's sequencer): valid while that grant stands.
// Encoded: str lock, u8 mode, u64 generation, u64 session.
struct Sequencer {
    std::string lock;
    LockMode mode = LockMode::exclusive;
    uint64_t generation = 0;
    SessionId session = 0;
    bool operator==(const Sequencer&) const = default;
};

// u32 ttl_ms, u32 lock_delay_ms, str name, str owner.
struct CreateSession {
    uint32_t ttl_ms = 0;
    uint32_t lock_delay_ms = 0;
    std::string name;   // for people: logs, the web UI
    std::string owner;  // the identity that opened it, with auth on (docs/security-auth.md)
    bool operator==(const CreateSession&) const = default;
};

// u64 session. Renews the lease: a new lease epoch, deadline = timestamp + ttl.
struct KeepAlive {
    SessionId session = 0;
    bool operator==(const KeepAlive&) const = default;
};

// u64 session. Ends the session; its locks are released with no lock-delay.
struct CloseSession {
    SessionId session = 0;
    bool operator==(const CloseSession&) const = default;
};

// u64 session, u64 lease_epoch, u8 reason. Proposed by the leader. A no-op unless the session's
// lease epoch still equals `lease_epoch` (a KeepAlive applied in between makes it stale).
struct ExpireSession {
    SessionId session = 0;
    Revision lease_epoch = 0;
    ExpireReason reason = ExpireReason::lease_expired;
    bool operator==(const ExpireSession&) const = default;
};

// str lock, u64 session, u8 mode, u32 wait_ms (0 = try once).
struct Acquire {
    std::string lock;
    SessionId session = 0;
    LockMode mode = LockMode::exclusive;
    uint32_t wait_ms = 0;
    bool operator==(const Acquire&) const = default;
};

// str lock, u64 session. Releases the session's hold, or withdraws its wait.
struct Release {
    std::string lock;
    SessionId session = 0;
    bool operator==(const Release&) const = default;
};

// sequencer.
struct CheckSequencer {
    Sequencer sequencer;
    bool operator==(const CheckSequencer&) const = default;
};

// u8 flags (bit 0: prev_revision, bit 1: sequencer), str key, str value, u64 session,
// [u64 prev_revision], [sequencer].
struct Put {
    std::string key;
    Bytes value;
    SessionId session = 0;                  // non-zero: the key is ephemeral, tied to the session
    std::optional<Revision> prev_revision;  // compare-and-set on mod_revision; 0 = must not exist
    std::optional<Sequencer> sequencer;     // applies only while the sequencer is valid
    bool operator==(const Put&) const = default;
};

// u8 flags (bit 0: prefix, bit 1: prev_revision, bit 2: sequencer), str key, [u64 prev_revision],
// [sequencer]. prev_revision only without prefix.
struct Delete {
    std::string key;  // with prefix: every key starting with it ("" = every key)
    bool prefix = false;
    std::optional<Revision> prev_revision;
    std::optional<Sequencer> sequencer;
    bool operator==(const Delete&) const = default;
};

// u8 flags (bit 0: prefix), str key, str after, u32 limit, u32 max_result_bytes.
// A linearizable read: it goes through the log like a write, and changes nothing.
struct Get {
    std::string key;          // with prefix: every key starting with it ("" = every key)
    bool prefix = false;
    std::string after;        // prefix only: start after this key (the previous page's last)
    uint32_t limit = 0;       // at most this many keys; 0 = no limit
    uint32_t max_result_bytes = 0;  // the encoded result stays within this; 0 = no limit
    bool operator==(const Get&) const = default;
};

// str barrier, u64 session, u32 count, u32 wait_ms.
struct BarrierEnter {
    std::string barrier;
    SessionId session = 0;
    uint32_t count = 0;
    uint32_t wait_ms = 0;
    bool operator==(const BarrierEnter&) const = default;
};

// str barrier, u64 session, u32 wait_ms.
struct BarrierLeave {
    std::string barrier;
    SessionId session = 0;
    uint32_t wait_ms = 0;
    bool operator==(const BarrierLeave&) const = default;
};

// str lock, u64 session, u64 deadline_ms. Proposed by the replica whose client hung up while it
// waited: takes the session out of the lock's line if it still waits in it with that deadline
// (the wait that client made; an Acquire asked again takes a new one), and does nothing else. A
// lock granted to the session stays granted: the client may have asked again at another replica
// (keeping its place) and have been told of the grant there, while this replica was stopped or
// cut off.
struct WithdrawWait {
    std::string lock;
    SessionId session = 0;
    uint64_t deadline_ms = 0;
    bool operator==(const WithdrawWait&) const = default;
};

// str barrier, u64 session, u64 deadline_ms. Proposed by the replica whose client hung up while
// it waited to enter a barrier: takes the session out of the barrier if it still waits to enter
// with that deadline (as that deadline would have; a new enter request takes a new one, the same
// request retried elsewhere keeps it), and does nothing else. A barrier that passed meanwhile
// stays passed, and a leave is not withdrawn: it stays asked until its deadline, as any leave.
struct WithdrawEnter {
    std::string barrier;
    SessionId session = 0;
    uint64_t deadline_ms = 0;
    bool operator==(const WithdrawEnter&) const = default;
};

// No fields. Proposed by the leader when a deadline (LockMachine::next_deadline_ms) has passed:
// every op first processes the deadlines up to its timestamp, and this op does nothing else.
struct ExpireWaiters {
    bool operator==(const ExpireWaiters&) const = default;
};

// Alternatives in OpCode order: index + 1 is the op code.
using LockOp = std::variant<CreateSession, KeepAlive, CloseSession, ExpireSession, Acquire,
                            Release, CheckSequencer, Put, Delete, Get, BarrierEnter, BarrierLeave,
                            ExpireWaiters, AuthOp, WithdrawWait, WithdrawEnter>;
OpCode op_code(const LockOp& op);

// ---- Results ---------------------------------------------------------------------------------

// Why an op changed nothing. `detail` says more where noted.
enum class ErrorCode : uint8_t {
    ok = 0,
    malformed = 1,          // the payload does not decode (detail: OpDecodeError)
    invalid_argument = 2,   // detail: Violation
    unknown_session = 3,
    cas_mismatch = 4,       // detail: the key's mod_revision (0: the key does not exist)
    sequencer_invalid = 5,  // detail: the lock's latest generation (0: no such lock)
    busy = 6,               // wait_ms was 0 and it could not be done now; detail: lock-delay end
    not_held = 7,           // Release by a session that neither holds nor waits for the lock
    mode_conflict = 8,      // the session holds or waits for the lock in the other mode
    count_mismatch = 9,     // detail: the barrier's count
    barrier_in_use = 10,    // the barrier released its members; others wait until all left
    not_member = 11,        // BarrierLeave by a session that did not enter
    too_large = 12,         // Get: one key does not fit in max_result_bytes; detail: its size
    not_found = 13,         // auth: no such user, role or token (detail: AuthTable)
    already_exists = 14,    // auth: a token with this id exists (detail: AuthTable)
};
const char* error_code_name(ErrorCode code);  // "unknown" outside the enum

// What is wrong with an op's arguments (ErrorCode::invalid_argument).
enum class Violation : uint8_t {
    none = 0,
    name_empty = 1,
    name_too_long = 2,
    name_not_utf8 = 3,
    name_control_character = 4,
    session_missing = 5,  // session id 0 where a session is required
    ttl_out_of_range = 6,
    lock_delay_out_of_range = 7,
    wait_out_of_range = 8,
    count_out_of_range = 9,
    value_too_long = 10,
    prev_revision_with_prefix = 11,
    after_without_prefix = 12,
    permissions_invalid = 13,  // auth: no permission, an unknown one, or a bad resource
    too_many = 14,             // auth: more grants or roles than kMaxRoleGrants / kMaxUserRoles
    reserved_name = 15,        // auth: the built-in role `admin` cannot be changed
};
const char* violation_name(Violation violation);

struct OpError {
    OpCode op = OpCode::create_session;
    ErrorCode code = ErrorCode::malformed;
    Revision revision = 0;  // the current revision
    uint64_t detail = 0;
    bool operator==(const OpError&) const = default;
};

// u64 session, u64 lease_epoch, u64 deadline_ms.
struct CreateSessionResult {
    Revision revision = 0;
    SessionId session = 0;
    Revision lease_epoch = 0;
    uint64_t deadline_ms = 0;  // the lease as the machine sees it; the leader keeps the real one
    bool operator==(const CreateSessionResult&) const = default;
};

// u64 lease_epoch, u64 deadline_ms.
struct KeepAliveResult {
    Revision revision = 0;
    Revision lease_epoch = 0;
    uint64_t deadline_ms = 0;
    bool operator==(const KeepAliveResult&) const = default;
};

// u8 ended, u32 locks_released, u32 keys_deleted.
struct CloseSessionResult {
    Revision revision = 0;
    bool ended = true;
    uint32_t locks_released = 0;
    uint32_t keys_deleted = 0;
    bool operator==(const CloseSessionResult&) const = default;
};

// Same fields; `ended` is false when the expiry was stale (the lease was renewed since).
struct ExpireSessionResult {
    Revision revision = 0;
    bool ended = false;
    uint32_t locks_released = 0;
    uint32_t keys_deleted = 0;
    bool operator==(const ExpireSessionResult&) const = default;
};

enum class AcquireStatus : uint8_t { granted = 1, waiting = 2 };

// u8 status, then granted: sequencer; waiting: u64 deadline_ms, u32 position (1 = head).
struct AcquireResult {
    Revision revision = 0;
    AcquireStatus status = AcquireStatus::granted;
    Sequencer sequencer;       // granted
    uint64_t deadline_ms = 0;  // waiting: a lock_timeout event follows unless granted before
    uint32_t position = 0;     // waiting
    bool operator==(const AcquireResult&) const = default;
};

// u8 released, u8 wait_withdrawn, u32 granted.
struct ReleaseResult {
    Revision revision = 0;
    bool released = false;        // the session held the lock and no longer does
    bool wait_withdrawn = false;  // the session was waiting and no longer is
    uint32_t granted = 0;         // waiters granted as a consequence
    bool operator==(const ReleaseResult&) const = default;
};

// u8 valid.
struct CheckSequencerResult {
    Revision revision = 0;
    bool valid = false;
    bool operator==(const CheckSequencerResult&) const = default;
};

// u64 prev_mod_revision, u64 create_revision, u64 version.
struct PutResult {
    Revision revision = 0;           // the key's new mod_revision
    Revision prev_mod_revision = 0;  // 0: the key was created
    Revision create_revision = 0;
    uint64_t version = 0;            // writes since the key was created, this one included
    bool operator==(const PutResult&) const = default;
};

// u32 deleted.
struct DeleteResult {
    Revision revision = 0;
    uint32_t deleted = 0;
    bool operator==(const DeleteResult&) const = default;
};

// One key as Get returns it. Encoded: str key, str value, u64 create_revision,
// u64 mod_revision, u64 version, u64 session.
struct KeyValue {
    std::string key;
    Bytes value;
    Revision create_revision = 0;
    Revision mod_revision = 0;
    uint64_t version = 0;
    SessionId session = 0;  // non-zero: ephemeral
    bool operator==(const KeyValue&) const = default;
};

// u8 more, u32 count, count KeyValues.
struct GetResult {
    Revision revision = 0;  // the revision the read reflects
    std::vector<KeyValue> kvs;
    bool more = false;      // a limit cut the listing short: ask again with after = last key
    bool operator==(const GetResult&) const = default;
};

enum class BarrierStatus : uint8_t { passed = 1, waiting = 2 };

// u8 status, u64 deadline_ms (waiting; else 0).
struct BarrierEnterResult {
    Revision revision = 0;
    BarrierStatus status = BarrierStatus::passed;  // passed: `count` sessions have entered
    uint64_t deadline_ms = 0;
    bool operator==(const BarrierEnterResult&) const = default;
};

// u8 status, u64 deadline_ms.
struct BarrierLeaveResult {
    Revision revision = 0;
    BarrierStatus status = BarrierStatus::passed;  // passed: every member has left
    uint64_t deadline_ms = 0;
    bool operator==(const BarrierLeaveResult&) const = default;
};

// u8 withdrawn, u32 granted.
struct WithdrawWaitResult {
    Revision revision = 0;
    bool withdrawn = false;  // the session was waiting and no longer is
    uint32_t granted = 0;    // waiters granted as a consequence
    bool operator==(const WithdrawWaitResult&) const = default;
};

// u8 withdrawn.
struct WithdrawEnterResult {
    Revision revision = 0;
    bool withdrawn = false;  // the session was waiting to enter and is no longer a member
    bool operator==(const WithdrawEnterResult&) const = default;
};

// No fields.
struct ExpireWaitersResult {
    Revision revision = 0;
    bool operator==(const ExpireWaitersResult&) const = default;
};

using OpResult = std::variant<OpError, CreateSessionResult, KeepAliveResult, CloseSessionResult,
                              ExpireSessionResult, AcquireResult, ReleaseResult,
                              CheckSequencerResult, PutResult, DeleteResult, GetResult,
                              BarrierEnterResult, BarrierLeaveResult, ExpireWaitersResult,
                              AuthResult, WithdrawWaitResult, WithdrawEnterResult>;
// The op a result answers.
OpCode result_op_code(const OpResult& result);
// The revision a result carries (every result carries one).
Revision result_revision(const OpResult& result);

// ---- Validation ------------------------------------------------------------------------------

struct Invalid {
    Violation violation = Violation::none;
    const char* field = "";  // the op field at fault, as the JSON API names it
    bool operator==(const Invalid&) const = default;
};
// Checks names, ranges and combinations. The HTTP layer calls it before proposing (400 with
// describe()); LockMachine calls it again on every op it applies.
std::optional<Invalid> validate(const LockOp& op);
std::string describe(const Invalid& invalid);  // "lock: longer than 512 bytes"
Violation validate_name(std::string_view name);  // also for watch keys: "" is name_empty
bool is_valid_utf8(std::string_view text);

// ---- Encoding --------------------------------------------------------------------------------

// Bytes encode_op(op) returns; meaningful for any op, also one too large to encode.
size_t encoded_size(const LockOp& op);
// Precondition: validate(op) found nothing (every string fits its u16 length).
Bytes encode_op(const LockOp& op);
Bytes encode_result(const OpResult& result);

// Payload and result limits per datagram size are max_entry_payload_bytes() and
// max_reply_result_bytes() in core/message.h. A GetResult's size is its header plus each
// key's bytes.
// op, error, revision, more, count
inline constexpr size_t kGetResultHeaderBytes = 1 + 1 + 8 + 1 + 4;
inline constexpr size_t key_value_bytes(size_t key_bytes, size_t value_bytes)
{
    return 2 + key_bytes + 2 + value_bytes + 4 * 8;
}
// Bytes a GetResult holding only this one key takes.
inline constexpr size_t get_result_bytes(size_t key_bytes, size_t value_bytes)
{
    return kGetResultHeaderBytes + key_value_bytes(key_bytes, value_bytes);
}
// The largest value `put` (its other fields as given) may carry so that the op fits in
// `op_budget` bytes and the key can be read back by a Get within `result_budget`. The HTTP layer
// answers 413 naming this number when put.value is longer; nullopt when not even an empty value
// fits (a long key with a long sequencer in a small datagram).
std::optional<size_t> max_value_bytes(const Put& put, size_t op_budget, size_t result_budget);

// ---- Decoding --------------------------------------------------------------------------------

enum class OpDecodeError : uint8_t {
    empty = 1,           // no op code
    unknown_op = 2,      // op code outside OpCode
    truncated = 3,       // a field runs past the end
    trailing_bytes = 4,  // bytes left after the last field
    bad_flags = 5,       // flag bits the op does not define
    bad_enum = 6,        // mode, reason, status, error code or bool out of range
};
const char* op_decode_error_name(OpDecodeError error);

// Either a value or the reason the buffer was rejected.
template <typename T>
using OpDecodeResult = Expected<T, OpDecodeError>;

OpDecodeResult<LockOp> decode_op(std::string_view payload);
OpDecodeResult<OpResult> decode_result(std::string_view result);

}  // namespace voltlock
