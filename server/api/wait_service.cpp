#include "api/wait_service.h"

#include <time.h>

#include <algorithm>
#include <chrono>

#include "api/leader_path.h"

namespace voltlock::api {

namespace {

using std::chrono::milliseconds;

constexpr size_t kEventsPerPass = 256;
constexpr uint64_t kHeartbeatMs = 10'000;

uint64_t steady_us()
{
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

uint64_t steady_ms() { return steady_us() / 1000; }

// This thread's CPU time: what a slice cost, whatever preemption or a SIGSTOP added to its wall
// time (which, times the multiple, would hold the watches back for as long again, fifty times).
uint64_t thread_cpu_us()
{
    timespec now{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<uint64_t>(now.tv_sec) * 1'000'000 +
           static_cast<uint64_t>(now.tv_nsec) / 1000;
}

std::string sse_error(const ApiError& error)
{
    return "event: error\ndata: " + json_text(error_body(error)) + "\n\n";
}

}  // namespace

WaitService::WaitService(EventLoop& loop, LockMachine& machine, Progress& progress,
                         uint32_t max_streams, Withdraw withdraw, Clock cell_clock,
                         Authorize authorize)
    : loop_(loop),
      machine_(machine),
      max_streams_(max_streams),
      withdraw_(std::move(withdraw)),
      cell_clock_(std::move(cell_clock)),
      authorize_(std::move(authorize)),
      index_(machine)
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
              .deadline_ms = deadline_ms,
              .next = after + 1,
              .filter = WatchFilter{.key = name, .prefix = false,
                                    .spaces = static_cast<uint8_t>(kind == WaitKind::lock
                                                                       ? EventSpace::lock
                                                                       : EventSpace::barrier)}};
    index_.add(id, wait.filter);
    if (check(id, wait)) {
        index_.remove(id);
        return;
    }
    waits_.emplace(id, std::move(wait));
    const int64_t remaining_ms = int64_t(deadline_ms) - int64_t(cell_clock_());
    loop_.after(milliseconds(std::max<int64_t>(remaining_ms, 0) + kWaitGraceMs),
                [this, id] {
                    const auto it = waits_.find(id);
                    if (it == waits_.end()) return;
                    it->second.call->fail(wait_unknown(it->second.kind));
                    erase_wait(it);
                });
    if (call->exchange) {
        call->exchange->on_hangup([this, id] { loop_.post([this, id] { hung_up(id); }); });
        if (call->exchange->hung_up()) hung_up(id);
    }
}

bool WaitService::check(uint64_t id, Wait& wait)
{
    if (wait.call->finished) return true;
    // Its client left: hung_up() is on its way to withdraw the wait; keep it until then.
    if (wait.call->gone()) return false;
    const std::optional<Revision> from = index_.next_match(id, wait.next);
    if (!from) {
        wait.next = std::max(wait.next, index_.unread());
        return false;
    }
    const WatchBatch batch = machine_.watch(*from, wait.filter, 0);
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

void WaitService::erase_wait(std::unordered_map<uint64_t, Wait>::iterator wait)
{
    index_.remove(wait->first);
    waits_.erase(wait);
}

void WaitService::hung_up(uint64_t id)
{
    const auto it = waits_.find(id);
    if (it == waits_.end()) return;
    Wait wait = std::move(it->second);
    erase_wait(it);
    // Nobody is waiting for this lock or barrier any more: take the session out of the lock's
    // line or the barrier, or the lock would be granted to a client that is gone, and the
    // barrier pass with one.
    if (wait.kind != WaitKind::barrier_leave) {
        waits_withdrawn_ += 1;
        withdraw_(wait.kind, wait.name, wait.session, wait.deadline_ms);
    }
}

void WaitService::watch(const CallPtr& call, const WatchFilter& filter, ValueEncoding encoding,
                        Revision from)
{
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.set_header("Cache-Control", "no-cache");
    head.set_header("X-Voltlock-Start-Revision", std::to_string(from));
    // HEAD is the headers alone: nothing to feed, so nothing is held for it.
    if (call->method == "HEAD") return call->answer(std::move(head));
    std::shared_ptr<Stream> stream = call->stream(std::move(head));
    if (!stream) return;
    stream->push("retry: 1000\n: watching from revision " + std::to_string(from) + "\n\n");
    // A reader that emptied a full buffer gets more at once, not at the next apply.
    stream->on_drained([this] {
        loop_.post([this] { on_progress(); });
    });
    const uint64_t id = next_id_++;
    index_.add(id, filter);
    Watch watch{.call = call,
                .stream = std::move(stream),
                .filter = filter,
                .encoding = encoding,
                .next = from};
    EventTexts texts;
    const Fed fed = feed(id, watch, texts);
    if (fed == Fed::over) {
        index_.remove(id);
        return;
    }
    watches_.emplace(id, std::move(watch));
    if (fed != Fed::caught_up) active_.insert(id);
    if (fed == Fed::more && !std::exchange(feeding_again_, true))
        loop_.post([this] { on_progress(); });
    // Freed as soon as its client leaves, not at the next heartbeat (up to kHeartbeatMs / 2
    // later): a flood of watches opened and closed at once would fill max_streams.
    call->exchange->on_hangup([this, id] { loop_.post([this, id] { erase_watch(id); }); });
    if (call->exchange->hung_up()) erase_watch(id);
}

void WaitService::authorize_watches()
{
    if (!authorize_) return;
    std::vector<uint64_t> refused;
    for (auto& [id, watch] : watches_) {
        if (const auto error = authorize_(*watch.call)) {
            watch.stream->end(sse_error(*error));
            refused.push_back(id);
        }
    }
    unauthorized_cut_ += refused.size();
    for (const uint64_t id : refused) erase_watch(id);
}

void WaitService::erase_watch(uint64_t id)
{
    index_.remove(id);
    active_.erase(id);
    watches_.erase(id);
}

const std::string& WaitService::EventTexts::of(const WatchEvent& event, ValueEncoding encoding)
{
    auto [it, added] = texts_.try_emplace({&event, encoding});
    if (added)
        it->second = std::string("event: ") + event_type_name(event.type) + "\ndata: " +
                     json_text(event_json(event, encoding)) + "\n";
    return it->second;
}

WaitService::Fed WaitService::feed(uint64_t id, Watch& watch, EventTexts& texts)
{
    if (watch.stream->finished()) return Fed::over;
    if (!watch.stream->has_room()) return wait_for_reader(watch);
    watch.full_since_ms = 0;
    const std::optional<Revision> from = index_.next_match(id, watch.next);
    if (!from) {
        watch.next = std::max(watch.next, index_.unread());
        return Fed::caught_up;
    }
    // Each event is written once the next is known: the id line, which marks a revision as
    // complete (a client resumes from the last id + 1), goes on the last event of a revision.
    std::string out;
    const WatchEvent* pending = nullptr;
    const auto write_pending = [&](bool last_of_revision) {
        if (last_of_revision) out += "id: " + std::to_string(pending->revision) + "\n";
        out += texts.of(*pending, watch.encoding);
        out += "\n";
    };
    const WatchBatch batch = machine_.visit_watched(
        *from, watch.filter, kEventsPerPass, [&](const WatchEvent& e) {
            if (pending) write_pending(pending->revision != e.revision);
            pending = &e;
        });
    if (batch.compacted) {
        // Fell behind the history while streaming: say so, and end the stream.
        watch.stream->end(sse_error(compacted(batch.oldest_revision, watch.next)));
        return Fed::over;
    }
    if (!pending) {  // nothing matched up to the newest revision
        watch.next = std::max(watch.next, batch.next_revision);
        return Fed::caught_up;
    }
    write_pending(true);
    // Refused when the batch does not fit the room left: built again once the reader has taken
    // all that is buffered.
    if (!watch.stream->push(out)) return wait_for_reader(watch);
    watch.next = batch.next_revision;
    return batch.next_revision <= batch.revision ? Fed::more : Fed::caught_up;
}

WaitService::Fed WaitService::wait_for_reader(Watch& watch)
{
    const uint64_t now = steady_ms();
    if (watch.full_since_ms == 0) watch.full_since_ms = now;
    if (now - watch.full_since_ms < kSlowReaderMs) return Fed::waiting;
    slow_readers_cut_ += 1;
    watch.stream->end(sse_error(ApiError{
        503, "slow_reader",
        "the watch fell too far behind (its http_stream_buffer_bytes stayed full for " +
            std::to_string(kSlowReaderMs / 1000) + " s): resume from start_revision " +
            std::to_string(watch.next) + " (the last id received + 1)",
        Json{{"resume_revision", watch.next}}}));
    return Fed::over;
}

void WaitService::on_progress()
{
    std::vector<uint64_t> woken_waits;  // checked after the update: a check may end a wait
    index_.update([&](uint64_t id) {
        if (!watches_.contains(id)) woken_waits.push_back(id);
        // Behind the cursor of the round under way: it needs a round of its own.
        else if (active_.insert(id).second && id <= feed_cursor_) woken_behind_cursor_ = true;
    });
    for (const uint64_t id : woken_waits) {
        const auto it = waits_.find(id);
        if (it != waits_.end() && check(id, it->second)) erase_wait(it);
    }
    feed_watches_when_due();
}

void WaitService::feed_watches_when_due()
{
    const uint64_t now = steady_us();
    // Under a millisecond to wait (a few watches): not worth a timer.
    if (now + 1000 >= next_feed_us_) return feed_watches();
    if (std::exchange(feed_timer_set_, true)) return;
    loop_.after(milliseconds((next_feed_us_ - now + 999) / 1000), [this] {
        feed_timer_set_ = false;
        feed_watches();
    });
}

void WaitService::feed_watches()
{
    feeding_again_ = false;
    // Nothing to send (the usual case): not even the clock reads below, whose thread CPU time
    // is a system call, on every apply.
    if (active_.empty()) return;
    const uint64_t started = steady_us();
    const uint64_t cpu_started = thread_cpu_us();
    EventTexts texts;
    bool more = false;
    auto it = active_.upper_bound(feed_cursor_);
    while (it != active_.end() && steady_us() - started < kFeedSliceUs) {
        const uint64_t id = feed_cursor_ = *it;
        Watch& watch = watches_.at(id);
        const Fed fed = feed(id, watch, texts);
        if (fed == Fed::over || fed == Fed::caught_up) {
            it = active_.erase(it);
            if (fed == Fed::over) erase_watch(id);
            continue;
        }
        more = more || fed == Fed::more;
        // A stream whose reader has not emptied its buffer waits for the reader, not for us.
        if (watch.full_since_ms == 0)
            round_headroom_ = std::min(round_headroom_, headroom(watch.next));
        ++it;
    }
    const bool round_over = it == active_.end();
    if (round_over) {
        feed_cursor_ = 0;
        more = more || std::exchange(woken_behind_cursor_, false);
        last_round_headroom_ = std::exchange(round_headroom_, 1.0);
    }
    next_feed_us_ = started + (thread_cpu_us() - cpu_started) * feed_cost_multiple();
    // The rest of the round, or of a watch far behind, a slice at a time between other work.
    if ((!round_over || more) && !std::exchange(feeding_again_, true))
        loop_.post([this] { feed_watches_when_due(); });
}

double WaitService::headroom(Revision next) const
{
    const Revision oldest = machine_.oldest_revision();
    const Revision span = machine_.revision() + 1 - oldest;
    if (span == 0 || next <= oldest) return 0;
    return std::min(1.0, double(next - oldest) / double(span));
}

uint64_t WaitService::feed_cost_multiple() const
{
    const double least = std::min(last_round_headroom_, round_headroom_);
    const double paced = std::clamp((least - kHeadroomUnpaced) /
                                        (kHeadroomPaced - kHeadroomUnpaced), 0.0, 1.0);
    return 1 + static_cast<uint64_t>(paced * double(kFeedCostMultiple - 1));
}

void WaitService::heartbeat()
{
    on_progress();  // also finds the readers that stopped reading while nothing was applied
    const uint64_t now = steady_ms();
    std::vector<uint64_t> finished;
    for (auto& [id, watch] : watches_) {
        if (watch.stream->finished()) finished.push_back(id);
        else if (now - watch.stream->last_push_ms() >= kHeartbeatMs)
            watch.stream->push(": heartbeat\n\n");
    }
    for (const uint64_t id : finished) erase_watch(id);
    authorize_watches();  // tokens that expired since
    loop_.after(milliseconds(kHeartbeatMs / 2), [this] { heartbeat(); });
}

}  // namespace voltlock::api
