// Long-held requests on the loop: lock and barrier waits, and watches (server-sent events).
// Each is a small record here plus its suspended exchange; none holds a thread. Both are
// served from this replica's applied history (LockMachine::watch) and looked at again whenever
// the applied revision moves (Progress).
//
// A wait looks for its outcome event after the result's revision; it answers 503 (retry the same
// request) if none came by its deadline plus kWaitGraceMs. A lock waiter or a barrier enter whose
// client hangs up has its wait withdrawn through the log (`withdraw`), so the lock is not granted
// to nobody, and the barrier does not pass with a member that is gone.
//
// A watch streams events from its start revision into a bounded buffer (http_stream_buffer_bytes),
// paced by its reader: while the buffer is full (StreamBuffer: half of it unsent, or a batch
// that did not fit waiting for the reader to take all that is buffered), nothing more is added
// (the history keeps the events). A reader whose buffer stays full for kSlowReaderMs has fallen
// behind: it is cut with an `error` event, code `slow_reader`, whose details name the revision
// to resume from: the last `id` it received + 1, so nothing is lost.
//
// Feeding the watches costs the loop time in proportion to their number: each stream gets each
// event in a send of its own. So that thousands of watches cannot starve the requests (issue 12:
// 10,000 watches took the puts at that replica to 0.3%), the watches are fed in slices of at
// most kFeedSliceUs, each event is formatted once per slice however many streams send it, and a
// slice starts no sooner than a multiple of the previous one's CPU time after that one began:
// kFeedCostMultiple while every watch is well inside the history, falling to 1 (the watches fed
// back to back, between requests) as the one furthest behind nears its oldest end. With tens of
// watches a slice takes microseconds and every event goes out at once. With thousands, a burst
// of writes goes at full speed while each stream gets the events of many puts in one send, a
// little later; a sustained load the watches cannot follow slows the writes at this replica,
// rather than cutting the watches: nothing is lost.
//
// With auth on, a watch is authorized again whenever the replicated users, roles or tokens change
// and at each heartbeat (a token expires on its own): one whose token was revoked or expired,
// whose user was deleted, or whose roles no longer grant it, is cut with an `error` event (401
// `unauthenticated` or 403 `permission_denied`), as a new request would be refused.
//
// An applied event wakes only the waits and watches whose filter it matches (WatchIndex), and a
// watch with nothing to send is out of the rounds until one does: 10,000 watches or waits on as
// many keys cost each event about what one does.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "api/call.h"
#include "api/lock_service.h"
#include "api/watch_index.h"
#include "core/lock_machine.h"
#include "shell/event_loop.h"

namespace voltlock::api {

inline constexpr uint64_t kSlowReaderMs = 5'000;
inline constexpr uint64_t kFeedSliceUs = 1'000;
// The sends a slice causes run after it, in the HTTP server's pass, and cost several times the
// slice itself: with this multiple the watches take about a tenth of the loop when they are many.
inline constexpr uint64_t kFeedCostMultiple = 50;
// The share of the history ahead of the watch furthest behind (its headroom) above which the
// multiple is kFeedCostMultiple, and below which it is 1; in between it falls in proportion.
inline constexpr double kHeadroomPaced = 0.75;
inline constexpr double kHeadroomUnpaced = 0.25;

class WaitService {
public:
    // The wait's kind, lock or barrier, session and deadline (the machine's, which names this
    // wait): a lock wait or a barrier enter (a leave stays asked until its deadline).
    using Withdraw = std::function<void(WaitKind kind, const std::string& name, SessionId session,
                                        uint64_t deadline_ms)>;
    using Clock = std::function<uint64_t()>;
    // Whether a watch's client may still watch: nullopt, or the 401/403 (Access::check).
    using Authorize = std::function<std::optional<ApiError>(Call&)>;

    // `cell_clock`: what a wait's deadline, in the cell's time, is measured by
    // (Node::cell_clock_ms). `authorize`: null with auth off.
    WaitService(EventLoop& loop, LockMachine& machine, Progress& progress, uint32_t max_streams,
                Withdraw withdraw, Clock cell_clock, Authorize authorize);

