// vl_loadgen: closed-loop VR clients that send ops straight to the leader over UDP, as in the
// Electrode paper's evaluation. Used by `bench/run replication` and by the integration tests.
//
// Every client has one request outstanding, writes a unique value, and retries the same
// request (to every replica) until it is answered, so by the end every op it issued has been
// acknowledged. --verify then proves nothing acknowledged was lost or applied twice: the
// register's write versions must be exactly 1..W, and the digest of the values in version order
// must equal the digest the cell reports.
#include <poll.h>
#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command_line.h"
#include "core/message.h"
#include "core/register_machine.h"
#include "shell/config.h"
#include "shell/udp_socket.h"

namespace {

using namespace voltlock;
using Clock = std::chrono::steady_clock;

constexpr const char* usage = R"(usage: vl_loadgen --config FILE [options]

  --config FILE        any replica's voltlockd config (gives the cell's addresses and id, and
                       its replication key file, which requests are authenticated with)
  --clients N          closed-loop clients (default 1)
  --seconds S          run for S seconds (default 5), or
  --ops K              stop after K acknowledged ops in all
  --payload-bytes B    bytes per written value (default 16); A-B: sizes spread over A..B
  --timeout-ms T       retry a request to every replica after T ms (default 200)
  --verify             after the run, prove every acknowledged write is in the cell, once
  --json               print the report as JSON
)";

struct Options {
    std::string config_path;
    size_t clients = 1;
    double seconds = 5;
    uint64_t ops = 0;
    size_t payload_bytes = 16;
    size_t payload_bytes_max = 16;
    uint32_t timeout_ms = 200;
    bool verify = false;
    bool json = false;
};

struct ClientState {
    ClientId id = 0;
    RequestNumber request_number = 0;
    Bytes payload;
    Clock::time_point started;
    Clock::time_point last_sent;
    bool idle = true;
};

class LoadGenerator {
public:
    LoadGenerator(const DaemonConfig& cell, const Options& options, UdpSocket socket)
        : cell_(cell),
          wire_(cell.cluster_id, cell.replication_keys),
          options_(options),
          socket_(std::move(socket))
    {
        for (const PeerAddress& peer : cell.replicas)
            replicas_.push_back(ipv4_address(peer.ip, peer.udp_port).value());
        uint64_t base = 0;
        while (getrandom(&base, sizeof base, 0) != sizeof base) {
        }
        clients_.resize(options.clients);
        for (size_t i = 0; i < clients_.size(); i++) clients_[i].id = (base & ~0xFFFFull) + i;
    }

    void run()
    {
        const auto start = Clock::now();
        const auto deadline = start + std::chrono::duration<double>(options_.seconds);
        for (ClientState& client : clients_) issue(client, next_write(client));
        socket_.flush();
        while (true) {
            const bool stop_issuing = options_.ops ? acknowledged_ >= options_.ops
                                                   : Clock::now() >= deadline;
            if (stop_issuing) stopping_ = true;
            if (stopping_ && in_flight() == 0) break;
            pump();
        }
        elapsed_s_ = std::chrono::duration<double>(Clock::now() - start).count();
    }

    // Reads the register through the log; returns false if no answer came.
    bool read_register(RegisterMachine::Result& out)
    {
        ClientState& client = clients_.front();
        const bool was_stopping = stopping_;
        stopping_ = true;
        issue(client, RegisterMachine::read_op());
        socket_.flush();
        const auto deadline = Clock::now() + std::chrono::seconds(30);
        while (!client.idle && Clock::now() < deadline) pump();
        stopping_ = was_stopping;
        if (!client.idle) return false;
        return RegisterMachine::parse_result(last_read_result_, out);
    }

    nlohmann::json report() const
    {
        std::vector<uint64_t> sorted = latencies_us_;
        std::sort(sorted.begin(), sorted.end());
        auto percentile = [&](double p) -> uint64_t {
            if (sorted.empty()) return 0;
            const auto rank = static_cast<size_t>(p * static_cast<double>(sorted.size()));
            return sorted[std::min(sorted.size() - 1, rank)];
        };
        return {{"clients", options_.clients},
                {"ops", acknowledged_},
                {"seconds", elapsed_s_},
                {"ops_per_second",
                 elapsed_s_ > 0 ? static_cast<double>(acknowledged_) / elapsed_s_ : 0},
                {"latency_us", {{"p50", percentile(0.50)}, {"p99", percentile(0.99)}}},
                {"retries", retries_}};
    }

