// Linearizability of a run, checked against the order the cell itself chose. The executed log is
// the witness: it is a total order of operations, so the run is linearizable if (Herlihy & Wing)
// every completed operation is in it exactly once, nothing is in it that no client asked for,
// replaying it through a fresh register gives the results the replicas gave (and the clients
// accepted), and it respects real time: an operation that completed before another was invoked
// comes before it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"

namespace voltlock::sim {

// An operation a client invoked. Times are logical: positions in one sequence of the cluster's
// events, so "completed before invoked" is exact even within a tick.
struct ClientOp {
    ClientId client_id = 0;
    RequestNumber request_number = 0;
    Bytes payload;
    uint64_t invoked_at = 0;
    std::optional<uint64_t> completed_at;
    Bytes result;  // what the client accepted, once completed
};

// An entry the cell executed (duplicates of executed requests are no-ops and are not here).
struct Execution {
    Op op = 0;
    Entry entry;
    Bytes result;
};

// `executions` in op order. Returns the first violation found, described, or nothing.
std::optional<std::string> check_linearizable(const std::vector<ClientOp>& ops,
                                              const std::vector<Execution>& executions);

}  // namespace voltlock::sim