    // The request is over the stream limit: answer it 503 now.
    bool full() const { return waits_.size() + watches_.size() >= max_streams_; }
    // Answers `call` with the outcome of `session`'s wait on `name`, found after `after`.
    void await_outcome(const CallPtr& call, WaitKind kind, const std::string& name,
                       SessionId session, Revision after, uint64_t deadline_ms);
    // Streams the events matching `filter` from `from` (checked: not compacted) to `call`.
    void watch(const CallPtr& call, const WatchFilter& filter, ValueEncoding encoding,
               Revision from);
    // Cuts the watches whose client may no longer watch (the auth tables changed).
    void authorize_watches();

    size_t waiters() const { return waits_.size(); }
    size_t watchers() const { return watches_.size(); }
    uint64_t slow_readers_cut() const { return slow_readers_cut_; }
    uint64_t unauthorized_cut() const { return unauthorized_cut_; }
    uint64_t waits_withdrawn() const { return waits_withdrawn_; }

private:
    struct Wait {
        CallPtr call;
        WaitKind kind;
        std::string name;
        SessionId session = 0;
        uint64_t deadline_ms = 0;
        Revision next = 0;
        WatchFilter filter;
    };
    struct Watch {
        CallPtr call;  // what its client was authorized by
        std::shared_ptr<Stream> stream;
        uint64_t full_since_ms = 0;  // 0: the buffer has room
        WatchFilter filter;
        ValueEncoding encoding = ValueEncoding::automatic;
        Revision next = 0;
    };

    // What feeding a watch left it as.
    enum class Fed {
        over,       // cut, compacted, or its client gone: drop it
        more,       // more history to send than one pass sends
        waiting,    // for its reader to make room
        caught_up,  // sent everything up to the index's newest update
    };

    // Each event's text in a stream ("event: ...\ndata: ...\n"), formatted once per slice.
    class EventTexts {
    public:
        const std::string& of(const WatchEvent& event, ValueEncoding encoding);

    private:
        std::map<std::pair<const WatchEvent*, ValueEncoding>, std::string> texts_;
    };

    void on_progress();
    // A slice of the watches now, or a timer for when the last slice's cost allows one.
    void feed_watches_when_due();
    void feed_watches();
    // True when the wait is over (answered).
    bool check(uint64_t id, Wait& wait);
    void erase_wait(std::unordered_map<uint64_t, Wait>::iterator wait);
    // Sends what is new.
    Fed feed(uint64_t id, Watch& watch, EventTexts& texts);
    // Its buffer is full: waiting, or cut once it has been full for kSlowReaderMs.
    Fed wait_for_reader(Watch& watch);
    void erase_watch(uint64_t id);
    // The share of the history still ahead of `next` (1: at the newest end, 0: at the oldest).
    double headroom(Revision next) const;
    uint64_t feed_cost_multiple() const;
    void hung_up(uint64_t id);
    void heartbeat();

    EventLoop& loop_;
    LockMachine& machine_;
    const uint32_t max_streams_;
    Withdraw withdraw_;
    Clock cell_clock_;
    Authorize authorize_;
    uint64_t next_id_ = 1;
    WatchIndex index_;  // the filters of every wait and watch, by id
    std::unordered_map<uint64_t, Wait> waits_;
    std::unordered_map<uint64_t, Watch> watches_;
    // The watches with something to send or waiting for room, by id: a round of slices goes
    // through them in order.
    std::set<uint64_t> active_;
    uint64_t feed_cursor_ = 0;  // the last watch fed in the round under way (0: none)
    bool woken_behind_cursor_ = false;  // a watch the round under way has passed needs feeding
    bool feeding_again_ = false;         // a slice is posted
    bool feed_timer_set_ = false;
    uint64_t next_feed_us_ = 0;  // steady clock: the earliest start of the next slice
    // The least headroom of the watches fed in the last round, and so far in this one.
    double last_round_headroom_ = 1;
    double round_headroom_ = 1;
    uint64_t slow_readers_cut_ = 0;
    uint64_t unauthorized_cut_ = 0;
    uint64_t waits_withdrawn_ = 0;
};

}  // namespace voltlock::api
