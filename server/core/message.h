// The VR messages as values, and their encoding into one datagram each (bpf/include/voltlock/
// wire.h describes the bytes). Decoding never trusts the input: every length is checked against
// the buffer before it is used, and anything unexpected is rejected with a named reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "core/expected.h"
#include "core/types.h"
#include "voltlock/wire.h"

namespace voltlock {

// §4.1 step 1: a client asks the leader to execute an operation.
struct Request {
    View view = 0;  // the view the client believes current
    ClientId client_id = 0;
    RequestNumber request_number = 0;
    Bytes payload;
    bool operator==(const Request&) const = default;
};

// §4.1 step 5: the result of a request, from the leader of `view`.
struct Reply {
    View view = 0;
    ReplicaIndex replica = 0;
    ClientId client_id = 0;
    RequestNumber request_number = 0;
    // The leader's commit number when it answered: the request's own op is at or below it. A
    // follower that sent the request reads at this commit point (docs/frontend.md, ReadIndex).
    Op commit = 0;
    Bytes result;
    bool operator==(const Reply&) const = default;
};

// §4.1 step 3, batched: `entries` hold ops (op - entries.size(), op].
struct Prepare {
    View view = 0;
    ReplicaIndex replica = 0;
    Op op = 0;
    Op commit = 0;
    std::vector<Entry> entries;
    bool operator==(const Prepare&) const = default;
};

// §4.1 step 4: the sender holds every op up to `op` of view `view`.
struct PrepareOk {
    View view = 0;
    ReplicaIndex replica = 0;
    Op op = 0;
    bool operator==(const PrepareOk&) const = default;
};

// §4.1 step 6; sent every heartbeat interval, busy or not. `heartbeat`: the leader's tick when
// it sent it, echoed by CommitOk.
struct Commit {
    View view = 0;
    ReplicaIndex replica = 0;
    Op commit = 0;
    uint64_t heartbeat = 0;
    bool operator==(const Commit&) const = default;
};

// §4.2 step 1. `asking`: sent in normal status by a follower that lost its leader, which has
// not left its view and starts the view change only once f others ask too (suspect_leader).
struct StartViewChange {
    View view = 0;
    ReplicaIndex replica = 0;
    bool asking = false;
    bool operator==(const StartViewChange&) const = default;
};

// §4.2 step 2. The log itself is not carried: the new leader fetches what it lacks from the
// replica whose log it selects (GetState/NewState), so every message fits one datagram.
// `fence_view`: the view of the last restart fence the sender's state applied (0: none), its
// restart epoch (docs/storage.md).
struct DoViewChange {
    View view = 0;
    ReplicaIndex replica = 0;
    View last_normal_view = 0;
    Op op = 0;
    Op commit = 0;
    View fence_view = 0;
    bool operator==(const DoViewChange&) const = default;
};

// §4.2 step 3, with the log suffix after `first_op` as far as it fits; a follower fetches the
// rest with GetState.
struct StartView {
    View view = 0;
    ReplicaIndex replica = 0;
    Op op = 0;
    Op commit = 0;
    Op first_op = 0;
    std::vector<Entry> entries;  // ops (first_op, first_op + entries.size()]
    bool state_unconfirmed = false;  // see NewState
    bool operator==(const StartView&) const = default;
};

// §4.3 step 1.
struct Recovery {
    ReplicaIndex replica = 0;
    uint64_t nonce = 0;
    bool operator==(const Recovery&) const = default;
};

// Who answers a Recovery (on_recovery): a replica of the running cell (normal, or changing
// views); one recovering with the state of its data directory, which it offers for a
// whole-cell restart (docs/storage.md); or one recovering from nothing (a new data directory,
// or a refused snapshot), which holds nothing (Replica::maybe_bootstrap).
enum class Standing : uint8_t { member = 0, restarting = 1, blank = 2 };
inline bool known(Standing standing) { return standing <= Standing::blank; }
const char* standing_name(Standing standing);  // "member", "restarting", "blank"

// §4.3 step 2. The leader's log is fetched afterwards with GetState, as in StartView.
struct RecoveryResponse {
    View view = 0;
    ReplicaIndex replica = 0;
    uint64_t nonce = 0;
    Op op = 0;
    Op commit = 0;
    View last_normal_view = 0;
    Standing standing = Standing::member;
    bool operator==(const RecoveryResponse&) const = default;
};

// §5.2: send me the entries of view `view` after `op`.
struct GetState {
    View view = 0;
    ReplicaIndex replica = 0;
    Op op = 0;
    bool operator==(const GetState&) const = default;
};

// §5.2: entries after `first_op`, as many as fit; `op` and `commit` are the sender's.
// `state_unconfirmed`: the sender's state is not yet known to be the cell's history (restored
// from a snapshot alone, it waits for a restart fence to commit on top of it; docs/storage.md),
// and neither is a state taken from it.
struct NewState {
    View view = 0;
    ReplicaIndex replica = 0;
    Op op = 0;
    Op commit = 0;
    Op first_op = 0;
    std::vector<Entry> entries;
    bool state_unconfirmed = false;
    bool operator==(const NewState&) const = default;
};

// §5.2 after log compaction: the entries asked for are in the sender's snapshot of every op up
// to `op`; fetch that (over TCP: it does not fit a datagram), then ask for the entries after it.
struct SnapshotOffer {
    View view = 0;
    ReplicaIndex replica = 0;
    Op op = 0;
    bool state_unconfirmed = false;  // see NewState
    bool operator==(const SnapshotOffer&) const = default;
};

// A follower in normal status in `view` heard the leader's Commit `heartbeat`. Not in the
// paper: the leader counts these to know that a quorum still hears it and answers (a leader
// that hears nobody steps down, so that a one-way cut to it ends its view; docs/replication.md)
// and, by when it sent the heartbeat, how long its leader lease runs (docs/leases.md). A
// PrepareOK cannot serve: the leader's kernel drops those it counted (Electrode §4.3), and a
// follower's kernel sends them for a process that may be stalled.
struct CommitOk {
    View view = 0;
    ReplicaIndex replica = 0;
    uint64_t heartbeat = 0;
    bool operator==(const CommitOk&) const = default;
};

// Not in the paper: the leader's Replies of one turn to one follower's forwarded Requests, in
// one datagram instead of one each (docs/frontend.md). Each item is a Reply of `view` from
// `replica`; the receiver takes them one by one (reply_of).
struct BatchedReply {
    ClientId client_id = 0;
    RequestNumber request_number = 0;
    Op commit = 0;
    Bytes result;
    bool operator==(const BatchedReply&) const = default;
};
struct Replies {
    View view = 0;
    ReplicaIndex replica = 0;
    std::vector<BatchedReply> items;
    bool operator==(const Replies&) const = default;
};

// Not in the paper: the Requests a follower's API forwards to the leader in one turn of its
// loop, in one datagram. Each item is a Request believing in `view`, and `replica` is the
// follower that sent them; the leader takes them one by one (request_of).
struct BatchedRequest {
    ClientId client_id = 0;
    RequestNumber request_number = 0;
    Bytes payload;
    bool operator==(const BatchedRequest&) const = default;
};
struct Requests {
    View view = 0;
    ReplicaIndex replica = 0;
    std::vector<BatchedRequest> items;
    bool operator==(const Requests&) const = default;
};

Reply reply_of(const Replies& replies, const BatchedReply& item);
Request request_of(const Requests& requests, const BatchedRequest& item);

using Message = std::variant<Request, Reply, Prepare, PrepareOk, Commit, StartViewChange,
                             DoViewChange, StartView, Recovery, RecoveryResponse, GetState,
                             NewState, SnapshotOffer, CommitOk, Replies, Requests>;

const char* message_name(const Message& message);
// The replica index in the header: the sender's, or VL_CLIENT_SENDER for a Request.
ReplicaIndex sender_of(const Message& message);
const char* message_type_name(vl_message_type type);  // "unknown" outside the enum
vl_message_type message_type(const Message& message);

// ---- Encoding -------------------------------------------------------------------------------

// Bytes an entry takes inside a body.
inline size_t entry_wire_bytes(const Entry& entry)
{
    return VL_ENTRY_FIXED_BYTES + entry.payload.size();
}

// What StartView and NewState carry before their entries: first_op, state_unconfirmed.
inline constexpr size_t kStateTransferPrefixBytes = 8 + 1;

// The largest payload one log entry may carry: an entry must fit alone in the message with the
// most overhead that carries entries (StartView/NewState), or it could never be transferred.
// 1381 bytes at the default message size.
constexpr size_t max_entry_payload_bytes(uint32_t max_message_bytes)
{
    constexpr size_t overhead = VL_HEADER_BYTES + kStateTransferPrefixBytes + VL_ENTRY_FIXED_BYTES;
    return max_message_bytes > overhead ? max_message_bytes - overhead : 0;
}

// The largest result one Reply may carry.
constexpr size_t max_reply_result_bytes(uint32_t max_message_bytes)
{
    constexpr size_t overhead = VL_HEADER_BYTES + VL_REPLY_FIXED_BYTES;
    return max_message_bytes > overhead ? max_message_bytes - overhead : 0;
}

// `replies` (to one destination) as few messages as carry them within max_message_bytes: a
// Replies for two or more that fit together, a Reply for one alone or one too big to share;
// in order, a Reply of another view or replica than the batch's starting a batch of its own.
std::vector<Message> batch_replies(std::vector<Reply> replies, uint32_t max_message_bytes);
// The same for the Requests that replica `sender` forwards to one leader.
std::vector<Message> batch_requests(std::vector<Request> requests, ReplicaIndex sender,
                                    uint32_t max_message_bytes);

// How a cell's datagrams are stamped and checked (wire.h): its cluster id, and its replication
// keys (docs/security.md). With keys, every datagram carries SipHash-2-4 under keys.key[0] and
// one is accepted if any of the keys made its tag; without (keys.count == 0), the checksum,
// which catches corruption but not forgery. Implicit from a cluster id alone: a cell without a
// key, as tests and the simulator run.
struct CellWire {
    CellWire(uint32_t cell_id, const vl_mac_keys& cell_keys = {})
        : cluster_id(cell_id), keys(cell_keys)
    {
    }
    bool authenticated() const { return keys.count > 0; }

