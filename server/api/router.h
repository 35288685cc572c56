// Routing and translation: which endpoint a request is, on the I/O thread. The target is
// decoded strictly and its query parameters checked against the endpoint's (request_target.h);
// a few endpoints are answered right there (/healthz, /readyz, the OpenAPI document, every
// 400/404 about the target), so they answer within milliseconds whatever the replica's loop is
// doing. Everything else becomes a Call, and the calls that arrived in one pass of the I/O
// thread go to the replica's event loop together: one wake-up per batch. When HTTP runs on the
// loop's own thread, a call runs as soon as it is routed.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/access.h"
#include "api/call.h"
#include "api/http_server.h"
#include "api/path_pattern.h"
#include "shell/event_loop.h"

namespace voltlock::api {

class Router {
public:
    using Handler = std::function<Served(const CallPtr&)>;
    enum class Where { io_thread, loop };

    // Every routed request passes `access` (401/403 answered here, on the I/O thread).
    Router(EventLoop& loop, RequestCounters& counters, const Access& access)
        : loop_(loop), counters_(counters), access_(access) {}

    // `pattern` (path_pattern.h) is matched against the decoded path; its placeholder is the
    // call's path_param. `params`: the query parameters the endpoint takes. Routes are tried in
    // order.
    void add(const char* method, const char* pattern, std::string endpoint,
             std::vector<std::string> params, Where where, Handler handler);

    // I/O thread.
    void on_request(const std::shared_ptr<Exchange>& exchange);
    void flush();
    // Answered even on a connection over the limits (http_server.h).
    static bool exempt(std::string_view target);

private:
    struct Route {
        std::string method;
        PathPattern pattern;
        std::string endpoint;
        std::vector<std::string> params;
        Where where;
        Handler handler;
    };

    using Batch = std::vector<std::pair<const Route*, CallPtr>>;
    static void run_batch(const Batch& batch);  // on the loop
    // Runs the route's handler and answers the error it returns, if any.
    static void serve(const Route& route, const CallPtr& call);
    // serve(), on the loop: a handler that throws is answered 500 and logged.
    static void serve_on_loop(const Route& route, const CallPtr& call);

    EventLoop& loop_;
    RequestCounters& counters_;
    const Access& access_;
    std::vector<Route> routes_;
    Batch batch_;  // I/O thread
};

}  // namespace voltlock::api
