/* Voltlock wire format: the one definition of what crosses the network between replicas and
 * clients, shared by the eBPF programs (bpf/), the server (server/), the clients and the tests.
 *
 * Byte order: every multi-byte field on the wire is little-endian. Voltlock runs on
 * little-endian hosts only (x86-64, arm64, and the bpfel target), so structs are read in place;
 * the assertion below keeps it so.
 *
 * Compatibility: enum values are never renumbered. A retired value stays, renamed UNUSED_<n>.
 *
 * One UDP datagram carries exactly one message: a vl_header followed by body_len bytes of body.
 * The checksum covers the header (with the checksum field taken as zero) and the body. It is a
 * word-wise multiply-rotate hash rather than a CRC because the XDP fast path verifies it with a
 * bounded loop over packet memory, where table lookups per byte would cost too much.
 */
#ifndef VOLTLOCK_WIRE_H
#define VOLTLOCK_WIRE_H

#ifdef __bpf__
#include <linux/types.h>
typedef __u8 uint8_t;
typedef __u16 uint16_t;
typedef __u32 uint32_t;
typedef __u64 uint64_t;
#else
#include <stddef.h>
#include <stdint.h>
#endif

#ifdef __cplusplus
#define VL_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define VL_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Voltlock's wire format is little-endian and is read in place: little-endian hosts only"
#endif

/* ---- Identity and limits ------------------------------------------------------------------- */

#define VL_MAGIC 0x314B4C56u /* "VLK1" as little-endian bytes */
#define VL_WIRE_VERSION 1u

/* Cell sizes 1..VL_MAX_REPLICAS. Replica indexes are 0..size-1; a quorum bitset is 16 bits. */
#define VL_MAX_REPLICAS 15u
/* Replica index used by messages that clients send. */
#define VL_CLIENT_SENDER 0xFFu

/* UDP payload bounds. The default follows a 1500-byte MTU (1500 - 20 IPv4 - 8 UDP); jumbo frames
 * raise the configured size up to VL_MAX_MESSAGE_BYTES (9000 - 20 - 8). */
#define VL_DEFAULT_MESSAGE_BYTES 1472u
#define VL_MIN_MESSAGE_BYTES 512u
#define VL_MAX_MESSAGE_BYTES 8972u

/* ---- Message types (VR Revisited, Liskov & Cowling 2012) ------------------------------------ */

enum vl_message_type {
    VL_MSG_REQUEST = 1,            /* client -> leader (§4.1 step 1) */
    VL_MSG_REPLY = 2,              /* leader -> client (§4.1 step 5) */
    VL_MSG_PREPARE = 3,            /* leader -> followers (§4.1 step 3) */
    VL_MSG_PREPARE_OK = 4,         /* follower -> leader (§4.1 step 4) */
    VL_MSG_COMMIT = 5,             /* leader -> followers (§4.1 step 6) */
    VL_MSG_START_VIEW_CHANGE = 6,  /* §4.2 step 1 */
    VL_MSG_DO_VIEW_CHANGE = 7,     /* §4.2 step 2 */
    VL_MSG_START_VIEW = 8,         /* §4.2 step 3 */
    VL_MSG_RECOVERY = 9,           /* §4.3 step 1 */
    VL_MSG_RECOVERY_RESPONSE = 10, /* §4.3 step 2 */
    VL_MSG_GET_STATE = 11,         /* §5.2 */
    VL_MSG_NEW_STATE = 12,         /* §5.2 */
};
#define VL_MSG_TYPE_MIN VL_MSG_REQUEST
#define VL_MSG_TYPE_MAX VL_MSG_NEW_STATE

/* Header flags. */
enum vl_flag {
    /* Set by user space on a Prepare or Commit it sends once for the TC program to clone to
     * every peer (Electrode §4.1). */
    VL_FLAG_BROADCAST = 1u << 0,
    /* Set by the leader's XDP program on the one PrepareOK that completed a quorum (§4.3). */
    VL_FLAG_QUORUM = 1u << 1,
    /* Set on a PrepareOK that a follower's XDP program wrote (§4.2); informational. */
    VL_FLAG_KERNEL_ACK = 1u << 2,
};
#define VL_FLAGS_KNOWN (VL_FLAG_BROADCAST | VL_FLAG_QUORUM | VL_FLAG_KERNEL_ACK)

/* ---- The replication header ----------------------------------------------------------------- */

struct vl_header {
    uint32_t magic;        /* VL_MAGIC */
    uint8_t version;       /* VL_WIRE_VERSION */
    uint8_t type;          /* enum vl_message_type */
    uint16_t flags;        /* enum vl_flag */
    uint32_t cluster_id;   /* which cell; messages of other cells are ignored */
    uint8_t replica;       /* sender's replica index, or VL_CLIENT_SENDER */
    uint8_t reserved0;     /* zero */
    uint16_t batch_count;  /* Prepare, StartView, NewState: number of log entries in the body */
    uint64_t view;         /* view number */
    uint64_t op;           /* op number; for a Prepare the highest op of its batch */
    uint64_t commit;       /* commit number */
    uint32_t body_len;     /* bytes of body after the header */
    uint32_t reserved1;    /* zero */
    uint64_t checksum;     /* vl_checksum over header (this field as zero) and body */
};

VL_STATIC_ASSERT(sizeof(struct vl_header) == 56, "vl_header size");
VL_STATIC_ASSERT(offsetof(struct vl_header, magic) == 0, "magic offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, version) == 4, "version offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, type) == 5, "type offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, flags) == 6, "flags offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, cluster_id) == 8, "cluster_id offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, replica) == 12, "replica offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, reserved0) == 13, "reserved0 offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, batch_count) == 14, "batch_count offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, view) == 16, "view offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, op) == 24, "op offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, commit) == 32, "commit offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, body_len) == 40, "body_len offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, reserved1) == 44, "reserved1 offset");
VL_STATIC_ASSERT(offsetof(struct vl_header, checksum) == 48, "checksum offset");

