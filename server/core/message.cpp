#include "core/message.h"

#include "core/codec.h"
#include "core/overloaded.h"

#include <concepts>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

namespace voltlock {

namespace {

// The vl_header fields a message fills; the rest of the header is the same for every message.
struct HeaderFields {
    ReplicaIndex replica = 0;
    View view = 0;
    Op op = 0;
    Op commit = 0;
    uint16_t batch_count = 0;
};

// A codec sink or source (codec.h) that also carries a message's header fields: its layout
// below names the header slots it fills, then its body. Encoding collects the header; decoding
// is given it, and remembers which slots the type left, which must be zero.
template <typename Io>
class WireIo : public Io {
public:
    using Io::Io;
    WireIo(std::span<const uint8_t> body, const HeaderFields& header)
        requires std::same_as<Io, codec::Reader>
        : Io(body), header_(header)
    {
    }

    bool replica(auto& v) { return slot(header_.replica, v, kReplica); }
    bool view(auto& v) { return slot(header_.view, v, kView); }
    bool op(auto& v) { return slot(header_.op, v, kOp); }
    bool commit(auto& v) { return slot(header_.commit, v, kCommit); }
    // A flag in the op slot: 0 or 1, as a boolean in the body (one message, one encoding).
    bool op_flag(auto& v)
    {
        if constexpr (std::is_const_v<std::remove_reference_t<decltype(v)>> ||
                      !std::same_as<Io, codec::Reader>) {
            uint64_t encoded = v ? 1 : 0;
            return slot(header_.op, encoded, kOp);
        } else {
            uint64_t decoded = 0;
            slot(header_.op, decoded, kOp);
            v = decoded == 1;
            return decoded <= 1;
        }
    }
    // A Request: from a client, whose sender slot is VL_CLIENT_SENDER (checked before decoding).
    bool client_sender()
    {
        uint8_t sender = VL_CLIENT_SENDER;
        return slot(header_.replica, sender, kReplica);
    }
    // Log entries, counted by the header's batch_count.
    template <typename Entries>
    bool entries(Entries& entries)
    {
        claimed_ |= kBatch;
        if constexpr (std::is_const_v<Entries>) {
            header_.batch_count = static_cast<uint16_t>(entries.size());
        } else {
            // Each entry takes at least VL_ENTRY_FIXED_BYTES, so a count that cannot fit is a
            // lie caught before anything is allocated for it.
            if (size_t{header_.batch_count} * VL_ENTRY_FIXED_BYTES > this->remaining())
                return false;
            entries.resize(header_.batch_count);
        }
        for (auto& e : entries)
            if (!(this->u64(e.timestamp_ms) && this->u64(e.client_id) &&
                  this->u64(e.request_number) && this->template str<uint16_t>(e.payload)))
                return false;
        return true;
    }

    const HeaderFields& header() const { return header_; }
    bool batch_claimed() const { return (claimed_ & kBatch) != 0; }
    // Every slot the type does not fill is zero: one message has one encoding, and whatever
    // reads headers in place (the XDP programs) sees what the core sees.
    bool unclaimed_slots_zero() const
    {
        return ((claimed_ & kReplica) || header_.replica == 0) &&
               ((claimed_ & kView) || header_.view == 0) && ((claimed_ & kOp) || header_.op == 0) &&
               ((claimed_ & kCommit) || header_.commit == 0);
    }

private:
    static constexpr uint8_t kReplica = 1, kView = 2, kOp = 4, kCommit = 8, kBatch = 16;

    template <typename Slot, typename Field>
    bool slot(Slot& slot, Field& field, uint8_t which)
    {
        claimed_ |= which;
        if constexpr (std::is_const_v<Field> || !std::same_as<Io, codec::Reader>)
            slot = field;
        else
            field = slot;
        return true;
    }

    HeaderFields header_{};
    uint8_t claimed_ = 0;
};

}  // namespace

// ---- The layouts: header slots, then the body (wire.h) --------------------------------------

template <typename Io, codec::MaybeConst<Request> M>
bool fields(Io& io, M& m)
{
    return io.client_sender() && io.view(m.view) && io.u64(m.client_id) &&
           io.u64(m.request_number) && io.rest(m.payload);
}

template <typename Io, codec::MaybeConst<Reply> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.commit(m.commit) &&
           io.u64(m.client_id) && io.u64(m.request_number) && io.rest(m.result);
}

