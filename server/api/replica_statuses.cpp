#include "api/replica_statuses.h"

#include <future>
#include <string>

#include "shell/peer_http.h"

namespace voltlock::api {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

Json unreachable(Json entry, std::string why)
{
    entry["reachable"] = false;
    entry["error"] = std::move(why);
    return entry;
}

std::string why_unreachable(httplib::Error error)
{
    switch (error) {
    case httplib::Error::Connection:
        return "connection refused or unreachable (is voltlockd running there?)";
    case httplib::Error::ConnectionTimeout:
        return "no connection within the deadline (down, or cut off from this replica)";
    case httplib::Error::Read:
        return "connected, but no answer within the deadline";
    default:
        return httplib::to_string(error);
    }
}

Json fetch_peer_status(Json entry, const DaemonConfig& config, const PeerAddress& peer,
                       const std::optional<std::string>& authorization)
{
    const auto started = Clock::now();
    const auto deadline_us =
        std::chrono::duration_cast<std::chrono::microseconds>(kPeerStatusDeadline).count();
    const std::unique_ptr<httplib::Client> client = peer_client(config, peer);
    client->set_keep_alive(false);
    client->set_tcp_nodelay(true);
    client->set_connection_timeout(0, deadline_us);
    client->set_read_timeout(0, deadline_us);
    client->set_write_timeout(0, deadline_us);
    httplib::Headers headers;
    if (authorization) headers.emplace("Authorization", *authorization);
    httplib::Result answer = client->Get("/v1/status", headers);
    if (!answer) return unreachable(std::move(entry), why_unreachable(answer.error()));
    if (answer->status != 200)
        return unreachable(std::move(entry), "answered HTTP " + std::to_string(answer->status));
    Json status = Json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
    if (!status.is_object())
        return unreachable(std::move(entry), "answered a body that is not JSON");
    entry["reachable"] = true;
    entry["answered_us"] =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count();
    entry["status"] = std::move(status);
    return entry;
}

}  // namespace

Json replica_statuses(const DaemonConfig& config,
                      const std::function<std::optional<Json>()>& own_status,
                      const std::optional<std::string>& authorization)
{
    const std::vector<PeerAddress>& replicas = config.replicas;
    const size_t self = config.replica;
    std::vector<std::future<Json>> peers;
    std::vector<Json> entries;
    for (size_t i = 0; i < replicas.size(); i++) {
        Json entry{{"replica", i},
                   {"ip", replicas[i].ip},
                   {"http_port", replicas[i].http_port},
                   {"self", i == self}};
        if (i == self) {
            entries.push_back(std::move(entry));
            peers.emplace_back();
        } else {
            peers.push_back(std::async(std::launch::async, fetch_peer_status, std::move(entry),
                                       std::cref(config), replicas[i], std::cref(authorization)));
            entries.emplace_back();
        }
    }
    // Our own status while the peers answer.
    if (std::optional<Json> own = own_status()) {
        entries[self]["reachable"] = true;
        entries[self]["answered_us"] = 0;
        entries[self]["status"] = std::move(*own);
    } else {
        entries[self] = unreachable(std::move(entries[self]), "the event loop did not answer");
    }
    Json answer{{"replica", self}, {"replicas", Json::array()}};
    for (size_t i = 0; i < replicas.size(); i++)
        answer["replicas"].push_back(i == self ? std::move(entries[i]) : peers[i].get());
    return answer;
}

}  // namespace voltlock::api
