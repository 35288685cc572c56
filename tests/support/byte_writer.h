// Appending little-endian fields to a string, for the tests that build hostile snapshots byte by
// byte (the core's own encoders use core/codec.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/types.h"

namespace voltlock {

class ByteWriter {
public:
    explicit ByteWriter(Bytes& out) : out_(out) {}
    void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
    void u16(uint16_t v) { put_le(v, 2); }
    void u32(uint32_t v) { put_le(v, 4); }
    void u64(uint64_t v) { put_le(v, 8); }
    void bytes(std::string_view s) { out_.append(s); }
    size_t size() const { return out_.size(); }

private:
    void put_le(uint64_t v, int count)
    {
        for (int i = 0; i < count; i++) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    }
    Bytes& out_;
};

}  // namespace voltlock
