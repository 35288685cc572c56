#include "shell/service_manager.h"

#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

namespace voltlock {

namespace {

std::optional<uint64_t> environment_number(const char* name)
{
    const char* text = std::getenv(name);
    if (!text || !*text) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0') return std::nullopt;
    return value;
}

}  // namespace

Result<ServiceManager> ServiceManager::from_environment()
{
    ServiceManager manager;
    if (const char* path = std::getenv("NOTIFY_SOCKET")) {
        manager.socket_path_ = path;
        if (manager.socket_path_.size() >= sizeof(sockaddr_un::sun_path))
            return Error{0, "NOTIFY_SOCKET: the path is longer than a unix socket address"};
        if (manager.socket_path_[0] != '/' && manager.socket_path_[0] != '@')
            return Error{0, "NOTIFY_SOCKET: '" + manager.socket_path_ +
                                "' is neither a path nor an abstract socket (@name)"};
    }
    // The watchdog is ours only if WATCHDOG_PID names this process (or is absent).
    const auto watchdog_pid = environment_number("WATCHDOG_PID");
    const auto watchdog_usec = environment_number("WATCHDOG_USEC");
    if (watchdog_usec && *watchdog_usec > 0 && manager.notifying() &&
        (!watchdog_pid || *watchdog_pid == static_cast<uint64_t>(::getpid())))
        manager.watchdog_interval_ = std::chrono::microseconds(*watchdog_usec / 2);
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
    return manager;
}

Result<Ok> ServiceManager::notify(std::string_view assignments) const
{
    if (!notifying()) return Ok{};
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, socket_path_.data(), socket_path_.size());
    if (address.sun_path[0] == '@') address.sun_path[0] = '\0';
    const auto address_size =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path_.size());
    FileDescriptor fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return os_error("NOTIFY_SOCKET: socket");
    const ssize_t sent = ::sendto(fd.get(), assignments.data(), assignments.size(), MSG_NOSIGNAL,
                                  reinterpret_cast<const sockaddr*>(&address), address_size);
    if (sent != static_cast<ssize_t>(assignments.size()))
        return os_error("NOTIFY_SOCKET: send to " + socket_path_);
    return Ok{};
}

Result<FileDescriptor> ServiceManager::start_watchdog(EventLoop& loop) const
{
    if (!watchdog_interval_) return FileDescriptor{};
    FileDescriptor timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (timer.get() < 0) return os_error("watchdog: timerfd_create");
    const auto usec = watchdog_interval_->count();
    itimerspec every{};
    every.it_interval = {.tv_sec = usec / 1'000'000, .tv_nsec = (usec % 1'000'000) * 1000};
    every.it_value = every.it_interval;
    if (::timerfd_settime(timer.get(), 0, &every, nullptr) != 0)
        return os_error("watchdog: timerfd_settime");
    const int fd = timer.get();
    // Pinged from the loop's own timer: if the loop stops turning, the pings stop with it.
    auto watched = loop.watch(fd, [manager = *this, fd] {
        uint64_t expirations = 0;
        [[maybe_unused]] ssize_t got = ::read(fd, &expirations, sizeof expirations);
        if (auto sent = manager.notify("WATCHDOG=1"); !sent.ok())
            spdlog::warn("watchdog: {}", sent.error().message());
    });
    if (!watched.ok()) return watched.error();
    return timer;
}

}  // namespace voltlock
