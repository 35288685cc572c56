// Assertions that stay on in release builds (TigerBeetle's rule): a replica that finds its own
// state inconsistent stops rather than replicate a mistake.
#pragma once

namespace voltlock {
[[noreturn]] void assertion_failed(const char* expr, const char* file, int line, const char* why);
}

#define VL_ASSERT(expr, why)                                                 \
    do {                                                                     \
        if (!(expr)) ::voltlock::assertion_failed(#expr, __FILE__, __LINE__, why); \
    } while (0)
