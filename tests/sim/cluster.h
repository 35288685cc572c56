// A whole VR cell in one process: the real replica core, each replica with its own
// RegisterMachine and data directory, VR clients, and the simulated network between them, all
// driven by one seed.
//
// Time moves in ticks. In each tick the clients act (new operations, retries), every live replica
// gets a Tick, the datagrams due are delivered one by one, and replicas that received something
// get a Flush (right after each message, or once after all of them, as the seed chooses).
// Every message crosses the network as bytes, through the real codec.
//
// After every step (one input to one replica, or one reply to one client) the cluster checks:
// - agreement: every replica commits the same entry at each op, and executing it gives the same
//   result, or every replica skips it as a duplicate request;
// - a replica's commit number never goes back (per incarnation; but see below) and never passes
//   its op number, and it executes its ops in order, each at most once;
// - a replica in normal status in view v holds every op committed in a view before v, as
//   committed (§4.2: the new view's log includes them); one that holds less has lost committed
//   ops, which the next view change could make final. (Not "committed before v began": a
//   replica that was stalled or cut off can complete an old view's change after a later view
//   committed more, and lead that old view, harmlessly: nobody follows it.)
// - a reply a client accepts answers a request executed at exactly one op, with that op's result;
// - every message a replica emits encodes within the configured datagram size, names its sender,
//   and decodes back; every datagram corrupted in flight is rejected by the decoder (and by the
//   kernel: never acknowledged, counted or marked).
// With Electrode on a replica (ClusterOptions::electrode), every datagram to it passes through a
// model of its kernel's XDP program and every datagram from it through TC (kernel_model.h:
// fast_path.h's decisions), and the cluster plays the shell's part as server/shell/node.cpp does:
// the kernel's state record written as the core emits it, before the effects after it; the ring
// read on every tick and before every socket batch (a batch ends with a Flush), and after a
// wakeup once it is half full; DrainKernel carried out after the other effects of its step;
// vl_acked_ops fed to the leader's core before each tick; Prepares and Commits broadcast once
// for TC to clone. Such a replica's process can also stall (be descheduled) while its kernel
// goes on. Then, also after every step:
// - the kernel acknowledges op n of view v only while every op <= n of v is in the replica's log
//   or in a ring record (in the ring, or read by the shell and not yet given to the core), and
//   what the core installs at those ops is what the kernel acknowledged;
// - a replica that has left normal status in v, v still its last normal view (it takes part in
//   a view change), holds every op its kernel acknowledged in v in its log: the ring was drained
//   before it reported its log (docs/electrode.md; the original Electrode code's bug);
// - a PrepareOK(v, n), the core's or the kernel's (VL_FLAG_KERNEL_ACK), leaves a replica only
//   while it is a follower in normal status in v holding every op <= n: the two mean the same;
// - a PrepareOK that reaches the leader's core marked VL_FLAG_QUORUM, and every entry of
//   vl_acked_ops fed to it, stands for acknowledgements f followers (resp. that follower) sent.
// Snapshots and the data directory (DESIGN.md §5; the shell's side is server/shell/node.cpp and
// storage.h, modelled here): each replica has a data directory that outlives its crashes, with
// its newest durable snapshot, and with durability sync the log after it and the view. A
// WriteSnapshot is served to peers at once and written after a random delay (at once if
// before_next_effect), in order, and may fail (a full disk: SnapshotWritten ok=false, nothing
// changes; with durability sync, also one older than a snapshot written meanwhile); a crash loses
// the writes under way. PersistLog and PersistView apply at once, and are refused as the real
// storage refuses them (a gap, or ops under the snapshot) -- a violation, since the shell would
// stop. A FetchSnapshot delivers the peer's snapshot of the op it offered after a random delay,
// or fails (the peer is down or serves another one by now, the connection breaks), or delivers
// it with a byte flipped.
// A replica restarts from its data directory (StartRestored) or, its disk lost, from nothing
// (StartRecovering); the whole cell can crash at once (crash_cell()). Then, also after every step:
// - a replica's state machine has the digest the committed history has at its commit number
//   (however it got there: executing, installing a snapshot, or restoring one);
// - a snapshot it writes decodes, is of an op it committed, and holds exactly that state; a
//   fetched snapshot with a flipped byte is never installed;
// - durability sync: the data directory holds the replica's log and view at the end of every
//   step, and before a Prepare, PrepareOK, DoViewChange or StartView leaves, what it promises.
// A whole-cell restart with durability sync loses nothing committed: the invariants above hold
// across it as they are. With durability snapshot, the cell may come back from an older state
// than it had: from the newest of a quorum of the restarting replicas (§4.2 among them), so at
// least the (f + 1)-th oldest durable snapshot at the crash. When the first op is committed
// after the crash, the history is cut back to the op before it (which must be at least that
// snapshot's op), the operations acknowledged after it count as lost (allowed), and every check
// goes on against the cut history -- including the digest check, which a replica whose restored
// state is ahead of the cut must not pass off as committed. Such a replica may instead discard
// its restored state and start again from nothing, before it is in normal status: its commit
// number then goes back to 0, and every op it commits after is checked as any other.
// Leases (docs/leases.md, cluster_leases.cpp): every replica's monotonic clock drifts (bounded),
// and after every tick, for sessions of session_ttl_ms:
// - a replica that holds its leader lease (Replica::holds_leader_lease, at the tick's last
//   millisecond on its clock) could answer a keepalive then; its client, counting the TTL from
//   when it sent it on a clock as slow as the bound allows, holds the lease until a real time;
// - the leader of a view may expire a session once LeaseTracker::handover_ms has passed on its
//   clock from its start (counted from the start of the tick it started in);
// - no two holders: every lease granted by the leader of a view ends before the leader of any
//   later view may expire it.
// At the end of a run: linearizability (linearizability.h), and liveness: once the faults stop,
// every outstanding operation completes and the replicas converge (quiesce()).
//
// The first violation is kept, described, and stops the run.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "client.h"
#include "core/register_machine.h"
#include "core/replica.h"
#include "core/ring_records.h"
#include "kernel_model.h"
#include "linearizability.h"
#include "network.h"
#include "prng.h"

