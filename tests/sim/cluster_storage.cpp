// Snapshots and data directories in the simulated cell: the shell's side of the contract as
// voltlockd carries it out (server/shell/node.cpp: write_snapshot, snapshot_writer_thread,
// fetch_snapshot_from, step()'s group commit of Persist effects; server/shell/storage.h: what a
// data directory accepts and what a restart loads), and the invariants about them (cluster.h).
#include <algorithm>

#include "cluster.h"
#include "core/overloaded.h"
#include "text.h"

namespace voltlock::sim {

namespace {

using ull = unsigned long long;

}  // namespace

// ---- The shell ----------------------------------------------------------------------------------

// Once per tick, before the timers: the snapshot writes and fetches that are done.
void Cluster::run_storage()
{
    for (ReplicaIndex r = 0; r < options_.replica_count && !violation_; r++) {
        ReplicaSlot& slot = replicas_[r];
        while (!violation_ && !crashed(r) && !slot.snapshot_writes.empty() &&
               slot.snapshot_writes.front().done_tick <= now_tick_) {
            SnapshotWrite write = std::move(slot.snapshot_writes.front());
            slot.snapshot_writes.pop_front();
            bool ok = true;
            if (!write.written) {
                // A full disk, now and then: nothing changes, the core keeps its log whole.
                // Durability sync: a snapshot older than one written meanwhile (before the next
                // effect) would drop the log persisted after that one: skipped, as failed.
                const bool superseded =
                    options_.durability_sync && write.op < slot.newest_snapshot_written;
                const bool fails = forced_write_failures_ > 0 ||
                                   prng_.chance(options_.snapshot_write_failure);
                if (forced_write_failures_ > 0) forced_write_failures_--;
                ok = !superseded && !fails;
                if (ok) {
                    store_snapshot(r, write.op, write.bytes);
                    slot.newest_snapshot_written = write.op;
                } else {
                    storage_counters_.snapshot_writes_failed++;
                }
                const char* outcome = ok           ? "written"
                                      : superseded ? "skipped (superseded)"
                                                   : "not written (disk full)";
                trace("r%u: snapshot of op %llu %s", r, ull(write.op), outcome);
            }
            step(r, SnapshotWritten{.op = write.op, .ok = ok});
            // Served once the core compacted up to it, and offers it (node.cpp).
            if (!violation_ && !crashed(r) && !write.bytes.empty() &&
                slot.replica->log_base() == write.op)
                slot.served_snapshot.emplace(write.op, std::move(write.bytes));
        }
        if (!violation_ && !crashed(r) && slot.snapshot_fetch &&
            slot.snapshot_fetch->done_tick <= now_tick_)
            complete_fetch(r);
    }
}

// WriteSnapshot: written in the background, in order, or at once; served once it is the core's
// log base (a fetched one at once, our own once written).
void Cluster::write_snapshot(ReplicaIndex r, const WriteSnapshot& write)
{
    ReplicaSlot& slot = replicas_[r];
    const Replica& replica = *slot.replica;
    storage_counters_.snapshot_writes++;
    // Its own state is encoded now, before it steps again, as voltlockd's child does.
    const Bytes bytes = replica.snapshot_to_write(write);
    // What it writes is the committed history's state at that op, which it committed.
    const auto decoded = decode_replica_snapshot(bytes);
    if (!decoded || decoded->op != write.op)
        return fail("r%u v%llu: wrote a snapshot of op %llu that does not decode as one", r,
                    ull(replica.view()), ull(write.op));
    if (write.op > replica.commit())
        return fail("r%u v%llu: wrote a snapshot of op %llu, past its commit number %llu", r,
                    ull(replica.view()), ull(write.op), ull(replica.commit()));
    RegisterMachine restored;
    if (!restored.restore(decoded->machine))
        return fail("r%u v%llu: wrote a snapshot of op %llu whose state machine part does not "
                    "restore",
                    r, ull(replica.view()), ull(write.op));
    if (write.op < digest_after_.size() &&
        restored.state_digest() != reference_digest(write.op))
        return fail("r%u v%llu: wrote a snapshot of op %llu whose state differs from the "
                    "committed history's at that op",
                    r, ull(replica.view()), ull(write.op));

    if (write.op == replica.log_base()) slot.served_snapshot.emplace(write.op, bytes);
    if (write.before_next_effect) {
        // The real shell stops if this write fails (a fetched snapshot with the log persisted
        // after it): not modelled as a failure.
        store_snapshot(r, write.op, bytes);
        slot.newest_snapshot_written = write.op;
        trace("r%u: snapshot of op %llu written before the next effect", r, ull(write.op));
        slot.snapshot_writes.push_front(
            SnapshotWrite{.op = write.op, .done_tick = now_tick_, .written = true});
        return;
    }
    const uint64_t after = slot.snapshot_writes.empty()
                               ? now_tick_
                               : std::max(now_tick_, slot.snapshot_writes.back().done_tick);
    slot.snapshot_writes.push_back(SnapshotWrite{
        .op = write.op,
        .bytes = bytes,
        .done_tick = after + prng_.between(0, options_.max_snapshot_write_ticks)});
}

// Storage::write_snapshot: drops the log entries the new snapshot covers, in the same atomic
// write; an older snapshot than the stored one (a replica that discarded its state for its
// cell's) replaces everything, the whole log too.
void Cluster::store_snapshot(ReplicaIndex r, Op op, const Bytes& bytes)
{
    DataDirectory& disk = replicas_[r].disk;
    if (op < disk.snapshot_op || op >= disk.last_op())
        disk.log.clear();
    else
        disk.log.erase(disk.log.begin(),
                       disk.log.begin() + static_cast<ptrdiff_t>(op - disk.snapshot_op));
    disk.snapshot_op = op;
    disk.snapshot = bytes;
}

// Storage::write with a log replacement: refused if it leaves a gap or rewrites what the
// snapshot covers; voltlockd then stops, since it can no longer keep its promise.
void Cluster::persist_log(ReplicaIndex r, const PersistLog& persist)
{
    DataDirectory& disk = replicas_[r].disk;
    if (persist.after > disk.last_op())
        return fail("r%u: PersistLog after op %llu, but its data directory's log ends at op %llu: "
                    "a gap (the shell would stop)",
                    r, ull(persist.after), ull(disk.last_op()));
    if (persist.after < disk.snapshot_op)
        return fail("r%u: PersistLog after op %llu, under its data directory's snapshot of op "
                    "%llu (the shell would stop)",
                    r, ull(persist.after), ull(disk.snapshot_op));
    disk.log.resize(persist.after - disk.snapshot_op);
    disk.log.insert(disk.log.end(), persist.entries.begin(), persist.entries.end());
}

// FetchSnapshot: one at a time; the core asks again (GetState) while it waits.
void Cluster::fetch_snapshot(ReplicaIndex r, const FetchSnapshot& fetch)
{
    ReplicaSlot& slot = replicas_[r];
    if (slot.snapshot_fetch) return;
    storage_counters_.snapshot_fetches++;
    slot.snapshot_fetch = SnapshotFetch{
        .from = fetch.from,
        .op = fetch.op,
        .done_tick = now_tick_ + prng_.between(1, options_.max_snapshot_fetch_ticks)};
    trace("r%u: fetching the snapshot of op %llu (or newer) from r%u", r, ull(fetch.op),
          fetch.from);
}

void Cluster::complete_fetch(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    const ReplicaIndex from = slot.snapshot_fetch->from;
    const Op op = slot.snapshot_fetch->op;
    slot.snapshot_fetch.reset();
    const ReplicaSlot& peer = replicas_[from];
    // The peer serves the snapshot of the op its core offered, or by now another one (HTTP 409:
    // the core asks again, and is offered that one), or nothing: down, or a broken connection.
    if (crashed(from) || !peer.served_snapshot || peer.served_snapshot->first != op ||
        prng_.chance(options_.snapshot_fetch_failure)) {
        storage_counters_.snapshot_fetches_failed++;
        trace("r%u: the fetch of r%u's snapshot of op %llu failed (it serves op %llu)", r, from,
              ull(op), ull(peer.served_snapshot ? peer.served_snapshot->first : 0));
        return;
    }
    Bytes bytes = peer.served_snapshot->second;
    const bool corrupt =
        forced_fetch_corruptions_ > 0 || prng_.chance(options_.snapshot_fetch_corruption);
    if (corrupt) {
        if (forced_fetch_corruptions_ > 0) forced_fetch_corruptions_--;
        storage_counters_.snapshot_fetches_corrupted++;
        bytes[prng_.below(bytes.size())] ^= static_cast<char>(prng_.between(1, 255));
    }
    trace("r%u: fetched r%u's snapshot of op %llu%s", r, from, ull(peer.served_snapshot->first),
          corrupt ? ", a byte flipped" : "");
    const uint64_t installed = slot.replica->counters().snapshots_installed;
    step(r, SnapshotFetched{.snapshot = std::move(bytes), .from = from});
    if (!violation_ && corrupt && slot.replica->counters().snapshots_installed != installed)
        fail("r%u v%llu: installed a fetched snapshot with a flipped byte", r,
             ull(slot.replica->view()));
}

// ---- Invariants ---------------------------------------------------------------------------------

// Durability sync: a message goes out only once what it promises is on disk (node.cpp writes
// the Persist effects before the effects after them).
void Cluster::check_sent_durably(ReplicaIndex r, const Message& message)
{
    const DataDirectory& disk = replicas_[r].disk;
    const auto require = [&](bool held, View view, Op op, const char* promise) {
        if (!held)
            fail("r%u sent %s before its data directory held %s (disk: v%llu last normal v%llu, "
                 "log to op %llu; message: v%llu op %llu)",
                 r, message_name(message), promise, ull(disk.view), ull(disk.last_normal_view),
                 ull(disk.last_op()), ull(view), ull(op));
    };
    std::visit(Overloaded{
                   [&](const PrepareOk& m) {
                       require(disk.view == m.view && disk.last_normal_view == m.view &&
                                   disk.last_op() >= m.op,
                               m.view, m.op, "its view and the ops it acknowledges");
                   },
                   [&](const Prepare& m) {
                       require(disk.view == m.view && disk.last_op() >= m.op, m.view, m.op,
                               "its view and the ops it prepares");
                   },
                   [&](const DoViewChange& m) {
                       require(disk.view == m.view &&
                                   disk.last_normal_view == m.last_normal_view &&
                                   disk.last_op() >= m.op,
                               m.view, m.op, "the view and log it reports");
                   },
                   [&](const StartView& m) {
                       require(disk.view == m.view && disk.last_normal_view == m.view &&
                                   disk.last_op() >= m.op,
                               m.view, m.op, "the view and log it starts");
                   },
                   [](const auto&) {},
               },
               message);
}

// Durability sync, at the end of every step: the data directory holds the log and the view (a
// replica that waits with nothing records its view only once it holds the cell's state).
void Cluster::check_disk(ReplicaIndex r)
{
    const ReplicaSlot& slot = replicas_[r];
    const Replica& replica = *slot.replica;
    const DataDirectory& disk = slot.disk;
    if (!replica.waits_with_nothing() &&
        (disk.view != replica.view() || disk.last_normal_view != replica.last_normal_view()))
        return fail("r%u v%llu: its data directory holds v%llu last normal v%llu after the step, "
                    "not its v%llu last normal v%llu",
                    r, ull(replica.view()), ull(disk.view), ull(disk.last_normal_view),
                    ull(replica.view()), ull(replica.last_normal_view()));
    if (disk.last_op() != replica.op())
        return fail("r%u v%llu: its data directory's log ends at op %llu after the step, its "
                    "log at op %llu",
                    r, ull(replica.view()), ull(disk.last_op()), ull(replica.op()));
    if (disk.snapshot_op < replica.log_base())
        return fail("r%u v%llu: compacted its log to op %llu, past its durable snapshot of op "
                    "%llu",
                    r, ull(replica.view()), ull(replica.log_base()), ull(disk.snapshot_op));
    if (replica.op() > std::max(disk.snapshot_op, replica.log_base()) &&
        disk.log.back() != replica.entry(replica.op()))
        fail("r%u v%llu: its data directory holds another entry at op %llu than its log", r,
             ull(replica.view()), ull(replica.op()));
}

// ---- Whole-cell crash, durability snapshot ---------------------------------------------------

// The first op committed after a whole-cell crash settles which state the cell runs again from:
// the one before it. (Until then a later view change among the restarting replicas may still
// pick another; once a quorum holds an op of the new history, it cannot.) The committed
// history is cut back to there; what the crash lost is forgotten (and a late reply to it
// recognised), and every check goes on.
void Cluster::cut_history(ReplicaIndex r, Op resumed)
{
    const CellCrash crash = *cell_crash_;
    cell_crash_.reset();
    resumed_op_ = resumed;
    const Replica& replica = *replicas_[r].replica;
    trace("r%u v%llu: the cell runs again from op %llu after a whole-cell crash (committed: %llu; "
          "durable snapshots: newest op %llu on r%u, every quorum's op %llu)",
          r, ull(replica.view()), ull(resumed), ull(crash.committed), ull(crash.newest_snapshot),
          crash.snapshot_replica, ull(crash.quorum_snapshot));
    // §4.2 among the restarting: the newest state of a quorum, so at least the (f + 1)-th
    // oldest durable snapshot. (Not necessarily the newest of all: a replica that restarts late
    // finds the cell running without it, its state ahead of the cell's.)
    if (resumed < crash.quorum_snapshot)
        return fail("whole-cell restart: the cell runs again from op %llu (r%u v%llu), without "
                    "ops up to op %llu, which every quorum holds in a durable snapshot",
                    ull(resumed), r, ull(replica.view()), ull(crash.quorum_snapshot));
    if (resumed > committed_.size())
        return fail("whole-cell restart: the cell runs again from op %llu, past op %zu, the "
                    "highest committed",
                    ull(resumed), committed_.size());
    for (Op op = resumed + 1; op <= committed_.size(); op++) {
        const CommittedOp& lost = committed_[op - 1];
        storage_counters_.committed_ops_lost++;
        if (!lost.result || lost.entry.client_id == kCellClientId) continue;
        const std::pair key{lost.entry.client_id, lost.entry.request_number};
        executed_at_.erase(key);
        lost_executions_[key] = *lost.result;
    }
    committed_.resize(resumed);
    digest_after_.resize(resumed + 1);
    reference_ = RegisterMachine();
    for (Op op = 1; op <= resumed; op++)
        if (committed_[op - 1].result) apply_to_reference(op, committed_[op - 1].entry);
    for (auto& [view, highest] : committed_in_view_) highest = std::min(highest, resumed);
    committed_before_view_.clear();
    // Operations the clients saw complete by an execution the crash lost: not completed after all.
    for (ClientOp& op : client_ops_) {
        const std::pair key{op.client_id, op.request_number};
        if (!op.completed_at || executed_at_.contains(key) || !lost_executions_.contains(key))
            continue;
        op.completed_at.reset();
        op.result.clear();
        storage_counters_.acknowledged_ops_lost++;
    }
}

}  // namespace voltlock::sim
