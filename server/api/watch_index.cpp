#include "api/watch_index.h"

#include <algorithm>
#include <string_view>

#include "core/assert.h"

namespace voltlock::api {

void WatchIndex::add(Id id, const WatchFilter& filter)
{
    auto [group, created] = groups_.try_emplace(FilterKey{filter.key, filter.prefix,
                                                          filter.spaces});
    // Events before `unread_` were read before this group existed: not recorded for it.
    if (created) group->second.indexed_from = unread_;
    if (created && filter.prefix) prefix_lengths_[filter.key.size()] += 1;
    group->second.members.push_back(id);
    member_group_.emplace(id, group);
}

void WatchIndex::remove(Id id)
{
    const auto found = member_group_.find(id);
    if (found == member_group_.end()) return;
    const auto group = found->second;
    member_group_.erase(found);
    std::vector<Id>& members = group->second.members;
    members.erase(std::find(members.begin(), members.end(), id));
    if (!members.empty()) return;
    const auto& [key, prefix, spaces] = group->first;
    if (prefix) {
        const auto length = prefix_lengths_.find(key.size());
        if (--length->second == 0) prefix_lengths_.erase(length);
    }
    groups_.erase(group);
}

void WatchIndex::visit_matching(const WatchEvent& event, const std::function<void(Group&)>& visit)
{
    const uint8_t space = static_cast<uint8_t>(event_space(event.type));
    // The groups of one (key, prefix) sit together, one per set of spaces.
    const auto visit_key = [&](std::string_view key, bool prefix) {
        for (auto it = groups_.lower_bound(FilterKey{std::string(key), prefix, 0});
             it != groups_.end() && std::get<0>(it->first) == key &&
             std::get<1>(it->first) == prefix;
             ++it)
            if (std::get<2>(it->first) & space) visit(it->second);
    };
    visit_key(event.key, false);
    for (const auto& [length, count] : prefix_lengths_) {
        if (length > event.key.size()) break;
        visit_key(std::string_view(event.key).substr(0, length), true);
    }
}

void WatchIndex::update(const std::function<void(Id)>& wake)
{
    updates_ += 1;
    const auto wake_members = [&](Group& group) {
        if (std::exchange(group.woken_in, updates_) == updates_) return;
        for (const Id id : group.members) wake(id);
    };
    const WatchFilter every_event{.key = "", .prefix = true, .spaces = kAllEventSpaces};
    const auto record = [&](const WatchEvent& e) {
        visit_matching(e, [&](Group& group) {
            if (group.matches.empty() || group.matches.back() != e.revision)
                group.matches.push_back(e.revision);
            drop_compacted(group);
            wake_members(group);
        });
    };
    const WatchBatch read = machine_.visit_watched(unread_, every_event, 0, record);
    if (read.compacted) {
        // What happened in between is gone: nobody can skip over it.
        for (auto& [filter, group] : groups_) {
            group.matches.clear();
            group.last_dropped = 0;
            group.indexed_from = machine_.revision() + 1;
            wake_members(group);
        }
    }
    unread_ = machine_.revision() + 1;
}

std::optional<Revision> WatchIndex::next_match(Id id, Revision next)
{
    const auto found = member_group_.find(id);
    VL_ASSERT(found != member_group_.end(), "next_match of a member never added");
    Group& group = found->second->second;
    if (next < group.indexed_from) return next;  // before the records: only reading tells
    drop_compacted(group);
    // A match it has not read fell out of the history: reading tells it so (compacted). A
    // member behind the history's oldest event with no such match has lost nothing.
    if (next <= group.last_dropped) return next;
    const auto match = std::lower_bound(group.matches.begin(), group.matches.end(), next);
    if (match == group.matches.end()) return std::nullopt;
    return *match;
}

void WatchIndex::drop_compacted(Group& group) const
{
    // The history no longer holds them: a member that far behind is told so when it reads.
    while (!group.matches.empty() && group.matches.front() < machine_.oldest_revision()) {
        group.last_dropped = group.matches.front();
        group.matches.pop_front();
    }
}

}  // namespace voltlock::api
