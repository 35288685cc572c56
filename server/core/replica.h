// A VR replica (Viewstamped Replication Revisited, Liskov & Cowling 2012) as a pure state
// machine: one entry point, step(input) -> effects. It does no I/O, reads no clock and draws no
// randomness; the shell (or the simulator) delivers messages and ticks and carries out effects
// in the order given.
//
// Departures from the paper, each to keep every message within one datagram (docs/replication.md
// has the reasoning):
// - DoViewChange, StartView and RecoveryResponse do not carry whole logs. A new leader fetches
//   the entries it lacks from the replica whose log the §4.2 rule selects (GetState/NewState
//   while both are in view-change status, when that replica's log is frozen); StartView carries
//   the uncommitted suffix as far as it fits; a follower or a recovering replica fetches the
//   rest from the leader by §5.2 state transfer.
// - The log changes in two ways only: in-order appends within the view, and an atomic
//   replacement of everything after a known-good op by a complete new suffix. A replica that
//   must fetch a new log keeps its old one, and its old last-normal view, until the fetch is
//   complete, so a view change meanwhile never sees a log shorter than what it acknowledged.
//   (Truncating first and fetching after loses committed ops: the simulator showed it.)
// - A Prepare carries a batch of consecutive ops; PrepareOK(v, n) acknowledges all ops up to n.
// - Log compaction (DESIGN.md §5, docs/storage.md): every so many ops or ticks the replica asks
//   the shell to write a snapshot of everything committed, and drops the log up to it once the
//   shell says it is durable. A fetch that asks for compacted ops gets a SnapshotOffer; the shell
//   fetches the snapshot over TCP and the replica installs it, then fetches the entries after it.
// - Restart from a data directory: a replica that restarts with state recovers as in §4.3 when a
//   quorum runs normally; when a quorum is restarting too (a whole-cell restart) they run a view
//   change with the state each restored, which selects the newest as §4.2 selects logs.
// - A replica with no state that may be a new cell's (StartRecovering::may_bootstrap) starts the
//   cell only once every other replica's answer to its Recovery shows that the cell committed
//   nothing; else it recovers, as one that lost its state must (docs/replication.md).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/message.h"
#include "core/state_machine.h"
#include "core/types.h"
#include "voltlock/wire.h"

