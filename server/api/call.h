// One API request as the replica's event loop serves it: the exchange it answers (or none, for
// a request the replica makes itself), its decoded target, the route's captures, and answer(),
// which counts the answer for /metrics and sends it once. Loop thread only, after the router
// made it on the I/O thread and handed it over.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "api/http_server.h"
#include "api/request_target.h"
#include "api/translate.h"

namespace voltlock::api {

// Requests counted by endpoint and status, for /metrics. Thread-safe.
class RequestCounters {
public:
    void count(const std::string& method, const std::string& endpoint, int status);
    std::map<std::tuple<std::string, std::string, int>, uint64_t> snapshot() const;

private:
    mutable std::mutex mutex_;
    std::map<std::tuple<std::string, std::string, int>, uint64_t> counts_;
};

HttpResponse json_response(int status, const Json& body);
HttpResponse error_response(const ApiError& error);  // 503s carry Retry-After

struct Call;
// 503 for a request that may still take effect (`why` it is not known). With the client's own
// X-Voltlock-Client-Id a retry of the same pair is safe; without, the replica chose the pair
// and the client cannot retry it, only read whether it happened.
ApiError outcome_unknown(const Call& call, const std::string& why);

struct Call {
    std::shared_ptr<Exchange> exchange;  // null: the replica's own request (a withdrawal)
    std::string method;
    std::string target;  // as sent, still percent-encoded: what forwarding passes on
    std::string body;
    Target parsed;
    std::string path_param;  // what the route's {placeholder} held, decoded (path_pattern.h)
    std::string endpoint;    // the route's name, for /metrics
    // Who sent it, with auth on (api/access.h): the user, and whether it may do anything (the
    // admin role, or a peer replica).
    std::string user;
    bool admin = false;
    // The replica that signed it with the cell's replication key (Access::recognise_peer), or
    // why a signature it carries was refused.
    std::optional<ReplicaIndex> signed_by_peer;
    std::string peer_signature_refusal;
    RequestCounters* counters = nullptr;
    bool finished = false;
    // Set on the answer (and a stream's head) made while they are here.
    std::vector<std::pair<std::string, std::string>> answer_headers;

    std::optional<std::string> header(std::string_view name) const;
    std::optional<std::string> param(std::string_view name) const { return parsed.get(name); }
    // Sends the answer, once; later answers are dropped.
    void answer(HttpResponse response);
    void answer_json(int status, const Json& json) { answer(json_response(status, json)); }
    void fail(const ApiError& error) { answer(error_response(error)); }
    // Answers with a stream; null if the call was answered already.
    std::shared_ptr<Stream> stream(HttpResponse head);
    // Answered, or its client left: nothing more to do for it.
    bool gone() const { return finished || (exchange && exchange->hung_up()); }
};
using CallPtr = std::shared_ptr<Call>;

// Query parameters, each parsed (absent: false, nullopt) or the 400 that names it.
Parsed<bool> bool_param(const Call& call, const char* name);
Parsed<std::optional<uint64_t>> u64_param(const Call& call, const char* name);

// What an endpoint returns: the call is answered, or will be (`answering`), or the error that
// the router answers it with. So an endpoint takes each parameter with VL_TRY.
struct Answering {};
inline constexpr Answering answering{};
using Served = Parsed<Answering>;

}  // namespace voltlock::api
