// A single replica under test: feed it inputs, read back exactly the effects it produced.
#pragma once

#include <doctest/doctest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/overloaded.h"
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
            step(Tick{.now_ms = ++now_ms_, .monotonic_ms = now_ms_});
            all.insert(all.end(), effects_.begin(), effects_.end());
        }
        effects_ = std::move(all);
        return effects_;
    }
    const Effects& flush() { return step(Flush{}); }

    Replica& operator*() { return *replica_; }
    Replica* operator->() { return replica_.get(); }
    const Replica* operator->() const { return replica_.get(); }
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


// ---- Effects as text ----------------------------------------------------------------------
// One line per effect, with the fields a test pins down, so that `CHECK(describe(effects) ==
// "...")` states the exact effects of a step and a failure prints both sides readably.

inline std::string describe(const Message& message)
{
    using std::to_string;
    const std::string name = message_name(message);
    return name + std::visit(
        Overloaded{
            [](const Request& m) {
                return " c" + to_string(m.client_id) + " n" + to_string(m.request_number);
            },
            [](const Reply& m) {
                return " c" + to_string(m.client_id) + " n" + to_string(m.request_number);
            },
            [](const Prepare& m) {
                return " v" + to_string(m.view) + " op" + to_string(m.op) + " commit" +
                       to_string(m.commit) + " n" + to_string(m.entries.size());
            },
            [](const PrepareOk& m) { return " v" + to_string(m.view) + " op" + to_string(m.op); },
            [](const Commit& m) {
                return " v" + to_string(m.view) + " commit" + to_string(m.commit);
            },
            [](const StartViewChange& m) {
                return " v" + to_string(m.view) + (m.asking ? " asking" : "");
            },
            [](const DoViewChange& m) {
                return " v" + to_string(m.view) + " lnv" + to_string(m.last_normal_view) +
                       " op" + to_string(m.op) + " commit" + to_string(m.commit);
            },
            [](const StartView& m) {
                return " v" + to_string(m.view) + " op" + to_string(m.op) + " commit" +
                       to_string(m.commit) + " first" + to_string(m.first_op) + " n" +
                       to_string(m.entries.size());
            },
            [](const Recovery& m) { return " nonce" + to_string(m.nonce); },
            [](const RecoveryResponse& m) {
                return " v" + to_string(m.view) + " op" + to_string(m.op) + " commit" +
                       to_string(m.commit) + " lnv" + to_string(m.last_normal_view) +
                       " " + standing_name(m.standing);
            },
            [](const GetState& m) { return " v" + to_string(m.view) + " op" + to_string(m.op); },
            [](const NewState& m) {
                return " v" + to_string(m.view) + " op" + to_string(m.op) + " commit" +
                       to_string(m.commit) + " first" + to_string(m.first_op) + " n" +
                       to_string(m.entries.size());
            },
            [](const SnapshotOffer& m) {
                return " v" + to_string(m.view) + " op" + to_string(m.op);
            },
            [](const CommitOk& m) {
                return " v" + to_string(m.view) + " heartbeat" + to_string(m.heartbeat);
            },
            [](const Replies& m) {
                return " v" + to_string(m.view) + " n" + to_string(m.items.size());
            },
            [](const Requests& m) {
                return " v" + to_string(m.view) + " n" + to_string(m.items.size());
            },
        },
        message);
}

inline std::string describe(const Effect& effect)
{
    using std::to_string;
    return std::visit(
        Overloaded{
            [](const Send& e) { return "send r" + to_string(e.to) + " " + describe(e.message); },
            [](const Broadcast& e) { return "broadcast " + describe(e.message); },
            [](const SendReply& e) {
                return "send_reply c" + to_string(e.reply.client_id) + " n" +
                       to_string(e.reply.request_number);
            },
            [](const Executed& e) { return "executed " + to_string(e.op); },
            [](const KernelStateChanged&) { return std::string("kernel_state"); },
            [](const DrainKernel&) { return std::string("drain_kernel"); },
            [](const WriteSnapshot& e) {
                return "write_snapshot " + to_string(e.op) +
                       (e.before_next_effect ? " before_next_effect" : "");
            },
            [](const PersistLog& e) {
                return "persist_log after" + to_string(e.after) + " n" +
                       to_string(e.entries.size());
            },
            [](const PersistView& e) {
                return "persist_view v" + to_string(e.view) + " lnv" +
                       to_string(e.last_normal_view);
            },
            [](const FetchSnapshot& e) {
                return "fetch_snapshot r" + to_string(e.from) + " op" + to_string(e.op);
            },
            [](const SnapshotInstalled& e) { return "snapshot_installed " + to_string(e.op); },
            [](const PersistStopped&) { return std::string("persist_stopped"); },
        },
        effect);
}

