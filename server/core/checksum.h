// CRC-32C (Castagnoli), the checksum over snapshots: at rest in RocksDB, per chunk on the wire
// between replicas, and whole. Pure, table-driven; a flipped bit anywhere changes the result.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace voltlock {

namespace detail {
constexpr std::array<uint32_t, 256> crc32c_table()
{
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
    return table;
}
inline constexpr std::array<uint32_t, 256> kCrc32cTable = crc32c_table();
}  // namespace detail

// Continues `crc` (0 to start) over `data`: crc32c(a + b) == crc32c(b, crc32c(a)).
constexpr uint32_t crc32c(std::string_view data, uint32_t crc = 0)
{
    crc = ~crc;
    for (const char ch : data)
        crc = detail::kCrc32cTable[(crc ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

static_assert(crc32c("123456789") == 0xE3069283u, "the CRC-32C check value");

}  // namespace voltlock
