/* TC egress (clsact), on the leader: Electrode's broadcast (NSDI '23 §4.1) and the arming half of
 * wait-on-quorum (§4.3).
 *
 *   Prepare or Commit of ours, to a configured peer:
 *     - Prepare: arm the quorum slot of (view, op) (first send and retransmissions alike);
 *     - marked VL_FLAG_BROADCAST: clone it to every other peer, rewriting destination MAC, IP and
 *       port and patching the IP and UDP checksums per copy, then restore the original, which
 *       goes on to the peer it was addressed to. If any peer is unresolved, no clone is made
 *       (user space's slow path sends per peer; see docs/electrode.md).
 *   Our own clones come back through this hook (bpf_clone_redirect to an egress device runs
 *   egress again): they carry cfg_clone_mark and pass untouched; that is the recursion guard.
 *   Everything else passes untouched. Every exit returns TC_ACT_OK and is counted.
 *
 * Headers are read with bpf_skb_load_bytes and written with the store/csum helpers, which work
 * on non-linear skbs and keep CHECKSUM_PARTIAL (checksum offload) correct: the pseudo-header
 * part of the UDP checksum is patched with BPF_F_PSEUDO_HDR.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "voltlock/electrode_maps.bpf.h"
#include "voltlock/fast_path.h"
#include "voltlock/packet.bpf.h"
#include "voltlock/wire.h"

static __always_inline int ok(__u32 stat)
{
    vl_count(stat);
    return TC_ACT_OK;
}

/* Where the frame is addressed: destination MAC, IP and UDP port. */
struct vl_target {
    __u8 mac[ETH_ALEN];
    __be16 port;
    __be32 ipv4;
};

/* Readdresses the frame from `from` to `to`, keeping both checksums right. */
static __always_inline int retarget(struct __sk_buff *skb, const struct vl_target *from,
                                    const struct vl_target *to)
{
    if (bpf_skb_store_bytes(skb, 0, to->mac, ETH_ALEN, 0))
        return -1;
    /* UDP first: its checksum covers the destination address through the pseudo-header. No
     * BPF_F_MARK_MANGLED_0: the replication socket always sends UDP checksums, and under
     * CHECKSUM_PARTIAL the field holds a pseudo-header sum that may legitimately be zero. */
    if (bpf_l4_csum_replace(skb, VL_UDP_CHECK_OFFSET, from->ipv4, to->ipv4,
                            BPF_F_PSEUDO_HDR | sizeof(to->ipv4)))
        return -1;
    if (bpf_l4_csum_replace(skb, VL_UDP_CHECK_OFFSET, from->port, to->port, sizeof(to->port)))
        return -1;
    if (bpf_l3_csum_replace(skb, VL_IP_CHECK_OFFSET, from->ipv4, to->ipv4, sizeof(to->ipv4)))
        return -1;
    if (bpf_skb_store_bytes(skb, VL_IP_DADDR_OFFSET, &to->ipv4, sizeof(to->ipv4), 0))
        return -1;
    if (bpf_skb_store_bytes(skb, VL_UDP_DEST_OFFSET, &to->port, sizeof(to->port), 0))
        return -1;
    return 0;
}

/* The enabled fast paths, read under the state's lock (user space writes it with BPF_F_LOCK). */
static __always_inline __u32 enabled_paths(void)
{
    const __u32 zero = 0;
    struct vl_state_value *state = bpf_map_lookup_elem(&vl_state, &zero);
    if (!state)
        return 0;
    bpf_spin_lock(&state->lock);
    const __u32 enabled = state->enabled;
    bpf_spin_unlock(&state->lock);
    return enabled;
}

static __always_inline void arm_quorum(const struct vl_header *h)
{
    const __u32 index = vl_quorum_slot_index(h->op, cfg_quorum_slot_mask);
    struct vl_quorum_slot *slot = bpf_map_lookup_elem(&vl_quorum_slots, &index);
    if (!slot) {
        vl_count(VL_STAT_TC_INTERNAL);
        return;
    }
    bpf_spin_lock(&slot->lock);
    const __u32 event = vl_quorum_arm(slot, h->view, h->op);
    bpf_spin_unlock(&slot->lock);
    vl_count(event);
}

/* Index of the peer (not us) the frame is addressed to, or VL_MAX_REPLICAS. */
static __always_inline __u32 destination_peer(__be32 daddr, __be16 dport)
{
    for (__u32 i = 0; i < VL_MAX_REPLICAS; i++) {
        if (i >= cfg_replica_count)
            break;
        const struct vl_peer *p = bpf_map_lookup_elem(&vl_peers, &i);
        if (p && i != cfg_replica && (p->flags & VL_PEER_CONFIGURED) && p->ipv4_be == daddr &&
            p->port_be == dport)
            return i;
    }
    return VL_MAX_REPLICAS;
}

/* Every peer a clone would go to (all but us and `dest`) is resolved. */
static __always_inline int all_resolved(__u32 dest)
{
    for (__u32 i = 0; i < VL_MAX_REPLICAS; i++) {
        if (i >= cfg_replica_count)
            break;
        if (i == cfg_replica || i == dest)
            continue;
        const struct vl_peer *p = bpf_map_lookup_elem(&vl_peers, &i);
        if (!p || !vl_peer_resolved(p))
            return 0;
    }
    return 1;
}

