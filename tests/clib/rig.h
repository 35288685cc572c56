// The cell the clib tests run against, as run_in_cell.py set it up: endpoints, and the rig
// (scripts/cell) to kill, restart and partition its replicas.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "voltlock.h"

namespace rig {

// VL_TEST_ENDPOINTS: the cell's HTTP endpoints, comma-separated.
std::string endpoints();
// A key or lock name no other test (nor the other build's run) uses: VL_TEST_RUN/what/N.
std::string unique(const std::string& what);
// Runs `scripts/cell COMMAND --name CELL ARGS`; fails the test if it does not exit 0.
void cell(const std::string& command, const std::string& args = "");
// The leader's index, as the cell's replicas report it (asking until one says).
int leader(vl_client* c);
// The pid of replica i's voltlockd, from the rig's record.
int pid(int replica);
// A client on the cell with the given command timeout, on every endpoint or those in `list`,
// with a bearer token if one is given.
vl_client* open_client(uint32_t command_timeout_ms = 10000, const std::string& list = "",
                       const std::string& token = "");
// VL_TEST_ADMIN_TOKEN: the admin's token of a cell with auth on (run_in_cell.py --auth).
std::string admin_token();
// True once condition holds, polling, or false after timeout.
bool eventually(std::chrono::milliseconds timeout, const std::function<bool()>& condition);
// Milliseconds since start.
long long elapsed_ms(std::chrono::steady_clock::time_point start);

}  // namespace rig
