// A non-blocking UDP socket that receives and sends in batches (recvmmsg/sendmmsg): one system
// call moves up to `batch` datagrams each way.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "shell/event_loop.h"
#include "shell/result.h"

namespace voltlock {

Result<sockaddr_in> ipv4_address(const std::string& ip, uint16_t port);
std::string to_string(const sockaddr_in& address);
inline bool same_address(const sockaddr_in& a, const sockaddr_in& b)
{
    return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
}

class UdpSocket {
public:
    using OnDatagram = std::function<void(std::span<const uint8_t>, const sockaddr_in& from)>;

    static Result<UdpSocket> bind(const sockaddr_in& address, size_t max_datagram_bytes);
    // An unbound socket for clients: the kernel picks the port on first send.
    static Result<UdpSocket> unbound(size_t max_datagram_bytes);

    int fd() const { return fd_.get(); }
    // Receives everything waiting, in batches, without blocking. Returns datagrams received.
    size_t receive_all(const OnDatagram& on_datagram);
    // Copies a datagram into the send queue; flush() sends the queue.
    void queue(const sockaddr_in& to, std::span<const uint8_t> datagram);
    // Sends the queue. Datagrams the kernel refuses (a full buffer) are dropped, as a network
    // would drop them; the protocol retransmits.
    void flush();
    uint64_t send_drops() const { return send_drops_; }

private:
    UdpSocket(FileDescriptor fd, size_t max_datagram_bytes);

    static constexpr size_t batch = 64;
    FileDescriptor fd_;
    size_t max_datagram_bytes_;
    std::vector<uint8_t> receive_buffers_;
    std::vector<uint8_t> send_arena_;
    struct Queued {
        sockaddr_in to;
        size_t offset;
        size_t length;
    };
    std::vector<Queued> send_queue_;
    uint64_t send_drops_ = 0;
};

}  // namespace voltlock
