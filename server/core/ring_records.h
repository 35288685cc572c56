// Prepares the follower's kernel acknowledged into its ring buffer, held until the log can take
// them (docs/electrode.md, "Ring records"). Records interleave across CPUs and with the datagrams;
// they go to the replica in op order, waiting at a gap for the record that fills it, except
// when the kernel is being drained (the replica then fetches whatever is missing). Shared by
// voltlockd's shell and the simulator's model of it.
#pragma once

#include <map>
#include <optional>

#include "core/message.h"

namespace voltlock {

class RingRecords {
public:
    void take(Prepare prepare)
    {
        const Op op = prepare.op;
        records_.insert_or_assign(op, std::move(prepare));
    }

    // The next record for a replica whose log ends at `log_op`, dropping records the log holds
    // already (by a datagram or a fetch); none when empty, or at a gap unless `past_gaps`.
    std::optional<Prepare> next(Op log_op, bool past_gaps)
    {
        while (!records_.empty()) {
            auto first = records_.begin();
            if (first->first <= log_op) {
                records_.erase(first);
                continue;
            }
            const Prepare& prepare = first->second;
            if (!past_gaps && prepare.op - prepare.entries.size() > log_op) return std::nullopt;
            Prepare next = std::move(first->second);
            records_.erase(first);
            return next;
        }
        return std::nullopt;
    }

    size_t size() const { return records_.size(); }
    void clear() { records_.clear(); }
    // Held records by op, for the simulator's invariant checks.
    const std::map<Op, Prepare>& held() const { return records_; }

private:
    std::map<Op, Prepare> records_;
};

}  // namespace voltlock
