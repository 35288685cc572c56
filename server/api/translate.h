// JSON <-> lock-service ops and results, and the mapping of every failure to an HTTP status and a
// stable error code (docs/api.md, docs/lock-service.md "What the HTTP layer does"). Pure: no I/O,
// no clock, no replica; the HTTP layer (http_api.cpp) calls these and the unit tests pin them.
//
// Contracts shared by every parser here:
//   - a body must be a JSON object; a field the endpoint does not define is 400 `unknown_field`;
//   - integers must be JSON integers >= 0 (no strings, no fractions); out of range is 400
//     `invalid_argument` naming the field (validate() in core/lock_ops.h decides the ranges);
//   - a value is a UTF-8 string, or base64 with "encoding": "base64";
//   - an op that would not fit in one replication datagram is 413 `too_large`, naming the limit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/expected.h"
#include "core/lock_machine.h"
#include "core/lock_ops.h"

namespace voltlock::api {

using Json = nlohmann::json;

// A JSON object made field by field: object_of("revision", 7, "granted", true). On the answer
// path in place of Json{{"revision", 7}, {"granted", true}}, which builds a two-element array
// per field and then moves it apart: object_of takes half the time (docs/frontend.md).
inline void add_fields(Json&) {}
template <typename Value, typename... Rest>
void add_fields(Json& json, const char* name, Value&& value, Rest&&... rest)
{
    json.emplace(name, std::forward<Value>(value));
    add_fields(json, std::forward<Rest>(rest)...);
}
template <typename... Fields>
Json object_of(Fields&&... fields)
{
    Json json = Json::object();
    add_fields(json, std::forward<Fields>(fields)...);
    return json;
}

// What an HTTP client sees when something fails: {"code", "message", "details"} and a status.
struct ApiError {
    int status = 400;
    std::string code;     // stable: clients switch on it (docs/api.md lists them)
    std::string message;  // for a person: what is wrong and what to do
    Json details = Json::object();
};
Json error_body(const ApiError& error);
// The text of a JSON body as the server sends it. Bytes that are not UTF-8 (a client's own path
// or query parameter, percent-decoded and echoed in an error message) become U+FFFD: nlohmann's
// strict default throws on them, which on the HTTP I/O thread ended the daemon (docs/fuzzing.md).
std::string json_text(const Json& json);

// A value or the ApiError explaining why there is none.
template <typename T>
using Parsed = Expected<T, ApiError>;

// ---- Building blocks ---------------------------------------------------------------------------

std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);  // strict: padding required

// How values are written in responses: as UTF-8 text where they are (base64 otherwise), or always
// as base64 (?encoding=base64).
enum class ValueEncoding { automatic, base64 };
// Sets json["value"] and, when base64 is used, json["encoding"] = "base64".
void put_value(Json& json, const Bytes& value, ValueEncoding encoding);

// Query-string scalars: "true"/"false"/"1"/"0" and decimal integers. Errors name the parameter.
Parsed<bool> parse_bool_param(std::string_view name, std::string_view text);
Parsed<uint64_t> parse_u64_param(std::string_view name, std::string_view text);
Parsed<ValueEncoding> parse_encoding_param(std::string_view text);
// A watch's Last-Event-ID (the last revision its client received) -> the revision to resume
// from, its successor. The largest integer has none: an error, not a resume from the start.
Parsed<uint64_t> parse_last_event_id(std::string_view text);
// "12" -> 12; anything else (0, signs, spaces, overflow) -> error naming the session path.
Parsed<SessionId> parse_session_id(std::string_view text);

// Parses a request body as a JSON object whose fields are all in `allowed`. An empty body is the
// empty object.
Parsed<Json> parse_object(std::string_view body, std::initializer_list<std::string_view> allowed);

