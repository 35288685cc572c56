#include "model.h"

#include <algorithm>
#include <cstring>

namespace voltlock::bpf_test {

namespace {

constexpr uint32_t eth = 14, ip = 20, udp = 8, payload_at = eth + ip + udp;

uint16_t be16(std::span<const uint8_t> f, size_t at)
{
    return static_cast<uint16_t>((f[at] << 8) | f[at + 1]);
}

uint32_t raw32(std::span<const uint8_t> f, size_t at)  // memory order, as the kernel compares
{
    uint32_t v = 0;
    std::memcpy(&v, &f[at], 4);
    return v;
}

uint16_t raw16(std::span<const uint8_t> f, size_t at)
{
    uint16_t v = 0;
    std::memcpy(&v, &f[at], 2);
    return v;
}

XdpOutcome verdict(uint32_t action, uint32_t stat, std::vector<uint8_t> frame)
{
    return XdpOutcome{.action = action, .stat = stat, .frame = std::move(frame)};
}

// The frame the program sends back for `ack`: the first payload_at bytes of `in`, readdressed.
std::vector<uint8_t> prepare_ok_frame(std::span<const uint8_t> in, const vl_header& ack)
{
    std::vector<uint8_t> f(in.begin(), in.begin() + payload_at);
    std::swap_ranges(f.begin(), f.begin() + 6, f.begin() + 6);
    std::swap_ranges(f.begin() + eth + 12, f.begin() + eth + 16, f.begin() + eth + 16);
    const uint16_t ip_len = ip + udp + VL_HEADER_BYTES;
    f[eth + 2] = static_cast<uint8_t>(ip_len >> 8);
    f[eth + 3] = static_cast<uint8_t>(ip_len);
    f[eth + 8] = 64;
    const uint16_t check = vl_ipv4_header_checksum(&f[eth]);
    std::memcpy(&f[eth + 10], &check, 2);
    std::swap_ranges(f.begin() + eth + ip, f.begin() + eth + ip + 2, f.begin() + eth + ip + 2);
    const uint16_t udp_len = udp + VL_HEADER_BYTES;
    f[eth + ip + 4] = static_cast<uint8_t>(udp_len >> 8);
    f[eth + ip + 5] = static_cast<uint8_t>(udp_len);
    f[eth + ip + 6] = 0;
    f[eth + ip + 7] = 0;
    const auto* bytes = reinterpret_cast<const uint8_t*>(&ack);
    f.insert(f.end(), bytes, bytes + sizeof ack);
    return f;
}

}  // namespace

XdpOutcome model_xdp(KernelModel& m, std::span<const uint8_t> frame)
{
    std::vector<uint8_t> same(frame.begin(), frame.end());
    if (frame.size() < eth || be16(frame, 12) != 0x0800)
        return verdict(xdp_pass, VL_STAT_XDP_NOT_IPV4, same);
    if (frame.size() < eth + ip) return verdict(xdp_pass, VL_STAT_XDP_NOT_UDP, same);
    if ((frame[eth] >> 4) != 4) return verdict(xdp_pass, VL_STAT_XDP_NOT_IPV4, same);
    if (frame[eth + 9] != 17) return verdict(xdp_pass, VL_STAT_XDP_NOT_UDP, same);
    if ((frame[eth] & 0x0F) != 5) return verdict(xdp_pass, VL_STAT_XDP_IP_OPTIONS, same);
    if (be16(frame, eth + 6) & 0x3FFF) return verdict(xdp_pass, VL_STAT_XDP_IP_FRAGMENT, same);
    if (frame.size() < payload_at) return verdict(xdp_pass, VL_STAT_XDP_NOT_UDP, same);
    if (be16(frame, eth + ip + 2) != m.replication_port)
        return verdict(xdp_pass, VL_STAT_XDP_NOT_OUR_PORT, same);
    const uint32_t udp_len = be16(frame, eth + ip + 4);
    if (udp_len < udp || be16(frame, eth + 2) != ip + udp_len || eth + ip + udp_len > frame.size())
        return verdict(xdp_pass, VL_STAT_XDP_TRUNCATED, same);
    const uint32_t len = udp_len - udp;
    if (frame.size() < payload_at + VL_HEADER_BYTES)
        return verdict(xdp_pass, VL_STAT_XDP_TRUNCATED, same);
    // Which configured peers the frame's source address is (the program compares it with
    // peers[header.replica] once the header is checked).
    uint32_t source_peers = 0;
    for (uint32_t r = 0; r < VL_MAX_REPLICAS; r++) {
        const vl_peer& peer = m.peers[r];
        if ((peer.flags & VL_PEER_CONFIGURED) && peer.ipv4_be == raw32(frame, eth + 12) &&
            peer.port_be == raw16(frame, eth + ip))
            source_peers |= 1u << r;
    }
    electrode_model::XdpPayloadOutcome out =
        electrode_model::model_xdp_payload(m, frame.subspan(payload_at, len), source_peers);
    if (out.action == xdp_tx) {
        vl_header ack{};
        std::memcpy(&ack, out.payload.data(), sizeof ack);
        return verdict(xdp_tx, out.stat, prepare_ok_frame(frame, ack));
    }
    if (out.rewritten) {
        std::copy(out.payload.begin(), out.payload.end(), same.begin() + payload_at);
        same[eth + ip + 6] = 0;  // UDP checksum: none
        same[eth + ip + 7] = 0;
    }
    return verdict(out.action, out.stat, same);
}

}  // namespace voltlock::bpf_test
