// The server's version (CMakeLists.txt's project version), for --version, /v1/status and
// /metrics, so operators can see which build each replica runs.
#pragma once

namespace voltlock {

const char* server_version();

}  // namespace voltlock