// The effects of a step, "; " between them.
inline std::string describe(const Effects& effects)
{
    std::string out;
    for (const Effect& effect : effects) out += (out.empty() ? "" : "; ") + describe(effect);
    return out;
}

// ---- A cell -------------------------------------------------------------------------------

// TestReplicas joined by a FIFO network that the test drives: every step's messages are queued
// and deliver() hands them over one at a time until none is left. It plays the shell for the
// storage effects too: WriteSnapshot and PersistLog/PersistView go to a model of each replica's
// data directory (WriteSnapshot answered by SnapshotWritten, queued like a message), and
// FetchSnapshot is answered with the target's data-directory snapshot as it is at delivery.
// Nothing happens by itself: no ticks, no loss, unless the test asks (tick(), drop).
class TestCell {
public:
    // What a replica's data directory holds, as the shell would keep it.
    struct Disk {
        Bytes snapshot;  // the last WriteSnapshot's bytes (empty: none)
        Op snapshot_op = 0;
        std::map<Op, Entry> log;  // PersistLog
        View view = 0;            // PersistView
        View last_normal_view = 0;
    };
    struct Envelope {
        ReplicaIndex from = 0;
        ReplicaIndex to = 0;
        Message message;
    };

    // `adjust` may change each replica's config (it sees config.replica).
    explicit TestCell(uint8_t count, const std::function<void(ReplicaConfig&)>& adjust = {})
    {
        for (ReplicaIndex r = 0; r < count; r++) {
            ReplicaConfig config = test_config(r, count);
            if (adjust) adjust(config);
            configs_.push_back(config);
            replicas_.push_back(std::make_unique<TestReplica>(config));
            disks_.emplace_back();
            up_.push_back(true);
        }
    }

    TestReplica& operator[](ReplicaIndex r) { return *replicas_.at(r); }
    Disk& disk(ReplicaIndex r) { return disks_.at(r); }
    bool up(ReplicaIndex r) const { return up_.at(r); }
    // Every message handed over so far, in order.
    const std::vector<Envelope>& delivered() const { return delivered_; }

    // Steps replica `r` and carries out its effects (queues messages, writes its disk).
    const Effects& step(ReplicaIndex r, Input input)
    {
        TestReplica& replica = *replicas_.at(r);
        replica.step(std::move(input));
        carry_out(r, replica.effects());
        return replica.effects();
    }
    void tick(ReplicaIndex r, uint32_t n = 1)
    {
        for (uint32_t i = 0; i < n; i++) {
            now_ms_ += 1;
            step(r, Tick{.now_ms = now_ms_, .monotonic_ms = now_ms_});
        }
    }
    // A client's request to `leader`, sent at once (Flush).
    void submit(ReplicaIndex leader, ClientId client, RequestNumber number, Bytes payload = "Wv")
    {
        step(leader, Receive{request(client, number, std::move(payload))});
        step(leader, Flush{});
    }

    // Clients `first` to `last` each send one request (number 1) to `leader`, each handed over
    // in full before the next is sent.
    void submit_each(ReplicaIndex leader, ClientId first, ClientId last)
    {
        for (ClientId client = first; client <= last; client++) {
            submit(leader, client, 1);
            deliver();
        }
    }

