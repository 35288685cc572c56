// The replication message decoder (server/core/message.cpp decode), which every datagram a
// replica receives goes through before anything of it is believed. A random datagram almost
// never carries a valid tag, so the target first stamps the input with the tag it should carry
// (message_tag, over the header with the tag taken as zero, as the sender does): the fuzzer then
// explores the header and body parsers instead of the checksum. The first input byte picks the
// cell: a plain checksum, or a replication key (the SipHash MAC path). Properties: no crash, and
// what decodes encodes back to the same datagram (the decoder accepts one encoding per message).
#include <cstring>
#include <vector>

#include "core/message.h"
#include "fuzz_check.h"

using namespace voltlock;

namespace {

constexpr uint32_t kClusterId = 7;

CellWire cell_wire(bool keyed)
{
    vl_mac_keys keys{};
    if (keyed) {
        keys.count = 1;
        keys.key[0] = vl_mac_key{0x0706050403020100u, 0x0f0e0d0c0b0a0908u};
    }
    return CellWire(kClusterId, keys);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size < 1) return 0;
    const CellWire wire = cell_wire(data[0] & 1);
    std::vector<uint8_t> datagram(data + 1, data + size);
    if (datagram.size() >= sizeof(vl_header)) {
        const uint64_t tag = message_tag(datagram.data(), static_cast<uint32_t>(datagram.size()),
                                         wire);
        std::memcpy(datagram.data() + offsetof(vl_header, checksum), &tag, sizeof(tag));
    }
    auto decoded = decode(datagram, wire);
    if (!decoded.ok()) {
        FUZZ_REQUIRE(decode_error_name(decoded.error()) != nullptr);
        return 0;
    }
    FUZZ_REQUIRE(message_name(decoded.value().message) != nullptr);
    const std::vector<uint8_t> again = encode(decoded.value().message, wire,
                                              decoded.value().flags);
    FUZZ_REQUIRE(again == datagram);
    FUZZ_REQUIRE(encoded_size(decoded.value().message) == again.size());
    return 0;
}
