#include "shell/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace voltlock {

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept
{
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
}

FileDescriptor::~FileDescriptor()
{
    if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<EventLoop>> EventLoop::create()
{
    FileDescriptor epoll(::epoll_create1(EPOLL_CLOEXEC));
    if (epoll.get() < 0) return os_error("epoll_create1");
    FileDescriptor wakeup(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (wakeup.get() < 0) return os_error("eventfd");
    std::unique_ptr<EventLoop> loop(new EventLoop(std::move(epoll), std::move(wakeup)));
    auto watched = loop->watch(loop->wakeup_.get(), [raw = loop.get()] { raw->run_posted(); });
    if (!watched.ok()) return watched.error();
    return loop;
}

EventLoop::EventLoop(FileDescriptor epoll, FileDescriptor wakeup)
    : epoll_(std::move(epoll)), wakeup_(std::move(wakeup))
{
}

Result<Ok> EventLoop::watch(int fd, Handler on_readable)
{
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0)
        return os_error("epoll_ctl add fd " + std::to_string(fd));
    handlers_[fd] = std::move(on_readable);
    return Ok{};
}

void EventLoop::post(Handler work)
{
    {
        std::lock_guard lock(posted_mutex_);
        posted_.push_back(std::move(work));
    }
    const uint64_t one = 1;
    // A full counter already means "wake up"; nothing is lost if this write fails.
    [[maybe_unused]] ssize_t written = ::write(wakeup_.get(), &one, sizeof one);
}

void EventLoop::run_posted()
{
    uint64_t count = 0;
    [[maybe_unused]] ssize_t got = ::read(wakeup_.get(), &count, sizeof count);
    std::vector<Handler> work;
    {
        std::lock_guard lock(posted_mutex_);
        work.swap(posted_);
    }
    for (Handler& handler : work) handler();
}

void EventLoop::run()
{
    running_ = true;
    constexpr int max_events = 16;
    epoll_event events[max_events];
    while (running_) {
        const int n = ::epoll_wait(epoll_.get(), events, max_events, -1);
        if (n < 0 && errno == EINTR) continue;
        for (int i = 0; i < n; i++) {
            const auto it = handlers_.find(events[i].data.fd);
            if (it != handlers_.end()) it->second();
        }
    }
}

}  // namespace voltlock
