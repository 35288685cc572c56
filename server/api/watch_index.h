// Which watches and waits an applied event concerns (issue 12: many long-held requests).
//
// Each watch or wait registers its filter (a key or a prefix, and the event spaces); members with
// the same filter share a group. As the applied history grows, `update` reads each new event once,
// finds the groups it matches by key (an exact key, or each prefix length in use), records the
// revision in each group, and wakes that group's members. So a replica with 10,000 watches on as
// many keys does work per event in proportion to the watches the event concerns, not to all of
// them (etcd's watchable store and ZooKeeper's WatchManager index watchers by key the same way).
// A member that has read its group's every match skips, when it next reads, straight to the next
// one (`next_match`) instead of reading every event in between.
//
// A group's matches are recorded from the update that created it (`indexed_from`): a member that
// starts further back reads the history itself until it has caught up. A match the history no
// longer holds is dropped from the records, and a member that had not read it reads the history,
// which tells it `compacted`; a member that had read every match of its group loses nothing when
// the history moves past where it stood, however long it stayed quiet. A gap in the history (an
// update finds the events it has not read compacted away, or replaced by a whole-cell restart)
// drops every record and wakes every member, which then reads the history itself and finds out.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/lock_machine.h"

namespace voltlock::api {

class WatchIndex {
public:
    using Id = uint64_t;

    explicit WatchIndex(const LockMachine& machine) : machine_(machine) {}

    void add(Id id, const WatchFilter& filter);
    void remove(Id id);
    // Reads the events applied since the last update and calls `wake` once for each member of
    // every group they matched (after a gap: for every member).
    void update(const std::function<void(Id)>& wake);
    // Where member `id` reads the history from to find its first event at or after `next`:
    // `next` itself while its group cannot tell, the revision of its group's next match, or
    // nullopt when nothing up to the newest update matched.
    std::optional<Revision> next_match(Id id, Revision next);
    // The first revision no update has read yet.
    Revision unread() const { return unread_; }

private:
    using FilterKey = std::tuple<std::string, bool, uint8_t>;  // key, prefix, spaces
    struct Group {
        std::vector<Id> members;
        std::deque<Revision> matches;  // ascending, from indexed_from on
        Revision indexed_from = 0;
        Revision last_dropped = 0;  // the newest match dropped as the history moved past it
        uint64_t woken_in = 0;  // the update that last woke the members
    };

    // The groups `event` matches, each once.
    void visit_matching(const WatchEvent& event, const std::function<void(Group&)>& visit);
    void drop_compacted(Group& group) const;

    const LockMachine& machine_;
    std::map<FilterKey, Group> groups_;  // ordered: the groups of one key are neighbours
    std::unordered_map<Id, std::map<FilterKey, Group>::iterator> member_group_;
    std::map<size_t, size_t> prefix_lengths_;  // the prefix groups' key lengths, counted
    Revision unread_ = 1;
    uint64_t updates_ = 0;
};

}  // namespace voltlock::api