    // Checks the acknowledged writes against the register's state before and after the run,
    // as the cell reports it; nobody else may write meanwhile.
    std::string verify(const RegisterMachine::Result& before,
                       const RegisterMachine::Result& after) const
    {
        if (writes_by_version_.size() != writes_acknowledged_)
            return "two acknowledged writes report the same version";
        if (after.version - before.version != writes_acknowledged_)
            return "the cell holds " + std::to_string(after.version - before.version) +
                   " new writes, " + std::to_string(writes_acknowledged_) +
                   " were acknowledged";
        uint64_t digest = before.digest;
        uint64_t expected_version = before.version + 1;
        for (const auto& [version, value] : writes_by_version_) {
            if (version != expected_version++) return "a gap in write versions";
            digest = RegisterMachine::next_digest(digest, value);
        }
        if (digest != after.digest) return "the digest of the acknowledged values differs";
        return "";
    }

private:
    Bytes next_write(ClientState& client)
    {
        std::string value = std::to_string(client.id) + "-" +
                            std::to_string(client.request_number + 1) + "-";
        // Sizes spread over the range by a fixed stride, so runs are repeatable.
        const size_t span = options_.payload_bytes_max - options_.payload_bytes + 1;
        const size_t size =
            options_.payload_bytes + (client.request_number * 7919 + client.id) % span;
        value.resize(std::max(value.size(), size), '.');
        return RegisterMachine::write_op(value);
    }

    void issue(ClientState& client, Bytes payload)
    {
        client.request_number += 1;
        client.payload = std::move(payload);
        client.started = Clock::now();
        client.idle = false;
        send(client, {&replicas_[leader_], 1});
    }

    // Waits up to a millisecond for replies, takes them, retries what is overdue.
    void pump()
    {
        pollfd fd{socket_.fd(), POLLIN, 0};
        ::poll(&fd, 1, 1);
        socket_.receive_all([this](std::span<const uint8_t> datagram, const sockaddr_in&) {
            on_datagram(datagram);
        });
        retry_overdue();
        socket_.flush();
    }

    void send(ClientState& client, std::span<const sockaddr_in> to)
    {
        const Request request{.view = view_, .client_id = client.id,
                              .request_number = client.request_number,
                              .payload = client.payload};
        const std::vector<uint8_t> datagram = encode(request, wire_);
        for (const sockaddr_in& address : to) socket_.queue(address, datagram);
        client.last_sent = Clock::now();
    }

    void retry_overdue()
    {
        const auto now = Clock::now();
        for (ClientState& client : clients_) {
            if (client.idle ||
                now - client.last_sent < std::chrono::milliseconds(options_.timeout_ms))
                continue;
            retries_ += 1;
            send(client, replicas_);  // the leader may have changed: ask everyone
        }
    }

    void on_datagram(std::span<const uint8_t> datagram)
    {
        DecodeResult decoded = decode(datagram, wire_);
        if (!decoded.ok()) return;
        const auto* reply = std::get_if<Reply>(&decoded.value().message);
        if (!reply || reply->client_id < clients_.front().id ||
            reply->client_id - clients_.front().id >= clients_.size())
            return;
        ClientState& client = clients_[reply->client_id - clients_.front().id];
        if (client.idle || reply->request_number != client.request_number) return;  // stale
        view_ = std::max(view_, reply->view);
        leader_ = view_ % replicas_.size();
        client.idle = true;
        if (RegisterMachine::is_write(client.payload)) {
            RegisterMachine::Result result;
            if (RegisterMachine::parse_result(reply->result, result))
                writes_by_version_[result.version] = client.payload.substr(1);
            writes_acknowledged_ += 1;
            acknowledged_ += 1;
            latencies_us_.push_back(static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() -
                                                                      client.started)
                    .count()));
            if (!stopping_) issue(client, next_write(client));
        } else {
            last_read_result_ = reply->result;
        }
    }

    size_t in_flight() const
    {
        return static_cast<size_t>(
            std::count_if(clients_.begin(), clients_.end(), [](const auto& c) { return !c.idle; }));
    }

    const DaemonConfig& cell_;
    const CellWire wire_;  // the replicas' key, from their config: requests are tagged too
    const Options& options_;
    UdpSocket socket_;
    std::vector<sockaddr_in> replicas_;
    std::vector<ClientState> clients_;
    View view_ = 0;
    size_t leader_ = 0;
    bool stopping_ = false;
    uint64_t acknowledged_ = 0;
    uint64_t writes_acknowledged_ = 0;
    uint64_t retries_ = 0;
    double elapsed_s_ = 0;
    std::vector<uint64_t> latencies_us_;
    std::map<uint64_t, Bytes> writes_by_version_;
    Bytes last_read_result_;
};

