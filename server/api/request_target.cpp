#include "api/request_target.h"

#include <algorithm>

namespace voltlock::api {

namespace {

// No endpoint takes more than a handful: the cap keeps the check for repeats cheap.
constexpr size_t kMaxQueryParameters = 64;

int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Decodes %XX escapes (and '+' as a space in the query); nullopt on a bad escape.
std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space)
{
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); i++) {
        const char c = text[i];
        if (c == '%') {
            if (i + 2 >= text.size()) return std::nullopt;
            const int high = hex_digit(text[i + 1]);
            const int low = hex_digit(text[i + 2]);
            if (high < 0 || low < 0) return std::nullopt;
            out.push_back(static_cast<char>(high * 16 + low));
            i += 2;
        } else if (c == '+' && plus_is_space) {
            out.push_back(' ');
        } else {
            out.push_back(c);
        }
    }
    return out;
}

ApiError bad_escape(std::string_view where, std::string_view text)
{
    return ApiError{400, "invalid_argument",
                    std::string(where) + ": '" + std::string(text) +
                        "' has a '%' that is not followed by two hex digits (write '%' as %25)",
                    Json{{"field", where}, {"violation", "bad percent-encoding"}}};
}

template <typename Names>
std::optional<ApiError> first_unknown(const Target& target, const Names& allowed)
{
    for (const auto& [name, value] : target.query) {
        if (std::find(allowed.begin(), allowed.end(), name) != allowed.end()) continue;
        Json names = Json::array();
        for (const auto& a : allowed) names.push_back(std::string(a));
        return ApiError{400, "unknown_field",
                        "query parameter '" + name + "' is not one this endpoint takes" +
                            (allowed.size() == 0 ? std::string(" (it takes none)")
                                                 : std::string()),
                        Json{{"field", name}, {"in", "query"}, {"allowed", names}}};
    }
    return std::nullopt;
}

// "/path?query" of a target in the absolute form ("http://host:port/path?query", RFC 9112
// 3.2.2, which proxies send); any other target as it is. The path may come out empty
// ("http://host?query"): there that is "/".
std::string_view without_scheme_and_authority(std::string_view raw)
{
    for (std::string_view scheme : {"http://", "https://"}) {
        const bool match = raw.size() >= scheme.size() &&
                           std::equal(scheme.begin(), scheme.end(), raw.begin(),
                                      [](char s, char r) { return s == (r | 0x20); });
        if (!match) continue;
        const size_t path = raw.find_first_of("/?", scheme.size());
        return path == std::string_view::npos ? std::string_view() : raw.substr(path);
    }
    return raw;
}

}  // namespace

bool Target::has(std::string_view name) const { return get(name).has_value(); }

std::optional<std::string> Target::get(std::string_view name) const
{
    for (const auto& [n, value] : query)
        if (n == name) return value;
    return std::nullopt;
}

Parsed<Target> parse_target(std::string_view raw)
{
    // libmicrohttpd takes the target to be everything between the method and the last space,
    // so a raw space (or tab, or any control byte) would otherwise reach a key.
    const auto raw_control = std::find_if(raw.begin(), raw.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
    });
    if (raw_control != raw.end())
        return ApiError{400, "invalid_argument",
                        "the request target has a raw space or control character at byte " +
                            std::to_string(raw_control - raw.begin()) +
                            " (percent-encode it: a space is %20)",
                        Json{{"field", "target"}, {"violation", "raw space or control character"}}};
    const std::string_view origin = without_scheme_and_authority(raw);
    const bool absolute = origin.size() != raw.size();
    raw = origin;
    const size_t question = raw.find('?');
    const std::string_view raw_path = raw.substr(0, question);
    Target target;
    auto path = percent_decode(raw_path, false);
    if (!path) return bad_escape("path", raw_path);
    target.path = path->empty() && absolute ? "/" : std::move(*path);
    if (question == std::string_view::npos) return target;
    std::string_view rest = raw.substr(question + 1);
    while (!rest.empty()) {
        const size_t amp = rest.find('&');
        const std::string_view pair = rest.substr(0, amp);
        rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
        if (pair.empty()) continue;
        const size_t equals = pair.find('=');
        const std::string_view raw_name = pair.substr(0, equals);
        const std::string_view raw_value =
            equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1);
        auto name = percent_decode(raw_name, true);
        if (!name) return bad_escape("query", raw_name);
        auto value = percent_decode(raw_value, true);
        if (!value) return bad_escape(*name, raw_value);
        if (target.query.size() == kMaxQueryParameters)
            return ApiError{400, "invalid_argument",
                            "the query has more than " + std::to_string(kMaxQueryParameters) +
                                " parameters",
                            Json{{"field", "query"}, {"violation", "too many parameters"},
                                 {"limit", kMaxQueryParameters}}};
        if (target.has(*name))
            return ApiError{400, "invalid_argument",
                            "query parameter '" + *name + "' is given more than once",
                            Json{{"field", *name}, {"violation", "given more than once"}}};
        target.query.emplace_back(std::move(*name), std::move(*value));
    }
    return target;
}

std::optional<ApiError> check_query(const Target& target,
                                    std::initializer_list<std::string_view> allowed)
{
    return first_unknown(target, allowed);
}

std::optional<ApiError> check_query(const Target& target, const std::vector<std::string>& allowed)
{
    return first_unknown(target, allowed);
}

}  // namespace voltlock::api
