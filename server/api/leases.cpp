#include "api/leases.h"

#include <algorithm>

namespace voltlock::api {

uint64_t LeaseTracker::handover_ms(uint32_t ttl_ms, uint64_t leader_lease_ms)
{
    // The old leader answered a keepalive at most a leader lease after the new view started,
    // and its client counts the TTL from before that: both on clocks that may run slow, so up
    // to (lease + TTL) / (1 - drift) of real time; a clock that runs fast measures that as
    // (1 + drift) / (1 - drift) times as much. Rounded up.
    const uint64_t million = 1'000'000;
    const uint64_t span = leader_lease_ms + ttl_ms;
    return (span * (million + kMaxClockDriftPpm) + (million - kMaxClockDriftPpm) - 1) /
           (million - kMaxClockDriftPpm);
}

void LeaseTracker::become_leader(uint64_t now_ms, const std::vector<SessionLease>& leases,
                                 uint64_t leader_lease_ms)
{
    active_ = true;
    leader_since_ms_ = now_ms;
    leader_lease_ms_ = leader_lease_ms;
    leases_.clear();
    by_deadline_.clear();
    for (const SessionLease& lease : leases) {
        const uint64_t deadline_ms = now_ms + handover_ms(lease.ttl_ms, leader_lease_ms);
        add(lease.session, Lease{.ttl_ms = lease.ttl_ms,
                                 .lease_epoch = lease.lease_epoch,
                                 .deadline_ms = deadline_ms,
                                 .replicated_deadline_ms = deadline_ms});
    }
}

void LeaseTracker::step_down()
{
    active_ = false;
    leases_.clear();
    by_deadline_.clear();
}

void LeaseTracker::add(SessionId session, const Lease& lease)
{
    if (const auto it = leases_.find(session); it != leases_.end())
        by_deadline_.erase({it->second.deadline_ms, session});
    leases_[session] = lease;
    by_deadline_.emplace(lease.deadline_ms, session);
}

void LeaseTracker::move_deadline(SessionId session, Lease& lease, uint64_t deadline_ms)
{
    if (deadline_ms == lease.deadline_ms) return;
    by_deadline_.erase({lease.deadline_ms, session});
    lease.deadline_ms = deadline_ms;
    by_deadline_.emplace(deadline_ms, session);
}

void LeaseTracker::on_created(SessionId session, uint32_t ttl_ms, Revision lease_epoch,
                              uint64_t now_ms)
{
    if (!active_) return;
    // A creation of the previous view, committed by this leader only now: the old leader may
    // have answered the client and kept the session alive since, so it gets the handover wait
    // like every session this leader found (docs/leases.md, rule 4).
    const uint64_t handed_over_ms = leader_since_ms_ + handover_ms(ttl_ms, leader_lease_ms_);
    add(session, Lease{.ttl_ms = ttl_ms,
                       .lease_epoch = lease_epoch,
                       .deadline_ms = std::max(now_ms + ttl_ms, handed_over_ms),
                       .replicated_deadline_ms = now_ms + ttl_ms});
}

void LeaseTracker::on_renewed(SessionId session, Revision lease_epoch, uint64_t now_ms)
{
    const auto it = leases_.find(session);
    if (!active_ || it == leases_.end()) return;
    Lease& lease = it->second;
    lease.lease_epoch = lease_epoch;
    lease.replicated_deadline_ms = now_ms + lease.ttl_ms;
    move_deadline(session, lease, std::max(lease.deadline_ms, lease.replicated_deadline_ms));
}

void LeaseTracker::on_ended(SessionId session)
{
    const auto it = leases_.find(session);
    if (it == leases_.end()) return;
    by_deadline_.erase({it->second.deadline_ms, session});
    leases_.erase(it);
}

std::optional<LeaseTracker::Renewal> LeaseTracker::keep_alive(SessionId session, uint64_t now_ms)
{
    const auto it = leases_.find(session);
    if (!active_ || it == leases_.end()) return std::nullopt;
    Lease& lease = it->second;
    move_deadline(session, lease, std::max(lease.deadline_ms, now_ms + lease.ttl_ms));
    // Replicate when the machine's lease lags the real one by more than half a TTL, or when an
    // expiry is already on its way: the KeepAlive then either lands first (the expiry becomes
    // stale) or after it (unknown session), and the client hears which.
    const bool replicate =
        lease.expiring || lease.deadline_ms > lease.replicated_deadline_ms + lease.ttl_ms / 2;
    return Renewal{.deadline_ms = lease.deadline_ms, .ttl_ms = lease.ttl_ms,
                   .lease_epoch = lease.lease_epoch, .replicate = replicate};
}

std::vector<ExpireSession> LeaseTracker::take_expired(uint64_t now_ms)
{
    std::vector<ExpireSession> expired;
    if (!active_) return expired;
    for (const auto& [deadline_ms, session] : by_deadline_) {
        if (deadline_ms > now_ms) break;
        Lease& lease = leases_.at(session);
        if (lease.expiring && now_ms < lease.expiring_since_ms + kExpiryRetryMs) continue;
        lease.expiring = true;
        lease.expiring_since_ms = now_ms;
        expired.push_back(ExpireSession{.session = session, .lease_epoch = lease.lease_epoch,
                                        .reason = ExpireReason::lease_expired});
    }
    return expired;
}

void LeaseTracker::expiry_finished(SessionId session)
{
    if (const auto it = leases_.find(session); it != leases_.end()) it->second.expiring = false;
}

std::optional<uint64_t> LeaseTracker::deadline_ms(SessionId session) const
{
    const auto it = leases_.find(session);
    if (it == leases_.end()) return std::nullopt;
    return it->second.deadline_ms;
}

}  // namespace voltlock::api