    // Hands over queued messages, snapshot writes and fetches, oldest first, until none is
    // left (or `limit` were handed over: a test that loops forever fails instead).
    void deliver(size_t limit = 100'000)
    {
        for (size_t n = 0; !queue_.empty(); n++) {
            REQUIRE(n < limit);
            Pending pending = std::move(queue_.front());
            queue_.pop_front();
            std::visit(Overloaded{
                           [&](Envelope& envelope) {
                               if (!up_.at(envelope.to) || (drop && drop(envelope))) return;
                               delivered_.push_back(envelope);
                               step(envelope.to, Receive{std::move(envelope.message)});
                           },
                           [&](LocalInput& local) {
                               if (up_.at(local.replica)) step(local.replica, local.input);
                           },
                           [&](SnapshotFetch& fetch) {
                               if (!up_.at(fetch.replica)) return;
                               step(fetch.replica,
                                    SnapshotFetched{.snapshot = disks_.at(fetch.from).snapshot,
                                                    .from = fetch.from});
                           },
                       },
                       pending);
        }
    }

    // The replica stops: what is queued for it is lost; its data directory stays.
    void crash(ReplicaIndex r)
    {
        up_.at(r) = false;
        std::erase_if(queue_, [&](const Pending& pending) { return addressed_to(pending) == r; });
    }
    // It starts again (a fresh state machine), as `start` says.
    void restart(ReplicaIndex r, Start start)
    {
        crash(r);
        if (const auto* restored = std::get_if<StartRestored>(&start)) {
            // Its data directory is what it restarts from (and serves to peers that fetch).
            Disk& d = disks_.at(r);
            const auto snapshot = decode_replica_snapshot(restored->snapshot);
            d.snapshot = restored->snapshot;
            d.snapshot_op = snapshot ? snapshot->op : 0;
            d.log.clear();
            for (size_t i = 0; i < restored->log.size(); i++)
                d.log[d.snapshot_op + 1 + i] = restored->log[i];
            d.view = restored->view;
            d.last_normal_view = restored->last_normal_view;
        }
        replicas_.at(r) = std::make_unique<TestReplica>(configs_.at(r), std::move(start));
        up_.at(r) = true;
    }
    // What a restart from replica `r`'s data directory starts with.
    StartRestored restored_start(ReplicaIndex r, uint64_t nonce) const
    {
        const Disk& d = disks_.at(r);
        StartRestored start{.nonce = nonce, .snapshot = d.snapshot, .log = {}, .view = d.view,
                            .last_normal_view = d.last_normal_view};
        for (auto it = d.log.find(d.snapshot_op + 1); it != d.log.end(); ++it) {
            if (it->first != d.snapshot_op + 1 + start.log.size()) break;
            start.log.push_back(it->second);
        }
        return start;
    }

    // Messages for which this returns true are lost at delivery.
    std::function<bool(const Envelope&)> drop;
    // Whether the shell manages to write the snapshots asked for.
    bool snapshot_writes_ok = true;

private:
    struct LocalInput {
        ReplicaIndex replica = 0;
        Input input;
    };
    struct SnapshotFetch {
        ReplicaIndex replica = 0;
        ReplicaIndex from = 0;
    };
    using Pending = std::variant<Envelope, LocalInput, SnapshotFetch>;

    static ReplicaIndex addressed_to(const Pending& pending)
    {
        return std::visit(Overloaded{
                              [](const Envelope& e) { return e.to; },
                              [](const LocalInput& l) { return l.replica; },
                              [](const SnapshotFetch& f) { return f.replica; },
                          },
                          pending);
    }

    void carry_out(ReplicaIndex r, const Effects& effects)
    {
        Disk& d = disks_.at(r);
        for (const Effect& effect : effects) {
            std::visit(
                Overloaded{
                    [&](const Send& e) { queue_.push_back(Envelope{r, e.to, e.message}); },
                    [&](const Broadcast& e) {
                        for (ReplicaIndex to = 0; to < replicas_.size(); to++)
                            if (to != r) queue_.push_back(Envelope{r, to, e.message});
                    },
                    [&](const WriteSnapshot& e) {
                        if (snapshot_writes_ok) {
                            d.snapshot = (*replicas_.at(r))->snapshot_to_write(e);
                            d.snapshot_op = e.op;
                        }
                        queue_.push_back(
                            LocalInput{r, SnapshotWritten{.op = e.op, .ok = snapshot_writes_ok}});
                    },
                    [&](const PersistLog& e) {
                        d.log.erase(d.log.upper_bound(e.after), d.log.end());
                        for (size_t i = 0; i < e.entries.size(); i++)
                            d.log[e.after + 1 + i] = e.entries[i];
                    },
                    [&](const PersistView& e) {
                        d.view = e.view;
                        d.last_normal_view = e.last_normal_view;
                    },
                    [&](const FetchSnapshot& e) {
                        queue_.push_back(SnapshotFetch{r, e.from});
                    },
                    [](const auto&) {},
                },
                effect);
        }
    }

    std::vector<ReplicaConfig> configs_;
    std::vector<std::unique_ptr<TestReplica>> replicas_;
    std::vector<Disk> disks_;
    std::vector<bool> up_;
    std::deque<Pending> queue_;
    std::vector<Envelope> delivered_;
    uint64_t now_ms_ = 1000;
};

}  // namespace voltlock::test
