#include "api/router.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace voltlock::api {

void Router::add(const char* method, const char* pattern, std::string endpoint,
                 std::vector<std::string> params, Where where, Handler handler)
{
    routes_.push_back(Route{method, PathPattern(pattern), std::move(endpoint), std::move(params),
                            where, std::move(handler)});
}

bool Router::exempt(std::string_view target)
{
    const std::string_view path = target.substr(0, target.find('?'));
    return path == "/healthz" || path == "/readyz";
}

void Router::on_request(const std::shared_ptr<Exchange>& exchange)
{
    auto call = std::make_shared<Call>();
    call->exchange = exchange;
    call->method = exchange->method;
    call->target = exchange->target;
    call->body = exchange->body;
    call->counters = &counters_;
    auto target = parse_target(exchange->target);
    if (!target.ok()) {
        call->endpoint = "bad_target";
        return call->fail(target.error());
    }
    call->parsed = std::move(target.value());
    // HEAD is GET without the body (libmicrohttpd leaves the body out).
    const std::string method = call->method == "HEAD" ? "GET" : call->method;
    for (const Route& route : routes_) {
        if (route.method != method) continue;
        const auto held = route.pattern.match(call->parsed.path);
        if (!held) continue;
        call->path_param = *held;
        call->endpoint = route.endpoint;
        if (auto unknown = check_query(call->parsed, route.params)) return call->fail(*unknown);
        if (auto internal = access_.recognise_peer(*call)) return call->fail(*internal);
        if (auto refused = access_.check(*call)) return call->fail(*refused);
        if (route.where == Where::io_thread) return serve(route, call);
        // HTTP on the loop's own thread (http_io_threads 0): the call runs now, inside the HTTP
        // pass, so an answer it has at once (a stale read, a refusal) is sent without the
        // request being held (suspended and resumed: about 3 µs, docs/frontend.md). Proposals
        // still leave together: the node flushes them at the end of the loop's turn.
        if (loop_.on_loop_thread()) return serve_on_loop(route, call);
        batch_.emplace_back(&route, std::move(call));
        return;
    }
    call->endpoint = "unknown";
    call->fail(not_found_route(call->method, call->parsed.path));
}

void Router::flush()
{
    if (batch_.empty()) return;
    loop_.post([batch = std::move(batch_)] { run_batch(batch); });
    batch_.clear();
}

void Router::run_batch(const Batch& batch)
{
    for (const auto& [route, call] : batch)
        if (!call->gone()) serve_on_loop(*route, call);
}

void Router::serve_on_loop(const Route& route, const CallPtr& call)
{
    try {
        serve(route, call);
    } catch (const std::exception& e) {
        spdlog::error("http {} {}: {}", call->method, call->target, e.what());
        call->fail(ApiError{500, "internal", std::string("internal error: ") + e.what(),
                            Json::object()});
    }
}

void Router::serve(const Route& route, const CallPtr& call)
{
    const Served served = route.handler(call);
    if (!served.ok()) call->fail(served.error());
}

}  // namespace voltlock::api