namespace voltlock {

struct ReplicaConfig {
    uint32_t cluster_id = 0;
    ReplicaIndex replica = 0;
    uint8_t replica_count = 3;                        // odd, 1..VL_MAX_REPLICAS
    uint32_t max_message_bytes = VL_DEFAULT_MESSAGE_BYTES;
    uint32_t heartbeat_ticks = 5;                     // leader: Commit when otherwise silent
    uint32_t view_change_timeout_ticks = 20;          // follower: leader silent this long
    uint32_t retransmit_ticks = 4;                    // Prepare, GetState, view-change messages
    uint32_t pipeline_ops = 4096;                     // leader: at most this many ops uncommitted
    uint32_t request_queue_limit = 8192;              // leader: requests waiting for the pipeline
    bool fast_ack_allowed = false;                    // the kernel may acknowledge Prepares
    // Snapshot (and compact the log) when this many ops were committed since the last one, or
    // this many ticks passed and anything was committed; 0 turns either trigger off.
    uint64_t snapshot_every_ops = 0;
    uint64_t snapshot_every_ticks = 0;
    // Durability "sync": the log and the view are persisted (PersistLog, PersistView) before any
    // message that depends on them goes out, so that no acknowledged op is lost even when every
    // replica dies at once. Off: only snapshots are written ("snapshot" durability).
    bool persist_log = false;
    // With a data directory (implied by persist_log): the view is persisted before any message
    // of it goes out, so that a restarted replica never runs a view number again that the cell
    // ran before (a late message of that earlier view would count in it; vr_sim seed 59 x 3,
    // durability snapshot: a delayed PrepareOK committed a restart fence nobody had).
    bool persist_view = false;
    // The leader lease (docs/leases.md): the leader holds it for this long, on its own
    // monotonic clock, from the moment it sent the newest heartbeat that f followers answered.
    // voltlockd makes it the view-change timeout.
    uint64_t leader_lease_ms = 200;
    // The client table keeps the latest request of at most this many clients: past it, the one
    // whose latest request executed longest ago is forgotten, so that a client id per process
    // (SDKs, lockctl) or per request (a hostile client) cannot grow it for ever. Never one that
    // executed less than client_min_age_ms before (by the entries' timestamps): its client may
    // still retry, and a forgotten client's retry is executed again; the table grows past its
    // limit instead. Every replica executes the same entries, so every replica forgets the same
    // clients; a cell's replicas must have the same values.
    uint32_t client_table_limit = 100'000;
    uint64_t client_min_age_ms = 60'000;
};

// A replica's snapshot (WriteSnapshot, SnapshotFetched, StartRestored), decoded: the op it
// reflects, the view it was taken in, the client table, and the state machine's own bytes.
// The encoding ends in a CRC-32C of everything before it.
struct ClientTableRecord {
    ClientId client_id = 0;
    RequestNumber request_number = 0;
    std::optional<uint32_t> request_crc;  // nullopt: from a VLS1 snapshot, which had none
    Bytes result;
    // When the latest request executed (its entry's timestamp); nullopt: from a VLS1 or VLS2
    // snapshot, which did not say, and then the table never forgets the client.
    std::optional<uint64_t> executed_ms;
    bool operator==(const ClientTableRecord&) const = default;
};
struct ReplicaSnapshot {
    Op op = 0;
    View view = 0;
    View last_normal_view = 0;
    View fence_view = 0;
    // Whether executions give the client table's rows their time (Replica::clients_timed_);
    // false from a VLS2 or VLS1 snapshot.
    bool clients_timed = true;
    std::vector<ClientTableRecord> clients;
    std::string_view machine;  // into the bytes decoded
};
// nullopt: not a snapshot (wrong magic, truncated, trailing bytes, or a failed checksum).
std::optional<ReplicaSnapshot> decode_replica_snapshot(std::string_view bytes);

// How a replica starts: as a member of a brand-new cell, or after a crash that lost its state
// (§4.3), with a nonce that the shell draws and that is never reused by this replica.
struct StartFresh {};
struct StartRecovering {
    uint64_t nonce = 0;
    // The shell cannot tell whether this replica was ever in the cell: its data directory is new
    // and the operator did not say --recover. If every other replica answers that it holds
    // nothing, the cell is new and this replica starts in it (maybe_bootstrap); otherwise it
    // recovers (§4.3), as with --recover.
    bool may_bootstrap = false;
};
// After a restart with a data directory: its newest snapshot (empty: none was written, the state
// of op 0), the log persisted after it and the view persisted last (durability sync; else empty
// and zero). The replica recovers from there (see the header comment).
struct StartRestored {
    uint64_t nonce = 0;
    Bytes snapshot;
    std::vector<Entry> log;
    View view = 0;
    View last_normal_view = 0;
    // Durability snapshot: the replica stopped gracefully (Stop) and wrote everything it had
    // acknowledged: the log after the snapshot and the view are whole, as with durability sync.
    bool clean_stop = false;
};
using Start = std::variant<StartFresh, StartRecovering, StartRestored>;

// ---- Inputs ---------------------------------------------------------------------------------

// Time passes by one tick; `now_ms` is the shell's clock, used only to stamp new ops;
// `monotonic_ms` its monotonic clock (never steps; drifts at most kMaxClockDrift), which the
// leader lease is measured on (docs/leases.md).
struct Tick {
    uint64_t now_ms = 0;
    uint64_t monotonic_ms = 0;
};
// A message arrived (already decoded and checked for this cluster), with its header flags.
struct Receive {
    Message message;
    // enum vl_flag: VL_FLAG_QUORUM marks a PrepareOK the leader's kernel counted;
    // VL_FLAG_KERNEL_ACK marks a Prepare this replica's kernel acknowledged already.
    uint16_t flags = 0;
};
// The shell has delivered everything it had at hand: the leader sends its partial batch.
struct Flush {};
// After DrainKernel: the shell has delivered every Prepare the kernel acknowledged.
struct KernelDrained {};
// After WriteSnapshot: whether the snapshot of `op` is durable.
struct SnapshotWritten {
    Op op = 0;
    bool ok = false;
};
// After FetchSnapshot: the bytes of the snapshot of replica `from` (a WriteSnapshot's, checked by
// the core; taken only from the replica the fetch under way asks).
struct SnapshotFetched {
    Bytes snapshot;
    ReplicaIndex from = 0;
};
// The shell stops this replica (SIGTERM): it makes what it acknowledged durable (PersistStopped
// says it is done) and takes no input after this one.
struct Stop {};
using Input =
    std::variant<Tick, Receive, Flush, KernelDrained, SnapshotWritten, SnapshotFetched, Stop>;

// ---- Effects --------------------------------------------------------------------------------

struct Send {
    ReplicaIndex to = 0;
    Message message;
};
// To every replica except this one.
struct Broadcast {
    Message message;
};
struct SendReply {
    Reply reply;
};
// Entry `op` was committed and applied to the state machine.
struct Executed {
    Op op = 0;
    Entry entry;
    Bytes result;
};
// The kernel's mirror of this replica's state changed (DESIGN.md §3).
struct KernelStateChanged {
    vl_kernel_state state{};
};
// The kernel's fast acknowledgement is off (the KernelStateChanged just before says so): deliver
// every Prepare it acknowledged before that, in op order, then step KernelDrained. The replica
// holds back the input that made it ask until then.
struct DrainKernel {};
// Write this snapshot of every op up to `op` (state machine, client table, view) durably, serve
// it to peers that fetch it, and step SnapshotWritten when done. `before_next_effect`: it must be
// durable before the effects after it are carried out (a fetched snapshot with the log persisted
// after it); otherwise the shell may write it in the background.
// `snapshot` empty: the replica's own state, which the shell encodes (Replica::encode_snapshot)
// as the replica stands after this step, before anything steps it again. Encoding a large state
// takes long (0.7-1.4 s at 10^6 keys) and the loop must not stop that long, or the followers
// start a view change: voltlockd encodes it in a forked child, off the loop.
struct WriteSnapshot {
    Op op = 0;
    Bytes snapshot;
    bool before_next_effect = false;
};
// Durability sync: persist, in one write with the other Persist effects of this step and before
// the effects after them, that the log after op `after` is now exactly `entries`.
struct PersistLog {
    Op after = 0;
    std::vector<Entry> entries;
};
// With a data directory (ReplicaConfig::persist_view): persist the view and the last normal
// view, like PersistLog.
struct PersistView {
    View view = 0;
    View last_normal_view = 0;
};
// Fetch replica `from`'s snapshot (of op `op` or newer) and step SnapshotFetched with it. Asked
// again while the fetch is under way: one fetch is enough.
struct FetchSnapshot {
    ReplicaIndex from = 0;
    Op op = 0;
};
// The state machine jumped to a fetched snapshot of `op` rather than applying ops up to it.
struct SnapshotInstalled {
    Op op = 0;
};
// After Stop, durability snapshot, with the WriteSnapshot (before_next_effect) and the Persist
// effects before it: persist, with them, that the data directory now holds everything this
// replica acknowledged (StartRestored::clean_stop). Without it a stop left the state as a crash
// would (a replica recovering, or with a state not yet the cell's, has nothing more to promise).
struct PersistStopped {};
using Effect = std::variant<Send, Broadcast, SendReply, Executed, KernelStateChanged,
                            DrainKernel, WriteSnapshot, PersistLog, PersistView, FetchSnapshot,
                            SnapshotInstalled, PersistStopped>;
using Effects = std::vector<Effect>;

// ---- Traces ---------------------------------------------------------------------------------

// Why a handler returned without acting on its input. Every early return in a handler names
// one, so that a replica standing still can say why: the shell logs each at debug level
// (`r2 v7: on_prepare_ok op=1041 other_view`) and counts them per reason in /metrics.
enum class Ignored : uint8_t {
    stopped,            // a step after Stop: the shell is exiting
    not_draining,       // KernelDrained without a drain under way
    unknown_sender,     // a replica index outside the cell, or our own
    not_leader,         // for the leader of our view, and that is not us (or not yet)
    reserved_client,    // a request with the cell's own client id
    oversized,          // a request that could never fit one Prepare
    old_request,        // a request number below the client table's
    in_flight,          // a retry of a request already on its way through the log
    queue_full,         // request_queue_limit requests wait already
    recovering,         // §4.3: a recovering replica takes part in no view
    stale_view,         // of a view before ours
    other_view,         // of a view other than ours, where only ours counts
    not_from_leader,    // from a replica that does not lead the message's view
    own_view,           // a leader's message in the view we lead
    view_started,       // for a view change whose view has started already
    leader_heard,       // an asking StartViewChange while we lead, hear our leader, change
                        // views already, or fewer than f asked
    in_view,            // a StartView for the view we run already
    not_view_leader,    // a DoViewChange to a replica that will not lead that view
    behind_commit,      // a restored state that lacks ops we committed (issue 11, case 2)
    not_answering,      // §4.3 step 2: we may not answer a Recovery now
    other_recovery,     // a RecoveryResponse for another nonce, or after we chose a target
    awaiting_answers,   // §4.3 step 3 needs more answers, or the latest leader's
    ahead_of_cell,      // our durable state is ahead of the answers: wait for ones explaining it
    beyond_log,         // a GetState for ops we do not hold
    log_not_frozen,     // a GetState while our own fetch moves our log
    not_fetching,       // state transfer with no fetch under way, or from another replica
    reordered,          // a NewState that starts past what we have fetched
    duplicate,          // a NewState, offer or snapshot that adds nothing
    bad_snapshot,       // fetched bytes that do not decode as a snapshot
    write_failed,       // SnapshotWritten not ok: the next trigger tries again
    outdated,           // a snapshot written of a state replaced meanwhile
};
inline constexpr size_t ignored_count = static_cast<size_t>(Ignored::outdated) + 1;
const char* ignored_name(Ignored reason);

struct Trace {
    const char* event = "";  // the handler: "on_prepare_ok"
    Ignored reason = Ignored::stopped;
    View view = 0;  // the replica's view when it returned
    Op op = 0;      // the op the input was about, 0 if none
};

// Counters kept for /v1/status and tests.
struct ReplicaCounters {
    uint64_t view_changes = 0;        // views this replica entered normal status in
    uint64_t retransmissions = 0;     // Prepares, GetStates and view-change messages sent again
    uint64_t state_transfers = 0;     // GetStates sent
    uint64_t recoveries = 0;          // recoveries completed
    uint64_t requests_dropped = 0;    // requests refused: not leader, queue full, stale
    uint64_t requests_reused = 0;     // a request number sent again with another payload
    uint64_t clients_forgotten = 0;   // past client_table_limit
    uint64_t snapshots_written = 0;   // own snapshots made durable
    uint64_t snapshots_installed = 0; // fetched from a peer and installed
    uint64_t snapshots_refused = 0;   // restored or fetched bytes that were not a valid snapshot
    uint64_t cell_restarts = 0;       // whole-cell restarts this replica started or joined
    uint64_t bootstraps = 0;          // a new data directory's start into a new cell
};

class Replica {
public:
    Replica(const ReplicaConfig& config, StateMachine& machine, Start start);

