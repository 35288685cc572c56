#include "core/lock_machine.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "core/assert.h"
#include "core/lock_machine_rules.h"
#include "voltlock/wire.h"

namespace voltlock {

namespace {

// Hashes the state word by word with the wire checksum's mixing step.
class Hasher {
public:
    void u64(uint64_t v) { state_ = vl_checksum_mix(state_, v); }
    void str(std::string_view s)
    {
        u64(s.size());
        u64(vl_checksum(reinterpret_cast<const uint8_t*>(s.data()),
                        static_cast<uint32_t>(s.size())));
    }
    uint64_t digest() const { return vl_checksum_final(state_, 0); }

private:
    uint64_t state_ = VL_CHECKSUM_SEED;
};

}  // namespace

uint64_t LockMachine::state_digest() const
{
    Hasher h;
    const LockServiceState& s = state_;
    h.u64(s.now_ms);
    h.u64(s.last_applied_op);
    h.u64(s.revision);
    h.u64(s.last_generation);
    h.u64(s.compacted_revision);
    const auto names = [&](const std::set<std::string>& set) {
        h.u64(set.size());
        for (const std::string& n : set) h.str(n);
    };
    h.u64(s.sessions.size());
    for (const auto& [id, r] : s.sessions) {
        h.u64(id);
        h.str(r.name);
        h.str(r.owner);
        h.u64(r.ttl_ms);
        h.u64(r.lock_delay_ms);
        h.u64(r.lease_epoch);
        h.u64(r.deadline_ms);
        h.u64(r.created_ms);
        names(r.held_locks);
        names(r.waiting_locks);
        names(r.barriers);
        names(r.ephemeral_keys);
    }
    h.u64(s.locks.size());
    for (const auto& [name, r] : s.locks) {
        h.str(name);
        h.u64(r.generation);
        h.u64(r.delay_until_ms);
        h.u64(r.holders.size());
        for (const LockHolder& x : r.holders) {
            h.u64(x.session);
            h.u64(static_cast<uint64_t>(x.mode));
            h.u64(x.generation);
            h.u64(x.granted_ms);
        }
        h.u64(r.waiters.size());
        for (const LockWaiter& x : r.waiters) {
            h.u64(x.session);
            h.u64(static_cast<uint64_t>(x.mode));
            h.u64(x.deadline_ms);
            h.u64(x.since_ms);
        }
    }
    h.u64(s.kv.size());
    for (const auto& [key, r] : s.kv) {
        h.str(key);
        h.str(r.value);
        h.u64(r.create_revision);
        h.u64(r.mod_revision);
        h.u64(r.version);
        h.u64(r.session);
    }
    h.u64(s.barriers.size());
    for (const auto& [name, r] : s.barriers) {
        h.str(name);
        h.u64(r.count);
        h.u64(static_cast<uint64_t>(r.phase));
        h.u64(r.members.size());
        for (const BarrierMember& m : r.members) {
            h.u64(m.session);
            h.u64(m.leaving ? 1 : 0);
            h.u64(m.deadline_ms);
        }
    }
    h.u64(s.history.size());
    for (const WatchEvent& e : s.history) {
        h.u64(e.revision);
        h.u64(static_cast<uint64_t>(e.type));
        h.str(e.key);
        h.u64(e.session);
        h.str(e.value);
        h.u64(e.prev_revision);
        h.u64(static_cast<uint64_t>(e.mode));
        h.u64(e.generation);
        h.u64(static_cast<uint64_t>(e.cause));
    }
    // The timers are derived from the records above (check_invariants), so not hashed again.
    return h.digest();
}

const char* index_records(const LockServiceState& records,
                          std::map<SessionId, SessionRecord>& sessions,
                          std::set<TimerRecord>& timers)
{
    const auto index_of = [&](SessionId id) -> SessionRecord* {
        const auto it = sessions.find(id);
        return it == sessions.end() ? nullptr : &it->second;
    };
    for (const auto& [name, lock] : records.locks) {
        for (const LockHolder& h : lock.holders) {
            SessionRecord* index = index_of(h.session);
            if (index == nullptr) return "lock holders are live sessions";
            if (!index->held_locks.insert(name).second) return "a session holds a lock once";
        }
        for (const LockWaiter& w : lock.waiters) {
            SessionRecord* index = index_of(w.session);
            if (index == nullptr) return "lock waiters are live sessions";
            if (index->held_locks.contains(name) || !index->waiting_locks.insert(name).second)
                return "a session holds or waits, once";
            timers.insert({w.deadline_ms, TimerKind::lock_wait, name, w.session});
        }
        if (lock.delay_until_ms != 0)
            timers.insert({lock.delay_until_ms, TimerKind::lock_delay_end, name, 0});
    }
    for (const auto& [key, r] : records.kv) {
        if (r.session == 0) continue;
        SessionRecord* index = index_of(r.session);
        if (index == nullptr) return "ephemeral keys belong to live sessions";
        // Keys come in order, so each goes at the end of the set.
        index->ephemeral_keys.insert(index->ephemeral_keys.end(), key);
    }
    for (const auto& [name, b] : records.barriers) {
        for (const BarrierMember& m : b.members) {
            SessionRecord* index = index_of(m.session);
            if (index == nullptr) return "barrier members are live sessions";
            if (!index->barriers.insert(name).second) return "a session enters a barrier once";
            if (m.deadline_ms != 0)
                timers.insert({m.deadline_ms, TimerKind::barrier_wait, name, m.session});
        }
    }
    return nullptr;
}

const char* broken_invariant(const LockServiceState& s, size_t history_events)
{
    for (const auto& [id, r] : s.sessions) {
        if (id < 1 || id > s.revision) return "session ids are revisions";
        if (r.lease_epoch < id || r.lease_epoch > s.revision) return "lease epochs are revisions";
    }
    for (const auto& [name, lock] : s.locks) {
        if (lock.holders.empty() && lock.waiters.empty() && lock.delay_until_ms == 0)
            return "idle locks are erased";
        if (lock.generation > s.last_generation) return "generations come from the counter";
        for (const LockHolder& h : lock.holders) {
            if (h.mode != LockMode::shared && lock.holders.size() != 1)
                return "an exclusive holder is alone";
            if (h.generation < 1 || h.generation > lock.generation) return "holder generation";
        }
        for (const LockWaiter& w : lock.waiters)
            if (w.deadline_ms <= s.now_ms) return "expired waiters were swept";
        if (lock.delay_until_ms != 0) {
            if (lock.delay_until_ms <= s.now_ms) return "ended lock-delays were swept";
        } else if (!lock.waiters.empty() && compatible(lock, lock.waiters.front().mode)) {
            return "the queue head is blocked";  // else a wakeup was lost
        }
    }
    for (const auto& [key, r] : s.kv) {
        if (validate_name(key) != Violation::none) return "keys are valid names";
        if (r.create_revision < 1 || r.create_revision > r.mod_revision ||
            r.mod_revision > s.revision)
            return "key revisions";
        if (r.version < 1) return "a key has been written";
    }
    for (const auto& [name, b] : s.barriers) {
        if (b.members.empty()) return "empty barriers are erased";
        if (b.count < 1 || b.count > kMaxBarrierCount) return "barrier count";
        for (const BarrierMember& m : b.members) {
            const bool waiting = b.phase == BarrierPhase::entering || m.leaving;
            if (waiting != (m.deadline_ms != 0)) return "exactly the waiting have deadlines";
            if (b.phase == BarrierPhase::entering && m.leaving) return "leaving is after entering";
            if (m.deadline_ms != 0 && m.deadline_ms <= s.now_ms)
                return "expired barrier waits were swept";
        }
        if (b.phase == BarrierPhase::entering && b.members.size() >= b.count)
            return "a full barrier is released";
        if (b.phase == BarrierPhase::entered &&
            std::all_of(b.members.begin(), b.members.end(),
                        [](const BarrierMember& m) { return m.leaving; }))
            return "a barrier everyone left is gone";
    }

    // The history: every revision since the compacted one, in order, none empty.
    const auto& history = s.history;
    if (history.empty()) {
        // A new machine, or one that skipped past lost writes (skip_past_lost_writes).
        if (s.compacted_revision != s.revision) return "history reaches the revision";
        return nullptr;
    }
    if (history.front().revision != s.compacted_revision + 1) return "history start";
    if (history.back().revision != s.revision) return "history end";
    for (size_t i = 1; i < history.size(); i++) {
        const Revision prev = history[i - 1].revision;
        const Revision cur = history[i].revision;
        if (cur != prev && cur != prev + 1) return "no revision without events";
    }
    if (history.size() > history_events && history.front().revision != history.back().revision)
        return "history bound";
    return nullptr;
}

void LockMachine::check_invariants() const
{
    std::map<SessionId, SessionRecord> rebuilt;  // the sessions' indexes, rebuilt from the records
    for (const auto& session : state_.sessions) rebuilt[session.first];
    std::set<TimerRecord> timers;
    const char* unindexable = index_records(state_, rebuilt, timers);
    VL_ASSERT(unindexable == nullptr, unindexable);
    for (const auto& [id, r] : state_.sessions) {
        const SessionRecord& index = rebuilt.at(id);
        VL_ASSERT(r.held_locks == index.held_locks, "held_locks index");
        VL_ASSERT(r.waiting_locks == index.waiting_locks, "waiting_locks index");
        VL_ASSERT(r.barriers == index.barriers, "barriers index");
        VL_ASSERT(r.ephemeral_keys == index.ephemeral_keys, "ephemeral_keys index");
    }
    VL_ASSERT(timers == state_.timers, "the timer index matches the records");
    const char* broken = broken_invariant(state_, config_.history_events);
    VL_ASSERT(broken == nullptr, broken);
}

}  // namespace voltlock
