// The lock and configuration service as a replicated state machine (DESIGN.md §4, issue 5):
// Chubby's sessions, locks and sequencers, a small key/value namespace with revisions and
// compare-and-set, barriers, and watch events. docs/lock-service.md is the user's description;
// this header is the contract with the VR core below and the HTTP layer above.
//
// Determinism. Every replica applies the same entries in the same order and must end in the same
// state with the same results. The only time the machine knows is the entry's timestamp (the
// leader's clock when it assigned the op): `now` is the largest timestamp applied so far, so a
// new leader whose clock is behind cannot move time backwards. State lives in ordered
// containers; nothing iterates a hash map; session ids and lock generations are counters.
//
// Revisions. One global counter. An apply that changes anything bumps it once for what the op
// itself changed (a failed op changes nothing and bumps nothing); the deadlines the apply
// processes first (below) take a revision of their own. Every revision has at least one watch
// event, so the history is the complete, gap-free record of changes since the oldest retained
// revision.
//
// Time-driven changes. Lock waits, barrier waits and lock-delays end at deadlines. At the start
// of every apply, before the op itself, the machine processes every deadline up to `now` in
// deadline order (a lock-delay ending at t before a wait timing out at t): so a waiter is granted
// a lock whose delay ended before its own deadline even if no op arrived in between. The leader
// proposes ExpireWaiters when next_deadline_ms() has passed and nothing else is being proposed,
// so that waits end on time in an idle cell. Session expiry is not decided here: the leader
// tracks leases in memory and proposes ExpireSession.
//
// Events. Every change produces events (WatchEvent), kept in a history bounded by
// LockMachineConfig::history_events. The shell drains the events of each apply (drain_events) to
// wake HTTP requests waiting on a lock or barrier and to feed watch streams; watch() serves a
// watch resumed from any retained revision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/auth_state.h"
#include "core/lock_ops.h"
#include "core/state_machine.h"
#include "core/types.h"

