// The lock service's replicated state machine (server/core/lock_machine.h): one test per rule of
// DESIGN.md §4 and issue 5. Every op goes through the codec (encode, apply, decode the result),
// and every apply ends with the machine's full invariant check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/lock_machine.h"
#include "core/lock_ops.h"
#include "split_mix64.h"

namespace voltlock {
namespace {

// ---- Harness -----------------------------------------------------------------------------------

class Machine {
public:
    explicit Machine(size_t history_events = 10'000)
        : machine_(LockMachineConfig{.history_events = history_events,
                                     .check_invariants_every_apply = true})
    {
    }

    // Applies `op` as the next log entry, stamped with the current time, through the codec.
    OpResult run(const LockOp& op)
    {
        const Entry entry{.timestamp_ms = now, .client_id = 1, .request_number = op_ + 1,
                          .payload = encode_op(op)};
        const Bytes result = machine_.apply(++op_, entry);
        auto decoded = decode_result(result);
        REQUIRE(decoded.ok());
        return decoded.value();
    }
    Bytes run_payload(const Bytes& payload)
    {
        return machine_.apply(++op_, Entry{.timestamp_ms = now, .payload = payload});
    }

    template <typename T>
    T ok(const LockOp& op)
    {
        const OpResult result = run(op);
        if (const auto* error = std::get_if<OpError>(&result))
            FAIL("expected success from " << op_code_name(op_code(op)) << ", got "
                                          << error_code_name(error->code));
        REQUIRE(std::holds_alternative<T>(result));
        return std::get<T>(result);
    }
    OpError fails(const LockOp& op, ErrorCode code)
    {
        const OpResult result = run(op);
        REQUIRE(std::holds_alternative<OpError>(result));
        const OpError error = std::get<OpError>(result);
        CHECK(error.code == code);
        CHECK(error.op == op_code(op));
        return error;
    }

    SessionId session(uint32_t ttl_ms = 10'000, uint32_t lock_delay_ms = 0)
    {
        return ok<CreateSessionResult>(
                   CreateSession{.ttl_ms = ttl_ms, .lock_delay_ms = lock_delay_ms, .name = "s"})
            .session;
    }
    AcquireResult acquire(const std::string& lock, SessionId s, LockMode mode = LockMode::exclusive,
                          uint32_t wait_ms = 0)
    {
        return ok<AcquireResult>(
            Acquire{.lock = lock, .session = s, .mode = mode, .wait_ms = wait_ms});
    }
    Sequencer granted(const std::string& lock, SessionId s, LockMode mode = LockMode::exclusive)
    {
        const AcquireResult r = acquire(lock, s, mode);
        REQUIRE(r.status == AcquireStatus::granted);
        return r.sequencer;
    }
    AcquireResult waits(const std::string& lock, SessionId s, uint32_t wait_ms,
                        LockMode mode = LockMode::exclusive)
    {
        const AcquireResult r = acquire(lock, s, mode, wait_ms);
        REQUIRE(r.status == AcquireStatus::waiting);
        return r;
    }
    ReleaseResult release(const std::string& lock, SessionId s)
    {
        return ok<ReleaseResult>(Release{.lock = lock, .session = s});
    }
    PutResult put(const std::string& key, const Bytes& value, SessionId s = 0)
    {
        return ok<PutResult>(Put{.key = key, .value = value, .session = s});
    }
    GetResult get(Get g) { return ok<GetResult>(g); }
    bool valid(const Sequencer& s)
    {
        const bool answer = ok<CheckSequencerResult>(CheckSequencer{.sequencer = s}).valid;
        CHECK(answer == machine_.sequencer_valid(s));
        return answer;
    }
    Revision lease_epoch(SessionId s) const { return machine_.state().sessions.at(s).lease_epoch; }
    void tick() { ok<ExpireWaitersResult>(ExpireWaiters{}); }

    std::vector<WatchEvent> events() { return machine_.drain_events(); }
    // Holders of a lock, in grant order (empty if the lock does not exist).
    std::vector<SessionId> holders(const std::string& lock) const
    {
        std::vector<SessionId> out;
        if (const auto it = machine_.state().locks.find(lock); it != machine_.state().locks.end())
            for (const LockHolder& h : it->second.holders) out.push_back(h.session);
        return out;
    }
    std::vector<SessionId> waiters(const std::string& lock) const
    {
        std::vector<SessionId> out;
        if (const auto it = machine_.state().locks.find(lock); it != machine_.state().locks.end())
            for (const LockWaiter& w : it->second.waiters) out.push_back(w.session);
        return out;
    }

    LockMachine& machine() { return machine_; }
    const LockServiceState& state() const { return machine_.state(); }
    Revision revision() const { return machine_.revision(); }

    uint64_t now = 1'000'000;

private:
    LockMachine machine_;
    Op op_ = 0;
};

std::vector<EventType> types(const std::vector<WatchEvent>& events)
{
    std::vector<EventType> out;
    for (const WatchEvent& e : events) out.push_back(e.type);
    return out;
}

std::vector<WatchEvent> of_type(const std::vector<WatchEvent>& events, EventType type)
{
    std::vector<WatchEvent> out;
    for (const WatchEvent& e : events)
        if (e.type == type) out.push_back(e);
    return out;
}

// Everything but the clock and the op counter, which every apply advances.
void check_unchanged(const LockServiceState& before, const LockServiceState& after)
{
    CHECK(after.revision == before.revision);
    CHECK(after.last_generation == before.last_generation);
    CHECK(after.sessions == before.sessions);
    CHECK(after.locks == before.locks);
    CHECK(after.kv == before.kv);
    CHECK(after.barriers == before.barriers);
    CHECK(after.timers == before.timers);
    CHECK(after.history == before.history);
    CHECK(after.compacted_revision == before.compacted_revision);
}

// ---- Revisions and sessions --------------------------------------------------------------------

TEST_CASE("lock machine: every write bumps the revision once; reads and failures do not")
{
    Machine h;
    CHECK(h.revision() == 0);
    const SessionId s = h.session();
    CHECK(s == 1);  // a session's id is the revision of its create
    CHECK(h.put("a/1", "x").revision == 2);
    CHECK(h.put("a/2", "y", s).revision == 3);
    CHECK(h.put("a/3", "z").revision == 4);
    CHECK(h.get(Get{.key = "a/1"}).revision == 4);
    CHECK(h.ok<DeleteResult>(Delete{.key = "a/", .prefix = true}).revision == 5);  // 3 keys, 1 bump
    CHECK(h.fails(Put{.key = "a/1", .value = "v", .prev_revision = 99}, ErrorCode::cas_mismatch)
              .revision == 5);
    h.granted("L", s);
    CHECK(h.revision() == 6);
    const SessionId t = h.session();
    CHECK(t == 7);
    CHECK(h.ok<CloseSessionResult>(CloseSession{.session = s}).revision == 8);
    CHECK(h.ok<CheckSequencerResult>(CheckSequencer{.sequencer = {.lock = "L"}}).revision == 8);
}

TEST_CASE("lock machine: skipping past lost writes never hands out a revision, session id or "
          "lock generation twice")
{
    // After a whole-cell restart from snapshots, writes that followed them may be lost; what
    // the restarted cell hands out next must differ from anything they were given.
    Machine h;
    const SessionId s = h.session();
    const Sequencer first = h.granted("L", s);
    h.put("k", "v");
    const Revision before = h.revision();
    h.machine().skip_past_lost_writes();
    h.machine().check_invariants();
    CHECK(h.revision() == before + LockMachine::kLostWritesBound);
    CHECK(h.machine().oldest_revision() == h.revision() + 1);
    // A watch from before the jump is told its revisions are compacted, not silently served.
    CHECK(h.machine().watch(before, WatchFilter{.key = "k"}).compacted);
    CHECK(h.put("k", "w").revision == before + LockMachine::kLostWritesBound + 1);
    const SessionId t = h.session();
    CHECK(t > before + LockMachine::kLostWritesBound);
    h.release("L", s);
    CHECK(h.granted("L", t).generation == first.generation + LockMachine::kLostWritesBound + 1);
    CHECK(h.get(Get{.key = "k"}).revision == h.revision());
}

TEST_CASE("lock machine: KeepAlive renews the lease epoch and the deadline")
{
    Machine h;
    const SessionId s = h.session(5'000);
    CHECK(h.state().sessions.at(s).deadline_ms == h.now + 5'000);
    h.now += 3'000;
    const auto kept = h.ok<KeepAliveResult>(KeepAlive{.session = s});
    CHECK(kept.lease_epoch == kept.revision);
    CHECK(kept.lease_epoch > s);
    CHECK(kept.deadline_ms == h.now + 5'000);
    CHECK(h.lease_epoch(s) == kept.lease_epoch);
    CHECK(types(h.events()) ==
          std::vector{EventType::session_create, EventType::session_keepalive});
}

TEST_CASE("lock machine: ExpireSession with a stale lease epoch is a no-op")
{
    Machine h;
    const SessionId s = h.session();
    const Revision epoch = h.lease_epoch(s);
    h.ok<KeepAliveResult>(KeepAlive{.session = s});  // the lease was renewed after the decision
    const LockServiceState before = h.state();
    const auto stale = h.ok<ExpireSessionResult>(ExpireSession{.session = s, .lease_epoch = epoch});
    CHECK(!stale.ended);
    check_unchanged(before, h.state());
    const auto current =
        h.ok<ExpireSessionResult>(ExpireSession{.session = s, .lease_epoch = h.lease_epoch(s)});
    CHECK(current.ended);
    CHECK(!h.state().sessions.contains(s));
    const auto events = h.events();
    CHECK(events.back().type == EventType::session_expire);
    CHECK(events.back().cause == Cause::session_expired);
}

TEST_CASE("lock machine: ops naming an unknown session fail with unknown_session, changing nothing")
{
    Machine h;
    const SessionId s = h.session();
    h.granted("L", s);
    const SessionId ghost = 999;
    const LockServiceState before = h.state();
    h.fails(KeepAlive{.session = ghost}, ErrorCode::unknown_session);
    h.fails(CloseSession{.session = ghost}, ErrorCode::unknown_session);
    h.fails(ExpireSession{.session = ghost, .lease_epoch = 1}, ErrorCode::unknown_session);
    h.fails(Acquire{.lock = "L", .session = ghost, .wait_ms = 100}, ErrorCode::unknown_session);
    h.fails(Release{.lock = "L", .session = ghost}, ErrorCode::unknown_session);
    h.fails(Put{.key = "k", .value = "v", .session = ghost}, ErrorCode::unknown_session);
    h.fails(BarrierEnter{.barrier = "B", .session = ghost, .count = 2, .wait_ms = 10},
            ErrorCode::unknown_session);
    h.fails(BarrierLeave{.barrier = "B", .session = ghost}, ErrorCode::unknown_session);
    check_unchanged(before, h.state());
}

TEST_CASE("lock machine: session_leases gives a new leader every session's ttl and lease epoch")
{
    Machine h;
    const SessionId a = h.session(5'000);
    const SessionId b = h.session(60'000, 1'000);
    h.ok<KeepAliveResult>(KeepAlive{.session = a});
    CHECK(h.machine().session_leases() ==
          std::vector<SessionLease>{
              {.session = a, .ttl_ms = 5'000, .lease_epoch = h.lease_epoch(a)},
              {.session = b, .ttl_ms = 60'000, .lease_epoch = b}});
}

TEST_CASE("lock machine: time never moves backwards when a new leader's clock is behind")
{
    Machine h;
    const SessionId s = h.session(10'000);
    const uint64_t t0 = h.now;
    h.now = t0 - 5'000;  // the next leader's clock lags
    CHECK(h.ok<KeepAliveResult>(KeepAlive{.session = s}).deadline_ms == t0 + 10'000);
    CHECK(h.machine().time_ms() == t0);
    const SessionId t = h.session();
    h.granted("L", s);
    CHECK(h.waits("L", t, 1'000).deadline_ms == t0 + 1'000);
}

TEST_CASE("lock machine: a malformed payload answers malformed and changes nothing")
{
    Machine h;
    h.session();
    const LockServiceState before = h.state();
    auto r = decode_result(h.run_payload("\x63"));
    REQUIRE(r.ok());
    CHECK(std::get<OpError>(r.value()) ==
          OpError{.op = OpCode::none, .code = ErrorCode::malformed, .revision = 1,
                  .detail = static_cast<uint64_t>(OpDecodeError::unknown_op)});
    r = decode_result(h.run_payload(Bytes("\x05\x01", 2)));  // an Acquire cut short
    REQUIRE(r.ok());
    CHECK(std::get<OpError>(r.value()).op == OpCode::acquire);
    CHECK(std::get<OpError>(r.value()).detail == static_cast<uint64_t>(OpDecodeError::truncated));
    check_unchanged(before, h.state());
}

TEST_CASE("lock machine: invalid arguments are refused by the machine too")
{
    Machine h;
    const SessionId s = h.session();
    const LockServiceState before = h.state();
    CHECK(h.fails(Acquire{.lock = "L\n", .session = s}, ErrorCode::invalid_argument).detail ==
          static_cast<uint64_t>(Violation::name_control_character));
    CHECK(h.fails(CreateSession{.ttl_ms = 1}, ErrorCode::invalid_argument).detail ==
          static_cast<uint64_t>(Violation::ttl_out_of_range));
    check_unchanged(before, h.state());
}

// ---- Locks: compatibility, queueing, generations -----------------------------------------------

TEST_CASE("lock machine: an exclusive lock is granted when free and busy with wait 0 when held")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const Sequencer seq = h.granted("db/primary", a);
    CHECK(seq == Sequencer{.lock = "db/primary", .mode = LockMode::exclusive, .generation = 1,
                           .session = a});
    const LockServiceState before = h.state();
    h.fails(Acquire{.lock = "db/primary", .session = b, .wait_ms = 0}, ErrorCode::busy);
    h.fails(Acquire{.lock = "db/primary", .session = b, .mode = LockMode::shared, .wait_ms = 0},
            ErrorCode::busy);
    check_unchanged(before, h.state());
}

TEST_CASE("lock machine: shared holders share; exclusive and shared exclude each other")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    h.granted("L", a, LockMode::shared);
    h.granted("L", b, LockMode::shared);
    CHECK(h.holders("L") == std::vector{a, b});
    h.fails(Acquire{.lock = "L", .session = c, .mode = LockMode::exclusive}, ErrorCode::busy);
    h.release("L", a);
    h.release("L", b);
    h.granted("L", c, LockMode::exclusive);
    h.fails(Acquire{.lock = "L", .session = a, .mode = LockMode::shared}, ErrorCode::busy);
}

TEST_CASE("lock machine: waiters are granted in FIFO order, one release one grant")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    const SessionId d = h.session();
    h.granted("L", a);
    CHECK(h.waits("L", b, 60'000).position == 1);
    CHECK(h.waits("L", c, 60'000).position == 2);
    CHECK(h.waits("L", d, 60'000).position == 3);
    h.events();
    for (const SessionId next : {b, c, d}) {
        const SessionId holder = h.holders("L").front();
        CHECK(h.release("L", holder).granted == 1);
        CHECK(h.holders("L") == std::vector{next});
        const auto grants = of_type(h.events(), EventType::lock_grant);
        REQUIRE(grants.size() == 1);
        CHECK(grants[0].session == next);
    }
}

TEST_CASE("lock machine: a release grants the run of shared waiters at the head, no further")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId s1 = h.session();
    const SessionId s2 = h.session();
    const SessionId x = h.session();
    const SessionId s3 = h.session();
    h.granted("L", a);
    h.waits("L", s1, 60'000, LockMode::shared);
    h.waits("L", s2, 60'000, LockMode::shared);
    h.waits("L", x, 60'000, LockMode::exclusive);
    h.waits("L", s3, 60'000, LockMode::shared);

    CHECK(h.release("L", a).granted == 2);  // s1 and s2 together; s3 stays behind x
    CHECK(h.holders("L") == std::vector{s1, s2});
    CHECK(h.waiters("L") == std::vector{x, s3});
    CHECK(h.release("L", s1).granted == 0);  // s2 still holds
    CHECK(h.release("L", s2).granted == 1);
    CHECK(h.holders("L") == std::vector{x});
    CHECK(h.release("L", x).granted == 1);
    CHECK(h.holders("L") == std::vector{s3});
}

TEST_CASE("lock machine: a shared acquire does not overtake a queued exclusive waiter")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId x = h.session();
    const SessionId b = h.session();
    h.granted("L", a, LockMode::shared);
    h.waits("L", x, 60'000, LockMode::exclusive);
    // Compatible with the holder, but x is first in line.
    h.fails(Acquire{.lock = "L", .session = b, .mode = LockMode::shared}, ErrorCode::busy);
    CHECK(h.waits("L", b, 60'000, LockMode::shared).position == 2);
    h.release("L", a);
    CHECK(h.holders("L") == std::vector{x});
}

TEST_CASE("lock machine: every grant bumps the generation; a sequencer is valid while it stands")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const Sequencer first = h.granted("L", a);
    CHECK(h.valid(first));
    Sequencer other_mode = first;
    other_mode.mode = LockMode::shared;
    CHECK(!h.valid(other_mode));
    Sequencer other_session = first;
    other_session.session = b;
    CHECK(!h.valid(other_session));

    h.release("L", a);  // the lock is idle and forgotten; its generations are not reused
    CHECK(!h.valid(first));
    const Sequencer second = h.granted("L", a);
    CHECK(second.generation > first.generation);
    CHECK(!h.valid(first));
    CHECK(h.valid(second));
    h.waits("L", b, 60'000);
    h.release("L", a);
    CHECK(!h.valid(second));
    const auto grant = of_type(h.events(), EventType::lock_grant).back();
    CHECK(grant.session == b);
    CHECK(grant.generation > second.generation);
    CHECK(h.state().locks.at("L").generation == grant.generation);

    // Each shared holder has its own grant and generation.
    const SessionId c = h.session();
    h.release("L", b);
    const Sequencer sb = h.granted("L", b, LockMode::shared);
    const Sequencer sc = h.granted("L", c, LockMode::shared);
    CHECK(sc.generation == sb.generation + 1);
    CHECK((h.valid(sb) && h.valid(sc)));
    h.release("L", b);
    CHECK((!h.valid(sb) && h.valid(sc)));
}

TEST_CASE("lock machine: a retried acquire keeps the waiter's place; a holder's is granted again")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    const Sequencer seq = h.granted("L", a);
    const Revision revision = h.revision();
    CHECK(h.acquire("L", a).sequencer == seq);  // same grant, nothing changes
    CHECK(h.revision() == revision);

    const uint64_t t0 = h.now;
    h.waits("L", b, 1'000);
    h.waits("L", c, 60'000);
    h.now += 500;
    const AcquireResult again = h.waits("L", b, 1'000);  // asked again after a failover
    CHECK(again.position == 1);
    CHECK(again.deadline_ms == t0 + 1'500);
    h.now = t0 + 1'200;  // past the first deadline, not the second
    h.tick();
    CHECK(h.waiters("L") == std::vector{b, c});
    h.fails(Acquire{.lock = "L", .session = b, .wait_ms = 0}, ErrorCode::busy);  // still waiting
    CHECK(h.waiters("L") == std::vector{b, c});
}

TEST_CASE("lock machine: asking again in the other mode is a mode conflict")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    h.granted("L", a);
    h.waits("L", b, 60'000);
    const LockServiceState before = h.state();
    CHECK(h.fails(Acquire{.lock = "L", .session = a, .mode = LockMode::shared},
                  ErrorCode::mode_conflict)
              .detail == static_cast<uint64_t>(LockMode::exclusive));
    h.fails(Acquire{.lock = "L", .session = b, .mode = LockMode::shared, .wait_ms = 10},
            ErrorCode::mode_conflict);
    check_unchanged(before, h.state());
}

TEST_CASE("lock machine: release by a waiter withdraws its wait; by anyone else it is not_held")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    h.granted("L", a);
    h.waits("L", b, 60'000);
    h.events();
    const ReleaseResult withdrawn = h.release("L", b);
    CHECK(!withdrawn.released);
    CHECK(withdrawn.wait_withdrawn);
    CHECK(h.waiters("L").empty());
    CHECK(types(h.events()) == std::vector{EventType::lock_cancel});
    h.fails(Release{.lock = "L", .session = c}, ErrorCode::not_held);
    h.fails(Release{.lock = "nothing", .session = c}, ErrorCode::not_held);
    CHECK(h.release("L", a).released);
    CHECK(!h.state().locks.contains("L"));  // idle locks are forgotten
}

TEST_CASE("lock machine: WithdrawWait takes a waiter out of line and never releases a grant")
{
    // What a replica proposes when its waiting client hung up: the client may have asked again
    // at another replica and been told of a grant there, so a grant must stay.
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    h.granted("L", a);
    const uint64_t b_deadline = h.waits("L", b, 60'000).deadline_ms;
    const uint64_t c_deadline = h.waits("L", c, 60'000).deadline_ms;
    h.events();
    const auto withdraw = [&](SessionId s, uint64_t deadline_ms, const std::string& lock = "L") {
        return h.ok<WithdrawWaitResult>(
            WithdrawWait{.lock = lock, .session = s, .deadline_ms = deadline_ms});
    };
    CHECK(withdraw(b, b_deadline).withdrawn);
    CHECK(h.waiters("L") == std::vector{c});
    CHECK(types(h.events()) == std::vector{EventType::lock_cancel});

    // The wait c asked again (another deadline) is not the one withdrawn.
    h.now += 1'000;
    const uint64_t c_again = h.waits("L", c, 60'000).deadline_ms;
    REQUIRE(c_again != c_deadline);
    h.events();
    CHECK(!withdraw(c, c_deadline).withdrawn);
    CHECK(h.waiters("L") == std::vector{c});
    CHECK(h.events().empty());

    CHECK(h.release("L", a).granted == 1);
    CHECK(h.holders("L") == std::vector{c});
    h.events();
    const Revision before = h.state().revision;
    CHECK(!withdraw(c, c_again).withdrawn);  // granted: the grant stays
    CHECK(h.holders("L") == std::vector{c});
    CHECK(h.state().revision == before);
    CHECK(h.events().empty());
    CHECK(!withdraw(b, b_deadline, "nothing").withdrawn);
    h.fails(WithdrawWait{.lock = "L", .session = 999}, ErrorCode::unknown_session);
}

// ---- Locks: waits ending -----------------------------------------------------------------------

TEST_CASE("lock machine: a wait past its deadline ends with a timeout event at the next apply")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    h.granted("L", a);
    const uint64_t deadline = h.waits("L", b, 1'000).deadline_ms;
    h.events();
    h.now = deadline - 1;
    h.put("unrelated", "1");
    CHECK(h.waiters("L") == std::vector{b});
    h.now = deadline;
    const Revision put_revision = h.put("unrelated", "2").revision;
    const auto events = h.events();
    REQUIRE(types(events) == std::vector{EventType::put, EventType::lock_timeout, EventType::put});
    CHECK(events[1].session == b);
    CHECK(events[1].revision == put_revision - 1);  // the sweep's own revision, before the op's
    CHECK(h.waiters("L").empty());
    CHECK(h.release("L", a).granted == 0);
}

TEST_CASE("lock machine: ExpireWaiters ends waits on time in an idle cell")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    h.granted("L", a);
    const uint64_t deadline = h.waits("L", b, 2'000).deadline_ms;
    CHECK(h.machine().next_deadline_ms() == deadline);
    h.now = deadline + 10;
    h.tick();
    CHECK(types(h.events()).back() == EventType::lock_timeout);
    CHECK(h.waiters("L").empty());
    CHECK(!h.machine().next_deadline_ms());
}

TEST_CASE("lock machine: a timed-out waiter at the head unblocks the compatible waiters behind it")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId x = h.session();
    const SessionId b = h.session();
    h.granted("L", a, LockMode::shared);
    h.waits("L", x, 1'000, LockMode::exclusive);
    h.waits("L", b, 60'000, LockMode::shared);
    h.now += 1'000;
    h.tick();
    CHECK(h.holders("L") == std::vector{a, b});
    CHECK(types(h.events()).back() == EventType::lock_grant);
}

// ---- Locks: sessions ending, lock-delay --------------------------------------------------------

TEST_CASE("lock machine: lock-delay: a lock lost by expiry is not granted until the delay passed")
{
    Machine h;
    const SessionId a = h.session(10'000, 3'000);
    const SessionId b = h.session();
    const SessionId c = h.session();
    const Sequencer seq = h.granted("L", a);
    const auto expired =
        h.ok<ExpireSessionResult>(ExpireSession{.session = a, .lease_epoch = h.lease_epoch(a)});
    CHECK(expired.locks_released == 1);
    CHECK(!h.valid(seq));
    const uint64_t lost_at = h.now;
    const auto release = of_type(h.events(), EventType::lock_release);
    REQUIRE(release.size() == 1);
    CHECK(release[0].cause == Cause::session_expired);

    // During the delay: nobody gets it, not even on a free lock.
    CHECK(h.fails(Acquire{.lock = "L", .session = b}, ErrorCode::busy).detail == lost_at + 3'000);
    h.waits("L", b, 60'000);
    CHECK(h.machine().next_deadline_ms() == lost_at + 3'000);
    h.now = lost_at + 2'999;
    h.tick();
    CHECK(h.holders("L").empty());
    h.now = lost_at + 3'000;  // the delay ends: the queue is served by the next apply
    h.tick();
    CHECK(h.holders("L") == std::vector{b});
    h.fails(Acquire{.lock = "L", .session = c}, ErrorCode::busy);  // held now, no longer delayed
    CHECK(h.state().locks.at("L").delay_until_ms == 0);
}

TEST_CASE("lock machine: lock-delay applies to eviction too, and never to release or close")
{
    Machine h;
    const SessionId a = h.session(10'000, 3'000);
    const SessionId b = h.session();
    h.granted("L", a);
    h.release("L", a);
    h.granted("L", b);  // at once: a released it
    h.release("L", b);
    h.granted("L", a);
    h.ok<CloseSessionResult>(CloseSession{.session = a});
    h.granted("L", b);  // at once: a closed its session
    h.release("L", b);

    const SessionId e = h.session(10'000, 3'000);
    h.granted("M", e);
    h.ok<ExpireSessionResult>(ExpireSession{.session = e, .lease_epoch = h.lease_epoch(e),
                                            .reason = ExpireReason::evicted});
    h.fails(Acquire{.lock = "M", .session = b}, ErrorCode::busy);
    CHECK(of_type(h.events(), EventType::lock_release).back().cause == Cause::session_evicted);
}

TEST_CASE("lock machine: a waiter is granted when a lock-delay ends before its own deadline")
{
    Machine h;
    const SessionId a = h.session(10'000, 1'000);
    const SessionId b = h.session();
    const SessionId c = h.session();
    h.granted("L", a);
    h.granted("M", c);
    h.ok<ExpireSessionResult>(ExpireSession{.session = a, .lease_epoch = h.lease_epoch(a)});
    const uint64_t lost_at = h.now;
    h.waits("L", b, 1'500);  // the delay ends at +1000, the wait at +1500
    h.events();
    h.now = lost_at + 5'000;  // no op in between: both deadlines are processed in order
    h.put("k", "v");
    const auto events = h.events();
    CHECK(of_type(events, EventType::lock_timeout).empty());
    CHECK(h.holders("L") == std::vector{b});

    // And a wait that ends before the delay does time out.
    const SessionId d = h.session(10'000, 1'000);
    h.release("L", b);
    h.granted("L", d);
    h.ok<ExpireSessionResult>(ExpireSession{.session = d, .lease_epoch = h.lease_epoch(d)});
    h.waits("L", b, 500);
    h.now += 5'000;
    h.tick();
    CHECK(h.holders("L").empty());
    CHECK(of_type(h.events(), EventType::lock_timeout).size() == 1);
}

TEST_CASE("lock machine: a session's end releases its locks and waits; the next waiter is granted")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    h.granted("A", a);
    h.granted("B", c);
    h.waits("B", a, 60'000);
    h.waits("A", b, 60'000);
    h.events();
    const auto ended = h.ok<CloseSessionResult>(CloseSession{.session = a});
    CHECK(ended.locks_released == 1);
    CHECK(h.holders("A") == std::vector{b});
    CHECK(h.waiters("B").empty());
    const auto events = h.events();
    CHECK(types(events) == std::vector{EventType::session_close, EventType::lock_release,
                                       EventType::lock_cancel, EventType::lock_grant});
    for (const WatchEvent& e : events) CHECK(e.revision == ended.revision);
    CHECK(events[1].cause == Cause::session_closed);
    CHECK(events[2].cause == Cause::session_closed);
    CHECK(events[3].session == b);
}

// ---- Key/value ---------------------------------------------------------------------------------

TEST_CASE("lock machine: put keeps create_revision, mod_revision and version per key")
{
    Machine h;
    const PutResult created = h.put("cfg/a", "1");
    CHECK(created == PutResult{.revision = 1, .prev_mod_revision = 0, .create_revision = 1,
                               .version = 1});
    h.put("cfg/b", "x");
    const PutResult updated = h.put("cfg/a", "2");
    CHECK(updated == PutResult{.revision = 3, .prev_mod_revision = 1, .create_revision = 1,
                               .version = 2});
    const GetResult got = h.get(Get{.key = "cfg/a"});
    REQUIRE(got.kvs.size() == 1);
    CHECK(got.kvs[0] == KeyValue{.key = "cfg/a", .value = "2", .create_revision = 1,
                                 .mod_revision = 3, .version = 2, .session = 0});
    h.ok<DeleteResult>(Delete{.key = "cfg/a"});
    CHECK(h.get(Get{.key = "cfg/a"}).kvs.empty());
    const PutResult again = h.put("cfg/a", "3");  // a new life: etcd's rule
    CHECK(again.create_revision == again.revision);
    CHECK(again.version == 1);
    const auto events = h.events();
    CHECK(events[2].prev_revision == 1);  // the update names the revision it replaced
    CHECK(events[3].type == EventType::erase);
    CHECK(events[3].prev_revision == 3);
}

TEST_CASE("lock machine: compare-and-set applies only on a matching mod_revision, else nothing")
{
    Machine h;
    const Revision r1 = h.put("k", "1").revision;
    const Revision r2 =
        h.ok<PutResult>(Put{.key = "k", .value = "2", .prev_revision = r1}).revision;
    const LockServiceState before = h.state();
    CHECK(h.fails(Put{.key = "k", .value = "3", .prev_revision = r1}, ErrorCode::cas_mismatch)
              .detail == r2);
    CHECK(h.fails(Put{.key = "k", .value = "3", .prev_revision = 0}, ErrorCode::cas_mismatch)
              .detail == r2);
    CHECK(h.fails(Delete{.key = "k", .prev_revision = r1}, ErrorCode::cas_mismatch).detail == r2);
    check_unchanged(before, h.state());
    CHECK(h.events().size() == 2);
    h.ok<DeleteResult>(Delete{.key = "k", .prev_revision = r2});
    CHECK(h.state().kv.empty());
}

TEST_CASE("lock machine: prev_revision 0 means the key must not exist")
{
    Machine h;
    h.ok<PutResult>(Put{.key = "new", .value = "1", .prev_revision = 0});
    CHECK(h.fails(Put{.key = "new", .value = "2", .prev_revision = 0}, ErrorCode::cas_mismatch)
              .detail == 1);
    CHECK(h.ok<DeleteResult>(Delete{.key = "absent", .prev_revision = 0}).deleted == 0);
}

TEST_CASE("lock machine: sequencer-guarded writes apply only while the sequencer is valid")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const Sequencer seq = h.granted("leader", a);
    h.ok<PutResult>(Put{.key = "cfg/leader", .value = "a", .sequencer = seq});
    h.release("leader", a);
    const Sequencer next = h.granted("leader", b);
    const LockServiceState before = h.state();
    CHECK(h.fails(Put{.key = "cfg/leader", .value = "stale a", .sequencer = seq},
                  ErrorCode::sequencer_invalid)
              .detail == next.generation);
    h.fails(Delete{.key = "cfg/leader", .sequencer = seq}, ErrorCode::sequencer_invalid);
    CHECK(h.fails(Put{.key = "x", .value = "1", .sequencer = Sequencer{.lock = "nolock"}},
                  ErrorCode::sequencer_invalid)
              .detail == 0);
    check_unchanged(before, h.state());
    h.ok<PutResult>(Put{.key = "cfg/leader", .value = "b", .sequencer = next});
    CHECK(h.ok<DeleteResult>(Delete{.key = "cfg/", .prefix = true, .sequencer = next}).deleted ==
          1);
}

TEST_CASE("lock machine: prefix get lists keys in order, pages by limit and size; prefix delete")
{
    Machine h;
    for (const char* key : {"app/b", "app/a", "apple", "app/c/d", "b"}) h.put(key, "v");
    const auto keys = [](const GetResult& r) {
        std::vector<std::string> out;
        for (const KeyValue& kv : r.kvs) out.push_back(kv.key);
        return out;
    };
    using Keys = std::vector<std::string>;
    CHECK(keys(h.get(Get{.key = "app/", .prefix = true})) == Keys{"app/a", "app/b", "app/c/d"});
    CHECK(keys(h.get(Get{.key = "", .prefix = true})).size() == 5);
    CHECK(h.get(Get{.key = "app/"}).kvs.empty());  // without prefix: the key itself only

    const GetResult page1 = h.get(Get{.key = "app/", .prefix = true, .limit = 2});
    CHECK(keys(page1) == Keys{"app/a", "app/b"});
    CHECK(page1.more);
    const GetResult page2 = h.get(Get{.key = "app/", .prefix = true, .after = "app/b", .limit = 2});
    CHECK(keys(page2) == Keys{"app/c/d"});
    CHECK(!page2.more);

    // A byte budget: the result never exceeds it, and says there is more.
    const uint32_t budget = static_cast<uint32_t>(get_result_bytes(5, 1) + key_value_bytes(5, 1));
    const GetResult sized = h.get(Get{.key = "app/", .prefix = true, .max_result_bytes = budget});
    CHECK(keys(sized) == Keys{"app/a", "app/b"});
    CHECK(sized.more);
    CHECK(encode_result(sized).size() <= budget);
    CHECK(h.fails(Get{.key = "app/a", .max_result_bytes = 20}, ErrorCode::too_large).detail ==
          get_result_bytes(5, 1));

    const DeleteResult deleted = h.ok<DeleteResult>(Delete{.key = "app/", .prefix = true});
    CHECK(deleted.deleted == 3);
    const auto erases = of_type(h.events(), EventType::erase);
    CHECK(erases.size() == 3);
    for (const WatchEvent& e : erases) CHECK(e.revision == deleted.revision);
    CHECK(keys(h.get(Get{.key = "", .prefix = true})) == Keys{"apple", "b"});
}

TEST_CASE("lock machine: a Get through the log is a read: nothing changes")
{
    Machine h;
    h.put("k", "v");
    const LockServiceState before = h.state();
    h.get(Get{.key = "k"});
    h.get(Get{.key = "", .prefix = true});
    check_unchanged(before, h.state());
    CHECK(h.machine().get(Get{.key = "k"}) == OpResult{h.get(Get{.key = "k"})});
}

TEST_CASE("lock machine: ephemeral keys are deleted when their session closes or expires")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    h.put("svc/a/1", "x", a);
    h.put("svc/a/2", "y", a);
    h.put("svc/b", "z", b);
    h.put("cfg", "persistent");
    h.events();
    const auto closed = h.ok<CloseSessionResult>(CloseSession{.session = a});
    CHECK(closed.keys_deleted == 2);
    const auto erases = of_type(h.events(), EventType::erase);
    REQUIRE(erases.size() == 2);
    CHECK(erases[0].key == "svc/a/1");
    CHECK(erases[0].cause == Cause::session_closed);
    CHECK(erases[0].session == a);
    h.ok<ExpireSessionResult>(ExpireSession{.session = b, .lease_epoch = h.lease_epoch(b)});
    CHECK(of_type(h.events(), EventType::erase).at(0).cause == Cause::session_expired);
    CHECK(h.state().kv.size() == 1);
    CHECK(h.state().kv.contains("cfg"));
}

TEST_CASE("lock machine: stored_bytes counts keys, values and records, and a snapshot keeps it")
{
    // The quota's measure (docs/api.md, "Limits"): every apply's invariant check holds kv_bytes
    // to the keys and values; here, each change moves stored_bytes by what it adds or frees.
    Machine h;
    const uint64_t empty = h.machine().stored_bytes();
    h.put("k", "12345");
    const uint64_t one_key = h.machine().stored_bytes();
    h.put("k", "1234567890");
    CHECK(h.machine().stored_bytes() == one_key + 5);  // the same record, a longer value
    h.put("k", "1");
    CHECK(h.machine().stored_bytes() == one_key - 4);
    const SessionId s = h.session();
    h.put("eph/a", "xyz", s);
    const uint64_t with_session = h.machine().stored_bytes();
    CHECK(with_session > one_key - 4 + 8);  // a session record and a key record, not just bytes
    h.granted("lk", s);
    CHECK(h.machine().stored_bytes() > with_session);

    LockMachine restored;
    REQUIRE(restored.restore(h.machine().snapshot()));
    CHECK(restored.stored_bytes() == h.machine().stored_bytes());
    CHECK(restored.state() == h.machine().state());

    h.ok<CloseSessionResult>(CloseSession{.session = s});  // frees the lock and "eph/a"
    CHECK(h.machine().stored_bytes() == one_key - 4);
    h.ok<DeleteResult>(Delete{.key = "k"});
    CHECK(h.machine().stored_bytes() == empty);
}

TEST_CASE("lock machine: the latest put decides whether a key is ephemeral, and to which session")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    h.put("k1", "1", a);
    h.put("k1", "2");      // now persistent
    h.put("k2", "1", a);
    h.put("k2", "2", b);   // now b's
    CHECK(h.state().sessions.at(a).ephemeral_keys.empty());
    h.ok<CloseSessionResult>(CloseSession{.session = a});
    CHECK(h.state().kv.size() == 2);
    h.ok<CloseSessionResult>(CloseSession{.session = b});
    CHECK(h.state().kv.size() == 1);
    CHECK(h.state().kv.contains("k1"));
}

// ---- Barriers ----------------------------------------------------------------------------------

BarrierEnter enter(const std::string& name, SessionId s, uint32_t count, uint32_t wait_ms = 60'000)
{
    return BarrierEnter{.barrier = name, .session = s, .count = count, .wait_ms = wait_ms};
}
BarrierLeave leave(const std::string& name, SessionId s, uint32_t wait_ms = 60'000)
{
    return BarrierLeave{.barrier = name, .session = s, .wait_ms = wait_ms};
}

TEST_CASE("lock machine: a barrier releases every member together when the count is reached")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    h.events();
    CHECK(h.ok<BarrierEnterResult>(enter("B", a, 3)).status == BarrierStatus::waiting);
    CHECK(h.ok<BarrierEnterResult>(enter("B", b, 3)).status == BarrierStatus::waiting);
    const auto last = h.ok<BarrierEnterResult>(enter("B", c, 3));
    CHECK(last.status == BarrierStatus::passed);
    const auto released = of_type(h.events(), EventType::barrier_release);
    REQUIRE(released.size() == 3);
    CHECK(released[0].session == a);
    CHECK(released[1].session == b);
    CHECK(released[2].session == c);
    for (const WatchEvent& e : released) CHECK(e.revision == last.revision);
    CHECK(!h.machine().next_deadline_ms());  // nobody waits any more
}

TEST_CASE("lock machine: entering a released barrier: members pass again, others are refused")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    h.ok<BarrierEnterResult>(enter("B", a, 2));
    h.ok<BarrierEnterResult>(enter("B", b, 2));
    const LockServiceState before = h.state();
    CHECK(h.ok<BarrierEnterResult>(enter("B", a, 2)).status == BarrierStatus::passed);
    h.fails(enter("B", c, 2), ErrorCode::barrier_in_use);
    CHECK(h.fails(enter("B", c, 5), ErrorCode::count_mismatch).detail == 2);
    check_unchanged(before, h.state());
}

TEST_CASE("lock machine: double barrier: leaving members wait until every member has left")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    for (const SessionId s : {a, b, c}) h.ok<BarrierEnterResult>(enter("B", s, 3));
    h.events();
    h.fails(leave("B", a, 0), ErrorCode::busy);  // not the last, and would not wait
    CHECK(h.ok<BarrierLeaveResult>(leave("B", a)).status == BarrierStatus::waiting);
    CHECK(h.ok<BarrierLeaveResult>(leave("B", b)).status == BarrierStatus::waiting);
    const auto last = h.ok<BarrierLeaveResult>(leave("B", c, 0));
    CHECK(last.status == BarrierStatus::passed);
    const auto done = of_type(h.events(), EventType::barrier_done);
    REQUIRE(done.size() == 3);
    CHECK(done[0].session == a);
    CHECK(!h.state().barriers.contains("B"));
    // A new round can start.
    const SessionId d = h.session();
    CHECK(h.ok<BarrierEnterResult>(enter("B", d, 2)).status == BarrierStatus::waiting);
    h.fails(leave("B", c), ErrorCode::not_member);
}

TEST_CASE("lock machine: barrier waits time out: a timed-out enter or leave is undone")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const LockServiceState empty = h.state();
    h.fails(enter("B", a, 2, 0), ErrorCode::busy);  // wait 0 and not complete: nothing recorded
    check_unchanged(empty, h.state());

    h.ok<BarrierEnterResult>(enter("B", a, 2, 500));
    h.now += 500;
    h.tick();
    CHECK(types(h.events()).back() == EventType::barrier_timeout);
    CHECK(!h.state().barriers.contains("B"));
    CHECK(h.state().sessions.at(a).barriers.empty());

    h.ok<BarrierEnterResult>(enter("B", a, 2));
    h.ok<BarrierEnterResult>(enter("B", b, 2));
    h.ok<BarrierLeaveResult>(leave("B", a, 500));
    h.now += 500;
    h.tick();
    CHECK(types(h.events()).back() == EventType::barrier_timeout);
    CHECK(!h.state().barriers.at("B").members[0].leaving);  // a is in the barrier again
    CHECK(h.ok<BarrierLeaveResult>(leave("B", b)).status == BarrierStatus::waiting);
    CHECK(h.ok<BarrierLeaveResult>(leave("B", a)).status == BarrierStatus::passed);
}

TEST_CASE("lock machine: leaving before the count is reached withdraws the enter")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    h.ok<BarrierEnterResult>(enter("B", a, 3));
    h.ok<BarrierEnterResult>(enter("B", b, 3));
    CHECK(h.ok<BarrierLeaveResult>(leave("B", a)).status == BarrierStatus::passed);
    CHECK(h.state().barriers.at("B").members.size() == 1);
    CHECK(types(h.events()).back() == EventType::barrier_cancel);
}

TEST_CASE("lock machine: WithdrawEnter takes a waiting member out, never undoes a pass or leave")
{
    // What a replica proposes when its client hung up while it waited to enter: the barrier
    // must not pass with a member that is gone. A pass it missed, or a leave, stays.
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    const uint64_t a_deadline = h.ok<BarrierEnterResult>(enter("B", a, 3)).deadline_ms;
    const uint64_t b_deadline = h.ok<BarrierEnterResult>(enter("B", b, 3)).deadline_ms;
    h.events();
    const auto withdraw = [&](SessionId s, uint64_t deadline_ms, const std::string& name = "B") {
        return h.ok<WithdrawEnterResult>(
            WithdrawEnter{.barrier = name, .session = s, .deadline_ms = deadline_ms});
    };
    CHECK(withdraw(a, a_deadline).withdrawn);
    CHECK(h.state().barriers.at("B").members.size() == 1);
    CHECK(h.state().sessions.at(a).barriers.empty());
    CHECK(types(h.events()) == std::vector{EventType::barrier_cancel});
    // c's enter does not complete the barrier: a is no longer in it.
    CHECK(h.ok<BarrierEnterResult>(enter("B", c, 3)).status == BarrierStatus::waiting);

    // The enter b asked again (another deadline) is not the one withdrawn.
    h.now += 1'000;
    const uint64_t b_again = h.ok<BarrierEnterResult>(enter("B", b, 3)).deadline_ms;
    REQUIRE(b_again != b_deadline);
    h.events();
    CHECK(!withdraw(b, b_deadline).withdrawn);
    CHECK(h.state().barriers.at("B").members.size() == 2);
    CHECK(h.events().empty());

    // Passed: the pass stays, and so does a leave.
    CHECK(h.ok<BarrierEnterResult>(enter("B", a, 3)).status == BarrierStatus::passed);
    const Revision passed = h.state().revision;
    CHECK(!withdraw(b, b_again).withdrawn);
    CHECK(h.state().barriers.at("B").members.size() == 3);
    const uint64_t c_leave = h.ok<BarrierLeaveResult>(leave("B", c)).deadline_ms;
    CHECK(!withdraw(c, c_leave).withdrawn);
    CHECK(h.state().barriers.at("B").members[1].leaving);
    CHECK(h.state().revision == passed + 1);  // the leave; the withdrawals changed nothing
    CHECK(!withdraw(a, a_deadline, "nothing").withdrawn);
    h.fails(WithdrawEnter{.barrier = "B", .session = 999}, ErrorCode::unknown_session);
}

TEST_CASE("lock machine: a session that ends leaves its barriers, which may end a leave phase")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    const SessionId c = h.session();
    h.ok<BarrierEnterResult>(enter("waiting", c, 3));
    h.ok<BarrierEnterResult>(enter("B", a, 2));
    h.ok<BarrierEnterResult>(enter("B", b, 2));
    h.ok<BarrierLeaveResult>(leave("B", a));
    h.events();
    h.ok<CloseSessionResult>(CloseSession{.session = b});
    CHECK(types(h.events()) == std::vector{EventType::session_close, EventType::barrier_cancel,
                                           EventType::barrier_done});
    CHECK(!h.state().barriers.contains("B"));
    h.ok<ExpireSessionResult>(ExpireSession{.session = c, .lease_epoch = h.lease_epoch(c)});
    CHECK(h.state().barriers.empty());
    CHECK(of_type(h.events(), EventType::barrier_cancel).at(0).cause == Cause::session_expired);
}

// ---- Watches -----------------------------------------------------------------------------------

// A mix of writes: puts, updates, a prefix delete (several events at one revision), sessions.
void write_mix(Machine& h)
{
    const SessionId s = h.session();
    for (int i = 0; i < 30; i++) h.put("w/" + std::to_string(i % 7), std::to_string(i));
    h.put("w/eph", "e", s);
    h.ok<DeleteResult>(Delete{.key = "w/1", .prefix = true});
    h.put("other", "o");
    h.granted("L", s);
    h.ok<CloseSessionResult>(CloseSession{.session = s});
    h.put("w/9", "last");
}

// The wait service formats each event once for every stream that sends it, keyed by where the
// event lies: a visit must hand out the history's own events, the same ones each time.
TEST_CASE("lock machine: visit_watched hands out the history's events themselves")
{
    Machine h;
    write_mix(h);
    const WatchFilter filter{.key = "", .prefix = true, .spaces = kAllEventSpaces};
    std::vector<const WatchEvent*> first, second;
    h.machine().visit_watched(1, filter, 0, [&](const WatchEvent& e) { first.push_back(&e); });
    h.machine().visit_watched(1, filter, 0, [&](const WatchEvent& e) { second.push_back(&e); });
    CHECK(first == second);
    const std::vector<WatchEvent> all = h.events();
    REQUIRE(first.size() == all.size());
    for (size_t i = 0; i < all.size(); i++) CHECK(*first[i] == all[i]);
}

TEST_CASE("lock machine: watch events are ordered, and resuming misses and repeats nothing")
{
    Machine h;
    write_mix(h);
    const std::vector<WatchEvent> all = h.events();
    const WatchFilter filter{.key = "", .prefix = true, .spaces = kAllEventSpaces};
    const WatchBatch whole = h.machine().watch(1, filter);
    CHECK(whole.events == all);
    for (size_t i = 1; i < all.size(); i++) CHECK(all[i].revision >= all[i - 1].revision);

    for (const size_t limit : {1, 2, 3, 7}) {
        std::vector<WatchEvent> resumed;
        Revision from = 1;
        for (int guard = 0; guard < 1000; guard++) {
            const WatchBatch batch = h.machine().watch(from, filter, limit);
            REQUIRE(!batch.compacted);
            resumed.insert(resumed.end(), batch.events.begin(), batch.events.end());
            REQUIRE(batch.next_revision > from - 1);
            if (batch.events.empty()) break;
            from = batch.next_revision;
        }
        CHECK(resumed == all);
    }
}

TEST_CASE("lock machine: a watch never splits a revision")
{
    Machine h;
    for (const char* k : {"p/a", "p/b", "p/c", "p/d"}) h.put(k, "v");
    const Revision deleted = h.ok<DeleteResult>(Delete{.key = "p/", .prefix = true}).revision;
    const WatchBatch batch =
        h.machine().watch(deleted, WatchFilter{.key = "p/", .prefix = true}, 2);
    CHECK(batch.events.size() == 4);
    CHECK(batch.next_revision == deleted + 1);
}

TEST_CASE("lock machine: a watch selects a key or a prefix, and event spaces")
{
    Machine h;
    write_mix(h);
    const auto& m = h.machine();
    for (const WatchEvent& e : m.watch(1, WatchFilter{.key = "w/3"}).events) CHECK(e.key == "w/3");
    CHECK(m.watch(1, WatchFilter{.key = "w/3"}).events.size() == 4);  // puts for i = 3, 10, 17, 24
    const auto prefix = m.watch(1, WatchFilter{.key = "w/", .prefix = true}).events;
    CHECK(std::none_of(prefix.begin(), prefix.end(),
                       [](const WatchEvent& e) { return e.key == "other"; }));
    CHECK(std::all_of(prefix.begin(), prefix.end(), [](const WatchEvent& e) {
        return event_space(e.type) == EventSpace::kv;
    }));
    const auto locks =
        m.watch(1, WatchFilter{.key = "L", .spaces = static_cast<uint8_t>(EventSpace::lock)})
            .events;
    CHECK(types(locks) == std::vector{EventType::lock_grant, EventType::lock_release});
    const auto sessions = m.watch(1, WatchFilter{.key = "", .spaces = static_cast<uint8_t>(
                                                              EventSpace::session)})
                              .events;
    CHECK(types(sessions) == std::vector{EventType::session_create, EventType::session_close});
}

TEST_CASE("lock machine: a watch resumed from the current revision sees exactly what follows")
{
    Machine h;
    write_mix(h);
    h.events();
    const WatchFilter filter{.key = "", .prefix = true, .spaces = kAllEventSpaces};
    const WatchBatch now = h.machine().watch(h.revision() + 1, filter);
    CHECK(now.events.empty());
    CHECK(now.next_revision == h.revision() + 1);
    h.put("later/1", "a");
    h.put("later/2", "b");
    const WatchBatch later = h.machine().watch(now.next_revision, filter);
    CHECK(later.events == h.events());
    CHECK(later.events.size() == 2);
}

TEST_CASE("lock machine: a watch older than the history is compacted, naming the oldest revision")
{
    Machine h(5);
    for (int i = 0; i < 10; i++) h.put("k", std::to_string(i));
    const WatchFilter filter{.key = "k"};
    const WatchBatch old = h.machine().watch(1, filter);
    CHECK(old.compacted);
    CHECK(old.oldest_revision == 6);
    CHECK(h.machine().watch(5, filter).compacted);
    const WatchBatch kept = h.machine().watch(6, filter);
    CHECK(!kept.compacted);
    CHECK(kept.events.size() == 5);
    CHECK(kept.events.front().revision == 6);

    // A revision larger than the bound is kept whole; older ones go.
    for (int i = 0; i < 8; i++) h.put("p/" + std::to_string(i), "v");
    const Revision big = h.ok<DeleteResult>(Delete{.key = "p/", .prefix = true}).revision;
    CHECK(h.state().history.size() == 8);
    CHECK(h.machine().oldest_revision() == big);
    CHECK(h.machine().watch(big - 1, filter).compacted);
}

TEST_CASE("lock machine: drain_events returns every event of every apply once")
{
    Machine h;
    const SessionId a = h.session();
    const SessionId b = h.session();
    h.granted("L", a);
    h.waits("L", b, 100);
    CHECK(h.events().size() == 4);
    CHECK(h.events().empty());
    h.now += 100;
    h.put("k", "v");  // the sweep's timeout and the put, from one apply
    CHECK(types(h.events()) == std::vector{EventType::lock_timeout, EventType::put});
}

TEST_CASE("lock machine: next_deadline_ms is the earliest lock wait, barrier wait or lock-delay")
{
    Machine h;
    CHECK(!h.machine().next_deadline_ms());
    const SessionId a = h.session(10'000, 4'000);
    const SessionId b = h.session();
    const SessionId c = h.session();
    h.granted("L", a);
    h.waits("L", b, 9'000);
    CHECK(h.machine().next_deadline_ms() == h.now + 9'000);
    h.ok<BarrierEnterResult>(enter("B", c, 2, 7'000));
    CHECK(h.machine().next_deadline_ms() == h.now + 7'000);
    h.ok<ExpireSessionResult>(ExpireSession{.session = a, .lease_epoch = h.lease_epoch(a)});
    CHECK(h.machine().next_deadline_ms() == h.now + 4'000);
}

// ---- Determinism -------------------------------------------------------------------------------

// A random but reproducible workload over a few names, so that ops collide: sessions come and go,
// locks are contended, waits and delays expire, keys are shared, barriers fill and drain.
class Workload {
public:
    explicit Workload(uint64_t seed) : random_(seed) {}

    uint32_t below(uint32_t n) { return static_cast<uint32_t>(random_.below(n)); }

    // The next op; `sessions` are those the machine created (from its results), `waits` its
    // pending lock and barrier waits (what a withdrawal names).
    LockOp op(const std::vector<std::pair<SessionId, Revision>>& sessions,
              const std::vector<TimerRecord>& waits)
    {
        const auto session = [&]() -> SessionId {
            if (sessions.empty() || below(20) == 0) return 1 + below(50);  // maybe unknown
            return sessions[below(static_cast<uint32_t>(sessions.size()))].first;
        };
        const std::string lock = "lock/" + std::to_string(below(3));
        const std::string key = "key/" + std::to_string(below(6));
        const std::string barrier = "barrier/" + std::to_string(below(2));
        const auto mode = below(2) == 0 ? LockMode::exclusive : LockMode::shared;
        const uint32_t wait = below(3) == 0 ? 0 : 1 + below(5'000);
        switch (below(18)) {
        case 0:
        case 1:
            return CreateSession{.ttl_ms = 1'000 + below(20'000), .lock_delay_ms = below(3) * 1'000,
                                 .name = "w"};
        case 2: return KeepAlive{.session = session()};
        case 3: return CloseSession{.session = session()};
        case 4: {
            if (sessions.empty()) return ExpireWaiters{};
            const auto& [id, epoch] = sessions[below(static_cast<uint32_t>(sessions.size()))];
            return ExpireSession{.session = id, .lease_epoch = below(4) == 0 ? epoch - 1 : epoch,
                                 .reason = below(2) == 0 ? ExpireReason::lease_expired
                                                         : ExpireReason::evicted};
        }
        case 5:
        case 6: return Acquire{.lock = lock, .session = session(), .mode = mode, .wait_ms = wait};
        case 7: return Release{.lock = lock, .session = session()};
        case 8:
            return CheckSequencer{.sequencer = {.lock = lock, .mode = mode,
                                                .generation = below(20), .session = session()}};
        case 9: {
            Put put{.key = key, .value = std::string(below(40), 'v'),
                    .session = below(3) == 0 ? session() : 0};
            if (below(3) == 0) put.prev_revision = below(40);
            if (below(5) == 0)
                put.sequencer = Sequencer{.lock = lock, .mode = mode, .generation = below(20),
                                          .session = session()};
            return put;
        }
        case 10: {
            Delete del{.key = below(3) == 0 ? "key/" : key, .prefix = false};
            del.prefix = del.key == "key/";
            if (!del.prefix && below(3) == 0) del.prev_revision = below(40);
            return del;
        }
        case 11: return Get{.key = "key/", .prefix = true, .limit = below(4)};
        case 12:
        case 13:
            return BarrierEnter{.barrier = barrier, .session = session(), .count = 1 + below(3),
                                .wait_ms = wait};
        case 14: return BarrierLeave{.barrier = barrier, .session = session(), .wait_ms = wait};
        case 15:
        case 16: {
            // Mostly a wait the machine has (withdrawn; now and then named as the other kind:
            // nothing), else a made-up one.
            TimerRecord wait_of{.at_ms = below(5'000), .name = below(2) == 0 ? lock : barrier,
                                .session = session()};
            bool lock_wait = below(2) == 0;
            if (!waits.empty() && below(4) != 0) {
                wait_of = waits[below(static_cast<uint32_t>(waits.size()))];
                lock_wait = (wait_of.kind == TimerKind::lock_wait) != (below(8) == 0);
            }
            if (lock_wait)
                return WithdrawWait{.lock = wait_of.name, .session = wait_of.session,
                                    .deadline_ms = wait_of.at_ms};
            return WithdrawEnter{.barrier = wait_of.name, .session = wait_of.session,
                                 .deadline_ms = wait_of.at_ms};
        }
        default: return ExpireWaiters{};
        }
    }

private:
    test_support::SplitMix64 random_;
};

// Runs the workload on a machine; returns every encoded result.
std::vector<Bytes> run_workload(LockMachine& machine, uint64_t seed, size_t ops)
{
    Workload w(seed);
    std::vector<Bytes> results;
    uint64_t now = 1'000'000;
    for (Op op = 1; op <= ops; op++) {
        std::vector<std::pair<SessionId, Revision>> sessions;
        for (const auto& [id, s] : machine.state().sessions)
            sessions.emplace_back(id, s.lease_epoch);
        std::vector<TimerRecord> waits;
        for (const TimerRecord& timer : machine.state().timers)
            if (timer.kind != TimerKind::lock_delay_end) waits.push_back(timer);
        // Time mostly advances, by up to 2 s; now and then a new leader's clock lags behind.
        now = w.below(10) == 0 ? now - w.below(3'000) : now + w.below(2'000);
        const Entry entry{.timestamp_ms = now, .payload = encode_op(w.op(sessions, waits))};
        results.push_back(machine.apply(op, entry));
    }
    return results;
}

TEST_CASE("lock machine: determinism: machines fed the same ops end with the same digest")
{
    const LockMachineConfig config{.history_events = 500, .check_invariants_every_apply = true};
    for (const uint64_t seed : {1u, 2u, 3u, 42u}) {
        CAPTURE(seed);
        LockMachine a(config);
        LockMachine b(config);
        const auto results_a = run_workload(a, seed, 3'000);
        const auto results_b = run_workload(b, seed, 3'000);
        CHECK(results_a == results_b);
        CHECK(a.state_digest() == b.state_digest());
        CHECK(a.drain_events() == b.drain_events());

        // The workload reached the interesting states.
        size_t granted = 0;
        size_t timeouts = 0;
        for (const WatchEvent& e : a.state().history) {
            granted += e.type == EventType::lock_grant;
            timeouts += e.type == EventType::lock_timeout || e.type == EventType::barrier_timeout;
        }
        CHECK(granted > 10);
        CHECK(timeouts > 0);
        CHECK(a.state().compacted_revision > 0);
        size_t waits_withdrawn = 0;
        size_t enters_withdrawn = 0;
        for (const Bytes& result : results_a) {
            const auto decoded = decode_result(result);
            REQUIRE(decoded.ok());
            const OpResult& r = decoded.value();
            if (const auto* w = std::get_if<WithdrawWaitResult>(&r))
                waits_withdrawn += w->withdrawn;
            if (const auto* w = std::get_if<WithdrawEnterResult>(&r))
                enters_withdrawn += w->withdrawn;
        }
        CHECK(waits_withdrawn > 0);
        CHECK(enters_withdrawn > 0);

        // A different history gives a different state.
        LockMachine c(config);
        run_workload(c, seed + 1000, 3'000);
        CHECK(c.state_digest() != a.state_digest());
    }
}

TEST_CASE("lock machine: the digest covers the state: one differing write changes it")
{
    LockMachine a;
    LockMachine b;
    const auto put = [](const char* value) {
        return Entry{.timestamp_ms = 5, .payload = encode_op(Put{.key = "k", .value = value})};
    };
    a.apply(1, put("x"));
    b.apply(1, put("x"));
    CHECK(a.state_digest() == b.state_digest());
    a.apply(2, put("y"));
    b.apply(2, put("z"));
    CHECK(a.state_digest() != b.state_digest());
}

}  // namespace
}  // namespace voltlock
