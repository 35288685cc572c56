// Whether a config fits the host it is about to run on: the replica's own address is one of
// this host's, the interface Electrode attaches to exists and carries that address, and the
// replica's ports are free to bind. `voltlockd --check-config FILE` checks all of it after the
// rules of the config itself (config_problems()); voltlockd at start, host_problems().
#pragma once

#include <vector>

#include "shell/config.h"

namespace voltlock {

// Why the replica cannot start here: its address is not this host's, or its ports are taken
// (bound and closed to see, so ask before the daemon binds them; the holder named by its pid).
// Empty if it can.
std::vector<ConfigProblem> host_problems(const DaemonConfig& config);
// The same for --check-config, but ports held by a voltlockd running this same replica (its
// config: the same cell, replica, address and ports) are not a problem, so that a running
// replica's config can be checked in place (new TLS or auth files, before the SIGHUP).
std::vector<ConfigProblem> host_problems_beside_itself(const DaemonConfig& config);

// What is wrong with the interface for Electrode: missing, or not carrying the replica's
// address. The daemon itself runs on without the fast paths then (and says why); --check-config,
// run by the systemd unit before each start, refuses it.
std::vector<ConfigProblem> interface_problems(const DaemonConfig& config);

}  // namespace voltlock
