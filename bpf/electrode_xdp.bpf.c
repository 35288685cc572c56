/* XDP ingress: Electrode's fast acknowledge (follower, NSDI '23 §4.2, §6) and the counting half
 * of wait-on-quorum (leader, §4.3), in one program that dispatches on the message type.
 *
 *   Prepare    -> validate, verify the MAC (drop a forged one), parse; if the state allows,
 *                 append the whole datagram to the ring buffer, advance the kernel's last op,
 *                 rewrite the frame in place into PrepareOK(view, op) and XDP_TX it.
 *                 Retransmissions are acknowledged again.
 *   PrepareOK  -> validate, verify the MAC (drop a forged one); record the follower's highest
 *                 ack; count it in the quorum slot; pass up only the ack that completes the
 *                 quorum, marked VL_FLAG_QUORUM.
 *   anything else, or anything unexpected -> XDP_PASS, counted.
 *
 * The decisions are fast_path.h's; this file adds packet access, maps, locks and the ring.
 * Concurrency: the state record and the kernel's last op change only under vl_state's
 * bpf_spin_lock; a quorum slot and a follower's ack record each under their own. No helper is
 * called under a lock (the verifier forbids it), hence the two-step append in on_prepare().
 */
#include <linux/bpf.h>
#include <linux/types.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "voltlock/electrode_maps.bpf.h"
#include "voltlock/fast_path.h"
#include "voltlock/packet.bpf.h"
#include "voltlock/wire.h"

static __always_inline int pass(__u32 stat)
{
    vl_count(stat);
    return XDP_PASS;
}

static __always_inline int drop(__u32 stat)
{
    vl_count(stat);
    return XDP_DROP;
}

/* Turns the frame (a Prepare we acknowledge) into `ack`'s frame, back to where it came from.
 * The Prepare is in the ring buffer already or was held before; only its headers are reused. */
static __always_inline int send_prepare_ok(struct xdp_md *ctx, const struct vl_header *ack,
                                           __u32 stat)
{
    const int delta = (int)VL_PREPARE_OK_FRAME_BYTES - (int)bpf_xdp_get_buff_len(ctx);
    if (delta != 0 && bpf_xdp_adjust_tail(ctx, delta))
        return pass(VL_STAT_FA_ADJUST_FAILED);

    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    struct iphdr *ip = (void *)(eth + 1);
    struct udphdr *udp = (void *)(ip + 1);
    struct vl_header *h = (void *)(udp + 1);
    if ((void *)(h + 1) > data_end)
        return pass(VL_STAT_FA_ADJUST_FAILED);

    __u8 mac[ETH_ALEN];
    __builtin_memcpy(mac, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, mac, ETH_ALEN);

    const __be32 addr = ip->saddr;
    ip->saddr = ip->daddr;
    ip->daddr = addr;
    ip->tot_len = bpf_htons(VL_IPV4_BYTES + VL_UDP_BYTES + VL_HEADER_BYTES);
    ip->ttl = 64;
    ip->check = vl_ipv4_header_checksum((const __u8 *)ip);

    const __be16 port = udp->source;
    udp->source = udp->dest;
    udp->dest = port;
    udp->len = bpf_htons(VL_UDP_BYTES + VL_HEADER_BYTES);
    udp->check = 0; /* no UDP checksum: allowed over IPv4; the message carries its own */

    __builtin_memcpy(h, ack, sizeof(*ack));
    vl_count(stat);
    return XDP_TX;
}

/* vl_mac_words() for a Prepare of any length, with the word loop in bpf_loop: unrolled by the
 * verifier, SipHash over up to VL_MESSAGE_WORDS words (once per key) exceeds its budget of
 * instructions; a bpf_loop callback is verified once. Same rounds, same words, same result
 * (the bpf tier checks the kernel against encode()). */
struct mac_loop {
    const __u64 *words;
    struct vl_siphash state;
};

static long mac_word(__u32 i, void *ctx)
{
    struct mac_loop *loop = ctx;
    if (i >= VL_MESSAGE_WORDS)
        return 1;
    /* The tag field (bytes 48..55) counts as zero. */
    const __u64 word = i == offsetof(struct vl_header, checksum) / 8u ? 0 : loop->words[i];
    vl_siphash_word(&loop->state, word);
    return 0;
}

static __always_inline __u64 mac_of_prepare(const __u64 *words, __u32 len,
                                            const struct vl_mac_key *key)
{
    struct mac_loop loop = {.words = words};
    vl_siphash_init(&loop.state, key);
    const __u32 full = len / 8u;
    const __u32 rest = len % 8u;
    if (full >= VL_MESSAGE_WORDS)
        return 0; /* len <= VL_MAX_MESSAGE_BYTES: never; says so to the verifier */
    bpf_loop(full, mac_word, &loop, 0);
    const __u64 tail = rest != 0 ? words[full] & ((1ull << (8u * rest)) - 1u) : 0;
    return vl_siphash_final(&loop.state, tail, len);
}

