#include "shell/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
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
    FileDescriptor timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (timer.get() < 0) return os_error("timerfd_create");
    std::unique_ptr<EventLoop> loop(
        new EventLoop(std::move(epoll), std::move(wakeup), std::move(timer)));
    VL_TRY(loop->watch(loop->wakeup_.get(), [raw = loop.get()] { raw->run_posted(); }));
    VL_TRY(loop->watch(loop->timer_.get(), [raw = loop.get()] { raw->run_timers(); }));
    return loop;
}

EventLoop::EventLoop(FileDescriptor epoll, FileDescriptor wakeup, FileDescriptor timer)
    : epoll_(std::move(epoll)), wakeup_(std::move(wakeup)), timer_(std::move(timer))
{
}

void EventLoop::after(std::chrono::milliseconds delay, Handler work)
{
    const auto at = Clock::now() + delay;
    const bool earliest = timers_.empty() || at < timers_.begin()->first;
    timers_.emplace(at, std::move(work));
    if (earliest) arm_timer();
}

void EventLoop::arm_timer()
{
    itimerspec when{};  // all zero: disarmed
    if (!timers_.empty()) {
        const auto wait = std::max<Clock::duration>(timers_.begin()->first - Clock::now(),
                                                    std::chrono::microseconds(1));
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
        when.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
        when.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    }
    ::timerfd_settime(timer_.get(), 0, &when, nullptr);
}

void EventLoop::run_timers()
{
    uint64_t expirations = 0;
    [[maybe_unused]] ssize_t got = ::read(timer_.get(), &expirations, sizeof expirations);
    const auto now = Clock::now();
    std::vector<Handler> due;
    while (!timers_.empty() && timers_.begin()->first <= now) {
        due.push_back(std::move(timers_.begin()->second));
        timers_.erase(timers_.begin());
    }
    arm_timer();
    for (Handler& work : due) work();
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

void EventLoop::at_end_of_turn(Handler work) { end_of_turn_.push_back(std::move(work)); }

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
    thread_ = std::this_thread::get_id();
    constexpr int max_events = 16;
    epoll_event events[max_events];
    while (running_) {
        const int n = ::epoll_wait(epoll_.get(), events, max_events, -1);
        if (n < 0 && errno == EINTR) continue;
        const auto turn_started = Clock::now();
        for (int i = 0; i < n; i++) {
            const auto it = handlers_.find(events[i].data.fd);
            if (it != handlers_.end()) it->second();
        }
        while (!end_of_turn_.empty())
            for (Handler& work : std::exchange(end_of_turn_, {})) work();
        count_turn(Clock::now() - turn_started);
    }
}

void EventLoop::count_turn(Clock::duration took)
{
    const auto us = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(took).count());
    turns_.fetch_add(1, std::memory_order_relaxed);
    if (us > longest_turn_us_.load(std::memory_order_relaxed))
        longest_turn_us_.store(us, std::memory_order_relaxed);  // only this thread writes it
    if (took < kSlowTurn) return;
    turns_over_100ms_.fetch_add(1, std::memory_order_relaxed);
    if (took >= std::chrono::seconds(1)) turns_over_1s_.fetch_add(1, std::memory_order_relaxed);
    // Nothing else runs on the loop meanwhile: every request, timer and datagram waited this long.
    spdlog::warn("event loop: one turn took {} ms (requests, timers and replication waited)",
                 us / 1000);
}

EventLoop::TurnStats EventLoop::turn_stats() const
{
    return TurnStats{.turns = turns_.load(std::memory_order_relaxed),
                     .longest_turn_us = longest_turn_us_.load(std::memory_order_relaxed),
                     .turns_over_100ms = turns_over_100ms_.load(std::memory_order_relaxed),
                     .turns_over_1s = turns_over_1s_.load(std::memory_order_relaxed)};
}

}  // namespace voltlock
