#include "network.h"

#include <algorithm>

namespace voltlock::sim {

Network::Network(uint8_t replica_count, Prng prng)
    : replica_count_(replica_count),
      prng_(prng),
      link_down_(size_t{replica_count} * replica_count, false)
{
}

void Network::partition(const std::vector<uint8_t>& group_of)
{
    VL_ASSERT(group_of.size() == replica_count_, "a group for every replica");
    for (ReplicaIndex from = 0; from < replica_count_; from++)
        for (ReplicaIndex to = 0; to < replica_count_; to++)
            if (group_of[from] != group_of[to]) block(from, to);
}

void Network::block(ReplicaIndex from, ReplicaIndex to)
{
    link_down_[size_t{from} * replica_count_ + to] = true;
}

void Network::heal() { std::fill(link_down_.begin(), link_down_.end(), false); }

bool Network::link_up(ReplicaIndex from, ReplicaIndex to) const
{
    return !link_down_[size_t{from} * replica_count_ + to];
}

bool Network::arrives_later(const InFlight& a, const InFlight& b)
{
    if (a.arrival_tick != b.arrival_tick) return a.arrival_tick > b.arrival_tick;
    return a.tie_breaker > b.tie_breaker;
}

uint64_t Network::draw_delay_ticks()
{
    if (prng_.chance(faults_.slow_fraction)) return prng_.between(1, faults_.slow_delay_ticks);
    return prng_.between(1, faults_.max_delay_ticks);
}

void Network::corrupt(Datagram& datagram)
{
    if (datagram.bytes.empty()) return;
    const size_t at = prng_.below(datagram.bytes.size());
    datagram.bytes[at] ^= static_cast<uint8_t>(prng_.between(1, 255));
    datagram.corrupted = true;
    stats_.corrupted++;
}

void Network::send(Address from, Address to, std::vector<uint8_t> bytes, uint64_t now_tick)
{
    stats_.sent++;
    if (from.is_replica() && to.is_replica() &&
        !link_up(static_cast<ReplicaIndex>(from.index), static_cast<ReplicaIndex>(to.index))) {
        stats_.cut_by_partition++;
        return;
    }
    if (prng_.chance(faults_.loss)) {
        stats_.lost++;
        return;
    }
    const bool duplicate = prng_.chance(faults_.duplication);
    if (duplicate) stats_.duplicated++;
    for (int copy = 0; copy < (duplicate ? 2 : 1); copy++) {
        Datagram datagram{from, to, bytes, false};
        if (prng_.chance(faults_.corruption)) corrupt(datagram);
        queue_.push_back(InFlight{now_tick + draw_delay_ticks(), prng_.next(),
                                  std::move(datagram)});
        std::push_heap(queue_.begin(), queue_.end(), arrives_later);
    }
}

std::optional<Datagram> Network::receive_due(uint64_t now_tick)
{
    if (queue_.empty() || queue_.front().arrival_tick > now_tick) return std::nullopt;
    std::pop_heap(queue_.begin(), queue_.end(), arrives_later);
    Datagram datagram = std::move(queue_.back().datagram);
    queue_.pop_back();
    return datagram;
}

void Network::place(Address from, Address to, std::vector<uint8_t> bytes, uint64_t arrival_tick,
                    uint64_t tie_breaker)
{
    queue_.push_back(InFlight{arrival_tick, tie_breaker,
                              Datagram{from, to, std::move(bytes), false}});
    std::push_heap(queue_.begin(), queue_.end(), arrives_later);
}

std::vector<Datagram> Network::take(Address from, Address to)
{
    const auto on_link = [&](const InFlight& f) {
        return f.datagram.from.kind == from.kind && f.datagram.from.index == from.index &&
               f.datagram.to.kind == to.kind && f.datagram.to.index == to.index;
    };
    std::vector<InFlight> kept;
    std::vector<Datagram> taken;
    for (InFlight& f : queue_) {
        if (on_link(f))
            taken.push_back(std::move(f.datagram));
        else
            kept.push_back(std::move(f));
    }
    queue_ = std::move(kept);
    std::make_heap(queue_.begin(), queue_.end(), arrives_later);
    return taken;
}

std::optional<std::pair<uint64_t, uint64_t>> Network::next_due(uint64_t now_tick) const
{
    if (queue_.empty() || queue_.front().arrival_tick > now_tick) return std::nullopt;
    return std::pair(queue_.front().arrival_tick, queue_.front().tie_breaker);
}

}  // namespace voltlock::sim
