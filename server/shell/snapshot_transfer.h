// State transfer by snapshot between replicas (DESIGN.md §5, docs/storage.md): a snapshot does
// not fit a datagram, so a replica that was offered one fetches it from the peer's HTTP port,
// over TCP, in chunks. Each chunk carries its CRC-32C and the whole snapshot its own; a fetch that
// breaks off resumes at the byte it reached, as long as the peer still serves the same snapshot.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/types.h"
#include "shell/config.h"
#include "shell/result.h"

namespace voltlock {

inline constexpr const char* kSnapshotPath = "/v1/internal/snapshot";
inline constexpr size_t kSnapshotChunkBytes = 1 << 20;

// A snapshot this replica serves: the newest it wrote or installed.
struct ServedSnapshot {
    Op op = 0;
    Bytes bytes;
    uint32_t crc32c = 0;  // of `bytes`
};
std::shared_ptr<const ServedSnapshot> make_served_snapshot(Op op, Bytes bytes);

// The serving side, after the request was checked (`offset` at most the snapshot's size, `op`
// the one served): the chunk from byte `offset`, with the headers fetch_snapshot reads.
struct SnapshotChunk {
    std::string bytes;  // application/octet-stream
    std::vector<std::pair<std::string, std::string>> headers;
};
SnapshotChunk snapshot_chunk(const ServedSnapshot& served, uint64_t offset);

// The bytes fetched so far from one peer's snapshot: what a broken-off fetch resumes from.
struct SnapshotDownload {
    ReplicaIndex peer = 0;
    Op op = 0;  // 0: nothing yet
    uint64_t size = 0;
    uint32_t crc32c = 0;
    Bytes bytes;
};

// Fetches `peer`'s snapshot of op `op` (the one its core offered) into `download`, resuming it
// if it is of the same snapshot, until whole and checked; returns its bytes. Gives up (an error;
// `download` keeps what arrived) on a network error, a bad chunk, a peer that serves another
// snapshot by now (the core asks again, and is offered that one), or when `stop` turns true.
// Over TLS when `config` has it on (shell/peer_http.h).
Result<Bytes> fetch_snapshot(const DaemonConfig& config, const PeerAddress& peer_address,
                             ReplicaIndex peer, Op op,
                             SnapshotDownload& download, const std::atomic<bool>& stop);

}  // namespace voltlock
