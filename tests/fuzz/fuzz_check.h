// What every fuzz target shares: FUZZ_REQUIRE, a property the code under test promises, checked
// on each input. A broken one aborts, which libFuzzer reports as a crash with the input saved.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#define FUZZ_REQUIRE(expr)                                                             \
    do {                                                                               \
        if (!(expr)) {                                                                 \
            std::fprintf(stderr, "%s:%d: property broken: %s\n", __FILE__, __LINE__, #expr); \
            std::abort();                                                              \
        }                                                                              \
    } while (0)

namespace voltlock::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size)
{
    return {reinterpret_cast<const char*>(data), size};
}

}  // namespace voltlock::fuzz
