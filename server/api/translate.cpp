#include "api/translate.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>

#include "core/message.h"
#include "core/overloaded.h"

namespace voltlock::api {

namespace {

ApiError bad_request(std::string code, std::string message, Json details = Json::object())
{
    return ApiError{400, std::move(code), std::move(message), std::move(details)};
}

ApiError invalid_field(std::string_view field, std::string rule)
{
    return bad_request("invalid_argument", std::string(field) + ": " + rule,
                       Json{{"field", field}});
}

// The field as an unsigned integer; absent -> `otherwise` (nullopt: required).
Parsed<uint64_t> get_u64(const Json& object, std::string_view field,
                         std::optional<uint64_t> otherwise)
{
    const auto it = object.find(field);
    if (it == object.end() || it->is_null()) {
        if (otherwise) return *otherwise;
        return invalid_field(field, "required");
    }
    if (!it->is_number_unsigned()) return invalid_field(field, "must be an integer >= 0");
    return it->get<uint64_t>();
}

// u32 fields: a larger number is clamped to UINT32_MAX so that validate() reports the range.
Parsed<uint32_t> get_u32(const Json& object, std::string_view field,
                         std::optional<uint32_t> otherwise)
{
    auto value = VL_TRY(get_u64(object, field, otherwise));
    return static_cast<uint32_t>(
        std::min<uint64_t>(value, std::numeric_limits<uint32_t>::max()));
}

Parsed<std::string> get_string(const Json& object, std::string_view field,
                               std::optional<std::string> otherwise)
{
    const auto it = object.find(field);
    if (it == object.end() || it->is_null()) {
        if (otherwise) return *otherwise;
        return invalid_field(field, "required");
    }
    if (!it->is_string()) return invalid_field(field, "must be a string");
    return it->get<std::string>();
}

Parsed<SessionId> get_session(const Json& object, bool required)
{
    const std::optional<uint64_t> otherwise =
        required ? std::nullopt : std::optional<uint64_t>(0);
    auto session = VL_TRY(get_u64(object, "session", otherwise));
    if (required && session == 0) return invalid_field("session", "must be >= 1");
    return session;
}

std::string thousands(uint64_t n)
{
    const std::string digits = std::to_string(n);
    std::string out;
    for (size_t i = 0; i < digits.size(); i++) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

ApiError too_large(std::string message, size_t limit, size_t size)
{
    return ApiError{413, "too_large", std::move(message),
                    Json{{"limit_bytes", limit}, {"size_bytes", size}}};
}

Parsed<LockOp> finish(LockOp op, uint32_t max_message_bytes)
{
    if (auto error = check_op(op, max_message_bytes)) return *error;
    return op;
}

}  // namespace

Json error_body(const ApiError& error)
{
    return object_of("code", error.code, "message", error.message, "details",
                     error.details.is_null() ? Json::object() : error.details);
}

std::string json_text(const Json& json)
{
    return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// ---- Building blocks ---------------------------------------------------------------------------

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view bytes)
{
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        const uint32_t n = (uint32_t(uint8_t(bytes[i])) << 16) |
                           (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
        out += kAlphabet[(n >> 18) & 63];
        out += kAlphabet[(n >> 12) & 63];
        out += kAlphabet[(n >> 6) & 63];
        out += kAlphabet[n & 63];
    }
    if (const size_t rest = bytes.size() - i; rest > 0) {
        uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
        if (rest == 2) n |= uint32_t(uint8_t(bytes[i + 1])) << 8;
        out += kAlphabet[(n >> 18) & 63];
        out += kAlphabet[(n >> 12) & 63];
        out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::optional<std::string> base64_decode(std::string_view text)
{
    if (text.size() % 4 != 0) return std::nullopt;
    std::array<int, 256> value{};
    value.fill(-1);
    for (int c = 0; c < 64; c++) value[static_cast<uint8_t>(kAlphabet[c])] = c;
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (size_t i = 0; i < text.size(); i += 4) {
        const bool last = i + 4 == text.size();
        const size_t pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
        if (pad == 1 && text[i + 2] == '=') return std::nullopt;  // "x=x=" is not padding
        uint32_t n = 0;
        for (size_t j = 0; j < 4; j++) {
            if (j >= 4 - pad) {
                n <<= 6;
                continue;
            }
            const int v = value[static_cast<uint8_t>(text[i + j])];
            if (v < 0) return std::nullopt;
            n = (n << 6) | static_cast<uint32_t>(v);
        }
        // One encoding per value: the bits under the padding must be zero.
        if ((pad == 1 && (n & 0xff) != 0) || (pad == 2 && (n & 0xffff) != 0)) return std::nullopt;
        out += static_cast<char>((n >> 16) & 0xff);
        if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
        if (pad < 1) out += static_cast<char>(n & 0xff);
    }
    return out;
}

void put_value(Json& json, const Bytes& value, ValueEncoding encoding)
{
    if (encoding == ValueEncoding::automatic && is_valid_utf8(value)) {
        json["value"] = value;
    } else {
        json["value"] = base64_encode(value);
        json["encoding"] = "base64";
    }
}

Parsed<bool> parse_bool_param(std::string_view name, std::string_view text)
{
    if (text == "true" || text == "1" || text.empty()) return true;
    if (text == "false" || text == "0") return false;
    return bad_request("invalid_argument",
                       std::string(name) + ": must be true or false, not '" + std::string(text) +
                           "'",
                       Json{{"field", name}});
}

Parsed<uint64_t> parse_u64_param(std::string_view name, std::string_view text)
{
    uint64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc{} || end != text.data() + text.size())
        return bad_request("invalid_argument",
                           std::string(name) + ": must be an integer >= 0, not '" +
                               std::string(text) + "'",
                           Json{{"field", name}});
    return value;
}

Parsed<uint64_t> parse_last_event_id(std::string_view text)
{
    const uint64_t last = VL_TRY(parse_u64_param("Last-Event-ID", text));
    if (last == std::numeric_limits<uint64_t>::max())
        return invalid_field("Last-Event-ID", "must be below " + std::string(text) +
                                                  ": no revision follows it");
    return last + 1;
}

Parsed<ValueEncoding> parse_encoding_param(std::string_view text)
{
    if (text == "base64") return ValueEncoding::base64;
    if (text == "auto" || text == "utf8" || text.empty()) return ValueEncoding::automatic;
    return invalid_field("encoding", "must be auto or base64");
}

Parsed<SessionId> parse_session_id(std::string_view text)
{
    auto value = parse_u64_param("session", text);
    if (!value.ok() || value.value() == 0)
        return bad_request("invalid_argument",
                           "session: the id in the path must be an integer >= 1, not '" +
                               std::string(text) + "'",
                           Json{{"field", "session"}});
    return value.value();
}

namespace {

// Where the parser refused a number too large for a double (its error 406): [begin, end) of the
// text. Reads nothing else.
struct OverflowFinder : nlohmann::json_sax<Json> {
    std::optional<std::pair<size_t, size_t>> overflow;

    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(size_t position, const std::string& token, const Json::exception& e) override
    {
        if (e.id == 406 && token.size() <= position)
            overflow = {position - token.size(), position};
        return false;
    }
};

// A number too large for a double ("1e400") is valid JSON that nlohmann's parser refuses. It
// becomes the largest double of its sign, so that its field gets the answer any other number out
// of its range gets ("prev_revision: must be an integer >= 0"), not bad_json. A few such numbers
// at most: each costs another parse.
Json parse_json(std::string_view body)
{
    Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!json.is_discarded()) return json;
    std::string text(body);
    for (int overflows = 0; json.is_discarded() && overflows < 4; overflows++) {
        OverflowFinder finder;
        Json::sax_parse(text, &finder);
        if (!finder.overflow) break;
        const auto [begin, end] = *finder.overflow;
        text.replace(begin, end - begin,
                     text[begin] == '-' ? "-1.7976931348623157e308" : "1.7976931348623157e308");
        json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    }
    return json;
}

}  // namespace

Parsed<Json> parse_object(std::string_view body, std::initializer_list<std::string_view> allowed)
{
    if (std::all_of(body.begin(), body.end(), [](char c) { return std::isspace(uint8_t(c)); }))
        return Json::object();
    Json json = parse_json(body);
    if (json.is_discarded())
        return bad_request("bad_json", "the request body is not valid JSON");
    if (!json.is_object())
        return bad_request("bad_json", "the request body must be a JSON object");
    for (const auto& [field, _] : json.items()) {
        if (std::find(allowed.begin(), allowed.end(), field) == allowed.end()) {
            Json known = Json::array();
            for (std::string_view a : allowed) known.push_back(a);
            return bad_request("unknown_field",
                               "unknown field '" + field + "'" +
                                   (known.empty() ? " (this request takes no fields)" : ""),
                               Json{{"field", field}, {"allowed", known}});
        }
    }
    return json;
}

Parsed<std::optional<ClientIdentity>> parse_identity(const std::optional<std::string>& client_id,
                                                     const std::optional<std::string>& number)
{
    if (!client_id && !number) return std::optional<ClientIdentity>{};
    if (!client_id || !number)
        return bad_request("invalid_argument",
                           "X-Voltlock-Client-Id and X-Voltlock-Request-Number go together: "
                           "send both or neither",
                           Json{{"field", client_id ? "X-Voltlock-Request-Number"
                                                    : "X-Voltlock-Client-Id"}});
    auto id = VL_TRY(parse_u64_param("X-Voltlock-Client-Id", *client_id));
    auto n = VL_TRY(parse_u64_param("X-Voltlock-Request-Number", *number));
    if (id == 0 || n == 0)
        return bad_request("invalid_argument",
                           "X-Voltlock-Client-Id and X-Voltlock-Request-Number must be >= 1");
    return std::optional<ClientIdentity>{ClientIdentity{id, n}};
}

Parsed<LockMode> parse_mode(const Json& json)
{
    auto mode = VL_TRY(get_string(json, "mode", "exclusive"));
    if (mode == "exclusive") return LockMode::exclusive;
    if (mode == "shared") return LockMode::shared;
    return invalid_field("mode", "must be exclusive or shared, not '" + mode + "'");
}

Parsed<Sequencer> parse_sequencer(const Json& json, std::string_view field)
{
    if (!json.is_object())
        return invalid_field(field, "must be an object {lock, mode, generation, session}");
    for (const auto& [name, _] : json.items())
        if (name != "lock" && name != "mode" && name != "generation" && name != "session")
            return bad_request("unknown_field",
                               "unknown field '" + name + "' in " + std::string(field),
                               Json{{"field", std::string(field) + "." + name}});
    auto lock = VL_TRY(get_string(json, "lock", std::nullopt));
    auto mode = VL_TRY(parse_mode(json));
    auto generation = VL_TRY(get_u64(json, "generation", std::nullopt));
    auto session = VL_TRY(get_session(json, true));
    return Sequencer{.lock = lock, .mode = mode,
                     .generation = generation, .session = session};
}

Json sequencer_json(const Sequencer& s)
{
    return object_of("lock", s.lock, "mode", lock_mode_name(s.mode), "generation", s.generation,
                     "session", s.session);
}

namespace {

// The optional "sequencer" field of a write.
Parsed<std::optional<Sequencer>> get_optional_sequencer(const Json& json)
{
    const auto it = json.find("sequencer");
    if (it == json.end() || it->is_null()) return std::optional<Sequencer>{};
    auto sequencer = VL_TRY(parse_sequencer(*it));
    return std::optional<Sequencer>{sequencer};
}

}  // namespace

// ---- Requests -> ops ---------------------------------------------------------------------------

Parsed<LockOp> create_session_op(std::string_view body, uint32_t max_message_bytes)
{
    auto json = VL_TRY(parse_object(body, {"ttl_ms", "lock_delay_ms", "name"}));
    auto ttl = VL_TRY(get_u32(json, "ttl_ms", std::nullopt));
    auto delay = VL_TRY(get_u32(json, "lock_delay_ms", 0));
    auto name = VL_TRY(get_string(json, "name", ""));
    return finish(CreateSession{.ttl_ms = ttl, .lock_delay_ms = delay,
                                .name = name},
                  max_message_bytes);
}

Parsed<LockOp> acquire_op(const std::string& lock, std::string_view body,
                          uint32_t max_message_bytes)
{
    auto json = VL_TRY(parse_object(body, {"session", "mode", "wait_ms"}));
    auto session = VL_TRY(get_session(json, true));
    auto mode = VL_TRY(parse_mode(json));
    auto wait = VL_TRY(get_u32(json, "wait_ms", 0));
    return finish(Acquire{.lock = lock, .session = session, .mode = mode,
                          .wait_ms = wait},
                  max_message_bytes);
}

Parsed<LockOp> release_op(const std::string& lock, std::string_view body,
                          uint32_t max_message_bytes)
{
    auto json = VL_TRY(parse_object(body, {"session"}));
    auto session = VL_TRY(get_session(json, true));
    return finish(Release{.lock = lock, .session = session}, max_message_bytes);
}

Parsed<LockOp> check_sequencer_op(std::string_view body, uint32_t max_message_bytes)
{
    auto json = VL_TRY(parse_object(body, {"sequencer"}));
    if (!json.contains("sequencer")) return invalid_field("sequencer", "required");
    auto sequencer = VL_TRY(parse_sequencer(json["sequencer"]));
    return finish(CheckSequencer{.sequencer = sequencer}, max_message_bytes);
}

Parsed<LockOp> put_op(const std::string& key, std::string_view body, uint32_t max_message_bytes)
{
    auto json =
        VL_TRY(parse_object(body, {"value", "encoding", "prev_revision", "session", "sequencer"}));
    auto text = VL_TRY(get_string(json, "value", std::nullopt));
    auto encoding = VL_TRY(get_string(json, "encoding", "utf8"));
    Put put{.key = key};
    if (encoding == "base64") {
        auto bytes = base64_decode(text);
        if (!bytes) return invalid_field("value", "not valid base64 (RFC 4648, with padding)");
        put.value = std::move(*bytes);
    } else if (encoding == "utf8") {
        put.value = text;
    } else {
        return invalid_field("encoding", "must be utf8 or base64, not '" + encoding + "'");
    }
    if (json.contains("prev_revision") && !json["prev_revision"].is_null()) {
        auto prev = VL_TRY(get_u64(json, "prev_revision", std::nullopt));
        put.prev_revision = prev;
    }
    auto session = VL_TRY(get_session(json, false));
    put.session = session;
    auto sequencer = VL_TRY(get_optional_sequencer(json));
    put.sequencer = sequencer;
    return finish(std::move(put), max_message_bytes);
}

Parsed<LockOp> delete_op(const std::string& key, bool prefix, std::optional<uint64_t> prev_revision,
                         std::string_view body, uint32_t max_message_bytes)
{
    auto json = VL_TRY(parse_object(body, {"sequencer"}));
    auto sequencer = VL_TRY(get_optional_sequencer(json));
    return finish(Delete{.key = key, .prefix = prefix, .prev_revision = prev_revision,
                         .sequencer = sequencer},
                  max_message_bytes);
}

Parsed<LockOp> get_op(const std::string& key, bool prefix, const std::string& after,
                      uint32_t limit, uint32_t max_message_bytes)
{
    return finish(Get{.key = key, .prefix = prefix, .after = after, .limit = limit,
                      .max_result_bytes =
                          static_cast<uint32_t>(max_reply_result_bytes(max_message_bytes))},
                  max_message_bytes);
}

Parsed<LockOp> barrier_enter_op(const std::string& barrier, std::string_view body,
                                uint32_t max_message_bytes)
{
    auto json = VL_TRY(parse_object(body, {"session", "count", "wait_ms"}));
    auto session = VL_TRY(get_session(json, true));
    auto count = VL_TRY(get_u32(json, "count", std::nullopt));
    auto wait = VL_TRY(get_u32(json, "wait_ms", 0));
    return finish(BarrierEnter{.barrier = barrier, .session = session,
                               .count = count, .wait_ms = wait},
                  max_message_bytes);
}

Parsed<LockOp> barrier_leave_op(const std::string& barrier, std::string_view body,
                                uint32_t max_message_bytes)
{
    auto json = VL_TRY(parse_object(body, {"session", "wait_ms"}));
    auto session = VL_TRY(get_session(json, true));
    auto wait = VL_TRY(get_u32(json, "wait_ms", 0));
    return finish(BarrierLeave{.barrier = barrier, .session = session,
                               .wait_ms = wait},
                  max_message_bytes);
}

std::optional<ApiError> check_op(const LockOp& op, uint32_t max_message_bytes)
{
    const size_t op_budget = max_entry_payload_bytes(max_message_bytes);
    const size_t result_budget = max_reply_result_bytes(max_message_bytes);
    // The datagram limit comes first: a value too long for the codec is too large, not invalid.
    if (const auto* put = std::get_if<Put>(&op)) {
        const std::optional<size_t> limit = max_value_bytes(*put, op_budget, result_budget);
        if (!limit)
            return too_large("no value fits with this key and sequencer in one " +
                                 thousands(max_message_bytes) + "-byte datagram",
                             0, put->value.size());
        if (put->value.size() > *limit)
            return too_large("value is " + thousands(put->value.size()) + " bytes; at most " +
                                 thousands(*limit) + " fit with a " +
                                 thousands(put->key.size()) + "-byte key" +
                                 (put->sequencer ? " and this sequencer" : "") + " (one " +
                                 thousands(max_message_bytes) + "-byte datagram)",
                             *limit, put->value.size());
    }
    if (auto invalid = validate(op)) {
        Json details{{"field", invalid->field}, {"violation", violation_name(invalid->violation)}};
        return bad_request("invalid_argument", describe(*invalid), std::move(details));
    }
    if (const size_t size = encoded_size(op); size > op_budget)
        return too_large("the request encodes to " + thousands(size) + " bytes; at most " +
                             thousands(op_budget) + " fit in one " +
                             thousands(max_message_bytes) + "-byte datagram",
                         op_budget, size);
    return std::nullopt;
}

std::optional<ApiError> check_name(std::string_view field, std::string_view name,
                                   bool empty_allowed)
{
    if (name.empty() && empty_allowed) return std::nullopt;
    const Violation violation = validate_name(name);
    if (violation == Violation::none) return std::nullopt;
    Invalid invalid{.violation = violation, .field = ""};
    std::string rule = describe(invalid);
    if (const size_t colon = rule.find(": "); colon != std::string::npos)
        rule = rule.substr(colon + 2);
    return bad_request("invalid_argument", std::string(field) + ": " + rule,
                       Json{{"field", field}, {"violation", violation_name(violation)}});
}

// ---- Results -> responses ----------------------------------------------------------------------

namespace {

// An auth op naming a user, role or token that does not exist, or a token id taken.
ApiError auth_table_error(const OpError& e)
{
    const char* table = e.detail == 2 ? "role" : e.detail == 3 ? "token" : "user";
    const Json details{{"kind", table}, {"revision", e.revision}};
    if (e.code == ErrorCode::not_found)
        return ApiError{404, "not_found", std::string("no such ") + table, details};
    return ApiError{409, "already_exists", std::string("that ") + table + " exists already",
                    details};
}

}  // namespace

ApiError op_error(const OpError& e)
{
    const Json revision{{"revision", e.revision}};
    auto with = [&](Json extra) {
        Json details = revision;
        details.update(extra);
        return details;
    };
    const bool lock = e.op == OpCode::acquire || e.op == OpCode::release;
    switch (e.code) {
    case ErrorCode::ok: break;
    case ErrorCode::malformed:
        return ApiError{400, "malformed", "the op did not decode (a server bug)",
                        with({{"reason", op_decode_error_name(OpDecodeError(e.detail))}})};
    case ErrorCode::invalid_argument:
        return ApiError{400, "invalid_argument", "invalid argument",
                        with({{"violation", violation_name(Violation(e.detail))}})};
    case ErrorCode::unknown_session:
        return ApiError{404, "unknown_session",
                        "no such session: it was never created, or it was closed or expired; "
                        "create a new one",
                        revision};
    case ErrorCode::cas_mismatch:
        return ApiError{409, "cas_mismatch",
                        e.detail == 0 ? "compare-and-set failed: the key does not exist"
                                      : "compare-and-set failed: the key's mod_revision is " +
                                            std::to_string(e.detail),
                        with({{"mod_revision", e.detail}})};
    case ErrorCode::sequencer_invalid:
        return ApiError{409, "sequencer_invalid",
                        "the sequencer is no longer valid: that grant of the lock has ended",
                        with({{"generation", e.detail}})};
    case ErrorCode::busy:
        if (lock)
            return ApiError{409, "lock_busy",
                            e.detail != 0 ? "the lock is under lock-delay; try again later, or "
                                            "wait with wait_ms"
                                          : "the lock is held; try again, or wait with wait_ms",
                            with({{"delay_until_ms", e.detail}})};
        return ApiError{409, "barrier_not_ready",
                        "the barrier is not complete; wait for it with wait_ms", revision};
    case ErrorCode::not_held:
        return ApiError{409, "not_held", "the session neither holds nor waits for this lock",
                        revision};
    case ErrorCode::mode_conflict:
        return ApiError{409, "mode_conflict",
                        "the session already holds or waits for this lock in the other mode",
                        revision};
    case ErrorCode::count_mismatch:
        return ApiError{409, "count_mismatch",
                        "the barrier exists with count " + std::to_string(e.detail),
                        with({{"count", e.detail}})};
    case ErrorCode::barrier_in_use:
        return ApiError{409, "barrier_in_use",
                        "the barrier has released its members; a new round starts once they "
                        "have all left",
                        revision};
    case ErrorCode::not_member:
        return ApiError{409, "not_member", "the session did not enter this barrier", revision};
    case ErrorCode::too_large:
        return ApiError{413, "too_large",
                        "a key of " + thousands(e.detail) +
                            " bytes does not fit in one reply datagram",
                        with({{"size_bytes", e.detail}})};
    case ErrorCode::not_found: case ErrorCode::already_exists: return auth_table_error(e);
    }
    return ApiError{500, "internal", std::string("unexpected machine error ") +
                                         error_code_name(e.code),
                    revision};
}

Json key_value_json(const KeyValue& kv, ValueEncoding encoding)
{
    Json json = object_of("key", kv.key, "create_revision", kv.create_revision, "mod_revision",
                          kv.mod_revision, "version", kv.version);
    put_value(json, kv.value, encoding);
    if (kv.session != 0) json["session"] = kv.session;
    return json;
}

Json result_json(const OpResult& result, ValueEncoding encoding)
{
    return std::visit(
        Overloaded{
            [](const OpError& e) { return error_body(op_error(e)); },
            [](const CreateSessionResult& r) {
                return object_of("session", r.session, "lease_epoch", r.lease_epoch,
                                 "deadline_ms", r.deadline_ms, "revision", r.revision);
            },
            [](const KeepAliveResult& r) {
                return object_of("lease_epoch", r.lease_epoch, "deadline_ms", r.deadline_ms,
                                 "revision", r.revision);
            },
            [](const CloseSessionResult& r) {
                return object_of("closed", r.ended, "locks_released", r.locks_released,
                                 "keys_deleted", r.keys_deleted, "revision", r.revision);
            },
            [](const ExpireSessionResult& r) {
                return object_of("ended", r.ended, "locks_released", r.locks_released,
                                 "keys_deleted", r.keys_deleted, "revision", r.revision);
            },
            [](const AcquireResult& r) {
                if (r.status == AcquireStatus::granted)
                    return object_of("granted", true, "sequencer", sequencer_json(r.sequencer),
                                     "revision", r.revision);
                return object_of("granted", false, "deadline_ms", r.deadline_ms, "position",
                                 r.position, "revision", r.revision);
            },
            [](const ReleaseResult& r) {
                return object_of("released", r.released, "wait_withdrawn", r.wait_withdrawn,
                                 "granted", r.granted, "revision", r.revision);
            },
            [](const WithdrawWaitResult& r) {
                return object_of("wait_withdrawn", r.withdrawn, "granted", r.granted, "revision",
                                 r.revision);
            },
            [](const WithdrawEnterResult& r) {
                return object_of("wait_withdrawn", r.withdrawn, "revision", r.revision);
            },
            [](const CheckSequencerResult& r) {
                return object_of("valid", r.valid, "revision", r.revision);
            },
            [](const PutResult& r) {
                return object_of("revision", r.revision, "prev_mod_revision",
                                 r.prev_mod_revision, "create_revision", r.create_revision,
                                 "version", r.version);
            },
            [](const DeleteResult& r) {
                return object_of("deleted", r.deleted, "revision", r.revision);
            },
            [&](const GetResult& r) {
                Json kvs = Json::array();
                for (const KeyValue& kv : r.kvs) kvs.push_back(key_value_json(kv, encoding));
                return object_of("kvs", std::move(kvs), "more", r.more, "revision",
                                 r.revision);
            },
            [](const BarrierEnterResult& r) {
                return object_of("passed", r.status == BarrierStatus::passed, "deadline_ms",
                                 r.deadline_ms, "revision", r.revision);
            },
            [](const BarrierLeaveResult& r) {
                return object_of("passed", r.status == BarrierStatus::passed, "deadline_ms",
                                 r.deadline_ms, "revision", r.revision);
            },
            [](const ExpireWaitersResult& r) { return object_of("revision", r.revision); },
            [](const AuthResult& r) {
                return object_of("auth_revision", r.auth_revision, "revision", r.revision);
            },
        },
        result);
}

Json event_json(const WatchEvent& e, ValueEncoding encoding)
{
    Json json = object_of("revision", e.revision, "type", event_type_name(e.type), "key", e.key);
    switch (event_space(e.type)) {
    case EventSpace::kv:
        if (e.type == EventType::put) put_value(json, e.value, encoding);
        json["prev_revision"] = e.prev_revision;
        json["session"] = e.session;
        break;
    case EventSpace::lock:
        json["session"] = e.session;
        json["mode"] = lock_mode_name(e.mode);
        if (e.type == EventType::lock_grant || e.type == EventType::lock_release)
            json["generation"] = e.generation;
        break;
    case EventSpace::session:
    case EventSpace::barrier:
        json["session"] = e.session;
        break;
    }
    json["cause"] = cause_name(e.cause);
    return json;
}

// ---- Waits -------------------------------------------------------------------------------------

namespace {

ApiError timed_out(WaitKind kind)
{
    const char* what = kind == WaitKind::lock            ? "for the lock"
                       : kind == WaitKind::barrier_enter ? "for the barrier's count"
                                                         : "for the barrier's members to leave";
    return ApiError{408, "wait_timed_out",
                    std::string("the wait ") + what + " timed out; nothing changed", {}};
}

ApiError cancelled(const WatchEvent& e)
{
    if (e.cause != Cause::request)
        return ApiError{404, "unknown_session",
                        std::string("the session ended while waiting (") + cause_name(e.cause) +
                            ")",
                        Json{{"revision", e.revision}}};
    return ApiError{409, "wait_withdrawn",
                    "the wait was withdrawn: by a release or leave, or because a client that "
                    "made it hung up at another replica",
                    Json{{"revision", e.revision}}};
}

}  // namespace

std::optional<std::variant<Json, ApiError>> wait_outcome(WaitKind kind, SessionId session,
                                                         const WatchEvent& e)
{
    if (e.session != session) return std::nullopt;
    using Outcome = std::variant<Json, ApiError>;
    switch (kind) {
    case WaitKind::lock:
        if (e.type == EventType::lock_grant)
            return Outcome{object_of("granted", true, "sequencer",
                                     sequencer_json(Sequencer{.lock = e.key,
                                                              .mode = e.mode,
                                                              .generation = e.generation,
                                                              .session = session}),
                                     "revision", e.revision)};
        if (e.type == EventType::lock_timeout) return Outcome{timed_out(kind)};
        if (e.type == EventType::lock_cancel) return Outcome{cancelled(e)};
        return std::nullopt;
    case WaitKind::barrier_enter:
    case WaitKind::barrier_leave: {
        const EventType passed = kind == WaitKind::barrier_enter ? EventType::barrier_release
                                                                 : EventType::barrier_done;
        if (e.type == passed)
            return Outcome{object_of("passed", true, "revision", e.revision)};
        if (e.type == EventType::barrier_timeout) return Outcome{timed_out(kind)};
        if (e.type == EventType::barrier_cancel) return Outcome{cancelled(e)};
        return std::nullopt;
    }
    }
    return std::nullopt;
}

ApiError wait_unknown(WaitKind kind)
{
    return ApiError{503, "wait_outcome_unknown",
                    std::string("no outcome of the ") +
                        (kind == WaitKind::lock ? "lock" : "barrier") +
                        " wait was seen in time (the cell may be changing leaders); send the "
                        "same request again: the wait keeps its place",
                    {}};
}

ApiError stale_request_error(const ClientIdentity& identity, RequestNumber latest)
{
    return ApiError{409, "request_number_stale",
                    "X-Voltlock-Request-Number " + std::to_string(identity.request_number) +
                        " is below this client id's latest, " + std::to_string(latest) +
                        ": a new request needs a higher number",
                    Json{{"request_number", identity.request_number}, {"latest", latest}}};
}

ApiError reused_request_error(const ClientIdentity& identity)
{
    return ApiError{409, "request_number_reused",
                    "X-Voltlock-Request-Number " + std::to_string(identity.request_number) +
                        " was already used by this client id for another request: a new "
                        "request needs a higher number",
                    object_of("request_number", identity.request_number)};
}

ApiError unavailable(std::string message)
{
    return ApiError{503, "unavailable", std::move(message), {}};
}

ApiError compacted(Revision oldest_revision, Revision requested)
{
    return ApiError{410, "compacted",
                    "revision " + std::to_string(requested) +
                        " is older than the retained history; the oldest revision a watch can "
                        "start from is " +
                        std::to_string(oldest_revision) + " (read the current state, then "
                        "watch from its revision + 1)",
                    Json{{"oldest_revision", oldest_revision}, {"start_revision", requested}}};
}

ApiError not_found_route(std::string_view method, std::string_view path)
{
    return ApiError{404, "not_found",
                    "no endpoint " + std::string(method) + " " + std::string(path) +
                        " (see /v1/openapi.json)",
                    {}};
}

}  // namespace voltlock::api
