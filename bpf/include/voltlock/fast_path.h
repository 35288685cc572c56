/* Electrode's fast-path decisions as pure functions (Electrode, NSDI '23, §4 and §6).
 *
 * Compiled twice: into the eBPF programs (bpf/electrode_xdp.bpf.c, bpf/electrode_tc.bpf.c), and
 * into C++ by the simulator and the tests, so that the kernel is modelled by the very code it
 * runs. Hence: no BPF helpers, no libc, no allocation; every loop has a constant bound; every
 * index into a buffer is checked against a constant first (the verifier needs it); the caller
 * holds whatever lock protects the state passed in. The programs add only what cannot be pure:
 * packet access, map lookups, locks, the ring buffer, clones.
 *
 * Callers validate a datagram in this order, each step returning a named enum vl_stat reason to
 * count (VL_STAT_NONE: go on):
 *     vl_check_header                     any replication datagram to our port
 *     (source address == peers[header.replica])
 *     vl_check_prepare / vl_check_prepare_ok
 *     vl_check_tag                        the MAC (or, in a cell without a key, the checksum)
 *     vl_prepare_entries_ok               Prepare: the body parses as batch_count entries
 * and then decide with vl_fast_ack_decide (follower) or vl_quorum_count (leader).
 */
#ifndef VOLTLOCK_FAST_PATH_H
#define VOLTLOCK_FAST_PATH_H

#include "voltlock/wire.h"

#ifdef __bpf__
/* The verifier forbids calls while a bpf_spin_lock is held: everything here is inlined. */
#define VL_FAST_PATH_FN static inline __attribute__((always_inline))
#else
#define VL_FAST_PATH_FN static inline
#endif

/* Words of the largest message, rounded up: buffers handed to vl_checksum_words have this many
 * 8-byte words of room (bytes past the message are ignored). */
#define VL_MESSAGE_WORDS ((VL_MAX_MESSAGE_BYTES + 7u) / 8u)
/* Most entries a Prepare body can hold. */
#define VL_MAX_BATCH_ENTRIES (VL_MAX_BODY_BYTES / VL_ENTRY_FIXED_BYTES)

/* ---- Byte access ----------------------------------------------------------------------------- */

#ifdef __bpf__
typedef uint64_t __attribute__((__may_alias__)) vl_u64_alias;
#endif

/* Word `index` (little-endian) of an 8-byte-aligned buffer. */
VL_FAST_PATH_FN uint64_t vl_word(const void *base, uint32_t index)
{
#ifdef __bpf__
    return ((const vl_u64_alias *)base)[index];
#else
    uint64_t word;
    __builtin_memcpy(&word, (const uint8_t *)base + 8u * index, sizeof word);
    return word;
#endif
}

/* ---- Message checksum (wire.h) -------------------------------------------------------------- */

/* vl_checksum over `len` bytes at `msg`, read as whole words: `msg` is 8-byte aligned with room
 * for VL_MESSAGE_WORDS words, and len <= VL_MAX_MESSAGE_BYTES (callers check; larger lengths are
 * clamped, giving a checksum that will not match). Equal to vl_checksum(msg, len). */
VL_FAST_PATH_FN uint64_t vl_checksum_words(const void *msg, uint32_t len)
{
    if (len > VL_MAX_MESSAGE_BYTES)
        len = VL_MAX_MESSAGE_BYTES;
    const uint32_t full = len / 8u;
    const uint32_t rest = len % 8u;
    uint64_t state = VL_CHECKSUM_SEED;
    for (uint32_t i = 0; i < VL_MESSAGE_WORDS; i++) {
        if (i >= full)
            break;
        /* The checksum field itself (bytes 48..55) counts as zero. */
        const uint64_t word = i == offsetof(struct vl_header, checksum) / 8u ? 0 : vl_word(msg, i);
        state = vl_checksum_mix(state, word);
    }
    if (rest != 0) {
        const uint64_t mask = (1ull << (8u * rest)) - 1u;
        state = vl_checksum_mix(state, vl_word(msg, full) & mask);
    }
    return vl_checksum_final(state, len);
}

/* ---- Message authentication (wire.h) --------------------------------------------------------- */