template <typename Io, codec::MaybeConst<BatchedReply> M>
bool fields(Io& io, M& m)
{
    return io.u64(m.client_id) && io.u64(m.request_number) && io.u64(m.commit) &&
           io.template str<uint16_t>(m.result);
}

template <typename Io, codec::MaybeConst<Replies> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.template sequence<uint16_t>(m.items);
}

template <typename Io, codec::MaybeConst<BatchedRequest> M>
bool fields(Io& io, M& m)
{
    return io.u64(m.client_id) && io.u64(m.request_number) &&
           io.template str<uint16_t>(m.payload);
}

template <typename Io, codec::MaybeConst<Requests> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.template sequence<uint16_t>(m.items);
}

template <typename Io, codec::MaybeConst<Prepare> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op(m.op) && io.commit(m.commit) &&
           io.entries(m.entries);
}

template <typename Io, codec::MaybeConst<PrepareOk> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op(m.op);
}

template <typename Io, codec::MaybeConst<Commit> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op(m.heartbeat) && io.commit(m.commit);
}

template <typename Io, codec::MaybeConst<StartViewChange> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op_flag(m.asking);
}

template <typename Io, codec::MaybeConst<DoViewChange> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op(m.op) && io.commit(m.commit) &&
           io.u64(m.last_normal_view) && io.u64(m.fence_view);
}

// StartView and NewState carry the same log suffix: one layout for both.
template <typename M>
concept LogSuffix = codec::MaybeConst<M, StartView> || codec::MaybeConst<M, NewState>;

template <typename Io, LogSuffix M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op(m.op) && io.commit(m.commit) &&
           io.u64(m.first_op) && io.boolean(m.state_unconfirmed) && io.entries(m.entries);
}

template <typename Io, codec::MaybeConst<Recovery> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.u64(m.nonce);
}

template <typename Io, codec::MaybeConst<RecoveryResponse> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op(m.op) && io.commit(m.commit) &&
           io.u64(m.nonce) && io.u64(m.last_normal_view) &&
           io.enumeration(m.standing, known);
}

template <typename Io, codec::MaybeConst<GetState> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op(m.op);
}

template <typename Io, codec::MaybeConst<SnapshotOffer> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op(m.op) &&
           io.boolean(m.state_unconfirmed);
}

template <typename Io, codec::MaybeConst<CommitOk> M>
bool fields(Io& io, M& m)
{
    return io.replica(m.replica) && io.view(m.view) && io.op(m.heartbeat);
}

namespace {

// What the decoder checks beyond the layout: the header's numbers agree with each other.
bool consistent(const Message& message)
{
    return std::visit(
        Overloaded{
            // A Prepare holds ops (op - count, op]: at least one, and none below op 1.
            [](const Prepare& m) { return !m.entries.empty() && m.op >= m.entries.size(); },
            [](const DoViewChange& m) {
                return m.last_normal_view <= m.view && m.fence_view <= m.view && m.commit <= m.op;
            },
            [](const LogSuffix auto& m) {
                return m.commit <= m.op && m.first_op <= m.op &&
                       m.op - m.first_op >= m.entries.size();
            },
            [](const RecoveryResponse& m) {
                return m.commit <= m.op && m.last_normal_view <= m.view;
            },
            [](const Replies& m) { return !m.items.empty(); },
            [](const Requests& m) { return !m.items.empty(); },
            [](const auto&) { return true; },
        },
        message);
}

// The size of `message`'s body and its header fields, from its layout.
WireIo<codec::Counter> measure(const Message& message)
{
    WireIo<codec::Counter> io;
    std::visit([&](const auto& m) { fields(io, m); }, message);
    return io;
}

// A default value of the message type at `index`.
template <size_t... I>
Message blank_message(size_t index, std::index_sequence<I...>)
{
    Message message;
    ((index == I ? (message.emplace<I>(), 0) : 0), ...);
    return message;
}

}  // namespace


const char* message_type_name(vl_message_type type)
{
    static constexpr const char* names[] = {
        "request",           "reply",          "prepare",        "prepare_ok", "commit",
        "start_view_change", "do_view_change", "start_view",     "recovery",   "recovery_response",
        "get_state",         "new_state",      "snapshot_offer", "commit_ok",  "replies",
        "requests",
    };
    static_assert(std::size(names) == VL_MSG_TYPE_MAX - VL_MSG_TYPE_MIN + 1);
    static_assert(std::size(names) == std::variant_size_v<Message>);
    if (type < VL_MSG_TYPE_MIN || type > VL_MSG_TYPE_MAX) return "unknown";
    return names[type - VL_MSG_TYPE_MIN];
}

