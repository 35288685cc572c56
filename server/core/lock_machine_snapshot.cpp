#include "core/lock_machine.h"

#include <concepts>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/assert.h"
#include "core/byte_reader.h"
#include "core/byte_writer.h"
#include "core/lock_machine_rules.h"

namespace voltlock {

namespace {

constexpr uint32_t kSnapshotMagic = 0x324D4C56;  // "VLM2" in little-endian byte order
// Snapshots from before sessions had owners: read as sessions without one.
constexpr uint32_t kSnapshotMagicWithoutOwners = 0x314D4C56;  // "VLM1"

// The enum values a snapshot may hold: the enumerators (-Wswitch names one left out here).
bool known(LockMode mode)
{
    switch (mode) {
    case LockMode::exclusive:
    case LockMode::shared: return true;
    }
    return false;
}

bool known(BarrierPhase phase)
{
    switch (phase) {
    case BarrierPhase::entering:
    case BarrierPhase::entered: return true;
    }
    return false;
}

bool known(Cause cause)
{
    switch (cause) {
    case Cause::request:
    case Cause::session_closed:
    case Cause::session_expired:
    case Cause::session_evicted: return true;
    }
    return false;
}

bool known(EventType type)
{
    switch (type) {
    case EventType::put:
    case EventType::erase:
    case EventType::session_create:
    case EventType::session_keepalive:
    case EventType::session_close:
    case EventType::session_expire:
    case EventType::lock_wait:
    case EventType::lock_grant:
    case EventType::lock_release:
    case EventType::lock_timeout:
    case EventType::lock_cancel:
    case EventType::barrier_enter:
    case EventType::barrier_release:
    case EventType::barrier_leave:
    case EventType::barrier_done:
    case EventType::barrier_timeout:
    case EventType::barrier_cancel: return true;
    }
    return false;
}

// Counts the bytes a ByteWriter would append, so that snapshot() allocates its buffer once.
class ByteCounter {
public:
    void u8(uint8_t) { size_ += 1; }
    void u32(uint32_t) { size_ += 4; }
    void u64(uint64_t) { size_ += 8; }
    void bytes(std::string_view s) { size_ += s.size(); }
    size_t size() const { return size_; }

private:
    size_t size_ = 0;
};

// The two directions of the codec run the same description of the layout, the fields()
// functions below: on a SnapshotEncoder each field is appended, on a SnapshotDecoder it is read
// and checked. Every call answers whether it succeeded, which encoding always does.
template <typename Sink>  // ByteWriter, or ByteCounter to measure first
class SnapshotEncoder {
public:
    explicit SnapshotEncoder(Sink& out) : out_(out) {}

    bool magic(uint32_t v) { return u32(v); }
    bool session_owners() const { return true; }
    bool u32(uint32_t v)
    {
        out_.u32(v);
        return true;
    }
    bool u64(uint64_t v)
    {
        out_.u64(v);
        return true;
    }
    bool boolean(bool v)
    {
        out_.u8(v ? 1 : 0);
        return true;
    }
    template <typename Enum>
    bool enumeration(Enum v)
    {
        out_.u8(static_cast<uint8_t>(v));
        return true;
    }
    bool str(std::string_view s)
    {
        count(s.size());
        out_.bytes(s);
        return true;
    }
    template <typename Sequence>
    bool sequence(const Sequence& items)
    {
        count(items.size());
        for (const auto& item : items) fields(*this, item);
        return true;
    }
    template <typename Map>
    bool map(const Map& records)
    {
        count(records.size());
        for (const auto& [key, record] : records) {
            map_key(key);
            fields(*this, record);
        }
        return true;
    }

private:
    void count(size_t n)
    {
        VL_ASSERT(n <= UINT32_MAX, "snapshot lengths and counts fit a u32");
        out_.u32(static_cast<uint32_t>(n));
    }
    void map_key(std::string_view key) { str(key); }
    void map_key(SessionId key) { out_.u64(key); }

    Sink& out_;
};

// Reads what SnapshotEncoder writes, and accepts nothing else: every read is bounded, enums are
// their enumerators, bools 0 or 1, and map keys strictly increasing (no key twice).
class SnapshotDecoder {
public:
    explicit SnapshotDecoder(std::string_view in) : in_(in) {}

