#include "core/lock_ops.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/assert.h"
#include "core/auth_state.h"
#include "core/byte_reader.h"
#include "core/byte_writer.h"
#include "core/overloaded.h"
#include "voltlock/wire.h"

namespace voltlock {

static_assert(std::variant_size_v<LockOp> == static_cast<size_t>(OpCode::auth),
              "LockOp alternatives are the op codes in order");
static_assert(std::variant_size_v<OpResult> == std::variant_size_v<LockOp> + 1,
              "one result type per op, plus OpError");

namespace {

constexpr uint8_t kMaxOpCode = static_cast<uint8_t>(OpCode::auth);
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

// ---- Sinks: the one description of each layout, either written or only measured -----------

// Appends little-endian fields to a string; strings with a u16 length.
class Writer : public ByteWriter {
public:
    using ByteWriter::ByteWriter;
    void str(std::string_view s)
    {
        VL_ASSERT(s.size() <= UINT16_MAX, "validate() keeps every string within its u16 length");
        u16(static_cast<uint16_t>(s.size()));
        bytes(s);
    }
};

// Counts the bytes a Writer would append; accepts strings of any length.
class Counter {
public:
    void u8(uint8_t) { size_ += 1; }
    void u16(uint16_t) { size_ += 2; }
    void u32(uint32_t) { size_ += 4; }
    void u64(uint64_t) { size_ += 8; }
    void str(std::string_view s) { size_ += 2 + s.size(); }
    void bytes(std::string_view s) { size_ += s.size(); }
    size_t size() const { return size_; }

private:
    size_t size_ = 0;
};

// Reads an op's fields; the first failure is remembered with its reason.
class Reader {
public:
    explicit Reader(std::string_view in) : in_(in) {}

    bool u8(uint8_t& v) { return in_.u8(v) || fail(OpDecodeError::truncated); }
    bool u16(uint16_t& v) { return in_.u16(v) || fail(OpDecodeError::truncated); }
    bool u32(uint32_t& v) { return in_.u32(v) || fail(OpDecodeError::truncated); }
    bool u64(uint64_t& v) { return in_.u64(v) || fail(OpDecodeError::truncated); }
    bool boolean(bool& v)
    {
        uint8_t x = 0;
        if (!u8(x)) return false;
        if (x > 1) return fail(OpDecodeError::bad_enum);
        v = x == 1;
        return true;
    }
    bool str(std::string& s)
    {
        uint16_t len = 0;
        return u16(len) && (in_.bytes(s, len) || fail(OpDecodeError::truncated));
    }
    // A u8 that must be one of the enum's values, 1..max.
    template <typename E>
    bool enumeration(E& e, uint8_t max)
    {
        uint8_t x = 0;
        if (!u8(x)) return false;
        if (x < 1 || x > max) return fail(OpDecodeError::bad_enum);
        e = static_cast<E>(x);
        return true;
    }
    bool flags(uint8_t& f, uint8_t allowed)
    {
        if (!u8(f)) return false;
        if ((f & ~allowed) != 0) return fail(OpDecodeError::bad_flags);
        return true;
    }
    bool sequencer(Sequencer& s)
    {
        return str(s.lock) && enumeration(s.mode, 2) && u64(s.generation) && u64(s.session);
    }

