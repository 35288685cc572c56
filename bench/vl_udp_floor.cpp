// vl_udp_floor: the floor under every replication latency, the raw UDP round trip between two
// hosts. `serve IP:PORT` echoes datagrams back; `ping IP:PORT` sends one datagram at a time of
// the given size and reports the round trip's median and 99th percentile.
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "shell/udp_socket.h"
#include "voltlock/wire.h"

namespace {

using namespace voltlock;
using Clock = std::chrono::steady_clock;

Result<sockaddr_in> parse_endpoint(const std::string& text)
{
    const auto colon = text.rfind(':');
    if (colon == std::string::npos) return Error{0, "expected IP:PORT, got '" + text + "'"};
    return ipv4_address(text.substr(0, colon),
                        static_cast<uint16_t>(std::stoul(text.substr(colon + 1))));
}

int serve(const sockaddr_in& address)
{
    auto socket = UdpSocket::bind(address, VL_MAX_MESSAGE_BYTES);
    if (!socket.ok()) {
        std::fprintf(stderr, "vl_udp_floor: %s\n", socket.error().message().c_str());
        return 1;
    }
    UdpSocket& udp = socket.value();
    for (;;) {
        pollfd fd{udp.fd(), POLLIN, 0};
        ::poll(&fd, 1, -1);
        udp.receive_all([&](std::span<const uint8_t> datagram, const sockaddr_in& from) {
            udp.queue(from, datagram);
        });
        udp.flush();
    }
}

int ping(const sockaddr_in& address, size_t bytes, double seconds)
{
    auto socket = UdpSocket::unbound(VL_MAX_MESSAGE_BYTES);
    if (!socket.ok()) {
        std::fprintf(stderr, "vl_udp_floor: %s\n", socket.error().message().c_str());
        return 1;
    }
    UdpSocket& udp = socket.value();
    const std::vector<uint8_t> payload(bytes, 0x5a);
    std::vector<double> round_trips_us;
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < deadline) {
        const auto sent = Clock::now();
        udp.queue(address, payload);
        udp.flush();
        bool answered = false;
        while (!answered && Clock::now() - sent < std::chrono::milliseconds(200)) {
            pollfd fd{udp.fd(), POLLIN, 0};
            ::poll(&fd, 1, 10);
            udp.receive_all([&](std::span<const uint8_t>, const sockaddr_in&) { answered = true; });
        }
        if (answered)
            round_trips_us.push_back(
                std::chrono::duration<double, std::micro>(Clock::now() - sent).count());
    }
    if (round_trips_us.empty()) {
        std::fprintf(stderr, "vl_udp_floor: no answer from the echo server\n");
        return 1;
    }
    std::sort(round_trips_us.begin(), round_trips_us.end());
    const auto at = [&](double p) {
        const auto rank = static_cast<size_t>(p * static_cast<double>(round_trips_us.size()));
        return round_trips_us[std::min(round_trips_us.size() - 1, rank)];
    };
    std::printf("{\"round_trips\": %zu, \"bytes\": %zu, \"p50_us\": %.1f, \"p99_us\": %.1f}\n",
                round_trips_us.size(), bytes, at(0.5), at(0.99));
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 3 || (std::string(argv[1]) != "serve" && std::string(argv[1]) != "ping")) {
        std::fputs("usage: vl_udp_floor serve IP:PORT\n"
                   "       vl_udp_floor ping IP:PORT [BYTES=64] [SECONDS=2]\n",
                   stderr);
        return 2;
    }
    auto endpoint = parse_endpoint(argv[2]);
    if (!endpoint.ok()) {
        std::fprintf(stderr, "vl_udp_floor: %s\n", endpoint.error().message().c_str());
        return 2;
    }
    if (std::string(argv[1]) == "serve") return serve(endpoint.value());
    const size_t bytes = argc > 3 ? std::stoul(argv[3]) : 64;
    const double seconds = argc > 4 ? std::stod(argv[4]) : 2;
    return ping(endpoint.value(), bytes, seconds);
}