    // The one entry point: consumes `input`, appends what to do to `out`.
    void step(const Input& input, Effects& out);
    // Why the last step's handlers returned without acting, if they did: read after step().
    const std::vector<Trace>& traces() const { return traces_; }

    // Read-only view for the shell, tests and the simulator.
    ReplicaIndex replica() const { return config_.replica; }
    Status status() const { return status_; }
    View view() const { return view_; }
    View last_normal_view() const { return last_normal_view_; }
    ReplicaIndex leader() const { return leader_of(view_); }
    bool is_leader() const { return status_ == Status::normal && leader() == config_.replica; }
    // Who leads, as far as this replica knows: in normal status, unless a follower stopped
    // hearing its leader (or seeing what it acknowledged committed) and asks the others to
    // change views (suspect_leader). During a view change leader() is the old view's, or the
    // next's candidate.
    std::optional<ReplicaIndex> known_leader() const
    {
        if (status_ != Status::normal || (!is_leader() && leader_suspected(tick_)))
            return std::nullopt;
        return leader();
    }
    Op op() const { return log_base_ + log_.size(); }
    Op commit() const { return commit_; }
    // Ops up to here are compacted into the newest snapshot; entry() holds the ones after it.
    Op log_base() const { return log_base_; }
    // Not yet known to be the cell's history (see state_unconfirmed_).
    bool state_unconfirmed() const { return state_unconfirmed_; }
    // Started with nothing (a new data directory, or its snapshot refused) and still
    // recovering: it holds no state, and persists no view (persist_before_sending).
    bool waits_with_nothing() const { return status_ == Status::recovering && !restored_; }
    const Entry& entry(Op op) const { return log_.at(op - log_base_ - 1); }
    const ReplicaCounters& counters() const { return counters_; }
    const ReplicaConfig& config() const { return config_; }
    // The request number of the client's latest executed request, if the client table has it.
    std::optional<RequestNumber> latest_request(ClientId client_id) const;
    size_t client_table_size() const { return client_table_.size(); }
    // Per replica, the highest op it acknowledged in this view (leader only; else zeros).
    const std::vector<Op>& acked_ops() const { return acked_; }
    // After Stop: the shell may exit (nothing durable is left to do).
    bool stopped() const { return stopped_; }
    // The leader lease (docs/leases.md): this replica leads, and f followers answered a
    // heartbeat it sent less than leader_lease_ms before `monotonic_now_ms` (its monotonic
    // clock, as Tick's). Only then may it extend a session's lease without the log.
    bool holds_leader_lease(uint64_t monotonic_now_ms) const;

