// Electrode in the simulated cell: each replica's kernel (kernel_model.h, fast_path.h's
// decisions), the shell's side of the contract as voltlockd carries it out
// (server/shell/node.cpp: take_ring_record, deliver_ring_records, drain_kernel,
// feed_kernel_acks, broadcast, and the order of KernelStateChanged among the effects), and the
// invariants about them (cluster.h).
#include <algorithm>
#include <cstring>

#include "cluster.h"
#include "text.h"

namespace voltlock::sim {

namespace {

using ull = unsigned long long;

vl_header header_of(std::span<const uint8_t> bytes)
{
    vl_header h{};
    std::memcpy(&h, bytes.data(), std::min(bytes.size(), sizeof h));
    return h;
}

}  // namespace

// ---- The kernel ---------------------------------------------------------------------------------

void Cluster::start_kernel(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    slot.kernel_acks_fed.assign(options_.replica_count, 0);
    if (options_.electrode.empty() || !options_.electrode[r].attached) return;
    slot.kernel = std::make_unique<ReplicaKernel>(options_.cluster_id, r, options_.replica_count,
                                                  options_.electrode[r], electrode_counters_);
}

// XDP on a datagram for replica r. False if the kernel keeps it from the socket (answered or
// dropped); else `bytes` is what goes up.
bool Cluster::run_xdp(ReplicaIndex r, const Datagram& datagram, std::vector<uint8_t>& bytes)
{
    ReplicaKernel& kernel = *replicas_[r].kernel;
    const std::optional<ReplicaIndex> from =
        datagram.from.is_replica() ? std::optional(static_cast<ReplicaIndex>(datagram.from.index))
                                   : std::nullopt;
    bool wakeup = false;
    electrode_model::XdpPayloadOutcome out = kernel.xdp(bytes, from, wakeup);
    if (wakeup) schedule_ring_wakeup(r);
    if (datagram.corrupted &&
        (out.action == electrode_model::xdp_tx || out.rewritten ||
         (out.action == electrode_model::xdp_drop && out.stat != VL_STAT_Q_FORGED))) {
        fail("r%u's kernel acted on a datagram corrupted in flight: %s", r,
             vl_stat_name(out.stat));
        return false;
    }
    switch (out.action) {
    case electrode_model::xdp_tx: {
        const vl_header ack = header_of(out.payload);
        std::optional<Prepare> appended;
        if (out.stat == VL_STAT_FA_APPENDED) {
            DecodeResult decoded = decode(bytes, options_.cluster_id);
            if (!decoded.ok() || !std::holds_alternative<Prepare>(decoded.value().message)) {
                fail("r%u's kernel appended a datagram that does not decode as a Prepare", r);
                return false;
            }
            appended = std::get<Prepare>(std::move(decoded.value().message));
        }
        note_kernel_ack(r, ack.view, ack.op, appended ? &*appended : nullptr);
        if (violation_) return false;
        check_prepare_ok_sent(r, PrepareOk{.view = ack.view, .replica = r, .op = ack.op}, true);
        if (violation_) return false;
        network_.send(Address::replica(r), datagram.from, std::move(out.payload), now_tick_);
        return false;
    }
    case electrode_model::xdp_drop:
        return false;
    default:
        if (options_.socket_drop > 0 && prng_.chance(options_.socket_drop)) {
            electrode_counters_.socket_drops++;
            if (out.stat == VL_STAT_Q_COMPLETE) electrode_counters_.marked_acks_dropped++;
            trace("r%u: socket full, %s datagram dropped", r, vl_stat_name(out.stat));
            return false;
        }
        if (out.rewritten) bytes = std::move(out.payload);
        return true;
    }
}

void Cluster::note_kernel_ack(ReplicaIndex r, View view, Op op, const Prepare* appended)
{
    ReplicaSlot& slot = replicas_[r];
    if (!slot.kernel_acked || view > slot.kernel_ack_view) {
        slot.kernel_acked = true;
        slot.kernel_ack_view = view;
        slot.kernel_ack_op = 0;
        slot.kernel_acked_entries.clear();
    }
    if (view < slot.kernel_ack_view)
        return fail("r%u's kernel acknowledged op %llu in view %llu after acknowledging in view "
                    "%llu",
                    r, ull(op), ull(view), ull(slot.kernel_ack_view));
    slot.kernel_ack_op = std::max(slot.kernel_ack_op, op);
    if (appended) {
        const Op first = appended->op - appended->entries.size();
        for (size_t i = 0; i < appended->entries.size(); i++)
            slot.kernel_acked_entries.insert_or_assign(first + 1 + i, appended->entries[i]);
    }
    if (options_.verbose)
        trace("r%u v%llu: kernel %s op %llu", r, ull(view), appended ? "appends, acks" : "re-acks",
              ull(op));
    check_kernel(r);
}

// ---- The shell ----------------------------------------------------------------------------------

void Cluster::write_kernel_state(ReplicaIndex r, const vl_kernel_state& state)
{
    ReplicaSlot& slot = replicas_[r];
    if (!slot.kernel) return;
    if (state.view != slot.kernel->state().view)
        std::fill(slot.kernel_acks_fed.begin(), slot.kernel_acks_fed.end(), 0);
    slot.kernel->write_state(state);
}

// The process stalls: its kernel keeps running, its socket and timer wait (resume()).
void Cluster::maybe_stall(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    if (!slot.kernel || stalled(r) || slot.missed_ticks > 0 || options_.stall_per_tick <= 0 ||
        !prng_.chance(options_.stall_per_tick))
        return;
    stall(r, prng_.between(1, options_.max_stall_ticks));
}

void Cluster::stall(ReplicaIndex r, uint64_t ticks)
{
    replicas_[r].stalled_until_tick = now_tick_ + ticks;
    electrode_counters_.stalls++;
    trace("r%u: process stalled for %llu ticks", r, ull(ticks));
}

// voltlockd's on_timer(): the ring first, then each expiration's feed and tick.
void Cluster::on_timer(ReplicaIndex r, uint64_t expirations)
{
    if (replicas_[r].kernel) take_ring_records(r);
    for (uint64_t i = 0; i < expirations && !violation_ && !crashed(r); i++) {
        feed_kernel_acks(r);
        if (!violation_) step(r, Tick{now_tick_ * options_.ms_per_tick, local_clock_ms(r)});
    }
}

// The process runs again: its timer (all the expirations it missed, at most 4 acted on, as
// voltlockd's on_timer() does) and its socket are both ready, in either order.
void Cluster::resume(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    const uint64_t expirations = std::min<uint64_t>(slot.missed_ticks + 1, 4);
    slot.missed_ticks = 0;
    trace("r%u: process runs again: %zu datagrams queued, %zu ring records", r,
          slot.socket_queue.size(), ring_records(r));
    const bool socket_first = prng_.chance(0.5);
    if (socket_first) read_socket_queue(r);
    if (violation_ || crashed(r)) return;
    on_timer(r, expirations);
    if (violation_ || crashed(r)) return;
    step(r, Flush{});
    if (!socket_first) read_socket_queue(r);
}

// voltlockd's on_datagrams() for what queued up while the process was stalled.
void Cluster::read_socket_queue(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    if (slot.socket_queue.empty()) return;
    std::deque<Decoded> queued = std::move(slot.socket_queue);
    slot.socket_queue.clear();
    slot.needs_flush = false;  // one batch: the ring is read before its first datagram
    for (Decoded& decoded : queued) {
        if (violation_ || crashed(r)) return;
        // Not flushed after each: voltlockd flushes once after a batch.
        deliver_to_replica(r, std::move(decoded), true);
    }
    if (!violation_ && !crashed(r)) step(r, Flush{});
}

bool Cluster::wakes_later(const RingWakeup& a, const RingWakeup& b)
{
    if (a.tick != b.tick) return a.tick > b.tick;
    return a.tie_breaker > b.tie_breaker;
}

// A record landed with BPF_RB_FORCE_WAKEUP: the ring's epoll event, handled a little later.
void Cluster::schedule_ring_wakeup(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    if (slot.ring_wakeup_pending) return;
    slot.ring_wakeup_pending = true;
    ring_wakeups_.push_back(
        RingWakeup{.tick = now_tick_ + prng_.between(0, options_.ring_wakeup_ticks),
                   .tie_breaker = prng_.next(),
                   .replica = r,
                   .incarnation = slot.incarnation});
    std::push_heap(ring_wakeups_.begin(), ring_wakeups_.end(), wakes_later);
}

bool Cluster::ring_wakeup_due(std::optional<std::pair<uint64_t, uint64_t>> datagram_due) const
{
    if (ring_wakeups_.empty() || ring_wakeups_.front().tick > now_tick_) return false;
    const RingWakeup& wakeup = ring_wakeups_.front();
    return !datagram_due || std::pair(wakeup.tick, wakeup.tie_breaker) < *datagram_due;
}

// voltlockd's on_ring_records().
void Cluster::on_ring_wakeup(ReplicaIndex r, uint64_t incarnation)
{
    ReplicaSlot& slot = replicas_[r];
    if (crashed(r) || slot.incarnation != incarnation) return;  // for a process now gone
    slot.ring_wakeup_pending = false;
    if (stalled(r)) return;  // it reads the ring when it runs again
    take_ring_records(r);
    if (!violation_ && !crashed(r)) step(r, Flush{});
}

std::optional<vl_kernel_state> Cluster::kernel_state(ReplicaIndex r) const
{
    const ReplicaSlot& slot = replicas_[r];
    if (!slot.kernel) return std::nullopt;
    return slot.kernel->state();
}

size_t Cluster::ring_records(ReplicaIndex r) const
{
    const ReplicaSlot& slot = replicas_[r];
    return slot.kernel ? slot.kernel->ring().size() + slot.ring_records.size() : 0;
}

// voltlockd's take_ring_records(): what is in the ring, to the core in op order, up to a gap.
void Cluster::take_ring_records(ReplicaIndex r)
{
    consume_ring(r);
    deliver_ring_records(r, false, false);
}

// voltlockd's take_ring_record(), for every record in the ring.
void Cluster::consume_ring(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    for (const std::vector<uint8_t>& record : slot.kernel->consume_ring()) {
        electrode_counters_.ring_records_read++;
        DecodeResult decoded = decode(record, options_.cluster_id);
        if (!decoded.ok())
            return fail("r%u's kernel put a record in its ring that does not decode: %s", r,
                        decode_error_name(decoded.error()));
        if (auto* prepare = std::get_if<Prepare>(&decoded.value().message))
            slot.ring_records.take(std::move(*prepare));
    }
}

// voltlockd's deliver_ring_records(): in op order, waiting at a gap unless `past_gaps`.
void Cluster::deliver_ring_records(ReplicaIndex r, bool past_gaps, bool draining)
{
    ReplicaSlot& slot = replicas_[r];
    while (!violation_ && !crashed(r)) {
        std::optional<Prepare> next = slot.ring_records.next(slot.replica->op(), past_gaps);
        if (!next) return;
        electrode_counters_.ring_records_given++;
        if (draining) electrode_counters_.drained_records++;
        if (options_.verbose)
            trace("r%u v%llu: <- ring %s", r, ull(slot.replica->view()),
                  describe(Message(*next)).c_str());
        step(r, Receive{.message = std::move(*next), .flags = VL_FLAG_KERNEL_ACK});
    }
}

// voltlockd's drain_kernel(): the record that switched fast ack off is in the kernel (carried
// out before this), so every op it acknowledged is in the ring now.
void Cluster::drain_kernel(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    if (!slot.kernel)
        return fail("r%u asked to drain a kernel it does not run (fast_ack_allowed is off)", r);
    electrode_counters_.drains++;
    trace("r%u v%llu: drain the kernel: %zu records", r, ull(slot.replica->view()),
          ring_records(r));
    consume_ring(r);
    deliver_ring_records(r, true, true);
    if (violation_ || crashed(r)) return;
    step(r, KernelDrained{});
    slot.needs_flush = true;
}

// voltlockd's feed_kernel_acks(), before every tick.
void Cluster::feed_kernel_acks(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    if (!slot.kernel || !slot.replica->is_leader() ||
        !(slot.kernel->enabled() & VL_FAST_PATH_QUORUM))
        return;
    for (ReplicaIndex follower = 0; follower < options_.replica_count; follower++) {
        if (violation_ || crashed(r)) return;
        const vl_follower_ack acked = slot.kernel->acked_op(follower);
        if (follower == r || acked.view != slot.replica->view()) continue;
        if (acked.op <= slot.kernel_acks_fed[follower]) continue;
        slot.kernel_acks_fed[follower] = acked.op;
        const auto sent = acks_sent_.find({acked.view, follower});
        if (sent == acks_sent_.end() || sent->second < acked.op)
            return fail("r%u's kernel says r%u acknowledged op %llu in view %llu, which it did "
                        "not",
                        r, follower, ull(acked.op), ull(acked.view));
        electrode_counters_.kernel_acks_fed++;
        step(r, Receive{.message = PrepareOk{.view = acked.view, .replica = follower,
                                             .op = acked.op}});
    }
}

// ---- Invariants ---------------------------------------------------------------------------------

// The highest op n such that replica r holds every op <= n of `view` in its log or in ring
// records of that view (in the kernel's ring, or read by the shell and not yet delivered).
Op Cluster::held_through(ReplicaIndex r, View view) const
{
    const ReplicaSlot& slot = replicas_[r];
    std::vector<std::pair<Op, Op>> records;  // ops (first, last]
    if (slot.kernel) {
        for (const std::vector<uint8_t>& record : slot.kernel->ring()) {
            const vl_header h = header_of(record);
            if (h.type == VL_MSG_PREPARE && h.view == view && h.op >= h.batch_count)
                records.emplace_back(h.op - h.batch_count, h.op);
        }
    }
    for (const auto& [op, prepare] : slot.ring_records.held())
        if (prepare.view == view) records.emplace_back(op - prepare.entries.size(), op);
    std::sort(records.begin(), records.end());
    Op held = slot.replica->op();
    for (const auto& [first, last] : records) {
        if (first > held) break;
        held = std::max(held, last);
    }
    return held;
}

void Cluster::check_kernel(ReplicaIndex r)
{
    ReplicaSlot& slot = replicas_[r];
    if (!slot.kernel_acked) return;
    const Replica& replica = *slot.replica;
    const View view = slot.kernel_ack_view;
    if (replica.last_normal_view() > view) {
        // A later view is established here: its log holds what that view committed, and
        // nothing is owed to what was only acknowledged before.
        slot.kernel_acked = false;
        slot.kernel_acked_entries.clear();
        return;
    }
    if (replica.last_normal_view() < view)
        return fail("r%u's kernel acknowledged op %llu in view %llu, beyond its last normal "
                    "view %llu",
                    r, ull(slot.kernel_ack_op), ull(view), ull(replica.last_normal_view()));
    // What reached the log at the ops the kernel appended is what it acknowledged.
    auto& entries = slot.kernel_acked_entries;
    for (auto it = entries.begin(); it != entries.end() && it->first <= replica.op();) {
        // Compacted (a snapshot installed over them): committed, as the history has them.
        const Entry* held = it->first > replica.log_base()  ? &replica.entry(it->first)
                            : it->first <= committed_.size() ? &committed_[it->first - 1].entry
                                                             : nullptr;
        if (held && *held != it->second)
            return fail("r%u v%llu: its log holds another entry at op %llu than the one its "
                        "kernel acknowledged in view %llu",
                        r, ull(replica.view()), ull(it->first), ull(view));
        it = entries.erase(it);
    }
    const bool in_view = replica.status() == Status::normal && replica.view() == view;
    if (!in_view) {
        if (replica.op() < slot.kernel_ack_op)
            fail("r%u v%llu: %s, last normal view %llu, with %llu ops, without op %llu its "
                 "kernel acknowledged in view %llu (%zu ring records not in the log): the "
                 "kernel was not drained before the view change",
                 r, ull(replica.view()), status_name(replica.status()),
                 ull(replica.last_normal_view()), ull(replica.op()), ull(replica.op() + 1),
                 ull(view), ring_records(r));
        return;
    }
    if (slot.kernel_ack_op > replica.op()) {
        const Op held = held_through(r, view);
        if (held < slot.kernel_ack_op)
            fail("r%u v%llu: its kernel acknowledged op %llu, but op %llu is neither in its log "
                 "(%llu ops) nor in a ring record",
                 r, ull(view), ull(slot.kernel_ack_op), ull(held + 1), ull(replica.op()));
    }
}

// A PrepareOK(v, n), the core's or the kernel's, says the same: a follower in normal status in v
// holds every op <= n of v.
void Cluster::check_prepare_ok_sent(ReplicaIndex r, const PrepareOk& ack, bool by_kernel)
{
    const Replica& replica = *replicas_[r].replica;
    const char* who = by_kernel ? "kernel" : "core";
    if (replica.status() != Status::normal || replica.view() != ack.view || replica.is_leader())
        return fail("r%u's %s acknowledged op %llu in view %llu while %s%s in view %llu", r, who,
                    ull(ack.op), ull(ack.view), status_name(replica.status()),
                    replica.is_leader() ? " leader" : "", ull(replica.view()));
    const Op held = by_kernel ? held_through(r, ack.view) : replica.op();
    if (held < ack.op)
        return fail("r%u v%llu: its %s acknowledged op %llu, holding ops only up to %llu", r,
                    ull(ack.view), who, ull(ack.op), ull(held));
    Op& sent = acks_sent_[{ack.view, r}];
    sent = std::max(sent, ack.op);
}

// The leader's kernel passed up PrepareOK(v, n) marked: f followers acknowledged n in v.
void Cluster::check_quorum_mark(ReplicaIndex r, const PrepareOk& ack)
{
    size_t followers = 0;
    for (ReplicaIndex follower = 0; follower < options_.replica_count; follower++) {
        if (follower == r) continue;
        const auto sent = acks_sent_.find({ack.view, follower});
        if (sent != acks_sent_.end() && sent->second >= ack.op) followers++;
    }
    if (followers < vl_quorum_followers_needed(options_.replica_count))
        fail("r%u received PrepareOK(v%llu op %llu) marked as a quorum, acknowledged by %zu "
             "followers of the %u needed",
             r, ull(ack.view), ull(ack.op), followers,
             vl_quorum_followers_needed(options_.replica_count));
}

}  // namespace voltlock::sim
