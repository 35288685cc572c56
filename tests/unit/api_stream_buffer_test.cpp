// StreamBuffer (server/api/stream_buffer.h): a stream's bounded buffer. The case that matters: a
// batch refused while a few bytes are unsent keeps the buffer full until the reader takes them,
// so a reader that stopped there is seen as slow (and cut), not offered the batch for ever.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "api/stream_buffer.h"

namespace voltlock::api {
namespace {

std::string take_all(StreamBuffer& buffer, size_t max, bool* drained = nullptr)
{
    std::string out;
    std::vector<char> chunk(max);
    while (!buffer.empty()) {
        const StreamBuffer::Taken taken = buffer.take(chunk.data(), max);
        out.append(chunk.data(), taken.bytes);
        if (drained) *drained = *drained || taken.drained;
    }
    return out;
}

TEST_CASE("a stream buffer takes batches up to its limit and is full at half of it")
{
    StreamBuffer buffer(100);
    CHECK(buffer.has_room());
    CHECK(buffer.push(std::string(30, 'a')));
    CHECK(buffer.has_room());
    CHECK(buffer.push(std::string(30, 'b')));
    CHECK_FALSE(buffer.has_room());  // 60 of 100 unsent
    CHECK_FALSE(buffer.push(std::string(41, 'c')));
    CHECK(buffer.push(std::string(40, 'c')));  // fits exactly
    bool drained = false;
    CHECK(take_all(buffer, 7, &drained) ==
          std::string(30, 'a') + std::string(30, 'b') + std::string(40, 'c'));
    CHECK(drained);
    CHECK(buffer.has_room());
}

TEST_CASE("a batch bigger than the limit goes to a reader that has taken everything")
{
    StreamBuffer buffer(100);
    CHECK(buffer.push(std::string(250, 'x')));
    CHECK_FALSE(buffer.push("y"));
    CHECK(take_all(buffer, 64) == std::string(250, 'x'));
    CHECK(buffer.push("y"));
}

TEST_CASE("a refused batch keeps the buffer full until the reader has taken every byte")
{
    StreamBuffer buffer(100);
    CHECK(buffer.push(std::string(80, 'a')));
    char out[100];
    CHECK(buffer.take(out, 70).bytes == 70);  // the reader took most of it, then stopped
    CHECK(buffer.has_room());                 // 10 unsent: under half
    CHECK_FALSE(buffer.push(std::string(95, 'b')));
    CHECK_FALSE(buffer.has_room());  // was room, before: the same batch refused at every apply
    const StreamBuffer::Taken last = buffer.take(out, 100);
    CHECK(last.bytes == 10);
    CHECK(last.drained);
    CHECK(buffer.has_room());
    CHECK(buffer.push(std::string(95, 'b')));
}

TEST_CASE("a stream's last words go in whatever the limit")
{
    StreamBuffer buffer(10);
    CHECK(buffer.push("0123456789"));
    buffer.append("the end");
    CHECK(take_all(buffer, 3) == "0123456789the end");
}

TEST_CASE("a long stream's bytes come out in order while what was sent is dropped")
{
    StreamBuffer buffer(100);
    std::string pushed;
    std::string taken;
    char out[16];
    for (int i = 0; i < 2000; ++i) {
        const std::string batch(1 + i % 40, static_cast<char>('a' + i % 26));
        if (buffer.has_room() && buffer.push(batch)) pushed += batch;
        taken.append(out, buffer.take(out, sizeof out).bytes);
    }
    taken += take_all(buffer, 16);
    CHECK(pushed.size() > 10'000);
    CHECK(taken == pushed);
}

}  // namespace
}  // namespace voltlock::api
