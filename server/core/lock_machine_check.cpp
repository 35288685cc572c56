#include "core/lock_machine.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "core/assert.h"
#include "core/lock_machine_rules.h"
#include "voltlock/wire.h"

namespace voltlock {

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

uint64_t kv_bytes_of(const LockServiceState& s)
{
    uint64_t bytes = 0;
    for (const auto& [key, r] : s.kv) bytes += key.size() + r.value.size();
    return bytes;
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
    VL_ASSERT(kv_bytes_of(state_) == state_.kv_bytes, "kv_bytes matches the keys and values");
    const char* broken = broken_invariant(state_, config_.history_events);
    VL_ASSERT(broken == nullptr, broken);
}

}  // namespace voltlock