    // The snapshot of everything committed (decode_replica_snapshot reads it), for a
    // WriteSnapshot without bytes; the bytes a WriteSnapshot asks to write, either way.
    Bytes encode_snapshot() const;
    Bytes snapshot_to_write(const WriteSnapshot& write) const
    {
        return write.snapshot.empty() ? encode_snapshot() : write.snapshot;
    }

private:
    // The client's latest request: its number, a CRC-32C of its payload (a number sent again
    // with another payload was reused: answered with an empty result, never executed; nullopt
    // after a VLS1 snapshot, which did not keep it), and its result.
    struct ClientSession {
        RequestNumber request_number = 0;
        std::optional<uint32_t> request_crc;
        Bytes result;
        // When it executed (ClientTableRecord::executed_ms), and its place in execution_order_
        // (end() while that is not known).
        std::optional<uint64_t> executed_ms;
        std::list<ClientId>::iterator executed_at;
    };
    struct RequestInFlight {
        RequestNumber request_number = 0;
        uint32_t request_crc = 0;
    };
    // A batch the leader sent and has not yet seen committed.
    struct InFlightPrepare {
        Op first_op = 0;
        Op last_op = 0;
        uint64_t sent_tick = 0;
    };
    // A state transfer in progress (§5.2).
    struct Fetch {
        enum class Purpose : uint8_t {
            catch_up,    // normal follower behind in its own view: entries append as they come
            join_view,   // learnt of a started view: the leader's log replaces ours when whole
            select_log,  // new leader: the log §4.2 selected replaces ours when whole
            recover,     // §4.3: the leader's log, from nothing
        };
        Purpose purpose = Purpose::catch_up;
        ReplicaIndex from = 0;
        Op base_op = 0;               // ours is good up to here; `entries` follow it
        Op target_op = 0;             // complete once base_op + entries.size() reaches it
        Op commit = 0;                // the sender's commit number, as last heard
        std::vector<Entry> entries;   // fetched, not yet in the log (all but catch_up)
        // Our restored state is not known to be the cell's history (state_unconfirmed_): the
        // fetched state replaces it whole (base_op 0), once complete or once a snapshot arrives.
        bool replaces_state = false;
        // What `from` last said of its state (NewState, SnapshotOffer): what we take from it is
        // not yet the cell's history either.
        bool source_unconfirmed = false;
        // replaces_state: the snapshot fetched from `from` (base_op is its op), to install when
        // the entries after it are here too.
        Bytes snapshot;
        uint64_t sent_tick = 0;
        Op fetched_op() const { return base_op + entries.size(); }
    };

