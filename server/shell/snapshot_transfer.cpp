#include "shell/snapshot_transfer.h"

#include <charconv>
#include <string_view>

#include "shell/peer_auth.h"
#include "shell/peer_http.h"

#include "core/checksum.h"

namespace voltlock {

std::shared_ptr<const ServedSnapshot> make_served_snapshot(Op op, Bytes bytes)
{
    const uint32_t crc = crc32c(bytes);
    return std::make_shared<const ServedSnapshot>(
        ServedSnapshot{.op = op, .bytes = std::move(bytes), .crc32c = crc});
}

SnapshotChunk snapshot_chunk(const ServedSnapshot& served, uint64_t offset)
{
    const std::string_view chunk =
        std::string_view(served.bytes).substr(offset, kSnapshotChunkBytes);
    return SnapshotChunk{
        .bytes = std::string(chunk),
        .headers = {{"X-Voltlock-Snapshot-Op", std::to_string(served.op)},
                    {"X-Voltlock-Snapshot-Size", std::to_string(served.bytes.size())},
                    {"X-Voltlock-Snapshot-Crc32c", std::to_string(served.crc32c)},
                    {"X-Voltlock-Chunk-Crc32c", std::to_string(crc32c(chunk))}}};
}

namespace {

bool header_number(const httplib::Response& response, const char* name, uint64_t& out)
{
    const std::string value = response.get_header_value(name);
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), out);
    return !value.empty() && error == std::errc{} && end == value.data() + value.size();
}

}  // namespace

Result<Bytes> fetch_snapshot(const DaemonConfig& config, const PeerAddress& peer_address,
                             ReplicaIndex peer, Op op, SnapshotDownload& download,
                             const std::atomic<bool>& stop)
{
    const std::string where = "snapshot of op " + std::to_string(op) + " from r" +
                              std::to_string(peer) + " (" + peer_address.ip + ":" +
                              std::to_string(peer_address.http_port) + ")";
    if (download.peer != peer || download.op != op) download = SnapshotDownload{.peer = peer};
    const std::unique_ptr<httplib::Client> client = peer_client(config, peer_address);
    client->set_connection_timeout(1, 0);
    client->set_read_timeout(10, 0);
    client->set_keep_alive(true);
    while (!stop) {
        const uint64_t offset = download.op == 0 ? 0 : download.bytes.size();
        if (download.op != 0 && offset == download.size) break;
        const std::string path = std::string(kSnapshotPath) + "?offset=" + std::to_string(offset) +
                                 "&op=" + std::to_string(op);
        // The cell's replication key is this replica's identity, with or without mTLS
        // (shell/peer_auth.h); signed per request, as each carries a fresh nonce.
        httplib::Headers headers;
        if (auto signed_header = sign_peer_request(config, "GET", path, unix_ms()))
            headers.emplace(kPeerAuthHeader, *signed_header);
        const auto response = client->Get(path, headers);
        if (!response) return Error{0, where + ": " + httplib::to_string(response.error())};
        if (response->status == 409) {
            download = SnapshotDownload{.peer = peer};
            return Error{0, where + ": the peer serves another snapshot by now"};
        }
        if (response->status != 200)
            return Error{0, where + ": HTTP " + std::to_string(response->status)};
        uint64_t served_op = 0, size = 0, crc = 0, chunk_crc = 0;
        if (!header_number(*response, "X-Voltlock-Snapshot-Op", served_op) ||
            !header_number(*response, "X-Voltlock-Snapshot-Size", size) ||
            !header_number(*response, "X-Voltlock-Snapshot-Crc32c", crc) ||
            !header_number(*response, "X-Voltlock-Chunk-Crc32c", chunk_crc))
            return Error{0, where + ": a chunk without its snapshot headers"};
        if (download.op == 0) {
            download.op = served_op;
            download.size = size;
            download.crc32c = static_cast<uint32_t>(crc);
            download.bytes.reserve(size);
        }
        if (served_op != op || size != download.size || crc != download.crc32c ||
            response->body.size() > size - offset || (response->body.empty() && offset < size))
            return Error{0, where + ": a chunk that does not continue the snapshot"};
        if (crc32c(response->body) != chunk_crc)
            return Error{0, where + ": a chunk at byte " + std::to_string(offset) +
                                " failed its checksum"};
        download.bytes += response->body;
    }
    if (stop) return Error{0, where + ": stopped"};
    if (crc32c(download.bytes) != download.crc32c) {
        download = SnapshotDownload{.peer = peer};
        return Error{0, where + ": the whole snapshot failed its checksum"};
    }
    Bytes bytes = std::move(download.bytes);
    download = SnapshotDownload{.peer = peer};
    return bytes;
}

}  // namespace voltlock
