#include "model.h"

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

struct alignas(8) Scratch {
    uint8_t bytes[VL_MESSAGE_WORDS * 8];
};

XdpOutcome on_prepare(KernelModel& m, std::span<const uint8_t> frame, uint32_t len)
{
    std::vector<uint8_t> same(frame.begin(), frame.end());
    vl_header h{};
    std::memcpy(&h, &frame[payload_at], sizeof h);
    uint32_t stat = vl_check_prepare(&h);
    if (stat != VL_STAT_NONE) return verdict(xdp_pass, stat, same);

    static Scratch s;
    std::memcpy(s.bytes, &frame[payload_at], len);
    if (vl_checksum_words(s.bytes, len) != h.checksum)
        return verdict(xdp_pass, VL_STAT_XDP_BAD_CHECKSUM, same);
    if (!vl_prepare_entries_ok(s.bytes + VL_HEADER_BYTES, len - VL_HEADER_BYTES, h.batch_count))
        return verdict(xdp_pass, VL_STAT_XDP_MALFORMED, same);

    vl_fast_ack_decision d = vl_fast_ack_decide(&m.state.state, m.state.enabled,
                                                vl_fast_ack_last_op(&m.state.state, &m.log),
                                                m.replica, &h);
    if (d.verdict == VL_FAST_ACK_PASS) return verdict(xdp_pass, d.stat, same);
    if (d.verdict == VL_FAST_ACK_APPEND) {
        if (m.ring_full) return verdict(xdp_pass, VL_STAT_FA_RING_FULL, same);
        m.ring.emplace_back(s.bytes, s.bytes + len);
        d = vl_fast_ack_commit(&m.state.state, m.state.enabled, &m.log, m.replica, &h);
        if (d.verdict == VL_FAST_ACK_PASS) return verdict(xdp_pass, d.stat, same);
    }
    vl_header ack{};
    vl_prepare_ok_init(&ack, m.cluster_id, m.replica, h.view, h.op, VL_FLAG_KERNEL_ACK);
    return verdict(xdp_tx, d.stat, prepare_ok_frame(frame, ack));
}

XdpOutcome on_prepare_ok(KernelModel& m, std::span<const uint8_t> frame)
{
    std::vector<uint8_t> same(frame.begin(), frame.end());
    vl_header h{};
    std::memcpy(&h, &frame[payload_at], sizeof h);
    const uint32_t stat = vl_check_prepare_ok(&h);
    if (stat == VL_STAT_Q_FORGED) return verdict(xdp_drop, stat, same);
    if (stat != VL_STAT_NONE) return verdict(xdp_pass, stat, same);
    if (vl_checksum_words(&h, VL_HEADER_BYTES) != h.checksum)
        return verdict(xdp_pass, VL_STAT_XDP_BAD_CHECKSUM, same);
    if (!vl_quorum_sender_ok(h.replica, m.replica, m.replica_count))
        return verdict(xdp_pass, VL_STAT_Q_INVALID, same);
    vl_follower_ack_update(&m.acked[h.replica], h.view, h.op);
    if (!vl_quorum_active(&m.state.state, m.state.enabled, m.replica))
        return verdict(xdp_pass, VL_STAT_Q_DISABLED, same);
    vl_quorum_slot& slot = m.slots[vl_quorum_slot_index(h.op, m.quorum_slot_mask)];
    const vl_quorum_decision d =
        vl_quorum_count(&slot, h.view, h.op, h.replica, m.replica, m.replica_count);
    switch (d.verdict) {
    case VL_QUORUM_COMPLETE: {
        h.flags = static_cast<uint16_t>(h.flags | VL_FLAG_QUORUM);
        h.checksum = vl_checksum_words(&h, VL_HEADER_BYTES);
        std::memcpy(&same[payload_at], &h, sizeof h);
        same[eth + ip + 6] = 0;
        same[eth + ip + 7] = 0;
        return verdict(xdp_pass, d.stat, same);
    }
    case VL_QUORUM_COUNT_AND_DROP:
    case VL_QUORUM_DUPLICATE_DROP:
        return verdict(xdp_drop, d.stat, same);
    default:
        return verdict(xdp_pass, d.stat, same);
    }
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
    vl_header h{};
    std::memcpy(&h, &frame[payload_at], sizeof h);
    const uint32_t stat = vl_check_header(&h, len, m.cluster_id, m.replica_count);
    if (stat != VL_STAT_NONE) return verdict(xdp_pass, stat, same);
    const vl_peer& peer = m.peers[h.replica];
    if (!(peer.flags & VL_PEER_CONFIGURED) || peer.ipv4_be != raw32(frame, eth + 12) ||
        peer.port_be != raw16(frame, eth + ip))
        return verdict(xdp_pass, VL_STAT_XDP_NOT_PEER, same);
    if (h.type == VL_MSG_PREPARE) return on_prepare(m, frame, len);
    if (h.type == VL_MSG_PREPARE_OK) return on_prepare_ok(m, frame);
    return verdict(xdp_pass, VL_STAT_XDP_OTHER_TYPE, same);
}

}  // namespace voltlock::bpf_test