// Client-supplied idempotency: both headers or neither; the id and number are integers >= 1.
struct ClientIdentity {
    uint64_t client_id = 0;
    uint64_t request_number = 0;
};
Parsed<std::optional<ClientIdentity>> parse_identity(const std::optional<std::string>& client_id,
                                                     const std::optional<std::string>& number);

Parsed<Sequencer> parse_sequencer(const Json& json, std::string_view field = "sequencer");
Json sequencer_json(const Sequencer& sequencer);
Parsed<LockMode> parse_mode(const Json& json);

// ---- Requests -> ops ---------------------------------------------------------------------------
// Each checks the JSON shape, then validate() (400) and the datagram budget (413), so that a
// returned op can be proposed as it is. `max_message_bytes` is the cell's.

Parsed<LockOp> create_session_op(std::string_view body, uint32_t max_message_bytes);
Parsed<LockOp> acquire_op(const std::string& lock, std::string_view body,
                          uint32_t max_message_bytes);
Parsed<LockOp> release_op(const std::string& lock, std::string_view body,
                          uint32_t max_message_bytes);
Parsed<LockOp> check_sequencer_op(std::string_view body, uint32_t max_message_bytes);
Parsed<LockOp> put_op(const std::string& key, std::string_view body, uint32_t max_message_bytes);
// DELETE /v1/kv/{key}?prefix&prev_revision, with an optional body {"sequencer"}.
Parsed<LockOp> delete_op(const std::string& key, bool prefix, std::optional<uint64_t> prev_revision,
                         std::string_view body, uint32_t max_message_bytes);
// GET /v1/kv/{key}?prefix&after&limit: max_result_bytes is set to the reply budget.
Parsed<LockOp> get_op(const std::string& key, bool prefix, const std::string& after,
                      uint32_t limit, uint32_t max_message_bytes);
Parsed<LockOp> barrier_enter_op(const std::string& barrier, std::string_view body,
                                uint32_t max_message_bytes);
Parsed<LockOp> barrier_leave_op(const std::string& barrier, std::string_view body,
                                uint32_t max_message_bytes);

// validate() and the size checks alone (the parsers above call it).
std::optional<ApiError> check_op(const LockOp& op, uint32_t max_message_bytes);
// The name rules for a path segment (a watch key may be "" with prefix).
std::optional<ApiError> check_name(std::string_view field, std::string_view name,
                                   bool empty_allowed);

// ---- Results -> responses ----------------------------------------------------------------------

// The HTTP mapping of a machine error (docs/api.md "Errors").
ApiError op_error(const OpError& error);
// A successful result as its JSON body. Acquire/Barrier results that say "waiting" are not
// answers: the HTTP layer waits for the outcome (below) instead of sending these.
Json result_json(const OpResult& result, ValueEncoding encoding);
Json key_value_json(const KeyValue& kv, ValueEncoding encoding);
Json event_json(const WatchEvent& event, ValueEncoding encoding);

// ---- Waits -------------------------------------------------------------------------------------

enum class WaitKind { lock, barrier_enter, barrier_leave };
// What an event means for a request that waits as `session` on `name`: nullopt if it is not an
// outcome (another session, or a renewed wait); else the response: 200 with its body, or the
// error (408 timed out, 404 session ended, 409 withdrawn).
std::optional<std::variant<Json, ApiError>> wait_outcome(WaitKind kind, SessionId session,
                                                         const WatchEvent& event);
ApiError wait_unknown(WaitKind kind);  // no outcome seen in time: 503, retry the same request

// ---- Service-level errors ----------------------------------------------------------------------

ApiError unavailable(std::string message);  // 503; the caller adds Retry-After
// 409: `identity`'s request number is below the latest its client id used.
ApiError stale_request_error(const ClientIdentity& identity, RequestNumber latest);
// 409: `identity`'s request number was used before for another request.
ApiError reused_request_error(const ClientIdentity& identity);
ApiError compacted(Revision oldest_revision, Revision requested);
ApiError not_found_route(std::string_view method, std::string_view path);

}  // namespace voltlock::api
