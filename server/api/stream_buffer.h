// The unsent bytes of one streamed answer (a watch's server-sent events), bounded by
// http_stream_buffer_bytes. Pure: Stream (http_server.h) adds the lock between the replica's
// loop, which offers batches, and the I/O thread, which takes bytes as the client reads them.
//
// Full: half the limit is unsent, or a batch was refused since the buffer was last empty. A
// refused batch waits for the reader to take every byte. Were it offered again whenever the
// reader took a little, then for a reader that stopped with a few bytes unsent it would be
// refused for ever while the buffer looked as if it had room: never full, so never cut as a
// slow reader (WaitService), and the batch built again at every apply.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace voltlock::api {

class StreamBuffer {
public:
    explicit StreamBuffer(size_t limit) : limit_(limit) {}

    // Whether a batch may be offered; marks the buffer full when not.
    bool has_room();
    // Adds `bytes`, or refuses them (false, nothing added, the buffer full) when they would take
    // the unsent bytes over the limit. A batch bigger than the limit still goes to a reader that
    // has taken everything.
    bool push(std::string_view bytes);
    // Adds `bytes` whatever the limit (a stream's last words).
    void append(std::string_view bytes);

    struct Taken {
        size_t bytes = 0;
        bool drained = false;  // this take emptied a full buffer: batches are welcome again
    };
    // Copies out up to `max` unsent bytes.
    Taken take(char* out, size_t max);
    bool empty() const { return sent_ == bytes_.size(); }

private:
    size_t unsent() const { return bytes_.size() - sent_; }
    // Drops what was sent once it is at least half the string, so a long stream's string does
    // not grow with all it ever sent.
    void drop_sent();

    const size_t limit_;
    std::string bytes_;
    size_t sent_ = 0;       // bytes of bytes_ already taken
    bool refused_ = false;  // a batch did not fit since the buffer was last empty
    bool full_ = false;     // has_room() said no: take() says drained once it is empty
};

}  // namespace voltlock::api