namespace voltlock::sim {

struct ClusterOptions {
    uint64_t seed = 1;
    uint8_t replica_count = 3;
    uint32_t cluster_id = 7;
    uint32_t max_message_bytes = VL_DEFAULT_MESSAGE_BYTES;
    uint32_t pipeline_ops = ReplicaConfig{}.pipeline_ops;  // the leader's uncommitted ops at most
    NetworkFaults faults;

    // Workload.
    size_t client_count = 4;
    uint32_t client_retry_ticks = 40;
    uint32_t max_think_ticks = 2;        // a client pauses 0..this many ticks between operations
    double write_fraction = 0.6;         // the rest are reads
    uint32_t max_value_padding = 24;     // written values are unique, padded by up to this much
    uint64_t op_budget = 1000;           // operations the clients invoke, in all

    double flush_after_each_message = 0;  // else a replica is flushed once per tick
    // Every replica starts on a new data directory without --recover, as voltlockd does
    // (StartRecovering::may_bootstrap), rather than as StartFresh.
    bool start_blank = false;

    // Electrode, per replica (empty: nowhere). The shell reads the ring on every tick and before
    // every batch from its socket; a record wakes it only once the ring is half full, and then it
    // reads the ring 0..ring_wakeup_ticks later.
    std::vector<ElectrodeOptions> electrode;
    uint32_t ring_wakeup_ticks = 0;
    // A process with Electrode stalls (is descheduled) with this chance per tick, for
    // 1..max_stall_ticks ticks: its kernel goes on acknowledging and counting, its socket queues
    // what XDP passes up (up to socket_queue_limit datagrams), its timer expirations add up.
    double stall_per_tick = 0;
    uint32_t max_stall_ticks = 0;
    size_t socket_queue_limit = 1024;
    // Of the datagrams a replica's XDP passes up, the share its full receive buffer drops: for a
    // quorum-marked PrepareOK, the one way its quorum reaches the core only through vl_acked_ops.
    double socket_drop = 0;
    uint32_t ms_per_tick = 10;
    // Leases (docs/leases.md): each replica's monotonic clock runs at its own rate, within this
    // much of real time (at the bound on some seeds); sessions of this TTL are checked.
    uint64_t max_clock_drift_ppm = 10'000;
    bool clocks_at_drift_bound = false;
    uint32_t session_ttl_ms = 400;

