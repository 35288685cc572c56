// GET /v1/cluster/replicas (docs/api.md): every replica's /v1/status as the replica asked can
// get it, fetched from the peers in parallel with a short deadline. It is how one page served by
// one replica shows the whole cell (the web UI's cell page) without talking to other origins,
// and how an operator tells "down" from "cut off from me".
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shell/config.h"

namespace voltlock::api {

// A peer that has not answered within this much is reported unreachable; the whole answer takes
// about this long at most, so a once-a-second poller sees a dead replica within two seconds.
inline constexpr std::chrono::milliseconds kPeerStatusDeadline{800};

// {"replica": <self>, "replicas": [{replica, ip, http_port, self, reachable, answered_us,
// status | error}]}, in replica order. `own_status` reads this replica's status (on its loop);
// nullopt means the loop did not answer.
// The peers are asked as peer_client() says (over TLS when the config has it on), with the
// asking client's `authorization` header when it sent one (auth on: the peers check it too).
nlohmann::json replica_statuses(const DaemonConfig& config,
                                const std::function<std::optional<nlohmann::json>()>& own_status,
                                const std::optional<std::string>& authorization = std::nullopt);

}  // namespace voltlock::api
