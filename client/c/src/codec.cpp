#include "codec.h"

#include "core/auth_ops.h"
#include "core/lock_ops.h"
#include "error_codes.h"

#include <array>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace voltlock::client {

namespace {

struct CodeName {
    vl_status status;
    const char* name;
};

// Every status and its stable name: the library's own, then the server's codes as the one list
// of them spells them (server/api/error_codes.txt, made into error_codes.h by CMake).
#define VOLTLOCK_CODE_NAME(status, name) CodeName{status, name},
constexpr std::array kNames{
    CodeName{VL_OK, "ok"},
    CodeName{VL_ERR_INVALID_ARGUMENT, "client_invalid_argument"},
    CodeName{VL_ERR_TRANSPORT, "transport"},
    CodeName{VL_ERR_TIMEOUT, "timeout"},
    CodeName{VL_ERR_SESSION_LOST, "session_lost"},
    CodeName{VL_ERR_NO_MEMORY, "no_memory"},
    CodeName{VL_ERR_PROTOCOL, "protocol"},
    CodeName{VL_ERR_CLOSED, "closed"},
    CodeName{VL_ERR_SERVER_OTHER, "server_other"},
    VOLTLOCK_SERVER_ERROR_CODES(VOLTLOCK_CODE_NAME)
};
#undef VOLTLOCK_CODE_NAME

constexpr std::string_view kBase64Alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

bool unreserved(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

std::string percent_encode(std::string_view text, bool keep_slash)
{
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        const auto ch = static_cast<unsigned char>(c);
        if (unreserved(ch) || (keep_slash && ch == '/')) {
            out += c;
        } else {
            out += '%';
            out += kHex[ch >> 4];
            out += kHex[ch & 15];
        }
    }
    return out;
}

// Takes ownership of nothing; frees what a half-built kv holds.
void free_kv_fields(vl_kv& kv)
{
    std::free(kv.key);
    std::free(kv.value);
    kv = vl_kv{};
}

bool fill_kv(const Json& object, vl_kv& kv)
{
    const auto value = decode_value(object);
    if (!value) throw std::runtime_error("value is not valid base64");
    kv.key = copy_string(object.at("key").get<std::string>());
    kv.value = reinterpret_cast<uint8_t*>(copy_string(*value));
    if (!kv.key || !kv.value) {
        free_kv_fields(kv);
        return false;
    }
    kv.value_len = value->size();
    kv.create_revision = object.at("create_revision").get<uint64_t>();
    kv.mod_revision = object.at("mod_revision").get<uint64_t>();
    kv.version = object.at("version").get<uint64_t>();
    kv.session = object.value("session", uint64_t{0});
    return true;
}

// The header's permission bits are the cell's (core/auth_ops.h): they go on the wire by name
// from the one list of names.
constexpr bool header_has_the_cells_permission_bits()
{
    constexpr std::array<unsigned, 5> header{VL_PERMISSION_READ, VL_PERMISSION_WRITE,
                                             VL_PERMISSION_LOCK, VL_PERMISSION_WATCH,
                                             VL_PERMISSION_ADMIN};
    for (size_t i = 0; i < header.size(); i++)
        if (header[i] != kPermissionNames[i].second) return false;
    return true;
}
static_assert(header_has_the_cells_permission_bits());

// JSON text is UTF-8: nlohmann's dump refuses anything else, so it is the check.
bool is_utf8(std::string_view text)
{
    try {
        (void)Json(std::string(text)).dump();
        return true;
    } catch (const Json::type_error&) {
        return false;
    }
}

// "*", or "<kind>:PREFIX" with a kind the cell knows and a PREFIX that is empty or a name.
bool valid_resource(const char* resource)
{
    if (!resource) return false;
    const std::string_view text = resource;
    if (text == "*") return true;
    for (const auto& [kind, scope] : kGrantScopeNames) {
        const std::string_view head = kind;
        if (text.size() > head.size() && text.starts_with(head) && text[head.size()] == ':') {
            const std::string_view prefix = text.substr(head.size() + 1);
            return prefix.empty() || valid_name(prefix);
        }
    }
    return false;
}

// Whether `count` `items` (an array, if any) fit what the cell takes for one `owner`.
bool sendable(const void* array, size_t count, size_t most, const char* owner, const char* items,
              std::string* why)
{
    if (count > most) {
        *why = std::string(owner) + " has at most " + std::to_string(most) + " " + items;
        return false;
    }
    if (count > 0 && !array) {
        *why = std::string(items) + " is NULL";
        return false;
    }
    return true;
}

// copy_string for the builders below, which free what they made and answer nullptr themselves.
char* must_copy(std::string_view text)
{
    char* copy = copy_string(text);
    if (!copy) throw std::bad_alloc();
    return copy;
}

template <class T>
T* zeroed_array(size_t count)
{
    if (count == 0) return nullptr;
    auto* array = static_cast<T*>(std::calloc(count, sizeof(T)));
    if (!array) throw std::bad_alloc();
    return array;
}

// A zeroed T, filled by `fill`. Whatever filling throws, `release` frees what was made so far
// (every pointer in a half-filled T is set or NULL, and its counts count what is set). nullptr:
// out of memory; an answer of the wrong shape throws on to the caller.
template <class T, class Fill>
T* build(void (*release)(T*), Fill fill)
{
    auto* object = static_cast<T*>(std::calloc(1, sizeof(T)));
    if (!object) return nullptr;
    try {
        fill(*object);
    } catch (const std::bad_alloc&) {
        release(object);
        return nullptr;
    } catch (...) {
        release(object);
        throw;
    }
    return object;
}

const Json& list_at(const Json& object, const char* field)
{
    const Json& list = object.at(field);
    if (!list.is_array()) throw std::runtime_error(std::string(field) + " is not a list");
    return list;
}

// Each element of `items` into a new array of Item, counted in `count` as it is filled.
template <class Item>
void fill_array(const Json& items, Item*& array, size_t& count,
                void (*fill)(const Json&, Item&))
{
    array = zeroed_array<Item>(items.size());
    for (const Json& item : items) fill(item, array[count++]);
}

// A listing of the auth tables, {<field>: [...], auth_revision}, into a List whose `items`
// array is filled by `fill`.
template <class List, class Item>
List* list_from_json(const Json& body, const char* field, void (*release)(List*),
                     Item* List::*items, void (*fill)(const Json&, Item&))
{
    return build<List>(release, [&](List& list) {
        fill_array(list_at(body, field), list.*items, list.count, fill);
        list.auth_revision = body.at("auth_revision").get<uint64_t>();
    });
}

void fill_string(const Json& item, char*& string) { string = must_copy(item.get<std::string>()); }

unsigned permissions_from_json(const Json& names)
{
    unsigned bits = 0;
    for (const Json& name : names) {
        unsigned bit = 0;
        for (const auto& [text, value] : kPermissionNames)
            if (name.get<std::string>() == text) bit = value;
        if (bit == 0) throw std::runtime_error("unknown permission " + name.dump());
        bits |= bit;
    }
    return bits;
}

void fill_grant(const Json& object, vl_grant& grant)
{
    grant.permissions = permissions_from_json(list_at(object, "permissions"));
    grant.resource = must_copy(object.at("resource").get<std::string>());
}

void fill_role(const Json& object, vl_role& role)
{
    role.name = must_copy(object.at("name").get<std::string>());
    fill_array(list_at(object, "grants"), role.grants, role.grant_count, fill_grant);
}

void fill_user(const Json& object, vl_user& user)
{
    user.name = must_copy(object.at("name").get<std::string>());
    fill_array(list_at(object, "roles"), user.roles, user.role_count, fill_string);
    fill_array(list_at(object, "tokens"), user.token_ids, user.token_count, fill_string);
}

void fill_token_info(const Json& object, vl_token_info& token)
{
    token.id = must_copy(object.at("id").get<std::string>());
    token.user = must_copy(object.at("user").get<std::string>());
    token.created_ms = object.at("created_ms").get<uint64_t>();
    const Json& expires = object.at("expires_ms");
    token.expires_ms = expires.is_null() ? 0 : expires.get<uint64_t>();
}

void free_strings(char** strings, size_t count)
{
    for (size_t i = 0; i < count; i++) std::free(strings[i]);
    std::free(strings);
}

void free_role_fields(vl_role& role)
{
    std::free(role.name);
    for (size_t i = 0; i < role.grant_count; i++)
        std::free(const_cast<char*>(role.grants[i].resource));
    std::free(role.grants);
}

void free_user_fields(vl_user& user)
{
    std::free(user.name);
    free_strings(user.roles, user.role_count);
    free_strings(user.token_ids, user.token_count);
}

void free_token_fields(vl_token_info& token)
{
    std::free(token.id);
    std::free(token.user);
}

// The vl_*_free of one role or user, and of a listing of them or of tokens.
template <class T>
void free_one(T* object, void (*free_fields)(T&))
{
    if (!object) return;
    free_fields(*object);
    std::free(object);
}

template <class List, class Item>
void free_list(List* list, Item* List::*items, void (*free_fields)(Item&))
{
    if (!list) return;
    for (size_t i = 0; i < list->count; i++) free_fields((list->*items)[i]);
    std::free(list->*items);
    std::free(list);
}

}  // namespace

