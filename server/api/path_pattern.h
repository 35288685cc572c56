// A route's path pattern: literal text around at most one placeholder, matched against the
// decoded path in one pass (the router tries every route of a method in turn, per request, so
// this is on every request's path; std::regex cost 3-4% of a leader's CPU under lock traffic).
//
//     /v1/sessions                 the literal path
//     /v1/sessions/{id}:keepalive  {id}: one segment, at least one byte, no '/'
//     /v1/locks/{name+}:acquire    {name+}: at least one byte, anything ('/' and ':' too)
//     /v1/kv/{key*}                {key*}: anything, or nothing
//
// Literal text after a placeholder anchors it at the path's end, so a name may itself hold the
// suffix: "/v1/locks/a:acquire:acquire" names the lock "a:acquire".
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace voltlock::api {

class PathPattern {
public:
    // Throws std::invalid_argument on a pattern outside the forms above (a programming error).
    explicit PathPattern(std::string_view pattern);

    // The placeholder's text ("" without one) if `path` matches, nullopt otherwise.
    std::optional<std::string_view> match(std::string_view path) const;

private:
    enum class Kind { none, segment, one_or_more, any };
    std::string prefix_;
    std::string suffix_;
    Kind kind_ = Kind::none;
};

}  // namespace voltlock::api
