// A single replica under test: feed it inputs, read back exactly the effects it produced.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <vector>

#include "core/register_machine.h"
#include "core/replica.h"

namespace voltlock::test {

inline ReplicaConfig test_config(ReplicaIndex replica, uint8_t replica_count)
{
    ReplicaConfig config;
    config.cluster_id = 7;
    config.replica = replica;
    config.replica_count = replica_count;
    config.heartbeat_ticks = 5;
    config.view_change_timeout_ticks = 20;
    config.retransmit_ticks = 4;
    return config;
}

inline Entry entry(ClientId client, RequestNumber number, Bytes payload)
{
    return Entry{.timestamp_ms = 0, .client_id = client, .request_number = number,
                 .payload = std::move(payload)};
}

inline Request request(ClientId client, RequestNumber number, Bytes payload = "Wx")
{
    return Request{.view = 0, .client_id = client, .request_number = number,
                   .payload = std::move(payload)};
}

class TestReplica {
public:
    explicit TestReplica(ReplicaConfig config, Start start = StartFresh{})
        : replica_(std::make_unique<Replica>(config, machine_, start))
    {
    }
    // The replica holds a reference to the machine beside it: neither may move.
    TestReplica(const TestReplica&) = delete;
    TestReplica& operator=(const TestReplica&) = delete;

    const Effects& step(Input input)
    {
        effects_.clear();
        replica_->step(input, effects_);
        return effects_;
    }
    const Effects& receive(Message message) { return step(Receive{std::move(message)}); }
    const Effects& tick(uint32_t n = 1)
    {
        Effects all;
        for (uint32_t i = 0; i < n; i++) {
            step(Tick{.now_ms = ++now_ms_});
            all.insert(all.end(), effects_.begin(), effects_.end());
        }
        effects_ = std::move(all);
        return effects_;
    }
    const Effects& flush() { return step(Flush{}); }

    Replica& operator*() { return *replica_; }
    Replica* operator->() { return replica_.get(); }
    const Effects& effects() const { return effects_; }
    RegisterMachine& machine() { return machine_; }

    // Messages of type T sent to `to` (Send) or to everyone (Broadcast) by the last step.
    template <typename T>
    std::vector<T> sent_to(ReplicaIndex to) const
    {
        std::vector<T> found;
        for (const Effect& effect : effects_) {
            if (const auto* send = std::get_if<Send>(&effect); send && send->to == to) {
                if (const auto* m = std::get_if<T>(&send->message)) found.push_back(*m);
            } else if (const auto* broadcast = std::get_if<Broadcast>(&effect)) {
                if (const auto* m = std::get_if<T>(&broadcast->message)) found.push_back(*m);
            }
        }
        return found;
    }
    template <typename T>
    std::vector<T> broadcasts() const
    {
        std::vector<T> found;
        for (const Effect& effect : effects_)
            if (const auto* broadcast = std::get_if<Broadcast>(&effect))
                if (const auto* m = std::get_if<T>(&broadcast->message)) found.push_back(*m);
        return found;
    }
    template <typename E>
    std::vector<E> effects_of() const
    {
        std::vector<E> found;
        for (const Effect& effect : effects_)
            if (const auto* e = std::get_if<E>(&effect)) found.push_back(*e);
        return found;
    }

private:
    RegisterMachine machine_;
    std::unique_ptr<Replica> replica_;
    Effects effects_;
    uint64_t now_ms_ = 1000;
};

// A leader (replica 0 of `count`, view 0) that has prepared `ops` single-request batches.
inline void prepare_ops(TestReplica& leader, int ops, ClientId first_client = 100)
{
    for (int i = 0; i < ops; i++) {
        leader.receive(request(first_client + static_cast<ClientId>(i), 1, "Wv"));
        leader.flush();
    }
}

}  // namespace voltlock::test