    // Snapshots (ReplicaConfig; 0: off) and the durability mode: sync persists the log and the
    // view before acknowledging (and then the follower fast-ack is off, as voltlockd does).
    uint64_t snapshot_every_ops = 0;
    uint64_t snapshot_every_ticks = 0;
    bool durability_sync = false;
    // The data directory: a background snapshot write takes 0..max ticks and fails with this
    // chance; a snapshot fetch takes 1..max ticks, fails or delivers a flipped byte this often.
    uint32_t max_snapshot_write_ticks = 5;
    double snapshot_write_failure = 0;
    uint32_t max_snapshot_fetch_ticks = 10;
    double snapshot_fetch_failure = 0;
    double snapshot_fetch_corruption = 0;
    // Of the restarts quiesce() does, the share that lost their disk (StartRecovering; half of
    // them without --recover).
    double lose_disk_on_restart = 0;
    bool verbose = false;  // trace every delivery, state change and fault to stdout
};

// What the cell committed at one op.
struct CommittedOp {
    Entry entry;
    std::optional<Bytes> result;  // none: a duplicate of an executed request, skipped
};

class Cluster {
public:
    explicit Cluster(const ClusterOptions& options);
    Cluster(const Cluster&) = delete;
    Cluster& operator=(const Cluster&) = delete;

    // ---- Time ---------------------------------------------------------------------------------
    void run_tick();
    void run_ticks(uint64_t ticks);
    // Runs until `done()` holds (checked after every tick) or `max_ticks` pass; true if done.
    bool run_until(const std::function<bool()>& done, uint64_t max_ticks);
    uint64_t now_tick() const { return now_tick_; }
    const ClusterOptions& options() const { return options_; }

    // ---- Faults -------------------------------------------------------------------------------
    Network& network() { return network_; }
    // A crash loses everything in memory: the replica and its state machine are destroyed, and
    // so are the snapshot writes under way. The data directory stays.
    void crash(ReplicaIndex r);
    // A new replica and a new state machine in the old one's place, recovering (§4.3) with a
    // nonce this replica never used before: from nothing (its disk lost and replaced by an empty
    // one), or from its data directory (StartRestored). From nothing, with --recover or not
    // (StartRecovering::may_bootstrap); unset, drawn: operators forget it.
    void restart(ReplicaIndex r, std::optional<bool> without_recover = std::nullopt);
    void restart_from_disk(ReplicaIndex r);
    // Every live replica crashes at the same moment (a power cut): restart them all afterwards.
    void crash_cell();
    // A graceful stop (voltlockd's SIGTERM, Node::stop): the snapshot writes still queued are
    // dropped, the replica steps Stop and carries out what it asks, then its process is gone as
    // after a crash. Unlike a crash, the cell must lose nothing it acknowledged, even when every
    // replica stops (stop_cell()) and restarts from its data directory.
    void stop(ReplicaIndex r);
    void stop_cell();
    bool crashed(ReplicaIndex r) const { return !replicas_[r].replica; }
    // Replica r's process stops for `ticks` ticks (its kernel does not); see ClusterOptions.
    void stall(ReplicaIndex r, uint64_t ticks);
    bool stalled(ReplicaIndex r) const { return replicas_[r].stalled_until_tick > now_tick_; }
    // Crashed, or restarted and not yet back in normal status: VR tolerates f of these at once.
    bool down(ReplicaIndex r) const;
    size_t down_count() const;
    uint8_t replica_count() const { return options_.replica_count; }
    uint8_t max_faulty() const { return static_cast<uint8_t>((options_.replica_count - 1) / 2); }

