// WatchIndex (server/api/watch_index.h): an applied event wakes exactly the members whose filter
// it matches, and a member's next_match never skips an event that reading the history would
// have given it. The last case checks that against LockMachine::visit_watched on random filters
// and random ops.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/watch_index.h"
#include "core/lock_machine.h"
#include "core/lock_ops.h"
#include "split_mix64.h"

namespace voltlock::api {
namespace {

class Cell {
public:
    explicit Cell(size_t history_events = 10'000)
        : machine(LockMachineConfig{.history_events = history_events}), index(machine)
    {
    }

    void run(const LockOp& op)
    {
        op_ += 1;
        machine.apply(op_, Entry{.timestamp_ms = 1'000 + op_, .client_id = 1,
                                 .request_number = op_, .payload = encode_op(op)});
    }
    void put(const std::string& key) { run(Put{.key = key, .value = to_bytes("v")}); }
    // The members the events applied since the last update woke.
    std::set<WatchIndex::Id> update()
    {
        const WatchFilter every_event{.key = "", .prefix = true, .spaces = kAllEventSpaces};
        machine.visit_watched(index.unread(), every_event, 0,
                              [this](const WatchEvent& e) { every_event_.push_back(e); });
        std::set<WatchIndex::Id> woken;
        index.update([&woken](WatchIndex::Id id) { CHECK(woken.insert(id).second); });
        return woken;
    }
    // The first revision at or after `next` that matches `filter`, of every event the updates
    // saw, whether the history still holds it or not.
    std::optional<Revision> first_match(const WatchFilter& filter, Revision next) const
    {
        for (const WatchEvent& e : every_event_) {
            const bool key = filter.prefix ? e.key.starts_with(filter.key) : e.key == filter.key;
            if (e.revision >= next && key && (filter.spaces & uint8_t(event_space(e.type))))
                return e.revision;
        }
        return std::nullopt;
    }

    LockMachine machine;
    WatchIndex index;

private:
    static Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
    Op op_ = 0;
    std::vector<WatchEvent> every_event_;
};

WatchFilter kv_key(const std::string& key)
{
    return WatchFilter{.key = key, .prefix = false, .spaces = uint8_t(EventSpace::kv)};
}

TEST_CASE("a put wakes the members watching its key, and no other")
{
    Cell cell;
    for (WatchIndex::Id id = 1; id <= 1000; id++)
        cell.index.add(id, kv_key("app/" + std::to_string(id)));
    cell.index.add(1001, kv_key("app/7"));  // a second member of the same filter
    cell.put("app/7");
    const Revision revision = cell.machine.revision();
    CHECK(cell.update() == std::set<WatchIndex::Id>{7, 1001});
    CHECK(cell.index.next_match(7, 1) == revision);
    CHECK(cell.index.next_match(8, 1) == std::nullopt);
    CHECK(cell.index.next_match(7, revision + 1) == std::nullopt);
    CHECK(cell.index.unread() == revision + 1);
    CHECK(cell.update().empty());  // nothing new
}

TEST_CASE("prefix filters wake on every key under them, one wake per update")
{
    Cell cell;
    cell.index.add(1, WatchFilter{.key = "app/", .prefix = true, .spaces = kAllEventSpaces});
    cell.index.add(2, WatchFilter{.key = "", .prefix = true, .spaces = uint8_t(EventSpace::kv)});
    cell.index.add(3, WatchFilter{.key = "app/x/", .prefix = true,
                                  .spaces = uint8_t(EventSpace::kv)});
    cell.index.add(4, WatchFilter{.key = "other/", .prefix = true,
                                  .spaces = uint8_t(EventSpace::kv)});
    cell.put("app/a");
    cell.put("app/b");
    CHECK(cell.update() == std::set<WatchIndex::Id>{1, 2});
    cell.put("app/x/y");
    CHECK(cell.update() == std::set<WatchIndex::Id>{1, 2, 3});
    cell.put("ap");
    CHECK(cell.update() == std::set<WatchIndex::Id>{2});
}

TEST_CASE("the event spaces filter: a lock's events do not wake a watch of keys")
{
    Cell cell;
    cell.run(CreateSession{.ttl_ms = 10'000});
    const SessionId session = cell.machine.revision();
    cell.index.add(1, kv_key("L"));
    cell.index.add(2, WatchFilter{.key = "L", .prefix = false,
                                  .spaces = uint8_t(EventSpace::lock)});
    cell.update();
    cell.run(Acquire{.lock = "L", .session = session});
    CHECK(cell.update() == std::set<WatchIndex::Id>{2});
}

TEST_CASE("a member further back than its group's records reads the history itself")
{
    Cell cell;
    cell.put("k");
    cell.put("k");
    cell.update();
    cell.index.add(1, kv_key("k"));  // its group's records start after the two puts
    CHECK(cell.index.next_match(1, 1) == 1);
    cell.put("k");
    cell.update();
    CHECK(cell.index.next_match(1, 3) == 3);
    CHECK(cell.index.next_match(1, 4) == std::nullopt);
    cell.index.remove(1);
    cell.index.add(2, kv_key("k"));  // a new group: the old one went with its last member
    CHECK(cell.index.next_match(2, 3) == 3);
}

TEST_CASE("a quiet member the history moved past loses nothing, and is not sent to read")
{
    Cell cell(4);  // a history of four events
    cell.index.add(1, kv_key("config"));
    cell.update();
    for (int i = 0; i < 20; i++) {
        cell.put("load");
        CHECK(cell.update().empty());
    }
    cell.put("config");
    CHECK(cell.update() == std::set<WatchIndex::Id>{1});
    // It stood at revision 1, long compacted away; nothing of its was there.
    CHECK(cell.index.next_match(1, 1) == cell.machine.revision());
}

TEST_CASE("a gap in the history wakes every member and drops the records")
{
    Cell cell(4);  // a history of four events
    cell.index.add(1, kv_key("a"));
    cell.index.add(2, kv_key("b"));
    cell.put("a");
    cell.update();
    for (int i = 0; i < 10; i++) {  // "a"'s event falls out of the history
        cell.put("c");
        CHECK(cell.update().empty());
    }
    CHECK(cell.index.next_match(1, 1) == 1);  // behind the oldest event: it must read to know
    cell.machine.skip_past_lost_writes();      // a whole-cell restart that lost writes
    cell.put("c");
    CHECK(cell.update() == std::set<WatchIndex::Id>{1, 2});
    const Revision after = cell.machine.revision();
    CHECK(cell.index.next_match(2, 2) == 2);  // before the records: it reads, and is told
    CHECK(cell.index.next_match(2, after + 1) == std::nullopt);
}

TEST_CASE("next_match never skips what reading the history finds (random filters and ops)")
{
    test_support::SplitMix64 random(20261126);
    const std::vector<std::string> keys{"", "a", "a/", "a/b", "a/b/c", "b", "ab", "a/c"};
    for (int round = 0; round < 20; round++) {
        Cell cell(64 + random.below(64));
        struct Member {
            WatchFilter filter;
            Revision next = 1;
            Revision added_at = 1;  // the index's first unread revision when it was added
            bool quiet = false;     // looked at only when woken, as the service treats a watch
        };
        std::vector<Member> members;
        const auto add_member = [&] {
            const WatchFilter filter{.key = keys[random.below(keys.size())],
                                     .prefix = random.below(2) == 0,
                                     .spaces = uint8_t(1 + random.below(kAllEventSpaces))};
            members.push_back(Member{.filter = filter,
                                     .next = 1 + random.below(cell.machine.revision() + 1),
                                     .added_at = cell.index.unread(),
                                     .quiet = random.below(2) == 0});
            cell.index.add(members.size(), filter);
        };
        SessionId session = 0;
        for (int step = 0; step < 400; step++) {
            const size_t draw = random.below(10);
            const std::string key = keys[1 + random.below(keys.size() - 1)];
            const Revision unread = cell.index.unread();
            if (draw == 0) add_member();
            else if (draw == 1) {
                cell.run(CreateSession{.ttl_ms = 10'000});
                session = cell.machine.revision();
            } else if (draw == 2 && session) cell.run(Acquire{.lock = key, .session = session});
            else if (draw == 3 && session) cell.run(Release{.lock = key, .session = session});
            else if (draw == 4) cell.run(Delete{.key = key, .prefix = true});
            else cell.put(key);
            const std::set<WatchIndex::Id> woken = cell.update();
            for (size_t i = 0; i < members.size(); i++) {
                Member& member = members[i];
                const WatchIndex::Id id = i + 1;
                // An event of this update that the member's filter matches wakes it.
                if (cell.first_match(member.filter, unread)) CHECK(woken.contains(id));
                // A quiet one not woken is left alone, as the service leaves a watch with
                // nothing to send: its `next` goes stale while the history moves on.
                if (member.quiet && !woken.contains(id)) continue;
                const std::optional<Revision> first = cell.first_match(member.filter, member.next);
                const std::optional<Revision> from = cell.index.next_match(id, member.next);
                if (!from) {
                    CHECK(!first);  // the index says nothing matched: nothing did
                    member.next = std::max(member.next, cell.index.unread());
                    continue;
                }
                CHECK(*from >= member.next);
                // Never past the first event it must see: reading from there finds it, or, if
                // the history lost it, says compacted.
                if (first) CHECK(*from <= *first);
                // Quiet since it read everything, behind the history's oldest event but with
                // nothing of its own lost: not sent back to read (it would be told compacted).
                const Revision oldest = cell.machine.oldest_revision();
                if (member.next >= member.added_at && (!first || *first >= oldest))
                    CHECK(*from >= oldest);
                // Now and then it reads what there is and is up to date again, as a watch does
                // when its reader keeps up; else it falls behind, as a slow reader does.
                if (random.below(3) == 0) member.next = cell.machine.revision() + 1;
            }
        }
    }
}

}  // namespace
}  // namespace voltlock::api
