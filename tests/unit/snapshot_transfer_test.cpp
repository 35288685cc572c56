// State transfer by snapshot over TCP (server/shell/snapshot_transfer.h), against a peer on
// loopback that serves chunks as a replica does and misbehaves when told: a snapshot arrives
// whole, a chunk a request; a fetch that breaks off resumes at the byte it reached; a chunk
// damaged on the way is refused; a peer that replaced its snapshot makes the fetch start over;
// a snapshot whose whole checksum fails is dropped.
#include <doctest/doctest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/checksum.h"
#include "noise.h"
#include "shell/snapshot_transfer.h"

namespace voltlock {
namespace {

constexpr uint64_t chunk = kSnapshotChunkBytes;

// One replica's snapshot endpoint on 127.0.0.1, answering as HttpApi::snapshot_chunk does (409
// for another op than the one served). `tamper`, when set, may change a response before it goes.
class SnapshotPeer {
public:
    explicit SnapshotPeer(ServedSnapshot served) : served_(std::move(served))
    {
        server_.Get(kSnapshotPath, [this](const httplib::Request& req, httplib::Response& res) {
            answer(req, res);
        });
        port_ = server_.bind_to_any_port("127.0.0.1");
        REQUIRE(port_ > 0);
        thread_ = std::thread([this] { server_.listen_after_bind(); });
        // Until it runs, stop() would not stop it (this cpp-httplib has no wait_until_ready).
        while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ~SnapshotPeer()
    {
        server_.stop();
        thread_.join();
    }

    PeerAddress address() const
    {
        return PeerAddress{.ip = "127.0.0.1", .http_port = static_cast<uint16_t>(port_)};
    }
    void serve(ServedSnapshot served)
    {
        std::lock_guard lock(mutex_);
        served_ = std::move(served);
    }
    void tamper_with(std::function<void(uint64_t offset, httplib::Response&)> tamper)
    {
        std::lock_guard lock(mutex_);
        tamper_ = std::move(tamper);
    }
    // The offsets asked for, in order.
    std::vector<uint64_t> offsets() const
    {
        std::lock_guard lock(mutex_);
        return offsets_;
    }

private:
    void answer(const httplib::Request& req, httplib::Response& res)
    {
        std::lock_guard lock(mutex_);
        const uint64_t offset = std::stoull(req.get_param_value("offset"));
        offsets_.push_back(offset);
        if (std::stoull(req.get_param_value("op")) != served_.op) {
            res.status = 409;
            return;
        }
        SnapshotChunk answered = snapshot_chunk(served_, offset);
        for (const auto& [name, value] : answered.headers) res.set_header(name, value);
        res.set_content(std::move(answered.bytes), "application/octet-stream");
        if (tamper_) tamper_(offset, res);
    }

    httplib::Server server_;
    int port_ = 0;
    std::thread thread_;
    mutable std::mutex mutex_;
    ServedSnapshot served_;
    std::function<void(uint64_t, httplib::Response&)> tamper_;
    std::vector<uint64_t> offsets_;
};

// Fails the first request for `at` with `status`, and serves every other one.
std::function<void(uint64_t, httplib::Response&)> fail_once_at(uint64_t at, int status)
{
    auto failed = std::make_shared<bool>(false);
    return [=](uint64_t offset, httplib::Response& res) {
        if (offset != at || *failed) return;
        *failed = true;
        res.status = status;
        res.body.clear();
    };
}

constexpr ReplicaIndex peer_index = 2;
constexpr Op op = 5;
const std::atomic<bool> running{false};
const DaemonConfig kPlainHttp{};  // no TLS

TEST_CASE("snapshot transfer: a snapshot arrives whole, a chunk a request, and is checked")
{
    const Bytes bytes = noise(2 * chunk + chunk / 2, 1);
    SnapshotPeer peer(*make_served_snapshot(op, bytes));
    SnapshotDownload download;
    auto fetched = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running);
    REQUIRE(fetched.ok());
    CHECK(fetched.value() == bytes);
    CHECK(peer.offsets() == std::vector<uint64_t>{0, chunk, 2 * chunk});
    CHECK(download.bytes.empty());  // done: nothing kept to resume
}

TEST_CASE("snapshot transfer: a fetch that breaks off resumes at the byte it reached")
{
    const Bytes bytes = noise(2 * chunk + 100, 2);
    SnapshotPeer peer(*make_served_snapshot(op, bytes));
    peer.tamper_with(fail_once_at(2 * chunk, 503));
    SnapshotDownload download;
    auto broken = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running);
    REQUIRE_FALSE(broken.ok());
    CHECK(broken.error().message().find("HTTP 503") != std::string::npos);
    CHECK(download.bytes.size() == 2 * chunk);

    auto resumed = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running);
    REQUIRE(resumed.ok());
    CHECK(resumed.value() == bytes);
    CHECK(peer.offsets() == std::vector<uint64_t>{0, chunk, 2 * chunk, 2 * chunk});
}