vl_status status_from_code(std::string_view code)
{
    for (const CodeName& entry : kNames)
        if (entry.status >= VL_ERR_BAD_JSON && code == entry.name) return entry.status;
    return VL_ERR_SERVER_OTHER;
}

const char* status_name(vl_status status)
{
    for (const CodeName& entry : kNames)
        if (entry.status == status) return entry.name;
    return "unknown_status";
}

bool is_retryable(vl_status status)
{
    return status == VL_ERR_TRANSPORT || status == VL_ERR_UNAVAILABLE ||
           status == VL_ERR_NOT_LEADER || status == VL_ERR_WAIT_OUTCOME_UNKNOWN ||
           status == VL_ERR_NOT_READY;
}

Failure decode_answer(const Answer& answer, Json* body)
{
    Json parsed = Json::parse(answer.body, nullptr, false);
    const bool is_object = !parsed.is_discarded() && parsed.is_object();
    if (answer.http_status >= 200 && answer.http_status < 300) {
        if (!is_object)
            return {VL_ERR_PROTOCOL, "the cell answered " + std::to_string(answer.http_status) +
                                         " with a body that is not a JSON object"};
        if (body) *body = std::move(parsed);
        return {};
    }
    if (is_object && parsed.contains("code") && parsed["code"].is_string()) {
        const std::string code = parsed["code"].get<std::string>();
        std::string message = parsed.value("message", std::string{});
        if (body) *body = parsed;
        return {status_from_code(code), code + ": " + message};
    }
    // Not one of ours (a proxy, a replica too old): the HTTP status decides.
    const vl_status status = answer.http_status == 503 ? VL_ERR_UNAVAILABLE : VL_ERR_PROTOCOL;
    return {status, "HTTP " + std::to_string(answer.http_status) + " without an error body"};
}

