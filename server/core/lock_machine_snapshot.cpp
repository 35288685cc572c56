#include "core/lock_machine.h"

#include <concepts>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/assert.h"
#include "core/auth_codec.h"
#include "core/codec.h"
#include "core/lock_machine_rules.h"

namespace voltlock {

namespace {

constexpr uint32_t kSnapshotMagic = 0x334D4C56;  // "VLM3" in little-endian byte order
// Snapshots from before the auth tables (core/auth_state.h): read with empty tables.
constexpr uint32_t kSnapshotMagicWithoutAuth = 0x324D4C56;  // "VLM2"
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

// The snapshot's formats on top of codec.h's: a magic number saying which layout follows,
// strings and counts of u32, and maps of records in strictly increasing key order. One wrapper
// for every codec sink and source, so that writing, measuring, hashing (state_digest) and
// reading run the one layout below.
template <typename Io>
class SnapshotIo : public Io {
public:
    using Io::Io;

    bool magic(uint32_t current)
    {
        uint32_t v = current;
        if (!this->u32(v)) return false;
        session_owners_ = v != kSnapshotMagicWithoutOwners;
        auth_tables_ = v == current;
        return v == current || v == kSnapshotMagicWithoutAuth || v == kSnapshotMagicWithoutOwners;
    }
    bool session_owners() const { return session_owners_; }
    // The auth tables are the snapshot's last section (none before VLM3: left empty).
    template <typename State>
    bool auth(State& state)
    {
        return !auth_tables_ || fields(*this, state);
    }
    template <typename S>
    bool text(S& s)
    {
        return this->template str<uint32_t>(s);
    }
    // A count is not trusted for an allocation: items are added as they decode, so a count
    // beyond the bytes fails at the first item missing.
    template <typename Sequence>
    bool list(Sequence& items)
    {
        uint32_t count = checked_count(items.size());
        if (!this->u32(count)) return false;
        if constexpr (kReading) {
            for (uint32_t i = 0; i < count; i++)
                if (!fields(*this, items.emplace_back())) return false;
        } else {
            for (const auto& item : items)
                if (!fields(*this, item)) return false;
        }
        return true;
    }
    template <typename Map>
    bool map(Map& records)
    {
        uint32_t count = checked_count(records.size());
        if (!this->u32(count)) return false;
        if constexpr (kReading) {
            for (uint32_t i = 0; i < count; i++) {
                typename Map::key_type key{};
                typename Map::mapped_type record;
                if (!map_key(key) || !fields(*this, record)) return false;
                // In key order, as snapshot() writes them: each insert is at the end, in O(1).
                if (!records.empty() && !(records.rbegin()->first < key)) return false;
                records.emplace_hint(records.end(), std::move(key), std::move(record));
            }
        } else {
            for (const auto& [key, record] : records)
                if (!map_key(key) || !fields(*this, record)) return false;
        }
        return true;
    }

private:
    static constexpr bool kReading = std::same_as<Io, codec::Reader>;

    static uint32_t checked_count(size_t n)
    {
        VL_ASSERT(n <= UINT32_MAX, "snapshot counts fit a u32");
        return static_cast<uint32_t>(n);
    }
    template <typename Key>
    bool map_key(Key& key)
    {
        if constexpr (std::same_as<std::remove_const_t<Key>, std::string>)
            return text(key);
        else
            return this->u64(key);
    }

    bool session_owners_ = true;  // false: a VLM1 snapshot
    bool auth_tables_ = true;     // false: VLM1 or VLM2
};

}  // namespace

// The layout, one function per record: `R` is the record, const when writing, measuring or
// hashing. Fields go in declaration order; what is derived from other records is left out.
using codec::MaybeConst;

template <typename Io, MaybeConst<SessionRecord> R>
bool fields(Io& io, R& r)
{
    // Not the index sets (held_locks .. ephemeral_keys): index_records() rebuilds them.
    return io.text(r.name) && io.u32(r.ttl_ms) && io.u32(r.lock_delay_ms) &&
           io.u64(r.lease_epoch) && io.u64(r.deadline_ms) && io.u64(r.created_ms) &&
           (!io.session_owners() || io.text(r.owner));
}

template <typename Io, MaybeConst<LockHolder> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.session) && io.enumeration(r.mode, known) && io.u64(r.generation) &&
           io.u64(r.granted_ms);
}

template <typename Io, MaybeConst<LockWaiter> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.session) && io.enumeration(r.mode, known) && io.u64(r.deadline_ms) &&
           io.u64(r.since_ms);
}

template <typename Io, MaybeConst<LockRecord> R>
bool fields(Io& io, R& r)
{
    return io.list(r.holders) && io.list(r.waiters) && io.u64(r.generation) &&
           io.u64(r.delay_until_ms);
}

template <typename Io, MaybeConst<ValueRecord> R>
bool fields(Io& io, R& r)
{
    return io.text(r.value) && io.u64(r.create_revision) && io.u64(r.mod_revision) &&
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
    return io.u32(r.count) && io.enumeration(r.phase, known) && io.list(r.members);
}

template <typename Io, MaybeConst<WatchEvent> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.revision) && io.enumeration(r.type, known) && io.text(r.key) &&
           io.u64(r.session) && io.text(r.value) && io.u64(r.prev_revision) &&
           io.enumeration(r.mode, known) && io.u64(r.generation) &&
           io.enumeration(r.cause, known);
}

template <typename Io, MaybeConst<LockServiceState> R>
bool fields(Io& io, R& r)
{
    // Not the timers: index_records() rebuilds them.
    return io.magic(kSnapshotMagic) && io.u64(r.now_ms) && io.u64(r.last_applied_op) &&
           io.u64(r.revision) && io.u64(r.last_generation) && io.map(r.sessions) &&
           io.map(r.locks) && io.map(r.kv) && io.map(r.barriers) && io.list(r.history) &&
           io.u64(r.compacted_revision) && io.auth(r.auth);
}

Bytes LockMachine::snapshot() const
{
    SnapshotIo<codec::Counter> size;
    fields(size, state_);
    Bytes out(size.size(), '\0');
    SnapshotIo<codec::Writer> writer(out);
    const bool written = fields(writer, state_);
    VL_ASSERT(written, "a snapshot fits the bytes measured for it");
    return out;
}

// The snapshot's fields through a hashing sink: the timers and the sessions' index sets are
// derived from them (check_invariants), so they are not hashed again.
uint64_t LockMachine::state_digest() const
{
    SnapshotIo<codec::Hasher> hasher;
    fields(hasher, state_);
    return hasher.digest();
}

bool LockMachine::restore(std::string_view snapshot)
{
    // Decoded and checked aside: the machine changes only once the whole snapshot has passed.
    LockServiceState restored;
    SnapshotIo<codec::Reader> in(snapshot);
    if (!fields(in, restored) || !in.done()) return false;
    if (broken_auth_state(restored.auth) != nullptr) return false;
    if (index_records(restored, restored.sessions, restored.timers) != nullptr) return false;
    restored.kv_bytes = kv_bytes_of(restored);
    trim_history(restored, config_.history_events);
    if (broken_invariant(restored, config_.history_events) != nullptr) return false;
    state_ = std::move(restored);
    revision_bumped_ = false;
    pending_events_.clear();
    return true;
}

}  // namespace voltlock