    ReplicaIndex leader_of(View view) const
    {
        return static_cast<ReplicaIndex>(view % config_.replica_count);
    }
    size_t quorum() const { return config_.replica_count / 2 + 1; }  // f + 1

    void on_receive(const Receive& receive);
    bool must_fence_kernel(const Input& input) const;
    void on_kernel_drained();
    void dispatch(const Input& input);
    void on_tick(const Tick& tick);
    void on_flush();

    // Handlers, named after the paper's messages.
    void on_request(const Request& m);
    void on_prepare(const Prepare& m, bool kernel_acked);
    void on_prepare_ok(const PrepareOk& m, bool quorum_marked);
    void on_commit(const Commit& m);
    void on_reply(const Reply& m);
    void on_start_view_change(const StartViewChange& m);
    void on_view_change_asked(const StartViewChange& m);
    void on_do_view_change(const DoViewChange& m);
    void on_start_view(const StartView& m);
    void on_recovery(const Recovery& m);
    void on_recovery_response(const RecoveryResponse& m);
    void on_get_state(const GetState& m);
    void on_new_state(const NewState& m);
    void on_snapshot_offer(const SnapshotOffer& m);
    void on_commit_ok(const CommitOk& m);

    // Normal operation (§4.1).
    void send_prepares(bool flush_partial);
    // Commits what f followers acknowledged, or `quorum_counted_op` if the kernel counted it.
    void advance_commit_as_leader(Op quorum_counted_op = 0);
    void adopt_commit_as_follower(Op commit);
    void commit_to(Op commit);
    void execute(Op op, const Entry& entry);
    void reply(ClientId client_id, const ClientSession& session);
    // The table's entry for `client_id` (a new one is in no place in execution_order_ yet).
    ClientSession& client_session(ClientId client_id);
    // Records when the client's latest request executed: last in execution_order_ if known, out
    // of it if not.
    void place_client(ClientId client_id, ClientSession& session,
                      std::optional<uint64_t> executed_ms);
    // The client's request executed at `now_ms`: placed last, and the first clients past the
    // limit that are old enough forgotten.
    void note_executed(ClientId client_id, ClientSession& session, uint64_t now_ms);
    // The answer to a request number used again for another request: an empty result (no
    // state machine result is empty).
    void reply_reused(ClientId client_id, RequestNumber request_number);
    void retransmit_prepares();
    // Failure detection that sees one-way loss (docs/replication.md): the leader steps down when
    // no quorum answered its heartbeats for a view-change timeout; a follower gives up on a
    // leader that it hears but that never commits what it acknowledged.
    bool leader_hears_quorum() const;
    void note_commit_progress();
    bool leader_suspected(uint64_t at_tick) const;
    // A follower that lost its leader asks the others (an asking StartViewChange, from normal
    // status) and starts the view change once f of them asked too (etcd's PreVote, in VR's
    // terms): a replica that hears nothing but sends well would otherwise depose a leader the
    // rest of the cell hears, again and again while its cut lasts.
    void suspect_leader();
    // The view to change to, if f other replicas asked for a view past ours within a timeout
    // before `at_tick`.
    std::optional<View> view_change_asked_by_quorum(uint64_t at_tick) const;

