#include "linearizability.h"

#include <limits>
#include <map>
#include <utility>

#include "core/register_machine.h"
#include "text.h"

namespace voltlock::sim {

namespace {

using ull = unsigned long long;
constexpr uint64_t never = std::numeric_limits<uint64_t>::max();

std::string name(const ClientOp& op)
{
    return strprintf("client %llu req %llu", ull(op.client_id), ull(op.request_number));
}

// For each execution, the client operation it carries out; nothing if an execution matches no
// invocation, executes one twice, or carries other bytes than the client sent.
std::optional<std::string> match_executions(const std::vector<ClientOp>& ops,
                                            const std::vector<Execution>& executions,
                                            std::vector<size_t>& op_of_execution,
                                            std::vector<std::optional<size_t>>& execution_of_op)
{
    std::map<std::pair<ClientId, RequestNumber>, size_t> op_by_request;
    for (size_t i = 0; i < ops.size(); i++)
        op_by_request[{ops[i].client_id, ops[i].request_number}] = i;

    execution_of_op.assign(ops.size(), std::nullopt);
    op_of_execution.clear();
    for (size_t e = 0; e < executions.size(); e++) {
        const Execution& execution = executions[e];
        const Entry& entry = execution.entry;
        const auto found = op_by_request.find({entry.client_id, entry.request_number});
        if (found == op_by_request.end())
            return strprintf("op %llu executes client %llu req %llu, which no client invoked",
                             ull(execution.op), ull(entry.client_id), ull(entry.request_number));
        const size_t i = found->second;
        if (entry.payload != ops[i].payload)
            return strprintf("op %llu executes %s with a payload the client did not send",
                             ull(execution.op), name(ops[i]).c_str());
        if (execution_of_op[i])
            return strprintf("%s executed twice: at op %llu and op %llu", name(ops[i]).c_str(),
                             ull(executions[*execution_of_op[i]].op), ull(execution.op));
        execution_of_op[i] = e;
        op_of_execution.push_back(i);
    }
    return std::nullopt;
}

std::optional<std::string> check_completed_were_executed(
    const std::vector<ClientOp>& ops, const std::vector<Execution>& executions,
    const std::vector<std::optional<size_t>>& execution_of_op)
{
    for (size_t i = 0; i < ops.size(); i++) {
        if (!ops[i].completed_at) continue;
        if (!execution_of_op[i])
            return name(ops[i]) + " completed but was never executed";
        const Execution& execution = executions[*execution_of_op[i]];
        if (ops[i].result != execution.result)
            return strprintf("%s: the client accepted a result other than op %llu's",
                             name(ops[i]).c_str(), ull(execution.op));
    }
    return std::nullopt;
}

std::optional<std::string> check_replay(const std::vector<Execution>& executions)
{
    RegisterMachine machine;
    for (const Execution& execution : executions) {
        if (machine.apply(execution.op, execution.entry) != execution.result)
            return strprintf("op %llu: replaying the executed history in op order gives another "
                             "result than the replicas gave",
                             ull(execution.op));
    }
    return std::nullopt;
}

// Real-time order, in O(n): walking the witness backwards, keep the earliest completion among
// the operations after the current one. If that completion precedes the current operation's
// invocation, a later operation in the witness finished before an earlier one started.
std::optional<std::string> check_real_time(const std::vector<ClientOp>& ops,
                                           const std::vector<Execution>& executions,
                                           const std::vector<size_t>& op_of_execution)
{
    uint64_t earliest_completion_after = never;
    size_t earliest_completer = 0;
    for (size_t e = executions.size(); e-- > 0;) {
        const ClientOp& op = ops[op_of_execution[e]];
        if (earliest_completion_after < op.invoked_at) {
            const ClientOp& later = ops[op_of_execution[earliest_completer]];
            return strprintf("real-time order: %s completed (t=%llu) before %s was invoked "
                             "(t=%llu), but executes later (op %llu > op %llu)",
                             name(later).c_str(), ull(earliest_completion_after),
                             name(op).c_str(), ull(op.invoked_at),
                             ull(executions[earliest_completer].op), ull(executions[e].op));
        }
        const uint64_t completed_at = op.completed_at.value_or(never);
        if (completed_at < earliest_completion_after) {
            earliest_completion_after = completed_at;
            earliest_completer = e;
        }
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::string> check_linearizable(const std::vector<ClientOp>& ops,
                                              const std::vector<Execution>& executions)
{
    std::vector<size_t> op_of_execution;
    std::vector<std::optional<size_t>> execution_of_op;
    if (auto failure = match_executions(ops, executions, op_of_execution, execution_of_op))
        return failure;
    if (auto failure = check_completed_were_executed(ops, executions, execution_of_op))
        return failure;
    if (auto failure = check_replay(executions)) return failure;
    return check_real_time(ops, executions, op_of_execution);
}

}  // namespace voltlock::sim