/* vl_check_tag() for a Prepare: the checksum inline as before, the MAC through bpf_loop. */
static __always_inline __u32 check_prepare_tag(const __u64 *words, __u32 len,
                                               const struct vl_mac_keys *keys)
{
    const __u64 tag = ((const struct vl_header *)words)->checksum;
    if (keys->count == 0)
        return vl_checksum_words(words, len) == tag ? VL_STAT_NONE : VL_STAT_XDP_BAD_CHECKSUM;
    if (mac_of_prepare(words, len, &keys->key[0]) == tag)
        return VL_STAT_NONE;
    if (keys->count > 1 && mac_of_prepare(words, len, &keys->key[1]) == tag)
        return VL_STAT_NONE;
    return VL_STAT_XDP_BAD_MAC;
}

/* A message whose tag none of our keys made is dropped here (the kernel never acknowledges or
 * counts what user space would refuse); in a cell without a key a bad checksum goes up, as
 * before, for user space to count. */
static __always_inline int bad_tag(__u32 stat)
{
    return stat == VL_STAT_XDP_BAD_MAC ? drop(stat) : pass(stat);
}

/* A Prepare from peers[h->replica], `len` bytes of UDP payload, header checked. */
static __always_inline int on_prepare(struct xdp_md *ctx, const struct vl_header *h, __u32 len,
                                      const struct vl_mac_keys *keys)
{
    __u32 stat = vl_check_prepare(h);
    if (stat != VL_STAT_NONE)
        return pass(stat);

    const __u32 zero = 0;
    struct vl_scratch *scratch = bpf_map_lookup_elem(&vl_scratch, &zero);
    struct vl_state_value *state = bpf_map_lookup_elem(&vl_state, &zero);
    struct vl_fast_ack_log *log = bpf_map_lookup_elem(&vl_fast_ack_log, &zero);
    if (!scratch || !state || !log)
        return pass(VL_STAT_XDP_INTERNAL);

    /* Checked by vl_check_header already; said again where the verifier can see it. */
    if (len < VL_HEADER_BYTES || len > VL_MAX_MESSAGE_BYTES)
        return pass(VL_STAT_XDP_INTERNAL);
    if (bpf_xdp_load_bytes(ctx, VL_PAYLOAD_OFFSET, scratch->words, len))
        return pass(VL_STAT_XDP_INTERNAL);
    const struct vl_header *m = (const void *)scratch->words;
    stat = check_prepare_tag(scratch->words, len, keys);
    if (stat != VL_STAT_NONE)
        return bad_tag(stat);
    if (!vl_prepare_entries_ok((const __u8 *)scratch->words + VL_HEADER_BYTES,
                               len - VL_HEADER_BYTES, m->batch_count))
        return pass(VL_STAT_XDP_MALFORMED);

    bpf_spin_lock(&state->lock);
    struct vl_fast_ack_decision d = vl_fast_ack_decide(
        &state->state, state->enabled, vl_fast_ack_last_op(&state->state, log), cfg_replica, m);
    bpf_spin_unlock(&state->lock);
    if (d.verdict == VL_FAST_ACK_PASS)
        return pass(d.stat);

    if (d.verdict == VL_FAST_ACK_APPEND) {
        /* Into the ring first, then (second look, same lock) advance and acknowledge: the
         * kernel's last op never covers an op that is not in the ring or the log. User space
         * catches up with the ring on its own tick, off the commit path (Electrode §4.2), so a
         * record wakes it only once the ring is half full. */
        const __u64 wakeup = bpf_ringbuf_query(&vl_ring, BPF_RB_AVAIL_DATA) >
                                     bpf_ringbuf_query(&vl_ring, BPF_RB_RING_SIZE) / 2
                                 ? BPF_RB_FORCE_WAKEUP
                                 : BPF_RB_NO_WAKEUP;
        if (bpf_ringbuf_output(&vl_ring, scratch->words, len, wakeup))
            return pass(VL_STAT_FA_RING_FULL);
        bpf_spin_lock(&state->lock);
        d = vl_fast_ack_commit(&state->state, state->enabled, log, cfg_replica, m);
        bpf_spin_unlock(&state->lock);
        if (d.verdict == VL_FAST_ACK_PASS)
            return pass(d.stat);
    }

    struct vl_header ack;
    vl_prepare_ok_init(&ack, cfg_cluster_id, cfg_replica, m->view, m->op, VL_FLAG_KERNEL_ACK,
                       keys);
    return send_prepare_ok(ctx, &ack, d.stat);
}

