// Reading little-endian fields from a bounded buffer: the primitives under every decoder in the
// core (wire messages, lock-service ops and results). Every read is checked against what is
// left; a failed read consumes nothing and returns false. Fields are read in place, which
// wire.h's little-endian-host assertion makes correct.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "core/types.h"
#include "voltlock/wire.h"

namespace voltlock {

class ByteReader {
public:
    explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
    explicit ByteReader(std::string_view in)
        : in_(reinterpret_cast<const uint8_t*>(in.data()), in.size())
    {
    }

    bool u8(uint8_t& v) { return get(&v, sizeof v); }
    bool u16(uint16_t& v) { return get(&v, sizeof v); }
    bool u32(uint32_t& v) { return get(&v, sizeof v); }
    bool u64(uint64_t& v) { return get(&v, sizeof v); }
    bool bytes(Bytes& out, size_t n)
    {
        if (n > remaining()) return false;
        out.assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
        pos_ += n;
        return true;
    }
    bool rest(Bytes& out) { return bytes(out, remaining()); }
    size_t remaining() const { return in_.size() - pos_; }
    bool done() const { return pos_ == in_.size(); }

private:
    bool get(void* p, size_t n)
    {
        if (n > remaining()) return false;
        std::memcpy(p, in_.data() + pos_, n);
        pos_ += n;
        return true;
    }

    std::span<const uint8_t> in_;
    size_t pos_ = 0;
};

}  // namespace voltlock
