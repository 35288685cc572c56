// The linearizability checker must catch what it claims to: each test breaks one property of an
// otherwise correct history.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/register_machine.h"
#include "linearizability.h"

namespace voltlock::sim {

namespace {

// Builds a history: client operations, and the cell's executions with the results a real
// register gives them in that order.
struct History {
    std::vector<ClientOp> ops;
    std::vector<Execution> executions;
    RegisterMachine machine;

    size_t invoke(ClientId client, RequestNumber number, Bytes payload, uint64_t at)
    {
        ops.push_back(ClientOp{.client_id = client,
                               .request_number = number,
                               .payload = std::move(payload),
                               .invoked_at = at});
        return ops.size() - 1;
    }
    void execute(size_t i)
    {
        const Op op = executions.size() + 1;
        const Entry entry{.client_id = ops[i].client_id,
                          .request_number = ops[i].request_number,
                          .payload = ops[i].payload};
        executions.push_back(Execution{op, entry, machine.apply(op, entry)});
    }
    void complete(size_t i, uint64_t at)
    {
        ops[i].completed_at = at;
        for (const Execution& e : executions)
            if (e.entry.client_id == ops[i].client_id &&
                e.entry.request_number == ops[i].request_number)
                ops[i].result = e.result;
    }
    std::string check() const { return check_linearizable(ops, executions).value_or(""); }
};

}  // namespace

TEST_CASE("linearizability: concurrent operations may execute in either order")
{
    History h;
    const size_t write = h.invoke(1, 1, RegisterMachine::write_op("a"), 1);
    const size_t read = h.invoke(2, 1, RegisterMachine::read_op(), 2);
    h.execute(read);  // invoked after the write, but they overlap: reading before it is fine
    h.execute(write);
    h.complete(write, 3);
    h.complete(read, 4);
    h.invoke(2, 2, RegisterMachine::read_op(), 5);  // pending and never executed: allowed
    CHECK(h.check().empty());
}

TEST_CASE("linearizability: a stale read breaks real-time order")
{
    History h;
    const size_t write = h.invoke(1, 1, RegisterMachine::write_op("a"), 1);
    const size_t read = h.invoke(2, 1, RegisterMachine::read_op(), 3);
    h.execute(read);
    h.execute(write);
    h.complete(write, 2);  // the write completed before the read was invoked
    h.complete(read, 4);
    CHECK(h.check().find("real-time order") != std::string::npos);
}

TEST_CASE("linearizability: an operation executed twice")
{
    History h;
    const size_t write = h.invoke(1, 1, RegisterMachine::write_op("a"), 1);
    h.execute(write);
    h.execute(write);
    CHECK(h.check().find("executed twice") != std::string::npos);
}

TEST_CASE("linearizability: a completed operation that was never executed")
{
    History h;
    const size_t write = h.invoke(1, 1, RegisterMachine::write_op("a"), 1);
    h.complete(write, 2);
    CHECK(h.check().find("never executed") != std::string::npos);
}

TEST_CASE("linearizability: the client accepted another result than the execution gave")
{
    History h;
    const size_t write = h.invoke(1, 1, RegisterMachine::write_op("a"), 1);
    h.execute(write);
    h.complete(write, 2);
    h.ops[write].result = RegisterMachine().apply(1, Entry{.payload = RegisterMachine::read_op()});
    CHECK(h.check().find("accepted a result other") != std::string::npos);
}

TEST_CASE("linearizability: results that replaying the history does not give")
{
    History h;
    const size_t first = h.invoke(1, 1, RegisterMachine::write_op("a"), 1);
    const size_t second = h.invoke(1, 2, RegisterMachine::write_op("b"), 3);
    h.execute(first);
    h.execute(second);
    std::swap(h.executions[0].result, h.executions[1].result);
    CHECK(h.check().find("replaying") != std::string::npos);
}

TEST_CASE("linearizability: an execution no client asked for")
{
    History h;
    const size_t write = h.invoke(1, 1, RegisterMachine::write_op("a"), 1);
    h.execute(write);
    h.executions[0].entry.request_number = 2;
    CHECK(h.check().find("no client invoked") != std::string::npos);

    h.executions[0].entry.request_number = 1;
    h.executions[0].entry.payload = RegisterMachine::write_op("forged");
    CHECK(h.check().find("payload the client did not send") != std::string::npos);
}

}  // namespace voltlock::sim
