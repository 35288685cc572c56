#include "api/path_pattern.h"

#include <stdexcept>

namespace voltlock::api {

PathPattern::PathPattern(std::string_view pattern)
{
    const size_t open = pattern.find('{');
    if (open == std::string_view::npos) {
        prefix_ = pattern;
        return;
    }
    const size_t close = pattern.find('}', open);
    if (close == std::string_view::npos || pattern.find('{', close) != std::string_view::npos ||
        close == open + 1)
        throw std::invalid_argument("path pattern '" + std::string(pattern) +
                                    "': one {placeholder} at most");
    const std::string_view name = pattern.substr(open + 1, close - open - 1);
    kind_ = name.ends_with('+') ? Kind::one_or_more : name.ends_with('*') ? Kind::any
                                                                          : Kind::segment;
    prefix_ = pattern.substr(0, open);
    suffix_ = pattern.substr(close + 1);
}

std::optional<std::string_view> PathPattern::match(std::string_view path) const
{
    if (kind_ == Kind::none) {
        if (path == prefix_) return std::string_view();
        return std::nullopt;
    }
    if (path.size() < prefix_.size() + suffix_.size() || !path.starts_with(prefix_) ||
        !path.ends_with(suffix_))
        return std::nullopt;
    const std::string_view held =
        path.substr(prefix_.size(), path.size() - prefix_.size() - suffix_.size());
    if (kind_ != Kind::any && held.empty()) return std::nullopt;
    if (kind_ == Kind::segment && held.find('/') != std::string_view::npos) return std::nullopt;
    return held;
}

}  // namespace voltlock::api