const char* standing_name(Standing standing)
{
    static constexpr const char* names[] = {"member", "restarting", "blank"};
    return known(standing) ? names[static_cast<uint8_t>(standing)] : "unknown";
}

ReplicaIndex sender_of(const Message& message) { return measure(message).header().replica; }

const char* message_name(const Message& message)
{
    return message_type_name(message_type(message));
}

vl_message_type message_type(const Message& message)
{
    // The variant's alternatives are declared in the order of enum vl_message_type.
    return static_cast<vl_message_type>(VL_MSG_TYPE_MIN + message.index());
}

size_t encoded_size(const Message& message) { return VL_HEADER_BYTES + measure(message).size(); }

Reply reply_of(const Replies& replies, const BatchedReply& item)
{
    return Reply{.view = replies.view,
                 .replica = replies.replica,
                 .client_id = item.client_id,
                 .request_number = item.request_number,
                 .commit = item.commit,
                 .result = item.result};
}

Request request_of(const Requests& requests, const BatchedRequest& item)
{
    return Request{.view = requests.view,
                   .client_id = item.client_id,
                   .request_number = item.request_number,
                   .payload = item.payload};
}

namespace {

// What batch_replies and batch_requests share. `start` gives the empty batch a single would
// head (its header fields), `to_item` the single as an item, `from_item` an item back as its
// single: a batch of one, or an item too big to share a datagram, goes as that single.
template <typename Batch, typename Single, typename Start, typename ToItem, typename FromItem>
std::vector<Message> pack(std::vector<Single> singles, uint32_t max_message_bytes, Start start,
                          ToItem to_item, FromItem from_item)
{
    std::vector<Message> out;
    std::optional<Batch> batch;
    size_t batch_bytes = 0;
    const auto close_batch = [&] {
        if (batch && batch->items.size() == 1)
            out.emplace_back(from_item(*batch, batch->items.front()));
        else if (batch)
            out.emplace_back(std::move(*batch));
        batch.reset();
    };
    for (Single& single : singles) {
        Batch next = start(single);
        auto item = to_item(std::move(single));
        const size_t empty_bytes = encoded_size(Message{next});
        const size_t item_bytes = codec::encoded_size(item);
        if (batch && (batch->view != next.view || batch->replica != next.replica ||
                      batch_bytes + item_bytes > max_message_bytes))
            close_batch();
        if (empty_bytes + item_bytes > max_message_bytes) {
            out.emplace_back(from_item(next, item));
            continue;
        }
        if (!batch) {
            batch = std::move(next);
            batch_bytes = empty_bytes;
        }
        batch->items.push_back(std::move(item));
        batch_bytes += item_bytes;
    }
    close_batch();
    return out;
}

}  // namespace

std::vector<Message> batch_replies(std::vector<Reply> replies, uint32_t max_message_bytes)
{
    return pack<Replies>(
        std::move(replies), max_message_bytes,
        [](const Reply& reply) { return Replies{.view = reply.view, .replica = reply.replica}; },
        [](Reply&& reply) {
            return BatchedReply{.client_id = reply.client_id,
                                .request_number = reply.request_number,
                                .commit = reply.commit,
                                .result = std::move(reply.result)};
        },
        reply_of);
}

std::vector<Message> batch_requests(std::vector<Request> requests, ReplicaIndex sender,
                                    uint32_t max_message_bytes)
{
    return pack<Requests>(
        std::move(requests), max_message_bytes,
        [&](const Request& request) { return Requests{.view = request.view, .replica = sender}; },
        [](Request&& request) {
            return BatchedRequest{.client_id = request.client_id,
                                  .request_number = request.request_number,
                                  .payload = std::move(request.payload)};
        },
        request_of);
}

uint64_t message_tag(const uint8_t* msg, uint32_t len, const CellWire& wire)
{
    return wire.authenticated() ? vl_mac(msg, len, &wire.keys.key[0]) : vl_checksum(msg, len);
}

namespace {

std::optional<DecodeError> check_tag(std::span<const uint8_t> datagram, uint64_t tag,
                                     const CellWire& wire)
{
    const auto len = static_cast<uint32_t>(datagram.size());
    if (!wire.authenticated()) {
        if (tag == vl_checksum(datagram.data(), len)) return std::nullopt;
        return DecodeError::bad_checksum;
    }
    for (uint32_t k = 0; k < wire.keys.count && k < VL_MAC_KEYS; k++)
        if (tag == vl_mac(datagram.data(), len, &wire.keys.key[k])) return std::nullopt;
    return DecodeError::bad_mac;
}

}  // namespace

