// Long-held requests on the loop: lock and barrier waits, and watches (server-sent events).
// Each is a small record here plus its suspended exchange; none holds a thread. Both are
// served from this replica's applied history (LockMachine::watch) and looked at again whenever
// the applied revision moves (Progress).
//
// A wait looks for its outcome event after the result's revision; it answers 503 (retry the same
// request) if none came by its deadline plus kWaitGraceMs. A lock waiter whose client hangs up
// has its wait withdrawn through the log (`withdraw`), so the lock is not granted to nobody.
//
// A watch streams events from its start revision into a bounded buffer (http_stream_buffer_bytes),
// paced by its reader: while the buffer is more than half full, nothing more is added (the
// history keeps the events). A reader whose buffer stays full for kSlowReaderMs has fallen
// behind: it is cut with an `error` event, code `slow_reader`, whose details name the revision
// to resume from: the last `id` it received + 1, so nothing is lost.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "api/call.h"
#include "api/lock_service.h"
#include "core/lock_machine.h"
#include "shell/event_loop.h"

namespace voltlock::api {

inline constexpr uint64_t kSlowReaderMs = 5'000;

class WaitService {
public:
    using Withdraw = std::function<void(const std::string& lock, SessionId session)>;

    WaitService(EventLoop& loop, LockMachine& machine, Progress& progress, uint32_t max_streams,
                Withdraw withdraw);

    // The request is over the stream limit: answer it 503 now.
    bool full() const { return waits_.size() + watches_.size() >= max_streams_; }
    // Answers `call` with the outcome of `session`'s wait on `name`, found after `after`.
    void await_outcome(const CallPtr& call, WaitKind kind, const std::string& name,
                       SessionId session, Revision after, uint64_t deadline_ms);
    // Streams the events matching `filter` from `from` (checked: not compacted) to `call`.
    void watch(const CallPtr& call, const WatchFilter& filter, ValueEncoding encoding,
               Revision from);

    size_t waiters() const { return waits_.size(); }
    size_t watchers() const { return watches_.size(); }
    uint64_t slow_readers_cut() const { return slow_readers_cut_; }
    uint64_t waits_withdrawn() const { return waits_withdrawn_; }

private:
    struct Wait {
        CallPtr call;
        WaitKind kind;
        std::string name;
        SessionId session = 0;
        Revision next = 0;
        WatchFilter filter;
    };
    struct Watch {
        std::shared_ptr<Stream> stream;
        uint64_t full_since_ms = 0;  // 0: the buffer has room
        WatchFilter filter;
        ValueEncoding encoding = ValueEncoding::automatic;
        Revision next = 0;
    };

    void on_progress();
    // True when the wait is over (answered).
    bool check(Wait& wait);
    // Sends what is new; false when the watch is over (cut, compacted, or its client gone).
    // `more`: there is more history to send than one pass sends.
    bool feed(Watch& watch, bool& more);
    void hung_up(uint64_t id);
    void heartbeat();

    EventLoop& loop_;
    LockMachine& machine_;
    const uint32_t max_streams_;
    Withdraw withdraw_;
    uint64_t next_id_ = 1;
    std::unordered_map<uint64_t, Wait> waits_;
    std::unordered_map<uint64_t, Watch> watches_;
    bool feeding_again_ = false;  // a pass over the watches is posted
    uint64_t slow_readers_cut_ = 0;
    uint64_t waits_withdrawn_ = 0;
};

}  // namespace voltlock::api
