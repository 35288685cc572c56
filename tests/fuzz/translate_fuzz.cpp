// The translators from an HTTP request to a lock-service op (server/api/translate.cpp), behind
// the request-target parser, as the router drives them: the method and route pick the
// translator, the decoded path gives the name, the query its options, two headers the client's
// identity, and the body the JSON. Input: one byte picking the endpoint, then the target, the
// X-Voltlock-Client-Id and X-Voltlock-HttpInput-Number headers and the body, separated by '\n'
// (a missing header is absent). Properties: no crash; a refusal is a 4xx (400, 413) whose body
// serializes as the server sends it; an accepted op validates, fits the cell's entry budget,
// and survives encode_op/decode_op unchanged (what the leader proposes is what replicas apply).
#include <array>
#include <optional>
#include <string>

#include "api/request_target.h"
#include "api/translate.h"
#include "core/message.h"
#include "fuzz_check.h"

using namespace voltlock;
using namespace voltlock::api;

namespace {

constexpr uint32_t kMaxMessageBytes = 1472;  // the default datagram size (docs/replication.md)

struct HttpInput {
    uint8_t endpoint = 0;
    std::string_view target;
    std::optional<std::string> client_id;
    std::optional<std::string> request_number;
    std::string_view body;
};

// The next '\n'-terminated part of `rest`, or nullopt if there is none left.
std::optional<std::string_view> next_part(std::string_view& rest)
{
    if (rest.empty()) return std::nullopt;
    const size_t newline = rest.find('\n');
    const std::string_view part = rest.substr(0, newline);
    rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    return part;
}

HttpInput split(std::string_view input)
{
    HttpInput request;
    request.endpoint = static_cast<uint8_t>(input[0]);
    std::string_view rest = input.substr(1);
    request.target = next_part(rest).value_or("");
    if (auto id = next_part(rest); id && !id->empty()) request.client_id = std::string(*id);
    if (auto n = next_part(rest); n && !n->empty()) request.request_number = std::string(*n);
    request.body = rest;
    return request;
}

void require_refusal(const ApiError& error)
{
    FUZZ_REQUIRE(error.status == 400 || error.status == 413);
    FUZZ_REQUIRE(!error.code.empty());
    FUZZ_REQUIRE(!json_text(error_body(error)).empty());
}

template <typename T>
std::optional<T> accepted(Parsed<T> parsed)
{
    if (parsed.ok()) return std::move(parsed).value();
    require_refusal(parsed.error());
    return std::nullopt;
}

void require_proposable(const Parsed<LockOp>& parsed)
{
    if (!parsed.ok()) return require_refusal(parsed.error());
    const LockOp& op = parsed.value();
    FUZZ_REQUIRE(!validate(op));
    const Bytes payload = encode_op(op);
    FUZZ_REQUIRE(payload.size() <= max_entry_payload_bytes(kMaxMessageBytes));
    auto decoded = decode_op(payload);
    FUZZ_REQUIRE(decoded.ok() && decoded.value() == op);
}

Parsed<LockOp> translate(const HttpInput& request, const Target& target)
{
    const std::string& name = target.path;
    const bool prefix = target.has("prefix") &&
                        accepted(parse_bool_param("prefix", *target.get("prefix"))).value_or(false);
    switch (request.endpoint % 9) {
    case 0: return create_session_op(request.body, kMaxMessageBytes);
    case 1: return acquire_op(name, request.body, kMaxMessageBytes);
    case 2: return release_op(name, request.body, kMaxMessageBytes);
    case 3: return check_sequencer_op(request.body, kMaxMessageBytes);
    case 4: return put_op(name, request.body, kMaxMessageBytes);
    case 5: {
        std::optional<uint64_t> prev_revision;
        if (auto text = target.get("prev_revision"))
            prev_revision = accepted(parse_u64_param("prev_revision", *text));
        return delete_op(name, prefix, prev_revision, request.body, kMaxMessageBytes);
    }
    case 6: {
        const uint64_t limit =
            accepted(parse_u64_param("limit", target.get("limit").value_or("0"))).value_or(0);
        return get_op(name, prefix, target.get("after").value_or(""),
                      static_cast<uint32_t>(limit), kMaxMessageBytes);
    }
    case 7: return barrier_enter_op(name, request.body, kMaxMessageBytes);
    default: return barrier_leave_op(name, request.body, kMaxMessageBytes);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size < 1) return 0;
    const HttpInput request = split(fuzz::as_text(data, size));
    if (auto identity = parse_identity(request.client_id, request.request_number); identity.ok()) {
        if (identity.value()) FUZZ_REQUIRE(identity.value()->client_id >= 1);
    } else {
        require_refusal(identity.error());
    }
    auto target = accepted(parse_target(request.target));
    if (!target) return 0;
    if (auto encoding = target->get("encoding")) accepted(parse_encoding_param(*encoding));
    if (auto session = target->get("session")) accepted(parse_session_id(*session));
    require_proposable(translate(request, *target));
    return 0;
}
