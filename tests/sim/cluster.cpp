#include "cluster.h"

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdio>

#include "core/overloaded.h"
#include "text.h"

namespace voltlock::sim {

namespace {

using ull = unsigned long long;

}  // namespace

Cluster::Cluster(const ClusterOptions& options)
    : options_(options),
      prng_(options.seed),
      network_(options.replica_count, prng_.fork()),
      op_budget_left_(options.op_budget)
{
    VL_ASSERT(options.client_count >= 1, "a workload needs a client");
    VL_ASSERT(options.electrode.empty() || options.electrode.size() == options.replica_count,
              "Electrode options for every replica, or for none");
    network_.set_faults(options.faults);
    // As voltlockd: durability sync persists every batch before acknowledging it, which the
    // kernel cannot, so the follower fast-ack is not loaded.
    if (options.durability_sync)
        for (ElectrodeOptions& electrode : options_.electrode)
            electrode.enabled &= ~uint32_t{VL_FAST_PATH_FAST_ACK};
    replicas_.resize(options.replica_count);
    // From a stream of their own, so that the rest of a seed's world is what it was before
    // clocks drifted.
    Prng clocks(options.seed ^ 0xC10C'D41F'7000'0000);
    const double drift = static_cast<double>(options.max_clock_drift_ppm) / 1e6;
    for (ReplicaSlot& slot : replicas_) {
        const double position = options.clocks_at_drift_bound ? (clocks.chance(0.5) ? 1.0 : -1.0)
                                                              : 2 * clocks.fraction() - 1;
        slot.clock_rate = 1 + drift * position;
        slot.clock_offset_ms = clocks.between(0, 1'000'000);
    }
    for (ReplicaIndex r = 0; r < options.replica_count; r++) {
        if (!options.start_blank) {
            start_replica(r, StartFresh{});
            continue;
        }
        start_replica(r, StartRecovering{.nonce = new_nonce(r), .may_bootstrap = true});
        // Down (as after a restart) until it is in the cell: one that missed the cell's start
        // joins it by recovery, which needs a quorum running.
        replicas_[r].awaiting_recovery = true;
    }
    for (uint32_t i = 0; i < options.client_count; i++) {
        // Client ids look like real ones (random, 64-bit) rather than small integers, so that
        // nothing in the core can lean on them being dense.
        ClientId id = prng_.next();
        while (client_slot_of_.contains(id)) id = prng_.next();
        clients_.push_back(ClientSlot{Client(id, options.replica_count,
                                             options.client_retry_ticks)});
        client_slot_of_[id] = i;
    }
}

ReplicaConfig Cluster::replica_config(ReplicaIndex r) const
{
    ReplicaConfig config{
        .cluster_id = options_.cluster_id,
        .replica = r,
        .replica_count = options_.replica_count,
        .max_message_bytes = options_.max_message_bytes,
        .pipeline_ops = options_.pipeline_ops,
        .snapshot_every_ops = options_.snapshot_every_ops,
        .snapshot_every_ticks = options_.snapshot_every_ticks,
        .persist_log = options_.durability_sync,
        .persist_view = true,  // every simulated replica has a data directory
        .leader_lease_ms =
            uint64_t{ReplicaConfig{}.view_change_timeout_ticks} * options_.ms_per_tick,
    };
    // As voltlockd's replica_config(): the core lets the kernel acknowledge only where it can.
    if (!options_.electrode.empty()) {
        const ElectrodeOptions& electrode = options_.electrode[r];
        config.fast_ack_allowed = electrode.attached && (electrode.enabled & VL_FAST_PATH_FAST_ACK);
    }
    return config;
}

void Cluster::start_replica(ReplicaIndex r, Start start)
{
    ReplicaSlot& slot = replicas_[r];
    slot.machine = std::make_unique<RegisterMachine>();
    slot.replica = std::make_unique<Replica>(replica_config(r), *slot.machine, std::move(start));
    slot.last_status = slot.replica->status();
    slot.last_view = slot.replica->view();
    slot.last_commit = slot.replica->commit();  // what it restored, if anything
    start_kernel(r);
    check_digest(r);
}

// ---- Time -------------------------------------------------------------------------------------

void Cluster::run_tick()
{
    if (violation_) return;
    now_tick_++;
    run_clients();
    run_storage();

    std::vector<ReplicaIndex> order(options_.replica_count);
    for (ReplicaIndex r = 0; r < options_.replica_count; r++) order[r] = r;
    prng_.shuffle(order);
    for (ReplicaIndex r : order) {
        if (violation_) return;
        if (crashed(r)) continue;
        maybe_stall(r);
        if (stalled(r))
            replicas_[r].missed_ticks++;
        else if (replicas_[r].missed_ticks > 0)
            resume(r);
        else
            on_timer(r, 1);
    }
    // Datagrams and the ring buffers' wakeups, in the order they fall due.
    while (!violation_) {
        const std::optional<std::pair<uint64_t, uint64_t>> datagram_due =
            network_.next_due(now_tick_);
        if (ring_wakeup_due(datagram_due)) {
            std::pop_heap(ring_wakeups_.begin(), ring_wakeups_.end(), wakes_later);
            const RingWakeup wakeup = ring_wakeups_.back();
            ring_wakeups_.pop_back();
            on_ring_wakeup(wakeup.replica, wakeup.incarnation);
            continue;
        }
        if (!datagram_due) break;
        deliver(std::move(*network_.receive_due(now_tick_)));
    }
    for (ReplicaIndex r : order) {
        if (violation_) return;
        if (!crashed(r) && !stalled(r) && replicas_[r].needs_flush) step(r, Flush{});
    }
    if (!violation_) check_leases();
}

void Cluster::run_ticks(uint64_t ticks)
{
    for (uint64_t i = 0; i < ticks && !violation_; i++) run_tick();
}

bool Cluster::run_until(const std::function<bool()>& done, uint64_t max_ticks)
{
    for (uint64_t i = 0; i < max_ticks && !violation_; i++) {
        if (done()) return true;
        run_tick();
    }
    return !violation_ && done();
}

// ---- Faults -----------------------------------------------------------------------------------

void Cluster::crash(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    VL_ASSERT(slot.replica, "only a live replica can crash");
    const ReplicaCounters& lost = slot.replica->counters();
    retired_counters_.view_changes += lost.view_changes;
    retired_counters_.retransmissions += lost.retransmissions;
    retired_counters_.state_transfers += lost.state_transfers;
    retired_counters_.recoveries += lost.recoveries;
    retired_counters_.requests_dropped += lost.requests_dropped;
    retired_counters_.snapshots_written += lost.snapshots_written;
    retired_counters_.snapshots_installed += lost.snapshots_installed;
    retired_counters_.snapshots_refused += lost.snapshots_refused;
    retired_counters_.cell_restarts += lost.cell_restarts;
    retired_counters_.bootstraps += lost.bootstraps;
    trace("r%u v%llu: crash (%s op=%llu commit=%llu; disk: snapshot op %llu, log to op %llu)", r,
          ull(slot.replica->view()), status_name(slot.replica->status()),
          ull(slot.replica->op()), ull(slot.replica->commit()), ull(slot.disk.snapshot_op),
          ull(slot.disk.last_op()));
    // The shell's memory: the snapshot writes under way, the fetch, the snapshot it served.
    for (const SnapshotWrite& write : slot.snapshot_writes)
        if (!write.written) storage_counters_.snapshot_writes_lost++;
    slot.snapshot_writes.clear();
    slot.snapshot_fetch.reset();
    slot.served_snapshot.reset();
    slot.newest_snapshot_written = 0;
    slot.replica.reset();
    slot.machine.reset();
    slot.awaiting_recovery = false;
    slot.needs_flush = false;
    slot.last_commit = 0;
    // The daemon's process is gone, and with it the kernel's maps and the shell's state.
    slot.incarnation++;
    slot.kernel.reset();
    slot.ring_records.clear();
    slot.ring_wakeup_pending = false;
    slot.stalled_until_tick = 0;
    slot.missed_ticks = 0;
    slot.socket_queue.clear();
    slot.kernel_acked = false;
    slot.kernel_acked_entries.clear();
}

void Cluster::restart(ReplicaIndex r, std::optional<bool> without_recover)
{
    ReplicaSlot& slot = replicas_[r];
    VL_ASSERT(!slot.replica, "only a crashed replica can restart");
    const uint64_t nonce = new_nonce(r);
    // As voltlockd with and without --recover: without, it may start a new cell instead, if
    // every other replica says that it holds nothing.
    const bool may_bootstrap = without_recover ? *without_recover : prng_.chance(0.5);
    slot.disk = DataDirectory{};  // a new, empty disk
    start_replica(r, StartRecovering{.nonce = nonce, .may_bootstrap = may_bootstrap});
    slot.awaiting_recovery = true;
    storage_counters_.restarts_from_nothing++;
    trace("r%u: restart from nothing (disk lost), recovering with nonce %llx%s", r, ull(nonce),
          may_bootstrap ? " (no --recover)" : "");
}

uint64_t Cluster::new_nonce(ReplicaIndex r)
{
    uint64_t nonce = prng_.next();
    while (!replicas_[r].used_nonces.insert(nonce).second) nonce = prng_.next();
    return nonce;
}

void Cluster::restart_from_disk(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    VL_ASSERT(!slot.replica, "only a crashed replica can restart");
    DataDirectory& disk = slot.disk;
    if (disk.holds_nothing()) {
        // As voltlockd: a directory its replica never held the cell's state in is a new one;
        // and started as systemd starts it, without --recover (a cell of new replicas whose
        // power was cut before any held a state waited for ever when they all had it: vr_sim
        // seed 4922 x 3, whole-cell crashes in durability snapshot).
        trace("r%u: its data directory holds nothing yet", r);
        return restart(r, /*without --recover*/ true);
    }
    const uint64_t nonce = new_nonce(r);
    start_replica(r, StartRestored{.nonce = nonce,
                                   .snapshot = disk.snapshot,
                                   .log = disk.log,
                                   .view = disk.view,
                                   .last_normal_view = disk.last_normal_view,
                                   .clean_stop = disk.clean_stop});
    // As voltlockd: durability snapshot keeps a log only for the start after a clean stop.
    if (!options_.durability_sync) disk.log.clear();
    disk.clean_stop = false;
    slot.awaiting_recovery = true;
    storage_counters_.restarts_from_disk++;
    // voltlockd serves the snapshot it restored, if the core took it.
    if (disk.snapshot_op != 0 && slot.replica->log_base() == disk.snapshot_op)
        slot.served_snapshot.emplace(disk.snapshot_op, disk.snapshot);
    trace("r%u: restart from its data directory (snapshot op %llu, log to op %llu, v%llu "
          "last normal v%llu): %s op=%llu commit=%llu, nonce %llx",
          r, ull(disk.snapshot_op), ull(disk.last_op()), ull(disk.view),
          ull(disk.last_normal_view), status_name(slot.replica->status()),
          ull(slot.replica->op()), ull(slot.replica->commit()), ull(nonce));
}

void Cluster::stop(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    VL_ASSERT(slot.replica, "only a live replica can stop");
    storage_counters_.graceful_stops++;
    trace("r%u v%llu: graceful stop (%s op=%llu commit=%llu)", r, ull(slot.replica->view()),
          status_name(slot.replica->status()), ull(slot.replica->op()),
          ull(slot.replica->commit()));
    std::erase_if(slot.snapshot_writes, [](const SnapshotWrite& write) { return !write.written; });
    step(r, Stop{});  // what a stalled process's socket still holds is lost, as at exit
    if (!violation_ && !slot.replica->stopped())
        fail("r%u: did not stop on Stop (the kernel drain it asked for never came back)", r);
    if (!violation_) crash(r);
}

void Cluster::stop_cell()
{
    storage_counters_.cell_stops++;
    trace("fault: the whole cell stops gracefully");
    for (ReplicaIndex r = 0; r < options_.replica_count; r++)
        if (!crashed(r)) stop(r);
}

void Cluster::crash_cell()
{
    storage_counters_.cell_crashes++;
    trace("fault: the whole cell crashes");
    for (ReplicaIndex r = 0; r < options_.replica_count; r++)
        if (!crashed(r)) crash(r);
    if (options_.durability_sync) return;  // nothing committed may be lost: no cut
    // Snapshot durability: the cell comes back from a snapshot at least as new as the newest
    // on disk now; what it committed after that may be lost.
    CellCrash crash{.committed = committed_.size()};
    std::vector<Op> snapshots;
    for (ReplicaIndex r = 0; r < options_.replica_count; r++) {
        snapshots.push_back(replicas_[r].disk.snapshot_op);
        if (replicas_[r].disk.snapshot_op > crash.newest_snapshot) {
            crash.newest_snapshot = replicas_[r].disk.snapshot_op;
            crash.snapshot_replica = r;
        }
    }
    std::sort(snapshots.begin(), snapshots.end());
    crash.quorum_snapshot = snapshots[max_faulty()];  // the (f + 1)-th oldest
    if (cell_crash_)  // crashed again before it ran: the history is still the same
        crash.quorum_snapshot = std::max(crash.quorum_snapshot, cell_crash_->quorum_snapshot);
    cell_crash_ = crash;
}

bool Cluster::down(ReplicaIndex r) const
{
    return crashed(r) || replicas_[r].awaiting_recovery;
}

size_t Cluster::down_count() const
{
    size_t count = 0;
    for (ReplicaIndex r = 0; r < options_.replica_count; r++) count += down(r) ? 1 : 0;
    return count;
}

// ---- Clients ----------------------------------------------------------------------------------

size_t Cluster::outstanding_ops() const
{
    size_t waiting = 0;
    for (const ClientSlot& slot : clients_) waiting += slot.client.waiting() ? 1 : 0;
    return waiting;
}

void Cluster::run_clients()
{
    for (uint32_t i = 0; i < clients_.size() && !violation_; i++) {
        ClientSlot& slot = clients_[i];
        std::vector<ClientSend> sends;
        if (!slot.client.waiting() && ops_remaining() > 0 && now_tick_ >= slot.ready_at_tick)
            invoke_next_op(i, sends);
        slot.client.on_tick(now_tick_, sends);
        for (const ClientSend& send : sends) send_from_client(i, send);
    }
}

void Cluster::invoke_next_op(uint32_t slot, std::vector<ClientSend>& sends)
{
    ClientSlot& client_slot = clients_[slot];
    op_budget_left_--;
    client_slot.client.invoke(next_payload(), now_tick_, sends);
    const Request& request = client_slot.client.outstanding();
    client_slot.outstanding_op = client_ops_.size();
    client_ops_.push_back(ClientOp{.client_id = request.client_id,
                                   .request_number = request.request_number,
                                   .payload = request.payload,
                                   .invoked_at = ++logical_time_});
    trace("c%u: invoke req %llu %s", slot, ull(request.request_number),
          RegisterMachine::is_write(request.payload) ? "write" : "read");
}

Bytes Cluster::next_payload()
{
    if (!prng_.chance(options_.write_fraction)) return RegisterMachine::read_op();
    // Every value is unique, so a read's version and digest pin down exactly which writes
    // preceded it; random padding varies how many entries fit in one Prepare.
    Bytes value = strprintf("v%llu.", ull(++writes_invoked_));
    value.append(prng_.below(options_.max_value_padding + 1), 'x');
    return RegisterMachine::write_op(value);
}

void Cluster::send_from_client(uint32_t slot, const ClientSend& send)
{
    std::vector<uint8_t> bytes = encode(send.request, options_.cluster_id);
    VL_ASSERT(!bytes.empty(), "the simulator's requests always encode");
    network_.send(Address::client(slot), Address::replica(send.to), std::move(bytes), now_tick_);
}

void Cluster::accept_reply(ClientSlot& slot, const Reply& reply)
{
    ClientOp& op = client_ops_[slot.outstanding_op];
    completed_ops_++;
    slot.ready_at_tick = now_tick_ + prng_.below(options_.max_think_ticks + 1);

    const auto executed = executed_at_.find({reply.client_id, reply.request_number});
    const auto lost = lost_executions_.find({reply.client_id, reply.request_number});
    if (lost != lost_executions_.end() && lost->second == reply.result &&
        (executed == executed_at_.end() ||
         committed_[executed->second - 1].result != reply.result)) {
        // A late reply from before a whole-cell crash, to an execution the crash lost (snapshot
        // durability allows it): for the history, the operation never completed.
        storage_counters_.acknowledged_ops_lost++;
        trace("client %llu accepted a reply to req %llu whose execution a whole-cell crash lost",
              ull(reply.client_id), ull(reply.request_number));
        return;
    }
    op.completed_at = ++logical_time_;
    op.result = reply.result;
    if (executed == executed_at_.end()) {
        fail("client %llu accepted a reply (from r%u v%llu) to req %llu, which no replica has "
             "executed",
             ull(reply.client_id), reply.replica, ull(reply.view), ull(reply.request_number));
        return;
    }
    const CommittedOp& committed = committed_[executed->second - 1];
    if (committed.result != reply.result)
        fail("client %llu accepted a reply (from r%u v%llu) to req %llu whose result differs from "
             "what op %llu's execution gave",
             ull(reply.client_id), reply.replica, ull(reply.view), ull(reply.request_number),
             ull(executed->second));
}

// ---- Replicas ---------------------------------------------------------------------------------

void Cluster::step(ReplicaIndex r, const Input& input)
{
    ReplicaSlot& slot = replicas_[r];
    if (std::holds_alternative<Flush>(input)) slot.needs_flush = false;
    Effects effects;
    slot.replica->step(input, effects);
    check_step(r, effects);
    if (!violation_ && slot.kernel) check_kernel(r);
    if (!violation_) carry_out(r, effects);
}

void Cluster::carry_out(ReplicaIndex r, const Effects& effects)
{
    bool drain = false;
    for (const Effect& effect : effects) {
        if (violation_) return;
        std::visit(
            Overloaded{
                [&](const Send& send) {
                    if (send.to >= options_.replica_count) {
                        fail("r%u sent %s to r%u, outside the cell", r,
                             describe(send.message).c_str(), send.to);
                        return;
                    }
                    if (const auto* ack = std::get_if<PrepareOk>(&send.message))
                        check_prepare_ok_sent(r, *ack, false);
                    if (options_.durability_sync) check_sent_durably(r, send.message);
                    if (auto bytes = encode_checked(r, send.message))
                        send_to_replica(r, send.to, *bytes);
                },
                [&](const Broadcast& broadcast) {
                    if (options_.durability_sync) check_sent_durably(r, broadcast.message);
                    broadcast_from(r, broadcast.message);
                },
                [&](const SendReply& send) {
                    const auto client = client_slot_of_.find(send.reply.client_id);
                    if (client == client_slot_of_.end()) {
                        fail("r%u replied to client %llu, which does not exist", r,
                             ull(send.reply.client_id));
                        return;
                    }
                    if (auto bytes = encode_checked(r, send.reply))
                        network_.send(Address::replica(r), Address::client(client->second),
                                      std::move(*bytes), now_tick_);
                },
                [](const Executed&) {},  // checked in check_step
                [&](const KernelStateChanged& changed) {
                    // Into the kernel before any effect that follows it (docs/electrode.md).
                    write_kernel_state(r, changed.state);
                },
                // After the others, as voltlockd does: the record that switches the fast path
                // off comes first.
                [&](const DrainKernel&) { drain = true; },
                [&](const WriteSnapshot& write) { write_snapshot(r, write); },
                [&](const PersistLog& persist) { persist_log(r, persist); },
                [&](const PersistView& persist) {
                    replicas_[r].disk.view = persist.view;
                    replicas_[r].disk.last_normal_view = persist.last_normal_view;
                    replicas_[r].disk.view_stored = true;
                },
                [&](const PersistStopped&) { replicas_[r].disk.clean_stop = true; },
                [&](const FetchSnapshot& fetch) { fetch_snapshot(r, fetch); },
                [&](const SnapshotInstalled& installed) {
                    trace("r%u v%llu: installed the snapshot of op %llu", r,
                          ull(replicas_[r].replica->view()), ull(installed.op));
                },
            },
            effect);
    }
    if (!violation_ && options_.durability_sync) check_disk(r);
    if (drain && !violation_) drain_kernel(r);
}

// TC egress, then the wire: to `to`, and to every peer TC clones the datagram to.
void Cluster::send_to_replica(ReplicaIndex r, ReplicaIndex to, const std::vector<uint8_t>& bytes)
{
    if (ReplicaKernel* kernel = replicas_[r].kernel.get()) {
        const uint32_t clones = kernel->tc_egress(bytes, to).clone_to;
        for (ReplicaIndex peer = 0; peer < options_.replica_count; peer++)
            if (clones & (1u << peer))
                network_.send(Address::replica(r), Address::replica(peer), bytes, now_tick_);
    }
    network_.send(Address::replica(r), Address::replica(to), bytes, now_tick_);
}

// voltlockd's broadcast(): a Prepare or Commit leaves once, marked VL_FLAG_BROADCAST, for TC to
// clone, when the broadcast path is on (every peer resolves in the simulation); anything else,
// or without it, one datagram per peer.
void Cluster::broadcast_from(ReplicaIndex r, const Message& message)
{
    const ReplicaKernel* kernel = replicas_[r].kernel.get();
    const bool clonable =
        std::holds_alternative<Prepare>(message) || std::holds_alternative<Commit>(message);
    if (kernel && clonable && (kernel->enabled() & VL_FAST_PATH_BROADCAST) &&
        options_.replica_count > 1) {
        if (const auto bytes = encode_checked(r, message, VL_FLAG_BROADCAST))
            send_to_replica(r, r == 0 ? 1 : 0, *bytes);
        return;
    }
    const auto bytes = encode_checked(r, message);
    if (!bytes) return;
    for (ReplicaIndex to = 0; to < options_.replica_count; to++)
        if (to != r) send_to_replica(r, to, *bytes);
}

std::optional<std::vector<uint8_t>> Cluster::encode_checked(ReplicaIndex r, const Message& message,
                                                            uint16_t flags)
{
    std::vector<uint8_t> bytes = encode(message, options_.cluster_id, flags);
    if (bytes.empty()) {
        fail("r%u emitted a message that does not encode: %s (%zu bytes)", r,
             describe(message).c_str(), encoded_size(message));
        return std::nullopt;
    }
    if (bytes.size() > options_.max_message_bytes) {
        fail("r%u emitted a %zu-byte datagram, over its %u-byte limit: %s", r, bytes.size(),
             options_.max_message_bytes, describe(message).c_str());
        return std::nullopt;
    }
    if (bytes[offsetof(vl_header, replica)] != r) {
        fail("r%u emitted a message naming r%u as its sender: %s", r,
             bytes[offsetof(vl_header, replica)], describe(message).c_str());
        return std::nullopt;
    }
    return bytes;
}

void Cluster::check_step(ReplicaIndex r, const Effects& effects)
{
    ReplicaSlot& slot = replicas_[r];
    const Replica& replica = *slot.replica;
    const Op commit = replica.commit();
    if (discarded_state(r, effects)) {
        // Durability snapshot: a state that the cell left behind (it restarted without it, or
        // from another) is replaced whole; the replica starts again from op 0, and every op it
        // commits from there is checked as any other.
        storage_counters_.states_discarded++;
        trace("r%u v%llu %s: discards its restored state (commit %llu), starts again from "
              "nothing",
              r, ull(replica.view()), status_name(replica.status()), ull(slot.last_commit));
        slot.last_commit = 0;
    }
    if (commit < slot.last_commit)
        return fail("r%u v%llu: commit number went back from %llu to %llu", r,
                    ull(replica.view()), ull(slot.last_commit), ull(commit));
    if (commit > replica.op())
        return fail("r%u v%llu: commit number %llu is beyond its op number %llu", r,
                    ull(replica.view()), ull(commit), ull(replica.op()));

    std::map<Op, const Executed*> executed;
    check_executions(r, effects, executed);
    for (Op op = slot.last_commit + 1; op <= commit && !violation_; op++) {
        const auto execution = executed.find(op);
        if (execution != executed.end()) {
            record_commit(r, op, execution->second->entry, execution->second->result);
        } else if (op <= replica.log_base()) {
            // Jumped over by installing a snapshot: the digest check below covers it.
            if (op > committed_.size())
                return fail("r%u v%llu: installed a snapshot of op %llu, beyond op %zu, the "
                            "highest any replica committed",
                            r, ull(replica.view()), ull(replica.log_base()), committed_.size());
        } else {
            record_commit(r, op, replica.entry(op), std::nullopt);  // a duplicate, skipped
        }
    }
    slot.last_commit = commit;
    if (!violation_) check_digest(r);
    if (!violation_) note_state_change(r);
}

// Durability snapshot, a replica whose state was not yet the cell's history (restored from its
// data directory, or taken from one that was) replaced it whole, by a snapshot or from op 1:
// its commit number went back, or it executes ops it had committed.
bool Cluster::discarded_state(ReplicaIndex r, const Effects& effects) const
{
    const ReplicaSlot& slot = replicas_[r];
    if (options_.durability_sync || slot.last_commit == 0) return false;
    if (slot.replica->commit() < slot.last_commit) return true;
    bool replaced = false;
    bool again = false;
    for (const Effect& effect : effects) {
        if (std::holds_alternative<SnapshotInstalled>(effect)) replaced = true;
        if (const auto* execution = std::get_if<Executed>(&effect)) {
            replaced = replaced || execution->op == 1;
            again = again || execution->op <= slot.last_commit;
        }
    }
    return replaced && again;
}

// Whatever way a replica reached its commit number (executing, installing or restoring a
// snapshot), its state machine holds what the committed history holds there.
void Cluster::check_digest(ReplicaIndex r)
{
    const ReplicaSlot& slot = replicas_[r];
    const Op commit = slot.replica->commit();
    if (commit >= digest_after_.size()) return;  // ahead of a history a whole-cell crash cut
    // A restored state the cell may have left behind, until it is replaced (it serves nobody).
    if (slot.replica->state_unconfirmed()) return;
    if (slot.machine->state_digest() != reference_digest(commit))
        fail("r%u v%llu %s: its state machine's digest at commit %llu differs from the committed "
             "history's (log base %llu)",
             r, ull(slot.replica->view()), status_name(slot.replica->status()), ull(commit),
             ull(slot.replica->log_base()));
}

// A replica executes each op once, in order, after it is committed (the commit number covers it
// by the end of the step) and as its log has it.
void Cluster::check_executions(ReplicaIndex r, const Effects& effects,
                               std::map<Op, const Executed*>& executed)
{
    const Replica& replica = *replicas_[r].replica;
    Op previous = replicas_[r].last_commit;
    for (const Effect& effect : effects) {
        const auto* execution = std::get_if<Executed>(&effect);
        if (!execution) continue;
        if (execution->op <= previous || execution->op > replica.commit())
            return fail("r%u v%llu: executed op %llu out of order (after op %llu; commit %llu)",
                        r, ull(replica.view()), ull(execution->op), ull(previous),
                        ull(replica.commit()));
        if (execution->op <= replica.log_base())
            return fail("r%u v%llu: executed op %llu, and compacted it in the same step (log "
                        "base %llu)",
                        r, ull(replica.view()), ull(execution->op), ull(replica.log_base()));
        if (execution->entry != replica.entry(execution->op))
            return fail("r%u v%llu: executed op %llu with an entry other than its log holds", r,
                        ull(replica.view()), ull(execution->op));
        executed[execution->op] = execution;
        previous = execution->op;
    }
}

void Cluster::record_commit(ReplicaIndex r, Op op, const Entry& entry,
                            const std::optional<Bytes>& result)
{
    if (cell_crash_) cut_history(r, op - 1);
    if (violation_) return;
    if (op > committed_.size() + 1)
        return fail("r%u committed op %llu, past op %zu + 1, the highest any replica committed",
                    r, ull(op), committed_.size());
    if (op == committed_.size() + 1) {
        committed_.push_back(CommittedOp{entry, result});
        if (result) apply_to_reference(op, entry);
        digest_after_.push_back(reference_.state_digest());
        Op& highest = committed_in_view_[replicas_[r].replica->view()];
        highest = std::max(highest, op);
        committed_before_view_.clear();
        if (!result || entry.client_id == kCellClientId) return;
        const auto [it, first] = executed_at_.try_emplace({entry.client_id, entry.request_number},
                                                          op);
        if (!first)
            fail("r%u: client %llu req %llu executed twice, at op %llu and op %llu", r,
                 ull(entry.client_id), ull(entry.request_number), ull(it->second), ull(op));
        return;
    }
    const CommittedOp& agreed = committed_[op - 1];
    if (agreed.entry != entry)
        return fail("agreement: r%u committed client %llu req %llu at op %llu, where another "
                    "replica committed client %llu req %llu",
                    r, ull(entry.client_id), ull(entry.request_number), ull(op),
                    ull(agreed.entry.client_id), ull(agreed.entry.request_number));
    if (agreed.result.has_value() != result.has_value())
        return fail("agreement: r%u %s op %llu (client %llu req %llu), which another replica %s",
                    r, result ? "executed" : "skipped as a duplicate", ull(op),
                    ull(entry.client_id), ull(entry.request_number),
                    result ? "skipped as a duplicate" : "executed");
    if (agreed.result != result)
        fail("agreement: r%u's result for op %llu differs from another replica's", r, ull(op));
}

void Cluster::check_holds_committed_ops(ReplicaIndex r, bool entered_view)
{
    const Replica& replica = *replicas_[r].replica;
    views_established_.insert(replica.view());
    if (cell_crash_) return;  // which history the cell runs again from is not settled yet
    // A state that waits for a restart fence (the leader of a restart's view that is being
    // left behind, say) commits nothing until then, and gives way whole if another is chosen.
    if (replica.state_unconfirmed()) return;
    const Op required = committed_before(replica.view());
    if (replica.op() < required)
        return fail("r%u v%llu: in normal status with %llu ops, without op %llu, committed in an "
                    "earlier view",
                    r, ull(replica.view()), ull(replica.op()), ull(replica.op() + 1));
    if (!entered_view) return;
    for (Op op = replica.log_base() + 1; op <= required; op++)  // the rest: the digest check
        if (replica.entry(op) != committed_[op - 1].entry)
            return fail("r%u v%llu: entered normal status with another entry at op %llu than "
                        "was committed there in an earlier view",
                        r, ull(replica.view()), ull(op));
}

// As Replica::execute(): the cell's own entries (the restart fence) are no client's request.
void Cluster::apply_to_reference(Op op, const Entry& entry)
{
    if (entry.client_id == kCellClientId)
        reference_.skip_past_lost_writes();
    else
        reference_.apply(op, entry);
}

Op Cluster::committed_before(View view)
{
    const auto [memo, added] = committed_before_view_.try_emplace(view, 0);
    if (added)
        for (auto it = committed_in_view_.begin();
             it != committed_in_view_.end() && it->first < view; ++it)
            memo->second = std::max(memo->second, it->second);
    return memo->second;
}

void Cluster::note_state_change(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    const Replica& replica = *slot.replica;
    const bool changed = replica.status() != slot.last_status || replica.view() != slot.last_view;
    if (replica.status() == Status::normal) {
        check_holds_committed_ops(r, changed || slot.awaiting_recovery);
        if (slot.awaiting_recovery) {
            slot.awaiting_recovery = false;
            trace("r%u v%llu: recovered, op=%llu commit=%llu", r, ull(replica.view()),
                  ull(replica.op()), ull(replica.commit()));
        }
    }
    if (changed) {
        trace("r%u v%llu: %s%s (was %s v%llu), op=%llu commit=%llu", r, ull(replica.view()),
              status_name(replica.status()), replica.is_leader() ? " leader" : "",
              status_name(slot.last_status), ull(slot.last_view), ull(replica.op()),
              ull(replica.commit()));
        slot.last_status = replica.status();
        slot.last_view = replica.view();
    }
}

// ---- Delivery ---------------------------------------------------------------------------------

void Cluster::deliver(Datagram datagram)
{
    // A replica's kernel sees the datagram first, and may keep it from the socket.
    std::vector<uint8_t> bytes = std::move(datagram.bytes);
    if (datagram.to.is_replica()) {
        const auto r = static_cast<ReplicaIndex>(datagram.to.index);
        if (!crashed(r) && replicas_[r].kernel && !run_xdp(r, datagram, bytes)) return;
    }
    DecodeResult decoded = decode(bytes, options_.cluster_id);
    if (datagram.corrupted) {
        if (decoded.ok())
            return fail("a datagram corrupted in flight decoded as %s",
                        describe(decoded.value().message).c_str());
        corrupted_rejected_++;
        trace("corrupted datagram rejected: %s", decode_error_name(decoded.error()));
        return;
    }
    if (!decoded.ok())
        return fail("a datagram the cluster sent does not decode: %s",
                    decode_error_name(decoded.error()));
    if (datagram.to.is_replica()) {
        const auto r = static_cast<ReplicaIndex>(datagram.to.index);
        if (!crashed(r) && stalled(r)) {
            // Into the socket's receive queue, for when the process runs again.
            ReplicaSlot& slot = replicas_[r];
            if (slot.socket_queue.size() < options_.socket_queue_limit)
                slot.socket_queue.push_back(std::move(decoded.value()));
            else
                electrode_counters_.socket_drops++;
            return;
        }
        deliver_to_replica(r, std::move(decoded.value()));
    } else
        deliver_to_client(datagram.to.index, decoded.value().message);
}

void Cluster::deliver_to_replica(ReplicaIndex r, Decoded decoded, bool batched)
{
    if (crashed(r)) return;
    // voltlockd reads the ring before each batch from its socket: what the kernel acknowledged
    // first. A batch ends with a Flush.
    if (replicas_[r].kernel && !replicas_[r].needs_flush) take_ring_records(r);
    if (violation_ || crashed(r)) return;
    if (options_.verbose) {
        const Replica& replica = *replicas_[r].replica;
        trace("r%u v%llu %s: <- %s%s", r, ull(replica.view()), status_name(replica.status()),
              describe(decoded.message).c_str(),
              decoded.flags & VL_FLAG_QUORUM ? " [quorum]" : "");
    }
    if (const auto* ack = std::get_if<PrepareOk>(&decoded.message);
        ack && (decoded.flags & VL_FLAG_QUORUM))
        check_quorum_mark(r, *ack);
    if (violation_) return;
    step(r, Receive{.message = std::move(decoded.message), .flags = decoded.flags});
    if (violation_ || crashed(r)) return;
    if (!batched && prng_.chance(options_.flush_after_each_message))
        step(r, Flush{});
    else
        replicas_[r].needs_flush = true;
}

void Cluster::deliver_to_client(uint32_t slot, const Message& message)
{
    const auto* reply = std::get_if<Reply>(&message);
    if (!reply) return fail("client %u was sent %s", slot, describe(message).c_str());
    ClientSlot& client_slot = clients_[slot];
    if (!client_slot.client.on_reply(*reply)) return;
    trace("c%u: complete req %llu (reply from r%u v%llu)", slot, ull(reply->request_number),
          reply->replica, ull(reply->view));
    accept_reply(client_slot, *reply);
}

// ---- End of run -------------------------------------------------------------------------------

bool Cluster::converged() const
{
    if (crashed(0)) return false;
    const Replica& first = *replicas_[0].replica;
    for (const ReplicaSlot& slot : replicas_) {
        if (!slot.replica) return false;
        const Replica& replica = *slot.replica;
        if (replica.status() != Status::normal || replica.view() != first.view() ||
            replica.op() != first.op() || replica.commit() != first.op())
            return false;
    }
    return true;
}

bool Cluster::quiesce(uint64_t max_ticks)
{
    stop_new_ops();
    network_.heal();
    network_.set_faults(NetworkFaults{});
    options_.stall_per_tick = 0;
    // After a whole-cell crash every replica comes back from its data directory; otherwise some
    // may have lost their disk.
    size_t crashed_count = 0;
    for (ReplicaIndex r = 0; r < options_.replica_count; r++) crashed_count += crashed(r) ? 1 : 0;
    const bool cell_down = crashed_count > max_faulty();
    for (ReplicaIndex r = 0; r < options_.replica_count; r++) {
        if (!crashed(r)) continue;
        if (!cell_down && prng_.chance(options_.lose_disk_on_restart))
            restart(r);
        else
            restart_from_disk(r);
    }
    options_.snapshot_write_failure = 0;
    options_.snapshot_fetch_failure = 0;
    options_.snapshot_fetch_corruption = 0;
    trace("quiesce: faults stopped, %zu operations outstanding", outstanding_ops());
    if (run_until([&] { return outstanding_ops() == 0 && converged(); }, max_ticks)) {
        // Every op ever committed (since the last cut) is still there.
        if (replica(0).commit() < committed_.size())
            fail("the cell converged at op %llu, without ops up to %zu, which were committed",
                 ull(replica(0).commit()), committed_.size());
        return !violation_;
    }
    if (!violation_) {
        std::string waiting;
        for (const ClientSlot& slot : clients_)
            if (slot.client.waiting())
                waiting += strprintf(" client %llu req %llu;", ull(slot.client.id()),
                                     ull(slot.client.outstanding().request_number));
        fail("liveness: after %llu calm ticks, %zu operations outstanding (%s ) and replicas "
             "%s: %s",
             ull(max_ticks), outstanding_ops(), waiting.c_str(),
             converged() ? "converged" : "apart", describe_replicas().c_str());
    }
    return false;
}

void Cluster::check_linearizability()
{
    if (violation_) return;
    if (auto failure = check_linearizable(client_ops_, executions()))
        fail("linearizability: %s", failure->c_str());
}

// ---- Observations -----------------------------------------------------------------------------

const Replica& Cluster::replica(ReplicaIndex r) const
{
    VL_ASSERT(!crashed(r), "a crashed replica has no state to look at");
    return *replicas_[r].replica;
}

std::optional<ReplicaIndex> Cluster::leader() const
{
    std::optional<ReplicaIndex> leader;
    for (ReplicaIndex r = 0; r < options_.replica_count; r++) {
        if (crashed(r) || !replica(r).is_leader()) continue;
        if (!leader || replica(r).view() > replica(*leader).view()) leader = r;
    }
    return leader;
}

std::vector<Execution> Cluster::executions() const
{
    std::vector<Execution> executions;
    for (Op op = 1; op <= committed_.size(); op++) {
        const CommittedOp& committed = committed_[op - 1];
        if (committed.result && committed.entry.client_id != kCellClientId)
            executions.push_back(Execution{op, committed.entry, *committed.result});
    }
    return executions;
}

ReplicaCounters Cluster::total_counters() const
{
    ReplicaCounters total = retired_counters_;
    for (const ReplicaSlot& slot : replicas_) {
        if (!slot.replica) continue;
        const ReplicaCounters& c = slot.replica->counters();
        total.view_changes += c.view_changes;
        total.retransmissions += c.retransmissions;
        total.state_transfers += c.state_transfers;
        total.recoveries += c.recoveries;
        total.requests_dropped += c.requests_dropped;
        total.snapshots_written += c.snapshots_written;
        total.snapshots_installed += c.snapshots_installed;
        total.snapshots_refused += c.snapshots_refused;
        total.cell_restarts += c.cell_restarts;
        total.bootstraps += c.bootstraps;
    }
    return total;
}

std::string Cluster::describe_replicas() const
{
    std::string text;
    for (ReplicaIndex r = 0; r < options_.replica_count; r++) {
        if (!text.empty()) text += "; ";
        if (crashed(r)) {
            text += strprintf("r%u crashed", r);
            continue;
        }
        const Replica& replica = *replicas_[r].replica;
        text += strprintf("r%u %s v%llu op=%llu commit=%llu base=%llu", r,
                          status_name(replica.status()), ull(replica.view()), ull(replica.op()),
                          ull(replica.commit()), ull(replica.log_base()));
    }
    return text;
}

void Cluster::trace(const char* format, ...)
{
    if (!options_.verbose) return;
    va_list args;
    va_start(args, format);
    const std::string line = vstrprintf(format, args);
    va_end(args);
    std::printf("t=%llu %s\n", ull(now_tick_), line.c_str());
}

void Cluster::fail(const char* format, ...)
{
    if (violation_) return;
    va_list args;
    va_start(args, format);
    violation_ = strprintf("t=%llu: ", ull(now_tick_)) + vstrprintf(format, args);
    va_end(args);
    trace("VIOLATION %s", violation_->c_str());
}

}  // namespace voltlock::sim
