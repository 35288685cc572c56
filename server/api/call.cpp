#include "api/call.h"

#include <spdlog/spdlog.h>

namespace voltlock::api {

namespace {

// The method as a metrics label: any client can send any token as a method, and each distinct
// label is a series kept for ever, so the ones HTTP defines are kept and the rest are "other".
std::string_view method_label(std::string_view method)
{
    static constexpr std::string_view kKnown[] = {"GET",     "HEAD",    "POST",  "PUT",
                                                  "DELETE",  "OPTIONS", "PATCH", "TRACE",
                                                  "CONNECT"};
    for (const std::string_view known : kKnown)
        if (method == known) return known;
    return "other";
}

}  // namespace

void RequestCounters::count(const std::string& method, const std::string& endpoint, int status)
{
    std::lock_guard lock(mutex_);
    counts_[{std::string(method_label(method)), endpoint, status}] += 1;
}

std::map<std::tuple<std::string, std::string, int>, uint64_t> RequestCounters::snapshot() const
{
    std::lock_guard lock(mutex_);
    return counts_;
}

HttpResponse json_response(int status, const Json& body)
{
    HttpResponse response;
    response.status = status;
    response.body = json_text(body);
    return response;
}

HttpResponse error_response(const ApiError& error)
{
    HttpResponse response = json_response(error.status, error_body(error));
    if (error.status == 503) response.set_header("Retry-After", "1");
    if (error.status == 401) response.set_header("WWW-Authenticate", "Bearer realm=\"voltlock\"");
    return response;
}

ApiError outcome_unknown(const Call& call, const std::string& why)
{
    if (call.header("X-Voltlock-Client-Id"))
        return unavailable(why + ". It may still take effect: retry it with the same "
                                 "X-Voltlock-Client-Id and X-Voltlock-Request-Number");
    return unavailable(why + ". It may still take effect: read whether it did before trying "
                             "again, or send X-Voltlock-Client-Id and X-Voltlock-Request-Number "
                             "with writes, which makes a retry safe (docs/api.md)");
}

std::optional<std::string> Call::header(std::string_view name) const
{
    if (!exchange) return std::nullopt;
    return exchange->header(name);
}

void Call::answer(HttpResponse response)
{
    if (finished) return;
    finished = true;
    for (const auto& [name, value] : answer_headers) response.set_header(name, value);
    if (counters) counters->count(method, endpoint, response.status);
    if (exchange) {
        exchange->answer(std::move(response));
    } else if (response.status >= 300) {
        spdlog::warn("own request {} {}: {} {}", method, target, response.status, response.body);
    }
}

std::shared_ptr<Stream> Call::stream(HttpResponse head)
{
    if (finished || !exchange) return nullptr;
    finished = true;
    for (const auto& [name, value] : answer_headers) head.set_header(name, value);
    if (counters) counters->count(method, endpoint, head.status);
    return exchange->stream(std::move(head));
}

Parsed<bool> bool_param(const Call& call, const char* name)
{
    const auto text = call.param(name);
    if (!text) return false;
    return parse_bool_param(name, *text);
}

Parsed<std::optional<uint64_t>> u64_param(const Call& call, const char* name)
{
    const auto text = call.param(name);
    if (!text) return std::optional<uint64_t>{};
    return std::optional<uint64_t>{VL_TRY(parse_u64_param(name, *text))};
}

}  // namespace voltlock::api
