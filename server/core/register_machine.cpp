#include "core/register_machine.h"

#include <cstring>

#include "voltlock/wire.h"

namespace voltlock {

uint64_t RegisterMachine::next_digest(uint64_t digest, const Bytes& value)
{
    const uint64_t value_hash = vl_checksum(reinterpret_cast<const uint8_t*>(value.data()),
                                            static_cast<uint32_t>(value.size()));
    return vl_checksum_mix(digest ^ VL_CHECKSUM_SEED, value_hash);
}

Bytes RegisterMachine::apply(Op, const Entry& entry)
{
    const Bytes& payload = entry.payload;
    if (is_write(payload)) {
        value_ = payload.substr(1);
        version_ += 1;
        digest_ = next_digest(digest_, value_);
    } else if (payload != read_op()) {
        return "unknown operation";
    }
    Bytes result(16, '\0');
    std::memcpy(result.data(), &version_, 8);
    std::memcpy(result.data() + 8, &digest_, 8);
    return result;
}

bool RegisterMachine::parse_result(const Bytes& result, Result& out)
{
    if (result.size() != 16) return false;
    std::memcpy(&out.version, result.data(), 8);
    std::memcpy(&out.digest, result.data() + 8, 8);
    return true;
}

}  // namespace voltlock