    // View change (§4.2).
    void start_view_change(View view);
    void enter_view_change();  // of view_: our StartViewChange, and a fresh count
    uint64_t view_change_timeout_ticks() const;
    DoViewChange own_do_view_change() const;
    void maybe_send_do_view_change();
    void maybe_start_view();
    void become_leader();
    void send_start_view(ReplicaIndex to);
    void join_view(View view, Op base_op, Op target_op, std::vector<Entry> fetched = {},
                   bool replace_state = false);
    void enter_normal(View view);
    void reset_view_state();

    // Recovery (§4.3) and state transfer (§5.2).
    void start_recovery_round();
    void finish_recovery(Op commit);
    uint64_t recovery_nonce() const;
    void start_fetch(Fetch::Purpose purpose, ReplicaIndex from, Op base_op, Op target_op,
                     std::vector<Entry> fetched = {}, bool replaces_state = false);
    void send_get_state();
    void retransmit_get_state();
    void complete_fetch();
    bool install_entries(Op first_op, const std::vector<Entry>& entries);
    void replace_log_after(Op base_op, Op first_op, const std::vector<Entry>& entries);
    bool joining(View view) const;
    std::vector<Entry> entries_after(Op first_op, size_t budget_bytes) const;
    void fetch_next_or_complete();
    Op fetched_through() const;  // the op after which the fetch under way asks for entries

    // Snapshots and log compaction (DESIGN.md §5).
    bool restore_snapshot(const ReplicaSnapshot& snapshot);
    // restore_snapshot(), with `suffix` as the log after it, and written as our own.
    bool install_snapshot(const ReplicaSnapshot& snapshot, const Bytes& encoded,
                          std::vector<Entry> suffix);
    void maybe_take_snapshot();
    void free_released_entries();
    void on_snapshot_written(const SnapshotWritten& written);
    void on_snapshot_fetched(const SnapshotFetched& fetched);
    void on_stop();

