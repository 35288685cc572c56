#include "core/message.h"

#include "core/byte_reader.h"
#include "core/overloaded.h"

#include <cstring>
#include <optional>
#include <type_traits>

namespace voltlock {

namespace {

// Appends little-endian fields to a bounded buffer; remembers if anything did not fit.
class Writer {
public:
    explicit Writer(std::span<uint8_t> out) : out_(out) {}

    void u8(uint8_t v) { put(&v, sizeof v); }
    void u16(uint16_t v) { put(&v, sizeof v); }
    void u64(uint64_t v) { put(&v, sizeof v); }
    void bytes(const Bytes& b) { put(b.data(), b.size()); }
    void entry(const Entry& e)
    {
        if (e.payload.size() > UINT16_MAX) {
            ok_ = false;
            return;
        }
        u64(e.timestamp_ms);
        u64(e.client_id);
        u64(e.request_number);
        u16(static_cast<uint16_t>(e.payload.size()));
        bytes(e.payload);
    }
    bool ok() const { return ok_; }
    size_t size() const { return size_; }

private:
    void put(const void* p, size_t n)
    {
        if (!ok_ || n > out_.size() - size_) {
            ok_ = false;
            return;
        }
        if (n > 0) std::memcpy(out_.data() + size_, p, n);
        size_ += n;
    }

    std::span<uint8_t> out_;
    size_t size_ = 0;
    bool ok_ = true;
};

// The wire's fields, and log entries on top of them.
class Reader : public ByteReader {
public:
    using ByteReader::ByteReader;

    bool flag(bool& v)  // one byte, 0 or 1
    {
        uint8_t byte = 0;
        if (!u8(byte) || byte > 1) return false;
        v = byte == 1;
        return true;
    }