/* vl_mac over `len` bytes at `msg`, read as whole words, under the same contract as
 * vl_checksum_words. Equal to vl_mac(msg, len, key). */
VL_FAST_PATH_FN uint64_t vl_mac_words(const void *msg, uint32_t len, const struct vl_mac_key *key)
{
    if (len > VL_MAX_MESSAGE_BYTES)
        len = VL_MAX_MESSAGE_BYTES;
    const uint32_t full = len / 8u;
    const uint32_t rest = len % 8u;
    struct vl_siphash state;
    vl_siphash_init(&state, key);
    for (uint32_t i = 0; i < VL_MESSAGE_WORDS; i++) {
        if (i >= full)
            break;
        const uint64_t word = i == offsetof(struct vl_header, checksum) / 8u ? 0 : vl_word(msg, i);
        vl_siphash_word(&state, word);
    }
    const uint64_t tail = rest != 0 ? vl_word(msg, full) & ((1ull << (8u * rest)) - 1u) : 0;
    return vl_siphash_final(&state, tail, len);
}

/* The tag a message we send carries: the MAC under our sending key, or the checksum in a cell
 * without a key. */
VL_FAST_PATH_FN uint64_t vl_tag_words(const void *msg, uint32_t len,
                                      const struct vl_mac_keys *keys)
{
    if (keys->count == 0)
        return vl_checksum_words(msg, len);
    return vl_mac_words(msg, len, &keys->key[0]);
}

/* Whether the tag of the message at `msg` is valid: VL_STAT_NONE, VL_STAT_XDP_BAD_CHECKSUM (a
 * cell without a key) or VL_STAT_XDP_BAD_MAC (none of our keys made it). */
VL_FAST_PATH_FN uint32_t vl_check_tag(const void *msg, uint32_t len,
                                      const struct vl_mac_keys *keys)
{
    const uint64_t tag = ((const struct vl_header *)msg)->checksum;
    if (keys->count == 0) {
        if (vl_checksum_words(msg, len) == tag)
            return VL_STAT_NONE;
        return VL_STAT_XDP_BAD_CHECKSUM;
    }
    for (uint32_t k = 0; k < VL_MAC_KEYS; k++) {
        if (k >= keys->count)
            break;
        if (vl_mac_words(msg, len, &keys->key[k]) == tag)
            return VL_STAT_NONE;
    }
    return VL_STAT_XDP_BAD_MAC;
}

/* ---- Validation --------------------------------------------------------------------------------
 * What a replication datagram (`payload_len` bytes of UDP payload) must satisfy before the fast
 * paths look at it, in the order decode() (server/core/message.cpp) rejects the same things. */

VL_FAST_PATH_FN uint32_t vl_check_header(const struct vl_header *h, uint32_t payload_len,
                                         uint32_t cluster_id, uint32_t replica_count)
{
    if (payload_len < VL_HEADER_BYTES)
        return VL_STAT_XDP_TRUNCATED;
    if (h->magic != VL_MAGIC)
        return VL_STAT_XDP_BAD_MAGIC;
    if (h->version != VL_WIRE_VERSION)
        return VL_STAT_XDP_BAD_VERSION;
    if (h->cluster_id != cluster_id)
        return VL_STAT_XDP_WRONG_CLUSTER;
    if (payload_len > VL_MAX_MESSAGE_BYTES)
        return VL_STAT_XDP_TOO_BIG;
    if (h->body_len != payload_len - VL_HEADER_BYTES)
        return VL_STAT_XDP_BAD_LENGTH;
    if (h->replica >= replica_count || h->replica >= VL_MAX_REPLICAS)
        return VL_STAT_XDP_BAD_REPLICA;
    return VL_STAT_NONE;
}

/* Fields every message must have zero or known. */
VL_FAST_PATH_FN int vl_header_clean(const struct vl_header *h)
{
    return (h->flags & ~VL_FLAGS_KNOWN) == 0 && h->reserved0 == 0 && h->reserved1 == 0;
}

/* A Prepare holds ops (op - batch_count, op]: at least one, none below op 1, and each entry
 * takes at least VL_ENTRY_FIXED_BYTES. */
