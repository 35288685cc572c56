// The HTTP layer's pure half (server/api/translate.h): JSON -> ops, results -> JSON, and every
// failure -> HTTP status and stable code (docs/api.md "Errors").
#include <doctest/doctest.h>

#include <string>

#include "api/translate.h"
#include "core/message.h"

namespace voltlock::api {
namespace {

constexpr uint32_t kMessageBytes = VL_DEFAULT_MESSAGE_BYTES;

template <typename T>
T op_of(const Parsed<LockOp>& parsed)
{
    REQUIRE(parsed.ok());
    REQUIRE(std::holds_alternative<T>(parsed.value()));
    return std::get<T>(parsed.value());
}

ApiError error_of(const Parsed<LockOp>& parsed)
{
    REQUIRE_FALSE(parsed.ok());
    return parsed.error();
}

TEST_CASE("base64 round-trips every length and rejects what is not canonical")
{
    std::string bytes;
    for (int n = 0; n < 40; n++) {
        const std::string encoded = base64_encode(bytes);
        CHECK(encoded.size() % 4 == 0);
        CHECK(base64_decode(encoded) == bytes);
        bytes += static_cast<char>(n * 37 + 200);
    }
    CHECK(base64_encode("hello") == "aGVsbG8=");
    CHECK(base64_decode("aGVsbG8=") == std::string("hello"));
    CHECK_FALSE(base64_decode("aGVsbG8"));   // no padding
    CHECK_FALSE(base64_decode("aGVsbG9="));  // bits under the padding
    CHECK_FALSE(base64_decode("aGV*bG8="));  // not the alphabet
    CHECK_FALSE(base64_decode("a=Vs"));      // padding in the middle
}

TEST_CASE("a body must be a JSON object of known fields")
{
    CHECK(error_of(create_session_op("{", kMessageBytes)).code == "bad_json");
    CHECK(error_of(create_session_op("[1]", kMessageBytes)).code == "bad_json");
    const ApiError unknown =
        error_of(create_session_op(R"({"ttl_ms":5000,"tll":1})", kMessageBytes));
    CHECK(unknown.status == 400);
    CHECK(unknown.code == "unknown_field");
    CHECK(unknown.details["field"] == "tll");
    const ApiError missing = error_of(create_session_op("", kMessageBytes));
    CHECK(missing.code == "invalid_argument");
    CHECK(missing.details["field"] == "ttl_ms");
}

TEST_CASE("integers are non-negative JSON integers; ranges come from validate()")
{
    CHECK(error_of(create_session_op(R"({"ttl_ms":"5000"})", kMessageBytes)).details["field"] ==
          "ttl_ms");
    CHECK(error_of(create_session_op(R"({"ttl_ms":-1})", kMessageBytes)).code ==
          "invalid_argument");
    CHECK(error_of(create_session_op(R"({"ttl_ms":1.5})", kMessageBytes)).code ==
          "invalid_argument");
    const ApiError range = error_of(create_session_op(R"({"ttl_ms":999})", kMessageBytes));
    CHECK(range.details["violation"] == "ttl_out_of_range");
    // Too large for a double: valid JSON, so out of range like any other number, not bad_json.
    for (const char* body : {R"({"ttl_ms":1e400})", R"({"ttl_ms":-1e400})",
                             R"({"name":"1e400","ttl_ms":1e400})"}) {
        const ApiError overflow = error_of(create_session_op(body, kMessageBytes));
        CHECK(overflow.code == "invalid_argument");
        CHECK(overflow.details["field"] == "ttl_ms");
    }
    CHECK(error_of(put_op("k", R"({"value":"x","prev_revision":1e400})", kMessageBytes))
              .details["field"] == "prev_revision");
    CHECK(error_of(create_session_op(R"({"ttl_ms":1e400)", kMessageBytes)).code == "bad_json");
    // Larger than 32 bits: still a range error, not a wrapped value.
    const ApiError huge = error_of(create_session_op(R"({"ttl_ms":4294967297000})", kMessageBytes));
    CHECK(huge.details["violation"] == "ttl_out_of_range");
    const auto create = op_of<CreateSession>(
        create_session_op(R"({"ttl_ms":5000,"lock_delay_ms":100,"name":"web"})", kMessageBytes));
    CHECK(create == CreateSession{.ttl_ms = 5000, .lock_delay_ms = 100, .name = "web"});
}

TEST_CASE("acquire: mode defaults to exclusive, wait to 0; names are checked")
{
    CHECK(op_of<Acquire>(acquire_op("db/primary", R"({"session":7})", kMessageBytes)) ==
          Acquire{.lock = "db/primary", .session = 7, .mode = LockMode::exclusive, .wait_ms = 0});
    CHECK(op_of<Acquire>(acquire_op("l", R"({"session":7,"mode":"shared","wait_ms":10})",
                                    kMessageBytes))
              .mode == LockMode::shared);
    CHECK(error_of(acquire_op("l", R"({"session":7,"mode":"both"})", kMessageBytes))
              .details["field"] == "mode");
    CHECK(error_of(acquire_op("l", R"({"session":0})", kMessageBytes)).details["field"] ==
          "session");
    CHECK(error_of(acquire_op("l", R"({"session":1,"wait_ms":3600001})", kMessageBytes))
              .details["violation"] == "wait_out_of_range");
    CHECK(error_of(acquire_op(std::string("a\x01", 2), R"({"session":1})", kMessageBytes))
              .details["violation"] == "name_control_character");
    CHECK(error_of(acquire_op(std::string(513, 'x'), R"({"session":1})", kMessageBytes))
              .details["violation"] == "name_too_long");
}

TEST_CASE("put: UTF-8 or base64 values; CAS, ephemeral and fenced writes")
{
    const Put text = op_of<Put>(put_op("k", R"({"value":"héllo"})", kMessageBytes));
    CHECK(text.value == "héllo");
    CHECK_FALSE(text.prev_revision);
    const Put binary = op_of<Put>(put_op("k", R"({"value":"AAH/","encoding":"base64"})",
                                         kMessageBytes));
    CHECK(binary.value == std::string("\x00\x01\xff", 3));
    CHECK(error_of(put_op("k", R"({"value":"AAH","encoding":"base64"})", kMessageBytes))
              .details["field"] == "value");
    CHECK(error_of(put_op("k", R"({"value":"x","encoding":"hex"})", kMessageBytes))
              .details["field"] == "encoding");
    const Put full = op_of<Put>(put_op(
        "k",
        R"({"value":"v","prev_revision":0,"session":3,)"
        R"("sequencer":{"lock":"l","mode":"exclusive","generation":4,"session":3}})",
        kMessageBytes));
    CHECK(full.prev_revision == 0u);
    CHECK(full.session == 3);
    CHECK(full.sequencer == Sequencer{.lock = "l", .mode = LockMode::exclusive,
                                      .generation = 4, .session = 3});
    CHECK(error_of(put_op("k", R"({"value":"v","sequencer":{"lock":"l","generation":1,)"
                               R"("session":1,"extra":1}})",
                          kMessageBytes))
              .code == "unknown_field");
}

TEST_CASE("413 names the limit: the value that fits with this key in one datagram")
{
    const size_t op_budget = max_entry_payload_bytes(kMessageBytes);
    const size_t result_budget = max_reply_result_bytes(kMessageBytes);
    const size_t limit = *max_value_bytes(Put{.key = "k"}, op_budget, result_budget);
    CHECK(limit == 1348);  // docs/lock-service.md, "Limits"
    const std::string fits = R"({"value":")" + std::string(limit, 'x') + R"("})";
    CHECK(put_op("k", fits, kMessageBytes).ok());
    const std::string over = R"({"value":")" + std::string(limit + 1, 'x') + R"("})";
    const ApiError error = error_of(put_op("k", over, kMessageBytes));
    CHECK(error.status == 413);
    CHECK(error.code == "too_large");
    CHECK(error.details["limit_bytes"] == limit);
    CHECK(error.details["size_bytes"] == limit + 1);
    CHECK(error.message == "value is 1,349 bytes; at most 1,348 fit with a 1-byte key (one "
                           "1,472-byte datagram)");
    // Beyond the codec's u16 too: still 413, not 400.
    const std::string huge = R"({"value":")" + std::string(70'000, 'x') + R"("})";
    CHECK(error_of(put_op("k", huge, kMessageBytes)).status == 413);
}

TEST_CASE("delete and get: prefix rules")
{
    CHECK(op_of<Delete>(delete_op("a/", true, std::nullopt, "", kMessageBytes)).prefix);
    CHECK(error_of(delete_op("a/", true, 3, "", kMessageBytes)).details["violation"] ==
          "prev_revision_with_prefix");
    const Get get = op_of<Get>(get_op("", true, "", 0, kMessageBytes));
    CHECK(get.max_result_bytes == max_reply_result_bytes(kMessageBytes));
    CHECK(error_of(get_op("", false, "", 0, kMessageBytes)).details["violation"] == "name_empty");
}

TEST_CASE("barriers: count required and in range")
{
    CHECK(op_of<BarrierEnter>(barrier_enter_op("b", R"({"session":1,"count":3,"wait_ms":5})",
                                               kMessageBytes))
              .count == 3);
    CHECK(error_of(barrier_enter_op("b", R"({"session":1})", kMessageBytes)).details["field"] ==
          "count");
    CHECK(error_of(barrier_enter_op("b", R"({"session":1,"count":1025})", kMessageBytes))
              .details["violation"] == "count_out_of_range");
    CHECK(error_of(barrier_leave_op("b", R"({"session":1,"count":2})", kMessageBytes)).code ==
          "unknown_field");
}

TEST_CASE("identity headers go together and are positive integers")
{
    CHECK_FALSE(parse_identity(std::nullopt, std::nullopt).value().has_value());
    const auto both = parse_identity(std::string("42"), std::string("7"));
    REQUIRE(both.ok());
    CHECK(both.value()->client_id == 42);
    CHECK(both.value()->request_number == 7);
    CHECK_FALSE(parse_identity(std::string("42"), std::nullopt).ok());
    CHECK_FALSE(parse_identity(std::string("0"), std::string("1")).ok());
    CHECK_FALSE(parse_identity(std::string("x"), std::string("1")).ok());
}

TEST_CASE("query parameters and path ids")
{
    CHECK(parse_bool_param("prefix", "true").value());
    CHECK_FALSE(parse_bool_param("prefix", "0").value());
    CHECK(parse_bool_param("prefix", "yes").error().details["field"] == "prefix");
    CHECK(parse_u64_param("limit", "12").value() == 12);
    CHECK_FALSE(parse_u64_param("limit", "-1").ok());
    CHECK_FALSE(parse_u64_param("limit", "1x").ok());
    CHECK(parse_last_event_id("41").value() == 42);
    CHECK(parse_last_event_id("18446744073709551614").value() == 18446744073709551615ull);
    // Its successor would wrap to 0, a watch of the whole history.
    CHECK(parse_last_event_id("18446744073709551615").error().details["field"] ==
          "Last-Event-ID");
    CHECK_FALSE(parse_last_event_id("-1").ok());
    CHECK(parse_session_id("9").value() == 9);
    CHECK_FALSE(parse_session_id("0").ok());
    CHECK_FALSE(parse_session_id("abc").ok());
}

TEST_CASE("machine errors map to the documented statuses and codes")
{
    auto mapped = [](OpCode op, ErrorCode code, uint64_t detail = 0) {
        return op_error(OpError{.op = op, .code = code, .revision = 10, .detail = detail});
    };
    CHECK(mapped(OpCode::acquire, ErrorCode::unknown_session).status == 404);
    const ApiError cas = mapped(OpCode::put, ErrorCode::cas_mismatch, 8);
    CHECK(cas.status == 409);
    CHECK(cas.code == "cas_mismatch");
    CHECK(cas.details["mod_revision"] == 8);
    CHECK(cas.details["revision"] == 10);
    CHECK(mapped(OpCode::put, ErrorCode::sequencer_invalid, 5).details["generation"] == 5);
    CHECK(mapped(OpCode::acquire, ErrorCode::busy).code == "lock_busy");
    CHECK(mapped(OpCode::acquire, ErrorCode::busy, 1234).details["delay_until_ms"] == 1234);
    CHECK(mapped(OpCode::barrier_enter, ErrorCode::busy).code == "barrier_not_ready");
    CHECK(mapped(OpCode::release, ErrorCode::not_held).status == 409);
    CHECK(mapped(OpCode::acquire, ErrorCode::mode_conflict).status == 409);
    CHECK(mapped(OpCode::barrier_enter, ErrorCode::count_mismatch, 3).details["count"] == 3);
    CHECK(mapped(OpCode::barrier_enter, ErrorCode::barrier_in_use).status == 409);
    CHECK(mapped(OpCode::barrier_leave, ErrorCode::not_member).status == 409);
    CHECK(mapped(OpCode::get, ErrorCode::too_large, 2000).status == 413);
    CHECK(mapped(OpCode::put, ErrorCode::invalid_argument).status == 400);
    const Json body = error_body(unavailable("x"));
    CHECK(body["code"] == "unavailable");
    CHECK(body["details"].is_object());
    CHECK(compacted(5, 2).status == 410);
    CHECK(compacted(5, 2).details["oldest_revision"] == 5);
}

TEST_CASE("an error echoing bytes that are not UTF-8 still serializes (fuzz_request_target)")
{
    // GET /v1/nope%FF: the decoded path is in the 404's message; a strict dump() threw and ended
    // the daemon's I/O thread (docs/fuzzing.md).
    const std::string text = json_text(error_body(not_found_route("GET", "/v1/nope\xFF")));
    const Json body = Json::parse(text);
    CHECK(body["code"] == "not_found");
    CHECK(body["message"] == "no endpoint GET /v1/nope\xEF\xBF\xBD (see /v1/openapi.json)");
}

TEST_CASE("results as JSON; binary values as base64")
{
    const Json granted = result_json(
        AcquireResult{.revision = 4, .status = AcquireStatus::granted,
                      .sequencer = {.lock = "l", .mode = LockMode::shared, .generation = 2,
                                    .session = 1}},
        ValueEncoding::automatic);
    CHECK(granted["granted"] == true);
    CHECK(granted["sequencer"]["mode"] == "shared");
    const KeyValue text{.key = "k", .value = "v", .create_revision = 1, .mod_revision = 2,
                        .version = 2};
    CHECK(key_value_json(text, ValueEncoding::automatic)["value"] == "v");
    CHECK_FALSE(key_value_json(text, ValueEncoding::automatic).contains("encoding"));
    CHECK(key_value_json(text, ValueEncoding::base64)["value"] == "dg==");
    const KeyValue binary{.key = "k", .value = std::string("\xff\xfe", 2)};
    const Json json = key_value_json(binary, ValueEncoding::automatic);
    CHECK(json["encoding"] == "base64");
    CHECK(json["value"] == "//4=");
    CHECK_NOTHROW((void)json.dump());  // never invalid UTF-8 in a response
}

TEST_CASE("wait outcomes: only this session's grant, timeout or cancel ends a wait")
{
    const WatchEvent grant{.revision = 9, .type = EventType::lock_grant, .key = "l", .session = 2,
                           .mode = LockMode::exclusive, .generation = 5};
    CHECK_FALSE(wait_outcome(WaitKind::lock, 3, grant));  // someone else's
    const auto mine = wait_outcome(WaitKind::lock, 2, grant);
    REQUIRE(mine);
    const Json body = std::get<Json>(*mine);
    CHECK(body["sequencer"]["generation"] == 5);
    CHECK(body["revision"] == 9);
    WatchEvent renewed = grant;
    renewed.type = EventType::lock_wait;
    CHECK_FALSE(wait_outcome(WaitKind::lock, 2, renewed));
    WatchEvent timeout = grant;
    timeout.type = EventType::lock_timeout;
    CHECK(std::get<ApiError>(*wait_outcome(WaitKind::lock, 2, timeout)).status == 408);
    WatchEvent expired = grant;
    expired.type = EventType::lock_cancel;
    expired.cause = Cause::session_expired;
    CHECK(std::get<ApiError>(*wait_outcome(WaitKind::lock, 2, expired)).status == 404);
    expired.cause = Cause::request;
    CHECK(std::get<ApiError>(*wait_outcome(WaitKind::lock, 2, expired)).code == "wait_withdrawn");
    const WatchEvent released{.revision = 4, .type = EventType::barrier_release, .key = "b",
                              .session = 2};
    CHECK(std::get<Json>(*wait_outcome(WaitKind::barrier_enter, 2, released))["passed"] == true);
    CHECK_FALSE(wait_outcome(WaitKind::barrier_leave, 2, released));
}

}  // namespace
}  // namespace voltlock::api