    bool entry(Entry& e)
    {
        uint16_t len = 0;
        return u64(e.timestamp_ms) && u64(e.client_id) && u64(e.request_number) && u16(len) &&
               bytes(e.payload, len);
    }
    bool entries(std::vector<Entry>& out, uint16_t count)
    {
        // Each entry takes at least VL_ENTRY_FIXED_BYTES, so a count that cannot fit is a lie
        // caught before anything is allocated for it.
        if (static_cast<size_t>(count) * VL_ENTRY_FIXED_BYTES > remaining()) return false;
        out.resize(count);
        for (Entry& e : out)
            if (!entry(e)) return false;
        return true;
    }
};

struct HeaderFields {
    ReplicaIndex replica = 0;
    View view = 0;
    Op op = 0;
    Op commit = 0;
    uint16_t batch_count = 0;
    bool operator==(const HeaderFields&) const = default;
};

HeaderFields header_fields(const Message& message)
{
    return std::visit(
        Overloaded{
            [](const Request& m) { return HeaderFields{VL_CLIENT_SENDER, m.view, 0, 0, 0}; },
            [](const Reply& m) { return HeaderFields{m.replica, m.view, 0, m.commit, 0}; },
            [](const Prepare& m) {
                return HeaderFields{m.replica, m.view, m.op, m.commit,
                                    static_cast<uint16_t>(m.entries.size())};
            },
            [](const PrepareOk& m) { return HeaderFields{m.replica, m.view, m.op, 0, 0}; },
            [](const Commit& m) {
                return HeaderFields{m.replica, m.view, m.heartbeat, m.commit, 0};
            },
            [](const StartViewChange& m) { return HeaderFields{m.replica, m.view, 0, 0, 0}; },
            [](const DoViewChange& m) {
                return HeaderFields{m.replica, m.view, m.op, m.commit, 0};
            },
            [](const StartView& m) {
                return HeaderFields{m.replica, m.view, m.op, m.commit,
                                    static_cast<uint16_t>(m.entries.size())};
            },
            [](const Recovery& m) { return HeaderFields{m.replica, 0, 0, 0, 0}; },
            [](const RecoveryResponse& m) {
                return HeaderFields{m.replica, m.view, m.op, m.commit, 0};
            },
            [](const GetState& m) { return HeaderFields{m.replica, m.view, m.op, 0, 0}; },
            [](const NewState& m) {
                return HeaderFields{m.replica, m.view, m.op, m.commit,
                                    static_cast<uint16_t>(m.entries.size())};
            },
            [](const SnapshotOffer& m) { return HeaderFields{m.replica, m.view, m.op, 0, 0}; },
            [](const CommitOk& m) { return HeaderFields{m.replica, m.view, m.heartbeat, 0, 0}; },
        },
        message);
}

void write_body(const Message& message, Writer& w)
{
    std::visit(Overloaded{
                   [&](const Request& m) {
                       w.u64(m.client_id);
                       w.u64(m.request_number);
                       w.bytes(m.payload);
                   },
                   [&](const Reply& m) {
                       w.u64(m.client_id);
                       w.u64(m.request_number);
                       w.bytes(m.result);
                   },
                   [&](const Prepare& m) {
                       for (const Entry& e : m.entries) w.entry(e);
                   },
                   [](const PrepareOk&) {},
                   [](const Commit&) {},
                   [](const StartViewChange&) {},
                   [&](const DoViewChange& m) {
                       w.u64(m.last_normal_view);
                       w.u64(m.fence_view);
                   },
                   [&](const StartView& m) {
                       w.u64(m.first_op);
                       w.u8(m.state_unconfirmed ? 1 : 0);
                       for (const Entry& e : m.entries) w.entry(e);
                   },
                   [&](const Recovery& m) { w.u64(m.nonce); },
                   [&](const RecoveryResponse& m) {
                       w.u64(m.nonce);
                       w.u64(m.last_normal_view);
                       w.u8(m.restarting ? 1 : 0);
                   },
                   [](const GetState&) {},
                   [&](const NewState& m) {
                       w.u64(m.first_op);
                       w.u8(m.state_unconfirmed ? 1 : 0);
                       for (const Entry& e : m.entries) w.entry(e);
                   },
                   [&](const SnapshotOffer& m) { w.u8(m.state_unconfirmed ? 1 : 0); },
                   [](const CommitOk&) {},
               },
               message);
}

size_t entries_bytes(const std::vector<Entry>& entries)
{
    size_t n = 0;
    for (const Entry& e : entries) n += entry_wire_bytes(e);
    return n;
}

size_t body_size(const Message& message)
{
    return std::visit(
        Overloaded{
            [](const Request& m) { return VL_REQUEST_FIXED_BYTES + m.payload.size(); },
            [](const Reply& m) { return VL_REPLY_FIXED_BYTES + m.result.size(); },
            [](const Prepare& m) { return entries_bytes(m.entries); },
            [](const PrepareOk&) { return size_t{0}; },
            [](const Commit&) { return size_t{0}; },
            [](const StartViewChange&) { return size_t{0}; },
            [](const DoViewChange&) { return size_t{16}; },
            [](const StartView& m) { return kStateTransferPrefixBytes + entries_bytes(m.entries); },
            [](const Recovery&) { return size_t{8}; },
            [](const RecoveryResponse&) { return size_t{17}; },
            [](const GetState&) { return size_t{0}; },
            [](const NewState& m) { return kStateTransferPrefixBytes + entries_bytes(m.entries); },
            [](const SnapshotOffer&) { return size_t{1}; },
            [](const CommitOk&) { return size_t{0}; },
        },
        message);
}

// Parses the body of a message of `type` whose header fields are `h`.
bool read_body(vl_message_type type, const HeaderFields& h, Reader& r, Message& out)
{
    switch (type) {
    case VL_MSG_REQUEST: {
        Request m{.view = h.view};
        if (!(r.u64(m.client_id) && r.u64(m.request_number) && r.rest(m.payload))) return false;
        out = std::move(m);
        return true;
    }
    case VL_MSG_REPLY: {
        Reply m{.view = h.view, .replica = h.replica, .commit = h.commit};
        if (!(r.u64(m.client_id) && r.u64(m.request_number) && r.rest(m.result))) return false;
        out = std::move(m);
        return true;
    }
    case VL_MSG_PREPARE: {
        Prepare m{.view = h.view, .replica = h.replica, .op = h.op, .commit = h.commit};
        // A Prepare holds ops (op - count, op]: at least one, and none below op 1.
        if (h.batch_count == 0 || h.op < h.batch_count) return false;
        if (!r.entries(m.entries, h.batch_count)) return false;
        out = std::move(m);
        return true;
    }
    case VL_MSG_PREPARE_OK:
        out = PrepareOk{.view = h.view, .replica = h.replica, .op = h.op};
        return true;
    case VL_MSG_COMMIT:
        out = Commit{.view = h.view, .replica = h.replica, .commit = h.commit, .heartbeat = h.op};
        return true;
    case VL_MSG_START_VIEW_CHANGE:
        out = StartViewChange{.view = h.view, .replica = h.replica};
        return true;
    case VL_MSG_DO_VIEW_CHANGE: {
        DoViewChange m{.view = h.view, .replica = h.replica, .op = h.op, .commit = h.commit};
        if (!r.u64(m.last_normal_view) || !r.u64(m.fence_view) || m.last_normal_view > m.view ||
            m.fence_view > m.view || m.commit > m.op)
            return false;
        out = m;
        return true;
    }
    case VL_MSG_START_VIEW: {
        StartView m{.view = h.view, .replica = h.replica, .op = h.op, .commit = h.commit};
        if (!(r.u64(m.first_op) && r.flag(m.state_unconfirmed) &&
              r.entries(m.entries, h.batch_count)))
            return false;
        if (m.commit > m.op || m.first_op > m.op || m.op - m.first_op < m.entries.size())
            return false;
        out = std::move(m);
        return true;
    }
    case VL_MSG_RECOVERY: {
        Recovery m{.replica = h.replica};
        if (!r.u64(m.nonce)) return false;
        out = m;
        return true;
    }
    case VL_MSG_RECOVERY_RESPONSE: {
        RecoveryResponse m{.view = h.view, .replica = h.replica, .op = h.op, .commit = h.commit};
        if (!(r.u64(m.nonce) && r.u64(m.last_normal_view) && r.flag(m.restarting))) return false;
        if (m.commit > m.op || m.last_normal_view > m.view) return false;
        out = m;
        return true;
    }
    case VL_MSG_GET_STATE:
        out = GetState{.view = h.view, .replica = h.replica, .op = h.op};
        return true;
    case VL_MSG_NEW_STATE: {
        NewState m{.view = h.view, .replica = h.replica, .op = h.op, .commit = h.commit};
        if (!(r.u64(m.first_op) && r.flag(m.state_unconfirmed) &&
              r.entries(m.entries, h.batch_count)))
            return false;
        if (m.commit > m.op || m.first_op > m.op || m.op - m.first_op < m.entries.size())
            return false;
        out = std::move(m);
        return true;
    }
    case VL_MSG_SNAPSHOT_OFFER: {
        SnapshotOffer m{.view = h.view, .replica = h.replica, .op = h.op};
        if (!r.flag(m.state_unconfirmed)) return false;
        out = m;
        return true;
    }
    case VL_MSG_COMMIT_OK:
        out = CommitOk{.view = h.view, .replica = h.replica, .heartbeat = h.op};
        return true;
    }
    return false;
}

bool type_has_entries(uint8_t type)
{
    return type == VL_MSG_PREPARE || type == VL_MSG_START_VIEW || type == VL_MSG_NEW_STATE;
}

}  // namespace

const char* message_type_name(vl_message_type type)
{
    static constexpr const char* names[] = {
        "request",           "reply",          "prepare",        "prepare_ok", "commit",
        "start_view_change", "do_view_change", "start_view",     "recovery",   "recovery_response",
        "get_state",         "new_state",      "snapshot_offer", "commit_ok",
    };
    static_assert(std::size(names) == VL_MSG_TYPE_MAX - VL_MSG_TYPE_MIN + 1);
    static_assert(std::size(names) == std::variant_size_v<Message>);
    if (type < VL_MSG_TYPE_MIN || type > VL_MSG_TYPE_MAX) return "unknown";
    return names[type - VL_MSG_TYPE_MIN];
}

ReplicaIndex sender_of(const Message& message) { return header_fields(message).replica; }

const char* message_name(const Message& message)
{
    return message_type_name(message_type(message));
}

vl_message_type message_type(const Message& message)
{
    // The variant's alternatives are declared in the order of enum vl_message_type.
    return static_cast<vl_message_type>(VL_MSG_TYPE_MIN + message.index());
}

size_t encoded_size(const Message& message) { return VL_HEADER_BYTES + body_size(message); }

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
    const HeaderFields h = header_fields(message);

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

    Writer body(out.subspan(VL_HEADER_BYTES, total - VL_HEADER_BYTES));
    write_body(message, body);
    if (!body.ok() || body.size() != header.body_len) return 0;

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
    if (!type_has_entries(type) && header.batch_count != 0) return DecodeError::bad_body;

    const HeaderFields h{header.replica, header.view, header.op, header.commit,
                         header.batch_count};
    Reader reader(datagram.subspan(VL_HEADER_BYTES));
    Decoded decoded{.message = Request{}, .flags = header.flags};
    if (!read_body(type, h, reader, decoded.message) || !reader.done())
        return DecodeError::bad_body;
    // A header field that the type does not carry must be zero, so that one message has one
    // encoding and whatever reads headers in place (the XDP programs) sees what the core sees.
    if (header_fields(decoded.message) != h) return DecodeError::bad_reserved;
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
