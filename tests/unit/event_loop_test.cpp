// The replica's event loop (server/shell/event_loop.h): its timers bound the epoll wait, so they
// fire in the order of their deadlines and never before their delay, a timer set from a handler
// runs after that handler returns, a cancelled timer never runs, and work posted from another
// thread wakes a loop that has no timer to wait for.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "shell/event_loop.h"

namespace voltlock {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::unique_ptr<EventLoop> make_loop()
{
    auto loop = EventLoop::create();
    REQUIRE(loop.ok());
    return std::move(loop).value();
}

TEST_CASE("timers fire in the order of their deadlines, none before its delay")
{
    const auto loop = make_loop();
    const Clock::time_point start = Clock::now();
    std::vector<int> fired;
    std::vector<Clock::duration> after_start;
    const auto fire = [&](int which) {
        fired.push_back(which);
        after_start.push_back(Clock::now() - start);
    };
    loop->after(milliseconds(30), [&] {
        fire(30);
        loop->stop();
    });
    loop->after(milliseconds(1), [&] { fire(1); });
    loop->after(milliseconds(10), [&] { fire(10); });
    loop->after(milliseconds(10), [&] { fire(11); });  // the same deadline: in the order set
    loop->run();
    CHECK(fired == std::vector<int>{1, 10, 11, 30});
    REQUIRE(after_start.size() == 4);
    CHECK(after_start[0] >= milliseconds(1));
    CHECK(after_start[1] >= milliseconds(10));
    CHECK(after_start[3] >= milliseconds(30));
}

TEST_CASE("a timer set from a timer runs after the one that set it, even at 0 ms")
{
    const auto loop = make_loop();
    std::vector<int> order;
    loop->after(milliseconds(0), [&] {
        loop->after(milliseconds(0), [&] {
            order.push_back(2);
            loop->stop();
        });
        order.push_back(1);
    });
    loop->run();
    CHECK(order == std::vector<int>{1, 2});
}

TEST_CASE("a cancelled timer never runs, and what it held is let go at once")
{
    const auto loop = make_loop();
    auto held = std::make_shared<int>(0);
    bool cancelled_ran = false;
    const EventLoop::TimerId cancelled =
        loop->after(milliseconds(5), [&, held] { cancelled_ran = true; });
    loop->cancel(cancelled);
    CHECK(held.use_count() == 1);
    // Due with the timer that cancels it (set just after it, same delay): still never runs.
    EventLoop::TimerId later;
    loop->after(milliseconds(10), [&] { loop->cancel(later); });
    later = loop->after(milliseconds(10), [&] { cancelled_ran = true; });
    const EventLoop::TimerId ran = loop->after(milliseconds(20), [&] { loop->stop(); });
    loop->run();
    CHECK_FALSE(cancelled_ran);
    loop->cancel(ran);  // ran already: nothing to drop
    loop->cancel(EventLoop::TimerId{});
}

TEST_CASE("work posted from another thread wakes a loop with no timers")
{
    const auto loop = make_loop();
    bool ran = false;
    std::thread poster([&] {
        loop->post([&] {
            ran = true;
            loop->stop();
        });
    });
    loop->run();
    poster.join();
    CHECK(ran);
}

}  // namespace
}  // namespace voltlock
