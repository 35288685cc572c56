// The simulated network: datagrams between replicas and clients with the faults of a real one
// (loss, delay, reordering, duplication, corruption) and partitions between replicas, every
// decision drawn from one seeded PRNG so that a seed replays exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/types.h"
#include "prng.h"

namespace voltlock::sim {

// A datagram's endpoint: a replica, or a client by its slot in the cluster.
struct Address {
    enum class Kind : uint8_t { replica, client };
    Kind kind = Kind::replica;
    uint32_t index = 0;

    static Address replica(ReplicaIndex r) { return {Kind::replica, r}; }
    static Address client(uint32_t slot) { return {Kind::client, slot}; }
    bool is_replica() const { return kind == Kind::replica; }
};

// Per-datagram fault probabilities. Delays are whole ticks, at least one, so nothing sent in a
// tick arrives in the same tick; unequal delays are what reorder datagrams.
struct NetworkFaults {
    double loss = 0;
    double duplication = 0;
    double corruption = 0;           // one byte flipped in flight
    uint32_t max_delay_ticks = 1;    // usual delay: uniform in [1, max_delay_ticks]
    double slow_fraction = 0;        // the rest arrive late: uniform in [1, slow_delay_ticks]
    uint32_t slow_delay_ticks = 1;
};

struct Datagram {
    Address from;
    Address to;
    std::vector<uint8_t> bytes;
    bool corrupted = false;  // the receiver's decoder must reject it
};

struct NetworkStats {
    uint64_t sent = 0;
    uint64_t lost = 0;
    uint64_t cut_by_partition = 0;
    uint64_t duplicated = 0;
    uint64_t corrupted = 0;
};

class Network {
public:
    Network(uint8_t replica_count, Prng prng);

    void set_faults(const NetworkFaults& faults) { faults_ = faults; }
    const NetworkFaults& faults() const { return faults_; }

    // Partitions cut links between replicas only. Clients reach every replica: a client cut off
    // from the leader behaves like a slow one, which its retries to all replicas already cover.
    //
    // Symmetric: replicas exchange datagrams only within their group (`group_of[r]`).
    void partition(const std::vector<uint8_t>& group_of);
    // One-way: datagrams from `from` to `to` are dropped; the other direction is untouched.
    void block(ReplicaIndex from, ReplicaIndex to);
    void heal();
    bool link_up(ReplicaIndex from, ReplicaIndex to) const;

    // Hands a datagram to the network at `now_tick`; it arrives later, more than once, damaged,
    // or never, as the faults decide. A cut link drops it at the moment it is sent.
    void send(Address from, Address to, std::vector<uint8_t> bytes, uint64_t now_tick);
    // The next datagram due by `now_tick`, earliest first; ties in random order.
    std::optional<Datagram> receive_due(uint64_t now_tick);
    // Scenarios: a datagram that arrives at `arrival_tick` exactly, whatever the faults and
    // partitions, ordered among those due then by `tie_breaker` (the network draws its own
    // uniformly from 64 bits: 0, 1, 2... come first, UINT64_MAX last).
    void place(Address from, Address to, std::vector<uint8_t> bytes, uint64_t arrival_tick,
               uint64_t tie_breaker);
    // Scenarios: takes every datagram in flight from `from` to `to` off the network.
    std::vector<Datagram> take(Address from, Address to);
    // When that datagram arrives, as (tick, tie breaker): other events on the network's clock
    // (the simulated shells reading their ring buffers) interleave with deliveries by it.
    std::optional<std::pair<uint64_t, uint64_t>> next_due(uint64_t now_tick) const;
    const NetworkStats& stats() const { return stats_; }

private:
    struct InFlight {
        uint64_t arrival_tick = 0;
        uint64_t tie_breaker = 0;
        Datagram datagram;
    };
    static bool arrives_later(const InFlight& a, const InFlight& b);

    uint64_t draw_delay_ticks();
    void corrupt(Datagram& datagram);

    uint8_t replica_count_;
    Prng prng_;
    NetworkFaults faults_;
    std::vector<bool> link_down_;  // [from * replica_count_ + to]
    std::vector<InFlight> queue_;  // a heap: earliest arrival at the front
    NetworkStats stats_;
};

}  // namespace voltlock::sim
