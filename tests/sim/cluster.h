// A whole VR cell in one process: the real replica core, each replica with its own
// RegisterMachine, VR clients, and the simulated network between them, all driven by one seed.
//
// Time moves in ticks. In each tick the clients act (new operations, retries), every live replica
// gets a Tick, the datagrams due are delivered one by one, and replicas that received something
// get a Flush (right after each message, or once after all of them, as the seed chooses).
// Every message crosses the network as bytes, through the real codec.
//
// After every step (one input to one replica, or one reply to one client) the cluster checks:
// - agreement: every replica commits the same entry at each op, and executing it gives the same
//   result, or every replica skips it as a duplicate request;
// - a replica's commit number never goes back (per incarnation) and never passes its op number,
//   and it executes its ops in order, each at most once;
// - a replica in normal status holds every op committed before its view began, as committed
//   (§4.2: the new view's log includes them); one that holds less has lost committed ops, which
//   the next view change could make final;
// - a reply a client accepts answers a request executed at exactly one op, with that op's result;
// - every message a replica emits encodes within the configured datagram size, names its sender,
//   and decodes back; every datagram corrupted in flight is rejected by the decoder.
// At the end of a run: linearizability (linearizability.h), and liveness: once the faults stop,
// every outstanding operation completes and the replicas converge (quiesce()).
//
// The first violation is kept, described, and stops the run.
#pragma once

#include <cstdint>
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
#include "linearizability.h"
#include "network.h"
#include "prng.h"

namespace voltlock::sim {

struct ClusterOptions {
    uint64_t seed = 1;
    uint8_t replica_count = 3;
    uint32_t cluster_id = 7;
    uint32_t max_message_bytes = VL_DEFAULT_MESSAGE_BYTES;
    NetworkFaults faults;

    // Workload.
    size_t client_count = 4;
    uint32_t client_retry_ticks = 40;
    uint32_t max_think_ticks = 2;        // a client pauses 0..this many ticks between operations
    double write_fraction = 0.6;         // the rest are reads
    uint32_t max_value_padding = 24;     // written values are unique, padded by up to this much
    uint64_t op_budget = 1000;           // operations the clients invoke, in all

    double flush_after_each_message = 0;  // else a replica is flushed once per tick
    uint32_t ms_per_tick = 10;
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

    // ---- Faults -------------------------------------------------------------------------------
    Network& network() { return network_; }
    // A crash loses everything in memory: the replica and its state machine are destroyed.
    void crash(ReplicaIndex r);
    // A new replica and a new state machine in the old one's place, recovering (§4.3) with a
    // nonce this replica never used before.
    void restart(ReplicaIndex r);
    bool crashed(ReplicaIndex r) const { return !replicas_[r].replica; }
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
    size_t views_established() const { return committed_when_view_began_.size() - 1; }
    uint64_t corrupted_rejected() const { return corrupted_rejected_; }
    const std::optional<std::string>& violation() const { return violation_; }
    // One line per replica: status, view, op, commit.
    std::string describe_replicas() const;

    void trace(const char* format, ...) __attribute__((format(printf, 2, 3)));
    // Records a violation (the first one wins); the run stops at the next step.
    void fail(const char* format, ...) __attribute__((format(printf, 2, 3)));

private:
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
    };
    struct ClientSlot {
        Client client;
        uint64_t ready_at_tick = 0;
        size_t outstanding_op = 0;  // index into client_ops_ while the client is waiting
    };

    ReplicaConfig replica_config(ReplicaIndex r) const;
    void run_clients();
    void invoke_next_op(uint32_t slot, std::vector<ClientSend>& sends);
    Bytes next_payload();
    void send_from_client(uint32_t slot, const ClientSend& send);

    void step(ReplicaIndex r, const Input& input);
    void carry_out(ReplicaIndex r, const Effects& effects);
    std::optional<std::vector<uint8_t>> encode_checked(ReplicaIndex r, const Message& message);
    void check_step(ReplicaIndex r, const Effects& effects);
    void check_executions(ReplicaIndex r, const Effects& effects,
                          std::map<Op, const Executed*>& executed);
    void record_commit(ReplicaIndex r, Op op, const Entry& entry,
                       const std::optional<Bytes>& result);
    void check_holds_committed_ops(ReplicaIndex r, bool entered_view);
    void note_state_change(ReplicaIndex r);

    void deliver(Datagram datagram);
    void deliver_to_replica(ReplicaIndex r, Message message);
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
    std::map<std::pair<ClientId, RequestNumber>, Op> executed_at_;
    std::vector<ClientOp> client_ops_;
    // For each view, how many ops were committed when its first replica (its leader) entered
    // normal status in it.
    std::map<View, Op> committed_when_view_began_{{0, 0}};
    ReplicaCounters retired_counters_;  // of incarnations lost to crashes
    uint64_t corrupted_rejected_ = 0;

    std::optional<std::string> violation_;
};

}  // namespace voltlock::sim
