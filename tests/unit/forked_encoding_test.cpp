// A snapshot encoded by a forked child (server/shell/forked_encoding.h): the child encodes the
// state as it stood at the fork, whatever the parent changes meanwhile; what it encodes arrives
// whole however large; a child that fails or dies is an error, not bytes; an encoding given up
// (a daemon shutting down) does not wait for its child.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <new>
#include <string>

#include "shell/forked_encoding.h"

namespace voltlock {
namespace {

// A pipe the child waits on: the parent writes to it once it has changed its state.
class Gate {
public:
    Gate() { REQUIRE(::pipe(fds_) == 0); }
    ~Gate()
    {
        ::close(fds_[0]);
        ::close(fds_[1]);
    }
    void open() { REQUIRE(::write(fds_[1], "x", 1) == 1); }
    void wait() const
    {
        char c = 0;
        while (::read(fds_[0], &c, 1) != 1) {
        }
    }

private:
    int fds_[2] = {-1, -1};
};

TEST_CASE("forked encoding: the child encodes the state as it was at the fork")
{
    std::string state(3 << 20, 'a');  // more than a pipe or a page holds
    state.back() = 'z';
    const std::string at_fork = state;
    Gate changed;
    auto encoding = ForkedEncoding::start([&] {
        changed.wait();  // the parent has overwritten `state` by now
        return state;
    });
    REQUIRE(encoding.ok());
    state.assign(state.size(), 'b');  // the loop goes on changing the replica
    changed.open();
    auto bytes = encoding.value().finish();
    REQUIRE(bytes.ok());
    CHECK(bytes.value() == at_fork);
}

TEST_CASE("forked encoding: nothing to encode is an empty snapshot, not an error")
{
    auto encoding = ForkedEncoding::start([] { return Bytes(); });
    REQUIRE(encoding.ok());
    auto bytes = encoding.value().finish();
    REQUIRE(bytes.ok());
    CHECK(bytes.value().empty());
}

TEST_CASE("forked encoding: a child that cannot encode is an error")
{
    auto encoding = ForkedEncoding::start([]() -> Bytes { throw std::bad_alloc(); });
    REQUIRE(encoding.ok());
    auto bytes = encoding.value().finish();
    REQUIRE_FALSE(bytes.ok());
    CHECK(bytes.error().message() == "the child encoding the snapshot could not encode (out of "
                                     "memory?)");
}

TEST_CASE("forked encoding: a child that dies is an error")
{
    auto encoding = ForkedEncoding::start([]() -> Bytes {
        ::raise(SIGKILL);
        return "never";
    });
    REQUIRE(encoding.ok());
    auto bytes = encoding.value().finish();
    REQUIRE_FALSE(bytes.ok());
    CHECK(bytes.error().message() == "the child encoding the snapshot killed by signal 9");
}

TEST_CASE("forked encoding: one given up kills its child instead of waiting for it")
{
    const auto started = std::chrono::steady_clock::now();
    {
        auto encoding = ForkedEncoding::start([]() -> Bytes {
            ::pause();  // would encode for ever
            return {};
        });
        REQUIRE(encoding.ok());
        ForkedEncoding moved = std::move(encoding.value());  // the writer queue moves them
    }
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
}

}  // namespace
}  // namespace voltlock