/* Sends a copy to every peer but us and `dest`, then readdresses the frame to `original`. */
static __always_inline int broadcast(struct __sk_buff *skb, __u32 dest,
                                     const struct vl_target *original)
{
    const __u32 mark = skb->mark;
    __u64 attempts = 0;
    __u64 failed = 0;
    struct vl_target current = *original;
    for (__u32 i = 0; i < VL_MAX_REPLICAS; i++) {
        if (i >= cfg_replica_count)
            break;
        if (i == cfg_replica || i == dest)
            continue;
        const struct vl_peer *p = bpf_map_lookup_elem(&vl_peers, &i);
        if (!p)
            break;
        struct vl_target next;
        __builtin_memcpy(next.mac, p->mac, ETH_ALEN);
        next.ipv4 = p->ipv4_be;
        next.port = p->port_be;
        if (retarget(skb, &current, &next)) {
            vl_count(VL_STAT_TC_INTERNAL);
            break;
        }
        current = next;
        skb->mark = cfg_clone_mark;
        /* 0 on success; otherwise -errno, or on some kernels a positive NET_XMIT_* code. The
         * sign bit of err | -err is err != 0; the empty asm keeps clang from turning that back
         * into a comparison, which the BPF backend would lower to a branch. */
        const __u64 err = (__u64)bpf_clone_redirect(skb, skb->ifindex, 0);
        __u64 nonzero = err | -err;
        asm volatile("" : "+r"(nonzero));
        attempts++;
        failed += nonzero >> 63;
    }
    skb->mark = mark;
    /* Counted after the loop, and without a branch on the result: a counter bumped inside the
     * loop with one of two constant keys, or a branch per clone, would double the verifier's
     * states per iteration (2^14 paths for 15 replicas). */
    vl_count_n(VL_STAT_TC_CLONES, attempts - failed);
    vl_count_n(VL_STAT_TC_CLONE_FAILED, failed);
    if (retarget(skb, &current, original)) {
        /* The frame may now be addressed to a peer it was not meant for; do not send it. The
         * leader retransmits. Not expected: the helpers fail only when out of memory. */
        vl_count(VL_STAT_TC_INTERNAL);
        vl_count(VL_STAT_TC_BROADCAST);
        return TC_ACT_SHOT;
    }
    return ok(VL_STAT_TC_BROADCAST);
}

SEC("tc")
int vl_tc_egress(struct __sk_buff *skb)
{
    if (skb->mark == cfg_clone_mark) {
        skb->mark = 0;
        return ok(VL_STAT_TC_CLONE_SEEN);
    }

    struct ethhdr eth;
    struct iphdr ip;
    struct udphdr udp;
    struct vl_header h;
    if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) || eth.h_proto != bpf_htons(ETH_P_IP))
        return ok(VL_STAT_TC_NOT_IPV4);
    if (bpf_skb_load_bytes(skb, VL_ETH_BYTES, &ip, sizeof(ip)))
        return ok(VL_STAT_TC_NOT_UDP);
    if (ip.version != 4)
        return ok(VL_STAT_TC_NOT_IPV4);
    if (ip.protocol != IPPROTO_UDP || ip.ihl != 5 ||
        (ip.frag_off & bpf_htons(VL_IP_MF | VL_IP_OFFSET)))
        return ok(VL_STAT_TC_NOT_UDP);
    if (bpf_skb_load_bytes(skb, VL_ETH_BYTES + VL_IPV4_BYTES, &udp, sizeof(udp)))
        return ok(VL_STAT_TC_NOT_UDP);
    if (udp.source != bpf_htons(cfg_replication_port))
        return ok(VL_STAT_TC_NOT_OUR_PORT);

    const __u32 dest = destination_peer(ip.daddr, udp.dest);
    if (dest >= VL_MAX_REPLICAS)
        return ok(VL_STAT_TC_NOT_PEER);

    /* A UDP GSO super-packet (UDP_SEGMENT) holds several datagrams: not one message. The
     * replication socket does not use it; if it did, those messages go as they are. */
    if (skb->gso_size != 0)
        return ok(VL_STAT_TC_NOT_OURS);

    const __u32 udp_len = bpf_ntohs(udp.len);
    if (udp_len < VL_UDP_BYTES + VL_HEADER_BYTES ||
        bpf_skb_load_bytes(skb, VL_PAYLOAD_OFFSET, &h, sizeof(h)))
        return ok(VL_STAT_TC_NOT_OURS);
    const __u32 stat = vl_tc_check(&h, udp_len - VL_UDP_BYTES, cfg_cluster_id, cfg_replica);
    if (stat != VL_STAT_NONE)
        return ok(stat);

    const __u32 enabled = enabled_paths();
    if (h.type == VL_MSG_PREPARE && (enabled & VL_FAST_PATH_QUORUM))
        arm_quorum(&h);

    const __u32 decision = vl_broadcast_decide(&h, enabled);
    if (decision != VL_STAT_TC_BROADCAST)
        return ok(decision);
    if (!all_resolved(dest))
        return ok(VL_STAT_TC_UNRESOLVED);

    struct vl_target original;
    __builtin_memcpy(original.mac, eth.h_dest, ETH_ALEN);
    original.ipv4 = ip.daddr;
    original.port = udp.dest;
    return broadcast(skb, dest, &original);
}
