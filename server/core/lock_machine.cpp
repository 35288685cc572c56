#include "core/lock_machine.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "core/assert.h"
#include "core/lock_machine_rules.h"
#include "core/overloaded.h"

namespace voltlock {

namespace {

bool starts_with(std::string_view text, std::string_view prefix)
{
    return text.substr(0, prefix.size()) == prefix;
}

template <typename Container>
auto find_session(Container& records, SessionId session)
{
    return std::find_if(records.begin(), records.end(),
                        [&](const auto& r) { return r.session == session; });
}

Cause cause_of(ExpireReason reason)
{
    return reason == ExpireReason::evicted ? Cause::session_evicted : Cause::session_expired;
}

bool is_expiry(Cause cause)
{
    return cause == Cause::session_expired || cause == Cause::session_evicted;
}

}  // namespace

bool compatible(const LockRecord& lock, LockMode mode)
{
    if (lock.holders.empty()) return true;
    if (mode == LockMode::exclusive) return false;
    return lock.holders.front().mode == LockMode::shared;  // all alike (check_invariants)
}

void trim_history(LockServiceState& s, size_t history_events)
{
    auto& history = s.history;
    while (history.size() > history_events &&
           history.front().revision != history.back().revision) {
        const Revision oldest = history.front().revision;
        while (history.front().revision == oldest) history.pop_front();
        s.compacted_revision = oldest;
    }
}

// ---- Names -------------------------------------------------------------------------------------

const char* event_type_name(EventType type)
{
    switch (type) {
    case EventType::put: return "put";
    case EventType::erase: return "delete";
    case EventType::session_create: return "session_create";
    case EventType::session_keepalive: return "session_keepalive";
    case EventType::session_close: return "session_close";
    case EventType::session_expire: return "session_expire";
    case EventType::lock_wait: return "lock_wait";
    case EventType::lock_grant: return "lock_grant";
    case EventType::lock_release: return "lock_release";
    case EventType::lock_timeout: return "lock_timeout";
    case EventType::lock_cancel: return "lock_cancel";
    case EventType::barrier_enter: return "barrier_enter";
    case EventType::barrier_release: return "barrier_release";
    case EventType::barrier_leave: return "barrier_leave";
    case EventType::barrier_done: return "barrier_done";
    case EventType::barrier_timeout: return "barrier_timeout";
    case EventType::barrier_cancel: return "barrier_cancel";
    }
    return "unknown";
}

EventSpace event_space(EventType type)
{
    const auto code = static_cast<uint8_t>(type);
    if (code < 10) return EventSpace::kv;
    if (code < 20) return EventSpace::session;
    if (code < 30) return EventSpace::lock;
    return EventSpace::barrier;
}

const char* cause_name(Cause cause)
{
    switch (cause) {
    case Cause::request: return "request";
    case Cause::session_closed: return "session_closed";
    case Cause::session_expired: return "session_expired";
    case Cause::session_evicted: return "session_evicted";
    }
    return "unknown";
}

bool TimerRecord::operator<(const TimerRecord& other) const
{
    return std::tie(at_ms, kind, name, session) <
           std::tie(other.at_ms, other.kind, other.name, other.session);
}

// ---- Apply -------------------------------------------------------------------------------------

LockMachine::LockMachine(LockMachineConfig config) : config_(config)
{
    VL_ASSERT(config_.history_events >= 1, "the history keeps at least the newest revision");
}

Bytes LockMachine::apply(Op op, const Entry& entry)
{
    auto decoded = decode_op(entry.payload);
    if (decoded.ok()) return encode_result(apply_op(op, entry.timestamp_ms, decoded.value()));

    // Time still passes: deadlines up to this entry's timestamp are processed, as for any op.
    begin_apply(op, entry.timestamp_ms);
    end_apply();
    const uint8_t code = entry.payload.empty() ? 0 : static_cast<uint8_t>(entry.payload[0]);
    const bool known = code >= static_cast<uint8_t>(OpCode::create_session) &&
                       code <= static_cast<uint8_t>(OpCode::withdraw_enter);
    return encode_result(OpError{.op = known ? static_cast<OpCode>(code) : OpCode::none,
                                 .code = ErrorCode::malformed,
                                 .revision = state_.revision,
                                 .detail = static_cast<uint64_t>(decoded.error())});
}

OpResult LockMachine::apply_op(Op op, uint64_t timestamp_ms, const LockOp& lock_op)
{
    begin_apply(op, timestamp_ms);
    OpResult result;
    if (const auto invalid = validate(lock_op)) {
        result = error(op_code(lock_op), ErrorCode::invalid_argument,
                       static_cast<uint64_t>(invalid->violation));
    } else {
        result = std::visit(
            Overloaded{
                [&](const CreateSession& o) { return on_create_session(o); },
                [&](const KeepAlive& o) { return on_keep_alive(o); },
                [&](const CloseSession& o) { return on_close_session(o); },
                [&](const ExpireSession& o) { return on_expire_session(o); },
                [&](const Acquire& o) { return on_acquire(o); },
                [&](const Release& o) { return on_release(o); },
                [&](const WithdrawWait& o) { return on_withdraw_wait(o); },
                [&](const CheckSequencer& o) { return on_check_sequencer(o); },
                [&](const Put& o) { return on_put(o); },
                [&](const Delete& o) { return on_delete(o); },
                [&](const Get& o) { return get(o); },
                [&](const BarrierEnter& o) { return on_barrier_enter(o); },
                [&](const BarrierLeave& o) { return on_barrier_leave(o); },
                [&](const WithdrawEnter& o) { return on_withdraw_enter(o); },
                [&](const ExpireWaiters&) { return OpResult{ExpireWaitersResult{}}; },
                [&](const AuthOp& o) -> OpResult {
                    const AuthOutcome done = apply_auth_op(state_.auth, o, state_.now_ms);
                    if (done.code != ErrorCode::ok)
                        return error(OpCode::auth, done.code, static_cast<uint64_t>(done.table));
                    return AuthResult{.auth_revision = state_.auth.revision};
                },
            },
            lock_op);
    }
    // Every result carries the revision after the op: its own for a write, the current one else.
    std::visit([&](auto& r) { r.revision = state_.revision; }, result);
    VL_ASSERT(!std::holds_alternative<OpError>(result) || !revision_bumped_,
              "an op that fails changes nothing");
    end_apply();
    return result;
}

// Time advances to the entry's timestamp (never backwards: a new leader's clock may be behind),
// and the deadlines it passed are processed in their own change group, before the op's.
void LockMachine::begin_apply(Op op, uint64_t timestamp_ms)
{
    VL_ASSERT(op > state_.last_applied_op, "ops are applied in order, once");
    state_.last_applied_op = op;
    state_.now_ms = std::max(state_.now_ms, timestamp_ms);
    sweep();
    begin_change_group();
}

void LockMachine::end_apply()
{
    trim_history(state_, config_.history_events);
    if (config_.check_invariants_every_apply) check_invariants();
}

std::vector<WatchEvent> LockMachine::drain_events()
{
    return std::exchange(pending_events_, {});
}

OpError LockMachine::error(OpCode op, ErrorCode code, uint64_t detail) const
{
    return OpError{.op = op, .code = code, .revision = state_.revision, .detail = detail};
}

// ---- Revisions and events ----------------------------------------------------------------------

void LockMachine::begin_change_group() { revision_bumped_ = false; }

Revision LockMachine::write_revision()
{
    if (!revision_bumped_) {
        state_.revision += 1;
        revision_bumped_ = true;
    }
    return state_.revision;
}

void LockMachine::emit(WatchEvent event)
{
    event.revision = write_revision();
    state_.history.push_back(event);
    pending_events_.push_back(std::move(event));
}

// ---- Deadlines ---------------------------------------------------------------------------------

void LockMachine::sweep()
{
    begin_change_group();
    while (!state_.timers.empty() && state_.timers.begin()->at_ms <= state_.now_ms) {
        const TimerRecord timer = *state_.timers.begin();
        state_.timers.erase(state_.timers.begin());
        on_timer(timer);
    }
}

void LockMachine::on_timer(const TimerRecord& timer)
{
    switch (timer.kind) {
    case TimerKind::lock_delay_end: {
        LockRecord& lock = state_.locks.at(timer.name);
        VL_ASSERT(lock.delay_until_ms == timer.at_ms, "one timer per lock-delay");
        lock.delay_until_ms = 0;
        serve_queue(timer.name, lock);
        erase_lock_if_idle(timer.name);
        return;
    }
    case TimerKind::lock_wait: {
        LockRecord& lock = state_.locks.at(timer.name);
        const auto waiter = find_session(lock.waiters, timer.session);
        VL_ASSERT(waiter != lock.waiters.end() && waiter->deadline_ms == timer.at_ms,
                  "one timer per waiter");
        const LockMode mode = waiter->mode;
        lock.waiters.erase(waiter);
        state_.sessions.at(timer.session).waiting_locks.erase(timer.name);
        emit(WatchEvent{.type = EventType::lock_timeout, .key = timer.name,
                        .session = timer.session, .mode = mode});
        // The waiter may have been the head that kept compatible ones behind it waiting.
        serve_queue(timer.name, lock);
        erase_lock_if_idle(timer.name);
        return;
    }
    case TimerKind::barrier_wait: {
        const auto it = state_.barriers.find(timer.name);
        VL_ASSERT(it != state_.barriers.end(), "a barrier timer names a barrier");
        BarrierRecord& barrier = it->second;
        const auto member = find_session(barrier.members, timer.session);
        VL_ASSERT(member != barrier.members.end() && member->deadline_ms == timer.at_ms,
                  "one timer per waiting member");
        if (barrier.phase == BarrierPhase::entering) {
            // Giving up before the count is reached undoes the enter.
            barrier.members.erase(member);
            state_.sessions.at(timer.session).barriers.erase(timer.name);
        } else {
            // Giving up the leave wait undoes the leave: the member is in the barrier again.
            member->leaving = false;
            member->deadline_ms = 0;
        }
        emit(WatchEvent{.type = EventType::barrier_timeout, .key = timer.name,
                        .session = timer.session});
        if (barrier.members.empty()) state_.barriers.erase(it);
        return;
    }
    }
    VL_ASSERT(false, "timer kind");
}

void LockMachine::add_timer(TimerRecord timer)
{
    VL_ASSERT(timer.at_ms > state_.now_ms, "a deadline lies in the future");
    const bool inserted = state_.timers.insert(std::move(timer)).second;
    VL_ASSERT(inserted, "one timer per deadline");
}

void LockMachine::remove_timer(const TimerRecord& timer)
{
    const size_t erased = state_.timers.erase(timer);
    VL_ASSERT(erased == 1, "the timer of a pending deadline exists");
}

std::optional<uint64_t> LockMachine::next_deadline_ms() const
{
    if (state_.timers.empty()) return std::nullopt;
    return state_.timers.begin()->at_ms;
}

uint64_t LockMachine::stored_bytes() const
{
    // What one record costs a replica beyond its keys' and values' bytes (map nodes, the
    // record, its indexes, allocator overhead): a follower's resident memory per record added,
    // less the log's 166 bytes per op, over 100,000 of each (2026-11-27). A lock's waiter queue
    // (a std::deque) allocates its first block even while empty. Barriers: not measured, taken
    // as a session's.
    constexpr uint64_t kKeyRecordBytes = 230;
    constexpr uint64_t kSessionRecordBytes = 310;
    constexpr uint64_t kLockRecordBytes = 920;
    constexpr uint64_t kBarrierRecordBytes = 310;
    return state_.kv_bytes + state_.kv.size() * kKeyRecordBytes +
           state_.sessions.size() * kSessionRecordBytes + state_.locks.size() * kLockRecordBytes +
           state_.barriers.size() * kBarrierRecordBytes;
}

// ---- Sessions ----------------------------------------------------------------------------------

OpResult LockMachine::on_create_session(const CreateSession& o)
{
    // The id is the revision of the create: unique, and the same on every replica.
    const SessionId id = write_revision();
    VL_ASSERT(!state_.sessions.contains(id), "revisions are never reused");
    state_.sessions.emplace(id, SessionRecord{.name = o.name,
                                              .owner = o.owner,
                                              .ttl_ms = o.ttl_ms,
                                              .lock_delay_ms = o.lock_delay_ms,
                                              .lease_epoch = id,
                                              .deadline_ms = state_.now_ms + o.ttl_ms,
                                              .created_ms = state_.now_ms});
    emit(WatchEvent{.type = EventType::session_create, .session = id});
    return CreateSessionResult{.session = id,
                               .lease_epoch = id,
                               .deadline_ms = state_.now_ms + o.ttl_ms};
}

OpResult LockMachine::on_keep_alive(const KeepAlive& o)
{
    const auto it = state_.sessions.find(o.session);
    if (it == state_.sessions.end()) return error(OpCode::keep_alive, ErrorCode::unknown_session);
    SessionRecord& session = it->second;
    session.lease_epoch = write_revision();
    session.deadline_ms = state_.now_ms + session.ttl_ms;
    emit(WatchEvent{.type = EventType::session_keepalive, .session = o.session});
    return KeepAliveResult{.lease_epoch = session.lease_epoch, .deadline_ms = session.deadline_ms};
}

OpResult LockMachine::on_close_session(const CloseSession& o)
{
    if (!state_.sessions.contains(o.session))
        return error(OpCode::close_session, ErrorCode::unknown_session);
    return end_session(o.session, Cause::session_closed);
}

OpResult LockMachine::on_expire_session(const ExpireSession& o)
{
    const auto it = state_.sessions.find(o.session);
    if (it == state_.sessions.end())
        return error(OpCode::expire_session, ErrorCode::unknown_session);
    // Stale: the session renewed its lease after the leader decided to expire it.
    if (it->second.lease_epoch != o.lease_epoch) return ExpireSessionResult{.ended = false};
    const CloseSessionResult ended = end_session(o.session, cause_of(o.reason));
    return ExpireSessionResult{.ended = true,
                               .locks_released = ended.locks_released,
                               .keys_deleted = ended.keys_deleted};
}

// Chubby: a session that ends releases its locks (under lock-delay if it expired), leaves every
// wait queue and barrier, and takes its ephemeral keys with it.
CloseSessionResult LockMachine::end_session(SessionId id, Cause cause)
{
    const auto it = state_.sessions.find(id);
    VL_ASSERT(it != state_.sessions.end(), "ending a session that exists");
    const SessionRecord session = std::move(it->second);
    state_.sessions.erase(it);
    emit(WatchEvent{.type = cause == Cause::session_closed ? EventType::session_close
                                                           : EventType::session_expire,
                    .session = id,
                    .cause = cause});

    for (const std::string& name : session.held_locks) {
        LockRecord& lock = state_.locks.at(name);
        const auto holder = find_session(lock.holders, id);
        VL_ASSERT(holder != lock.holders.end(), "held_locks lists locks the session holds");
        const LockHolder released = *holder;
        lock.holders.erase(holder);
        emit(WatchEvent{.type = EventType::lock_release, .key = name, .session = id,
                        .mode = released.mode, .generation = released.generation,
                        .cause = cause});
        // Lock-delay (Chubby §2.4): a holder that vanished may still have requests in flight.
        if (is_expiry(cause) && session.lock_delay_ms > 0)
            start_lock_delay(name, lock, state_.now_ms + session.lock_delay_ms);
    }
    for (const std::string& name : session.waiting_locks) {
        LockRecord& lock = state_.locks.at(name);
        const auto waiter = find_session(lock.waiters, id);
        VL_ASSERT(waiter != lock.waiters.end(), "waiting_locks lists locks the session waits for");
        remove_timer({waiter->deadline_ms, TimerKind::lock_wait, name, id});
        const LockMode mode = waiter->mode;
        lock.waiters.erase(waiter);
        emit(WatchEvent{.type = EventType::lock_cancel, .key = name, .session = id, .mode = mode,
                        .cause = cause});
    }
    for (const std::string& name : session.barriers) remove_barrier_member(name, id, cause);
    for (const std::string& key : session.ephemeral_keys) delete_key(key, cause);

    // Only now that the session is gone from every queue: grant what its departure freed.
    std::set<std::string> affected = session.held_locks;
    affected.insert(session.waiting_locks.begin(), session.waiting_locks.end());
    for (const std::string& name : affected) {
        serve_queue(name, state_.locks.at(name));
        erase_lock_if_idle(name);
    }
    return CloseSessionResult{.ended = true,
                              .locks_released = static_cast<uint32_t>(session.held_locks.size()),
                              .keys_deleted = static_cast<uint32_t>(session.ephemeral_keys.size())};
}

std::vector<SessionLease> LockMachine::session_leases() const
{
    std::vector<SessionLease> leases;
    leases.reserve(state_.sessions.size());
    for (const auto& [id, s] : state_.sessions)
        leases.push_back(SessionLease{.session = id, .ttl_ms = s.ttl_ms,
                                      .lease_epoch = s.lease_epoch});
    return leases;
}

// ---- Locks -------------------------------------------------------------------------------------

OpResult LockMachine::on_acquire(const Acquire& o)
{
    constexpr OpCode code = OpCode::acquire;
    const auto session = state_.sessions.find(o.session);
    if (session == state_.sessions.end()) return error(code, ErrorCode::unknown_session);

    auto it = state_.locks.find(o.lock);
    if (it != state_.locks.end()) {
        LockRecord& lock = it->second;
        // Held already: the same grant again (a retry must not fail), or a conflict.
        if (const auto holder = find_session(lock.holders, o.session);
            holder != lock.holders.end()) {
            if (holder->mode != o.mode)
                return error(code, ErrorCode::mode_conflict, static_cast<uint64_t>(holder->mode));
            return AcquireResult{.status = AcquireStatus::granted,
                                 .sequencer = Sequencer{o.lock, holder->mode, holder->generation,
                                                        o.session}};
        }
        // Waiting already (a retry after a failover): keep the place, take the new deadline.
        if (const auto waiter = find_session(lock.waiters, o.session);
            waiter != lock.waiters.end()) {
            if (waiter->mode != o.mode)
                return error(code, ErrorCode::mode_conflict, static_cast<uint64_t>(waiter->mode));
            if (o.wait_ms == 0) return error(code, ErrorCode::busy, lock.delay_until_ms);
            remove_timer({waiter->deadline_ms, TimerKind::lock_wait, o.lock, o.session});
            waiter->deadline_ms = state_.now_ms + o.wait_ms;
            add_timer({waiter->deadline_ms, TimerKind::lock_wait, o.lock, o.session});
            emit(WatchEvent{.type = EventType::lock_wait, .key = o.lock, .session = o.session,
                            .mode = o.mode});
            return AcquireResult{
                .status = AcquireStatus::waiting,
                .deadline_ms = waiter->deadline_ms,
                .position = static_cast<uint32_t>(waiter - lock.waiters.begin() + 1)};
        }
    }

    // Granted now only if nothing stands before: no lock-delay, nobody queued (no overtaking),
    // and the holders are compatible.
    const bool free_now = it == state_.locks.end() ||
                          (it->second.delay_until_ms == 0 && it->second.waiters.empty() &&
                           compatible(it->second, o.mode));
    if (free_now) {
        if (it == state_.locks.end()) it = state_.locks.emplace(o.lock, LockRecord{}).first;
        return AcquireResult{.status = AcquireStatus::granted,
                             .sequencer = grant(o.lock, it->second, o.session, o.mode)};
    }
    LockRecord& lock = it->second;
    if (o.wait_ms == 0) return error(code, ErrorCode::busy, lock.delay_until_ms);
    const uint64_t deadline = state_.now_ms + o.wait_ms;
    lock.waiters.push_back(LockWaiter{.session = o.session, .mode = o.mode,
                                      .deadline_ms = deadline, .since_ms = state_.now_ms});
    add_timer({deadline, TimerKind::lock_wait, o.lock, o.session});
    session->second.waiting_locks.insert(o.lock);
    emit(WatchEvent{.type = EventType::lock_wait, .key = o.lock, .session = o.session,
                    .mode = o.mode});
    return AcquireResult{.status = AcquireStatus::waiting,
                         .deadline_ms = deadline,
                         .position = static_cast<uint32_t>(lock.waiters.size())};
}

OpResult LockMachine::on_release(const Release& o)
{
    constexpr OpCode code = OpCode::release;
    const auto session = state_.sessions.find(o.session);
    if (session == state_.sessions.end()) return error(code, ErrorCode::unknown_session);
    const auto it = state_.locks.find(o.lock);
    if (it == state_.locks.end()) return error(code, ErrorCode::not_held);
    LockRecord& lock = it->second;

    ReleaseResult result;
    if (const auto holder = find_session(lock.holders, o.session); holder != lock.holders.end()) {
        const LockHolder released = *holder;
        lock.holders.erase(holder);
        session->second.held_locks.erase(o.lock);
        emit(WatchEvent{.type = EventType::lock_release, .key = o.lock, .session = o.session,
                        .mode = released.mode, .generation = released.generation});
        result.released = true;
    } else if (withdraw_waiter(o.lock, lock, session->second, o.session)) {
        result.wait_withdrawn = true;
    } else {
        return error(code, ErrorCode::not_held);
    }
    result.granted = serve_queue(o.lock, lock);
    erase_lock_if_idle(o.lock);
    return result;
}

OpResult LockMachine::on_withdraw_wait(const WithdrawWait& o)
{
    const auto session = state_.sessions.find(o.session);
    if (session == state_.sessions.end())
        return error(OpCode::withdraw_wait, ErrorCode::unknown_session);
    WithdrawWaitResult result;
    const auto it = state_.locks.find(o.lock);
    if (it == state_.locks.end()) return result;
    const auto waiter = find_session(it->second.waiters, o.session);
    // Granted meanwhile (a grant stays), not waiting any more, or waiting again (another
    // deadline): nothing to withdraw.
    if (waiter == it->second.waiters.end() || waiter->deadline_ms != o.deadline_ms)
        return result;
    withdraw_waiter(o.lock, it->second, session->second, o.session);
    result.withdrawn = true;
    result.granted = serve_queue(o.lock, it->second);
    erase_lock_if_idle(o.lock);
    return result;
}

bool LockMachine::withdraw_waiter(const std::string& name, LockRecord& lock,
                                  SessionRecord& session, SessionId id)
{
    const auto waiter = find_session(lock.waiters, id);
    if (waiter == lock.waiters.end()) return false;
    remove_timer({waiter->deadline_ms, TimerKind::lock_wait, name, id});
    const LockMode mode = waiter->mode;
    lock.waiters.erase(waiter);
    session.waiting_locks.erase(name);
    emit(WatchEvent{.type = EventType::lock_cancel, .key = name, .session = id, .mode = mode});
    return true;
}

Sequencer LockMachine::grant(const std::string& name, LockRecord& lock, SessionId session,
                             LockMode mode)
{
    VL_ASSERT(compatible(lock, mode) && lock.delay_until_ms == 0, "grant only what is free");
    const uint64_t generation = ++state_.last_generation;
    lock.holders.push_back(LockHolder{.session = session, .mode = mode, .generation = generation,
                                      .granted_ms = state_.now_ms});
    lock.generation = generation;
    state_.sessions.at(session).held_locks.insert(name);
    emit(WatchEvent{.type = EventType::lock_grant, .key = name, .session = session, .mode = mode,
                    .generation = generation});
    return Sequencer{name, mode, generation, session};
}

// Grants to the head of the queue while it is compatible: one exclusive waiter, or a run of
// shared ones. A shared waiter behind an exclusive one waits, even if it could share (FIFO).
uint32_t LockMachine::serve_queue(const std::string& name, LockRecord& lock)
{
    if (lock.delay_until_ms != 0) return 0;
    uint32_t granted = 0;
    while (!lock.waiters.empty() && compatible(lock, lock.waiters.front().mode)) {
        const LockWaiter waiter = lock.waiters.front();
        lock.waiters.pop_front();
        remove_timer({waiter.deadline_ms, TimerKind::lock_wait, name, waiter.session});
        state_.sessions.at(waiter.session).waiting_locks.erase(name);
        grant(name, lock, waiter.session, waiter.mode);
        granted += 1;
    }
    return granted;
}

void LockMachine::start_lock_delay(const std::string& name, LockRecord& lock, uint64_t until_ms)
{
    if (until_ms <= lock.delay_until_ms) return;  // a longer delay is already in force
    if (lock.delay_until_ms != 0)
        remove_timer({lock.delay_until_ms, TimerKind::lock_delay_end, name, 0});
    lock.delay_until_ms = until_ms;
    add_timer({until_ms, TimerKind::lock_delay_end, name, 0});
}

void LockMachine::erase_lock_if_idle(const std::string& name)
{
    const auto it = state_.locks.find(name);
    if (it == state_.locks.end()) return;
    const LockRecord& lock = it->second;
    // The generation need not survive: generations come from one machine-wide counter.
    if (lock.holders.empty() && lock.waiters.empty() && lock.delay_until_ms == 0)
        state_.locks.erase(it);
}

bool LockMachine::sequencer_valid(const Sequencer& s) const
{
    const auto it = state_.locks.find(s.lock);
    if (it == state_.locks.end()) return false;
    const auto& holders = it->second.holders;
    const auto holder = find_session(holders, s.session);
    return holder != holders.end() && holder->mode == s.mode && holder->generation == s.generation;
}

OpResult LockMachine::on_check_sequencer(const CheckSequencer& o)
{
    return CheckSequencerResult{.valid = sequencer_valid(o.sequencer)};
}

// ---- Key/value ---------------------------------------------------------------------------------

OpResult LockMachine::on_put(const Put& o)
{
    constexpr OpCode code = OpCode::put;
    // Conditions first, in this order; none changes anything when it fails.
    if (o.session != 0 && !state_.sessions.contains(o.session))
        return error(code, ErrorCode::unknown_session);
    if (o.sequencer && !sequencer_valid(*o.sequencer)) {
        const auto lock = state_.locks.find(o.sequencer->lock);
        return error(code, ErrorCode::sequencer_invalid,
                     lock == state_.locks.end() ? 0 : lock->second.generation);
    }
    auto it = state_.kv.find(o.key);
    const Revision prev_mod = it == state_.kv.end() ? 0 : it->second.mod_revision;
    if (o.prev_revision && *o.prev_revision != prev_mod)
        return error(code, ErrorCode::cas_mismatch, prev_mod);

    const Revision revision = write_revision();
    if (it == state_.kv.end()) {
        it = state_.kv.emplace(o.key, ValueRecord{.create_revision = revision}).first;
        state_.kv_bytes += o.key.size();
    }
    ValueRecord& record = it->second;
    // etcd's rule for leases: the latest put decides whether the key is ephemeral, and to whom.
    if (record.session != 0 && record.session != o.session)
        state_.sessions.at(record.session).ephemeral_keys.erase(o.key);
    if (o.session != 0) state_.sessions.at(o.session).ephemeral_keys.insert(o.key);
    state_.kv_bytes += o.value.size() - record.value.size();  // modulo 2^64: never below 0
    record.value = o.value;
    record.mod_revision = revision;
    record.version += 1;
    record.session = o.session;
    emit(WatchEvent{.type = EventType::put, .key = o.key, .session = o.session, .value = o.value,
                    .prev_revision = prev_mod});
    return PutResult{.prev_mod_revision = prev_mod,
                     .create_revision = record.create_revision,
                     .version = record.version};
}

OpResult LockMachine::on_delete(const Delete& o)
{
    constexpr OpCode code = OpCode::erase;
    if (o.sequencer && !sequencer_valid(*o.sequencer)) {
        const auto lock = state_.locks.find(o.sequencer->lock);
        return error(code, ErrorCode::sequencer_invalid,
                     lock == state_.locks.end() ? 0 : lock->second.generation);
    }
    std::vector<std::string> keys;
    if (o.prefix) {
        for (auto it = state_.kv.lower_bound(o.key);
             it != state_.kv.end() && starts_with(it->first, o.key); ++it)
            keys.push_back(it->first);
    } else {
        const auto it = state_.kv.find(o.key);
        const Revision mod = it == state_.kv.end() ? 0 : it->second.mod_revision;
        if (o.prev_revision && *o.prev_revision != mod)
            return error(code, ErrorCode::cas_mismatch, mod);
        if (it != state_.kv.end()) keys.push_back(o.key);
    }
    for (const std::string& key : keys) delete_key(key, Cause::request);
    return DeleteResult{.deleted = static_cast<uint32_t>(keys.size())};
}

void LockMachine::delete_key(const std::string& key, Cause cause)
{
    const auto it = state_.kv.find(key);
    VL_ASSERT(it != state_.kv.end(), "deleting a key that exists");
    const ValueRecord record = std::move(it->second);
    state_.kv.erase(it);
    state_.kv_bytes -= key.size() + record.value.size();
    if (record.session != 0) {
        // During end_session the owner is already gone; its index goes with it.
        if (const auto owner = state_.sessions.find(record.session);
            owner != state_.sessions.end())
            owner->second.ephemeral_keys.erase(key);
    }
    emit(WatchEvent{.type = EventType::erase, .key = key, .session = record.session,
                    .prev_revision = record.mod_revision, .cause = cause});
}

OpResult LockMachine::get(const Get& o) const
{
    // Within max_result_bytes, so that the result fits the Reply datagram; a listing that does
    // not fit says `more`, and the client asks again after the last key it got.
    GetResult result{.revision = state_.revision};
    size_t size = kGetResultHeaderBytes;
    const auto add = [&](const std::string& key, const ValueRecord& r) {
        const size_t bytes = key_value_bytes(key.size(), r.value.size());
        if (o.max_result_bytes != 0 && size + bytes > o.max_result_bytes) return false;
        size += bytes;
        result.kvs.push_back(KeyValue{.key = key, .value = r.value,
                                      .create_revision = r.create_revision,
                                      .mod_revision = r.mod_revision, .version = r.version,
                                      .session = r.session});
        return true;
    };
    const auto too_large = [&](const std::string& key, const ValueRecord& r) {
        return error(OpCode::get, ErrorCode::too_large,
                     get_result_bytes(key.size(), r.value.size()));
    };

    if (!o.prefix) {
        const auto it = state_.kv.find(o.key);
        if (it != state_.kv.end() && !add(it->first, it->second))
            return too_large(it->first, it->second);
        return result;
    }
    auto it = o.after.empty() || o.after < o.key ? state_.kv.lower_bound(o.key)
                                                 : state_.kv.upper_bound(o.after);
    for (; it != state_.kv.end() && starts_with(it->first, o.key); ++it) {
        const bool under_limit = o.limit == 0 || result.kvs.size() < o.limit;
        if (!under_limit || !add(it->first, it->second)) {
            if (result.kvs.empty()) return too_large(it->first, it->second);
            result.more = true;
            break;
        }
    }
    return result;
}

// ---- Barriers ----------------------------------------------------------------------------------

OpResult LockMachine::on_barrier_enter(const BarrierEnter& o)
{
    constexpr OpCode code = OpCode::barrier_enter;
    const auto session = state_.sessions.find(o.session);
    if (session == state_.sessions.end()) return error(code, ErrorCode::unknown_session);

    auto it = state_.barriers.find(o.barrier);
    if (it != state_.barriers.end()) {
        BarrierRecord& barrier = it->second;
        if (barrier.count != o.count) return error(code, ErrorCode::count_mismatch, barrier.count);
        const auto member = find_session(barrier.members, o.session);
        if (barrier.phase == BarrierPhase::entered) {
            // Released already: members may ask again; others wait until everyone has left.
            if (member == barrier.members.end()) return error(code, ErrorCode::barrier_in_use);
            return BarrierEnterResult{.status = BarrierStatus::passed};
        }
        if (member != barrier.members.end()) {
            // Waiting already (a retry): keep the place, take the new deadline.
            if (o.wait_ms == 0) return error(code, ErrorCode::busy);
            remove_timer({member->deadline_ms, TimerKind::barrier_wait, o.barrier, o.session});
            member->deadline_ms = state_.now_ms + o.wait_ms;
            add_timer({member->deadline_ms, TimerKind::barrier_wait, o.barrier, o.session});
            emit(WatchEvent{.type = EventType::barrier_enter, .key = o.barrier,
                            .session = o.session});
            return BarrierEnterResult{.status = BarrierStatus::waiting,
                                      .deadline_ms = member->deadline_ms};
        }
    }

    const size_t entered = it == state_.barriers.end() ? 0 : it->second.members.size();
    const bool completes = entered + 1 == o.count;
    if (!completes && o.wait_ms == 0) return error(code, ErrorCode::busy);
    if (it == state_.barriers.end())
        it = state_.barriers.emplace(o.barrier, BarrierRecord{.count = o.count}).first;
    BarrierRecord& barrier = it->second;
    session->second.barriers.insert(o.barrier);
    if (completes) {
        barrier.members.push_back(BarrierMember{.session = o.session});
        release_barrier(o.barrier, barrier);
        return BarrierEnterResult{.status = BarrierStatus::passed};
    }
    const uint64_t deadline = state_.now_ms + o.wait_ms;
    barrier.members.push_back(BarrierMember{.session = o.session, .deadline_ms = deadline});
    add_timer({deadline, TimerKind::barrier_wait, o.barrier, o.session});
    emit(WatchEvent{.type = EventType::barrier_enter, .key = o.barrier, .session = o.session});
    return BarrierEnterResult{.status = BarrierStatus::waiting, .deadline_ms = deadline};
}

OpResult LockMachine::on_barrier_leave(const BarrierLeave& o)
{
    constexpr OpCode code = OpCode::barrier_leave;
    const auto session = state_.sessions.find(o.session);
    if (session == state_.sessions.end()) return error(code, ErrorCode::unknown_session);
    const auto it = state_.barriers.find(o.barrier);
    if (it == state_.barriers.end()) return error(code, ErrorCode::not_member);
    BarrierRecord& barrier = it->second;
    const auto member = find_session(barrier.members, o.session);
    if (member == barrier.members.end()) return error(code, ErrorCode::not_member);

    if (barrier.phase == BarrierPhase::entering) {
        // Leaving before the count is reached withdraws the enter.
        withdraw_enter(o.barrier, session->second, o.session);
        return BarrierLeaveResult{.status = BarrierStatus::passed};
    }
    if (member->leaving) {
        if (o.wait_ms == 0) return error(code, ErrorCode::busy);
        remove_timer({member->deadline_ms, TimerKind::barrier_wait, o.barrier, o.session});
        member->deadline_ms = state_.now_ms + o.wait_ms;
        add_timer({member->deadline_ms, TimerKind::barrier_wait, o.barrier, o.session});
        emit(WatchEvent{.type = EventType::barrier_leave, .key = o.barrier, .session = o.session});
        return BarrierLeaveResult{.status = BarrierStatus::waiting,
                                  .deadline_ms = member->deadline_ms};
    }
    const bool last = std::all_of(barrier.members.begin(), barrier.members.end(),
                                  [&](const BarrierMember& m) {
                                      return m.session == o.session || m.leaving;
                                  });
    if (last) {
        member->leaving = true;
        finish_leave(o.barrier);
        return BarrierLeaveResult{.status = BarrierStatus::passed};
    }
    if (o.wait_ms == 0) return error(code, ErrorCode::busy);
    member->leaving = true;
    member->deadline_ms = state_.now_ms + o.wait_ms;
    add_timer({member->deadline_ms, TimerKind::barrier_wait, o.barrier, o.session});
    emit(WatchEvent{.type = EventType::barrier_leave, .key = o.barrier, .session = o.session});
    return BarrierLeaveResult{.status = BarrierStatus::waiting, .deadline_ms = member->deadline_ms};
}

OpResult LockMachine::on_withdraw_enter(const WithdrawEnter& o)
{
    const auto session = state_.sessions.find(o.session);
    if (session == state_.sessions.end())
        return error(OpCode::withdraw_enter, ErrorCode::unknown_session);
    WithdrawEnterResult result;
    const auto it = state_.barriers.find(o.barrier);
    if (it == state_.barriers.end() || it->second.phase != BarrierPhase::entering) return result;
    const auto member = find_session(it->second.members, o.session);
    // Not a member any more, or waiting again (another deadline): nothing to withdraw.
    if (member == it->second.members.end() || member->deadline_ms != o.deadline_ms) return result;
    withdraw_enter(o.barrier, session->second, o.session);
    result.withdrawn = true;
    return result;
}

void LockMachine::withdraw_enter(const std::string& name, SessionRecord& session, SessionId id)
{
    session.barriers.erase(name);
    remove_barrier_member(name, id, Cause::request);
}

// The count is reached: every member passes the enter phase.
void LockMachine::release_barrier(const std::string& name, BarrierRecord& barrier)
{
    barrier.phase = BarrierPhase::entered;
    for (BarrierMember& m : barrier.members) {
        if (m.deadline_ms != 0)
            remove_timer({m.deadline_ms, TimerKind::barrier_wait, name, m.session});
        m.deadline_ms = 0;
        emit(WatchEvent{.type = EventType::barrier_release, .key = name, .session = m.session});
    }
}

// Every member has left: those waiting pass, and the barrier is gone (ready for a new round).
void LockMachine::finish_leave(const std::string& name)
{
    const auto it = state_.barriers.find(name);
    VL_ASSERT(it != state_.barriers.end(), "finishing a barrier that exists");
    for (const BarrierMember& m : it->second.members) {
        VL_ASSERT(m.leaving, "the leave phase ends when everyone leaves");
        if (m.deadline_ms != 0)
            remove_timer({m.deadline_ms, TimerKind::barrier_wait, name, m.session});
        if (const auto s = state_.sessions.find(m.session); s != state_.sessions.end())
            s->second.barriers.erase(name);
        emit(WatchEvent{.type = EventType::barrier_done, .key = name, .session = m.session});
    }
    state_.barriers.erase(it);
}

// Takes a member out (withdrawal or end of its session; the caller updates the session's index).
void LockMachine::remove_barrier_member(const std::string& name, SessionId session, Cause cause)
{
    const auto it = state_.barriers.find(name);
    VL_ASSERT(it != state_.barriers.end(), "a member's barrier exists");
    BarrierRecord& barrier = it->second;
    const auto member = find_session(barrier.members, session);
    VL_ASSERT(member != barrier.members.end(), "removing a member");
    if (member->deadline_ms != 0)
        remove_timer({member->deadline_ms, TimerKind::barrier_wait, name, session});
    barrier.members.erase(member);
    emit(WatchEvent{.type = EventType::barrier_cancel, .key = name, .session = session,
                    .cause = cause});
    if (barrier.members.empty()) {
        state_.barriers.erase(it);
    } else if (barrier.phase == BarrierPhase::entered &&
               std::all_of(barrier.members.begin(), barrier.members.end(),
                           [](const BarrierMember& m) { return m.leaving; })) {
        // The one that did not leave is gone: the others have all left.
        finish_leave(name);
    }
}

// ---- Watches -----------------------------------------------------------------------------------

WatchBatch LockMachine::watch(Revision start_revision, const WatchFilter& filter,
                              size_t limit) const
{
    std::vector<WatchEvent> events;
    WatchBatch batch = visit_watched(start_revision, filter, limit,
                                     [&events](const WatchEvent& e) { events.push_back(e); });
    batch.events = std::move(events);
    return batch;
}

WatchBatch LockMachine::visit_watched(Revision start_revision, const WatchFilter& filter,
                                      size_t limit,
                                      const std::function<void(const WatchEvent&)>& visit) const
{
    WatchBatch batch{.oldest_revision = oldest_revision(), .revision = state_.revision};
    start_revision = std::max<Revision>(start_revision, 1);
    if (start_revision <= state_.compacted_revision) {
        batch.compacted = true;
        return batch;
    }
    const auto& history = state_.history;
    auto it = std::lower_bound(history.begin(), history.end(), start_revision,
                               [](const WatchEvent& e, Revision r) { return e.revision < r; });
    batch.next_revision = std::max(start_revision, state_.revision + 1);
    size_t visited = 0;
    Revision last_visited = 0;
    for (; it != history.end(); ++it) {
        const WatchEvent& e = *it;
        if ((filter.spaces & static_cast<uint8_t>(event_space(e.type))) == 0) continue;
        if (filter.prefix ? !starts_with(e.key, filter.key) : e.key != filter.key) continue;
        // Stop at a revision boundary once the limit is reached: never split a revision.
        if (limit != 0 && visited >= limit && last_visited != e.revision) {
            batch.next_revision = e.revision;
            break;
        }
        visit(e);
        visited += 1;
        last_visited = e.revision;
    }
    return batch;
}

// ---- Reset ------------------------------------------------------------------------------------

void LockMachine::reset()
{
    state_ = LockServiceState{};
    revision_bumped_ = false;
    pending_events_.clear();
}

void LockMachine::skip_past_lost_writes()
{
    state_.revision += kLostWritesBound;
    state_.last_generation += kLostWritesBound;
    state_.history.clear();
    state_.compacted_revision = state_.revision;
}

}  // namespace voltlock