    // Restart from a data directory.
    void maybe_restart_cell();
    bool maybe_bootstrap();
    void discard_state();
    View log_epoch() const;
    void propose_restart_fence();
    bool join_restart(View view);
    void leave_restart_for_view_change();

    // Durability sync.
    void log_changed_after(Op op);
    void persist_before_sending();

    void send(ReplicaIndex to, Message message);
    // Records why `event` returns without acting (`return ignore(__func__, ...)`).
    void ignore(const char* event, Ignored reason, Op op = 0);
    void broadcast(Message message);
    void truncate_log(Op op);
    const Entry& log_at(Op op) const { return log_[op - log_base_ - 1]; }
    void emit_kernel_state();
    void check_invariants() const;

    const ReplicaConfig config_;
    StateMachine& machine_;
    Effects* out_ = nullptr;  // set for the duration of step()
    std::vector<Trace> traces_;  // the last step's

    // Protocol state (§4).
    Status status_ = Status::normal;
    View view_ = 0;
    View last_normal_view_ = 0;
    std::vector<Entry> log_;  // log_[i] holds op log_base_ + i + 1
    Op log_base_ = 0;         // ops up to here are in the newest snapshot; log_base_ <= commit_
    // Entries compaction dropped, freed kReleasedEntriesPerStep a step (0.15 ms): a snapshot's
    // worth freed in one step held voltlockd's event loop 60 ms for 300,000 entries
    // (vl_snapshot_bench), up to 190 ms on a busy machine. An idle replica steps every tick.
    static constexpr size_t kReleasedEntriesPerStep = 1024;
    std::vector<std::vector<Entry>> released_;
    Op commit_ = 0;
    std::unordered_map<ClientId, ClientSession> client_table_;
    // The ids of the client table whose latest request's time is known, the one that executed
    // longest ago first (the order the snapshot keeps them in): who is forgotten past
    // client_table_limit.
    std::list<ClientId> execution_order_;
    // Whether an execution gives its client's row a time (and so may have it forgotten). Not
    // after restoring a VLS2 or VLS1 snapshot, whose rows have none: the replicas of a cell that
    // ran an earlier version restore their own snapshots, taken at different ops, so a row one
    // of them times while replaying is one another restored without a time. Every replica of
    // such a cell executes its first restart fence at the same op, and times rows from there on
    // (rows it has by then stay untimed, never forgotten). Replicated with the state.
    bool clients_timed_ = true;

    // Time, in ticks.
    uint64_t tick_ = 0;
    uint64_t now_ms_ = 0;
    uint64_t monotonic_ms_ = 0;
    uint64_t last_heard_from_leader_tick_ = 0;   // follower
    // Normal status: per replica, the latest view past ours it asked for, and when.
    struct ViewChangeAsked {
        View view = 0;
        uint64_t tick = 0;
    };
    std::vector<ViewChangeAsked> view_change_asked_;
    uint64_t last_heartbeat_tick_ = 0;           // leader: the last Commit it broadcast
    // Follower: whether it holds ops beyond the leader's commit number, the commit number it
    // has waited at without progress, and since when.
    bool awaiting_commit_ = false;
    Op awaiting_commit_at_ = 0;
    uint64_t awaiting_commit_since_tick_ = 0;
    uint64_t status_since_tick_ = 0;             // view change and recovery deadlines
    uint64_t status_messages_sent_tick_ = 0;     // their retransmission (and a follower's asking)
    uint32_t failed_view_changes_ = 0;           // in a row: backs the timeout off

    // Leader.
    std::vector<Op> acked_;  // per replica, highest op acknowledged in this view
    // Per replica, the tick a CommitOk or GetState of this view last came from it (the view's
    // start counts), and the newest heartbeat (the send time, on our monotonic clock) it echoed
    // in this view.
    std::vector<uint64_t> answered_tick_;
    std::vector<uint64_t> echoed_heartbeat_ms_;
    void send_heartbeat();
    std::deque<Request> pending_requests_;                            // not yet in the log
    std::unordered_map<ClientId, RequestInFlight> requests_in_flight_;  // queued or uncommitted
    std::deque<InFlightPrepare> prepares_in_flight_;
    // The op the selected log reached when this replica became leader. Normally within the
    // pipeline of the old commit point, but not after a whole-cell restart with durability
    // sync: every restored commit number is its snapshot's, so the whole log after it is
    // uncommitted. The leader commits that suffix as followers acknowledge it, and appends new
    // ops only once it is back within the pipeline (send_prepares).
    Op view_start_op_ = 0;

