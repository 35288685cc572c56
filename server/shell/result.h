// What OS-facing code returns: a value, or an error number with the context it happened in.
// No exceptions cross module boundaries.
#pragma once

#include <cstring>
#include <string>
#include <utility>
#include <variant>

namespace voltlock {

struct Error {
    int code = 0;         // errno, or 0 for errors that are not the OS's
    std::string context;  // what was being done, naming the thing it was done to

    std::string message() const
    {
        return code == 0 ? context : context + ": " + std::strerror(code);
    }
};

template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : value_(std::move(value)) {}
    Result(Error error) : value_(std::move(error)) {}

    bool ok() const { return std::holds_alternative<T>(value_); }
    T& value() { return std::get<T>(value_); }
    const T& value() const { return std::get<T>(value_); }
    const Error& error() const { return std::get<Error>(value_); }

private:
    std::variant<T, Error> value_;
};

struct Ok {};

inline Error os_error(std::string context) { return Error{errno, std::move(context)}; }

}  // namespace voltlock
