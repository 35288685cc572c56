#include "core/replica.h"

#include <algorithm>

#include "core/assert.h"

namespace voltlock {

// ---- Recovery (§4.3) ------------------------------------------------------------------------

void Replica::start_recovery_round()
{
    recovery_round_ += 1;
    recovery_responses_.clear();
    restart_votes_.clear();
    awaiting_first_leader_since_.reset();
    recovery_target_.reset();
    fetch_.reset();
    status_since_tick_ = tick_;
    status_messages_sent_tick_ = tick_;
    broadcast(Recovery{.replica = config_.replica, .nonce = recovery_nonce()});
    // A cell of one is a quorum by itself: no answer will come to count (vr_sim seed 3 x 1 sat
    // recovering forever after a restart from its data directory, and after a start on a new
    // one).
    maybe_restart_cell();
    if (status_ == Status::recovering) maybe_bootstrap();
}

void Replica::on_recovery(const Recovery& m)
{
    // A recovering replica runs no view: it has lost our leader as much as one that asks
    // (suspect_leader), and a follower cut off from its leader while the others restart counts
    // it to change views (else it would wait for ever in a view nobody leads).
    if (status_ == Status::normal)
        view_change_asked_[m.replica] = {.view = view_ + 1, .tick = tick_};
    // §4.3 step 2: only replicas in normal status answer, and among them only those whose
    // state is the cell's (a restart's view whose fence has not committed may still give way to
    // another); and, for a whole-cell restart, those recovering with the state of their data
    // directory, or taking part in the restart's view change with it, saying so.
    const bool restarting = (status_ == Status::recovering && restored_) ||
                            (restart_view_change_ && !joining(view_));
    // A replica changing views with the cell's state (a leader that heard no quorum steps down
    // into one) answers too, so that a restart does not leave its state out: its answer names
    // a view past its last normal view, which §4.3 step 3 does not count (issue 11, scenario 2).
    const bool live_changing_views = status_ == Status::view_change && been_normal_ &&
                                     !state_unconfirmed_ && !restart_view_change_;
    // And one recovering from nothing, saying so: a replica on a new data directory counts it
    // as holding nothing (maybe_bootstrap).
    const bool blank = status_ == Status::recovering && !restored_ && !recovery_target_;
    if ((status_ != Status::normal || state_unconfirmed_) && !restarting && !live_changing_views &&
        !blank)
        return ignore(__func__, Ignored::not_answering);
    const Standing standing = restarting ? Standing::restarting
                              : blank    ? Standing::blank
                                         : Standing::member;
    send(m.replica, RecoveryResponse{.view = view_,
                                     .replica = config_.replica,
                                     .nonce = m.nonce,
                                     .op = op(),
                                     .commit = commit_,
                                     .last_normal_view = last_normal_view_,
                                     .standing = standing});
}

void Replica::on_recovery_response(const RecoveryResponse& m)
{
    if (status_ != Status::recovering || m.nonce != recovery_nonce() || recovery_target_)
        return ignore(__func__, Ignored::other_recovery, m.op);
    if (m.standing == Standing::restarting) {
        recovery_responses_.erase(m.replica);
        restart_votes_[m.replica] = m;
        maybe_restart_cell();
        if (status_ == Status::recovering) maybe_bootstrap();
        return;
    }
    restart_votes_.erase(m.replica);
    recovery_responses_[m.replica] = m;
    // §4.3 step 3: f + 1 responses from replicas in normal status (in view change, a replica's
    // view is past its last normal view), one of them from the leader of the latest view.
    const auto in_normal_status = [](const RecoveryResponse& response) {
        return response.standing == Standing::member &&
               response.view == response.last_normal_view;
    };
    size_t normal_responses = 0;
    View latest = 0;
    for (const auto& [replica, response] : recovery_responses_) {
        if (!in_normal_status(response)) continue;
        normal_responses += 1;
        latest = std::max(latest, response.view);
    }
    if (normal_responses < quorum()) {
        maybe_restart_cell();  // an answer from a replica changing views may complete a restart
        if (status_ == Status::recovering && maybe_bootstrap()) return;
        return ignore(__func__, Ignored::awaiting_answers, m.op);
    }
    const auto leader_response = recovery_responses_.find(leader_of(latest));
    if (leader_response == recovery_responses_.end() || leader_response->second.view != latest ||
        !in_normal_status(leader_response->second)) {
        if (maybe_bootstrap()) return;
        return ignore(__func__, Ignored::awaiting_answers, m.op);
    }
    if (state_unconfirmed_) {
        // A state restored from a snapshot alone may not be the cell's history (the cell may
        // have restarted without us): the leader's replaces it whole.
        recovery_target_ = leader_response->second;
        view_ = latest;
        // Ours may be of a later view than the cell's, if the cell restarted without us.
        last_normal_view_ = std::min(last_normal_view_, latest);
        if (recovery_target_->op == 0) {
            discard_state();
            state_unconfirmed_ = false;  // the leader's, which answered only as the cell's
            finish_recovery(recovery_target_->commit);
        } else {
            start_fetch(Fetch::Purpose::recover, leader(), 0, recovery_target_->op, {}, true);
        }
        return;
    }
    // A durable state ahead of the cell's cannot be; wait for answers that explain it.
    if (leader_response->second.op < commit_ || latest < last_normal_view_)
        return ignore(__func__, Ignored::ahead_of_cell, m.op);
    recovery_target_ = leader_response->second;
    view_ = latest;
    // What we restored is committed; whatever our log holds after it is replaced.
    if (recovery_target_->op == commit_) {
        truncate_log(commit_);
        finish_recovery(recovery_target_->commit);
    } else {
        start_fetch(Fetch::Purpose::recover, leader(), commit_, recovery_target_->op);
    }
}

void Replica::maybe_restart_cell()
{
    // A quorum recovering with the state of their data directories, ourselves among them: no
    // quorum runs normally to recover from, so the restarting replicas run a view change with
    // what each restored, and §4.2's rule selects the newest state among a quorum.
    if (!restored_ || restart_votes_.size() + 1 < quorum()) return;
    // Until every replica answered, or half a round passed: a replica that runs normally may
    // answer after the restarting ones did, and its state must not be left out (below).
    const bool all_answered =
        restart_votes_.size() + recovery_responses_.size() + 1 == config_.replica_count;
    if (!all_answered && tick_ - status_since_tick_ < config_.view_change_timeout_ticks / 2)
        return;
    View latest = view_;
    for (const auto& [replica, vote] : restart_votes_) latest = std::max(latest, vote.view);
    // A replica that answered as normal never stopped: its state holds every op the cell
    // committed, which a snapshot of ours may not. The restart's view is then one it leads, so
    // that the view starts only with its state among those selected from, and the largest
    // commit wins; a view led by a restarting replica could start from our snapshots alone and
    // make it drop committed ops (issue 11, scenario 2: 10 of 130 acknowledged writes lost).
    std::optional<ReplicaIndex> live;
    for (const auto& [replica, response] : recovery_responses_) {
        if (response.standing == Standing::blank) continue;
        if (!live || response.view > recovery_responses_.at(*live).view) live = replica;
        latest = std::max(latest, response.view);
    }
    View view = latest + 1;
    while (live && leader_of(view) != *live) view += 1;
    leave_restart_for_view_change();
    start_view_change(view);
}

bool Replica::maybe_bootstrap()
{
    // A replica on a new data directory (no --recover) cannot tell a new cell from one that it
    // was in before its disk was lost, and may have acknowledged ops that it no longer has. It
    // takes part in the cell with nothing only once every other replica answered in this round
    // and the answers show that the cell committed nothing; otherwise it recovers (§4.3) once a
    // quorum runs normally.
    if (!may_bootstrap_ || recovery_target_ ||
        recovery_responses_.size() + restart_votes_.size() + 1 < config_.replica_count)
        return false;
    bool all_hold_nothing = true;
    bool only_view_0_ran = true;  // no view after 0 ever started: a quorum would say so
    bool none_committed = true;
    bool all_blank = true;
    bool fresh = true;  // every answer blank, or in normal status in view 0
    View latest = view_;
    for (const auto* answers : {&recovery_responses_, &restart_votes_}) {
        for (const auto& [replica, answer] : *answers) {
            all_hold_nothing = all_hold_nothing && answer.op == 0;
            only_view_0_ran = only_view_0_ran && answer.last_normal_view == 0;
            none_committed = none_committed && answer.commit == 0;
            all_blank = all_blank && answer.standing == Standing::blank;
            fresh = fresh && (answer.standing == Standing::blank ||
                              (answer.standing == Standing::member && answer.view == 0));
            latest = std::max(latest, answer.view);
        }
    }
    const auto first_leader = recovery_responses_.find(leader_of(0));
    const bool first_leader_member = first_leader != recovery_responses_.end() &&
                                     first_leader->second.standing == Standing::member;
    // A committed op is held by a quorum: if every other replica holds nothing, so did the cell,
    // unless all of them lost their state too (more than f faults). Or only view 0 ran, and its
    // leader, which commits its ops and kept its state, committed none: others may hold its
    // uncommitted ops, which we can fetch from it.
    if (!all_hold_nothing && !(only_view_0_ran && none_committed && first_leader_member))
        return false;
    // A new cell starts in view 0 as StartFresh does, its leader first. A leader of view 0 whose
    // disk was lost may have Prepares of its own still on their way: it starts view 0 again only
    // with every other replica blank (none took part in a view 0), and else waits for the others
    // to change views away from its silence.
    const bool first_leader_normal = first_leader_member && first_leader->second.view == 0;
    const bool may_start_view_0 =
        fresh && (config_.replica == leader_of(0) ? all_blank : first_leader_normal);
    // Half a round from the last answer is long enough to wait for that: view 0's leader may
    // never come (its disk lost too, and restarted with --recover).
    if (!may_start_view_0 && fresh) {
        if (!awaiting_first_leader_since_) awaiting_first_leader_since_ = tick_;
        if (tick_ - *awaiting_first_leader_since_ < config_.view_change_timeout_ticks / 2)
            return false;
    }
    recovery_responses_.clear();
    restart_votes_.clear();
    if (may_start_view_0) {
        enter_normal(0);
        // As a fresh cell's leader at its first tick: the others had no chance to answer yet.
        std::fill(answered_tick_.begin(), answered_tick_.end(), tick_);
    } else {
        // A view change gathers everyone into a view that none of us ran (some may have moved
        // past view 0), with what they hold. Like a live replica's, our state (none) is the
        // cell's: we answer Recovery while changing views (on_recovery).
        status_ = Status::view_change;  // start_view_change sets the view
        been_normal_ = true;
        start_view_change(latest + 1);
    }
    may_bootstrap_ = false;
    counters_.bootstraps += 1;
    return true;
}

bool Replica::join_restart(View view)
{
    // Another restarting replica started the restart's view change before we counted a quorum
    // of votes (or a live cell is changing views): take part with what we restored, if it is
    // whole (durability sync, or a clean stop): our log then holds everything we acknowledged.
    // A state restored from a snapshot alone ends at the snapshot, and a live cell's view
    // change that counted it could lose ops acknowledged after it (vr_sim seed 1 x 3: one crash
    // lost ops 571-586); it joins a restart only by counting a quorum of restarting replicas
    // itself (maybe_restart_cell).
    if (!restored_ || !restored_whole_) return false;
    if (view > view_) {
        leave_restart_for_view_change();  // the caller starts the view change to `view`
        return true;
    }
    // A view change to our view or an earlier one: if we stopped in ours, never having run its
    // view, we go on with it as if we had not stopped. A leader that heard no quorum steps down
    // into one, and a replica changing views with too few others climbs no further (on_tick):
    // it waits for us (CI, 2026-11-29: a cell whose leader stepped down, stopped and restarted
    // stayed without a leader for good).
    if (last_normal_view_ == view_) return false;
    leave_restart_for_view_change();
    enter_view_change();
    return true;
}

void Replica::leave_restart_for_view_change()
{
    restored_ = false;
    restart_votes_.clear();
    recovery_responses_.clear();
    status_ = Status::view_change;  // start_view_change sets the view
    // Durability snapshot: also with a whole state of ours (a clean stop), since the others may
    // hold a snapshot alone, and those join only by counting our answer (join_restart). Before,
    // a replica stopped cleanly that counted a crashed one's vote ran the restart's view change
    // alone and answered it nothing: neither got further (an operator's finding, 2026-11-29).
    restart_view_change_ = !config_.persist_log;
    counters_.cell_restarts += 1;
}

void Replica::finish_recovery(Op commit)
{
    recovery_target_.reset();
    recovery_responses_.clear();
    may_bootstrap_ = false;
    enter_normal(view_);
    counters_.recoveries += 1;
    commit_to(std::min(commit, op()));
    send(leader(), PrepareOk{.view = view_, .replica = config_.replica, .op = op()});
}

uint64_t Replica::recovery_nonce() const { return recovery_nonce_base_ + recovery_round_; }

void Replica::propose_restart_fence()
{
    // Ahead of every client's request; the view number keeps it apart from an earlier fence.
    pending_requests_.push_front(
        Request{.view = view_, .client_id = kCellClientId, .request_number = view_});
    send_prepares(true);
}

}  // namespace voltlock