    // ---- Workload -----------------------------------------------------------------------------
    void stop_new_ops() { issuing_ = false; }
    uint64_t ops_remaining() const { return issuing_ ? op_budget_left_ : 0; }
    size_t outstanding_ops() const;
    size_t completed_ops() const { return completed_ops_; }

    // ---- End of run ---------------------------------------------------------------------------
    // Stops new operations and every fault (partitions, loss, crashes: crashed replicas restart),
    // then runs until every outstanding operation completed and the replicas converged. A
    // liveness violation if that takes more than `max_ticks`.
    bool quiesce(uint64_t max_ticks);
    // Every replica up, in normal status, in one view, with the same op and commit numbers and
    // nothing left uncommitted.
    bool converged() const;
    // Checks the whole run's history for linearizability; a violation if it is not.
    void check_linearizability();

    // ---- Observations -------------------------------------------------------------------------
    const Replica& replica(ReplicaIndex r) const;
    // The live replica that leads the highest view in normal status, if any.
    std::optional<ReplicaIndex> leader() const;
    const std::vector<CommittedOp>& committed() const { return committed_; }
    std::vector<Execution> executions() const;
    // Counters of every replica incarnation, including those lost to crashes.
    ReplicaCounters total_counters() const;
    // Views other than the first that some replica reached normal status in.
    size_t views_established() const { return views_established_.size() - 1; }
    // What replica r's data directory holds: its newest durable snapshot's op (0: none), and
    // the last op its durable log reaches (the snapshot's if it holds no log).
    Op disk_snapshot_op(ReplicaIndex r) const { return replicas_[r].disk.snapshot_op; }
    Op disk_last_op(ReplicaIndex r) const { return replicas_[r].disk.last_op(); }
    const Bytes& disk_snapshot(ReplicaIndex r) const { return replicas_[r].disk.snapshot; }
    bool disk_holds_nothing(ReplicaIndex r) const { return replicas_[r].disk.holds_nothing(); }
    // Storage faults, for scenarios: the next background snapshot writes fail (all replicas),
    // the next snapshot fetches deliver a flipped byte.
    void fail_snapshot_writes(uint32_t count) { forced_write_failures_ = count; }
    void corrupt_snapshot_fetches(uint32_t count) { forced_fetch_corruptions_ = count; }
    struct StorageCounters {
        uint64_t snapshot_writes = 0;          // WriteSnapshot effects carried out
        uint64_t snapshot_writes_failed = 0;   // ... that failed (ok=false)
        uint64_t snapshot_writes_lost = 0;     // ... that a crash cut short
        uint64_t snapshot_fetches = 0;         // FetchSnapshot effects started
        uint64_t snapshot_fetches_failed = 0;  // ... that delivered nothing
        uint64_t snapshot_fetches_corrupted = 0;
        uint64_t restarts_from_disk = 0;
        uint64_t restarts_from_nothing = 0;
        uint64_t cell_crashes = 0;
        uint64_t graceful_stops = 0;           // replicas stopped (SIGTERM), each
        uint64_t cell_stops = 0;               // ... all at once
        uint64_t states_discarded = 0;         // restored states the cell had left behind
        uint64_t acknowledged_ops_lost = 0;    // snapshot durability, whole-cell crashes
        uint64_t committed_ops_lost = 0;       // ... of which acknowledged or not
    };
    const StorageCounters& storage_counters() const { return storage_counters_; }
    // Durability snapshot: the op the cell ran again from after its last whole-cell crash, once
    // settled (cut_history), and whether a crash's is still unsettled.
    std::optional<Op> resumed_op() const { return resumed_op_; }
    bool cell_restart_unsettled() const { return cell_crash_.has_value(); }
    uint64_t corrupted_rejected() const { return corrupted_rejected_; }
    // Electrode on replica r (this incarnation), and what every kernel and shell did.
    bool electrode(ReplicaIndex r) const { return replicas_[r].kernel != nullptr; }
    // The record replica r's kernel holds (vl_state), if it runs Electrode.
    std::optional<vl_kernel_state> kernel_state(ReplicaIndex r) const;
    const ElectrodeCounters& electrode_counters() const { return electrode_counters_; }
    // Prepares replica r's kernel acknowledged that its core has not been given yet: in the ring,
    // or read by the shell and held.
    size_t ring_records(ReplicaIndex r) const;
    const std::optional<std::string>& violation() const { return violation_; }
    // One line per replica: status, view, op, commit.
    std::string describe_replicas() const;

