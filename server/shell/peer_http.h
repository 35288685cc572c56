// The replicas' HTTP to each other (forwarding to the leader, snapshot transfer, the cell's
// status, readiness): a cpp-httplib client to a peer's API, over TLS when the config has it on,
// with this replica's certificate as its client certificate (mTLS) and the peer's certificate
// checked against tls_ca_file, its address included.
#pragma once

#include <httplib.h>

#include <memory>

#include "shell/config.h"

namespace voltlock {

std::unique_ptr<httplib::Client> peer_client(const DaemonConfig& config, const PeerAddress& peer);

}  // namespace voltlock
