#include "core/replica.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "core/assert.h"
#include "core/checksum.h"
#include "core/overloaded.h"

namespace voltlock {

const char* status_name(Status status)
{
    switch (status) {
    case Status::normal: return "normal";
    case Status::view_change: return "view_change";
    case Status::recovering: return "recovering";
    }
    return "unknown";
}

const char* ignored_name(Ignored reason)
{
    switch (reason) {
    case Ignored::stopped: return "stopped";
    case Ignored::not_draining: return "not_draining";
    case Ignored::unknown_sender: return "unknown_sender";
    case Ignored::not_leader: return "not_leader";
    case Ignored::reserved_client: return "reserved_client";
    case Ignored::oversized: return "oversized";
    case Ignored::old_request: return "old_request";
    case Ignored::in_flight: return "in_flight";
    case Ignored::queue_full: return "queue_full";
    case Ignored::recovering: return "recovering";
    case Ignored::stale_view: return "stale_view";
    case Ignored::other_view: return "other_view";
    case Ignored::not_from_leader: return "not_from_leader";
    case Ignored::own_view: return "own_view";
    case Ignored::view_started: return "view_started";
    case Ignored::leader_heard: return "leader_heard";
    case Ignored::in_view: return "in_view";
    case Ignored::not_view_leader: return "not_view_leader";
    case Ignored::behind_commit: return "behind_commit";
    case Ignored::not_answering: return "not_answering";
    case Ignored::other_recovery: return "other_recovery";
    case Ignored::awaiting_answers: return "awaiting_answers";
    case Ignored::ahead_of_cell: return "ahead_of_cell";
    case Ignored::beyond_log: return "beyond_log";
    case Ignored::log_not_frozen: return "log_not_frozen";
    case Ignored::not_fetching: return "not_fetching";
    case Ignored::reordered: return "reordered";
    case Ignored::duplicate: return "duplicate";
    case Ignored::bad_snapshot: return "bad_snapshot";
    case Ignored::write_failed: return "write_failed";
    case Ignored::outdated: return "outdated";
    }
    return "unknown";
}

Replica::Replica(const ReplicaConfig& config, StateMachine& machine, Start start)
    : config_(config),
      machine_(machine),
      view_change_asked_(config.replica_count),
      acked_(config.replica_count, 0),
      answered_tick_(config.replica_count, 0),
      echoed_heartbeat_ms_(config.replica_count, 0),
      start_view_change_from_(config.replica_count, false)
{
    VL_ASSERT(config.replica_count >= 1 && config.replica_count <= VL_MAX_REPLICAS &&
                  config.replica_count % 2 == 1,
              "a cell has an odd number of replicas, 1 to VL_MAX_REPLICAS");
    VL_ASSERT(config.replica < config.replica_count, "replica index within the cell");
    VL_ASSERT(config.max_message_bytes >= VL_MIN_MESSAGE_BYTES &&
                  config.max_message_bytes <= VL_MAX_MESSAGE_BYTES,
              "message size within the wire limits");
    VL_ASSERT(config.heartbeat_ticks < config.view_change_timeout_ticks,
              "the leader speaks more often than followers lose patience");
    VL_ASSERT(config.retransmit_ticks >= 1 && config.pipeline_ops >= 1, "positive timers");
    if (const auto* recovering = std::get_if<StartRecovering>(&start)) {
        status_ = Status::recovering;
        recovery_nonce_base_ = recovering->nonce;
        may_bootstrap_ = recovering->may_bootstrap;
    } else if (const auto* restored = std::get_if<StartRestored>(&start)) {
        status_ = Status::recovering;
        recovery_nonce_base_ = restored->nonce;
        const auto snapshot = decode_replica_snapshot(restored->snapshot);
        if (restored->snapshot.empty() || (snapshot && restore_snapshot(*snapshot))) {
            restored_ = true;
            restored_whole_ = config.persist_log || restored->clean_stop;
            snapshot_fence_view_ = fence_view_;
            state_unconfirmed_ = !restored_whole_;
            if (restored_whole_) log_ = restored->log;
            // Durability sync persists our view and last normal view, never older than our own
            // snapshot's; a snapshot we fetched and installed carries its writer's, which are not
            // ours: claiming its last normal view for the log persisted after it (ops of an older
            // view) could win a view change against that view's log (vr_sim seed 191 x 5).
            // Durability snapshot has only the snapshot's (view 0's empty state without one), and
            // no log after it; and the view persisted since, so as never to run a view again
            // (without a snapshot the restart's views reused the cell's earlier ones, and a
            // leader of the reused view 2 extended a lease past view 3's grant: vr_sim seed 5375
            // x 3, whole-cell crashes in durability snapshot).
            if (restored_whole_)
                std::tie(view_, last_normal_view_) =
                    std::pair{restored->view, restored->last_normal_view};
            else
                std::tie(view_, last_normal_view_) =
                    std::pair{std::max(snapshot ? snapshot->view : View{0}, restored->view),
                              snapshot ? snapshot->last_normal_view : View{0}};
        } else {
            counters_.snapshots_refused += 1;  // recovers from nothing, as StartRecovering
        }
        persisted_view_ = {view_, last_normal_view_};
    }
    been_normal_ = status_ == Status::normal;  // a fresh cell's replica starts in normal status
}

void Replica::step(const Input& input, Effects& out)
{
    traces_.clear();
    if (stopped_) return ignore(__func__, Ignored::stopped);
    out_ = &out;
    if (must_fence_kernel(input)) {
        // Off first (the record emitted below says fast_ack 0), then drain, then this input.
        waiting_for_drain_ = input;
        emit_kernel_state();
        out_->push_back(DrainKernel{});
    } else {
        dispatch(input);
        emit_kernel_state();
    }
    maybe_take_snapshot();
    persist_before_sending();
    free_released_entries();
    check_invariants();
    out_ = nullptr;
}

void Replica::dispatch(const Input& input)
{
    std::visit(Overloaded{
                   [&](const Tick& tick) { on_tick(tick); },
                   [&](const Flush&) { on_flush(); },
                   [&](const Receive& receive) { on_receive(receive); },
                   [&](const KernelDrained&) { on_kernel_drained(); },
                   [&](const SnapshotWritten& written) { on_snapshot_written(written); },
                   [&](const SnapshotFetched& fetched) { on_snapshot_fetched(fetched); },
                   [&](const Stop&) { on_stop(); },
               },
               input);
}

bool Replica::must_fence_kernel(const Input& input) const
{
    // Only a follower whose kernel may have acknowledged ops since the last drain needs it (the
    // fast path may be off already: a catch-up fetch turns it off without draining), and only
    // for inputs that can take it out of normal status or into another view: the view change
    // it is about to join must see every op the kernel acknowledged on its behalf. Erring
    // towards fencing costs a drain; erring the other way loses committed ops (vr_sim's kernel
    // model found the fetch case).
    if (!kernel_may_hold_acks_ || waiting_for_drain_) return false;
    // A follower that lost its leader asks first, its fast path on: it fences the tick it
    // starts the view change in.
    if (std::holds_alternative<Tick>(input))
        return leader_suspected(tick_ + 1) && view_change_asked_by_quorum(tick_ + 1);
    // What a stop writes must hold every op the kernel acknowledged.
    if (std::holds_alternative<Stop>(input)) return true;
    const auto* receive = std::get_if<Receive>(&input);
    if (!receive) return false;
    return std::visit(Overloaded{
                          // A follower that hears its leader ignores asking (a deaf
                          // replica's, again and again).
                          [&](const StartViewChange& m) {
                              return m.view > view_ && (!m.asking || leader_suspected(tick_) ||
                                                        status_ != Status::normal);
                          },
                          [&](const DoViewChange& m) { return m.view > view_; },
                          [&](const StartView& m) { return m.view > view_; },
                          [&](const Prepare& m) { return m.view > view_; },
                          [&](const Commit& m) { return m.view > view_; },
                          [](const auto&) { return false; },
                      },
                      receive->message);
}

void Replica::on_kernel_drained()
{
    if (!waiting_for_drain_) return ignore(__func__, Ignored::not_draining);
    kernel_may_hold_acks_ = false;  // the fast path is off and its ring is in the log
    const Input input = std::move(*waiting_for_drain_);
    waiting_for_drain_.reset();
    dispatch(input);  // a Tick or a Receive (must_fence_kernel)
}

void Replica::on_receive(const Receive& receive)
{
    const Message& message = receive.message;
    if (const auto* request = std::get_if<Request>(&message)) {
        on_request(*request);
        return;
    }
    // Everything else comes from a replica of this cell other than us.
    const ReplicaIndex sender = sender_of(message);
    if (sender >= config_.replica_count || sender == config_.replica)
        return ignore(__func__, Ignored::unknown_sender);
    std::visit(Overloaded{
                   [](const Request&) {},
                   [&](const Reply& m) { on_reply(m); },
                   [&](const Prepare& m) { on_prepare(m, receive.flags & VL_FLAG_KERNEL_ACK); },
                   [&](const PrepareOk& m) {
                       on_prepare_ok(m, receive.flags & VL_FLAG_QUORUM);
                   },
                   [&](const Commit& m) { on_commit(m); },
                   [&](const StartViewChange& m) { on_start_view_change(m); },
                   [&](const DoViewChange& m) { on_do_view_change(m); },
                   [&](const StartView& m) { on_start_view(m); },
                   [&](const Recovery& m) { on_recovery(m); },
                   [&](const RecoveryResponse& m) { on_recovery_response(m); },
                   [&](const GetState& m) { on_get_state(m); },
                   [&](const NewState& m) { on_new_state(m); },
                   [&](const SnapshotOffer& m) { on_snapshot_offer(m); },
                   [&](const CommitOk& m) { on_commit_ok(m); },
                   [&](const Replies& m) {
                       for (const BatchedReply& item : m.items) on_reply(reply_of(m, item));
                   },
                   [&](const Requests& m) {
                       for (const BatchedRequest& item : m.items)
                           on_request(request_of(m, item));
                   },
               },
               message);
}

// ---- Time ---------------------------------------------------------------------------------

void Replica::on_tick(const Tick& tick)
{
    tick_ += 1;
    now_ms_ = tick.now_ms;
    monotonic_ms_ = tick.monotonic_ms;
    switch (status_) {
    case Status::normal:
        if (is_leader()) {
            if (!leader_hears_quorum()) {
                start_view_change(view_ + 1);  // nobody answers: a view that can commit
                break;
            }
            // Busy or not: the followers' answers are how the leader knows they hear it.
            if (tick_ - last_heartbeat_tick_ >= config_.heartbeat_ticks) send_heartbeat();
            retransmit_prepares();
            break;
        }
        note_commit_progress();
        if (leader_suspected(tick_)) suspect_leader();  // §4.2: the leader went quiet, or deaf
        if (status_ == Status::normal) retransmit_get_state();
        break;
    case Status::view_change:
        // A view change moves on to the next view when it does not finish in time (§4.2), if
        // a quorum took part in it or its view started (and we wait for its log): one that too
        // few joined waits for them at the same view. A replica that hears nothing (a leader
        // that stepped down for that) would otherwise force the cell into one view change after
        // another, each a pause in service, while its cut lasts.
        if ((do_view_change_sent_ || joining(view_)) &&
            tick_ - status_since_tick_ >= view_change_timeout_ticks()) {
            failed_view_changes_ += 1;
            start_view_change(view_ + 1);  // §4.2: this view change did not finish in time
        } else if (joining(view_)) {
            retransmit_get_state();  // the view has started; only its log is missing
        } else if (tick_ - status_messages_sent_tick_ >= config_.retransmit_ticks) {
            counters_.retransmissions += 1;
            status_messages_sent_tick_ = tick_;
            broadcast(StartViewChange{.view = view_, .replica = config_.replica});
            if (do_view_change_sent_ && leader() != config_.replica)
                send(leader(), own_do_view_change());
            retransmit_get_state();
        }
        break;
    case Status::recovering:
        if (recovery_round_ == 0 ||
            tick_ - status_since_tick_ >= config_.view_change_timeout_ticks) {
            start_recovery_round();
            break;
        }
        maybe_restart_cell();  // its wait for late answers may be over
        if (status_ != Status::recovering || maybe_bootstrap()) break;  // or for view 0's leader
        if (!recovery_target_ &&
                   tick_ - status_messages_sent_tick_ >= config_.retransmit_ticks) {
            counters_.retransmissions += 1;
            status_messages_sent_tick_ = tick_;
            broadcast(Recovery{.replica = config_.replica, .nonce = recovery_nonce()});
        } else {
            retransmit_get_state();
        }
        break;
    }
}

// ---- Normal operation (§4.1) ----------------------------------------------------------------

void Replica::on_request(const Request& m)
{
    if (!is_leader() || m.client_id == kCellClientId) {
        counters_.requests_dropped += 1;  // §4.1: only the leader handles requests
        return ignore(__func__, is_leader() ? Ignored::reserved_client : Ignored::not_leader);
    }
    if (m.payload.size() > max_entry_payload_bytes(config_.max_message_bytes)) {
        counters_.requests_dropped += 1;  // could never be replicated in one datagram
        return ignore(__func__, Ignored::oversized);
    }
    // §4.1 step 2: the client table gives at-most-once execution. The payload's CRC tells a
    // retry from a number used again for another request, which is refused, not answered with
    // the first request's result.
    const uint32_t request_crc = crc32c(m.payload);
    if (const auto it = client_table_.find(m.client_id); it != client_table_.end()) {
        if (m.request_number < it->second.request_number) {
            counters_.requests_dropped += 1;
            return ignore(__func__, Ignored::old_request);
        }
        if (m.request_number == it->second.request_number) {
            if (it->second.request_crc.value_or(request_crc) != request_crc)
                return reply_reused(m.client_id, m.request_number);
            return reply(m.client_id, it->second);
        }
    }
    if (const auto it = requests_in_flight_.find(m.client_id);
        it != requests_in_flight_.end() && it->second.request_number >= m.request_number) {
        if (it->second.request_number == m.request_number &&
            it->second.request_crc != request_crc)
            return reply_reused(m.client_id, m.request_number);
        return ignore(__func__, Ignored::in_flight);
    }
    if (pending_requests_.size() >= config_.request_queue_limit) {
        counters_.requests_dropped += 1;
        return ignore(__func__, Ignored::queue_full);
    }
    requests_in_flight_[m.client_id] = {m.request_number, request_crc};
    pending_requests_.push_back(m);
    send_prepares(false);
}

void Replica::on_flush()
{
    if (is_leader()) send_prepares(true);
}

void Replica::send_prepares(bool flush_partial)
{
    const size_t budget = config_.max_message_bytes - VL_HEADER_BYTES;
    while (!pending_requests_.empty() && op() - commit_ < config_.pipeline_ops) {
        const size_t room = config_.pipeline_ops - (op() - commit_);
        size_t count = 0;
        size_t bytes = 0;
        while (count < pending_requests_.size() && count < room) {
            const size_t entry_bytes =
                VL_ENTRY_FIXED_BYTES + pending_requests_[count].payload.size();
            if (bytes + entry_bytes > budget) break;
            bytes += entry_bytes;
            count += 1;
        }
        const bool full = count < pending_requests_.size() || count == room;
        if (!full && !flush_partial) return;  // wait for more requests or the shell's Flush

        Prepare prepare{.view = view_, .replica = config_.replica, .commit = commit_};
        prepare.entries.reserve(count);
        log_changed_after(op());
        for (size_t i = 0; i < count; i++) {
            Request& request = pending_requests_.front();
            log_.push_back(Entry{.timestamp_ms = now_ms_,
                                 .client_id = request.client_id,
                                 .request_number = request.request_number,
                                 .payload = std::move(request.payload)});
            prepare.entries.push_back(log_.back());
            pending_requests_.pop_front();
        }
        prepare.op = op();
        prepares_in_flight_.push_back({op() - count + 1, op(), tick_});
        if (config_.replica_count > 1) broadcast(std::move(prepare));
        advance_commit_as_leader();
    }
}

void Replica::on_prepare(const Prepare& m, bool kernel_acked)
{
    if (status_ == Status::recovering) return ignore(__func__, Ignored::recovering, m.op);
    if (m.view < view_) return ignore(__func__, Ignored::stale_view, m.op);
    if (m.replica != leader_of(m.view)) return ignore(__func__, Ignored::not_from_leader, m.op);
    if (m.view > view_ || status_ == Status::view_change) {
        join_view(m.view, commit_, m.op);  // the StartView for this view never reached us
        return;
    }
    if (is_leader()) return ignore(__func__, Ignored::own_view, m.op);
    VL_ASSERT(status_ == Status::normal && m.view == view_ && m.replica == leader(),
              "a Prepare acted on is our leader's, in our view");
    last_heard_from_leader_tick_ = tick_;
    const Op first_op = m.op - m.entries.size();  // the op before the batch
    if (!install_entries(first_op, m.entries)) {
        // §5.2: ops are missing before this batch; fetch them rather than wait.
        if (!fetch_) start_fetch(Fetch::Purpose::catch_up, leader(), op(), m.op);
        adopt_commit_as_follower(m.commit);
        return;
    }
    if (!kernel_acked)  // the kernel's PrepareOK said the same already
        send(leader(), PrepareOk{.view = view_, .replica = config_.replica, .op = op()});
    adopt_commit_as_follower(m.commit);
}

void Replica::on_prepare_ok(const PrepareOk& m, bool quorum_marked)
{
    if (!is_leader()) return ignore(__func__, Ignored::not_leader, m.op);
    if (m.view != view_) return ignore(__func__, Ignored::other_view, m.op);
    VL_ASSERT(m.replica != config_.replica, "on_receive passes no message of our own");
    acked_[m.replica] = std::max(acked_[m.replica], std::min(m.op, op()));
    // Electrode §4.3: a marked acknowledgement is the one that completed a quorum the kernel
    // counted; it dropped the others, which therefore never reach acked_.
    advance_commit_as_leader(quorum_marked ? std::min(m.op, op()) : 0);
    send_prepares(false);
}

void Replica::on_commit(const Commit& m)
{
    if (status_ == Status::recovering) return ignore(__func__, Ignored::recovering, m.commit);
    if (m.view < view_) return ignore(__func__, Ignored::stale_view, m.commit);
    if (m.replica != leader_of(m.view))
        return ignore(__func__, Ignored::not_from_leader, m.commit);
    if (m.view > view_ || status_ == Status::view_change) {
        join_view(m.view, commit_, m.commit);
        return;
    }
    if (is_leader()) return ignore(__func__, Ignored::own_view, m.commit);
    VL_ASSERT(status_ == Status::normal && m.view == view_ && m.replica == leader(),
              "a Commit acted on is our leader's, in our view");
    last_heard_from_leader_tick_ = tick_;
    adopt_commit_as_follower(m.commit);
    send(leader(), CommitOk{.view = view_, .replica = config_.replica, .heartbeat = m.heartbeat});
}

// A Reply to a Request this replica sent for its API: the leader of m.view had committed every op
// up to m.commit when it answered. A follower of that view learns the commit number from it as
// from a Commit (§4.1 step 7), so that what it applies catches up with the answer at once, not
// at the next Prepare or heartbeat: a linearizable read at this replica waits for exactly that.
// Ops it does not hold yet are left to the Prepares and heartbeats (no fetch from here).
void Replica::on_reply(const Reply& m)
{
    if (status_ == Status::recovering) return ignore(__func__, Ignored::recovering, m.commit);
    if (status_ != Status::normal || m.view != view_)
        return ignore(__func__, Ignored::other_view, m.commit);
    if (m.replica != leader()) return ignore(__func__, Ignored::not_from_leader, m.commit);
    if (is_leader()) return ignore(__func__, Ignored::own_view, m.commit);
    commit_to(std::min(m.commit, op()));
}

void Replica::send_heartbeat()
{
    last_heartbeat_tick_ = tick_;
    broadcast(Commit{.view = view_,
                     .replica = config_.replica,
                     .commit = commit_,
                     .heartbeat = monotonic_ms_});
}

void Replica::on_commit_ok(const CommitOk& m)
{
    if (!is_leader()) return ignore(__func__, Ignored::not_leader);
    if (m.view != view_) return ignore(__func__, Ignored::other_view);
    answered_tick_[m.replica] = tick_;
    // Our own send times only: an echo from the future would extend the lease unearned.
    if (m.heartbeat <= monotonic_ms_)
        echoed_heartbeat_ms_[m.replica] = std::max(echoed_heartbeat_ms_[m.replica], m.heartbeat);
}

bool Replica::holds_leader_lease(uint64_t monotonic_now_ms) const
{
    if (!is_leader()) return false;
    // The f-th newest heartbeat among the followers' echoes (we confirm ourselves). Each
    // follower that echoed it was still in this view when it arrived, so no later view had
    // started when we sent it (a view starts with f + 1 replicas that left ours).
    std::vector<uint64_t> echoed = echoed_heartbeat_ms_;
    echoed[config_.replica] = UINT64_MAX;
    std::nth_element(echoed.begin(), echoed.begin() + (quorum() - 1), echoed.end(),
                     std::greater<uint64_t>());
    const uint64_t confirmed = echoed[quorum() - 1];
    if (confirmed == UINT64_MAX) return true;  // a cell of one
    return confirmed != 0 && monotonic_now_ms < confirmed + config_.leader_lease_ms;
}

bool Replica::leader_hears_quorum() const
{
    // f followers answered a heartbeat within the timeout (the leader answers itself).
    std::vector<uint64_t> answered = answered_tick_;
    answered[config_.replica] = tick_;
    std::nth_element(answered.begin(), answered.begin() + (quorum() - 1), answered.end(),
                     std::greater<uint64_t>());
    return tick_ - answered[quorum() - 1] < config_.view_change_timeout_ticks;
}

void Replica::note_commit_progress()
{
    // A follower whose PrepareOKs (its own or its kernel's) reach the leader sees the commit
    // number move within a heartbeat or two; a leader that cannot hear them commits nothing.
    // The wait restarts whenever the commit number moves: a leader that commits a long log
    // piece by piece (after a whole-cell restart) is making progress, however far the end is.
    if (awaiting_commit_ && commit_ == awaiting_commit_at_ && op() > commit_) return;
    awaiting_commit_ = op() > commit_ && !fetch_;
    awaiting_commit_at_ = commit_;
    awaiting_commit_since_tick_ = tick_;
}

bool Replica::leader_suspected(uint64_t at_tick) const
{
    const uint64_t timeout = config_.view_change_timeout_ticks;
    return at_tick - last_heard_from_leader_tick_ >= timeout ||
           (awaiting_commit_ && at_tick - awaiting_commit_since_tick_ >= timeout);
}

void Replica::suspect_leader()
{
    if (const std::optional<View> view = view_change_asked_by_quorum(tick_)) {
        start_view_change(*view);
        return;
    }
    if (tick_ - status_messages_sent_tick_ < config_.retransmit_ticks) return;
    status_messages_sent_tick_ = tick_;
    broadcast(StartViewChange{.view = view_ + 1, .replica = config_.replica, .asking = true});
}

std::optional<View> Replica::view_change_asked_by_quorum(uint64_t at_tick) const
{
    size_t asking = 0;
    View view = view_ + 1;
    for (ReplicaIndex r = 0; r < config_.replica_count; r++) {
        const ViewChangeAsked& asked = view_change_asked_[r];
        if (r == config_.replica || asked.view <= view_ ||
            at_tick - asked.tick >= config_.view_change_timeout_ticks)
            continue;
        asking += 1;
        view = std::max(view, asked.view);
    }
    if (asking < quorum() - 1) return std::nullopt;
    return view;
}

void Replica::advance_commit_as_leader(Op quorum_counted_op)
{
    // §4.1 step 5: op n commits once f followers (plus the leader) hold it in this view.
    acked_[config_.replica] = op();
    std::vector<Op> acked = acked_;
    std::nth_element(acked.begin(), acked.begin() + (quorum() - 1), acked.end(),
                     std::greater<Op>());
    const Op quorum_op = std::max(acked[quorum() - 1], quorum_counted_op);
    if (quorum_op <= commit_) return;
    commit_to(quorum_op);
    while (!prepares_in_flight_.empty() && prepares_in_flight_.front().last_op <= commit_)
        prepares_in_flight_.pop_front();
}

void Replica::adopt_commit_as_follower(Op commit)
{
    commit_to(std::min(commit, op()));
    if (commit > op() && !fetch_)  // we missed Prepares
        start_fetch(Fetch::Purpose::catch_up, leader(), op(), commit);
}

void Replica::commit_to(Op commit)
{
    VL_ASSERT(commit <= op(), "commit only what the log holds");
    while (commit_ < commit) {
        commit_ += 1;
        execute(commit_, log_at(commit_));
    }
}

void Replica::execute(Op op_number, const Entry& entry)
{
    if (entry.client_id == kCellClientId) {  // the restart fence: nobody waits for a reply
        machine_.skip_past_lost_writes();
        fence_view_ = entry.request_number;
        clients_timed_ = true;
        // Committed on top of our state: the restart that selected it went through.
        state_unconfirmed_ = false;
        out_->push_back(Executed{.op = op_number, .entry = entry, .result = {}});
        return;
    }
    ClientSession& session = client_session(entry.client_id);
    const bool is_leader_now = is_leader();
    const uint32_t request_crc = crc32c(entry.payload);
    if (entry.request_number <= session.request_number && session.request_number != 0) {
        // A retry that reached the log twice: it was executed already (at-most-once).
        if (is_leader_now && entry.request_number == session.request_number) {
            if (session.request_crc.value_or(request_crc) != request_crc)
                reply_reused(entry.client_id, entry.request_number);
            else
                reply(entry.client_id, session);
        }
        return;
    }
    session.request_number = entry.request_number;
    session.request_crc = request_crc;
    session.result = machine_.apply(op_number, entry);
    VL_ASSERT(!session.result.empty(), "an empty result means a reused request number");
    note_executed(entry.client_id, session, entry.timestamp_ms);
    out_->push_back(Executed{.op = op_number, .entry = entry, .result = session.result});
    if (is_leader_now) {
        if (const auto it = requests_in_flight_.find(entry.client_id);
            it != requests_in_flight_.end() && it->second.request_number <= entry.request_number)
            requests_in_flight_.erase(it);
        reply(entry.client_id, session);
    }
}

Replica::ClientSession& Replica::client_session(ClientId client_id)
{
    auto [it, added] = client_table_.try_emplace(client_id);
    if (added) it->second.executed_at = execution_order_.end();
    return it->second;
}

void Replica::place_client(ClientId client_id, ClientSession& session,
                           std::optional<uint64_t> executed_ms)
{
    const bool placed = session.executed_at != execution_order_.end();
    session.executed_ms = executed_ms;
    if (!executed_ms) {
        if (placed) execution_order_.erase(session.executed_at);
        session.executed_at = execution_order_.end();
    } else if (placed) {
        execution_order_.splice(execution_order_.end(), execution_order_, session.executed_at);
    } else {
        session.executed_at = execution_order_.insert(execution_order_.end(), client_id);
    }
}

void Replica::note_executed(ClientId client_id, ClientSession& session, uint64_t now_ms)
{
    place_client(client_id, session,
                 clients_timed_ ? std::optional<uint64_t>(now_ms) : std::nullopt);
    while (client_table_.size() > config_.client_table_limit && !execution_order_.empty()) {
        const auto oldest = client_table_.find(execution_order_.front());
        // Its client may still retry (and the one just executed stays): the table grows past
        // its limit instead.
        const uint64_t executed_ms = *oldest->second.executed_ms;
        if (&oldest->second == &session || executed_ms > now_ms ||
            now_ms - executed_ms < config_.client_min_age_ms)
            break;
        execution_order_.pop_front();
        client_table_.erase(oldest);
        counters_.clients_forgotten += 1;
    }
}

std::optional<RequestNumber> Replica::latest_request(ClientId client_id) const
{
    const auto it = client_table_.find(client_id);
    if (it == client_table_.end()) return std::nullopt;
    return it->second.request_number;
}

void Replica::reply(ClientId client_id, const ClientSession& session)
{
    persist_before_sending();
    out_->push_back(SendReply{Reply{.view = view_,
                                    .replica = config_.replica,
                                    .client_id = client_id,
                                    .request_number = session.request_number,
                                    .commit = commit_,
                                    .result = session.result}});
}

void Replica::reply_reused(ClientId client_id, RequestNumber request_number)
{
    counters_.requests_reused += 1;
    out_->push_back(SendReply{Reply{.view = view_,
                                    .replica = config_.replica,
                                    .client_id = client_id,
                                    .request_number = request_number,
                                    .commit = commit_,
                                    .result = {}}});
}

void Replica::retransmit_prepares()
{
    // Resend the oldest uncommitted batches to the followers that have not acknowledged them.
    // A follower that lost more than these catches up by state transfer instead (§5.2).
    constexpr size_t max_batches_per_tick = 8;
    size_t resent = 0;
    for (InFlightPrepare& in_flight : prepares_in_flight_) {
        if (resent == max_batches_per_tick) break;
        if (tick_ - in_flight.sent_tick < config_.retransmit_ticks) continue;
        Prepare prepare{.view = view_, .replica = config_.replica, .op = in_flight.last_op,
                        .commit = commit_};
        prepare.entries.assign(
            log_.begin() + static_cast<ptrdiff_t>(in_flight.first_op - log_base_ - 1),
            log_.begin() + static_cast<ptrdiff_t>(in_flight.last_op - log_base_));
        for (ReplicaIndex r = 0; r < config_.replica_count; r++)
            if (r != config_.replica && acked_[r] < in_flight.last_op) send(r, prepare);
        in_flight.sent_tick = tick_;
        counters_.retransmissions += 1;
        resent += 1;
    }
}

// ---- View change (§4.2) ---------------------------------------------------------------------

void Replica::start_view_change(View view)
{
    VL_ASSERT(view > view_, "view changes only move forward");
    VL_ASSERT(status_ != Status::recovering, "a recovering replica takes no part in views");
    view_ = view;
    enter_view_change();
}

void Replica::enter_view_change()
{
    reset_view_state();
    status_ = Status::view_change;
    status_since_tick_ = tick_;
    status_messages_sent_tick_ = tick_;
    broadcast(StartViewChange{.view = view_, .replica = config_.replica});
    maybe_send_do_view_change();
}

void Replica::on_start_view_change(const StartViewChange& m)
{
    if (m.asking) return on_view_change_asked(m);
    if (status_ == Status::recovering && !join_restart(m.view))
        return ignore(__func__, Ignored::recovering);
    if (m.view < view_) return ignore(__func__, Ignored::stale_view);
    if (m.view > view_) start_view_change(m.view);
    if (joining(view_)) return ignore(__func__, Ignored::view_started);
    if (status_ == Status::normal) {
        // The sender is still changing to a view we already run: it missed the StartView.
        if (is_leader()) send_start_view(m.replica);
        return;
    }
    VL_ASSERT(status_ == Status::view_change && m.view == view_,
              "a StartViewChange counted is for the view we are changing to");
    start_view_change_from_[m.replica] = true;
    maybe_send_do_view_change();
}

void Replica::on_view_change_asked(const StartViewChange& m)
{
    // A follower that lost its leader too counts it, and joins once f others asked: the asker
    // has not left its view, and neither do we for one replica that hears nothing. A leader
    // that hears a quorum keeps its view (it steps down by itself once it does not). A replica
    // changing views already goes on to the view asked for: the asker runs the view we change
    // to, or a later one, and lost its leader; alone in a view change, we would wait for ever.
    if (status_ == Status::recovering) return ignore(__func__, Ignored::recovering);
    if (m.view <= view_) return ignore(__func__, Ignored::stale_view);
    if (status_ == Status::view_change) {
        start_view_change(m.view);
        return;
    }
    if (is_leader()) return ignore(__func__, Ignored::leader_heard);
    view_change_asked_[m.replica] = {.view = m.view, .tick = tick_};
    if (!leader_suspected(tick_)) return ignore(__func__, Ignored::leader_heard);
    if (const std::optional<View> view = view_change_asked_by_quorum(tick_)) {
        start_view_change(*view);
    } else {
        ignore(__func__, Ignored::leader_heard);
    }
}

uint64_t Replica::view_change_timeout_ticks() const
{
    // Doubles with every view change in a row that did not finish (up to 64x), so that a new
    // leader that must first fetch a long log gets the time to do so.
    return uint64_t{config_.view_change_timeout_ticks} << std::min(failed_view_changes_, 6u);
}

DoViewChange Replica::own_do_view_change() const
{
    return DoViewChange{.view = view_,
                        .replica = config_.replica,
                        .last_normal_view = last_normal_view_,
                        .op = op(),
                        .commit = commit_,
                        .fence_view = log_epoch()};
}

View Replica::log_epoch() const
{
    // The restart fence our state applied, or one our log holds uncommitted yet: a replica that
    // lags in the restarted cell belongs to its epoch all the same.
    View epoch = fence_view_;
    for (const Entry& e : log_)
        if (e.client_id == kCellClientId) epoch = std::max(epoch, View{e.request_number});
    return epoch;
}

void Replica::maybe_send_do_view_change()
{
    // §4.2 step 2: after StartViewChange from f other replicas.
    const auto others = std::count(start_view_change_from_.begin(),
                                   start_view_change_from_.end(), true);
    if (do_view_change_sent_ || static_cast<size_t>(others) < quorum() - 1) return;
    do_view_change_sent_ = true;
    // Its timeout runs from here (on_tick): until now too few took part for it to finish.
    status_since_tick_ = tick_;
    if (leader() == config_.replica) {
        do_view_change_from_[config_.replica] = own_do_view_change();
        maybe_start_view();
    } else {
        send(leader(), own_do_view_change());
    }
}

void Replica::on_do_view_change(const DoViewChange& m)
{
    if (status_ == Status::recovering && !join_restart(m.view))
        return ignore(__func__, Ignored::recovering, m.op);
    if (m.view < view_) return ignore(__func__, Ignored::stale_view, m.op);
    if (m.view > view_) start_view_change(m.view);
    if (joining(view_)) return ignore(__func__, Ignored::view_started, m.op);
    if (status_ == Status::normal) {
        if (is_leader()) send_start_view(m.replica);  // it missed the StartView
        return;
    }
    if (leader() != config_.replica) return ignore(__func__, Ignored::not_view_leader, m.op);
    VL_ASSERT(status_ == Status::view_change && m.view == view_,
              "a DoViewChange kept is for the view we are changing to and will lead");
    // A DoViewChange also says its sender started this view change.
    start_view_change_from_[m.replica] = true;
    do_view_change_from_[m.replica] = m;
    maybe_send_do_view_change();
    maybe_start_view();
}

void Replica::maybe_start_view()
{
    // §4.2 step 3: f + 1 DoViewChange messages, our own among them.
    if (fetch_ || do_view_change_from_.size() < quorum() ||
        !do_view_change_from_.contains(config_.replica))
        return;
    // The log with the largest last normal view, then the largest op, is the new log; every
    // committed op is in it. Ties prefer our own log, which then needs no fetching.
    // After a restart from snapshots alone (durability snapshot) two more rules keep that true:
    // only states of the latest restart epoch compete (older ones are from before a restart
    // that went on without them), and only those reaching the largest commit among them (a
    // restored state is committed ops only, up to its snapshot, and the view its snapshot was
    // taken in may be later than that of a longer committed state another replica restored).
    // A fence that a log holds uncommitted does not make an epoch if another replica was normal
    // in a later view without it: that view started with every committed op, and the one
    // holding the fence took part in none since (vr_sim seed 2850 x 3: a leader cut off with
    // the fence it had just proposed won a later view change over the two that had committed
    // 13 ops without it). A restart's fence is never disproved so: its view is past every view
    // a quorum of the cell ran before it.
    const auto disproved = [&](const DoViewChange& holder) {
        return std::ranges::any_of(do_view_change_from_, [&](const auto& other) {
            return other.second.last_normal_view > holder.last_normal_view &&
                   other.second.fence_view < holder.fence_view;
        });
    };
    View epoch = 0;
    for (const auto& [replica, dvc] : do_view_change_from_)
        if (!disproved(dvc)) epoch = std::max(epoch, dvc.fence_view);
    Op max_commit = 0;
    for (const auto& [replica, dvc] : do_view_change_from_)
        if (dvc.fence_view == epoch) max_commit = std::max(max_commit, dvc.commit);
    const auto competes = [&](const DoViewChange& dvc) {
        return dvc.fence_view == epoch && dvc.op >= max_commit;
    };
    const DoViewChange& own = do_view_change_from_.at(config_.replica);
    const DoViewChange* best = competes(own) ? &own : nullptr;
    for (const auto& [replica, dvc] : do_view_change_from_)
        if (competes(dvc) && (!best || std::tie(dvc.last_normal_view, dvc.op) >
                                           std::tie(best->last_normal_view, best->op)))
            best = &dvc;
    VL_ASSERT(best != nullptr, "the state with the largest commit of the epoch competes");
    new_view_commit_ = max_commit;
    if (best == &own) {
        become_leader();
        return;
    }
    // A state that is not known to be the cell's history, or that is of an older restart epoch,
    // gives way to the selected one whole.
    if (state_unconfirmed_ || log_epoch() != epoch) {
        start_fetch(Fetch::Purpose::select_log, best->replica, 0, best->op, {}, true);
        return;
    }
    // Logs of the same last normal view are prefixes of one another; otherwise only what we
    // committed is known to be in the selected log. Our log stays as it is until the fetch is
    // complete: should this view change fail, the next one must see what we acknowledged.
    const Op base_op = best->last_normal_view == last_normal_view_ ? op() : commit_;
    start_fetch(Fetch::Purpose::select_log, best->replica, base_op, best->op);
}

void Replica::become_leader()
{
    VL_ASSERT(new_view_commit_ <= op(), "the selected log holds every committed op");
    const Op new_view_commit = new_view_commit_;
    enter_normal(view_);
    counters_.view_changes += 1;
    commit_to(std::max(commit_, new_view_commit));
    view_start_op_ = op();
    // Ops after the commit point are the view's uncommitted suffix: track them as in flight,
    // so that they are retransmitted as Prepares until the followers acknowledge them.
    const size_t budget = config_.max_message_bytes - VL_HEADER_BYTES;
    for (Op first = commit_ + 1; first <= op();) {
        Op last = first;
        size_t bytes = entry_wire_bytes(log_at(first));
        while (last < op() && bytes + entry_wire_bytes(log_at(last + 1)) <= budget)
            bytes += entry_wire_bytes(log_at(++last));
        prepares_in_flight_.push_back({first, last, tick_});
        for (Op o = first; o <= last; o++)
            requests_in_flight_[log_at(o).client_id] = {log_at(o).request_number,
                                                        crc32c(log_at(o).payload)};
        first = last + 1;
    }
    for (ReplicaIndex r = 0; r < config_.replica_count; r++)
        if (r != config_.replica) send_start_view(r);
    std::fill(answered_tick_.begin(), answered_tick_.end(), tick_);  // a timeout from now
    last_heartbeat_tick_ = tick_;
    advance_commit_as_leader();
    // A state restored from a snapshot alone, or given by one, becomes the cell's history only
    // with a restart fence committed on top of it (until then another view may select an older
    // one); the fence also moves the state machine past the writes that may have been lost.
    if (state_unconfirmed_) propose_restart_fence();
}

void Replica::send_start_view(ReplicaIndex to)
{
    // The uncommitted suffix, as far as it fits; a follower fetches the rest (§5.2).
    const size_t budget =
        config_.max_message_bytes - VL_HEADER_BYTES - kStateTransferPrefixBytes;
    send(to, StartView{.view = view_,
                       .replica = config_.replica,
                       .op = op(),
                       .commit = commit_,
                       .first_op = commit_,
                       .entries = entries_after(commit_, budget),
                       .state_unconfirmed = state_unconfirmed_});
}

void Replica::on_start_view(const StartView& m)
{
    if (status_ == Status::recovering) return ignore(__func__, Ignored::recovering, m.op);
    if (m.view < view_) return ignore(__func__, Ignored::stale_view, m.op);
    if (m.view == view_ && status_ == Status::normal)
        return ignore(__func__, Ignored::in_view, m.op);
    if (m.replica != leader_of(m.view)) return ignore(__func__, Ignored::not_from_leader, m.op);
    // The cell's history never gives way to a restored state that lacks ops of it: such a view
    // started without us, from snapshots older than what we committed; its leader learns of
    // our state when we take part in the next view change (issue 11, scenario 2).
    if (!state_unconfirmed_ && m.state_unconfirmed && m.op < commit_)
        return ignore(__func__, Ignored::behind_commit, m.op);
    // A restored state, or a committed one the view does not hold (the restart's view that
    // made it committed ended before a quorum held it): the view's state replaces ours whole.
    if (state_unconfirmed_ || m.op < commit_) {
        join_view(m.view, 0, m.op, {}, true);
        return;
    }
    // §4.2 step 4: replace the log. What we committed is in the new log already; anything after
    // it may come from an older view. If the message holds the whole suffix after our commit
    // point, the replacement happens now; otherwise we fetch it first.
    const Op carried_to = m.first_op + m.entries.size();
    if (m.first_op <= commit_ && carried_to == m.op) {
        replace_log_after(commit_, m.first_op, m.entries);
        enter_normal(m.view);
        state_unconfirmed_ = m.state_unconfirmed;  // ours is confirmed, or replaced above
        counters_.view_changes += 1;
        send(leader(), PrepareOk{.view = view_, .replica = config_.replica, .op = op()});
        adopt_commit_as_follower(m.commit);
        return;
    }
    // Keep what the StartView carried beyond our commit point; fetch only the rest.
    std::vector<Entry> carried;
    if (m.first_op <= commit_ && carried_to > commit_)
        carried.assign(m.entries.begin() + static_cast<ptrdiff_t>(commit_ - m.first_op),
                       m.entries.end());
    join_view(m.view, commit_, m.op, std::move(carried));
}

bool Replica::joining(View view) const
{
    return status_ == Status::view_change && view_ == view && fetch_ &&
           fetch_->purpose == Fetch::Purpose::join_view;
}

void Replica::join_view(View view, Op base_op, Op target_op, std::vector<Entry> fetched,
                        bool replace_state)
{
    // §5.2: a replica that learns that view `view` has started, without its log, fetches the
    // leader's log after `base_op` (its commit point). It stays in view-change status with its
    // old log until the new one is whole.
    if (joining(view)) {
        fetch_->target_op = std::max(fetch_->target_op, target_op);
        return;
    }
    replace_state = replace_state || state_unconfirmed_;
    if (replace_state) {  // the view's state replaces ours whole
        base_op = 0;
        fetched.clear();
    }
    reset_view_state();
    status_ = Status::view_change;
    view_ = view;
    status_since_tick_ = tick_;
    start_fetch(Fetch::Purpose::join_view, leader_of(view), base_op, target_op,
                std::move(fetched), replace_state);
}

void Replica::reset_view_state()
{
    std::fill(acked_.begin(), acked_.end(), 0);
    std::fill(echoed_heartbeat_ms_.begin(), echoed_heartbeat_ms_.end(), 0);
    pending_requests_.clear();
    requests_in_flight_.clear();
    prepares_in_flight_.clear();
    std::fill(start_view_change_from_.begin(), start_view_change_from_.end(), false);
    do_view_change_from_.clear();
    do_view_change_sent_ = false;
    new_view_commit_ = 0;
    fetch_.reset();
}

// ---- State transfer (§5.2) ------------------------------------------------------------------

void Replica::start_fetch(Fetch::Purpose purpose, ReplicaIndex from, Op base_op, Op target_op,
                          std::vector<Entry> fetched, bool replaces_state)
{
    VL_ASSERT(replaces_state ? base_op == 0 && fetched.empty()
                             : base_op >= commit_ && base_op <= op(),
              "a fetch continues a good prefix, or replaces everything");
    counters_.state_transfers += 1;
    fetch_ = Fetch{.purpose = purpose,
                   .from = from,
                   .base_op = base_op,
                   .target_op = target_op,
                   .entries = std::move(fetched),
                   .replaces_state = replaces_state};
    send_get_state();
}

void Replica::send_get_state()
{
    fetch_->sent_tick = tick_;
    send(fetch_->from,
         GetState{.view = view_, .replica = config_.replica, .op = fetched_through()});
}

void Replica::retransmit_get_state()
{
    if (!fetch_ || tick_ - fetch_->sent_tick < config_.retransmit_ticks) return;
    counters_.retransmissions += 1;
    send_get_state();
}

void Replica::on_get_state(const GetState& m)
{
    // Answered in normal status, and in view-change status too while our log is frozen as we
    // reported it: that is how a new leader fetches the log it selected.
    if (status_ == Status::recovering) return ignore(__func__, Ignored::recovering, m.op);
    if (m.view != view_) return ignore(__func__, Ignored::other_view, m.op);
    if (m.op > op()) return ignore(__func__, Ignored::beyond_log, m.op);
    if (status_ == Status::view_change && fetch_)
        return ignore(__func__, Ignored::log_not_frozen, m.op);
    // A follower fetching our log (joining the view, or catching up) hears us and is heard: it
    // answers no heartbeat until it holds the log, which after a whole-cell restart with a long
    // log takes many heartbeat timeouts. Counted as an answer, so that we do not step down.
    if (is_leader()) answered_tick_[m.replica] = tick_;
    if (m.op < log_base_) {  // compacted: the snapshot first, over TCP
        send(m.replica, SnapshotOffer{.view = view_,
                                      .replica = config_.replica,
                                      .op = log_base_,
                                      .state_unconfirmed = state_unconfirmed_});
        return;
    }
    const size_t budget =
        config_.max_message_bytes - VL_HEADER_BYTES - kStateTransferPrefixBytes;
    send(m.replica, NewState{.view = view_,
                             .replica = config_.replica,
                             .op = op(),
                             .commit = commit_,
                             .first_op = m.op,
                             .entries = entries_after(m.op, budget),
                             .state_unconfirmed = state_unconfirmed_});
}

void Replica::on_new_state(const NewState& m)
{
    if (!fetch_ || m.replica != fetch_->from || m.view != view_)
        return ignore(__func__, Ignored::not_fetching, m.op);
    Fetch& fetch = *fetch_;
    fetch.source_unconfirmed = m.state_unconfirmed;
    // Only an answer that moved the fetch forward asks for the next chunk: a duplicated or
    // overlapping one would otherwise start a second chain of requests, and duplicates of those
    // more (vr_sim seed 4812 x 5 ran 170,000 NewStates for 1,000 ops). The timer covers loss.
    if (fetch.purpose == Fetch::Purpose::catch_up) {
        // Same view: our log is a prefix of the leader's, so entries append as they come.
        const Op before = op();
        if (!install_entries(m.first_op, m.entries) || op() == before)
            return ignore(__func__, Ignored::duplicate, m.op);
        last_heard_from_leader_tick_ = tick_;
        commit_to(std::min(m.commit, op()));
        fetch.target_op = std::max(fetch.target_op, m.op);
        fetch_next_or_complete();
        return;
    }
    // Reordered: the timer asks again.
    if (m.first_op > fetch.fetched_op()) return ignore(__func__, Ignored::reordered, m.op);
    if (m.first_op + m.entries.size() <= fetch.fetched_op() &&
        fetch.fetched_op() < fetch.target_op)
        return ignore(__func__, Ignored::duplicate, m.op);
    for (size_t i = fetch.fetched_op() - m.first_op; i < m.entries.size(); i++)
        fetch.entries.push_back(m.entries[i]);
    fetch.commit = std::max(fetch.commit, m.commit);
    // The selected log is frozen at the op its owner reported; a leader's log grows meanwhile.
    if (fetch.purpose != Fetch::Purpose::select_log)
        fetch.target_op = std::max(fetch.target_op, m.op);
    status_since_tick_ = tick_;  // progress: keep this view change or recovery alive
    fetch_next_or_complete();
}

void Replica::fetch_next_or_complete()
{
    if (fetch_->purpose == Fetch::Purpose::catch_up) {
        if (op() < fetch_->target_op) {
            send_get_state();
            return;
        }
        fetch_.reset();
        send(leader(), PrepareOk{.view = view_, .replica = config_.replica, .op = op()});
        return;
    }
    if (fetch_->fetched_op() >= fetch_->target_op)
        complete_fetch();
    else
        send_get_state();
}

void Replica::on_snapshot_offer(const SnapshotOffer& m)
{
    if (!fetch_ || m.replica != fetch_->from || m.view != view_)
        return ignore(__func__, Ignored::not_fetching, m.op);
    // A late offer: we are past it.
    if (m.op <= fetched_through()) return ignore(__func__, Ignored::duplicate, m.op);
    fetch_->source_unconfirmed = m.state_unconfirmed;
    out_->push_back(FetchSnapshot{.from = m.replica, .op = m.op});
}

Op Replica::fetched_through() const
{
    // A catch-up fetch appends to the log as it goes; the others collect entries after base_op.
    return fetch_->purpose == Fetch::Purpose::catch_up ? op() : fetch_->fetched_op();
}

void Replica::complete_fetch()
{
    Fetch fetch = std::move(*fetch_);
    fetch_.reset();
    if (!fetch.snapshot.empty()) {  // our state gives way to it: now, with what follows it
        const auto snapshot = decode_replica_snapshot(fetch.snapshot);
        if (!snapshot || !install_snapshot(*snapshot, fetch.snapshot, {})) {
            // Decoded once already: only a state machine can still refuse it. Start over.
            start_fetch(fetch.purpose, fetch.from, 0, fetch.target_op, {}, true);
            return;
        }
    } else if (fetch.replaces_state) {
        discard_state();  // in the step that installs the new one
    }
    replace_log_after(fetch.base_op, fetch.base_op, fetch.entries);
    // Our state is now the source's, or ours continued by its ops (before they commit here: a
    // restart fence among them confirms it).
    state_unconfirmed_ =
        fetch.source_unconfirmed || (state_unconfirmed_ && !fetch.replaces_state);
    switch (fetch.purpose) {
    case Fetch::Purpose::catch_up:
        VL_ASSERT(false, "catch-up entries are appended as they arrive");
        break;
    case Fetch::Purpose::join_view:
        enter_normal(view_);
        counters_.view_changes += 1;
        send(leader(), PrepareOk{.view = view_, .replica = config_.replica, .op = op()});
        adopt_commit_as_follower(fetch.commit);
        break;
    case Fetch::Purpose::select_log:
        truncate_log(fetch.target_op);  // the selected log ends there
        become_leader();
        break;
    case Fetch::Purpose::recover:
        finish_recovery(fetch.commit);
        break;
    }
}

bool Replica::install_entries(Op first_op, const std::vector<Entry>& entries)
{
    // Callers guarantee that our log up to op() agrees with the sender's: what we already
    // hold must be identical, and only what follows is appended. Compacted ops are committed
    // and in our snapshot.
    if (first_op > op()) return false;
    for (size_t i = 0; i < entries.size(); i++) {
        const Op o = first_op + 1 + i;
        if (o <= log_base_) continue;
        if (o <= op()) {
            VL_ASSERT(log_at(o) == entries[i], "logs agree on every op both hold");
        } else {
            log_changed_after(o - 1);
            log_.push_back(entries[i]);
        }
    }
    return true;
}

void Replica::replace_log_after(Op base_op, Op first_op, const std::vector<Entry>& entries)
{
    // `entries` hold ops (first_op, first_op + size]; ours are good up to base_op.
    VL_ASSERT(first_op <= base_op && base_op <= op(), "the new suffix joins our good prefix");
    truncate_log(base_op);
    log_changed_after(base_op);
    for (size_t i = base_op - first_op; i < entries.size(); i++) log_.push_back(entries[i]);
}

std::vector<Entry> Replica::entries_after(Op first_op, size_t budget_bytes) const
{
    std::vector<Entry> entries;
    size_t bytes = 0;
    for (Op o = first_op + 1; o <= op(); o++) {
        bytes += entry_wire_bytes(log_at(o));
        if (bytes > budget_bytes) break;
        entries.push_back(log_at(o));
    }
    return entries;
}

// ---- Snapshots and log compaction (DESIGN.md §5) --------------------------------------------

bool Replica::restore_snapshot(const ReplicaSnapshot& snapshot)
{
    // The machine first: it refuses bytes that are not its snapshot and then changes nothing.
    if (!machine_.restore(snapshot.machine)) return false;
    client_table_.clear();
    execution_order_.clear();
    clients_timed_ = snapshot.clients_timed;
    // In the snapshot's order, which is the order their latest requests executed in.
    for (const ClientTableRecord& client : snapshot.clients) {
        ClientSession& session = client_session(client.client_id);
        session.request_number = client.request_number;
        session.request_crc = client.request_crc;
        session.result = client.result;
        place_client(client.client_id, session, client.executed_ms);
    }
    log_.clear();
    log_base_ = snapshot.op;
    commit_ = snapshot.op;
    fence_view_ = snapshot.fence_view;
    snapshot_attempt_op_ = snapshot.op;
    return true;
}

void Replica::discard_state()
{
    machine_.reset();
    client_table_.clear();
    execution_order_.clear();
    clients_timed_ = true;
    log_.clear();
    log_base_ = 0;
    commit_ = 0;
    fence_view_ = 0;
    snapshot_attempt_op_ = 0;
    log_changed_after(0);
}

void Replica::maybe_take_snapshot()
{
    if (snapshot_writing_ || status_ != Status::normal || commit_ <= snapshot_attempt_op_) return;
    const bool ops_due = config_.snapshot_every_ops != 0 &&
                         commit_ - snapshot_attempt_op_ >= config_.snapshot_every_ops;
    const bool time_due = config_.snapshot_every_ticks != 0 &&
                          tick_ - snapshot_attempt_tick_ >= config_.snapshot_every_ticks;
    const bool fence_due = fence_view_ > snapshot_fence_view_;
    if (!ops_due && !time_due && !fence_due) return;
    snapshot_attempt_op_ = commit_;
    snapshot_attempt_tick_ = tick_;
    snapshot_writing_ = commit_;
    snapshot_writing_fence_view_ = fence_view_;
    out_->push_back(WriteSnapshot{.op = commit_});  // encoded by the shell (WriteSnapshot)
}

void Replica::on_snapshot_written(const SnapshotWritten& written)
{
    const bool under_way = snapshot_writing_ == written.op;
    if (under_way) snapshot_writing_.reset();
    // The log stays whole; the next trigger tries again.
    if (!written.ok) return ignore(__func__, Ignored::write_failed, written.op);
    if (under_way) snapshot_fence_view_ = snapshot_writing_fence_view_;
    counters_.snapshots_written += 1;
    // A snapshot installed meanwhile is newer, or the state it was of was discarded.
    if (written.op <= log_base_ || written.op > commit_)
        return ignore(__func__, Ignored::outdated, written.op);
    // The entries after it move to a new log; the old one, with the dropped entries, is freed a
    // piece per step (free_released_entries).
    const auto first_kept = log_.begin() + static_cast<ptrdiff_t>(written.op - log_base_);
    std::vector<Entry> kept(std::make_move_iterator(first_kept),
                            std::make_move_iterator(log_.end()));
    log_.swap(kept);
    released_.push_back(std::move(kept));
    log_base_ = written.op;
}

void Replica::free_released_entries()
{
    size_t budget = kReleasedEntriesPerStep;
    while (budget > 0 && !released_.empty()) {
        std::vector<Entry>& entries = released_.back();
        const size_t freed = std::min(budget, entries.size());
        entries.resize(entries.size() - freed);
        budget -= freed;
        if (entries.empty()) released_.pop_back();
    }
}

void Replica::on_snapshot_fetched(const SnapshotFetched& fetched)
{
    // From the replica the fetch under way asks only: one that an earlier fetch asked may hold a
    // state the view change since did not select (vr_sim seed 54 x 3, durability snapshot).
    if (!fetch_ || fetched.from != fetch_->from) return ignore(__func__, Ignored::not_fetching);
    const auto snapshot = decode_replica_snapshot(fetched.snapshot);
    if (!snapshot) {
        counters_.snapshots_refused += 1;
        return ignore(__func__, Ignored::bad_snapshot);
    }
    // An older offer's: we are past it.
    if (snapshot->op <= fetched_through())
        return ignore(__func__, Ignored::duplicate, snapshot->op);
    if (fetch_->replaces_state) {
        // The new base, installed with the entries after it when they are all here: until then
        // our state and log stay what we offered and acknowledged (a view change meanwhile,
        // which may count us, sees them; vr_sim seed 102 x 3, durability snapshot).
        fetch_->snapshot = fetched.snapshot;
    } else {
        // Our log after the snapshot's op, if any, stays the tentative suffix it was: a pending
        // log replacement still replaces it, and a view change meanwhile still sees it.
        std::vector<Entry> suffix;
        if (op() > snapshot->op)
            suffix.assign(log_.begin() + static_cast<ptrdiff_t>(snapshot->op - log_base_),
                          log_.end());
        if (!install_snapshot(*snapshot, fetched.snapshot, std::move(suffix))) return;
    }
    fetch_->base_op = snapshot->op;
    fetch_->entries.clear();
    status_since_tick_ = tick_;
    if (fetch_->purpose == Fetch::Purpose::catch_up) last_heard_from_leader_tick_ = tick_;
    fetch_next_or_complete();
}

bool Replica::install_snapshot(const ReplicaSnapshot& snapshot, const Bytes& encoded,
                               std::vector<Entry> suffix)
{
    if (!restore_snapshot(snapshot)) {
        counters_.snapshots_refused += 1;
        return false;
    }
    log_ = std::move(suffix);
    log_changed_after(log_base_);
    counters_.snapshots_installed += 1;
    out_->push_back(SnapshotInstalled{.op = log_base_});
    // Written like our own, so that we can serve it and restart from it; first, when the log
    // after it is persisted too, so that the data directory never holds a log without its base.
    snapshot_writing_ = log_base_;
    snapshot_writing_fence_view_ = fence_view_;
    out_->push_back(WriteSnapshot{
        .op = log_base_, .snapshot = encoded, .before_next_effect = config_.persist_log});
    return true;
}

// ---- Graceful stop ----------------------------------------------------------------------------

void Replica::on_stop()
{
    // Issue 11, scenario 3: an operator's planned restart of the whole cell loses nothing. With
    // durability sync every step persisted the log already. With durability snapshot the state
    // applied so far becomes the snapshot and everything acknowledged after it the log, as sync
    // would have it; the restart then takes part in view changes with it (restored_whole_), and
    // the cell comes back with every op any quorum acknowledged.
    stopped_ = true;
    pending_requests_.clear();  // never proposed: their clients retry elsewhere
    if (config_.persist_log || !config_.persist_view) return;  // durable already; or no disk
    // Only a state that is ours to promise: not one still being recovered, nor a restored one
    // that no restart fence has confirmed (marked whole, it would pass for the cell's).
    if (status_ == Status::recovering || state_unconfirmed_) return;
    if (commit_ > 0)  // op 0 is the empty state, which needs no snapshot
        out_->push_back(WriteSnapshot{
            .op = commit_, .snapshot = encode_snapshot(), .before_next_effect = true});
    out_->push_back(PersistLog{
        .after = commit_,
        .entries = {log_.begin() + static_cast<ptrdiff_t>(commit_ - log_base_), log_.end()}});
    out_->push_back(PersistView{.view = view_, .last_normal_view = last_normal_view_});
    out_->push_back(PersistStopped{});
}

// ---- Plumbing -------------------------------------------------------------------------------

void Replica::ignore(const char* event, Ignored reason, Op op)
{
    traces_.push_back(Trace{.event = event, .reason = reason, .view = view_, .op = op});
}

void Replica::send(ReplicaIndex to, Message message)
{
    persist_before_sending();
    out_->push_back(Send{.to = to, .message = std::move(message)});
}

void Replica::broadcast(Message message)
{
    if (config_.replica_count == 1) return;
    persist_before_sending();
    out_->push_back(Broadcast{.message = std::move(message)});
}

void Replica::truncate_log(Op new_op)
{
    VL_ASSERT(new_op >= commit_, "committed ops are never removed");
    if (new_op >= op()) return;
    log_changed_after(new_op);
    log_.resize(new_op - log_base_);
}

// ---- Durability sync --------------------------------------------------------------------------

void Replica::log_changed_after(Op op_number)
{
    if (config_.persist_log)
        log_unpersisted_after_ = std::min(log_unpersisted_after_.value_or(op_number), op_number);
}

void Replica::persist_before_sending()
{
    // Every message reflects a durable log and view: a PrepareOK, a DoViewChange or a reply
    // promises what they hold (the shell writes all Persist effects of a step at once).
    if (config_.persist_log && log_unpersisted_after_) {
        // A snapshot installed meanwhile covers the ops up to its own (it is written first).
        const Op after = std::max(*log_unpersisted_after_, log_base_);
        log_unpersisted_after_.reset();
        out_->push_back(PersistLog{
            .after = after,
            .entries = {log_.begin() + static_cast<ptrdiff_t>(after - log_base_), log_.end()}});
    }
    // The view is persisted once this replica holds a state, view 0 included: that record tells
    // its next start from a new data directory's. One that waits with nothing records none, so
    // that a restart meanwhile finds it holding nothing, not a state of op 0 to restart the cell
    // with (docs/storage.md).
    if ((config_.persist_log || config_.persist_view) && !waits_with_nothing() &&
        std::pair{view_, last_normal_view_} != persisted_view_) {
        persisted_view_ = {view_, last_normal_view_};
        out_->push_back(PersistView{.view = view_, .last_normal_view = last_normal_view_});
    }
}

void Replica::enter_normal(View view)
{
    reset_view_state();
    restart_view_change_ = false;
    status_ = Status::normal;
    been_normal_ = true;
    view_ = view;
    last_normal_view_ = view;
    status_since_tick_ = tick_;
    last_heard_from_leader_tick_ = tick_;
    awaiting_commit_ = false;
    failed_view_changes_ = 0;
}

void Replica::emit_kernel_state()
{
    vl_kernel_state state{};
    state.view = view_;
    state.last_op = op();
    state.commit = commit_;
    state.cluster_id = config_.cluster_id;
    state.status = static_cast<uint8_t>(status_);
    state.replica = config_.replica;
    state.leader = leader();
    state.replica_count = config_.replica_count;
    state.fast_ack = config_.fast_ack_allowed && status_ == Status::normal && !is_leader() &&
                     !fetch_ && !waiting_for_drain_;
    state.version = kernel_state_.version;
    if (std::memcmp(&state, &kernel_state_, sizeof state) == 0) return;
    state.version += 1;
    kernel_state_ = state;
    if (state.fast_ack) kernel_may_hold_acks_ = true;
    out_->push_back(KernelStateChanged{.state = state});
}

void Replica::check_invariants() const
{
    VL_ASSERT(commit_ <= op(), "commit <= op");
    VL_ASSERT(last_normal_view_ <= view_, "last normal view <= view");
    VL_ASSERT(status_ != Status::normal || last_normal_view_ == view_,
              "in normal status the last normal view is the view");
    VL_ASSERT(log_base_ <= commit_, "only committed ops are compacted");
    VL_ASSERT(status_ != Status::recovering || commit_ == log_base_,
              "a recovering replica executes nothing until it has the leader's log");
    VL_ASSERT(!is_leader() || op() <= std::max(commit_ + config_.pipeline_ops, view_start_op_),
              "the leader appends at most pipeline_ops beyond its commit point");
    VL_ASSERT(!is_leader() || !fetch_, "the leader fetches from nobody");
    if (fetch_) {
        using Purpose = Fetch::Purpose;
        const Status expected = fetch_->purpose == Purpose::catch_up ? Status::normal
                                : fetch_->purpose == Purpose::recover ? Status::recovering
                                                                      : Status::view_change;
        VL_ASSERT(status_ == expected, "each kind of fetch belongs to one status");
        VL_ASSERT(fetch_->purpose == Purpose::catch_up || fetch_->base_op <= op() ||
                      !fetch_->snapshot.empty(),
                  "a pending log replacement joins our log, or a fetched snapshot");
    }
    VL_ASSERT(pending_requests_.empty() || is_leader(), "only the leader queues requests");
    VL_ASSERT(!waiting_for_drain_ || !kernel_state_.fast_ack,
              "the kernel's fast path is off while it is being drained");
    VL_ASSERT(pending_requests_.size() <= config_.request_queue_limit, "bounded request queue");
}

}  // namespace voltlock
