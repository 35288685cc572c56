#include "core/register_machine.h"

#include <cstring>
#include <utility>

#include "core/codec.h"
#include "voltlock/wire.h"

namespace voltlock {

namespace {
constexpr uint32_t kSnapshotMagic = 0x31524C56;  // "VLR1" in little-endian byte order

// What the register's snapshot holds.
struct RegisterState {
    uint64_t version = 0;
    uint64_t digest = 0;
    Bytes value;  // one payload: it fits a datagram, and the u32 length
};

template <typename Io, codec::MaybeConst<RegisterState> R>
bool fields(Io& io, R& r)
{
    uint32_t magic = kSnapshotMagic;
    return io.u32(magic) && magic == kSnapshotMagic && io.u64(r.version) && io.u64(r.digest) &&
           io.template str<uint32_t>(r.value);
}
}  // namespace

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

Bytes RegisterMachine::snapshot() const
{
    return codec::encode(RegisterState{version_, digest_, value_}).value();
}

bool RegisterMachine::restore(std::string_view snapshot)
{
    auto state = codec::decode<RegisterState>(snapshot);
    if (!state) return false;
    // Before the first write there is neither a digest nor a value.
    if (state->version == 0 && (state->digest != 0 || !state->value.empty())) return false;
    version_ = state->version;
    digest_ = state->digest;
    value_ = std::move(state->value);
    return true;
}

}  // namespace voltlock
