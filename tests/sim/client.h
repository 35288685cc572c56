// A VR client (VR Revisited §4.1): one request outstanding at a time, numbered
// one past the last; sent to the leader of the view the client last heard of; on a timeout the
// same request (same number) goes to every replica, since the leader may have changed. A client
// never gives up on an operation.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/message.h"

namespace voltlock::sim {

struct ClientSend {
    ReplicaIndex to = 0;
    Request request;
};

class Client {
public:
    Client(ClientId id, uint8_t replica_count, uint32_t retry_ticks);

    ClientId id() const { return id_; }
    bool waiting() const { return outstanding_.has_value(); }
    const Request& outstanding() const { return *outstanding_; }

    // Starts the next operation; the client must not be waiting.
    void invoke(Bytes payload, uint64_t now_tick, std::vector<ClientSend>& out);
    // Resends the outstanding request to every replica once it has waited `retry_ticks`.
    void on_tick(uint64_t now_tick, std::vector<ClientSend>& out);
    // True if `reply` answers the outstanding request, which it completes. Anything else is a
    // late or duplicated reply to an earlier request and is ignored.
    bool on_reply(const Reply& reply);

private:
    ClientId id_;
    uint8_t replica_count_;
    uint32_t retry_ticks_;
    View view_ = 0;  // the latest view a reply named
    RequestNumber last_request_number_ = 0;
    std::optional<Request> outstanding_;
    uint64_t retry_at_tick_ = 0;
};

}  // namespace voltlock::sim
