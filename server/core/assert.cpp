#include "core/assert.h"

#include <cstdio>
#include <cstdlib>

namespace voltlock {

void assertion_failed(const char* expr, const char* file, int line, const char* why)
{
    std::fprintf(stderr, "voltlock: assertion failed at %s:%d: %s (%s)\n", file, line, expr, why);
    std::abort();
}

}  // namespace voltlock
