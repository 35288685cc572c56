// Snapshots of the state machines (StateMachine::snapshot and restore; lock_machine.h,
// "Snapshots"): a restored machine has the same state and digest and answers every later op the
// same way, and restore() refuses whatever is not a snapshot (cut short, trailing bytes, a record
// naming a session that does not exist) without changing the machine. Built again under ASan and
// UBSan (wire_tests_asan), since it feeds restore() hostile bytes.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "byte_writer.h"
#include "core/checksum.h"
#include "core/lock_machine.h"
#include "core/lock_ops.h"
#include "core/register_machine.h"

namespace voltlock {
namespace {

constexpr LockMachineConfig kConfig{.history_events = 16, .check_invariants_every_apply = true};

// Applies ops to a machine as its next log entries, through the codec, as a replica does.
class Driver {
public:
    explicit Driver(LockMachine& machine) : machine_(machine) {}

    Bytes apply(const LockOp& op)
    {
        return machine_.apply(machine_.last_applied_op() + 1,
                              Entry{.timestamp_ms = now_ms, .payload = encode_op(op)});
    }
    OpResult run(const LockOp& op)
    {
        const auto decoded = decode_result(apply(op));
        REQUIRE(decoded.ok());
        REQUIRE_FALSE(std::holds_alternative<OpError>(decoded.value()));
        return decoded.value();
    }
    SessionId session(uint32_t lock_delay_ms = 0)
    {
        const OpResult r =
            run(CreateSession{.ttl_ms = 10'000, .lock_delay_ms = lock_delay_ms, .name = "s"});
        return std::get<CreateSessionResult>(r).session;
    }
    AcquireStatus acquire(const std::string& lock, SessionId session, LockMode mode,
                          uint32_t wait_ms = 0)
    {
        const OpResult r =
            run(Acquire{.lock = lock, .session = session, .mode = mode, .wait_ms = wait_ms});
        return std::get<AcquireResult>(r).status;
    }

    uint64_t now_ms = 1'000'000;

private:
    LockMachine& machine_;
};

struct BusySessions {
    SessionId alpha = 0;
    SessionId beta = 0;
    SessionId gamma = 0;
};

// Drives `machine` into a state with something of everything: exclusive and shared holders,
// FIFO waiters, a lock-delay with a waiter behind it, persistent and ephemeral keys, deleted
// keys, a barrier still entering and one whose members are leaving, and a trimmed history.
BusySessions make_busy(LockMachine& machine)
{
    Driver d(machine);
    const BusySessions s{.alpha = d.session(3'000), .beta = d.session(), .gamma = d.session()};
    const SessionId delta = d.session(5'000);

    CHECK(d.acquire("db/primary", s.alpha, LockMode::exclusive) == AcquireStatus::granted);
    CHECK(d.acquire("db/primary", s.beta, LockMode::exclusive, 8'000) == AcquireStatus::waiting);
    CHECK(d.acquire("db/primary", s.gamma, LockMode::shared, 9'000) == AcquireStatus::waiting);
    CHECK(d.acquire("cfg/read", s.beta, LockMode::shared) == AcquireStatus::granted);
    CHECK(d.acquire("cfg/read", s.gamma, LockMode::shared) == AcquireStatus::granted);
    CHECK(d.acquire("cfg/read", s.alpha, LockMode::exclusive, 7'000) == AcquireStatus::waiting);

    // delta's lease runs out while it holds jobs/x: lock-delay, and alpha queues behind it.
    CHECK(d.acquire("jobs/x", delta, LockMode::exclusive) == AcquireStatus::granted);
    d.run(Put{.key = "ephemeral/delta", .value = "d", .session = delta});
    d.run(ExpireSession{.session = delta,
                        .lease_epoch = machine.state().sessions.at(delta).lease_epoch,
                        .reason = ExpireReason::lease_expired});
    CHECK(d.acquire("jobs/x", s.alpha, LockMode::exclusive, 9'000) == AcquireStatus::waiting);

    d.run(Put{.key = "config/a", .value = "1"});
    d.run(Put{.key = "config/b", .value = Bytes("\0\x01\xFF", 3)});
    d.run(Put{.key = "config/a", .value = "2"});
    d.run(Put{.key = "ephemeral/alpha", .value = "a", .session = s.alpha});
    d.run(Put{.key = "ephemeral/beta", .value = "b", .session = s.beta});
    d.run(Delete{.key = "config/b"});
    d.run(Put{.key = "tmp/1", .value = "x"});
    d.run(Put{.key = "tmp/2", .value = "y"});
    d.run(Delete{.key = "tmp/", .prefix = true});

    d.run(BarrierEnter{.barrier = "start", .session = s.alpha, .count = 3, .wait_ms = 6'000});
    d.run(BarrierEnter{.barrier = "start", .session = s.beta, .count = 3, .wait_ms = 6'000});
    d.run(BarrierEnter{.barrier = "done", .session = s.alpha, .count = 2, .wait_ms = 6'000});
    d.run(BarrierEnter{.barrier = "done", .session = s.gamma, .count = 2, .wait_ms = 6'000});
    d.run(BarrierLeave{.barrier = "done", .session = s.alpha, .wait_ms = 4'000});
    d.run(KeepAlive{.session = s.beta});

    const LockServiceState& state = machine.state();
    REQUIRE(state.locks.at("db/primary").waiters.size() == 2);
    REQUIRE(state.locks.at("cfg/read").holders.size() == 2);
    REQUIRE(state.locks.at("jobs/x").delay_until_ms != 0);
    REQUIRE(state.kv.at("ephemeral/alpha").session == s.alpha);
    REQUIRE(state.barriers.at("start").phase == BarrierPhase::entering);
    REQUIRE(state.barriers.at("done").members.front().leaving);
    REQUIRE(state.timers.size() == 8);
    REQUIRE(state.compacted_revision > 0);
    return s;
}

// What happens after the snapshot: grants on release and on the end of a lock-delay, barriers
// completing, a session closing, waits timing out.
std::vector<std::pair<uint64_t, LockOp>> later_ops(const BusySessions& s)
{
    return {
        {0, Release{.lock = "db/primary", .session = s.alpha}},
        {1'000, BarrierEnter{.barrier = "start", .session = s.gamma, .count = 3}},
        {0, BarrierLeave{.barrier = "done", .session = s.gamma}},
        {1'000, Put{.key = "config/c", .value = "3"}},
        {3'500, ExpireWaiters{}},
        {0, CloseSession{.session = s.beta}},
        {5'000, ExpireWaiters{}},
        {0, Acquire{.lock = "cfg/read", .session = s.alpha, .mode = LockMode::exclusive,
                    .wait_ms = 2'000}},
        {0, KeepAlive{.session = s.alpha}},
        {0, Delete{.key = "config/", .prefix = true}},
        {3'000, ExpireWaiters{}},
    };
}

LockMachine restored_from(const Bytes& snapshot)
{
    LockMachine machine(kConfig);
    REQUIRE(machine.restore(snapshot));
    return machine;
}

// Overwrites the u64 at `offset` bytes after the first occurrence of `marker`.
void put_u64_after(Bytes& bytes, std::string_view marker, size_t offset, uint64_t value)
{
    const size_t at = bytes.find(marker);
    REQUIRE(at != Bytes::npos);
    Bytes le;
    ByteWriter(le).u64(value);
    bytes.replace(at + marker.size() + offset, le.size(), le);
}

TEST_CASE("snapshot: an empty machine round-trips, replacing whatever the target held")
{
    const LockMachine empty(kConfig);
    LockMachine target(kConfig);
    make_busy(target);
    REQUIRE(target.restore(empty.snapshot()));
    CHECK(target.state() == LockServiceState{});
    CHECK(target.state_digest() == empty.state_digest());
    CHECK(target.drain_events().empty());  // the replaced state's undrained events are gone
    target.check_invariants();
}

TEST_CASE("snapshot: a busy machine round-trips, and both answer every later op the same way")
{
    LockMachine a(kConfig);
    const BusySessions s = make_busy(a);
    a.drain_events();
    LockMachine b = restored_from(a.snapshot());
    CHECK(b.state() == a.state());  // timers and the sessions' indexes included
    CHECK(b.state_digest() == a.state_digest());
    b.check_invariants();

    Driver da(a);
    Driver db(b);
    for (const auto& [advance_ms, op] : later_ops(s)) {
        CAPTURE(op_code_name(op_code(op)));
        da.now_ms += advance_ms;
        db.now_ms += advance_ms;
        CHECK(da.apply(op) == db.apply(op));
        CHECK(b.state_digest() == a.state_digest());
        CHECK(restored_from(a.snapshot()).state() == a.state());
    }
    CHECK(b.state() == a.state());
    CHECK(b.drain_events() == a.drain_events());
    CHECK(a.state().timers.empty());  // every deadline was met on both
}

TEST_CASE("snapshot: restore trims the history to the target's own bound")
{
    LockMachine a(kConfig);
    make_busy(a);
    LockMachine b(LockMachineConfig{.history_events = 4});
    REQUIRE(b.restore(a.snapshot()));
    CHECK(b.state().history.size() < a.state().history.size());
    CHECK(b.state().compacted_revision > a.state().compacted_revision);
    CHECK(b.state().kv == a.state().kv);
    b.check_invariants();
}

TEST_CASE("snapshot: every truncation, and a trailing byte, is refused and changes nothing")
{
    LockMachine source(kConfig);
    make_busy(source);
    const Bytes snapshot = source.snapshot();
    LockMachine target(kConfig);
    Driver(target).run(Put{.key = "before", .value = "v"});
    const LockServiceState before = target.state();
    const uint64_t digest = target.state_digest();

    std::vector<size_t> accepted;
    for (size_t size = 0; size < snapshot.size(); size++)
        if (target.restore(std::string_view(snapshot).substr(0, size))) accepted.push_back(size);
    if (target.restore(snapshot + '\0')) accepted.push_back(snapshot.size() + 1);
    CHECK(accepted.empty());
    CHECK(target.state() == before);
    CHECK(target.state_digest() == digest);
}

TEST_CASE("snapshot: a flipped byte is refused, or restores a state that passes the invariants")
{
    LockMachine source(kConfig);
    make_busy(source);
    const Bytes snapshot = source.snapshot();
    const uint64_t empty_digest = LockMachine(kConfig).state_digest();
    size_t refused = 0;
    for (size_t at = 0; at < snapshot.size(); at++) {
        for (const int mask : {0x01, 0x80, 0xFF}) {
            Bytes flipped = snapshot;
            flipped[at] = static_cast<char>(flipped[at] ^ mask);
            LockMachine target(kConfig);
            if (target.restore(flipped)) {
                target.check_invariants();  // aborts the run if restore let a broken state in
            } else {
                refused += 1;
                CHECK(target.state_digest() == empty_digest);
            }
        }
    }
    CHECK(refused > snapshot.size());  // lengths, counts, enums and references are checked
}

TEST_CASE("snapshot: records naming a missing session, or one twice, are refused")
{
    LockMachine source(kConfig);
    Driver d(source);
    const SessionId s1 = d.session();
    const SessionId s2 = d.session();
    d.acquire("ghost-lock", s1, LockMode::exclusive);
    d.acquire("shared-lock", s1, LockMode::shared);
    d.acquire("shared-lock", s2, LockMode::shared);
    d.run(Put{.key = "ghost-key", .value = "v", .session = s2});
    const Bytes snapshot = source.snapshot();
    // The first occurrence of a name is its record's key: sessions come first and hold no names.
    // A lock record then has a u32 holder count and holders of 25 bytes, session first; a value
    // record has the value (u32 length, bytes), three u64 revisions, then the session.
    constexpr size_t kFirstHolder = 4;
    constexpr size_t kSecondHolder = 4 + 25;
    constexpr size_t kValueSession = 4 + 1 + 3 * 8;
    constexpr SessionId kMissing = 999;

    // The offsets are right: writing the sessions already there changes nothing.
    Bytes same = snapshot;
    put_u64_after(same, "ghost-lock", kFirstHolder, s1);
    put_u64_after(same, "shared-lock", kSecondHolder, s2);
    put_u64_after(same, "ghost-key", kValueSession, s2);
    REQUIRE(same == snapshot);

    Bytes edited = snapshot;
    SUBCASE("a lock holder") { put_u64_after(edited, "ghost-lock", kFirstHolder, kMissing); }
    SUBCASE("a session holding a lock twice")
    {
        put_u64_after(edited, "shared-lock", kSecondHolder, s1);
    }
    SUBCASE("an ephemeral key's owner")
    {
        put_u64_after(edited, "ghost-key", kValueSession, kMissing);
    }
    LockMachine target(kConfig);
    CHECK_FALSE(target.restore(edited));
    CHECK(target.state() == LockServiceState{});
    CHECK(target.restore(snapshot));
}

TEST_CASE("snapshot: map keys out of order or twice, and a wrong magic, are refused")
{
    LockMachine source(kConfig);
    Driver d(source);
    d.run(Put{.key = "key-b", .value = "1"});
    d.run(Put{.key = "key-c", .value = "2"});
    const Bytes snapshot = source.snapshot();
    const size_t second_key = snapshot.find("key-c");
    REQUIRE(second_key != Bytes::npos);
    LockMachine target(kConfig);
    for (const char* replacement : {"key-a", "key-b"}) {
        Bytes edited = snapshot;
        edited.replace(second_key, 5, replacement);
        CHECK_FALSE(target.restore(edited));
    }
    Bytes wrong_magic = snapshot;
    wrong_magic[3] = '4';  // "VLM4"
    CHECK_FALSE(target.restore(wrong_magic));
    CHECK(target.restore(snapshot));
}

TEST_CASE("snapshot: 'VLM3', then the state's fields in order, little-endian")
{
    const Bytes snapshot = LockMachine(kConfig).snapshot();
    // magic, four u64 counters, four empty maps, an empty history, compacted_revision, and the
    // auth tables (u64 revision, three empty maps).
    CHECK(snapshot.size() == 4 + 4 * 8 + 4 * 4 + 4 + 8 + 8 + 3 * 4);
    CHECK(snapshot.substr(0, 4) == "VLM3");
}

TEST_CASE("snapshot: a session's owner round-trips, and a 'VLM1' snapshot (no owners) restores")
{
    LockMachine source(kConfig);
    Driver d(source);
    const OpResult created =
        d.run(CreateSession{.ttl_ms = 10'000, .lock_delay_ms = 0, .name = "s", .owner = "alice"});
    const SessionId owned = std::get<CreateSessionResult>(created).session;
    LockMachine target(kConfig);
    REQUIRE(target.restore(source.snapshot()));
    CHECK(target.state().sessions.at(owned).owner == "alice");
    CHECK(target.state_digest() == source.state_digest());

    // The same state as a replica before owners wrote it: magic VLM1, no owner field, no auth
    // tables.
    LockMachine unowned(kConfig);
    Driver u(unowned);
    const SessionId id = u.session();
    Bytes old = unowned.snapshot();
    const size_t name = old.find(Bytes("\x01\x00\x00\x00s", 5));
    REQUIRE(name != Bytes::npos);
    const size_t owner =
        name + 5 + 4 + 4 + 8 + 8 + 8;  // after ttl, delay, epoch, deadline, created
    REQUIRE(old.substr(owner, 4) == Bytes(4, '\0'));
    old.erase(owner, 4);
    old.erase(old.size() - (8 + 3 * 4));
    old[3] = '1';
    LockMachine restored(kConfig);
    REQUIRE(restored.restore(old));
    CHECK(restored.state().sessions.at(id).owner.empty());
    CHECK(restored.state_digest() == unowned.state_digest());
}

// ---- RegisterMachine ---------------------------------------------------------------------------

Entry register_entry(const Bytes& payload) { return Entry{.payload = payload}; }

TEST_CASE("snapshot: a register round-trips and answers later ops the same way")
{
    RegisterMachine a;
    a.apply(1, register_entry(RegisterMachine::write_op("first")));
    a.apply(2, register_entry(RegisterMachine::write_op(Bytes("\0second", 7))));
    RegisterMachine b;
    b.apply(1, register_entry(RegisterMachine::write_op("other")));
    REQUIRE(b.restore(a.snapshot()));
    CHECK(b.version() == a.version());
    CHECK(b.value() == a.value());
    CHECK(b.state_digest() == a.state_digest());
    for (const Bytes& payload : {RegisterMachine::write_op("third"), RegisterMachine::read_op()})
        CHECK(a.apply(3, register_entry(payload)) == b.apply(3, register_entry(payload)));
    CHECK(b.state_digest() == a.state_digest());
}

TEST_CASE("snapshot: a register refuses truncations, trailing bytes, a wrong magic, and a value "
          "or digest before any write")
{
    RegisterMachine source;
    source.apply(1, register_entry(RegisterMachine::write_op("value")));
    const Bytes snapshot = source.snapshot();
    RegisterMachine target;
    target.apply(1, register_entry(RegisterMachine::write_op("kept")));
    const uint64_t digest = target.state_digest();

    for (size_t size = 0; size < snapshot.size(); size++)
        CHECK_FALSE(target.restore(std::string_view(snapshot).substr(0, size)));
    CHECK_FALSE(target.restore(snapshot + '\0'));
    Bytes wrong_magic = snapshot;
    wrong_magic[0] = 'X';
    CHECK_FALSE(target.restore(wrong_magic));

    Bytes unwritten;
    ByteWriter w(unwritten);
    w.bytes("VLR1");
    w.u64(0);  // version
    w.u64(0);  // digest
    w.u32(3);
    w.bytes("abc");
    CHECK_FALSE(target.restore(unwritten));

    CHECK(target.state_digest() == digest);
    CHECK(target.value() == "kept");
    CHECK(RegisterMachine().snapshot() == Bytes("VLR1") + Bytes(8 + 8 + 4, '\0'));
}

}  // namespace
}  // namespace voltlock

namespace voltlock {

TEST_CASE("crc32c: eight bytes a step gives what one byte a step gives, at every length and offset")
{
    std::string data(300, '\0');
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (char& c : data) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        c = static_cast<char>(x);
    }
    CHECK(crc32c(std::string_view("123456789")) == 0xE3069283u);  // at run time too
    for (size_t offset = 0; offset < 9; offset++)
        for (size_t length = 0; offset + length <= data.size(); length += 7) {
            const std::string_view part = std::string_view(data).substr(offset, length);
            CAPTURE(offset);
            CAPTURE(length);
            CHECK(crc32c(part) == ~detail::crc32c_bytewise(part, ~0u));
            // Continuing a CRC over a split gives the CRC of the whole.
            const size_t half = length / 2;
            CHECK(crc32c(part.substr(half), crc32c(part.substr(0, half))) == crc32c(part));
        }
}

}  // namespace voltlock