VL_FAST_PATH_FN uint32_t vl_check_prepare(const struct vl_header *h)
{
    if (!vl_header_clean(h) || h->batch_count == 0 || h->op < h->batch_count ||
        h->body_len < (uint32_t)h->batch_count * VL_ENTRY_FIXED_BYTES)
        return VL_STAT_XDP_MALFORMED;
    return VL_STAT_NONE;
}

/* A PrepareOK is a bare header: no body, no batch, no commit. VL_FLAG_QUORUM is set only by the
 * leader's own XDP program on the way up; one arriving on the wire is forged (or a loop) and is
 * dropped, so that a marked PrepareOK reaching user space always means a counted quorum. */
VL_FAST_PATH_FN uint32_t vl_check_prepare_ok(const struct vl_header *h)
{
    if (h->flags & VL_FLAG_QUORUM)
        return VL_STAT_Q_FORGED;
    if (!vl_header_clean(h) || h->batch_count != 0 || h->commit != 0 || h->body_len != 0)
        return VL_STAT_XDP_MALFORMED;
    return VL_STAT_NONE;
}

/* The Prepare body (`body_len` bytes, VL_MAX_BODY_BYTES of room) parses as exactly `count`
 * entries: u64 timestamp, u64 client id, u64 request number, u16 payload_len, payload. */
VL_FAST_PATH_FN int vl_prepare_entries_ok(const uint8_t *body, uint32_t body_len, uint32_t count)
{
    if (body_len > VL_MAX_BODY_BYTES || count > VL_MAX_BATCH_ENTRIES)
        return 0;
    uint32_t off = 0;
    uint32_t parsed = 0;
    for (uint32_t i = 0; i < VL_MAX_BATCH_ENTRIES; i++) {
        if (parsed == count)
            break;
        if (off > VL_MAX_BODY_BYTES - VL_ENTRY_FIXED_BYTES || off + VL_ENTRY_FIXED_BYTES > body_len)
            return 0;
        const uint32_t payload_len = (uint32_t)body[off + 24] | ((uint32_t)body[off + 25] << 8);
        off += VL_ENTRY_FIXED_BYTES + payload_len;
        parsed++;
    }
    return parsed == count && off == body_len;
}

/* ---- Fast acknowledge (follower, Electrode §4.2 and §6) -------------------------------------- */

enum vl_fast_ack_verdict {
    VL_FAST_ACK_PASS = 0,   /* up to user space; `stat` says why */
    VL_FAST_ACK_APPEND = 1, /* the next ops: into the ring buffer, then acknowledge */
    VL_FAST_ACK_REACK = 2,  /* held already (a retransmission): acknowledge again */
};

struct vl_fast_ack_decision {
    uint32_t verdict; /* enum vl_fast_ack_verdict */
    uint32_t stat;    /* enum vl_stat: the exit counter if it ends here */
};

/* The highest op this replica holds in state->view, in its ring buffer or its log. */
VL_FAST_PATH_FN uint64_t vl_fast_ack_last_op(const struct vl_kernel_state *s,
                                             const struct vl_fast_ack_log *log)
{
    if (log->view == s->view && log->last_op > s->last_op)
        return log->last_op;
    return s->last_op;
}

/* Decide what to do with a valid Prepare `h` from a configured peer, given the core's record
 * `s`, the fast paths user space allows, and vl_fast_ack_last_op(). `self` is this replica.
 *
 * Either verdict that acknowledges sends PrepareOK(h->view, h->op). For a retransmission
 * (h->op <= last_op) that is exact: a PrepareOK(v, n) says "I hold every op up to n in view v",
 * and every op up to last_op of view v is in the ring or the log. Acknowledging last_op instead
 * would be just as true, but h->op is the op whose quorum slot the leader's retransmission
 * re-armed, so that is the ack that can still complete it.
 *
 * A Prepare whose batch starts beyond last_op (gap) or straddles it (overlap) goes up: user space
 * fetches what is missing, or appends the tail, by the full protocol (VR Revisited §5.2). */
