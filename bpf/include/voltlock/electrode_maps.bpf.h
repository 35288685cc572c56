/* Maps, configuration and counters shared by the Electrode programs (kernel side only).
 *
 * electrode_xdp.bpf.c and electrode_tc.bpf.c both include this header and are linked into one
 * object (bpftool gen object), so that they share every map and every configuration value and
 * user space loads one skeleton, electrode.skel.h. The definitions are __weak so that the two
 * identical copies link into one. The layouts of the map values are in wire.h, shared with user
 * space; docs/electrode.md says who writes what.
 */
#ifndef VOLTLOCK_ELECTRODE_MAPS_BPF_H
#define VOLTLOCK_ELECTRODE_MAPS_BPF_H

#include <linux/bpf.h>
#include <linux/types.h>

#include <bpf/bpf_helpers.h>

#include "voltlock/wire.h"

/* ---- Configuration: set through the skeleton's rodata before load --------------------------- */

/* UDP port of the replication socket (host byte order). The programs touch nothing else. */
const volatile __u16 cfg_replication_port __weak = 0;
/* vl_header.cluster_id of this cell. */
const volatile __u32 cfg_cluster_id __weak = 0;
/* This replica's index, and the cell size (1..VL_MAX_REPLICAS). */
const volatile __u8 cfg_replica __weak = 0;
const volatile __u8 cfg_replica_count __weak = 0;
/* Slot of op n = n & cfg_quorum_slot_mask; at most VL_QUORUM_SLOTS - 1, one less than a power of
 * two. */
const volatile __u32 cfg_quorum_slot_mask __weak = VL_QUORUM_SLOTS - 1;
/* skb->mark of the TC program's clones (non-zero). */
const volatile __u32 cfg_clone_mark __weak = VL_CLONE_MARK;

/* ---- Maps ------------------------------------------------------------------------------------ */

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct vl_state_value);
} vl_state SEC(".maps") __weak;

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct vl_fast_ack_log);
} vl_fast_ack_log SEC(".maps") __weak;

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, VL_MAX_REPLICAS);
    __type(key, __u32);
    __type(value, struct vl_peer);
} vl_peers SEC(".maps") __weak;

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, VL_QUORUM_SLOTS);
    __type(key, __u32);
    __type(value, struct vl_quorum_slot);
} vl_quorum_slots SEC(".maps") __weak;

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, VL_MAX_REPLICAS);
    __type(key, __u32);
    __type(value, struct vl_follower_ack);
} vl_acked_ops SEC(".maps") __weak;

/* The cell's replication keys (wire.h, docs/security.md). Written by user space before the
 * programs attach and never after; count 0: the cell has no key, messages carry the checksum. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct vl_mac_keys);
} vl_mac_keys SEC(".maps") __weak;

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, VL_RING_BYTES);
} vl_ring SEC(".maps") __weak;

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, VL_STAT_SLOTS);
    __type(key, __u32);
    __type(value, __u64);
} vl_stats SEC(".maps") __weak;

/* Per-CPU copy of the datagram being fast-acknowledged: the checksum and the entry parser read
 * it as aligned words, and the ring buffer is written from it (bpf_ringbuf_output takes a
 * variable length, bpf_ringbuf_reserve only a constant one). XDP runs in NAPI context, one
 * program at a time per CPU, so one buffer per CPU is enough (not so under PREEMPT_RT, which
 * Voltlock does not support with the fast paths on). */
struct vl_scratch {
    __u64 words[(VL_MAX_MESSAGE_BYTES + 7) / 8];
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct vl_scratch);
} vl_scratch SEC(".maps") __weak;

/* ---- Counters -------------------------------------------------------------------------------- */

static __always_inline void vl_count_n(__u32 stat, __u64 n)
{
    __u64 *counter = bpf_map_lookup_elem(&vl_stats, &stat);
    if (counter && n)
        __sync_fetch_and_add(counter, n);
}

static __always_inline void vl_count(__u32 stat)
{
    __u64 *counter = bpf_map_lookup_elem(&vl_stats, &stat);
    /* Per-CPU, but atomic all the same: under PREEMPT_RT a program can be preempted by another
     * on the same CPU, and TC re-enters itself through bpf_clone_redirect. */
    if (counter)
        __sync_fetch_and_add(counter, 1);
}

#endif /* VOLTLOCK_ELECTRODE_MAPS_BPF_H */
