// The protocol codec of libvoltlock: request paths and bodies out, answers in, with no I/O
// (hiredis's split). Everything here is pure and unit-tested against recorded answers
// (tests/clib/codec_test.cpp); the transport (transport.h) only moves bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "voltlock.h"

namespace voltlock::client {

using Json = nlohmann::json;

// The server's error code (docs/api.md) as a status; VL_ERR_SERVER_OTHER for a code this
// library does not know.
vl_status status_from_code(std::string_view code);
const char* status_name(vl_status status);

// Whether a status means "the cell could not answer now; the same request may be sent again"
// (503s and transport failures).
bool is_retryable(vl_status status);

// An HTTP answer as the transport saw it.
struct Answer {
    int http_status = 0;
    std::string body;
    std::optional<int> leader_hint;  // X-Voltlock-Leader, or an error's details.leader
};

// A decoded error answer: its status and one line of text, "<code>: <message>".
struct Failure {
    vl_status status = VL_OK;
    std::string text;
};

// VL_OK with the body parsed for a 2xx answer; otherwise the error it carries. A 2xx whose body
// is not a JSON object is VL_ERR_PROTOCOL.
Failure decode_answer(const Answer& answer, Json* body);

// Percent-encodes a key or name for a path: everything but unreserved characters and '/'.
std::string encode_path_segment(std::string_view name);
// Percent-encodes a query value (also '/').
std::string encode_query_value(std::string_view value);

std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);

// The value of a kv or event object: "value", base64-decoded if "encoding" says so.
std::optional<std::string> decode_value(const Json& object);

// Validation of what the API accepts, done before sending so a bad argument changes nothing
// and costs no round trip.
// A key or a lock or barrier name as the cell takes it: 1..512 bytes of UTF-8 (no overlong
// form, surrogate or code point past U+10FFFF), no control characters.
bool valid_name(std::string_view name);
bool valid_name(const char* name);  // NULL: false

// User and role names as the admin endpoints take them: valid_name's rules, at most 64 bytes,
// and no '/' (the name is a segment of the path).
bool valid_auth_name(const char* name);
inline constexpr const char* kAuthNameRule =
    "user and role names are 1 to 64 bytes of text without '/'";
// A token id as GET /v1/auth/tokens lists it: 16 lowercase hex digits.
bool valid_token_id(const char* id);

// The bodies of PUT /v1/auth/roles/{role} and PUT /v1/auth/users/{user}, checked as the cell
// checks them; nullopt and the reason in *why if the cell would refuse them.
std::optional<Json> role_body(const vl_grant* grants, size_t count, std::string* why);
std::optional<Json> user_body(const char* const* roles, size_t count, std::string* why);

// Builders of C results (malloc'd; freed by the matching vl_*_free). nullptr: out of memory.
// Throw nlohmann::json exceptions on a body of the wrong shape (the caller maps them to
// VL_ERR_PROTOCOL).
vl_kv* kv_from_json(const Json& object);
vl_kv_list* kv_list_from_json(const Json& body);
vl_sequencer* sequencer_from_json(const Json& object);
vl_event* event_from_json(const std::string& data);
Json sequencer_to_json(const vl_sequencer& seq);
vl_role* role_from_json(const Json& object);
vl_role_list* role_list_from_json(const Json& body);
vl_user* user_from_json(const Json& object);
vl_user_list* user_list_from_json(const Json& body);
vl_token_list* token_list_from_json(const Json& body);
vl_new_token* new_token_from_json(const Json& body);

char* copy_string(std::string_view text);  // malloc'd, NUL-terminated

// One server-sent event block (text/event-stream): its fields, or a comment.
struct SseBlock {
    std::string event;
    std::string data;
    std::optional<uint64_t> id;
    std::vector<std::string> comments;
};

// Splits a text/event-stream into blocks as the bytes arrive, in any pieces.
class SseParser {
public:
    // Appends bytes; returns the blocks they completed.
    std::vector<SseBlock> feed(std::string_view bytes);

private:
    void take_line(std::string_view line, std::vector<SseBlock>& done);

    std::string partial_line_;
    SseBlock block_;
    bool block_has_content_ = false;
};

// ": watching from revision N" -> N.
std::optional<uint64_t> watching_from_revision(std::string_view comment);

}  // namespace voltlock::client
