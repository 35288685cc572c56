// Test bytes that neither repeat nor compress: no two offsets share a pattern by accident, and
// RocksDB cannot store them in fewer bytes than a full-disk test needs to write.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace voltlock {

inline Bytes noise(size_t size, uint64_t seed)
{
    Bytes out(size, '\0');
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (char& ch : out) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ch = static_cast<char>(x);
    }
    return out;
}

}  // namespace voltlock
