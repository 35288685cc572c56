// The lease rule of docs/leases.md, checked against the real core's leader lease on drifting
// clocks (cluster.h says what is checked).
#include "api/leases.h"
#include "cluster.h"

namespace voltlock::sim {

uint64_t Cluster::local_clock_ms(ReplicaIndex r) const
{
    const ReplicaSlot& slot = replicas_[r];
    return slot.clock_offset_ms +
           static_cast<uint64_t>(slot.clock_rate * static_cast<double>(real_ms()));
}

void Cluster::check_leases()
{
    const double drift = static_cast<double>(options_.max_clock_drift_ppm) / 1e6;
    const double tick_end_ms = static_cast<double>(real_ms() + options_.ms_per_tick - 1);
    for (ReplicaIndex r = 0; r < options_.replica_count; r++) {
        if (crashed(r)) continue;
        const ReplicaSlot& slot = replicas_[r];
        const Replica& replica = *slot.replica;
        if (!replica.is_leader()) continue;
        const View view = replica.view();
        if (!may_expire_at_.contains(view)) {
            // Its LeaseTracker starts counting when it sees itself leader, in this tick.
            const double wait_ms = static_cast<double>(api::LeaseTracker::handover_ms(
                                       options_.session_ttl_ms, replica.config().leader_lease_ms)) /
                                   slot.clock_rate;
            may_expire_at_[view] = static_cast<double>(real_ms()) + wait_ms;
            lease_counters_.leader_starts++;
            for (auto it = granted_until_.begin(); it != granted_until_.end() && it->first < view;
                 ++it)
                if (it->second > may_expire_at_[view])
                    return fail("leases: the leader of view %llu (r%u) may expire a session at "
                                "%.0f ms, while a client of view %llu's leader holds its lease "
                                "until %.0f ms (real time): two holders",
                                static_cast<unsigned long long>(view), r, may_expire_at_[view],
                                static_cast<unsigned long long>(it->first), it->second);
        }
        if (stalled(r)) continue;  // it answers nothing while descheduled
        const uint64_t local_end =
            slot.clock_offset_ms + static_cast<uint64_t>(slot.clock_rate * tick_end_ms);
        if (!replica.holds_leader_lease(local_end)) continue;
        // A keepalive answered now: its client counts the TTL from before, on a slow clock.
        const double until = tick_end_ms + options_.session_ttl_ms / (1 - drift);
        double& granted = granted_until_[view];
        granted = std::max(granted, until);
        lease_counters_.grants++;
        for (auto it = may_expire_at_.upper_bound(view); it != may_expire_at_.end(); ++it) {
            lease_counters_.deposed_grants++;
            if (until > it->second)
                return fail("leases: r%u, leader of view %llu, answered a keepalive at %.0f ms "
                            "whose lease runs to %.0f ms, after the leader of view %llu may "
                            "expire it (%.0f ms; real time): two holders",
                            r, static_cast<unsigned long long>(view), tick_end_ms, until,
                            static_cast<unsigned long long>(it->first), it->second);
        }
    }
}

}  // namespace voltlock::sim
