#include "electrode_model.h"

#include <cstring>

namespace voltlock::electrode_model {

namespace {

std::vector<uint8_t> copy(std::span<const uint8_t> bytes)
{
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

XdpPayloadOutcome verdict(uint32_t action, uint32_t stat, std::vector<uint8_t> payload,
                          bool rewritten = false)
{
    return XdpPayloadOutcome{.action = action,
                             .stat = stat,
                             .payload = std::move(payload),
                             .rewritten = rewritten};
}

// bad_tag() of electrode_xdp.bpf.c: a forged MAC is dropped, a bad checksum goes up.
XdpPayloadOutcome bad_tag(uint32_t stat, std::span<const uint8_t> payload)
{
    return verdict(stat == VL_STAT_XDP_BAD_MAC ? xdp_drop : xdp_pass, stat, copy(payload));
}

// The program's per-CPU scratch buffer: the message, 8-byte aligned, with room for whole words.
struct alignas(8) Scratch {
    uint8_t bytes[VL_MESSAGE_WORDS * 8];
};

// on_prepare() of electrode_xdp.bpf.c: a Prepare from peers[h.replica], header checked.
XdpPayloadOutcome on_prepare(KernelModel& m, std::span<const uint8_t> payload)
{
    vl_header h{};
    std::memcpy(&h, payload.data(), sizeof h);
    uint32_t stat = vl_check_prepare(&h);
    if (stat != VL_STAT_NONE) return verdict(xdp_pass, stat, copy(payload));

    const auto len = static_cast<uint32_t>(payload.size());
    static Scratch s;
    std::memcpy(s.bytes, payload.data(), len);
    stat = vl_check_tag(s.bytes, len, &m.keys);
    if (stat != VL_STAT_NONE) return bad_tag(stat, payload);
    if (!vl_prepare_entries_ok(s.bytes + VL_HEADER_BYTES, len - VL_HEADER_BYTES, h.batch_count))
        return verdict(xdp_pass, VL_STAT_XDP_MALFORMED, copy(payload));

    vl_fast_ack_decision d = vl_fast_ack_decide(&m.state.state, m.state.enabled,
                                                vl_fast_ack_last_op(&m.state.state, &m.log),
                                                m.replica, &h);
    if (d.verdict == VL_FAST_ACK_PASS) return verdict(xdp_pass, d.stat, copy(payload));
    if (d.verdict == VL_FAST_ACK_APPEND) {
        // Into the ring first, then the second look (under the lock, in the program).
        if (m.ring_full) return verdict(xdp_pass, VL_STAT_FA_RING_FULL, copy(payload));
        m.ring.emplace_back(s.bytes, s.bytes + len);
        d = vl_fast_ack_commit(&m.state.state, m.state.enabled, &m.log, m.replica, &h);
        if (d.verdict == VL_FAST_ACK_PASS) return verdict(xdp_pass, d.stat, copy(payload));
    }
    vl_header ack{};
    vl_prepare_ok_init(&ack, m.cluster_id, m.replica, h.view, h.op, VL_FLAG_KERNEL_ACK, &m.keys);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&ack);
    return verdict(xdp_tx, d.stat, std::vector<uint8_t>(bytes, bytes + sizeof ack));
}

// on_prepare_ok() of electrode_xdp.bpf.c: a PrepareOK from peers[h.replica], header checked.
XdpPayloadOutcome on_prepare_ok(KernelModel& m, std::span<const uint8_t> payload)
{
    vl_header h{};
    std::memcpy(&h, payload.data(), sizeof h);
    uint32_t stat = vl_check_prepare_ok(&h);
    if (stat == VL_STAT_Q_FORGED) return verdict(xdp_drop, stat, copy(payload));
    if (stat != VL_STAT_NONE) return verdict(xdp_pass, stat, copy(payload));
    stat = vl_check_tag(&h, VL_HEADER_BYTES, &m.keys);
    if (stat != VL_STAT_NONE) return bad_tag(stat, payload);
    if (!vl_quorum_sender_ok(h.replica, m.replica, m.replica_count))
        return verdict(xdp_pass, VL_STAT_Q_INVALID, copy(payload));
    vl_follower_ack_update(&m.acked[h.replica], h.view, h.op);
    if (!vl_quorum_active(&m.state.state, m.state.enabled, m.replica))
        return verdict(xdp_pass, VL_STAT_Q_DISABLED, copy(payload));
    vl_quorum_slot& slot = m.slots[vl_quorum_slot_index(h.op, m.quorum_slot_mask)];
    const vl_quorum_decision d =
        vl_quorum_count(&slot, h.view, h.op, h.replica, m.replica, m.replica_count);
    switch (d.verdict) {
    case VL_QUORUM_COMPLETE: {
        h.flags = static_cast<uint16_t>(h.flags | VL_FLAG_QUORUM);
        h.checksum = vl_tag_words(&h, VL_HEADER_BYTES, &m.keys);
        std::vector<uint8_t> marked = copy(payload);
        std::memcpy(marked.data(), &h, sizeof h);
        return verdict(xdp_pass, d.stat, std::move(marked), true);
    }
    case VL_QUORUM_COUNT_AND_DROP:
    case VL_QUORUM_DUPLICATE_DROP:
        return verdict(xdp_drop, d.stat, copy(payload));
    default:
        return verdict(xdp_pass, d.stat, copy(payload));
    }
}

}  // namespace

XdpPayloadOutcome model_xdp_payload(KernelModel& m, std::span<const uint8_t> payload,
                                    uint32_t source_peers)
{
    if (payload.size() < VL_HEADER_BYTES)
        return verdict(xdp_pass, VL_STAT_XDP_TRUNCATED, copy(payload));
    vl_header h{};
    std::memcpy(&h, payload.data(), sizeof h);
    const uint32_t stat = vl_check_header(&h, static_cast<uint32_t>(payload.size()),
                                          m.cluster_id, m.replica_count);
    if (stat != VL_STAT_NONE) return verdict(xdp_pass, stat, copy(payload));
    if (!(source_peers & (1u << h.replica)))
        return verdict(xdp_pass, VL_STAT_XDP_NOT_PEER, copy(payload));
    if (h.type == VL_MSG_PREPARE) return on_prepare(m, payload);
    if (h.type == VL_MSG_PREPARE_OK) return on_prepare_ok(m, payload);
    return verdict(xdp_pass, VL_STAT_XDP_OTHER_TYPE, copy(payload));
}

TcPayloadOutcome model_tc_payload(KernelModel& m, std::span<const uint8_t> payload, uint8_t to)
{
    TcPayloadOutcome out;
    if (to >= m.replica_count || to == m.replica) {
        out.stat = VL_STAT_TC_NOT_PEER;
        return out;
    }
    if (payload.size() < VL_HEADER_BYTES) {
        out.stat = VL_STAT_TC_NOT_OURS;
        return out;
    }
    vl_header h{};
    std::memcpy(&h, payload.data(), sizeof h);
    out.stat = vl_tc_check(&h, static_cast<uint32_t>(payload.size()), m.cluster_id, m.replica);
    if (out.stat != VL_STAT_NONE) return out;
    const uint32_t enabled = m.state.enabled;
    if (h.type == VL_MSG_PREPARE && (enabled & VL_FAST_PATH_QUORUM))
        out.armed_event =
            vl_quorum_arm(&m.slots[vl_quorum_slot_index(h.op, m.quorum_slot_mask)], h.view, h.op);
    out.stat = vl_broadcast_decide(&h, enabled);
    if (out.stat != VL_STAT_TC_BROADCAST) return out;
    for (uint32_t r = 0; r < m.replica_count; r++) {
        if (r == m.replica || r == to) continue;
        if (!vl_peer_resolved(&m.peers[r])) {
            out.stat = VL_STAT_TC_UNRESOLVED;
            out.clone_to = 0;
            return out;
        }
        out.clone_to |= 1u << r;
    }
    return out;
}

}  // namespace voltlock::electrode_model