    // The live replica's machine, for scenarios.
    const RegisterMachine& machine(ReplicaIndex r) const { return *replicas_[r].machine; }
    // Leases: replica r's monotonic clock now, and what the lease check has seen.
    uint64_t local_clock_ms(ReplicaIndex r) const;
    struct LeaseCounters {
        uint64_t leader_starts = 0;     // views whose leader's expiry time was checked
        uint64_t grants = 0;            // ticks in which some leader held its leader lease
        uint64_t deposed_grants = 0;    // ... while a later view had started
    };
    const LeaseCounters& lease_counters() const { return lease_counters_; }

    void trace(const char* format, ...) __attribute__((format(printf, 2, 3)));
    // Records a violation (the first one wins); the run stops at the next step.
    void fail(const char* format, ...) __attribute__((format(printf, 2, 3)));

private:
    uint64_t new_nonce(ReplicaIndex r);  // one replica r never used
    // A replica's data directory (server/shell/storage.h): the newest snapshot, the log after it
    // (durability sync), the view; what a restart from disk starts from.
    struct DataDirectory {
        Op snapshot_op = 0;  // 0: none
        Bytes snapshot;
        std::vector<Entry> log;  // ops snapshot_op + 1, ...
        View view = 0;
        View last_normal_view = 0;
        bool view_stored = false;  // a PersistView came
        bool clean_stop = false;   // PersistStopped; cleared by the restart that reads it
        Op last_op() const { return snapshot_op + log.size(); }
        // As voltlockd's StoredState::holds_nothing: its replica never held the cell's state.
        bool holds_nothing() const
        {
            return snapshot_op == 0 && log.empty() && !view_stored && !clean_stop;
        }
    };
    // A snapshot write under way in the background (the shell's writer thread: in order).
    struct SnapshotWrite {
        Op op = 0;
        Bytes bytes;
        uint64_t done_tick = 0;
        bool written = false;  // written synchronously (before_next_effect): only the notice waits
    };
    struct SnapshotFetch {
        ReplicaIndex from = 0;
        Op op = 0;  // the one the peer offered: it must still serve that one
        uint64_t done_tick = 0;
    };
    struct ReplicaSlot {
        // Declared before the replica, which refers to it, so that it is destroyed after it.
        std::unique_ptr<RegisterMachine> machine;
        std::unique_ptr<Replica> replica;  // null while crashed
        bool awaiting_recovery = false;
        bool needs_flush = false;
        Op last_commit = 0;  // this incarnation's commit number after its last step
        Status last_status = Status::normal;
        View last_view = 0;
        std::set<uint64_t> used_nonces;
        uint64_t incarnation = 0;
        // Its host's monotonic clock: local = offset + rate * real (outlives crashes).
        double clock_rate = 1;
        uint64_t clock_offset_ms = 0;

        // Storage: the data directory (outlives crashes), and the shell's in-memory part.
        DataDirectory disk;
        std::deque<SnapshotWrite> snapshot_writes;
        std::optional<SnapshotFetch> snapshot_fetch;
        std::optional<std::pair<Op, Bytes>> served_snapshot;  // the core's newest WriteSnapshot
        Op newest_snapshot_written = 0;  // by this incarnation's shell