size_t encode(const Message& message, const CellWire& wire, uint16_t flags,
              std::span<uint8_t> out)
{
    // The size bound also bounds the entry count far below the 16-bit batch_count field:
    // every entry takes at least VL_ENTRY_FIXED_BYTES.
    static_assert(VL_MAX_BODY_BYTES / VL_ENTRY_FIXED_BYTES < UINT16_MAX);
    const size_t total = encoded_size(message);
    if (total > out.size() || total > VL_MAX_MESSAGE_BYTES) return 0;
    WireIo<codec::Writer> body(out.subspan(VL_HEADER_BYTES, total - VL_HEADER_BYTES));
    if (!std::visit([&](const auto& m) { return fields(body, m); }, message)) return 0;
    const HeaderFields& h = body.header();

    vl_header header{};
    header.magic = VL_MAGIC;
    header.version = VL_WIRE_VERSION;
    header.type = static_cast<uint8_t>(message_type(message));
    header.flags = flags;
    header.cluster_id = wire.cluster_id;
    header.replica = h.replica;
    header.batch_count = h.batch_count;
    header.view = h.view;
    header.op = h.op;
    header.commit = h.commit;
    header.body_len = static_cast<uint32_t>(total - VL_HEADER_BYTES);
    std::memcpy(out.data(), &header, sizeof header);

    header.checksum = message_tag(out.data(), static_cast<uint32_t>(total), wire);
    std::memcpy(out.data() + offsetof(vl_header, checksum), &header.checksum,
                sizeof header.checksum);
    return total;
}

std::vector<uint8_t> encode(const Message& message, const CellWire& wire, uint16_t flags)
{
    std::vector<uint8_t> out(encoded_size(message));
    out.resize(encode(message, wire, flags, out));
    return out;
}

DecodeResult decode(std::span<const uint8_t> datagram, const CellWire& wire)
{
    if (datagram.size() < VL_HEADER_BYTES) return DecodeError::truncated;
    vl_header header;
    std::memcpy(&header, datagram.data(), sizeof header);
    if (header.magic != VL_MAGIC) return DecodeError::bad_magic;
    if (header.version != VL_WIRE_VERSION) return DecodeError::bad_version;
    if (header.type < VL_MSG_TYPE_MIN || header.type > VL_MSG_TYPE_MAX)
        return DecodeError::unknown_type;
    if (header.cluster_id != wire.cluster_id) return DecodeError::wrong_cluster;
    if (header.body_len != datagram.size() - VL_HEADER_BYTES) return DecodeError::bad_length;
    if (auto bad_tag = check_tag(datagram, header.checksum, wire)) return *bad_tag;
    if (header.flags & ~VL_FLAGS_KNOWN) return DecodeError::bad_flags;
    if (header.reserved0 != 0 || header.reserved1 != 0) return DecodeError::bad_reserved;

    const auto type = static_cast<vl_message_type>(header.type);
    const bool from_client = type == VL_MSG_REQUEST;
    if (from_client ? header.replica != VL_CLIENT_SENDER : header.replica >= VL_MAX_REPLICAS)
        return DecodeError::bad_replica;

    const HeaderFields h{header.replica, header.view, header.op, header.commit,
                         header.batch_count};
    WireIo<codec::Reader> body(datagram.subspan(VL_HEADER_BYTES), h);
    Decoded decoded{
        .message = blank_message(type - VL_MSG_TYPE_MIN,
                                 std::make_index_sequence<std::variant_size_v<Message>>{}),
        .flags = header.flags};
    const bool parsed =
        std::visit([&](auto& m) { return fields(body, m); }, decoded.message) && body.done();
    if (!parsed || (!body.batch_claimed() && h.batch_count != 0) || !consistent(decoded.message))
        return DecodeError::bad_body;
    if (!body.unclaimed_slots_zero()) return DecodeError::bad_reserved;
    return decoded;
}

const char* decode_error_name(DecodeError error)
{
    static constexpr const char* names[] = {
        "truncated",   "bad_magic", "bad_version",  "unknown_type", "wrong_cluster", "bad_length",
        "bad_checksum", "bad_flags", "bad_reserved", "bad_replica", "bad_body",  "bad_mac",
    };
    static_assert(std::size(names) == decode_error_count);
    return names[static_cast<size_t>(error)];
}

}  // namespace voltlock
