#include "codec.h"

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

bool valid_name(const char* name)
{
    if (name == nullptr) return false;
    const size_t length = std::strlen(name);
    if (length == 0 || length > 512) return false;
    for (size_t i = 0; i < length; i++) {
        const auto ch = static_cast<unsigned char>(name[i]);
        if (ch < 0x20 || ch == 0x7f) return false;
    }
    return true;
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

vl_sequencer* sequencer_from_json(const Json& object)
{
    const std::string mode = object.at("mode").get<std::string>();
    if (mode != "exclusive" && mode != "shared")
        throw std::runtime_error("sequencer mode is neither exclusive nor shared");
    const std::string lock = object.at("lock").get<std::string>();
    const auto generation = object.at("generation").get<uint64_t>();
    const auto session = object.at("session").get<uint64_t>();
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