namespace voltlock {

// ---- Events ------------------------------------------------------------------------------------

enum class EventType : uint8_t {
    put = 1,              // kv: key created or changed (value, prev_revision = old mod_revision)
    erase = 2,            // kv: key deleted (prev_revision = its last mod_revision)
    session_create = 10,  // key "", session
    session_keepalive = 11,
    session_close = 12,
    session_expire = 13,   // cause: session_expired or session_evicted
    lock_wait = 20,        // session queued (or renewed its wait); mode
    lock_grant = 21,       // session holds the lock; mode, generation
    lock_release = 22,     // session no longer holds it; mode, generation, cause
    lock_timeout = 23,     // session's wait ended at its deadline
    lock_cancel = 24,      // session's wait withdrawn (Release) or its session ended (cause)
    barrier_enter = 30,    // session entered and waits for the count
    barrier_release = 31,  // the count was reached: one event per member
    barrier_leave = 32,    // session started leaving and waits for the others
    barrier_done = 33,     // every member has left: one event per member; the barrier is gone
    barrier_timeout = 34,  // session's enter or leave wait ended at its deadline
    barrier_cancel = 35,   // session withdrew before the count, or its session ended (cause)
};
const char* event_type_name(EventType type);

// What an event is about; a watch selects any combination (bits).
enum class EventSpace : uint8_t { kv = 1, session = 2, lock = 4, barrier = 8 };
EventSpace event_space(EventType type);
inline constexpr uint8_t kAllEventSpaces = 1 | 2 | 4 | 8;

// What caused a change that the op did not name itself.
enum class Cause : uint8_t {
    request = 0,          // the op did it
    session_closed = 1,   // CloseSession
    session_expired = 2,  // ExpireSession, lease_expired
    session_evicted = 3,  // ExpireSession, evicted
};
const char* cause_name(Cause cause);

struct WatchEvent {
    Revision revision = 0;
    EventType type = EventType::put;
    std::string key;            // kv key, lock or barrier name; "" for session events
    SessionId session = 0;      // the session concerned (put: the key's owner, 0 = persistent)
    Bytes value;                // put
    Revision prev_revision = 0; // put, erase: the key's mod_revision before (0: it was created)
    LockMode mode = LockMode::exclusive;  // lock events
    uint64_t generation = 0;              // lock_grant, lock_release
    Cause cause = Cause::request;
    bool operator==(const WatchEvent&) const = default;
};

struct WatchFilter {
    std::string key;     // exact key, or with prefix every key starting with it
    bool prefix = false;
    uint8_t spaces = static_cast<uint8_t>(EventSpace::kv);  // EventSpace bits
};

// Events from a start revision. If `compacted`, the start revision is older than the history and
// nothing else is set but `oldest_revision` and `revision`.
struct WatchBatch {
    bool compacted = false;
    Revision oldest_revision = 0;  // the oldest revision a watch may start from
    std::vector<WatchEvent> events;
    Revision next_revision = 0;    // resume from here: no matching event before it is missing
    Revision revision = 0;         // the current revision
};

// ---- State: plain structs, serialized whole by snapshots (issue 6) -----------------------------

struct SessionRecord {
    std::string name;
    std::string owner;  // the identity that opened it ("" with auth off); only it or an admin may
                        // keep it alive, close it or release its locks (api/access.h)
    uint32_t ttl_ms = 0;
    uint32_t lock_delay_ms = 0;
    Revision lease_epoch = 0;  // revision of the create or of the last KeepAlive
    uint64_t deadline_ms = 0;  // timestamp of lease_epoch + ttl (information; the leader decides)
    uint64_t created_ms = 0;
    // Indexes of what the session is part of, kept equal to the records (check_invariants).
    std::set<std::string> held_locks;
    std::set<std::string> waiting_locks;
    std::set<std::string> barriers;
    std::set<std::string> ephemeral_keys;
    bool operator==(const SessionRecord&) const = default;
};

struct LockHolder {
    SessionId session = 0;
    LockMode mode = LockMode::exclusive;
    uint64_t generation = 0;
    uint64_t granted_ms = 0;
    bool operator==(const LockHolder&) const = default;
};

struct LockWaiter {
    SessionId session = 0;
    LockMode mode = LockMode::exclusive;
    uint64_t deadline_ms = 0;
    uint64_t since_ms = 0;
    bool operator==(const LockWaiter&) const = default;
};

// A lock exists while it has a holder, a waiter or a lock-delay in force.
struct LockRecord {
    std::vector<LockHolder> holders;   // one exclusive, or any number shared; in grant order
    std::deque<LockWaiter> waiters;    // FIFO
    uint64_t generation = 0;           // of the latest grant
    uint64_t delay_until_ms = 0;       // lock-delay: no grant before; 0 = none
    bool operator==(const LockRecord&) const = default;
};

struct ValueRecord {
    Bytes value;
    Revision create_revision = 0;
    Revision mod_revision = 0;
    uint64_t version = 0;   // writes since create
    SessionId session = 0;  // non-zero: ephemeral, deleted when the session ends
    bool operator==(const ValueRecord&) const = default;
};

enum class BarrierPhase : uint8_t {
    entering = 1,  // fewer than `count` have entered; every member waits
    entered = 2,   // released; members leave, and the last to leave releases those waiting
};

struct BarrierMember {
    SessionId session = 0;
    bool leaving = false;
    uint64_t deadline_ms = 0;  // while waiting: entering phase, or leaving; else 0
    bool operator==(const BarrierMember&) const = default;
};

struct BarrierRecord {
    uint32_t count = 0;
    BarrierPhase phase = BarrierPhase::entering;
    std::vector<BarrierMember> members;  // in order of entry
    bool operator==(const BarrierRecord&) const = default;
};

enum class TimerKind : uint8_t { lock_delay_end = 1, lock_wait = 2, barrier_wait = 3 };

// A deadline, indexed so that the next one is found at once. Derived from the records above
// (rebuilt from them by a snapshot load); check_invariants keeps the two equal.
struct TimerRecord {
    uint64_t at_ms = 0;
    TimerKind kind = TimerKind::lock_delay_end;
    std::string name;
    SessionId session = 0;  // 0 for lock_delay_end
    bool operator==(const TimerRecord&) const = default;
    bool operator<(const TimerRecord& other) const;
};

struct LockServiceState {
    uint64_t now_ms = 0;          // the largest entry timestamp applied
    Op last_applied_op = 0;
    Revision revision = 0;
    uint64_t last_generation = 0; // lock generations come from one counter: never reused
    std::map<SessionId, SessionRecord> sessions;
    std::map<std::string, LockRecord> locks;
    std::map<std::string, ValueRecord> kv;
    std::map<std::string, BarrierRecord> barriers;
    std::set<TimerRecord> timers;
    uint64_t kv_bytes = 0;           // derived: the keys' and values' sizes, summed
    std::deque<WatchEvent> history;  // revisions compacted_revision + 1 .. revision, in order
    Revision compacted_revision = 0; // events up to here were dropped
    AuthState auth;                  // users, roles, tokens (core/auth_state.h)
    bool operator==(const LockServiceState&) const = default;
};

// ---- The machine -------------------------------------------------------------------------------

struct LockMachineConfig {
    // History bound, in events. Whole revisions are dropped, oldest first, while more are kept;
    // the newest revision is always kept whole, even if larger. Each replica may choose its own:
    // the history serves watches, never op results.
    size_t history_events = 10'000;
    // Run check_invariants() after every apply (tests and simulation; O(state) per apply).
    bool check_invariants_every_apply = false;
};

// What the leader needs about a session after a leader change to grant it a fresh lease
// (DESIGN.md §4: every session gets a grace period before anything expires).
struct SessionLease {
    SessionId session = 0;
    uint32_t ttl_ms = 0;
    Revision lease_epoch = 0;  // put it in the ExpireSession the leader proposes
    bool operator==(const SessionLease&) const = default;
};

class LockMachine final : public StateMachine {
public:
    explicit LockMachine(LockMachineConfig config = {});

