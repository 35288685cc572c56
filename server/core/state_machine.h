// The replicated state machine, as the VR core sees it. Implementations must be deterministic:
// the same entries applied in the same order give the same results on every replica, with no
// clock, randomness or I/O (time comes in as the entry's leader timestamp).
#pragma once

#include <string_view>

#include "core/types.h"

namespace voltlock {

class StateMachine {
public:
    virtual ~StateMachine() = default;
    // Applies the entry committed at `op` and returns the result sent back to the client.
    virtual Bytes apply(Op op, const Entry& entry) = 0;
    // A hash of the whole state: replicas that applied the same entries report the same value.
    virtual uint64_t state_digest() const = 0;

    // The whole state as bytes (DESIGN.md §5): restore() of them on any replica gives a machine
    // with the same state_digest() that answers every later op the same way.
    virtual Bytes snapshot() const = 0;
    // Replaces the whole state by a snapshot(). Bytes that are not one (truncated, trailing,
    // out-of-range values, inconsistent references) return false and change nothing.
    virtual bool restore(std::string_view snapshot) = 0;
    // Back to the state of a new machine, before any op.
    virtual void reset() = 0;
    // The cell restarted from snapshots (durability "snapshot") and may have lost writes that
    // followed them: move every counter clients compare (revisions, fencing tokens) past any
    // value those writes could have used, so that none is ever handed out twice. Applied through
    // the log like an entry, so deterministic.
    virtual void skip_past_lost_writes() = 0;
    // The cell's time as of the last entry applied: the largest entry timestamp applied, or 0 for
    // a machine that keeps no time. A replica stamps its ops no earlier (shell/node.h).
    virtual uint64_t time_ms() const = 0;
};

}  // namespace voltlock
