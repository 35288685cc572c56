// /metrics in the Prometheus text exposition format (version 0.0.4), rendered from the same JSON
// that /v1/cluster serves, so the two never disagree. Pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

namespace voltlock::api {

// `cluster` is HttpApi's /v1/cluster body; `requests` counts (method, endpoint, status).
std::string render_metrics(const nlohmann::json& cluster,
                           const std::map<std::tuple<std::string, std::string, int>, uint64_t>&
                               requests);

}  // namespace voltlock::api
