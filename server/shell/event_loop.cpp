#include "shell/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <limits>

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
    VL_TRY(loop->watch(loop->wakeup_.get(), [raw = loop.get()] { raw->run_posted(); }));
    return loop;
}

EventLoop::EventLoop(FileDescriptor epoll, FileDescriptor wakeup)
    : epoll_(std::move(epoll)), wakeup_(std::move(wakeup))
{
}

EventLoop::TimerId EventLoop::after(std::chrono::milliseconds delay, Handler work)
{
    const TimerId timer{Clock::now() + delay, ++timers_set_};
    timers_.emplace(timer, std::move(work));
    return timer;
}

int EventLoop::wait_for_earliest_timer_ms() const
{
    if (timers_.empty()) return -1;
    const auto wait = timers_.begin()->first.first - Clock::now();
    if (wait <= Clock::duration::zero()) return 0;
    // Rounded up: a wait cut short would wake the loop before its timer is due, for nothing.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wait).count();
    return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
}

void EventLoop::run_timers()
{
    // One at a time, so a timer can cancel another that is due too. Only those set before
    // this call: one set from a timer with no delay runs on the next turn, not in this loop.
    const auto now = Clock::now();
    const uint64_t set_before = timers_set_;
    while (!timers_.empty()) {
        const auto earliest = timers_.begin();
        if (earliest->first.first > now || earliest->first.second > set_before) return;
        Handler work = std::move(earliest->second);
        timers_.erase(earliest);
        work();
    }
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
        // The earliest timer bounds the wait, so timers cost no system call of their own: a
        // timerfd was re-armed and read each time one fired. Timers are set in milliseconds.
        const int n =
            ::epoll_wait(epoll_.get(), events, max_events, wait_for_earliest_timer_ms());
        if (n < 0 && errno == EINTR) continue;
        const auto turn_started = Clock::now();
        for (int i = 0; i < n; i++) {
            const auto it = handlers_.find(events[i].data.fd);
            if (it != handlers_.end()) it->second();
        }
        run_timers();
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