    uint32_t cluster_id = 0;
    vl_mac_keys keys{};
};

// The tag `wire` puts on the `len`-byte message at `msg` (its tag field taken as zero).
uint64_t message_tag(const uint8_t* msg, uint32_t len, const CellWire& wire);

// Bytes the whole datagram of `message` takes.
size_t encoded_size(const Message& message);

// Writes `message` into `out` and returns the datagram's length, or 0 if it does not fit in
// `out` or an entry's payload exceeds the 16-bit length field. `flags` are enum vl_flag bits.
// Every datagram a replica or a client sends goes through here, so every one carries the tag.
size_t encode(const Message& message, const CellWire& wire, uint16_t flags,
              std::span<uint8_t> out);

// Convenience for tests and the simulator.
std::vector<uint8_t> encode(const Message& message, const CellWire& wire, uint16_t flags = 0);

// ---- Decoding -------------------------------------------------------------------------------

enum class DecodeError : uint8_t {
    truncated,         // shorter than a header
    bad_magic,
    bad_version,
    unknown_type,
    wrong_cluster,
    bad_length,        // body_len disagrees with the datagram's length
    bad_checksum,
    bad_flags,         // unknown flag bits
    bad_reserved,      // reserved fields, or fields the type does not carry, not zero
    bad_replica,       // replica index out of range for the sender's role
    bad_body,          // the body does not parse as the type's body
    bad_mac,           // a cell with keys: none of them made the tag (forged, corrupted, or
                       // sent by a replica or client with another key)
};
const char* decode_error_name(DecodeError error);
inline constexpr size_t decode_error_count = 12;

struct Decoded {
    Message message;
    uint16_t flags = 0;
};

// Either a decoded message or the reason it was rejected.
using DecodeResult = Expected<Decoded, DecodeError>;

// Checks the tag before anything else of the body is believed: nothing of a datagram that
// fails it reaches the core.
DecodeResult decode(std::span<const uint8_t> datagram, const CellWire& wire);

}  // namespace voltlock