    // View change (§4.2).
    std::vector<bool> start_view_change_from_;
    std::map<ReplicaIndex, DoViewChange> do_view_change_from_;
    bool do_view_change_sent_ = false;
    Op new_view_commit_ = 0;  // the largest commit among the DoViewChange messages

    // Recovery (§4.3).
    uint64_t recovery_nonce_base_ = 0;
    uint64_t recovery_round_ = 0;
    std::map<ReplicaIndex, RecoveryResponse> recovery_responses_;
    std::optional<RecoveryResponse> recovery_target_;  // the leader's answer; fetching its log
    // Restart: this replica's state came from its data directory, and it may offer it for a
    // whole-cell restart; the answers of the others recovering with theirs.
    bool restored_ = false;
    // What it restored is everything it acknowledged (durability sync, or a clean stop): it
    // takes part in view changes with it as VR's replicas do.
    bool restored_whole_ = false;
    // This process has run in normal status: unlike a state being restored, its state has been
    // the cell's, so it answers a Recovery also while changing views (on_recovery).
    bool been_normal_ = false;
    std::map<ReplicaIndex, RecoveryResponse> restart_votes_;
    // StartRecovering::may_bootstrap, until this replica is in the cell; since when, in this
    // round, it waits for view 0's leader to run before it (maybe_bootstrap).
    bool may_bootstrap_ = false;
    std::optional<uint64_t> awaiting_first_leader_since_;
    // Replicated with the state: the view of the last restart fence applied (0: none). States of
    // an older restart epoch are from before a restart that went on without them.
    View fence_view_ = 0;
    // Restored from a snapshot alone (durability snapshot), or given whole by a replica whose
    // state was: committed ops, but perhaps of a history the cell left behind (it restarted
    // without us from older snapshots), or one the cell will leave behind (a restart's view
    // can end before its fence commits, and the next select an older state). It competes in
    // view changes; a view that starts with another state replaces it whole, in one step once
    // fetched (until then it is what we offer: a replica that gave up its state before it had
    // another would count in a view change with nothing). It is the cell's history once a
    // restart fence commits on top of it, or once a recovery took the state of a leader whose
    // state was; a leader with such a state proposes that fence first.
    bool state_unconfirmed_ = false;
    // Durability snapshot: in the view change of a whole-cell restart, until normal. Until it
    // learns that the restart's view started, it still answers Recovery as restarting, so that
    // the restarting replicas that had not yet counted a quorum do, and follow (they never join
    // a view change on a message alone).
    bool restart_view_change_ = false;

    // Snapshots: the op and tick of the last one asked for (written or not: a failed write is
    // retried at the next trigger, not at once), and the op of the write under way.
    Op snapshot_attempt_op_ = 0;
    uint64_t snapshot_attempt_tick_ = 0;
    std::optional<Op> snapshot_writing_;
    // The restart fence (its view) that the newest snapshot written holds, and the write under
    // way's: a fence no snapshot holds yet makes one due at once, so that a second whole-cell
    // crash finds the restarted history on disk, not only snapshots of the one it replaced.
    View snapshot_fence_view_ = 0;
    View snapshot_writing_fence_view_ = 0;

    // Durability sync: the log after this op changed since it was last persisted; the view and
    // last normal view persisted last (none yet: a replica that started with nothing).
    std::optional<Op> log_unpersisted_after_;
    std::optional<std::pair<View, View>> persisted_view_;

    std::optional<Fetch> fetch_;

    vl_kernel_state kernel_state_{};  // the last record emitted
    // DESIGN.md §3: before a follower whose kernel may be acknowledging Prepares takes part in a
    // view change, the fast path goes off and the ring buffer is drained; the input that called
    // for it waits here meanwhile.
    std::optional<Input> waiting_for_drain_;
    // A record with fast_ack 1 went out since the last drain: the ring may hold Prepares the
    // kernel acknowledged that are not in the log yet, even if the fast path is off now.
    bool kernel_may_hold_acks_ = false;
    ReplicaCounters counters_;
    bool stopped_ = false;
};

}  // namespace voltlock
