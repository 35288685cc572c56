// A snapshot of the replica's own state, encoded off the event loop by a forked child.
//
// Encoding a large state takes long (0.7-1.4 s at 10^6 keys), and an event loop stopped that
// long costs the cell a view change: followers hear nothing from the leader for longer than
// their timeout, and each new leader stops in turn on its own snapshot (measured 2026-11-24: a
// cell of 600,000 keys ran through three views, about 3 s without a leader). fork() gives the
// child a copy-on-write view of this process's memory as it stands, so the child encodes the
// replica exactly as it was when forked while the loop goes on; the loop stops only for fork()
// itself, which copies page tables (Redis takes its snapshots the same way).
#pragma once

#include <sys/types.h>

#include <functional>

#include "core/types.h"
#include "shell/event_loop.h"
#include "shell/result.h"

namespace voltlock {

class ForkedEncoding {
public:
    // Forks a child that runs `encode`, writes its bytes to an anonymous memory file and exits.
    // In the child only the calling thread exists, and the locks other threads held may be
    // copied held: `encode` must take none but the allocator's (glibc's fork makes that one
    // safe); it must not log, and nothing else runs there.
    static Result<ForkedEncoding> start(const std::function<Bytes()>& encode);

    // Waits for the child; the bytes it encoded. Blocks until the child is done: off the loop.
    Result<Bytes> finish();

    ForkedEncoding(ForkedEncoding&& other) noexcept;
    ForkedEncoding& operator=(ForkedEncoding&& other) noexcept;
    ForkedEncoding(const ForkedEncoding&) = delete;
    ForkedEncoding& operator=(const ForkedEncoding&) = delete;
    ~ForkedEncoding() { abandon(); }

private:
    ForkedEncoding(pid_t child, FileDescriptor bytes) : child_(child), bytes_(std::move(bytes)) {}
    // A child not finished is killed and reaped (a daemon shutting down does not wait for it).
    void abandon();

    pid_t child_ = -1;  // -1: reaped
    FileDescriptor bytes_;  // the memory file the child writes
};

}  // namespace voltlock