        // Electrode: the kernel (null without Electrode, or while crashed) and the shell's state
        // (server/shell/node.cpp).
        std::unique_ptr<ReplicaKernel> kernel;
        RingRecords ring_records;  // read from the ring, not yet given to the core
        std::vector<Op> kernel_acks_fed;     // per follower, the op last fed from vl_acked_ops
        bool ring_wakeup_pending = false;
        uint64_t stalled_until_tick = 0;  // the process runs again from this tick on
        uint64_t missed_ticks = 0;        // timer expirations while stalled
        std::deque<Decoded> socket_queue;  // what XDP passed up while the process was stalled
        // What this incarnation's kernel acknowledged: the highest (view, op), and the entries it
        // appended in that view that the core's log does not hold yet.
        bool kernel_acked = false;
        View kernel_ack_view = 0;
        Op kernel_ack_op = 0;
        std::map<Op, Entry> kernel_acked_entries;
    };
    // A ring buffer's wakeup of its shell, on the network's clock.
    struct RingWakeup {
        uint64_t tick = 0;
        uint64_t tie_breaker = 0;
        ReplicaIndex replica = 0;
        uint64_t incarnation = 0;
    };
    static bool wakes_later(const RingWakeup& a, const RingWakeup& b);
    struct ClientSlot {
        Client client;
        uint64_t ready_at_tick = 0;
        size_t outstanding_op = 0;  // index into client_ops_ while the client is waiting
    };

    ReplicaConfig replica_config(ReplicaIndex r) const;
    void start_replica(ReplicaIndex r, Start start);
    void run_clients();
    void invoke_next_op(uint32_t slot, std::vector<ClientSend>& sends);
    Bytes next_payload();
    void send_from_client(uint32_t slot, const ClientSend& send);

    void step(ReplicaIndex r, const Input& input);
    void carry_out(ReplicaIndex r, const Effects& effects);
    std::optional<std::vector<uint8_t>> encode_checked(ReplicaIndex r, const Message& message,
                                                       uint16_t flags = 0);
    void send_to_replica(ReplicaIndex r, ReplicaIndex to, const std::vector<uint8_t>& bytes);
    void broadcast_from(ReplicaIndex r, const Message& message);
    void check_step(ReplicaIndex r, const Effects& effects);
    void check_executions(ReplicaIndex r, const Effects& effects,
                          std::map<Op, const Executed*>& executed);
    void record_commit(ReplicaIndex r, Op op, const Entry& entry,
                       const std::optional<Bytes>& result);
    void check_holds_committed_ops(ReplicaIndex r, bool entered_view);
    Op committed_before(View view);
    void note_state_change(ReplicaIndex r);
    void check_digest(ReplicaIndex r);
    bool discarded_state(ReplicaIndex r, const Effects& effects) const;
    uint64_t reference_digest(Op op) const { return digest_after_[op]; }
    void apply_to_reference(Op op, const Entry& entry);

    // Leases (cluster_leases.cpp).
    uint64_t real_ms() const { return now_tick_ * options_.ms_per_tick; }
    void check_leases();

    // Storage (the shell's part: node.cpp, storage.h).
    void run_storage();
    void write_snapshot(ReplicaIndex r, const WriteSnapshot& write);
    void store_snapshot(ReplicaIndex r, Op op, const Bytes& bytes);
    void persist_log(ReplicaIndex r, const PersistLog& persist);
    void fetch_snapshot(ReplicaIndex r, const FetchSnapshot& fetch);
    void complete_fetch(ReplicaIndex r);
    void check_sent_durably(ReplicaIndex r, const Message& message);
    void check_disk(ReplicaIndex r);
    // Snapshot durability: the whole cell crashed, and r commits the first op since, after
    // `resumed`: the history is cut back to there.
    void cut_history(ReplicaIndex r, Op resumed);

    void deliver(Datagram datagram);
    // `batched`: part of a batch voltlockd flushes once, at its end (else as the seed chooses).
    void deliver_to_replica(ReplicaIndex r, Decoded decoded, bool batched = false);

