// A single-threaded epoll loop. Other threads hand it work through post(), which wakes it with
// an eventfd; everything that touches the replica runs on the loop's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shell/result.h"

namespace voltlock {

// Owns a file descriptor; closes it once.
class FileDescriptor {
public:
    FileDescriptor() = default;
    explicit FileDescriptor(int fd) : fd_(fd) {}
    FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    FileDescriptor& operator=(FileDescriptor&& other) noexcept;
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    ~FileDescriptor();

    int get() const { return fd_; }

private:
    int fd_ = -1;
};

class EventLoop {
public:
    using Handler = std::function<void()>;
    using Clock = std::chrono::steady_clock;
    // Names a timer set with after(): its deadline, then the order it was set in (timers with
    // one deadline run in that order). The default one names no timer.
    using TimerId = std::pair<Clock::time_point, uint64_t>;

    static Result<std::unique_ptr<EventLoop>> create();

    // Calls `on_readable` on the loop thread whenever `fd` is readable.
    Result<Ok> watch(int fd, Handler on_readable);
    // Runs `work` on the loop thread soon. Safe from any thread.
    void post(Handler work);
    // Runs `work` on the loop thread once `delay` has passed. Loop thread only.
    TimerId after(std::chrono::milliseconds delay, Handler work);
    // Drops a timer that has not run, with what its work holds; nothing if it ran already or
    // was cancelled. A timer that mostly does not fire (a deadline on a request that is
    // answered) is cancelled, so the loop does not keep thousands of them for seconds.
    void cancel(const TimerId& timer) { timers_.erase(timer); }
    // Runs `work` once every handler of this turn has run (what a turn's handlers queued can
    // leave together, e.g. in one sendmmsg). Loop thread only.
    void at_end_of_turn(Handler work);
    // Runs until stop(); returns after the iteration in which stop() was called.
    void run();
    void stop() { running_ = false; }
    // Whether the caller is the thread in run(): work for the loop can run at once, not posted.
    bool on_loop_thread() const { return std::this_thread::get_id() == thread_.load(); }

    // How long the loop's turns take (from epoll_wait's return to its next call: every handler
    // of one wake-up), so that a stall shows in /metrics and the log. Readable from any thread.
    struct TurnStats {
        uint64_t turns = 0;
        uint64_t longest_turn_us = 0;  // since start
        uint64_t turns_over_100ms = 0;
        uint64_t turns_over_1s = 0;
    };
    TurnStats turn_stats() const;
    // A turn at least this long is logged as a warning, with its length.
    static constexpr std::chrono::milliseconds kSlowTurn{100};

private:
    EventLoop(FileDescriptor epoll, FileDescriptor wakeup);
    void run_posted();
    void run_timers();  // the timers that are due
    // How long the next epoll wait may block, in epoll_wait's terms: until the earliest timer
    // is due, or -1 (for ever) with none.
    int wait_for_earliest_timer_ms() const;

    FileDescriptor epoll_;
    FileDescriptor wakeup_;  // eventfd
    std::map<TimerId, Handler> timers_;
    uint64_t timers_set_ = 0;
    std::unordered_map<int, Handler> handlers_;
    std::vector<Handler> end_of_turn_;
    std::mutex posted_mutex_;
    std::vector<Handler> posted_;
    bool running_ = false;
    std::atomic<std::thread::id> thread_;
    std::atomic<uint64_t> turns_{0};
    std::atomic<uint64_t> longest_turn_us_{0};
    std::atomic<uint64_t> turns_over_100ms_{0};
    std::atomic<uint64_t> turns_over_1s_{0};
    void count_turn(Clock::duration took);
};

}  // namespace voltlock
