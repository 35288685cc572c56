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
 * Its tag (the header's `checksum` field) covers the header (with the tag taken as zero) and the
 * body. In a cell with a replication key (docs/security.md) the tag is a MAC, SipHash-2-4 keyed
 * with the cell's key; in a cell without one it is vl_checksum, a word-wise multiply-rotate hash
 * that catches corruption but not forgery. Which of the two a receiver expects is its
 * configuration's say, never the packet's: there is no flag to downgrade. Both are word-wise
 * rather than a CRC because the XDP fast path computes them with a bounded loop over packet
 * memory, where table lookups per byte would cost too much.
 */
#ifndef VOLTLOCK_WIRE_H
#define VOLTLOCK_WIRE_H

#ifdef __bpf__
#include <linux/bpf.h> /* struct bpf_spin_lock, for the map values below */
#include <linux/types.h>
typedef __u8 uint8_t;
typedef __u16 uint16_t;
typedef __u32 uint32_t;
typedef __u64 uint64_t;
/* No libc under -target bpf: offsetof for the layout assertions below. The compiler's own, also
 * when <bpf/bpf_helpers.h> came first (its cast-based offsetof is no constant expression). */
#undef offsetof
#define offsetof(type, member) __builtin_offsetof(type, member)
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
    VL_MSG_SNAPSHOT_OFFER = 13,    /* §5.2, compacted: fetch my snapshot over TCP first */
    VL_MSG_COMMIT_OK = 14,         /* follower -> leader: heard your heartbeat (docs/leases.md) */
    VL_MSG_REPLIES = 15,           /* leader -> follower: a turn's Replies to it, together */
    VL_MSG_REQUESTS = 16,          /* follower -> leader: a turn's forwarded Requests, together */
};
#define VL_MSG_TYPE_MIN VL_MSG_REQUEST
#define VL_MSG_TYPE_MAX VL_MSG_REQUESTS

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
    uint64_t checksum;     /* the tag: vl_mac (cell key set) or vl_checksum (none) over the
                              header (this field as zero) and body */
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
 * Reply:            u64 client_id, u64 request_number, u8 result[rest] (header.commit: the
 *                   leader's commit number when it answered, the request's op at or below it)
 * Prepare:          entries for ops (op - batch_count, op]
 * PrepareOK:        empty: acknowledges every op up to header.op in header.view
 * Commit:           empty (header.op: the leader's tick when it sent this heartbeat)
 * StartViewChange:  empty (header.op: 1 when the sender, in normal status in view - 1, lost its
 *                   leader and asks whether others did too, without leaving its view; else 0)
 * DoViewChange:     u64 last_normal_view, u64 fence_view  (header.op, header.commit: the
 *                   sender's; fence_view: the view of its state's last restart fence)
 * StartView:        u64 first_op, u8 state_unconfirmed (0 or 1), then entries for ops
 *                   (first_op, first_op + batch_count]; state_unconfirmed: the sender's state
 *                   waits for a restart fence to become the cell's history (docs/storage.md)
 * Recovery:         u64 nonce
 * RecoveryResponse: u64 nonce, u64 last_normal_view, u8 restarting (0 or 1)
 *                   (header view/op/commit: the sender's; restarting: it is recovering too,
 *                   from its data directory, and offers its state for a whole-cell restart)
 * GetState:         empty: header.op is the op after which the sender wants entries
 * NewState:         as StartView (header.op, header.commit: the sender's)
 * SnapshotOffer:    u8 state_unconfirmed, as in StartView: the entries asked for are compacted
 *                   into the sender's snapshot of every op up to header.op, which it serves over
 *                   TCP (HTTP) to fetch first
 * CommitOK:         empty: header.op echoes the Commit's; the sender is a follower in normal
 *                   status in header.view. User space sends it (XDP passes it up and never
 *                   counts it), so that the leader hears its followers' processes, not kernels
 * Replies:          u16 count, then count times: u64 client_id, u64 request_number, u64 commit,
 *                   u16 result_len, u8 result[result_len]. Each is a Reply of header.view from
 *                   header.replica, with its own commit: the leader's Replies of one turn to
 *                   one follower's forwarded Requests, in one datagram instead of one each
 * Requests:         u16 count, then count times: u64 client_id, u64 request_number,
 *                   u16 payload_len, u8 payload[payload_len]. Each is a Request believing in
 *                   header.view, forwarded by the follower header.replica: its API's Requests of
 *                   one turn to the leader, in one datagram instead of one each
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

/* ---- Message authentication code ----------------------------------------------------------
 * SipHash-2-4 (Aumasson & Bernstein, 2012) keyed with the cell's 128-bit replication key, over
 * the message with the tag field taken as zero: exactly the reference function over those bytes,
 * so the paper's test vectors check it. Chosen for the verifier: additions, rotations and xors on
 * 64-bit words, no tables, no multiplications, a fixed number of rounds per word, so XDP runs it
 * with the same bounded word loop as the checksum.
 *
 * Key rotation (docs/security.md): a replica holds up to VL_MAC_KEYS keys. It sends with key[0]
 * and accepts a message whose tag matches any of its `count` keys. count 0: no key, the tag is
 * vl_checksum. The same record is the value of the vl_mac_keys map, written by user space before
 * the programs attach. */
#define VL_MAC_KEYS 2u

struct vl_mac_key {
    uint64_t k0; /* key bytes 0..7, little-endian */
    uint64_t k1; /* key bytes 8..15 */
};

struct vl_mac_keys {
    uint32_t count; /* keys in use: 0 (checksum only) .. VL_MAC_KEYS */
    uint32_t reserved;
    struct vl_mac_key key[VL_MAC_KEYS]; /* key[0]: sends and verifies; key[1]: verifies */
};

VL_STATIC_ASSERT(sizeof(struct vl_mac_key) == 16, "vl_mac_key size");
VL_STATIC_ASSERT(sizeof(struct vl_mac_keys) == 40, "vl_mac_keys size");
VL_STATIC_ASSERT(offsetof(struct vl_mac_keys, key) == 8, "key offset");

struct vl_siphash {
    uint64_t v0, v1, v2, v3;
};

static inline void vl_siphash_init(struct vl_siphash *s, const struct vl_mac_key *key)
{
    s->v0 = key->k0 ^ 0x736f6d6570736575ull;
    s->v1 = key->k1 ^ 0x646f72616e646f6dull;
    s->v2 = key->k0 ^ 0x6c7967656e657261ull;
    s->v3 = key->k1 ^ 0x7465646279746573ull;
}

static inline void vl_siphash_round(struct vl_siphash *s)
{
    s->v0 += s->v1;
    s->v1 = vl_rotl64(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = vl_rotl64(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = vl_rotl64(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = vl_rotl64(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = vl_rotl64(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = vl_rotl64(s->v2, 32);
}

/* One 8-byte word of input: two compression rounds (the "2" of SipHash-2-4). */
static inline void vl_siphash_word(struct vl_siphash *s, uint64_t m)
{
    s->v3 ^= m;
    vl_siphash_round(s);
    vl_siphash_round(s);
    s->v0 ^= m;
}

/* `tail`: the last 0..7 bytes of input, zero-padded, as a little-endian word; `total_len`: bytes
 * of input. Four finalization rounds (the "4"). */
static inline uint64_t vl_siphash_final(struct vl_siphash *s, uint64_t tail, uint64_t total_len)
{
    vl_siphash_word(s, tail | (total_len << 56));
    s->v2 ^= 0xff;
    vl_siphash_round(s);
    vl_siphash_round(s);
    vl_siphash_round(s);
    vl_siphash_round(s);
    return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

#ifndef __bpf__
/* SipHash-2-4 of `len` bytes, with bytes [skip_at, skip_at + 8) taken as zero (skip_at = len or
 * more: none). */
static inline uint64_t vl_siphash_bytes(const uint8_t *msg, uint32_t len, uint32_t skip_at,
                                        const struct vl_mac_key *key)
{
    struct vl_siphash s;
    vl_siphash_init(&s, key);
    uint32_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t word = 0;
        for (unsigned b = 0; b < 8; b++)
            word |= (uint64_t)msg[i + b] << (8 * b);
        vl_siphash_word(&s, i == skip_at ? 0 : word);
    }
    uint64_t tail = 0;
    for (unsigned b = 0; i + b < len; b++)
        tail |= (uint64_t)msg[i + b] << (8 * b);
    return vl_siphash_final(&s, tail, len);
}

/* The MAC of a whole message laid out contiguously (tag field treated as zero). */
static inline uint64_t vl_mac(const uint8_t *msg, uint32_t len, const struct vl_mac_key *key)
{
    return vl_siphash_bytes(msg, len, offsetof(struct vl_header, checksum), key);
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

/* ==== Electrode fast paths: BPF map layouts shared by bpf/ and user space ====================
 * Nothing below crosses the network. These are the values of the maps that the eBPF programs in
 * bpf/ (electrode_xdp.bpf.c, electrode_tc.bpf.c; one skeleton, electrode.skel.h) share with
 * voltlockd, and the names of their counters. docs/electrode.md gives the contract: who writes
 * which map, when, and how the programs are attached. Same rules as above: fixed-width fields,
 * explicit padding, sizes and offsets asserted, values never renumbered.
 *
 * Byte order: host (little-endian), except fields named *_be, which are in network byte order
 * exactly as they appear in IP and UDP headers.
 */

/* Quorum slots (Electrode §4.3): op n of the leader's Prepares is tracked in slot
 * n & (VL_QUORUM_SLOTS - 1) (the programs use the configured mask, at most this). A power of two,
 * at least the leader's pipeline of uncommitted Prepares, so that a slot is reused only by an op
 * that is no longer in flight. */
#define VL_QUORUM_SLOTS 4096u
/* Default size of the fast-ack ring buffer (a power of two, a multiple of the page size). */
#define VL_RING_BYTES (4u << 20)
/* skb->mark that the TC program puts on the clones it makes, so that it recognises them when they
 * come back through TC egress and lets them pass (no clone recursion). Configurable before load. */
#define VL_CLONE_MARK 0x564C4B43u /* "CKLV" */

/* Which fast paths user space allows right now (vl_state_value.enabled). Each can be switched on
 * and off on its own, at any time; a fast path that is off is always safe. */
enum vl_fast_path {
    VL_FAST_PATH_FAST_ACK = 1u << 0,  /* follower XDP acknowledges Prepares (also needs
                                         vl_kernel_state.fast_ack) */
    VL_FAST_PATH_QUORUM = 1u << 1,    /* leader: TC arms slots, XDP counts PrepareOKs */
    VL_FAST_PATH_BROADCAST = 1u << 2, /* leader: TC clones VL_FLAG_BROADCAST messages */
};
#define VL_FAST_PATHS_ALL (VL_FAST_PATH_FAST_ACK | VL_FAST_PATH_QUORUM | VL_FAST_PATH_BROADCAST)

/* The kernel's spin lock is a 4-byte word that user space never touches (the map syscalls skip it
 * and take it themselves with BPF_F_LOCK). */
#ifdef __bpf__
#define VL_SPIN_LOCK struct bpf_spin_lock
#else
struct vl_spin_lock {
    uint32_t val;
};
#define VL_SPIN_LOCK struct vl_spin_lock
#endif

/* Map vl_state: ARRAY[1]. Written by user space only, with BPF_F_LOCK, after every
 * KernelStateChanged the core emits and whenever `enabled` changes. Read by XDP and TC under the
 * lock. */
struct vl_state_value {
    VL_SPIN_LOCK lock;
    uint32_t enabled;             /* enum vl_fast_path bits */
    struct vl_kernel_state state; /* the core's record, as emitted */
};

VL_STATIC_ASSERT(sizeof(struct vl_state_value) == 56, "vl_state_value size");
VL_STATIC_ASSERT(offsetof(struct vl_state_value, lock) == 0, "lock offset");
VL_STATIC_ASSERT(offsetof(struct vl_state_value, enabled) == 4, "enabled offset");
VL_STATIC_ASSERT(offsetof(struct vl_state_value, state) == 8, "state offset");

/* Map vl_fast_ack_log: ARRAY[1]. Written by the XDP program only, while it holds vl_state's lock;
 * user space reads it (for status pages) and never writes it. The ops (0, last_op] of `view` are
 * each in the ring buffer or in user space's log. The fast path uses
 *     last_op = (log.view == state.view) ? max(log.last_op, state.last_op) : state.last_op
 * so user space may write a state.last_op behind what the kernel appended, and the kernel's own
 * progress never leaks into another view. */
struct vl_fast_ack_log {
    uint64_t view;
    uint64_t last_op;
};

VL_STATIC_ASSERT(sizeof(struct vl_fast_ack_log) == 16, "vl_fast_ack_log size");
VL_STATIC_ASSERT(offsetof(struct vl_fast_ack_log, view) == 0, "view offset");
VL_STATIC_ASSERT(offsetof(struct vl_fast_ack_log, last_op) == 8, "last_op offset");

/* Map vl_peers: ARRAY[VL_MAX_REPLICAS], indexed by replica index, this replica's own entry
 * included (the programs skip it). Written by user space at start and whenever a neighbour entry
 * changes. XDP accepts a Prepare or PrepareOK only from peers[header.replica]'s address and port;
 * TC finds the destination of an outgoing message among the peers and clones to the others. */
enum vl_peer_flag {
    VL_PEER_CONFIGURED = 1u << 0, /* ipv4_be and port_be are set */
    VL_PEER_RESOLVED = 1u << 1,   /* mac holds the next hop's address (may be all zero, as on lo) */
};

struct vl_peer {
    uint32_t ipv4_be; /* network byte order */
    uint16_t port_be; /* network byte order */
    uint8_t mac[6];   /* destination MAC for clones sent to this peer */
    uint8_t flags;    /* enum vl_peer_flag */
    uint8_t reserved[3];
};

VL_STATIC_ASSERT(sizeof(struct vl_peer) == 16, "vl_peer size");
VL_STATIC_ASSERT(offsetof(struct vl_peer, ipv4_be) == 0, "ipv4_be offset");
VL_STATIC_ASSERT(offsetof(struct vl_peer, port_be) == 4, "port_be offset");
VL_STATIC_ASSERT(offsetof(struct vl_peer, mac) == 6, "mac offset");
VL_STATIC_ASSERT(offsetof(struct vl_peer, flags) == 12, "flags offset");
VL_STATIC_ASSERT(offsetof(struct vl_peer, reserved) == 13, "reserved offset");

/* Map vl_quorum_slots: ARRAY[VL_QUORUM_SLOTS]. Kernel-owned: TC arms a slot for every Prepare the
 * leader sends, XDP sets a follower's bit for each PrepareOK(view, op). User space only reads. */
struct vl_quorum_slot {
    VL_SPIN_LOCK lock;
    uint16_t acked;    /* bit r: follower r acknowledged (view, op) */
    uint8_t completed; /* the PrepareOK that completed the quorum was passed up, marked */
    uint8_t reserved;
    uint64_t view;
    uint64_t op;
};

VL_STATIC_ASSERT(sizeof(struct vl_quorum_slot) == 24, "vl_quorum_slot size");
VL_STATIC_ASSERT(offsetof(struct vl_quorum_slot, acked) == 4, "acked offset");
VL_STATIC_ASSERT(offsetof(struct vl_quorum_slot, completed) == 6, "completed offset");
VL_STATIC_ASSERT(offsetof(struct vl_quorum_slot, reserved) == 7, "reserved offset");
VL_STATIC_ASSERT(offsetof(struct vl_quorum_slot, view) == 8, "view offset");
VL_STATIC_ASSERT(offsetof(struct vl_quorum_slot, op) == 16, "op offset");

/* Map vl_acked_ops: ARRAY[VL_MAX_REPLICAS], indexed by replica. Kernel-owned: for every valid
 * PrepareOK that reaches XDP (dropped or not), the highest (view, op) that replica acknowledged.
 * User space reads it with BPF_F_LOCK; the leader's core needs it because the quorum fast path
 * drops most PrepareOKs before they reach the socket. */
struct vl_follower_ack {
    VL_SPIN_LOCK lock;
    uint32_t reserved;
    uint64_t view;
    uint64_t op;
};

VL_STATIC_ASSERT(sizeof(struct vl_follower_ack) == 24, "vl_follower_ack size");
VL_STATIC_ASSERT(offsetof(struct vl_follower_ack, reserved) == 4, "reserved offset");
VL_STATIC_ASSERT(offsetof(struct vl_follower_ack, view) == 8, "view offset");
VL_STATIC_ASSERT(offsetof(struct vl_follower_ack, op) == 16, "op offset");

/* Map vl_ring: RINGBUF, VL_RING_BYTES unless resized before load. One record per Prepare the
 * follower's XDP program acknowledged as an append: the Prepare's UDP payload, byte for byte
 * (header and body, checksum verified, entries parsed), record size = datagram size. Feed it to
 * decode() like a datagram from the socket. */

/* Map vl_stats: PERCPU_ARRAY[VL_STAT_SLOTS] of uint64_t, indexed by enum vl_stat; sum over CPUs.
 * Each packet a program sees ends in exactly one exit counter (E below); event counters (V) come
 * on top. Ingress: XDP verdict in brackets. Egress: every exit is TC_ACT_OK. */
#define VL_STAT_LIST(X)                                                                            \
    /* XDP, every packet: not ours, or not acceptable */                                         \
    X(VL_STAT_XDP_NOT_IPV4, 0, "xdp_not_ipv4")             /* E [pass] not IPv4 over Ethernet */ \
    X(VL_STAT_XDP_NOT_UDP, 1, "xdp_not_udp")               /* E [pass] not UDP, short IP */      \
    X(VL_STAT_XDP_IP_OPTIONS, 2, "xdp_ip_options")         /* E [pass] IPv4 options */           \
    X(VL_STAT_XDP_IP_FRAGMENT, 3, "xdp_ip_fragment")       /* E [pass] fragment */               \
    X(VL_STAT_XDP_NOT_OUR_PORT, 4, "xdp_not_our_port")     /* E [pass] other UDP port */         \
    X(VL_STAT_XDP_TRUNCATED, 5, "xdp_truncated")           /* E [pass] IP/UDP lengths, no hdr */ \
    X(VL_STAT_XDP_BAD_MAGIC, 6, "xdp_bad_magic")           /* E [pass] */                        \
    X(VL_STAT_XDP_BAD_VERSION, 7, "xdp_bad_version")       /* E [pass] */                        \
    X(VL_STAT_XDP_WRONG_CLUSTER, 8, "xdp_wrong_cluster")   /* E [pass] */                        \
    X(VL_STAT_XDP_BAD_REPLICA, 9, "xdp_bad_replica")       /* E [pass] sender >= replica count */\
    X(VL_STAT_XDP_NOT_PEER, 10, "xdp_not_peer")            /* E [pass] source != peers[sender] */\
    X(VL_STAT_XDP_BAD_LENGTH, 11, "xdp_bad_length")        /* E [pass] body_len vs UDP length */ \
    X(VL_STAT_XDP_MALFORMED, 12, "xdp_malformed")          /* E [pass] fields the type forbids */\
    X(VL_STAT_XDP_BAD_CHECKSUM, 13, "xdp_bad_checksum")    /* E [pass] */                        \
    X(VL_STAT_XDP_OTHER_TYPE, 14, "xdp_other_type")        /* E [pass] not Prepare/PrepareOK */  \
    X(VL_STAT_XDP_TOO_BIG, 15, "xdp_too_big")              /* E [pass] > VL_MAX_MESSAGE_BYTES */ \
    /* XDP, Prepare on a follower (Electrode §4.2) */                                            \
    X(VL_STAT_FA_APPENDED, 16, "fa_appended")              /* E [tx] in ring, acknowledged */    \
    X(VL_STAT_FA_REACKED, 17, "fa_reacked")                /* E [tx] held already, ack again */  \
    X(VL_STAT_FA_DISABLED, 18, "fa_disabled")              /* E [pass] fast ack off */           \
    X(VL_STAT_FA_NOT_NORMAL, 19, "fa_not_normal")          /* E [pass] status != NORMAL */       \
    X(VL_STAT_FA_STALE_VIEW, 20, "fa_stale_view")          /* E [pass] view < ours */            \
    X(VL_STAT_FA_NEWER_VIEW, 21, "fa_newer_view")          /* E [pass] view > ours */            \
    X(VL_STAT_FA_NOT_FROM_LEADER, 22, "fa_not_from_leader")/* E [pass] sender != leader */       \
    X(VL_STAT_FA_IS_LEADER, 23, "fa_is_leader")            /* E [pass] we lead this view */      \
    X(VL_STAT_FA_GAP, 24, "fa_gap")                        /* E [pass] ops missing before it */  \
    X(VL_STAT_FA_OVERLAP, 25, "fa_overlap")                /* E [pass] batch partly held */      \
    X(VL_STAT_FA_RING_FULL, 26, "fa_ring_full")            /* E [pass] no room in the ring */    \
    X(VL_STAT_FA_STATE_CHANGED, 27, "fa_state_changed")    /* E [pass] in ring, not acked */     \
    X(VL_STAT_FA_ADJUST_FAILED, 28, "fa_adjust_failed")    /* E [pass] could not shrink packet */\
    /* XDP, PrepareOK on the leader (Electrode §4.3) */                                          \
    X(VL_STAT_Q_COUNTED, 29, "q_counted")                  /* E [drop] counted, no quorum yet */ \
    X(VL_STAT_Q_COMPLETE, 30, "q_complete")                /* E [pass] marked VL_FLAG_QUORUM */  \
    X(VL_STAT_Q_DUPLICATE, 31, "q_duplicate")              /* E [drop] bit already set */        \
    X(VL_STAT_Q_LATE, 32, "q_late")                        /* E [drop] counted after quorum */   \
    X(VL_STAT_Q_UNTRACKED, 33, "q_untracked")              /* E [pass] slot holds another op */  \
    X(VL_STAT_Q_INVALID, 34, "q_invalid")                  /* E [pass] sender is us/out of range*/\
    X(VL_STAT_Q_DISABLED, 35, "q_disabled")                /* E [pass] off, or not leader */     \
    X(VL_STAT_Q_FORGED, 36, "q_forged")                    /* E [drop] VL_FLAG_QUORUM on wire */ \
    X(VL_STAT_XDP_INTERNAL, 37, "xdp_internal")            /* E [pass] map lookup failed */      \
    /* TC egress (Electrode §4.1, §4.3) */                                                       \
    X(VL_STAT_TC_NOT_IPV4, 38, "tc_not_ipv4")              /* E */                               \
    X(VL_STAT_TC_NOT_UDP, 39, "tc_not_udp")                /* E also options, fragments */       \
    X(VL_STAT_TC_NOT_OUR_PORT, 40, "tc_not_our_port")      /* E source port not ours */          \
    X(VL_STAT_TC_NOT_PEER, 41, "tc_not_peer")              /* E destination not a peer */        \
    X(VL_STAT_TC_NOT_OURS, 42, "tc_not_ours")              /* E short, magic, cluster, sender */ \
    X(VL_STAT_TC_OTHER_TYPE, 43, "tc_other_type")          /* E not Prepare/Commit */            \
    X(VL_STAT_TC_CLONE_SEEN, 44, "tc_clone_seen")          /* E one of our clones, passed */     \
    X(VL_STAT_TC_UNICAST, 45, "tc_unicast")                /* E no VL_FLAG_BROADCAST */          \
    X(VL_STAT_TC_BROADCAST, 46, "tc_broadcast")            /* E cloned to every other peer */    \
    X(VL_STAT_TC_BROADCAST_OFF, 47, "tc_broadcast_off")    /* E flag set, path off: one peer */  \
    X(VL_STAT_TC_UNRESOLVED, 48, "tc_unresolved")          /* E a peer unresolved: one peer */   \
    X(VL_STAT_TC_ARMED, 49, "tc_armed")                    /* V slot armed for a new op */       \
    X(VL_STAT_TC_REARMED, 50, "tc_rearmed")                /* V same (view, op): kept */         \
    X(VL_STAT_TC_ARM_STALE, 51, "tc_arm_stale")            /* V slot holds a later op: kept */   \
    X(VL_STAT_TC_CLONES, 52, "tc_clones")                  /* V clones handed to the device */   \
    X(VL_STAT_TC_CLONE_FAILED, 53, "tc_clone_failed")      /* V bpf_clone_redirect failed */     \
    X(VL_STAT_TC_INTERNAL, 54, "tc_internal")              /* V map lookup or rewrite failed */ \
    /* XDP, a Prepare or PrepareOK from a peer whose MAC none of our keys verifies: forged,      \
     * corrupted, or a replica with another key (docs/security.md) */                           \
    X(VL_STAT_XDP_BAD_MAC, 55, "xdp_bad_mac")              /* E [drop] */

enum vl_stat {
#define VL_STAT_ENUM(name, value, text) name = value,
    VL_STAT_LIST(VL_STAT_ENUM)
#undef VL_STAT_ENUM
};
#define VL_STAT_COUNT 56u
/* Slots in vl_stats: room to add counters without resizing the map. */
#define VL_STAT_SLOTS 64u
VL_STATIC_ASSERT(VL_STAT_XDP_BAD_MAC + 1 == VL_STAT_COUNT, "VL_STAT_COUNT follows the last");
VL_STATIC_ASSERT(VL_STAT_COUNT <= VL_STAT_SLOTS, "vl_stats has a slot for every counter");
/* "No counter": what a check returns when the packet passed it. */
#define VL_STAT_NONE 0xFFFFFFFFu

#ifndef __bpf__
/* The counter's name for logs and status pages ("fa_gap"), or "unknown". */
static inline const char *vl_stat_name(uint32_t stat)
{
    switch (stat) {
#define VL_STAT_CASE(name, value, text) \
    case value:                         \
        return text;
        VL_STAT_LIST(VL_STAT_CASE)
#undef VL_STAT_CASE
    }
    return "unknown";
}
#endif

#endif /* VOLTLOCK_WIRE_H */
