// The leader's session leases, kept in memory (DESIGN.md §4; Chubby §2.8). Pure: the caller
// passes the time and the machine's leases, and proposes what this returns.
//
// Only the leader tracks leases. A keepalive renews a lease here, in memory; it is replicated
// (a KeepAlive op) only when the machine's idea of the lease has fallen more than half a TTL
// behind, so a busy session costs about two log entries per TTL, not one per keepalive. When a
// lease runs out the leader proposes ExpireSession{session, lease_epoch}; a KeepAlive applied in
// between changes the epoch and makes that expiry a no-op, so the two cannot race.
//
// After a leader change the new leader knows nothing of the keepalives its predecessor answered
// from memory. The predecessor answered them only while it held its leader lease
// (Replica::holds_leader_lease), so the last lease it granted runs out at most
// handover_ms(ttl) after the new leader took over, on the new leader's clock; until then it
// expires nothing (become_leader). docs/leases.md states the rule and its clock assumption.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/lock_machine.h"
#include "core/lock_ops.h"

namespace voltlock::api {

class LeaseTracker {
public:
    static constexpr uint64_t kExpiryRetryMs = 10'000;

    struct Renewal {
        uint64_t deadline_ms = 0;  // the lease now runs to here (leader's clock)
        uint32_t ttl_ms = 0;
        Revision lease_epoch = 0;
        bool replicate = false;  // propose a KeepAlive before answering
    };

    // The clocks' rates differ from real time by at most this (1%), in parts per million.
    static constexpr uint64_t kMaxClockDriftPpm = 10'000;
    // How long a new leader waits before it expires a session of `ttl_ms`: a leader lease and a
    // TTL, as measured by clocks that may run slow, on a clock that may run fast.
    static uint64_t handover_ms(uint32_t ttl_ms, uint64_t leader_lease_ms);

    bool active() const { return active_; }
    // This replica became the leader: every session gets now + handover_ms(its TTL), and so
    // does a session whose creation it applies later (one its predecessor created and may have
    // kept alive; on_created).
    void become_leader(uint64_t now_ms, const std::vector<SessionLease>& leases,
                       uint64_t leader_lease_ms);
    // This replica is no longer the leader: forget everything.
    void step_down();

    // Applied changes (from the machine's events), so that the leases follow the replicated state.
    void on_created(SessionId session, uint32_t ttl_ms, Revision lease_epoch, uint64_t now_ms);
    void on_renewed(SessionId session, Revision lease_epoch, uint64_t now_ms);
    void on_ended(SessionId session);

    // A keepalive: renews the lease in memory. nullopt: no such session here.
    std::optional<Renewal> keep_alive(SessionId session, uint64_t now_ms);
    // Sessions whose lease has run out and whose expiry is not already proposed; each is marked
    // as being expired until expiry_finished() (or kExpiryRetryMs, if that never comes).
    std::vector<ExpireSession> take_expired(uint64_t now_ms);
    void expiry_finished(SessionId session);

    std::optional<uint64_t> deadline_ms(SessionId session) const;
    size_t size() const { return leases_.size(); }

private:
    struct Lease {
        uint32_t ttl_ms = 0;
        Revision lease_epoch = 0;
        uint64_t deadline_ms = 0;             // in memory: what the leader enforces
        uint64_t replicated_deadline_ms = 0;  // what the last replicated renewal gave
        bool expiring = false;                // an ExpireSession is in flight
        uint64_t expiring_since_ms = 0;       // offered again if it never finished
    };

    void add(SessionId session, const Lease& lease);
    void move_deadline(SessionId session, Lease& lease, uint64_t deadline_ms);

    bool active_ = false;
    uint64_t leader_since_ms_ = 0;  // become_leader's now
    uint64_t leader_lease_ms_ = 0;
    std::map<SessionId, Lease> leases_;
    // Every lease by its deadline, so that the leader's check every 100 ms reads only the leases
    // that have run out, not all of them (200,000 idle sessions cost it 14.5% of a core).
    std::set<std::pair<uint64_t, SessionId>> by_deadline_;
};

}  // namespace voltlock::api
