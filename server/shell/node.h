// One replica as a process: the pure core, its state machine, a UDP socket and a tick timer on
// the event loop. The node carries out the core's effects in order and decides nothing.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/replica.h"
#include "core/ring_records.h"
#include "core/state_machine.h"
#include "shell/config.h"
#include "shell/electrode.h"
#include "shell/event_loop.h"
#include "shell/udp_socket.h"

namespace voltlock {

// Message and datagram counts, for /v1/status and the tests that prove what happened.
struct NodeCounters {
    std::array<uint64_t, VL_MSG_TYPE_MAX + 1> messages_in{};
    std::array<uint64_t, VL_MSG_TYPE_MAX + 1> messages_out{};
    std::array<uint64_t, decode_error_count> rejected{};  // by DecodeError
    uint64_t unknown_peer = 0;  // a replica message from an address that is not that replica's
    uint64_t unknown_client = 0;  // a reply for a client whose address we do not know
};

// What became of an op proposed through this replica.
struct ProposeOutcome {
    bool committed = false;  // false: this replica is not (or no longer) the leader
    Bytes result;            // the state machine's result, when committed
    std::optional<ReplicaIndex> leader;  // who to ask instead, when known
};

class Node {
public:
    using ProposeDone = std::function<void(const ProposeOutcome&)>;
    using ExecutedListener = std::function<void(const Executed&)>;

    static Result<std::unique_ptr<Node>> create(const DaemonConfig& config, Start start,
                                                EventLoop& loop);

    // Everything below runs on the loop thread.

    // Proposes `payload` through the log as request `request_number` of client `client_id`
    // (VR's client table makes a retry of the same pair execute once). `done` runs once: when
    // the op is committed and applied, or when this replica is not the leader or stops being
    // it before then.
    void propose(ClientId client_id, RequestNumber request_number, Bytes payload,
                 ProposeDone done);
    // `listener` sees every entry this replica applies, in op order.
    void on_executed(ExecutedListener listener) { executed_listeners_.push_back(std::move(listener)); }

    const Replica& replica() const { return replica_; }
    StateMachine& machine() { return *machine_; }
    const DaemonConfig& config() const { return config_; }
    // The state that /v1/status reports.
    nlohmann::json status() const;

private:
    Node(const DaemonConfig& config, Start start, UdpSocket socket, FileDescriptor timer,
         std::vector<sockaddr_in> peers, std::unique_ptr<Electrode> electrode);

    void on_datagrams();
    void on_timer();
    void on_ring_records();
    void take_ring_records();
    void take_ring_record(std::span<const uint8_t> datagram);
    void deliver_ring_records(bool past_gaps);
    void drain_kernel();
    void feed_kernel_acks();
    void broadcast(const Message& message);
    void on_datagram(std::span<const uint8_t> datagram, const sockaddr_in& from);
    void step(const Input& input);
    void execute(const Effect& effect);
    void send_message(const sockaddr_in& to, const Message& message, uint16_t flags = 0);
    void log_transition(const vl_kernel_state& state);
    void deliver_reply(const Reply& reply);
    void fail_proposals();

    DaemonConfig config_;
    std::unique_ptr<Electrode> electrode_;  // null: VR runs all in user space
    RingRecords ring_records_;              // acknowledged by the kernel, not yet delivered
    std::vector<Op> kernel_acks_fed_;       // per replica, the op last fed to the core
    uint64_t ticks_ = 0;
    std::unique_ptr<StateMachine> machine_;
    Replica replica_;
    UdpSocket socket_;
    FileDescriptor timer_;
    std::vector<sockaddr_in> peers_;  // by replica index
    std::unordered_map<ClientId, sockaddr_in> clients_;
    std::vector<uint8_t> encode_buffer_;
    vl_kernel_state last_state_{};
    NodeCounters counters_;
    std::map<std::pair<ClientId, RequestNumber>, std::vector<ProposeDone>> proposals_;
    std::vector<ExecutedListener> executed_listeners_;
};

// The wall clock in milliseconds: the timestamp the leader stamps on new ops.
uint64_t wall_clock_ms();

}  // namespace voltlock