TEST_CASE("snapshot transfer: a peer that went away keeps what arrived for the next try")
{
    const Bytes bytes = noise(chunk + 1, 3);
    SnapshotDownload download;
    PeerAddress address;
    {
        SnapshotPeer first(*make_served_snapshot(op, bytes));
        first.tamper_with(fail_once_at(chunk, 500));
        address = first.address();
        REQUIRE_FALSE(fetch_snapshot(kPlainHttp, address, peer_index, op, download, running).ok());
    }
    auto gone = fetch_snapshot(kPlainHttp, address, peer_index, op, download, running);
    REQUIRE_FALSE(gone.ok());
    CHECK(gone.error().message().find("r2 (127.0.0.1:") != std::string::npos);
    CHECK(download.bytes.size() == chunk);

    SnapshotPeer back(*make_served_snapshot(op, bytes));  // the replica restarted elsewhere
    auto resumed = fetch_snapshot(kPlainHttp, back.address(), peer_index, op, download, running);
    REQUIRE(resumed.ok());
    CHECK(resumed.value() == bytes);
    CHECK(back.offsets() == std::vector<uint64_t>{chunk});
}

TEST_CASE("snapshot transfer: a chunk damaged on the way is refused and fetched again")
{
    const Bytes bytes = noise(2 * chunk, 4);
    SnapshotPeer peer(*make_served_snapshot(op, bytes));
    auto damaged = std::make_shared<bool>(false);
    peer.tamper_with([damaged](uint64_t offset, httplib::Response& res) {
        if (offset != chunk || *damaged) return;
        *damaged = true;
        res.body[12345] ^= 0x10;  // its header still carries the CRC of what was sent
    });
    SnapshotDownload download;
    auto refused = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message().find("a chunk at byte 1048576 failed its checksum") !=
          std::string::npos);
    CHECK(download.bytes.size() == chunk);  // the damaged chunk is not kept

    auto fetched = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running);
    REQUIRE(fetched.ok());
    CHECK(fetched.value() == bytes);
}

TEST_CASE("snapshot transfer: a chunk that does not continue the snapshot is refused")
{
    const Bytes bytes = noise(2 * chunk, 5);
    SnapshotPeer peer(*make_served_snapshot(op, bytes));
    peer.tamper_with([](uint64_t offset, httplib::Response& res) {
        if (offset != chunk) return;  // the second chunk claims another snapshot size
        res.headers.erase("X-Voltlock-Snapshot-Size");
        res.set_header("X-Voltlock-Snapshot-Size", "1");
    });
    SnapshotDownload download;
    auto refused = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message().find("does not continue the snapshot") != std::string::npos);
}

TEST_CASE("snapshot transfer: a peer that replaced its snapshot meanwhile makes it start over")
{
    const Bytes old_bytes = noise(2 * chunk, 6);
    const Bytes new_bytes = noise(chunk + 7, 7);
    SnapshotPeer peer(*make_served_snapshot(op, old_bytes));
    peer.tamper_with(fail_once_at(chunk, 503));
    SnapshotDownload download;
    REQUIRE_FALSE(
        fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running).ok());
    REQUIRE(download.bytes.size() == chunk);

    peer.serve(*make_served_snapshot(op + 4, new_bytes));
    auto replaced = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running);
    REQUIRE_FALSE(replaced.ok());
    CHECK(replaced.error().message().find("serves another snapshot") != std::string::npos);
    CHECK(download.bytes.empty());

    // The core is offered the newer one and asks for it: from byte 0, nothing of the old mixed in.
    auto fetched =
        fetch_snapshot(kPlainHttp, peer.address(), peer_index, op + 4, download, running);
    REQUIRE(fetched.ok());
    CHECK(fetched.value() == new_bytes);
    CHECK(peer.offsets() == std::vector<uint64_t>{0, chunk, chunk, 0, chunk});
}

TEST_CASE("snapshot transfer: a download of another peer or op is not resumed")
{
    const Bytes bytes = noise(chunk + 3, 8);
    SnapshotPeer peer(*make_served_snapshot(op, bytes));
    SnapshotDownload download{.peer = 1, .op = op, .size = bytes.size(),
                              .crc32c = crc32c(bytes), .bytes = bytes.substr(0, chunk)};
    auto fetched = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running);
    REQUIRE(fetched.ok());
    CHECK(fetched.value() == bytes);
    CHECK(peer.offsets() == std::vector<uint64_t>{0, chunk});
}

TEST_CASE("snapshot transfer: a snapshot that fails its whole checksum is dropped")
{
    const Bytes bytes = noise(chunk + 9, 9);
    // Every chunk checks out, but the whole is not what the peer says it serves.
    SnapshotPeer peer(ServedSnapshot{.op = op, .bytes = bytes, .crc32c = crc32c(bytes) ^ 1});
    SnapshotDownload download;
    auto refused = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, running);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message().find("the whole snapshot failed its checksum") !=
          std::string::npos);
    CHECK(download.bytes.empty());  // nothing of it is resumed
}

TEST_CASE("snapshot transfer: a daemon shutting down stops a fetch before it asks")
{
    SnapshotPeer peer(*make_served_snapshot(op, noise(100, 10)));
    const std::atomic<bool> stopping{true};
    SnapshotDownload download;
    auto stopped = fetch_snapshot(kPlainHttp, peer.address(), peer_index, op, download, stopping);
    REQUIRE_FALSE(stopped.ok());
    CHECK(stopped.error().message().find("stopped") != std::string::npos);
    CHECK(peer.offsets().empty());
}

}  // namespace
}  // namespace voltlock