/* A PrepareOK from peers[h->replica], header checked. */
static __always_inline int on_prepare_ok(struct udphdr *udp, struct vl_header *h,
                                         const struct vl_mac_keys *keys)
{
    __u32 stat = vl_check_prepare_ok(h);
    if (stat == VL_STAT_Q_FORGED)
        return drop(stat);
    if (stat != VL_STAT_NONE)
        return pass(stat);

    struct vl_header ok;
    __builtin_memcpy(&ok, h, sizeof(ok));
    stat = vl_check_tag(&ok, VL_HEADER_BYTES, keys);
    if (stat != VL_STAT_NONE)
        return bad_tag(stat);

    const __u8 sender = ok.replica;
    if (!vl_quorum_sender_ok(sender, cfg_replica, cfg_replica_count))
        return pass(VL_STAT_Q_INVALID);

    const __u32 zero = 0;
    const __u32 follower = sender;
    const __u32 index = vl_quorum_slot_index(ok.op, cfg_quorum_slot_mask);
    struct vl_follower_ack *acked = bpf_map_lookup_elem(&vl_acked_ops, &follower);
    struct vl_state_value *state = bpf_map_lookup_elem(&vl_state, &zero);
    struct vl_quorum_slot *slot = bpf_map_lookup_elem(&vl_quorum_slots, &index);
    if (!acked || !state || !slot)
        return pass(VL_STAT_XDP_INTERNAL);

    bpf_spin_lock(&acked->lock);
    vl_follower_ack_update(acked, ok.view, ok.op);
    bpf_spin_unlock(&acked->lock);

    bpf_spin_lock(&state->lock);
    const int active = vl_quorum_active(&state->state, state->enabled, cfg_replica);
    bpf_spin_unlock(&state->lock);
    if (!active)
        return pass(VL_STAT_Q_DISABLED);

    bpf_spin_lock(&slot->lock);
    const struct vl_quorum_decision d =
        vl_quorum_count(slot, ok.view, ok.op, sender, cfg_replica, cfg_replica_count);
    bpf_spin_unlock(&slot->lock);

    switch (d.verdict) {
    case VL_QUORUM_COMPLETE:
        /* Mark it. The flag is covered by the message's tag: recompute it (a bare header,
         * seven words), and drop the UDP checksum rather than patch it. */
        ok.flags |= VL_FLAG_QUORUM;
        ok.checksum = vl_tag_words(&ok, VL_HEADER_BYTES, keys);
        __builtin_memcpy(h, &ok, sizeof(ok));
        udp->check = 0;
        return pass(d.stat);
    case VL_QUORUM_COUNT_AND_DROP:
    case VL_QUORUM_DUPLICATE_DROP:
        return drop(d.stat);
    default:
        return pass(d.stat);
    }
}

SEC("xdp.frags")
int vl_xdp(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;

    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
        return pass(VL_STAT_XDP_NOT_IPV4);
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > data_end)
        return pass(VL_STAT_XDP_NOT_UDP);
    if (ip->version != 4)
        return pass(VL_STAT_XDP_NOT_IPV4);
    if (ip->protocol != IPPROTO_UDP)
        return pass(VL_STAT_XDP_NOT_UDP);
    if (ip->ihl != 5)
        return pass(VL_STAT_XDP_IP_OPTIONS);
    if (ip->frag_off & bpf_htons(VL_IP_MF | VL_IP_OFFSET))
        return pass(VL_STAT_XDP_IP_FRAGMENT);
    struct udphdr *udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > data_end)
        return pass(VL_STAT_XDP_NOT_UDP);
    if (udp->dest != bpf_htons(cfg_replication_port))
        return pass(VL_STAT_XDP_NOT_OUR_PORT);

    /* From here on the datagram is addressed to us. Lengths: the UDP length is the datagram; the
     * IP length must agree, and the frame must hold it (it may hold padding after it). */
    const __u32 udp_len = bpf_ntohs(udp->len);
    if (udp_len < VL_UDP_BYTES || bpf_ntohs(ip->tot_len) != VL_IPV4_BYTES + udp_len ||
        VL_ETH_BYTES + VL_IPV4_BYTES + udp_len > bpf_xdp_get_buff_len(ctx))
        return pass(VL_STAT_XDP_TRUNCATED);
    const __u32 len = udp_len - VL_UDP_BYTES;
    struct vl_header *h = (void *)(udp + 1);
    if ((void *)(h + 1) > data_end)
        return pass(VL_STAT_XDP_TRUNCATED);

    const __u32 stat = vl_check_header(h, len, cfg_cluster_id, cfg_replica_count);
    if (stat != VL_STAT_NONE)
        return pass(stat);

    /* Only from the address and port configured for the replica the header names. */
    const __u32 sender = h->replica;
    const struct vl_peer *peer = bpf_map_lookup_elem(&vl_peers, &sender);
    if (!peer || !(peer->flags & VL_PEER_CONFIGURED) || peer->ipv4_be != ip->saddr ||
        peer->port_be != udp->source)
        return pass(VL_STAT_XDP_NOT_PEER);

    if (h->type != VL_MSG_PREPARE && h->type != VL_MSG_PREPARE_OK)
        return pass(VL_STAT_XDP_OTHER_TYPE);
    const __u32 zero = 0;
    const struct vl_mac_keys *keys = bpf_map_lookup_elem(&vl_mac_keys, &zero);
    if (!keys)
        return pass(VL_STAT_XDP_INTERNAL);
    if (h->type == VL_MSG_PREPARE)
        return on_prepare(ctx, h, len, keys);
    return on_prepare_ok(udp, h, keys);
}

char _license[] SEC("license") = "GPL";
