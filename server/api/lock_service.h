// The loop-side lease service (DESIGN.md §4): the leader's session leases (LeaseTracker),
// ExpireSession and ExpireWaiters proposed on time, and the applied revision (Progress) that
// waits and watches follow. Also the pool of internal VR client ids. Loop thread, except
// ClientPool, which is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "api/leases.h"
#include "api/translate.h"
#include "core/lock_machine.h"
#include "shell/event_loop.h"
#include "shell/node.h"
#include "shell/result.h"

namespace voltlock::api {

using SteadyTime = std::chrono::steady_clock::time_point;

// The applied revision, published on the loop after every apply; listeners (waits, watches) run
// right then, on the loop.
class Progress {
public:
    void publish(Revision revision);
    Revision revision() const { return revision_; }
    void on_change(std::function<void(Revision)> listener)
    {
        listeners_.push_back(std::move(listener));
    }

private:
    Revision revision_ = 0;
    std::vector<std::function<void(Revision)>> listeners_;
};

// Internal VR client ids for requests that bring none. Thread-safe.
class ClientPool {
public:
    ClientPool();
    // An id with no request outstanding, and its next request number; nullopt while all
    // kMaxIds are out.
    std::optional<ClientIdentity> try_take();
    void give_back(ClientId id);
    size_t size() const;

    static constexpr size_t kMaxIds = 1024;

private:
    mutable std::mutex mutex_;
    ClientId base_ = 0;  // random per process: ids never collide with an earlier run's
    std::map<ClientId, RequestNumber> next_;  // every id made so far -> its last number
    std::vector<ClientId> free_;
};

// The loop's half of the lock service: events, leases, deadlines, internal proposals. Every
// member function runs on the loop thread.
class LockService {
public:
    LockService(EventLoop& loop, Node& node, LockMachine& machine, ClientPool& pool,
                Progress& progress);
    Result<Ok> start();

    // A keepalive at this replica: not the leader, no such session, or the renewal.
    struct KeepAliveAnswer {
        bool leader = false;
        bool known = false;
        LeaseTracker::Renewal renewal;
    };
    KeepAliveAnswer keep_alive(SessionId session);
    // The lease deadline the leader enforces, when this replica is the leader.
    std::optional<uint64_t> lease_deadline_ms(SessionId session) const;
    size_t leases_tracked() const { return leases_.size(); }

    // VR drops a request whose number is below its client's latest (executed, or on its way),
    // without an answer. The API refuses those at once instead, from this replica's client
    // table and the proposals it has in flight.
    // Returns the client's latest number when `number` is below it.
    std::optional<RequestNumber> stale_request(ClientId client, RequestNumber number) const;
    void proposing(ClientId client, RequestNumber number);
    void proposed(ClientId client, RequestNumber number);
    // Proposes an op of the leader's own (ExpireSession, ExpireWaiters) with a pooled id; false
    // when no id is free.
    bool propose_internal(const LockOp& op, std::function<void(const ProposeOutcome&)> done);
    uint64_t expiries_proposed() const { return expiries_proposed_; }
    uint64_t expire_waiters_proposed() const { return expire_waiters_proposed_; }

private:
    void on_executed();
    void on_lease_timer();
    void on_deadline_timer();
    void check_leadership();
    void arm_deadline_timer();
    void maybe_expire_waiters();
    EventLoop& loop_;
    Node& node_;
    LockMachine& machine_;
    ClientPool& pool_;
    Progress& progress_;
    LeaseTracker leases_;
    FileDescriptor lease_timer_;
    FileDescriptor deadline_timer_;
    std::optional<View> leader_view_;
    bool expire_waiters_in_flight_ = false;
    uint64_t last_expire_waiters_ms_ = 0;
    uint64_t armed_at_ms_ = 0;
    uint64_t expiries_proposed_ = 0;
    uint64_t expire_waiters_proposed_ = 0;
    std::unordered_map<ClientId, RequestNumber> in_flight_;  // proposed here, not yet answered
};

}  // namespace voltlock::api