#define VL_HEADER_BYTES 56u
#define VL_MAX_BODY_BYTES (VL_MAX_MESSAGE_BYTES - VL_HEADER_BYTES)

/* ---- Bodies ----------------------------------------------------------------------------------
 * All bodies are packed little-endian fields in the order given here.
 *
 * A log entry (Prepare, StartView, NewState; batch_count of them, consecutive op numbers):
 *     u64 timestamp_ms   leader's clock when the op was assigned (the state machine's time)
 *     u64 client_id
 *     u64 request_number
 *     u16 payload_len
 *     u8  payload[payload_len]
 *
 * Request:          u64 client_id, u64 request_number, u8 payload[rest]
 * Reply:            u64 client_id, u64 request_number, u8 result[rest]
 * Prepare:          entries for ops (op - batch_count, op]
 * PrepareOK:        empty: acknowledges every op up to header.op in header.view
 * Commit:           empty
 * StartViewChange:  empty
 * DoViewChange:     u64 last_normal_view  (header.op, header.commit: the sender's)
 * StartView:        u64 first_op, then entries for ops (first_op, first_op + batch_count]
 * Recovery:         u64 nonce
 * RecoveryResponse: u64 nonce  (header view/op/commit: the sender's)
 * GetState:         empty: header.op is the op after which the sender wants entries
 * NewState:         u64 first_op, then entries as in StartView (header.op, header.commit: sender's)
 */
#define VL_ENTRY_FIXED_BYTES 26u
#define VL_REQUEST_FIXED_BYTES 16u
#define VL_REPLY_FIXED_BYTES 16u

/* ---- Checksum ----------------------------------------------------------------------------------
 * Input is taken as little-endian 64-bit words; a final partial word is zero-padded. Each word is
 * multiplied, rotated and mixed into the state; the length is mixed in last so that trailing zero
 * bytes change the result. Shared by user space and eBPF (which feeds words from packet memory).
 */
#define VL_CHECKSUM_SEED 0x9E3779B97F4A7C15ull
#define VL_CHECKSUM_PRIME1 0xC2B2AE3D27D4EB4Full
#define VL_CHECKSUM_PRIME2 0x165667B19E3779F9ull

static inline uint64_t vl_rotl64(uint64_t x, unsigned r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t vl_checksum_mix(uint64_t state, uint64_t word)
{
    state ^= vl_rotl64(word * VL_CHECKSUM_PRIME1, 31) * VL_CHECKSUM_PRIME2;
    return vl_rotl64(state, 27) * VL_CHECKSUM_PRIME1 + VL_CHECKSUM_PRIME2;
}

static inline uint64_t vl_checksum_final(uint64_t state, uint64_t total_len)
{
    state ^= total_len;
    state ^= state >> 33;
    state *= VL_CHECKSUM_PRIME2;
    state ^= state >> 29;
    return state;
}

#ifndef __bpf__
/* Checksum of a whole message laid out contiguously: header (checksum field treated as zero)
 * then body_len bytes of body. */
static inline uint64_t vl_checksum(const uint8_t *msg, uint32_t len)
{
    uint64_t state = VL_CHECKSUM_SEED;
    uint32_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t word = 0;
        for (unsigned b = 0; b < 8; b++)
            word |= (uint64_t)msg[i + b] << (8 * b);
        if (i == offsetof(struct vl_header, checksum))
            word = 0;
        state = vl_checksum_mix(state, word);
    }
    if (i < len) {
        uint64_t word = 0;
        for (unsigned b = 0; i + b < len; b++)
            word |= (uint64_t)msg[i + b] << (8 * b);
        state = vl_checksum_mix(state, word);
    }
    return vl_checksum_final(state, len);
}
#endif

/* ---- Kernel state record (DESIGN.md §3) ------------------------------------------------------
 * The core's view of what the fast paths may do, mirrored into a BPF array map after every
 * change. `version` increases with every record the core emits, so a stale write is detectable.
 */
enum vl_replica_status {
    VL_STATUS_NORMAL = 1,
    VL_STATUS_VIEW_CHANGE = 2,
    VL_STATUS_RECOVERING = 3,
};

struct vl_kernel_state {
    uint64_t version;
    uint64_t view;
    uint64_t last_op;     /* highest op in the log */
    uint64_t commit;
    uint32_t cluster_id;
    uint8_t status;       /* enum vl_replica_status */
    uint8_t replica;      /* this replica's index */
    uint8_t leader;       /* leader of `view` */
    uint8_t replica_count;
    uint8_t fast_ack;     /* 1: a follower in NORMAL may acknowledge Prepares in the kernel */
    uint8_t reserved[7];
};

VL_STATIC_ASSERT(sizeof(struct vl_kernel_state) == 48, "vl_kernel_state size");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, version) == 0, "version offset");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, view) == 8, "view offset");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, last_op) == 16, "last_op offset");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, commit) == 24, "commit offset");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, cluster_id) == 32, "cluster_id offset");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, status) == 36, "status offset");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, replica) == 37, "replica offset");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, leader) == 38, "leader offset");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, replica_count) == 39, "replica_count offset");
VL_STATIC_ASSERT(offsetof(struct vl_kernel_state, fast_ack) == 40, "fast_ack offset");

#endif /* VOLTLOCK_WIRE_H */
