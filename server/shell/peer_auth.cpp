#include "shell/peer_auth.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include <array>
#include <chrono>
#include <sstream>

namespace voltlock {

namespace {

using Mac = std::array<uint8_t, 32>;

std::string hex(const uint8_t* bytes, size_t size)
{
    static const char digits[] = "0123456789abcdef";
    std::string text;
    for (size_t i = 0; i < size; i++) {
        text += digits[bytes[i] >> 4];
        text += digits[bytes[i] & 15];
    }
    return text;
}

Mac mac(const vl_mac_key& key, const DaemonConfig& config, std::string_view replica,
        std::string_view method, std::string_view target, std::string_view time,
        std::string_view nonce)
{
    std::array<uint8_t, 16> key_bytes{};
    for (size_t i = 0; i < 8; i++) {
        key_bytes[i] = static_cast<uint8_t>(key.k0 >> (8 * i));
        key_bytes[8 + i] = static_cast<uint8_t>(key.k1 >> (8 * i));
    }
    std::string text = "voltlock-peer-auth v1\n" + std::to_string(config.cluster_id) + "\n";
    for (std::string_view part : {replica, method, target, time})
        text.append(part).append("\n");
    text.append(nonce);
    Mac out{};
    gnutls_hmac_fast(GNUTLS_MAC_SHA256, key_bytes.data(), key_bytes.size(), text.data(),
                     text.size(), out.data());
    return out;
}

}  // namespace

uint64_t unix_ms()
{
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
}

std::optional<std::string> sign_peer_request(const DaemonConfig& config, std::string_view method,
                                             std::string_view target, uint64_t now_ms)
{
    if (config.replication_keys.count == 0) return std::nullopt;
    std::array<uint8_t, 16> nonce_bytes{};
    if (gnutls_rnd(GNUTLS_RND_NONCE, nonce_bytes.data(), nonce_bytes.size()) != 0)
        return std::nullopt;
    const std::string replica = "r" + std::to_string(config.replica);
    const std::string time = std::to_string(now_ms);
    const std::string nonce = hex(nonce_bytes.data(), nonce_bytes.size());
    const Mac tag =
        mac(config.replication_keys.key[0], config, replica, method, target, time, nonce);
    return replica + " " + time + " " + nonce + " " + hex(tag.data(), tag.size());
}

Result<ReplicaIndex> PeerAuthVerifier::verify(std::string_view header, std::string_view method,
                                              std::string_view target, uint64_t now_ms,
                                              PeerFreshness freshness)
{
    const bool fresh_only = freshness == PeerFreshness::required;
    if (config_.replication_keys.count == 0)
        return Error{0, "this replica has no replication key to check peers' requests with"};
    std::istringstream words{std::string(header)};
    std::string replica, time, nonce, tag;
    if (!(words >> replica >> time >> nonce >> tag) || !words.eof() || replica.size() < 2 ||
        replica[0] != 'r' || nonce.size() != 32 || tag.size() != 64)
        return Error{0, std::string(kPeerAuthHeader) + " is not `r<K> <ms> <nonce> <mac>`"};
    uint64_t index = 0, sent_ms = 0;
    try {
        index = std::stoull(replica.substr(1));
        sent_ms = std::stoull(time);
    } catch (const std::exception&) {
        return Error{0, std::string(kPeerAuthHeader) + " has a bad replica or time"};
    }
    if (index >= config_.replicas.size() || "r" + std::to_string(index) != replica ||
        std::to_string(sent_ms) != time)
        return Error{0, std::string(kPeerAuthHeader) + " names no replica of this cell"};
    const bool in_window = sent_ms + kPeerAuthWindowMs >= now_ms &&
                           sent_ms <= now_ms + kPeerAuthWindowMs;
    if (fresh_only && !in_window)
        return Error{0, "the peer's request is too old or its clock too far off (more than " +
                            std::to_string(kPeerAuthWindowMs / 1000) + " s)"};
    bool valid = false;
    for (uint32_t k = 0; k < config_.replication_keys.count && k < VL_MAC_KEYS; k++) {
        const Mac expected =
            mac(config_.replication_keys.key[k], config_, replica, method, target, time, nonce);
        // Every byte compared whatever the first difference.
        const std::string expected_hex = hex(expected.data(), expected.size());
        uint8_t difference = 0;
        for (size_t i = 0; i < expected_hex.size(); i++)
            difference = static_cast<uint8_t>(difference | (expected_hex[i] ^ tag[i]));
        valid = valid || difference == 0;
    }
    if (!valid) return Error{0, "the peer's request MAC does not verify with this cell's key"};
    if (!fresh_only) return static_cast<ReplicaIndex>(index);
    std::lock_guard lock(mutex_);
    std::erase_if(seen_, [&](const auto& entry) { return entry.second < now_ms; });
    if (!seen_.emplace(nonce, sent_ms + kPeerAuthWindowMs).second)
        return Error{0, "the peer's request was replayed (its nonce was seen already)"};
    return static_cast<ReplicaIndex>(index);
}

}  // namespace voltlock
