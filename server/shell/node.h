// One replica as a process: the pure core, its state machine, a UDP socket and a tick timer on
// the event loop. The node carries out the core's effects in order and decides nothing.
#pragma once

#include <array>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/register_machine.h"
#include "core/replica.h"
#include "shell/config.h"
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

class Node {
public:
    static Result<std::unique_ptr<Node>> create(const DaemonConfig& config, Start start,
                                                EventLoop& loop);

    // The state that /v1/status reports. Call on the loop thread.
    nlohmann::json status() const;

private:
    Node(const DaemonConfig& config, Start start, UdpSocket socket, FileDescriptor timer,
         std::vector<sockaddr_in> peers);

    void on_datagrams();
    void on_timer();
    void on_datagram(std::span<const uint8_t> datagram, const sockaddr_in& from);
    void step(const Input& input);
    void execute(const Effect& effect);
    void send_message(const sockaddr_in& to, const Message& message);
    void log_transition(const vl_kernel_state& state);

    DaemonConfig config_;
    RegisterMachine machine_;
    Replica replica_;
    UdpSocket socket_;
    FileDescriptor timer_;
    std::vector<sockaddr_in> peers_;  // by replica index
    std::unordered_map<ClientId, sockaddr_in> clients_;
    Effects effects_;
    std::vector<uint8_t> encode_buffer_;
    vl_kernel_state last_state_{};
    NodeCounters counters_;
};

// The wall clock in milliseconds: the timestamp the leader stamps on new ops.
uint64_t wall_clock_ms();

}  // namespace voltlock
