// Whether a config fits the host it is about to run on: the replica's own address is one of
// this host's, the interface Electrode attaches to exists and carries that address, and the
// replica's ports are free to bind. voltlockd checks this at start, and `--check-config FILE`
// on its own, after the rules of the config itself (config_problems()).
#pragma once

#include <vector>

#include "shell/config.h"

namespace voltlock {

// Every problem found, in field order; empty if the replica can start here. Binds and closes
// the replica's ports to see that they are free, so run it before the daemon binds them.
std::vector<ConfigProblem> host_problems(const DaemonConfig& config);

}  // namespace voltlock