bool parse_options(int argc, char** argv, Options& options)
{
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--verify") options.verify = true;
        else if (arg == "--json") options.json = true;
        else if (!has_value) return false;
        else if (arg == "--config") options.config_path = argv[++i];
        else if (arg == "--clients") options.clients = std::stoul(argv[++i]);
        else if (arg == "--seconds") options.seconds = std::stod(argv[++i]);
        else if (arg == "--ops") options.ops = std::stoull(argv[++i]);
        else if (arg == "--payload-bytes") {
            const std::string range = argv[++i];
            const auto dash = range.find('-');
            options.payload_bytes = std::stoul(range.substr(0, dash));
            options.payload_bytes_max = dash == std::string::npos
                                            ? options.payload_bytes
                                            : std::stoul(range.substr(dash + 1));
        } else if (arg == "--timeout-ms")
            options.timeout_ms = static_cast<uint32_t>(std::stoul(argv[++i]));
        else return false;
    }
    return !options.config_path.empty() && options.clients >= 1 &&
           options.payload_bytes_max >= options.payload_bytes;
}

}  // namespace

int main(int argc, char** argv)
{
    Options options;
    if (!voltlock::bench::parse_command_line(argc, argv, options, parse_options, usage))
        return 2;
    auto cell = load_config(options.config_path);
    if (!cell.ok()) {
        std::fprintf(stderr, "vl_loadgen: %s\n", cell.error().message().c_str());
        return 2;
    }
    auto socket = UdpSocket::unbound(VL_MAX_MESSAGE_BYTES);
    if (!socket.ok()) {
        std::fprintf(stderr, "vl_loadgen: %s\n", socket.error().message().c_str());
        return 1;
    }
    LoadGenerator generator(cell.value(), options, std::move(socket.value()));
    RegisterMachine::Result before;
    if (options.verify && !generator.read_register(before)) {
        std::fprintf(stderr, "vl_loadgen: the cell did not answer a read within 30 s\n");
        return 1;
    }
    generator.run();
    nlohmann::json report = generator.report();

    int status = 0;
    if (options.verify) {
        RegisterMachine::Result after;
        std::string problem = "the cell did not answer a read within 30 s";
        if (generator.read_register(after)) problem = generator.verify(before, after);
        report["verified"] = problem.empty();
        if (!problem.empty()) {
            report["violation"] = problem;
            status = 1;
        }
    }
    if (options.json) {
        std::printf("%s\n", report.dump().c_str());
    } else {
        std::printf("%llu ops in %.2f s: %.0f ops/s, p50 %llu us, p99 %llu us, %llu retries%s\n",
                    static_cast<unsigned long long>(report["ops"].get<uint64_t>()),
                    report["seconds"].get<double>(), report["ops_per_second"].get<double>(),
                    static_cast<unsigned long long>(report["latency_us"]["p50"].get<uint64_t>()),
                    static_cast<unsigned long long>(report["latency_us"]["p99"].get<uint64_t>()),
                    static_cast<unsigned long long>(report["retries"].get<uint64_t>()),
                    options.verify ? (status == 0 ? ", verified" : ", VIOLATION") : "");
        if (status != 0)
            std::printf("violation: %s\n", report["violation"].get<std::string>().c_str());
    }
    return status;
}
