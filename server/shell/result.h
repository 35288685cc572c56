// What OS-facing code returns: a value, or an error number with the context it happened in.
// No exceptions cross module boundaries.
#pragma once

#include <cstring>
#include <string>
#include <utility>

#include "core/expected.h"

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
using Result = Expected<T, Error>;

struct Ok {};

inline Error os_error(std::string context) { return Error{errno, std::move(context)}; }

}  // namespace voltlock
