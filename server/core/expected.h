// A value or the error explaining why there is none: the one result type of core, shell and api
// (std::expected is C++23). Every layer names its own error type: the core's decoders return
// an enum naming the rejection, OS-facing code an errno with context (shell/result.h), the HTTP
// layer the ApiError a client sees (api/translate.h).
#pragma once

#include <utility>
#include <variant>

namespace voltlock {

template <typename T, typename E>
class [[nodiscard]] Expected {
public:
    Expected(T value) : value_(std::in_place_index<0>, std::move(value)) {}
    Expected(E error) : value_(std::in_place_index<1>, std::move(error)) {}

    bool ok() const { return value_.index() == 0; }
    T& value() & { return std::get<0>(value_); }
    const T& value() const& { return std::get<0>(value_); }
    T&& value() && { return std::get<0>(std::move(value_)); }
    const E& error() const& { return std::get<1>(value_); }
    E&& error() && { return std::get<1>(std::move(value_)); }

private:
    std::variant<T, E> value_;
};

}  // namespace voltlock

// `auto x = VL_TRY(f());` is x = f()'s value, or returns f()'s error from the enclosing function
// (whose Expected must take that error type). A GNU statement expression, as in the Linux
// kernel and glibc; `__extension__` tells -Wpedantic it is meant.
#define VL_TRY(expr)                                                     \
    __extension__({                                                      \
        auto vl_try_result = (expr);                                     \
        if (!vl_try_result.ok()) return std::move(vl_try_result).error(); \
        std::move(vl_try_result).value();                                \
    })
