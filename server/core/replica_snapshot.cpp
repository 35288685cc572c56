#include "core/replica.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "core/byte_reader.h"
#include "core/byte_writer.h"
#include "core/checksum.h"

namespace voltlock {

// ---- The snapshot codec (DESIGN.md §5) ----------------------------------------------------------

namespace {
constexpr uint32_t kSnapshotMagic = 0x31534C56;  // "VLS1"
}

Bytes Replica::encode_snapshot() const
{
    // The client table goes in client order, so that replicas with the same state write the
    // same bytes.
    std::vector<ClientId> clients;
    clients.reserve(client_table_.size());
    for (const auto& [client_id, session] : client_table_) clients.push_back(client_id);
    std::sort(clients.begin(), clients.end());
    const Bytes machine = machine_.snapshot();

    Bytes out;
    out.reserve(machine.size() + 64 + clients.size() * 40);
    ByteWriter w(out);
    w.u32(kSnapshotMagic);
    w.u64(commit_);
    w.u64(view_);
    w.u64(last_normal_view_);
    w.u64(fence_view_);
    w.u64(clients.size());
    for (const ClientId client_id : clients) {
        const ClientSession& session = client_table_.at(client_id);
        w.u64(client_id);
        w.u64(session.request_number);
        w.u32(static_cast<uint32_t>(session.result.size()));
        w.bytes(session.result);
    }
    w.u64(machine.size());
    w.bytes(machine);
    w.u32(crc32c(out));
    return out;
}

std::optional<ReplicaSnapshot> decode_replica_snapshot(std::string_view bytes)
{
    if (bytes.size() < 4) return std::nullopt;
    const std::string_view body = bytes.substr(0, bytes.size() - 4);
    uint32_t checksum = 0;
    ByteReader trailer(bytes.substr(body.size()));
    if (!trailer.u32(checksum) || checksum != crc32c(body)) return std::nullopt;

    ByteReader r(body);
    ReplicaSnapshot snapshot;
    uint32_t magic = 0;
    uint64_t client_count = 0;
    if (!(r.u32(magic) && magic == kSnapshotMagic && r.u64(snapshot.op) && r.u64(snapshot.view) &&
          r.u64(snapshot.last_normal_view) && r.u64(snapshot.fence_view) &&
          r.u64(client_count)))
        return std::nullopt;
    if (snapshot.last_normal_view > snapshot.view) return std::nullopt;
    // Each record takes at least 20 bytes: a count that cannot fit is refused before allocating.
    if (client_count > r.remaining() / 20) return std::nullopt;
    snapshot.clients.resize(client_count);
    for (ClientTableRecord& client : snapshot.clients) {
        uint32_t result_bytes = 0;
        if (!(r.u64(client.client_id) && r.u64(client.request_number) && r.u32(result_bytes) &&
              r.bytes(client.result, result_bytes)))
            return std::nullopt;
    }
    uint64_t machine_bytes = 0;
    if (!r.u64(machine_bytes) || machine_bytes != r.remaining()) return std::nullopt;
    snapshot.machine = body.substr(body.size() - machine_bytes);
    return snapshot;
}

}  // namespace voltlock
