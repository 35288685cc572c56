#include "client.h"

#include <algorithm>

#include "core/assert.h"

namespace voltlock::sim {

Client::Client(ClientId id, uint8_t replica_count, uint32_t retry_ticks)
    : id_(id), replica_count_(replica_count), retry_ticks_(retry_ticks)
{
}

void Client::invoke(Bytes payload, uint64_t now_tick, std::vector<ClientSend>& out)
{
    VL_ASSERT(!waiting(), "a VR client has one request outstanding at a time");
    last_request_number_++;
    outstanding_ = Request{.view = view_,
                           .client_id = id_,
                           .request_number = last_request_number_,
                           .payload = std::move(payload)};
    retry_at_tick_ = now_tick + retry_ticks_;
    const auto leader = static_cast<ReplicaIndex>(view_ % replica_count_);
    out.push_back(ClientSend{leader, *outstanding_});
}

void Client::on_tick(uint64_t now_tick, std::vector<ClientSend>& out)
{
    if (!waiting() || now_tick < retry_at_tick_) return;
    retry_at_tick_ = now_tick + retry_ticks_;
    outstanding_->view = view_;
    for (ReplicaIndex r = 0; r < replica_count_; r++) out.push_back(ClientSend{r, *outstanding_});
}

bool Client::on_reply(const Reply& reply)
{
    if (reply.client_id != id_) return false;
    // Replies come only from a leader; a reply from an older view than one already seen is
    // late, and must not send the client back to a deposed leader.
    view_ = std::max(view_, reply.view);
    if (!waiting() || reply.request_number != outstanding_->request_number) return false;
    outstanding_.reset();
    return true;
}

}  // namespace voltlock::sim
