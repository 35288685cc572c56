#include "api/stream_buffer.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace voltlock::api {

bool StreamBuffer::has_room()
{
    full_ = refused_ || unsent() >= limit_ / 2;
    return !full_;
}

bool StreamBuffer::push(std::string_view bytes)
{
    if (unsent() > 0 && unsent() + bytes.size() > limit_) {
        refused_ = full_ = true;
        return false;
    }
    append(bytes);
    return true;
}

void StreamBuffer::append(std::string_view bytes)
{
    drop_sent();
    bytes_.append(bytes);
}

void StreamBuffer::drop_sent()
{
    if (sent_ > 0 && sent_ >= bytes_.size() / 2) {
        bytes_.erase(0, sent_);
        sent_ = 0;
    }
}

StreamBuffer::Taken StreamBuffer::take(char* out, size_t max)
{
    Taken taken{.bytes = std::min(max, unsent())};
    std::memcpy(out, bytes_.data() + sent_, taken.bytes);
    sent_ += taken.bytes;
    if (empty()) {
        refused_ = false;
        taken.drained = std::exchange(full_, false);
    }
    return taken;
}

}  // namespace voltlock::api
