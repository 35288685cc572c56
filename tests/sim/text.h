// printf-style formatting into a std::string, for traces and violation reports (GCC 12 has no
// std::format).
#pragma once

#include <cstdarg>
#include <string>

#include "core/message.h"

namespace voltlock::sim {

std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string vstrprintf(const char* format, va_list args) __attribute__((format(printf, 1, 0)));

// One line about a message, with the fields that matter for following a trace.
std::string describe(const Message& message);

}  // namespace voltlock::sim
