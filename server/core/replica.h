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
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
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
};

// How a replica starts: as a member of a brand-new cell, or after a crash that lost its state
// (§4.3), with a nonce that the shell draws and that is never reused by this replica.
struct StartFresh {};
struct StartRecovering {
    uint64_t nonce = 0;
};
using Start = std::variant<StartFresh, StartRecovering>;

// ---- Inputs ---------------------------------------------------------------------------------

// Time passes by one tick; `now_ms` is the shell's clock, used only to stamp new ops.
struct Tick {
    uint64_t now_ms = 0;
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
using Input = std::variant<Tick, Receive, Flush, KernelDrained>;

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
using Effect =
    std::variant<Send, Broadcast, SendReply, Executed, KernelStateChanged, DrainKernel>;
using Effects = std::vector<Effect>;

// Counters kept for /v1/status and tests.
struct ReplicaCounters {
    uint64_t view_changes = 0;        // views this replica entered normal status in
    uint64_t retransmissions = 0;     // Prepares, GetStates and view-change messages sent again
    uint64_t state_transfers = 0;     // GetStates sent
    uint64_t recoveries = 0;          // recoveries completed
    uint64_t requests_dropped = 0;    // requests refused: not leader, queue full, stale
};

class Replica {
public:
    Replica(const ReplicaConfig& config, StateMachine& machine, Start start);

    // The one entry point: consumes `input`, appends what to do to `out`.
    void step(const Input& input, Effects& out);

    // Read-only view for the shell, tests and the simulator.
    ReplicaIndex replica() const { return config_.replica; }
    Status status() const { return status_; }
    View view() const { return view_; }
    View last_normal_view() const { return last_normal_view_; }
    ReplicaIndex leader() const { return leader_of(view_); }
    bool is_leader() const { return status_ == Status::normal && leader() == config_.replica; }
    Op op() const { return log_.size(); }
    Op commit() const { return commit_; }
    const Entry& entry(Op op) const { return log_.at(op - 1); }
    const ReplicaCounters& counters() const { return counters_; }
    const ReplicaConfig& config() const { return config_; }
    // Per replica, the highest op it acknowledged in this view (leader only; else zeros).
    const std::vector<Op>& acked_ops() const { return acked_; }

private:
    struct ClientSession {
        RequestNumber request_number = 0;
        Bytes result;
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
    void on_tick(const Tick& tick);
    void on_flush();

    // Handlers, named after the paper's messages.
    void on_request(const Request& m);
    void on_prepare(const Prepare& m, bool kernel_acked);
    void on_prepare_ok(const PrepareOk& m, bool quorum_marked);
    void on_commit(const Commit& m);
    void on_start_view_change(const StartViewChange& m);
    void on_do_view_change(const DoViewChange& m);
    void on_start_view(const StartView& m);
    void on_recovery(const Recovery& m);
    void on_recovery_response(const RecoveryResponse& m);
    void on_get_state(const GetState& m);
    void on_new_state(const NewState& m);

    // Normal operation (§4.1).
    void send_prepares(bool flush_partial);
    // Commits what f followers acknowledged, or `quorum_counted_op` if the kernel counted it.
    void advance_commit_as_leader(Op quorum_counted_op = 0);
    void adopt_commit_as_follower(Op commit);
    void commit_to(Op commit);
    void execute(Op op, const Entry& entry);
    void reply(ClientId client_id, const ClientSession& session);
    void retransmit_prepares();

    // View change (§4.2).
    void start_view_change(View view);
    uint64_t view_change_timeout_ticks() const;
    DoViewChange own_do_view_change() const;
    void maybe_send_do_view_change();
    void maybe_start_view();
    void become_leader();
    void send_start_view(ReplicaIndex to);
    void join_view(View view, Op base_op, Op target_op, std::vector<Entry> fetched = {});
    void enter_normal(View view);
    void reset_view_state();

    // Recovery (§4.3) and state transfer (§5.2).
    void start_recovery_round();
    void finish_recovery(Op commit);
    uint64_t recovery_nonce() const;
    void start_fetch(Fetch::Purpose purpose, ReplicaIndex from, Op base_op, Op target_op,
                     std::vector<Entry> fetched = {});
    void send_get_state();
    void retransmit_get_state();
    void complete_fetch();
    bool install_entries(Op first_op, const std::vector<Entry>& entries);
    void replace_log_after(Op base_op, Op first_op, const std::vector<Entry>& entries);
    bool joining(View view) const;
    std::vector<Entry> entries_after(Op first_op, size_t budget_bytes) const;

    void send(ReplicaIndex to, Message message);
    void broadcast(Message message);
    void truncate_log(Op op);
    void emit_kernel_state();
    void check_invariants() const;

    const ReplicaConfig config_;
    StateMachine& machine_;
    Effects* out_ = nullptr;  // set for the duration of step()

    // Protocol state (§4).
    Status status_ = Status::normal;
    View view_ = 0;
    View last_normal_view_ = 0;
    std::vector<Entry> log_;  // log_[i] holds op i + 1
    Op commit_ = 0;
    std::unordered_map<ClientId, ClientSession> client_table_;

    // Time, in ticks.
    uint64_t tick_ = 0;
    uint64_t now_ms_ = 0;
    uint64_t last_heard_from_leader_tick_ = 0;   // follower
    uint64_t last_sent_to_followers_tick_ = 0;   // leader
    uint64_t status_since_tick_ = 0;             // view change and recovery deadlines
    uint64_t status_messages_sent_tick_ = 0;     // their retransmission
    uint32_t failed_view_changes_ = 0;           // in a row: backs the timeout off

    // Leader.
    std::vector<Op> acked_;  // per replica, highest op acknowledged in this view
    std::deque<Request> pending_requests_;                            // not yet in the log
    std::unordered_map<ClientId, RequestNumber> requests_in_flight_;  // queued or uncommitted
    std::deque<InFlightPrepare> prepares_in_flight_;

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
};

}  // namespace voltlock
