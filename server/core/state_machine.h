// The replicated state machine, as the VR core sees it. Implementations must be deterministic:
// the same entries applied in the same order give the same results on every replica, with no
// clock, randomness or I/O (time comes in as the entry's leader timestamp).
#pragma once

#include "core/types.h"

namespace voltlock {

class StateMachine {
public:
    virtual ~StateMachine() = default;
    // Applies the entry committed at `op` and returns the result sent back to the client.
    virtual Bytes apply(Op op, const Entry& entry) = 0;
    // A hash of the whole state: replicas that applied the same entries report the same value.
    virtual uint64_t state_digest() const = 0;
};

}  // namespace voltlock
