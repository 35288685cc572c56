#include "core/register_machine.h"

#include <cstring>
#include <utility>

#include "core/byte_reader.h"
#include "core/byte_writer.h"
#include "voltlock/wire.h"

namespace voltlock {

namespace {
constexpr uint32_t kSnapshotMagic = 0x31524C56;  // "VLR1" in little-endian byte order
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
    Bytes out;
    ByteWriter w(out);
    w.u32(kSnapshotMagic);
    w.u64(version_);
    w.u64(digest_);
    w.u32(static_cast<uint32_t>(value_.size()));  // a value is one payload: it fits a datagram
    w.bytes(value_);
    return out;
}

bool RegisterMachine::restore(std::string_view snapshot)
{
    ByteReader in(snapshot);
    uint32_t magic = 0;
    uint64_t version = 0;
    uint64_t digest = 0;
    uint32_t value_size = 0;
    Bytes value;
    if (!(in.u32(magic) && magic == kSnapshotMagic && in.u64(version) && in.u64(digest) &&
          in.u32(value_size) && in.bytes(value, value_size) && in.done()))
        return false;
    // Before the first write there is neither a digest nor a value.
    if (version == 0 && (digest != 0 || !value.empty())) return false;
    version_ = version;
    digest_ = digest;
    value_ = std::move(value);
    return true;
}

}  // namespace voltlock