VL_FAST_PATH_FN struct vl_fast_ack_decision vl_fast_ack_decide(const struct vl_kernel_state *s,
                                                              uint32_t enabled, uint64_t last_op,
                                                              uint8_t self,
                                                              const struct vl_header *h)
{
    struct vl_fast_ack_decision d;
    d.verdict = VL_FAST_ACK_PASS;
    if (s->status != VL_STATUS_NORMAL)
        d.stat = VL_STAT_FA_NOT_NORMAL;
    else if (!(enabled & VL_FAST_PATH_FAST_ACK) || s->fast_ack != 1)
        d.stat = VL_STAT_FA_DISABLED;
    else if (h->view < s->view)
        d.stat = VL_STAT_FA_STALE_VIEW;
    else if (h->view > s->view)
        d.stat = VL_STAT_FA_NEWER_VIEW;
    else if (h->replica != s->leader)
        d.stat = VL_STAT_FA_NOT_FROM_LEADER;
    else if (s->leader == self)
        d.stat = VL_STAT_FA_IS_LEADER;
    else if (h->batch_count == 0 || h->op < h->batch_count)
        d.stat = VL_STAT_XDP_MALFORMED;
    else if (h->op <= last_op) {
        d.verdict = VL_FAST_ACK_REACK;
        d.stat = VL_STAT_FA_REACKED;
    } else if (h->op - h->batch_count == last_op) {
        d.verdict = VL_FAST_ACK_APPEND;
        d.stat = VL_STAT_FA_APPENDED;
    } else if (h->op - h->batch_count > last_op)
        d.stat = VL_STAT_FA_GAP;
    else
        d.stat = VL_STAT_FA_OVERLAP;
    return d;
}

/* The second look, once an APPEND's Prepare is in the ring buffer, under the same lock as the
 * first: the ring cannot be written under a bpf_spin_lock, so the state may have changed since.
 * Acknowledge only if the state still allows it; on APPEND record the kernel's progress in `log`.
 * PASS here (VL_STAT_FA_STATE_CHANGED) leaves a record in the ring that nothing acknowledged,
 * which user space handles like a duplicate Prepare. This is what makes "switch the kernel off,
 * then drain the ring" complete: an ack is sent only if its record was in the ring before the
 * lock was released, hence before user space's write that switched the fast path off. */
VL_FAST_PATH_FN struct vl_fast_ack_decision vl_fast_ack_commit(const struct vl_kernel_state *s,
                                                              uint32_t enabled,
                                                              struct vl_fast_ack_log *log,
                                                              uint8_t self,
                                                              const struct vl_header *h)
{
    struct vl_fast_ack_decision d = vl_fast_ack_decide(s, enabled, vl_fast_ack_last_op(s, log),
                                                       self, h);
    if (d.verdict == VL_FAST_ACK_APPEND) {
        log->view = s->view;
        log->last_op = h->op;
    } else if (d.verdict == VL_FAST_ACK_PASS) {
        d.stat = VL_STAT_FA_STATE_CHANGED;
        return d;
    }
    /* APPEND, or REACK: someone (another CPU, or user space) got there first; it is held. */
    d.stat = VL_STAT_FA_APPENDED;
    return d;
}

/* The PrepareOK the kernel sends for `view`, `op`: exactly what encode() makes of
 * PrepareOk{view, replica, op} with `flags` (VL_FLAG_KERNEL_ACK from XDP), tagged with `keys`
 * as user space tags what it sends. `out` is 8-byte aligned. */
VL_FAST_PATH_FN void vl_prepare_ok_init(struct vl_header *out, uint32_t cluster_id,
                                        uint8_t replica, uint64_t view, uint64_t op,
                                        uint16_t flags, const struct vl_mac_keys *keys)
{
    out->magic = VL_MAGIC;
    out->version = VL_WIRE_VERSION;
    out->type = VL_MSG_PREPARE_OK;
    out->flags = flags;
    out->cluster_id = cluster_id;
    out->replica = replica;
    out->reserved0 = 0;
    out->batch_count = 0;
    out->view = view;
    out->op = op;
    out->commit = 0;
    out->body_len = 0;
    out->reserved1 = 0;
    out->checksum = 0;
    out->checksum = vl_tag_words(out, VL_HEADER_BYTES, keys);
}

/* ---- Wait on quorum (leader, Electrode §4.3) ------------------------------------------------- */