    bool magic(uint32_t expected)
    {
        uint32_t v = 0;
        if (!in_.u32(v)) return false;
        session_owners_ = v == expected;
        return v == expected || v == kSnapshotMagicWithoutOwners;
    }
    bool session_owners() const { return session_owners_; }
    bool u32(uint32_t& v) { return in_.u32(v); }
    bool u64(uint64_t& v) { return in_.u64(v); }
    bool boolean(bool& v)
    {
        uint8_t x = 0;
        if (!in_.u8(x) || x > 1) return false;
        v = x == 1;
        return true;
    }
    template <typename Enum>
    bool enumeration(Enum& v)
    {
        uint8_t x = 0;
        if (!in_.u8(x)) return false;
        v = static_cast<Enum>(x);  // defined for any u8: the enums have uint8_t underneath
        return known(v);
    }
    bool str(std::string& s)
    {
        uint32_t size = 0;
        return in_.u32(size) && in_.bytes(s, size);
    }
    // A count is not trusted for an allocation: items are added as they decode, so a count
    // beyond the bytes fails at the first item missing.
    template <typename Sequence>
    bool sequence(Sequence& items)
    {
        uint32_t count = 0;
        if (!in_.u32(count)) return false;
        for (uint32_t i = 0; i < count; i++)
            if (!fields(*this, items.emplace_back())) return false;
        return true;
    }
    template <typename Map>
    bool map(Map& records)
    {
        uint32_t count = 0;
        if (!in_.u32(count)) return false;
        for (uint32_t i = 0; i < count; i++) {
            typename Map::key_type key{};
            typename Map::mapped_type record;
            if (!map_key(key) || !fields(*this, record)) return false;
            // In key order, as snapshot() writes them: each insert is at the end, in O(1).
            if (!records.empty() && !(records.rbegin()->first < key)) return false;
            records.emplace_hint(records.end(), std::move(key), std::move(record));
        }
        return true;
    }
    bool done() const { return in_.done(); }

private:
    bool map_key(std::string& key) { return str(key); }
    bool map_key(SessionId& key) { return in_.u64(key); }

    ByteReader in_;
    bool session_owners_ = true;  // false: a VLM1 snapshot
};

// The layout, one function per record, for both directions: `R` is the record, const when
// encoding. Fields go in declaration order; what is derived from other records is left out.
template <typename R, typename Record>
concept MaybeConst = std::same_as<std::remove_const_t<R>, Record>;

template <typename Io, MaybeConst<SessionRecord> R>
bool fields(Io& io, R& r)
{
    // Not the index sets (held_locks .. ephemeral_keys): index_records() rebuilds them.
    return io.str(r.name) && io.u32(r.ttl_ms) && io.u32(r.lock_delay_ms) &&
           io.u64(r.lease_epoch) && io.u64(r.deadline_ms) && io.u64(r.created_ms) &&
           (!io.session_owners() || io.str(r.owner));
}

template <typename Io, MaybeConst<LockHolder> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.session) && io.enumeration(r.mode) && io.u64(r.generation) &&
           io.u64(r.granted_ms);
}

template <typename Io, MaybeConst<LockWaiter> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.session) && io.enumeration(r.mode) && io.u64(r.deadline_ms) &&
           io.u64(r.since_ms);
}

template <typename Io, MaybeConst<LockRecord> R>
bool fields(Io& io, R& r)
{
    return io.sequence(r.holders) && io.sequence(r.waiters) && io.u64(r.generation) &&
           io.u64(r.delay_until_ms);
}

template <typename Io, MaybeConst<ValueRecord> R>
bool fields(Io& io, R& r)
{
    return io.str(r.value) && io.u64(r.create_revision) && io.u64(r.mod_revision) &&
           io.u64(r.version) && io.u64(r.session);
}

template <typename Io, MaybeConst<BarrierMember> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.session) && io.boolean(r.leaving) && io.u64(r.deadline_ms);
}

template <typename Io, MaybeConst<BarrierRecord> R>
bool fields(Io& io, R& r)
{
    return io.u32(r.count) && io.enumeration(r.phase) && io.sequence(r.members);
}

template <typename Io, MaybeConst<WatchEvent> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.revision) && io.enumeration(r.type) && io.str(r.key) && io.u64(r.session) &&
           io.str(r.value) && io.u64(r.prev_revision) && io.enumeration(r.mode) &&
           io.u64(r.generation) && io.enumeration(r.cause);
}

template <typename Io, MaybeConst<LockServiceState> R>
bool fields(Io& io, R& r)
{
    // Not the timers: index_records() rebuilds them.
    return io.magic(kSnapshotMagic) && io.u64(r.now_ms) && io.u64(r.last_applied_op) &&
           io.u64(r.revision) && io.u64(r.last_generation) && io.map(r.sessions) &&
           io.map(r.locks) && io.map(r.kv) && io.map(r.barriers) && io.sequence(r.history) &&
           io.u64(r.compacted_revision);
}

}  // namespace

Bytes LockMachine::snapshot() const
{
    ByteCounter size;
    SnapshotEncoder measure(size);
    fields(measure, state_);
    Bytes out;
    out.reserve(size.size());
    ByteWriter writer(out);
    SnapshotEncoder encode(writer);
    fields(encode, state_);
    return out;
}

bool LockMachine::restore(std::string_view snapshot)
{
    // Decoded and checked aside: the machine changes only once the whole snapshot has passed.
    LockServiceState restored;
    SnapshotDecoder in(snapshot);
    if (!fields(in, restored) || !in.done()) return false;
    if (index_records(restored, restored.sessions, restored.timers) != nullptr) return false;
    trim_history(restored, config_.history_events);
    if (broken_invariant(restored, config_.history_events) != nullptr) return false;
    state_ = std::move(restored);
    revision_bumped_ = false;
    pending_events_.clear();
    return true;
}

}  // namespace voltlock