std::string encode_path_segment(std::string_view name) { return percent_encode(name, true); }
std::string encode_query_value(std::string_view value) { return percent_encode(value, false); }

std::string base64_encode(std::string_view bytes)
{
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        const uint32_t n = (uint32_t(uint8_t(bytes[i])) << 16) |
                           (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
        for (int shift = 18; shift >= 0; shift -= 6) out += kBase64Alphabet[(n >> shift) & 63];
    }
    const size_t rest = bytes.size() - i;
    if (rest > 0) {
        uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
        if (rest == 2) n |= uint32_t(uint8_t(bytes[i + 1])) << 8;
        out += kBase64Alphabet[(n >> 18) & 63];
        out += kBase64Alphabet[(n >> 12) & 63];
        out += rest == 2 ? kBase64Alphabet[(n >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::optional<std::string> base64_decode(std::string_view text)
{
    if (text.size() % 4 != 0) return std::nullopt;
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (size_t i = 0; i < text.size(); i += 4) {
        uint32_t n = 0;
        int padding = 0;
        for (size_t j = 0; j < 4; j++) {
            const char c = text[i + j];
            if (c == '=' && i + 4 == text.size() && j >= 2) {
                padding++;
                n <<= 6;
                continue;
            }
            const size_t at = kBase64Alphabet.find(c);
            if (at == std::string_view::npos || padding > 0) return std::nullopt;
            n = (n << 6) | uint32_t(at);
        }
        out += char((n >> 16) & 0xff);
        if (padding < 2) out += char((n >> 8) & 0xff);
        if (padding < 1) out += char(n & 0xff);
    }
    return out;
}

std::optional<std::string> decode_value(const Json& object)
{
    const std::string value = object.at("value").get<std::string>();
    if (object.value("encoding", std::string{}) == "base64") return base64_decode(value);
    return value;
}

bool valid_name(std::string_view name)
{
    if (name.empty() || name.size() > kMaxNameBytes) return false;
    for (const char c : name) {
        const auto ch = static_cast<unsigned char>(c);
        if (ch < 0x20 || ch == 0x7f) return false;
    }
    return is_utf8(name);
}

bool valid_name(const char* name) { return name != nullptr && valid_name(std::string_view(name)); }

bool valid_auth_name(const char* name)
{
    return valid_name(name) && std::strlen(name) <= kMaxAuthNameBytes &&
           std::strchr(name, '/') == nullptr;
}

bool valid_token_id(const char* id)
{
    return id && std::strlen(id) == 16 && std::strspn(id, "0123456789abcdef") == 16;
}

std::optional<Json> role_body(const vl_grant* grants, size_t count, std::string* why)
{
    if (!sendable(grants, count, kMaxRoleGrants, "a role", "grants", why)) return std::nullopt;
    Json list = Json::array();
    for (size_t i = 0; i < count; i++) {
        const vl_grant& grant = grants[i];
        const std::string which = "grant " + std::to_string(i) + ": ";
        if (grant.permissions == 0 || (grant.permissions & ~unsigned{kAllPermissionBits})) {
            *why = which + "permissions are vl_permission bits, at least one";
            return std::nullopt;
        }
        if (!valid_resource(grant.resource)) {
            *why = which + "a resource is key:PREFIX, lock:PREFIX, barrier:PREFIX or *";
            return std::nullopt;
        }
        Json names = Json::array();
        for (const auto& [name, bit] : kPermissionNames)
            if (grant.permissions & bit) names.push_back(name);
        list.push_back(Json{{"permissions", names}, {"resource", grant.resource}});
    }
    return Json{{"grants", list}};
}

std::optional<Json> user_body(const char* const* roles, size_t count, std::string* why)
{
    if (!sendable(roles, count, kMaxUserRoles, "a user", "roles", why)) return std::nullopt;
    Json list = Json::array();
    for (size_t i = 0; i < count; i++) {
        if (!valid_auth_name(roles[i])) {
            *why = "role " + std::to_string(i) + ": " + kAuthNameRule;
            return std::nullopt;
        }
        list.push_back(roles[i]);
    }
    return Json{{"roles", list}};
}

char* copy_string(std::string_view text)
{
    auto* out = static_cast<char*>(std::malloc(text.size() + 1));
    if (!out) return nullptr;
    std::memcpy(out, text.data(), text.size());
    out[text.size()] = '\0';
    return out;
}

vl_kv* kv_from_json(const Json& object)
{
    auto* kv = static_cast<vl_kv*>(std::calloc(1, sizeof(vl_kv)));
    if (!kv) return nullptr;
    try {
        if (fill_kv(object, *kv)) return kv;
    } catch (...) {
        free_kv_fields(*kv);
        std::free(kv);
        throw;
    }
    std::free(kv);
    return nullptr;
}

vl_kv_list* kv_list_from_json(const Json& body)
{
    const Json& kvs = body.at("kvs");
    auto* list = static_cast<vl_kv_list*>(std::calloc(1, sizeof(vl_kv_list)));
    if (!list) return nullptr;
    try {
        list->more = body.at("more").get<bool>();
        list->revision = body.value("revision", uint64_t{0});
        if (list->more) {
            list->next_after = copy_string(body.at("next_after").get<std::string>());
            if (!list->next_after) {
                vl_kv_list_free(list);
                return nullptr;
            }
        }
        if (!kvs.empty()) {
            list->kvs = static_cast<vl_kv*>(std::calloc(kvs.size(), sizeof(vl_kv)));
            if (!list->kvs) {
                vl_kv_list_free(list);
                return nullptr;
            }
        }
        for (const Json& object : kvs) {
            if (!fill_kv(object, list->kvs[list->count])) {
                vl_kv_list_free(list);
                return nullptr;
            }
            list->count++;
        }
    } catch (...) {
        vl_kv_list_free(list);
        throw;
    }
    return list;
}

namespace {

// A count of the API (a generation, a session id): a JSON integer from 0 to 2^64-1. nlohmann's
// get<uint64_t> would take -1 as 2^64-1 and 1.5 as 1.
uint64_t whole_number(const Json& object, const char* field)
{
    const Json& value = object.at(field);
    if (!value.is_number_unsigned())
        throw std::runtime_error(std::string(field) + " is not a non-negative integer");
    return value.get<uint64_t>();
}

}  // namespace

vl_sequencer* sequencer_from_json(const Json& object)
{
    const std::string mode = object.at("mode").get<std::string>();
    if (mode != "exclusive" && mode != "shared")
        throw std::runtime_error("sequencer mode is neither exclusive nor shared");
    const std::string lock = object.at("lock").get<std::string>();
    const uint64_t generation = whole_number(object, "generation");
    const uint64_t session = whole_number(object, "session");
    auto* seq = static_cast<vl_sequencer*>(std::calloc(1, sizeof(vl_sequencer)));
    if (!seq) return nullptr;
    seq->lock = copy_string(lock);
    if (!seq->lock) {
        std::free(seq);
        return nullptr;
    }
    seq->mode = mode == "shared" ? VL_LOCK_SHARED : VL_LOCK_EXCLUSIVE;
    seq->generation = generation;
    seq->session = session;
    return seq;
}

Json sequencer_to_json(const vl_sequencer& seq)
{
    return Json{{"lock", seq.lock},
                {"mode", seq.mode == VL_LOCK_SHARED ? "shared" : "exclusive"},
                {"generation", seq.generation},
                {"session", seq.session}};
}

vl_role* role_from_json(const Json& object)
{
    return build<vl_role>(vl_role_free, [&](vl_role& role) { fill_role(object, role); });
}

vl_role_list* role_list_from_json(const Json& body)
{
    return list_from_json(body, "roles", vl_role_list_free, &vl_role_list::roles, fill_role);
}

vl_user* user_from_json(const Json& object)
{
    return build<vl_user>(vl_user_free, [&](vl_user& user) { fill_user(object, user); });
}

vl_user_list* user_list_from_json(const Json& body)
{
    return list_from_json(body, "users", vl_user_list_free, &vl_user_list::users, fill_user);
}

vl_token_list* token_list_from_json(const Json& body)
{
    return list_from_json(body, "tokens", vl_token_list_free, &vl_token_list::tokens,
                          fill_token_info);
}

vl_new_token* new_token_from_json(const Json& body)
{
    return build<vl_new_token>(vl_new_token_free, [&](vl_new_token& made) {
        made.token = must_copy(body.at("token").get<std::string>());
        made.id = must_copy(body.at("id").get<std::string>());
        made.user = must_copy(body.at("user").get<std::string>());
        made.ttl_s = body.at("ttl_s").get<uint64_t>();
        made.auth_revision = body.at("auth_revision").get<uint64_t>();
    });
}

vl_event* event_from_json(const std::string& data)
{
    const Json object = Json::parse(data);
    auto* event = static_cast<vl_event*>(std::calloc(1, sizeof(vl_event)));
    if (!event) return nullptr;
    try {
        event->revision = object.at("revision").get<uint64_t>();
        event->prev_revision = object.value("prev_revision", uint64_t{0});
        event->session = object.value("session", uint64_t{0});
        event->type = copy_string(object.at("type").get<std::string>());
        event->key = copy_string(object.value("key", std::string{}));
        event->cause = copy_string(object.value("cause", std::string{}));
        event->json = copy_string(data);
        bool complete = event->type && event->key && event->cause && event->json;
        if (complete && object.contains("value")) {
            const auto value = decode_value(object);
            if (!value) throw std::runtime_error("value is not valid base64");
            event->value = reinterpret_cast<uint8_t*>(copy_string(*value));
            event->value_len = value->size();
            complete = event->value != nullptr;
        }
        if (!complete) {
            vl_event_free(event);
            return nullptr;
        }
    } catch (...) {
        vl_event_free(event);
        throw;
    }
    return event;
}

std::vector<SseBlock> SseParser::feed(std::string_view bytes)
{
    std::vector<SseBlock> done;
    size_t start = 0;
    while (start < bytes.size()) {
        const size_t end = bytes.find('\n', start);
        if (end == std::string_view::npos) {
            partial_line_.append(bytes.substr(start));
            break;
        }
        partial_line_.append(bytes.substr(start, end - start));
        if (!partial_line_.empty() && partial_line_.back() == '\r') partial_line_.pop_back();
        take_line(partial_line_, done);
        partial_line_.clear();
        start = end + 1;
    }
    return done;
}

void SseParser::take_line(std::string_view line, std::vector<SseBlock>& done)
{
    if (line.empty()) {
        if (block_has_content_) done.push_back(std::move(block_));
        block_ = SseBlock{};
        block_has_content_ = false;
        return;
    }
    block_has_content_ = true;
    if (line.front() == ':') {
        line.remove_prefix(1);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        block_.comments.emplace_back(line);
        return;
    }
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "event") {
        block_.event = value;
    } else if (field == "data") {
        if (!block_.data.empty()) block_.data += '\n';
        block_.data += value;
    } else if (field == "id") {
        uint64_t id = 0;
        const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), id);
        if (error == std::errc{} && end == value.data() + value.size()) block_.id = id;
    }
    // "retry" and unknown fields carry nothing this client uses.
}

std::optional<uint64_t> watching_from_revision(std::string_view comment)
{
    constexpr std::string_view kPrefix = "watching from revision ";
    if (comment.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
    comment.remove_prefix(kPrefix.size());
    uint64_t revision = 0;
    const auto [end, error] =
        std::from_chars(comment.data(), comment.data() + comment.size(), revision);
    if (error != std::errc{} || end != comment.data() + comment.size()) return std::nullopt;
    return revision;
}

}  // namespace voltlock::client

// The frees of what the codec builds live with it, so the codec links on its own.
extern "C" {

void vl_string_free(char* s) { std::free(s); }

void vl_kv_free(vl_kv* kv)
{
    if (!kv) return;
    std::free(kv->key);
    std::free(kv->value);
    std::free(kv);
}

void vl_kv_list_free(vl_kv_list* list)
{
    if (!list) return;
    for (size_t i = 0; i < list->count; i++) {
        std::free(list->kvs[i].key);
        std::free(list->kvs[i].value);
    }
    std::free(list->kvs);
    std::free(list->next_after);
    std::free(list);
}

void vl_sequencer_free(vl_sequencer* seq)
{
    if (!seq) return;
    std::free(seq->lock);
    std::free(seq);
}

const char* vl_permission_name(unsigned permission)
{
    for (const auto& [name, bit] : voltlock::kPermissionNames)
        if (permission == bit) return name;
    return nullptr;
}

using voltlock::client::free_list;
using voltlock::client::free_one;

void vl_role_free(vl_role* role) { free_one(role, voltlock::client::free_role_fields); }

void vl_role_list_free(vl_role_list* list)
{
    free_list(list, &vl_role_list::roles, voltlock::client::free_role_fields);
}

void vl_user_free(vl_user* user) { free_one(user, voltlock::client::free_user_fields); }

void vl_user_list_free(vl_user_list* list)
{
    free_list(list, &vl_user_list::users, voltlock::client::free_user_fields);
}

void vl_token_list_free(vl_token_list* list)
{
    free_list(list, &vl_token_list::tokens, voltlock::client::free_token_fields);
}

void vl_new_token_free(vl_new_token* token)
{
    if (!token) return;
    std::free(token->token);
    std::free(token->id);
    std::free(token->user);
    std::free(token);
}

void vl_event_free(vl_event* event)
{
    if (!event) return;
    std::free(event->type);
    std::free(event->key);
    std::free(event->value);
    std::free(event->cause);
    std::free(event->json);
    std::free(event);
}

}  // extern "C"
