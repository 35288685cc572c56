#include "shell/udp_socket.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace voltlock {

Result<sockaddr_in> ipv4_address(const std::string& ip, uint16_t port)
{
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    if (inet_pton(AF_INET, ip.c_str(), &address.sin_addr) != 1)
        return Error{0, "'" + ip + "' is not an IPv4 address"};
    return address;
}

std::string to_string(const sockaddr_in& address)
{
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &address.sin_addr, ip, sizeof ip);
    return std::string(ip) + ":" + std::to_string(ntohs(address.sin_port));
}

namespace {

Result<FileDescriptor> open_socket()
{
    FileDescriptor fd(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return os_error("socket");
    // Deep buffers absorb bursts of Prepares and acknowledgements between loop iterations.
    const int bytes = 8 << 20;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    return fd;
}

}  // namespace

Result<UdpSocket> UdpSocket::bind(const sockaddr_in& address, size_t max_datagram_bytes)
{
    FileDescriptor fd = VL_TRY(open_socket());
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address))
        return os_error("bind UDP " + to_string(address));
    return UdpSocket(std::move(fd), max_datagram_bytes);
}

Result<UdpSocket> UdpSocket::unbound(size_t max_datagram_bytes)
{
    return UdpSocket(VL_TRY(open_socket()), max_datagram_bytes);
}

UdpSocket::UdpSocket(FileDescriptor fd, size_t max_datagram_bytes)
    : fd_(std::move(fd)),
      max_datagram_bytes_(max_datagram_bytes),
      receive_buffers_(batch * max_datagram_bytes)
{
}

size_t UdpSocket::receive_all(const OnDatagram& on_datagram)
{
    mmsghdr messages[batch];
    iovec vectors[batch];
    sockaddr_in sources[batch];
    size_t total = 0;
    for (;;) {
        for (size_t i = 0; i < batch; i++) {
            vectors[i] = {receive_buffers_.data() + i * max_datagram_bytes_, max_datagram_bytes_};
            messages[i] = {};
            messages[i].msg_hdr.msg_iov = &vectors[i];
            messages[i].msg_hdr.msg_iovlen = 1;
            messages[i].msg_hdr.msg_name = &sources[i];
            messages[i].msg_hdr.msg_namelen = sizeof sources[i];
        }
        const int n = ::recvmmsg(fd_.get(), messages, batch, MSG_DONTWAIT, nullptr);
        if (n <= 0) return total;
        for (int i = 0; i < n; i++) {
            // A datagram larger than the buffer arrives truncated; the codec rejects it.
            const size_t length = messages[i].msg_len;
            on_datagram({static_cast<const uint8_t*>(vectors[i].iov_base), length}, sources[i]);
        }
        total += static_cast<size_t>(n);
        if (static_cast<size_t>(n) < batch) return total;
    }
}

void UdpSocket::queue(const sockaddr_in& to, std::span<const uint8_t> datagram)
{
    const size_t offset = send_arena_.size();
    send_arena_.insert(send_arena_.end(), datagram.begin(), datagram.end());
    send_queue_.push_back({to, offset, datagram.size()});
    if (send_queue_.size() >= 4 * batch) flush();
}

void UdpSocket::flush()
{
    size_t sent = 0;
    while (sent < send_queue_.size()) {
        const size_t n = std::min(batch, send_queue_.size() - sent);
        mmsghdr messages[batch];
        iovec vectors[batch];
        for (size_t i = 0; i < n; i++) {
            Queued& queued = send_queue_[sent + i];
            vectors[i] = {send_arena_.data() + queued.offset, queued.length};
            messages[i] = {};
            messages[i].msg_hdr.msg_iov = &vectors[i];
            messages[i].msg_hdr.msg_iovlen = 1;
            messages[i].msg_hdr.msg_name = &queued.to;
            messages[i].msg_hdr.msg_namelen = sizeof queued.to;
        }
        const int result = ::sendmmsg(fd_.get(), messages, static_cast<unsigned>(n), 0);
        if (result <= 0) {
            if (result < 0 && errno == EINTR) continue;
            send_drops_ += 1;  // skip the datagram the kernel refused
            sent += 1;
            continue;
        }
        sent += static_cast<size_t>(result);
    }
    send_queue_.clear();
    send_arena_.clear();
}

}  // namespace voltlock