    // StateMachine: decodes the payload (lock_ops.h), applies it, returns the encoded result.
    // A payload that does not decode changes nothing beyond the deadline sweep and returns
    // OpError{malformed}.
    Bytes apply(Op op, const Entry& entry) override;
    // The same without the codec: for tests, the simulator, and a shell that has the op at hand.
    OpResult apply_op(Op op, uint64_t timestamp_ms, const LockOp& lock_op);

    // Events produced since the last call, in order: the shell calls this after every step of the
    // replica and wakes waiters and watchers from them. They are also in the history.
    std::vector<WatchEvent> drain_events();

    // ---- Queries: local state, as of the last apply (a stale read on a follower) -------------
    const LockServiceState& state() const { return state_; }
    Revision revision() const { return state_.revision; }
    uint64_t time_ms() const override { return state_.now_ms; }
    Op last_applied_op() const { return state_.last_applied_op; }
    // A Get against local state: what the Get op would return if applied now.
    OpResult get(const Get& query) const;
    bool sequencer_valid(const Sequencer& sequencer) const;
    std::vector<SessionLease> session_leases() const;  // by session id
    // Events matching `filter` with revision >= start_revision (0 counts as 1), at most about
    // `limit` (0 = all): a revision is never split, so a batch may exceed the limit by the rest of
    // its last revision. Resume from next_revision.
    WatchBatch watch(Revision start_revision, const WatchFilter& filter, size_t limit = 0) const;
    // watch() without copies: `visit` sees each event of the batch where it lies in the history
    // (the reference stays valid until the next apply), and the batch returned has no events.
    WatchBatch visit_watched(Revision start_revision, const WatchFilter& filter, size_t limit,
                             const std::function<void(const WatchEvent&)>& visit) const;
    Revision oldest_revision() const { return state_.compacted_revision + 1; }
    // The earliest pending deadline (lock wait, barrier wait, lock-delay end), if any: the leader
    // proposes ExpireWaiters once its clock passes it.
    std::optional<uint64_t> next_deadline_ms() const;
    // About the memory the records take: the keys' and values' bytes, plus a fixed cost per key,
    // session, lock and barrier record (measured, docs/api.md "Limits"). The API refuses what
    // would add records once this reaches quota_bytes.
    uint64_t stored_bytes() const;