enum vl_quorum_verdict {
    VL_QUORUM_COUNT_AND_DROP = 0, /* bit set; no quorum yet, or it was passed up already */
    VL_QUORUM_COMPLETE = 1,       /* this ack completes the quorum: pass up, marked */
    VL_QUORUM_DUPLICATE_DROP = 2, /* this follower was counted for (view, op) already */
    VL_QUORUM_UNTRACKED_PASS = 3, /* the slot holds another (view, op): pass up unmarked */
    VL_QUORUM_INVALID_PASS = 4,   /* sender is us or out of range: pass up unmarked */
    VL_QUORUM_DISABLED_PASS = 5,  /* quorum path off, or we do not lead: pass up unmarked */
};

struct vl_quorum_decision {
    uint32_t verdict; /* enum vl_quorum_verdict */
    uint32_t stat;    /* enum vl_stat */
};

VL_FAST_PATH_FN uint32_t vl_quorum_slot_index(uint64_t op, uint32_t slot_mask)
{
    return (uint32_t)(op & slot_mask);
}

/* f of 2f + 1: the followers whose acks, with the leader itself, make a majority. */
VL_FAST_PATH_FN uint32_t vl_quorum_followers_needed(uint32_t replica_count)
{
    return replica_count == 0 ? 0 : (replica_count - 1u) / 2u;
}

/* Counting runs only on the leader of the current view, in normal status, with the path on. */
VL_FAST_PATH_FN int vl_quorum_active(const struct vl_kernel_state *s, uint32_t enabled,
                                     uint8_t self)
{
    return (enabled & VL_FAST_PATH_QUORUM) && s->status == VL_STATUS_NORMAL &&
           s->leader == self && s->replica == self;
}

/* A PrepareOK's sender can be counted: a follower of this cell, not us. */
VL_FAST_PATH_FN int vl_quorum_sender_ok(uint8_t sender, uint8_t self, uint32_t replica_count)
{
    return sender < replica_count && sender < VL_MAX_REPLICAS && sender != self;
}

VL_FAST_PATH_FN uint32_t vl_popcount16(uint32_t x)
{
    x = x - ((x >> 1) & 0x5555u);
    x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
    x = (x + (x >> 4)) & 0x0F0Fu;
    return (x + (x >> 8)) & 0x1Fu;
}

/* TC, for every Prepare(view, op) the leader sends (first send or retransmission): point the
 * slot at (view, op) with no acks, unless it tracks it already (a retransmission keeps its acks
 * and its completed mark, so one op is never passed up marked twice) or tracks a later op (then
 * this op's acks go up unmarked). Returns the event counter. */
VL_FAST_PATH_FN uint32_t vl_quorum_arm(struct vl_quorum_slot *slot, uint64_t view, uint64_t op)
{
    if (slot->view == view && slot->op == op)
        return VL_STAT_TC_REARMED;
    if (slot->view > view || (slot->view == view && slot->op > op))
        return VL_STAT_TC_ARM_STALE;
    slot->view = view;
    slot->op = op;
    slot->acked = 0;
    slot->completed = 0;
    return VL_STAT_TC_ARMED;
}

/* XDP, for a valid PrepareOK(view, op) from `sender`. Exactly one ack per armed (view, op) gets
 * VL_QUORUM_COMPLETE: the one that brings the follower bits to f. */
VL_FAST_PATH_FN struct vl_quorum_decision vl_quorum_count(struct vl_quorum_slot *slot,
                                                         uint64_t view, uint64_t op,
                                                         uint8_t sender, uint8_t self,
                                                         uint32_t replica_count)
{
    struct vl_quorum_decision d;
    if (!vl_quorum_sender_ok(sender, self, replica_count)) {
        d.verdict = VL_QUORUM_INVALID_PASS;
        d.stat = VL_STAT_Q_INVALID;
        return d;
    }
    if (slot->view != view || slot->op != op || op == 0) {
        d.verdict = VL_QUORUM_UNTRACKED_PASS;
        d.stat = VL_STAT_Q_UNTRACKED;
        return d;
    }
    const uint16_t bit = (uint16_t)(1u << sender);
    if (slot->acked & bit) {
        d.verdict = VL_QUORUM_DUPLICATE_DROP;
        d.stat = VL_STAT_Q_DUPLICATE;
        return d;
    }
    slot->acked = (uint16_t)(slot->acked | bit);
    if (slot->completed) {
        d.verdict = VL_QUORUM_COUNT_AND_DROP;
        d.stat = VL_STAT_Q_LATE;
    } else if (vl_popcount16(slot->acked) >= vl_quorum_followers_needed(replica_count)) {
        slot->completed = 1;
        d.verdict = VL_QUORUM_COMPLETE;
        d.stat = VL_STAT_Q_COMPLETE;
    } else {
        d.verdict = VL_QUORUM_COUNT_AND_DROP;
        d.stat = VL_STAT_Q_COUNTED;
    }
    return d;
}

