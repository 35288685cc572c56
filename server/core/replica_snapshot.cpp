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
constexpr uint32_t kSnapshotMagic = 0x31534C56;  // "VLS1"
}

// The layout, followed by a CRC-32C of everything before it.
template <typename Io, codec::MaybeConst<ClientTableRecord> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.client_id) && io.u64(r.request_number) &&
           io.template str<uint32_t>(r.result);
}

template <typename Io, codec::MaybeConst<ReplicaSnapshot> R>
bool fields(Io& io, R& r)
{
    uint32_t magic = kSnapshotMagic;
    return io.u32(magic) && magic == kSnapshotMagic && io.u64(r.op) && io.u64(r.view) &&
           io.u64(r.last_normal_view) && io.u64(r.fence_view) &&
           io.template sequence<uint64_t>(r.clients) && io.template str<uint64_t>(r.machine);
}

Bytes Replica::encode_snapshot() const
{
    const Bytes machine = machine_.snapshot();
    ReplicaSnapshot snapshot{.op = commit_,
                             .view = view_,
                             .last_normal_view = last_normal_view_,
                             .fence_view = fence_view_,
                             .machine = machine};
    snapshot.clients.reserve(client_table_.size());
    for (const auto& [client_id, session] : client_table_)
        snapshot.clients.push_back({client_id, session.request_number, session.result});
    // In client order, so that replicas with the same state write the same bytes.
    std::sort(snapshot.clients.begin(), snapshot.clients.end(),
              [](const auto& a, const auto& b) { return a.client_id < b.client_id; });

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
    if (!fields(r, snapshot) || !r.done() || snapshot.last_normal_view > snapshot.view)
        return std::nullopt;
    return snapshot;
}

}  // namespace voltlock