    // A hash over the whole state (history included); equal on replicas that applied the same ops.
    // The snapshot's layout run through codec.h's hashing sink: what a snapshot leaves out is
    // derived from what it holds.
    uint64_t state_digest() const override;

    // Snapshots (StateMachine). The layout: u32 magic "VLM3", then the fields of
    // LockServiceState in declaration order, nested records likewise; integers little-endian
    // (codec.h), enums and bools one byte, strings and sequences a u32 count first, maps in
    // key order. Derived data (the timers, the sessions' index sets, kv_bytes) is left out and
    // rebuilt by restore(), which accepts only states that pass check_invariants(): every record
    // names a live session, at most once per lock or barrier, and so on. The history is trimmed
    // to this machine's history_events (configuration is no part of a snapshot). A restored
    // machine has no pending events: those of the state it replaced were never drained and no
    // longer apply.
    Bytes snapshot() const override;
    bool restore(std::string_view snapshot) override;
    // Revisions (and so session ids) and lock generations jump by kLostWritesBound; the watch
    // history is compacted to the new revision, so that a watch from before the jump is told
    // "compacted" rather than miss the lost writes' events.
    void skip_past_lost_writes() override;
    void reset() override;
    // More than any number of revisions or generations a cell hands out between two snapshots:
    // each op takes at most two revisions, and a snapshot comes every 2^30 ops at most
    // (config snapshot_every_ops) or every snapshot_every_seconds.
    static constexpr uint64_t kLostWritesBound = uint64_t{1} << 32;

    // Aborts (VL_ASSERT) if the state is inconsistent. O(state).
    void check_invariants() const;

private:
    void begin_apply(Op op, uint64_t timestamp_ms);
    void end_apply();

    // Deadlines (see the header comment).
    void sweep();
    void on_timer(const TimerRecord& timer);
    void add_timer(TimerRecord timer);
    void remove_timer(const TimerRecord& timer);

    // Revisions and events.
    void begin_change_group();
    Revision write_revision();
    void emit(WatchEvent event);

    // One handler per op.
    OpResult on_create_session(const CreateSession& o);
    OpResult on_keep_alive(const KeepAlive& o);
    OpResult on_close_session(const CloseSession& o);
    OpResult on_expire_session(const ExpireSession& o);
    OpResult on_acquire(const Acquire& o);
    OpResult on_release(const Release& o);
    OpResult on_withdraw_wait(const WithdrawWait& o);
    // Takes `id` out of the lock's line (lock_cancel); false if it was not in it.
    bool withdraw_waiter(const std::string& name, LockRecord& lock, SessionRecord& session,
                         SessionId id);
    OpResult on_check_sequencer(const CheckSequencer& o);
    OpResult on_put(const Put& o);
    OpResult on_delete(const Delete& o);
    OpResult on_barrier_enter(const BarrierEnter& o);
    OpResult on_barrier_leave(const BarrierLeave& o);
    OpResult on_withdraw_enter(const WithdrawEnter& o);

    OpError error(OpCode op, ErrorCode code, uint64_t detail = 0) const;
    CloseSessionResult end_session(SessionId session, Cause cause);

    // Locks.
    Sequencer grant(const std::string& name, LockRecord& lock, SessionId session, LockMode mode);
    uint32_t serve_queue(const std::string& name, LockRecord& lock);
    void start_lock_delay(const std::string& name, LockRecord& lock, uint64_t until_ms);
    void erase_lock_if_idle(const std::string& name);

    // Barriers.
    void release_barrier(const std::string& name, BarrierRecord& barrier);
    void finish_leave(const std::string& name);
    void remove_barrier_member(const std::string& name, SessionId session, Cause cause);
    // Takes a member out before the count is reached (BarrierLeave, WithdrawEnter).
    void withdraw_enter(const std::string& name, SessionRecord& session, SessionId id);

    // KV.
    void delete_key(const std::string& key, Cause cause);

    const LockMachineConfig config_;
    LockServiceState state_;
    bool revision_bumped_ = false;  // in the current change group
    std::vector<WatchEvent> pending_events_;
};

}  // namespace voltlock
