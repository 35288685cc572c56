#pragma once

// The lock machine's rules that more than one of its files apply: lock_machine.cpp (the op
// handlers), lock_machine_check.cpp (the digest and the invariants) and lock_machine_snapshot.cpp.

#include <cstddef>
#include <map>
#include <set>

#include "core/lock_machine.h"

namespace voltlock {

// Exclusive holders are alone; shared holders share with shared ones only.
bool compatible(const LockRecord& lock, LockMode mode);

// Drops whole revisions, oldest first, while the history holds more than `history_events` events;
// the newest revision stays whole (LockMachineConfig::history_events).
void trim_history(LockServiceState& s, size_t history_events);

// Rebuilds what lock_machine.h calls derived data from the lock, key and barrier records: the
// timers, and the index sets of the sessions in `sessions`, whose ids say which sessions exist and
// whose index sets start empty. Reads no other part of `records`, so `sessions` and `timers` may
// be its own (restore fills them in place). Returns why the records cannot be indexed (a record
// names a session that does not exist, or one session twice in a lock or barrier), or nullptr.
const char* index_records(const LockServiceState& records,
                          std::map<SessionId, SessionRecord>& sessions,
                          std::set<TimerRecord>& timers);

// The keys' and values' sizes in `s.kv`, summed: LockServiceState::kv_bytes rebuilt.
uint64_t kv_bytes_of(const LockServiceState& s);

// The first rule of the records that `s` breaks, or nullptr; the derived data is index_records'
// concern. check_invariants() aborts on one, restore() rejects the snapshot.
const char* broken_invariant(const LockServiceState& s, size_t history_events);

}  // namespace voltlock