    bool fail(OpDecodeError error)
    {
        if (!error_) error_ = error;
        return false;
    }
    bool done() const { return in_.done(); }
    void rest(Bytes& out) { in_.rest(out); }
    // The reason of the first failure, or trailing_bytes if everything read but bytes are left.
    OpDecodeError error() const { return error_.value_or(OpDecodeError::trailing_bytes); }

private:
    ByteReader in_;
    std::optional<OpDecodeError> error_;
};

template <typename Sink>
void write_sequencer(Sink& w, const Sequencer& s)
{
    w.str(s.lock);
    w.u8(static_cast<uint8_t>(s.mode));
    w.u64(s.generation);
    w.u64(s.session);
}

template <typename Sink>
void write_op(Sink& w, const LockOp& op)
{
    w.u8(static_cast<uint8_t>(op_code(op)));
    std::visit(Overloaded{
                   [&](const CreateSession& o) {
                       w.u32(o.ttl_ms);
                       w.u32(o.lock_delay_ms);
                       w.str(o.name);
                       w.str(o.owner);
                   },
                   [&](const KeepAlive& o) { w.u64(o.session); },
                   [&](const CloseSession& o) { w.u64(o.session); },
                   [&](const ExpireSession& o) {
                       w.u64(o.session);
                       w.u64(o.lease_epoch);
                       w.u8(static_cast<uint8_t>(o.reason));
                   },
                   [&](const Acquire& o) {
                       w.str(o.lock);
                       w.u64(o.session);
                       w.u8(static_cast<uint8_t>(o.mode));
                       w.u32(o.wait_ms);
                   },
                   [&](const Release& o) {
                       w.str(o.lock);
                       w.u64(o.session);
                   },
                   [&](const CheckSequencer& o) { write_sequencer(w, o.sequencer); },
                   [&](const Put& o) {
                       w.u8(static_cast<uint8_t>((o.prev_revision ? kPutPrevRevision : 0) |
                                                 (o.sequencer ? kPutSequencer : 0)));
                       w.str(o.key);
                       w.str(o.value);
                       w.u64(o.session);
                       if (o.prev_revision) w.u64(*o.prev_revision);
                       if (o.sequencer) write_sequencer(w, *o.sequencer);
                   },
                   [&](const Delete& o) {
                       w.u8(static_cast<uint8_t>((o.prefix ? kDeletePrefix : 0) |
                                                 (o.prev_revision ? kDeletePrevRevision : 0) |
                                                 (o.sequencer ? kDeleteSequencer : 0)));
                       w.str(o.key);
                       if (o.prev_revision) w.u64(*o.prev_revision);
                       if (o.sequencer) write_sequencer(w, *o.sequencer);
                   },
                   [&](const Get& o) {
                       w.u8(o.prefix ? kGetPrefix : 0);
                       w.str(o.key);
                       w.str(o.after);
                       w.u32(o.limit);
                       w.u32(o.max_result_bytes);
                   },
                   [&](const BarrierEnter& o) {
                       w.str(o.barrier);
                       w.u64(o.session);
                       w.u32(o.count);
                       w.u32(o.wait_ms);
                   },
                   [&](const BarrierLeave& o) {
                       w.str(o.barrier);
                       w.u64(o.session);
                       w.u32(o.wait_ms);
                   },
                   [](const ExpireWaiters&) {},
                   [&](const AuthOp& o) { w.bytes(encode_auth_op(o)); },
               },
               op);
}

template <typename Sink>
void write_key_value(Sink& w, const KeyValue& kv)
{
    w.str(kv.key);
    w.str(kv.value);
    w.u64(kv.create_revision);
    w.u64(kv.mod_revision);
    w.u64(kv.version);
    w.u64(kv.session);
}

template <typename Sink>
void write_result(Sink& w, const OpResult& result)
{
    w.u8(static_cast<uint8_t>(result_op_code(result)));
    if (const auto* error = std::get_if<OpError>(&result)) {
        VL_ASSERT(error->code != ErrorCode::ok, "an OpError carries an error");
        w.u8(static_cast<uint8_t>(error->code));
        w.u64(error->revision);
        w.u64(error->detail);
        return;
    }
    w.u8(static_cast<uint8_t>(ErrorCode::ok));
    w.u64(result_revision(result));
    const auto flag = [&](bool b) { w.u8(b ? 1 : 0); };
    std::visit(Overloaded{
                   [](const OpError&) {},
                   [&](const CreateSessionResult& r) {
                       w.u64(r.session);
                       w.u64(r.lease_epoch);
                       w.u64(r.deadline_ms);
                   },
                   [&](const KeepAliveResult& r) {
                       w.u64(r.lease_epoch);
                       w.u64(r.deadline_ms);
                   },
                   [&](const CloseSessionResult& r) {
                       flag(r.ended);
                       w.u32(r.locks_released);
                       w.u32(r.keys_deleted);
                   },
                   [&](const ExpireSessionResult& r) {
                       flag(r.ended);
                       w.u32(r.locks_released);
                       w.u32(r.keys_deleted);
                   },
                   [&](const AcquireResult& r) {
                       w.u8(static_cast<uint8_t>(r.status));
                       if (r.status == AcquireStatus::granted) {
                           write_sequencer(w, r.sequencer);
                       } else {
                           w.u64(r.deadline_ms);
                           w.u32(r.position);
                       }
                   },
                   [&](const ReleaseResult& r) {
                       flag(r.released);
                       flag(r.wait_withdrawn);
                       w.u32(r.granted);
                   },
                   [&](const CheckSequencerResult& r) { flag(r.valid); },
                   [&](const PutResult& r) {
                       w.u64(r.prev_mod_revision);
                       w.u64(r.create_revision);
                       w.u64(r.version);
                   },
                   [&](const DeleteResult& r) { w.u32(r.deleted); },
                   [&](const GetResult& r) {
                       flag(r.more);
                       w.u32(static_cast<uint32_t>(r.kvs.size()));
                       for (const KeyValue& kv : r.kvs) write_key_value(w, kv);
                   },
                   [&](const BarrierEnterResult& r) {
                       w.u8(static_cast<uint8_t>(r.status));
                       w.u64(r.deadline_ms);
                   },
                   [&](const BarrierLeaveResult& r) {
                       w.u8(static_cast<uint8_t>(r.status));
                       w.u64(r.deadline_ms);
                   },
                   [](const ExpireWaitersResult&) {},
                   [&](const AuthResult& r) { w.u64(r.auth_revision); },
               },
               result);
}

// ---- Decoding, one op at a time ----------------------------------------------------------------

// The auth op's body is the rest of the payload (core/auth_state.h decodes it).
bool read_auth_op(Reader& r, LockOp& out)
{
    Bytes body;
    r.rest(body);
    auto decoded = decode_auth_op(body);
    if (!decoded.ok()) return r.fail(decoded.error());
    out = std::move(decoded.value());
    return true;
}

bool read_auth_result(Reader& r, Revision revision, OpResult& out)
{
    AuthResult o{.revision = revision};
    if (!r.u64(o.auth_revision)) return false;
    out = o;
    return true;
}

bool read_op_body(OpCode code, Reader& r, LockOp& out)
{
    switch (code) {
    case OpCode::none: break;
    case OpCode::create_session: {
        CreateSession o;
        if (!(r.u32(o.ttl_ms) && r.u32(o.lock_delay_ms) && r.str(o.name) && r.str(o.owner)))
            return false;
        out = std::move(o);
        return true;
    }
    case OpCode::keep_alive: {
        KeepAlive o;
        if (!r.u64(o.session)) return false;
        out = o;
        return true;
    }
    case OpCode::close_session: {
        CloseSession o;
        if (!r.u64(o.session)) return false;
        out = o;
        return true;
    }
    case OpCode::expire_session: {
        ExpireSession o;
        if (!(r.u64(o.session) && r.u64(o.lease_epoch) && r.enumeration(o.reason, 2))) return false;
        out = o;
        return true;
    }
    case OpCode::acquire: {
        Acquire o;
        if (!(r.str(o.lock) && r.u64(o.session) && r.enumeration(o.mode, 2) && r.u32(o.wait_ms)))
            return false;
        out = std::move(o);
        return true;
    }
    case OpCode::release: {
        Release o;
        if (!(r.str(o.lock) && r.u64(o.session))) return false;
        out = std::move(o);
        return true;
    }
    case OpCode::check_sequencer: {
        CheckSequencer o;
        if (!r.sequencer(o.sequencer)) return false;
        out = std::move(o);
        return true;
    }
    case OpCode::put: {
        Put o;
        uint8_t flags = 0;
        if (!(r.flags(flags, kPutPrevRevision | kPutSequencer) && r.str(o.key) && r.str(o.value) &&
              r.u64(o.session)))
            return false;
        if (flags & kPutPrevRevision) {
            uint64_t prev = 0;
            if (!r.u64(prev)) return false;
            o.prev_revision = prev;
        }
        if (flags & kPutSequencer) {
            Sequencer s;
            if (!r.sequencer(s)) return false;
            o.sequencer = std::move(s);
        }
        out = std::move(o);
        return true;
    }
    case OpCode::erase: {
        Delete o;
        uint8_t flags = 0;
        if (!(r.flags(flags, kDeletePrefix | kDeletePrevRevision | kDeleteSequencer) &&
              r.str(o.key)))
            return false;
        o.prefix = (flags & kDeletePrefix) != 0;
        if (flags & kDeletePrevRevision) {
            uint64_t prev = 0;
            if (!r.u64(prev)) return false;
            o.prev_revision = prev;
        }
        if (flags & kDeleteSequencer) {
            Sequencer s;
            if (!r.sequencer(s)) return false;
            o.sequencer = std::move(s);
        }
        out = std::move(o);
        return true;
    }
    case OpCode::get: {
        Get o;
        uint8_t flags = 0;
        if (!(r.flags(flags, kGetPrefix) && r.str(o.key) && r.str(o.after) && r.u32(o.limit) &&
              r.u32(o.max_result_bytes)))
            return false;
        o.prefix = (flags & kGetPrefix) != 0;
        out = std::move(o);
        return true;
    }
    case OpCode::barrier_enter: {
        BarrierEnter o;
        if (!(r.str(o.barrier) && r.u64(o.session) && r.u32(o.count) && r.u32(o.wait_ms)))
            return false;
        out = std::move(o);
        return true;
    }
    case OpCode::barrier_leave: {
        BarrierLeave o;
        if (!(r.str(o.barrier) && r.u64(o.session) && r.u32(o.wait_ms))) return false;
        out = std::move(o);
        return true;
    }
    case OpCode::expire_waiters:
        out = ExpireWaiters{};
        return true;
    case OpCode::auth: return read_auth_op(r, out);
    }
    return r.fail(OpDecodeError::unknown_op);
}

bool read_key_value(Reader& r, KeyValue& kv)
{
    return r.str(kv.key) && r.str(kv.value) && r.u64(kv.create_revision) &&
           r.u64(kv.mod_revision) && r.u64(kv.version) && r.u64(kv.session);
}

bool read_result_body(OpCode code, Revision revision, Reader& r, OpResult& out)
{
    switch (code) {
    case OpCode::none: break;
    case OpCode::create_session: {
        CreateSessionResult o{.revision = revision};
        if (!(r.u64(o.session) && r.u64(o.lease_epoch) && r.u64(o.deadline_ms))) return false;
        out = o;
        return true;
    }
    case OpCode::keep_alive: {
        KeepAliveResult o{.revision = revision};
        if (!(r.u64(o.lease_epoch) && r.u64(o.deadline_ms))) return false;
        out = o;
        return true;
    }
    case OpCode::close_session: {
        CloseSessionResult o{.revision = revision};
        if (!(r.boolean(o.ended) && r.u32(o.locks_released) && r.u32(o.keys_deleted)))
            return false;
        out = o;
        return true;
    }
    case OpCode::expire_session: {
        ExpireSessionResult o{.revision = revision};
        if (!(r.boolean(o.ended) && r.u32(o.locks_released) && r.u32(o.keys_deleted)))
            return false;
        out = o;
        return true;
    }
    case OpCode::acquire: {
        AcquireResult o{.revision = revision};
        if (!r.enumeration(o.status, 2)) return false;
        if (o.status == AcquireStatus::granted) {
            if (!r.sequencer(o.sequencer)) return false;
        } else if (!(r.u64(o.deadline_ms) && r.u32(o.position))) {
            return false;
        }
        out = std::move(o);
        return true;
    }
    case OpCode::release: {
        ReleaseResult o{.revision = revision};
        if (!(r.boolean(o.released) && r.boolean(o.wait_withdrawn) && r.u32(o.granted)))
            return false;
        out = o;
        return true;
    }
    case OpCode::check_sequencer: {
        CheckSequencerResult o{.revision = revision};
        if (!r.boolean(o.valid)) return false;
        out = o;
        return true;
    }
    case OpCode::put: {
        PutResult o{.revision = revision};
        if (!(r.u64(o.prev_mod_revision) && r.u64(o.create_revision) && r.u64(o.version)))
            return false;
        out = o;
        return true;
    }
    case OpCode::erase: {
        DeleteResult o{.revision = revision};
        if (!r.u32(o.deleted)) return false;
        out = o;
        return true;
    }
    case OpCode::get: {
        GetResult o{.revision = revision};
        uint32_t count = 0;
        if (!(r.boolean(o.more) && r.u32(count))) return false;
        // No reservation from the count: a lying count runs out of bytes, not of memory.
        for (uint32_t i = 0; i < count; i++) {
            KeyValue kv;
            if (!read_key_value(r, kv)) return false;
            o.kvs.push_back(std::move(kv));
        }
        out = std::move(o);
        return true;
    }
    case OpCode::barrier_enter: {
        BarrierEnterResult o{.revision = revision};
        if (!(r.enumeration(o.status, 2) && r.u64(o.deadline_ms))) return false;
        out = o;
        return true;
    }
    case OpCode::barrier_leave: {
        BarrierLeaveResult o{.revision = revision};
        if (!(r.enumeration(o.status, 2) && r.u64(o.deadline_ms))) return false;
        out = o;
        return true;
    }
    case OpCode::expire_waiters:
        out = ExpireWaitersResult{.revision = revision};
        return true;
    case OpCode::auth: return read_auth_result(r, revision, out);
    }
    return r.fail(OpDecodeError::unknown_op);
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

std::optional<Invalid> first_of(std::initializer_list<std::optional<Invalid>> checks)
{
    for (const auto& c : checks)
        if (c) return c;
    return std::nullopt;
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
            [](const Release& o) {
                return first_of({check(validate_name(o.lock), "lock"), check_session(o.session)});
            },
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
                    o.count < 1 || o.count > kMaxBarrierCount
                        ? std::optional<Invalid>(Invalid{Violation::count_out_of_range, "count"})
                        : std::nullopt,
                    check_wait(o.wait_ms),
                });
            },
            [](const BarrierLeave& o) {
                return first_of({check(validate_name(o.barrier), "barrier"),
                                 check_session(o.session), check_wait(o.wait_ms)});
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
    Counter c;
    write_op(c, op);
    return c.size();
}

Bytes encode_op(const LockOp& op)
{
    Bytes out;
    out.reserve(encoded_size(op));
    Writer w(out);
    write_op(w, op);
    return out;
}

Bytes encode_result(const OpResult& result)
{
    Bytes out;
    Writer w(out);
    write_result(w, result);
    return out;
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
    Reader r(payload);
    uint8_t code = 0;
    if (!r.u8(code)) return OpDecodeError::empty;
    if (code < 1 || code > kMaxOpCode) return OpDecodeError::unknown_op;
    LockOp op;
    if (!read_op_body(static_cast<OpCode>(code), r, op) || !r.done()) return r.error();
    return op;
}

OpDecodeResult<OpResult> decode_result(std::string_view result)
{
    Reader r(result);
    uint8_t code = 0;
    uint8_t error = 0;
    Revision revision = 0;
    if (!r.u8(code)) return OpDecodeError::empty;
    if (code > kMaxOpCode) return OpDecodeError::unknown_op;
    if (!(r.u8(error) && r.u64(revision))) return r.error();
    if (error > kMaxErrorCode) return OpDecodeError::bad_enum;
    OpResult out;
    if (error != static_cast<uint8_t>(ErrorCode::ok)) {
        OpError e{.op = static_cast<OpCode>(code), .code = static_cast<ErrorCode>(error),
                  .revision = revision};
        if (!r.u64(e.detail)) return r.error();
        out = e;
    } else {
        // Only an error may answer a payload without a known op (OpCode::none).
        if (code == 0) return OpDecodeError::unknown_op;
        if (!read_result_body(static_cast<OpCode>(code), revision, r, out)) return r.error();
    }
    if (!r.done()) return OpDecodeError::trailing_bytes;
    return out;
}

}  // namespace voltlock
