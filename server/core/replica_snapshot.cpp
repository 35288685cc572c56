#include "core/replica.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "core/assert.h"
#include "core/checksum.h"
#include "core/codec.h"

namespace voltlock {

// ---- The snapshot codec (DESIGN.md §5) ----------------------------------------------------------

namespace {
constexpr uint32_t kSnapshotMagic = 0x33534C56;                    // "VLS3"
constexpr uint32_t kSnapshotMagicWithoutTimes = 0x32534C56;        // "VLS2": read, not written
constexpr uint32_t kSnapshotMagicWithoutRequestCrcs = 0x31534C56;  // "VLS1": read, not written
}  // namespace

// The layout, followed by a CRC-32C of everything before it.
template <typename Io, codec::MaybeConst<ClientTableRecord> R>
bool fields(Io& io, R& r)
{
    bool has_request_crc = r.request_crc.has_value();
    bool has_time = r.executed_ms.has_value();
    return io.u64(r.client_id) && io.u64(r.request_number) && io.boolean(has_request_crc) &&
           io.optional(r.request_crc, has_request_crc) && io.template str<uint32_t>(r.result) &&
           io.boolean(has_time) && io.optional(r.executed_ms, has_time);
}

template <typename Io, typename R>
bool position_fields(Io& io, R& r)
{
    return io.u64(r.op) && io.u64(r.view) && io.u64(r.last_normal_view) &&
           io.u64(r.fence_view);
}

template <typename Io, codec::MaybeConst<ReplicaSnapshot> R>
bool fields(Io& io, R& r)
{
    uint32_t magic = kSnapshotMagic;
    return io.u32(magic) && magic == kSnapshotMagic && position_fields(io, r) &&
           io.boolean(r.clients_timed) && io.template sequence<uint64_t>(r.clients) &&
           io.template str<uint64_t>(r.machine);
}

namespace {

// A VLS2 snapshot: the same, but its client records end at the result, and do not say when
// the request executed (the table then never forgets them). VLS1's have no request CRC either
// (a retry of a client's last request is then answered whatever its payload).
bool read_older(codec::Reader& io, ReplicaSnapshot& r)
{
    uint32_t magic = 0;
    uint64_t clients = 0;
    if (!(io.u32(magic) &&
          (magic == kSnapshotMagicWithoutTimes || magic == kSnapshotMagicWithoutRequestCrcs) &&
          position_fields(io, r) && io.u64(clients)))
        return false;
    r.clients_timed = false;
    for (uint64_t i = 0; i < clients; i++) {
        ClientTableRecord& client = r.clients.emplace_back();
        bool has_request_crc = false;
        if (!(io.u64(client.client_id) && io.u64(client.request_number)))
            return false;
        if (magic == kSnapshotMagicWithoutTimes &&
            !(io.boolean(has_request_crc) && io.optional(client.request_crc, has_request_crc)))
            return false;
        if (!io.str<uint32_t>(client.result)) return false;
    }
    return io.str<uint64_t>(r.machine);
}

}  // namespace

Bytes Replica::encode_snapshot() const
{
    const Bytes machine = machine_.snapshot();
    ReplicaSnapshot snapshot{.op = commit_,
                             .view = view_,
                             .last_normal_view = last_normal_view_,
                             .fence_view = fence_view_,
                             .clients_timed = clients_timed_,
                             .machine = machine};
    // Those whose time is not known first, by id; then the others in the order their latest
    // requests executed, which is the same at every replica with the same state and says whom
    // the table forgets first (restore_snapshot).
    snapshot.clients.reserve(client_table_.size());
    for (const auto& [client_id, session] : client_table_)
        if (!session.executed_ms)
            snapshot.clients.push_back({client_id, session.request_number, session.request_crc,
                                        session.result, std::nullopt});
    std::sort(snapshot.clients.begin(), snapshot.clients.end(),
              [](const auto& a, const auto& b) { return a.client_id < b.client_id; });
    for (const ClientId client_id : execution_order_) {
        const ClientSession& session = client_table_.at(client_id);
        snapshot.clients.push_back({client_id, session.request_number, session.request_crc,
                                    session.result, session.executed_ms});
    }

    codec::Counter size;
    fields(size, snapshot);
    Bytes out(size.size() + sizeof(uint32_t), '\0');
    codec::Writer writer(out);
    const bool written = fields(writer, snapshot) &&
                         writer.u32(crc32c(std::string_view(out).substr(0, size.size())));
    VL_ASSERT(written, "a client's result fits its u32 length");
    return out;
}

std::optional<ReplicaSnapshot> decode_replica_snapshot(std::string_view bytes)
{
    if (bytes.size() < 4) return std::nullopt;
    const std::string_view body = bytes.substr(0, bytes.size() - 4);
    uint32_t checksum = 0;
    std::memcpy(&checksum, bytes.data() + body.size(), sizeof checksum);
    if (checksum != crc32c(body)) return std::nullopt;

    codec::Reader r(body);
    ReplicaSnapshot snapshot;
    if (!fields(r, snapshot) || !r.done()) {
        codec::Reader older(body);
        snapshot = ReplicaSnapshot{};
        if (!read_older(older, snapshot) || !older.done()) return std::nullopt;
    }
    if (snapshot.last_normal_view > snapshot.view) return std::nullopt;
    return snapshot;
}

}  // namespace voltlock