/* The highest (view, op) a follower acknowledged: a later view replaces, the same view keeps the
 * larger op, an earlier view is ignored. */
VL_FAST_PATH_FN void vl_follower_ack_update(struct vl_follower_ack *a, uint64_t view, uint64_t op)
{
    if (view > a->view) {
        a->view = view;
        a->op = op;
    } else if (view == a->view && op > a->op) {
        a->op = op;
    }
}

/* ---- Broadcast (leader, Electrode §4.1) ------------------------------------------------------ */

/* What TC egress does with a Prepare or Commit of ours, given the enabled paths: the exit
 * counter VL_STAT_TC_UNICAST (not marked), VL_STAT_TC_BROADCAST_OFF (marked, path off: it goes
 * to the one peer it is addressed to), or VL_STAT_TC_BROADCAST (clone it, if every peer is
 * resolved). The flag stays on the original and on every clone: it is a known flag, receivers
 * accept it, and the message checksum that covers it stays valid without recomputation. */
VL_FAST_PATH_FN uint32_t vl_broadcast_decide(const struct vl_header *h, uint32_t enabled)
{
    if (!(h->flags & VL_FLAG_BROADCAST))
        return VL_STAT_TC_UNICAST;
    if (!(enabled & VL_FAST_PATH_BROADCAST))
        return VL_STAT_TC_BROADCAST_OFF;
    return VL_STAT_TC_BROADCAST;
}

/* An outgoing datagram TC egress handles: a well-formed header of our cell, sent by us. Returns
 * VL_STAT_TC_NOT_OURS, VL_STAT_TC_OTHER_TYPE or VL_STAT_NONE (a Prepare or a Commit). */
VL_FAST_PATH_FN uint32_t vl_tc_check(const struct vl_header *h, uint32_t payload_len,
                                     uint32_t cluster_id, uint8_t self)
{
    if (payload_len < VL_HEADER_BYTES || h->magic != VL_MAGIC || h->version != VL_WIRE_VERSION ||
        h->cluster_id != cluster_id || h->replica != self ||
        h->body_len != payload_len - VL_HEADER_BYTES)
        return VL_STAT_TC_NOT_OURS;
    if (h->type != VL_MSG_PREPARE && h->type != VL_MSG_COMMIT)
        return VL_STAT_TC_OTHER_TYPE;
    return VL_STAT_NONE;
}

/* A peer a clone can be sent to. */
VL_FAST_PATH_FN int vl_peer_resolved(const struct vl_peer *p)
{
    return (p->flags & (VL_PEER_CONFIGURED | VL_PEER_RESOLVED)) ==
           (VL_PEER_CONFIGURED | VL_PEER_RESOLVED);
}

/* ---- Internet checksums ---------------------------------------------------------------------- */

/* The IPv4 header checksum of the 20-byte header at `iph` (its checksum field ignored), as the
 * 16-bit value to store into that field in memory order. */
VL_FAST_PATH_FN uint16_t vl_ipv4_header_checksum(const uint8_t *iph)
{
    uint32_t sum = 0;
    for (uint32_t i = 0; i < 20; i += 2) {
        if (i == 10)
            continue;
        sum += (uint32_t)iph[i] | ((uint32_t)iph[i + 1] << 8);
    }
    sum = (sum & 0xFFFFu) + (sum >> 16);
    sum = (sum & 0xFFFFu) + (sum >> 16);
    return (uint16_t)~sum;
}

#endif /* VOLTLOCK_FAST_PATH_H */
