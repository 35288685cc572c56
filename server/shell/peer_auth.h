// Replicas authenticating their HTTP requests to each other with the cell's replication key
// (docs/security-auth.md, "Peers without mTLS"): without client certificates a replica has no
// identity of its own, so with auth on it could not fetch a snapshot from a peer. The request
// carries
//
//   X-Voltlock-Peer-Auth: r<K> <unix-ms> <nonce: 32 hex> <mac: 64 hex>
//
// where mac = HMAC-SHA256(key, "voltlock-peer-auth v1\n<cell id>\nr<K>\n<method>\n<target>\n
// <unix-ms>\n<nonce>"), the target as sent (path and query). The receiver accepts it with any of
// its replication keys (so a rotation works as for datagrams), within kPeerAuthWindowMs of its
// own clock, and each nonce once: a request captured on the wire cannot be replayed, moved to
// another path or to another cell. It proves only "a holder of the cell's key", so the API
// believes it for the snapshot endpoint, and, by its MAC alone, for the replicas' internal
// headers of a forwarded request (api/access.cpp, PeerFreshness).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "shell/config.h"
#include "shell/result.h"

namespace voltlock {

inline constexpr const char* kPeerAuthHeader = "X-Voltlock-Peer-Auth";
inline constexpr uint64_t kPeerAuthWindowMs = 30'000;

// The header's value for a request of this replica, or nullopt when the cell has no replication
// key (then peers cannot tell it from a client: use mTLS).
std::optional<std::string> sign_peer_request(const DaemonConfig& config, std::string_view method,
                                             std::string_view target, uint64_t now_ms);

// What a peer request's signature must also show besides its MAC.
enum class PeerFreshness {
    // Sent within kPeerAuthWindowMs of the receiver's clock, its nonce never seen: for what the
    // signature grants by itself (a snapshot, the whole state).
    required,
    // Nothing more: the signature only proves a request a peer's, whose internal headers are
    // then believed, and grants nothing that a replay of the client's own request would not (a
    // forwarded request, which may come from a replica whose clock is far off, as at boot).
    not_required,
};

// Checks headers of peer requests; remembers the nonces it accepted for the window. Thread-safe.
class PeerAuthVerifier {
public:
    explicit PeerAuthVerifier(const DaemonConfig& config) : config_(config) {}
    // The replica the request comes from, or why it is refused.
    Result<ReplicaIndex> verify(std::string_view header, std::string_view method,
                                std::string_view target, uint64_t now_ms,
                                PeerFreshness freshness);

private:
    const DaemonConfig config_;
    std::mutex mutex_;
    std::map<std::string, uint64_t> seen_;  // nonce -> until when it is remembered
};

// The wall clock in ms since the epoch, as the header carries it.
uint64_t unix_ms();

}  // namespace voltlock
