#include "api/wait_service.h"

#include <chrono>

#include "api/leader_path.h"
#include "shell/node.h"

namespace voltlock::api {

namespace {

using std::chrono::milliseconds;

constexpr size_t kEventsPerPass = 256;
constexpr uint64_t kHeartbeatMs = 10'000;

uint64_t steady_ms()
{
    return static_cast<uint64_t>(std::chrono::duration_cast<milliseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

std::string sse_events(const WatchBatch& batch, ValueEncoding encoding)
{
    std::string out;
    for (size_t i = 0; i < batch.events.size(); i++) {
        const WatchEvent& e = batch.events[i];
        // The id marks a revision as complete: a client resumes from the last id + 1.
        const bool last_of_revision =
            i + 1 == batch.events.size() || batch.events[i + 1].revision != e.revision;
        if (last_of_revision) out += "id: " + std::to_string(e.revision) + "\n";
        out += std::string("event: ") + event_type_name(e.type) + "\n";
        out += "data: " + json_text(event_json(e, encoding)) + "\n\n";
    }
    return out;
}

std::string sse_error(const ApiError& error)
{
    return "event: error\ndata: " + json_text(error_body(error)) + "\n\n";
}

}  // namespace

WaitService::WaitService(EventLoop& loop, LockMachine& machine, Progress& progress,
                         uint32_t max_streams, Withdraw withdraw)
    : loop_(loop), machine_(machine), max_streams_(max_streams), withdraw_(std::move(withdraw))
{
    progress.on_change([this](Revision) { on_progress(); });
    loop_.after(milliseconds(kHeartbeatMs / 2), [this] { heartbeat(); });
}

void WaitService::await_outcome(const CallPtr& call, WaitKind kind, const std::string& name,
                                SessionId session, Revision after, uint64_t deadline_ms)
{
    const uint64_t id = next_id_++;
    Wait wait{.call = call,
              .kind = kind,
              .name = name,
              .session = session,
              .next = after + 1,
              .filter = WatchFilter{.key = name, .prefix = false,
                                    .spaces = static_cast<uint8_t>(kind == WaitKind::lock
                                                                       ? EventSpace::lock
                                                                       : EventSpace::barrier)}};
    if (check(wait)) return;
    waits_.emplace(id, std::move(wait));
    const int64_t remaining_ms = int64_t(deadline_ms) - int64_t(wall_clock_ms());
    loop_.after(milliseconds(std::max<int64_t>(remaining_ms, 0) + kWaitGraceMs),
                [this, id] {
                    const auto it = waits_.find(id);
                    if (it == waits_.end()) return;
                    it->second.call->fail(wait_unknown(it->second.kind));
                    waits_.erase(it);
                });
    if (call->exchange) {
        call->exchange->on_hangup([this, id] { loop_.post([this, id] { hung_up(id); }); });
        if (call->exchange->hung_up()) hung_up(id);
    }
}

bool WaitService::check(Wait& wait)
{
    if (wait.call->finished) return true;
    // Its client left: hung_up() is on its way to withdraw the wait; keep it until then.
    if (wait.call->gone()) return false;
    const WatchBatch batch = machine_.watch(wait.next, wait.filter, 0);
    // Fell out of the history (a very busy cell): the same request again finds out.
    if (batch.compacted) {
        wait.call->fail(wait_unknown(wait.kind));
        return true;
    }
    for (const WatchEvent& e : batch.events)
        if (auto outcome = wait_outcome(wait.kind, wait.session, e)) {
            if (auto* error = std::get_if<ApiError>(&*outcome)) wait.call->fail(*error);
            else wait.call->answer_json(200, std::get<Json>(*outcome));
            return true;
        }
    wait.next = batch.next_revision;
    return false;
}

void WaitService::hung_up(uint64_t id)
{
    const auto it = waits_.find(id);
    if (it == waits_.end()) return;
    Wait wait = std::move(it->second);
    waits_.erase(it);
    // Nobody is waiting for this lock any more: take the session out of its line, or the lock
    // would be granted to a client that is gone.
    if (wait.kind == WaitKind::lock) {
        waits_withdrawn_ += 1;
        withdraw_(wait.name, wait.session);
    }
}

void WaitService::watch(const CallPtr& call, const WatchFilter& filter, ValueEncoding encoding,
                        Revision from)
{
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.set_header("Cache-Control", "no-cache");
    head.set_header("X-Voltlock-Start-Revision", std::to_string(from));
    std::shared_ptr<Stream> stream = call->stream(std::move(head));
    if (!stream) return;
    stream->push("retry: 1000\n: watching from revision " + std::to_string(from) + "\n\n");
    // A reader that emptied a full buffer gets more at once, not at the next apply.
    stream->on_drained([this] {
        loop_.post([this] { on_progress(); });
    });
    Watch watch{.stream = std::move(stream), .filter = filter, .encoding = encoding, .next = from};
    bool more = false;
    if (!feed(watch, more)) return;
    watches_.emplace(next_id_++, std::move(watch));
    if (more && !std::exchange(feeding_again_, true)) loop_.post([this] { on_progress(); });
}

bool WaitService::feed(Watch& watch, bool& more)
{
    if (watch.stream->finished()) return false;
    if (!watch.stream->has_room()) {
        const uint64_t now = steady_ms();
        if (watch.full_since_ms == 0) watch.full_since_ms = now;
        if (now - watch.full_since_ms < kSlowReaderMs) return true;
        slow_readers_cut_ += 1;
        watch.stream->end(sse_error(ApiError{
            503, "slow_reader",
            "the watch fell too far behind (its http_stream_buffer_bytes stayed full for " +
                std::to_string(kSlowReaderMs / 1000) + " s): resume from start_revision " +
                std::to_string(watch.next) + " (the last id received + 1)",
            Json{{"resume_revision", watch.next}}}));
        return false;
    }
    watch.full_since_ms = 0;
    const WatchBatch batch = machine_.watch(watch.next, watch.filter, kEventsPerPass);
    if (batch.compacted) {
        // Fell behind the history while streaming: say so, and end the stream.
        watch.stream->end(sse_error(compacted(batch.oldest_revision, watch.next)));
        return false;
    }
    if (batch.events.empty()) {
        watch.next = std::max(watch.next, batch.next_revision);
        return true;
    }
    // Refused only when the batch does not fit the free half: it is sent again next time.
    if (!watch.stream->push(sse_events(batch, watch.encoding))) return true;
    watch.next = batch.next_revision;
    more = more || batch.next_revision <= batch.revision;
    return true;
}

void WaitService::on_progress()
{
    feeding_again_ = false;
    for (auto it = waits_.begin(); it != waits_.end();)
        it = check(it->second) ? waits_.erase(it) : std::next(it);
    bool more = false;
    for (auto it = watches_.begin(); it != watches_.end();)
        it = feed(it->second, more) ? std::next(it) : watches_.erase(it);
    // A watch far behind gets the rest a pass at a time, between other work on the loop.
    if (more && !std::exchange(feeding_again_, true)) loop_.post([this] { on_progress(); });
}

void WaitService::heartbeat()
{
    on_progress();  // also finds the readers that stopped reading while nothing was applied
    const uint64_t now = steady_ms();
    for (auto it = watches_.begin(); it != watches_.end();) {
        Watch& watch = it->second;
        if (watch.stream->finished()) {
            it = watches_.erase(it);
            continue;
        }
        if (now - watch.stream->last_push_ms() >= kHeartbeatMs)
            watch.stream->push(": heartbeat\n\n");
        ++it;
    }
    loop_.after(milliseconds(kHeartbeatMs / 2), [this] { heartbeat(); });
}

}  // namespace voltlock::api