    // Electrode: the kernel's part (cluster_electrode.cpp).
    void start_kernel(ReplicaIndex r);
    bool run_xdp(ReplicaIndex r, const Datagram& datagram, std::vector<uint8_t>& bytes);
    void note_kernel_ack(ReplicaIndex r, View view, Op op, const Prepare* appended);
    // ... and the shell's (node.cpp).
    void write_kernel_state(ReplicaIndex r, const vl_kernel_state& state);
    void maybe_stall(ReplicaIndex r);
    void on_timer(ReplicaIndex r, uint64_t expirations);
    void resume(ReplicaIndex r);
    void read_socket_queue(ReplicaIndex r);
    void schedule_ring_wakeup(ReplicaIndex r);
    bool ring_wakeup_due(std::optional<std::pair<uint64_t, uint64_t>> datagram_due) const;
    void on_ring_wakeup(ReplicaIndex r, uint64_t incarnation);
    void take_ring_records(ReplicaIndex r);
    void consume_ring(ReplicaIndex r);
    void deliver_ring_records(ReplicaIndex r, bool past_gaps, bool draining);
    void drain_kernel(ReplicaIndex r);
    void feed_kernel_acks(ReplicaIndex r);
    // ... and the invariants that concern them.
    Op held_through(ReplicaIndex r, View view) const;
    void check_kernel(ReplicaIndex r);
    void check_prepare_ok_sent(ReplicaIndex r, const PrepareOk& ack, bool by_kernel);
    void check_quorum_mark(ReplicaIndex r, const PrepareOk& ack);
    void deliver_to_client(uint32_t slot, const Message& message);
    void accept_reply(ClientSlot& slot, const Reply& reply);

    ClusterOptions options_;
    Prng prng_;
    Network network_;
    std::vector<ReplicaSlot> replicas_;
    std::vector<ClientSlot> clients_;
    std::map<ClientId, uint32_t> client_slot_of_;

    uint64_t now_tick_ = 0;
    uint64_t logical_time_ = 0;  // orders invocations and completions for linearizability
    bool issuing_ = true;
    uint64_t op_budget_left_ = 0;
    uint64_t writes_invoked_ = 0;
    size_t completed_ops_ = 0;

    std::vector<CommittedOp> committed_;  // [op - 1]
    // The state machine's digest after each committed op ([0]: before any), from a reference
    // machine that applies the committed history.
    std::vector<uint64_t> digest_after_{0};
    RegisterMachine reference_;
    std::map<std::pair<ClientId, RequestNumber>, Op> executed_at_;
    // Snapshot durability: executions a whole-cell crash lost (allowed), with their results, so
    // that a late reply from before the crash is recognised.
    std::map<std::pair<ClientId, RequestNumber>, Bytes> lost_executions_;
    struct CellCrash {
        Op committed = 0;       // the history's length at the crash
        Op newest_snapshot = 0; // the newest durable snapshot then, and whose
        ReplicaIndex snapshot_replica = 0;
        Op quorum_snapshot = 0; // the newest that every quorum holds: the (f + 1)-th oldest
    };
    std::optional<CellCrash> cell_crash_;  // snapshot durability, until the cell runs again
    std::optional<Op> resumed_op_;
    std::vector<ClientOp> client_ops_;
    // Views some replica reached normal status in.
    std::set<View> views_established_{0};
    // For each view, the highest op first committed by a replica in that view; and, computed
    // from it, for a view v the highest op committed in a view before v.
    std::map<View, Op> committed_in_view_;
    std::map<View, Op> committed_before_view_;
    ReplicaCounters retired_counters_;  // of incarnations lost to crashes
    uint64_t corrupted_rejected_ = 0;
    StorageCounters storage_counters_;
    uint32_t forced_write_failures_ = 0;
    uint32_t forced_fetch_corruptions_ = 0;

    ElectrodeCounters electrode_counters_;
    std::vector<RingWakeup> ring_wakeups_;  // a heap: earliest first
    // Per (view, replica), the highest op a PrepareOK of that replica acknowledged, from its core
    // or its kernel, by any incarnation.
    std::map<std::pair<View, ReplicaIndex>, Op> acks_sent_;

    // Leases: per view, the real time its leader may first expire a session, and the latest
    // real time a client of its leader may believe it holds a lease to.
    std::map<View, double> may_expire_at_;
    std::map<View, double> granted_until_;
    LeaseCounters lease_counters_;

    std::optional<std::string> violation_;
};

}  // namespace voltlock::sim
