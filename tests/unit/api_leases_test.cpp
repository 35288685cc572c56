// The leader's in-memory session leases (server/api/leases.h; DESIGN.md §4, Chubby §2.8).
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "api/leases.h"
#include "split_mix64.h"

namespace voltlock::api {
namespace {

TEST_CASE("a new leader expires nothing until every lease its predecessor could have granted ran "
          "out, on clocks that drift by up to 1%")
{
    // (lease + TTL) * 1.01 / 0.99, rounded up: 5,300 ms -> 5,408; 2,300 ms -> 2,347.
    CHECK(LeaseTracker::handover_ms(5'000, 300) == 5'408u);
    CHECK(LeaseTracker::handover_ms(2'000, 300) == 2'347u);
    LeaseTracker leases;
    leases.become_leader(1'000, {{.session = 1, .ttl_ms = 5'000, .lease_epoch = 1},
                                 {.session = 2, .ttl_ms = 2'000, .lease_epoch = 4}},
                         300);
    CHECK(leases.deadline_ms(1) == 6'408u);
    CHECK(leases.take_expired(3'346).empty());
    const auto expired = leases.take_expired(3'347);
    REQUIRE(expired.size() == 1);
    CHECK(expired[0] == ExpireSession{.session = 2, .lease_epoch = 4,
                                      .reason = ExpireReason::lease_expired});
    CHECK(leases.take_expired(3'500).empty());  // already on its way
}

TEST_CASE("a session the old leader created, committed by the new one only after it took over, "
          "waits out the handover too")
{
    // The old leader answered the creation (its Prepare reached a quorum) and then keepalives,
    // up to a leader lease after the new view began; the new leader re-commits the creation and
    // applies it 10 ms after it started tracking leases.
    LeaseTracker leases;
    leases.become_leader(1'000, {}, 300);
    leases.on_created(9, 5'000, 9, 1'010);
    CHECK(leases.deadline_ms(9) == 1'000 + LeaseTracker::handover_ms(5'000, 300));
    CHECK(leases.take_expired(6'407).empty());
    CHECK(leases.take_expired(6'408).size() == 1);
    // A session created long after the handover gets its TTL, as ever.
    leases.on_created(10, 5'000, 10, 20'000);
    CHECK(leases.deadline_ms(10) == 25'000u);
}

TEST_CASE("keepalives renew in memory and are replicated about twice per TTL")
{
    LeaseTracker leases;
    leases.become_leader(0, {}, 0);
    leases.on_created(7, 10'000, 7, 0);
    auto renewal = leases.keep_alive(7, 1'000);
    REQUIRE(renewal);
    CHECK(renewal->deadline_ms == 11'000);
    CHECK_FALSE(renewal->replicate);
    renewal = leases.keep_alive(7, 5'001);  // more than half a TTL past the replicated lease
    CHECK(renewal->replicate);
    leases.on_renewed(7, 20, 5'002);
    CHECK_FALSE(leases.keep_alive(7, 5'100)->replicate);
    CHECK(leases.take_expired(15'001).empty());
    CHECK(leases.take_expired(15'102).front().lease_epoch == 20);
}

TEST_CASE("a keepalive during an expiry is replicated, so the log decides which came first")
{
    LeaseTracker leases;
    leases.become_leader(0, {{.session = 3, .ttl_ms = 1'000, .lease_epoch = 3}}, 0);
    REQUIRE(leases.take_expired(1'021).size() == 1);  // handover_ms(1'000, 0)
    CHECK(leases.keep_alive(3, 1'022)->replicate);
    leases.expiry_finished(3);
    // The keepalive renewed it: nothing is due now.
    CHECK(leases.take_expired(1'500).empty());
}

TEST_CASE("an expiry that never finishes is offered again")
{
    LeaseTracker leases;
    leases.become_leader(0, {{.session = 3, .ttl_ms = 1'000, .lease_epoch = 3}}, 0);
    REQUIRE(leases.take_expired(1'021).size() == 1);
    CHECK(leases.take_expired(1'021 + LeaseTracker::kExpiryRetryMs - 1).empty());
    CHECK(leases.take_expired(1'021 + LeaseTracker::kExpiryRetryMs).size() == 1);
}

TEST_CASE("only the leader tracks; ended sessions and a step-down are forgotten")
{
    LeaseTracker leases;
    leases.on_created(1, 1'000, 1, 0);
    CHECK_FALSE(leases.keep_alive(1, 10));
    leases.become_leader(0, {{.session = 1, .ttl_ms = 1'000, .lease_epoch = 1}}, 0);
    leases.on_ended(1);
    CHECK_FALSE(leases.keep_alive(1, 10));
    leases.on_created(2, 1'000, 2, 0);
    leases.step_down();
    CHECK_FALSE(leases.active());
    CHECK(leases.take_expired(1'000'000).empty());
}

TEST_CASE("the leases that ran out are offered, whatever order creations and renewals came in")
{
    // take_expired reads only the leases whose deadline passed (kept in deadline order): on
    // random creations, keepalives, renewals and ends, it must offer exactly the sessions whose
    // deadline_ms() has passed, less those offered within kExpiryRetryMs and not finished.
    test_support::SplitMix64 random(20261127);
    LeaseTracker leases;
    leases.become_leader(0, {}, 0);
    std::set<SessionId> live;
    std::map<SessionId, uint64_t> offered_at;  // offered and not finished
    uint64_t now = 0;
    SessionId next_session = 1;
    for (int step = 0; step < 20'000; step++) {
        now += random.below(50);
        const SessionId some = live.empty() ? 0 : *std::next(live.begin(),
                                                             long(random.below(live.size())));
        switch (random.below(6)) {
        case 0:
            leases.on_created(next_session, uint32_t(1'000 + random.below(5'000)), step, now);
            live.insert(next_session++);
            break;
        case 1:
            if (some) leases.keep_alive(some, now);
            break;
        case 2:
            if (some) leases.on_renewed(some, step, now);
            break;
        case 3:
            if (some) {
                leases.on_ended(some);
                live.erase(some);
                offered_at.erase(some);
            }
            break;
        case 4:
            if (some) {
                leases.expiry_finished(some);
                offered_at.erase(some);
            }
            break;
        default: {
            std::set<SessionId> offered;
            for (const ExpireSession& e : leases.take_expired(now)) offered.insert(e.session);
            for (const SessionId session : live) {
                const bool due = *leases.deadline_ms(session) <= now;
                const auto it = offered_at.find(session);
                const bool pending =
                    it != offered_at.end() && now < it->second + LeaseTracker::kExpiryRetryMs;
                CHECK(offered.contains(session) == (due && !pending));
                if (offered.contains(session)) offered_at[session] = now;
            }
            for (const SessionId session : offered) CHECK(live.contains(session));
        }
        }
    }
    CHECK(leases.size() == live.size());
}

}  // namespace
}  // namespace voltlock::api
