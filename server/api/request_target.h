// The request target (path and query) as the client sent it, decoded strictly: a '%' not followed
// by two hex digits is 400, not a literal character of a key (issue 11), and every endpoint says
// which query parameters it takes, so a misspelt one is 400 instead of being ignored (issue 11:
// `DELETE /v1/kv/?prefix=true&dry=1` deleted every key). Pure.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/translate.h"

namespace voltlock::api {

struct Target {
    std::string path;  // percent-decoded; '+' stays '+'
    // In the order given, percent-decoded, '+' read as a space (form encoding).
    std::vector<std::pair<std::string, std::string>> query;

    bool has(std::string_view name) const;
    // The value of `name`, if given ("" for a bare `?name`).
    std::optional<std::string> get(std::string_view name) const;
};

// Splits and decodes a raw request target ("/v1/kv/a%2Fb?prefix=true", or the absolute form
// "http://host/v1/kv/a%2Fb?prefix=true"). A raw space or control byte, a bad escape, a
// parameter given twice, or more than 64 parameters, is 400 `invalid_argument` naming where.
Parsed<Target> parse_target(std::string_view raw);

// 400 `unknown_field` (details: the parameter, and the ones the endpoint takes) for the first
// query parameter not in `allowed`.
std::optional<ApiError> check_query(const Target& target,
                                    std::initializer_list<std::string_view> allowed);
std::optional<ApiError> check_query(const Target& target, const std::vector<std::string>& allowed);

}  // namespace voltlock::api
