#include "shell/version.h"

namespace voltlock {

// VOLTLOCK_VERSION is defined for this file alone (CMakeLists.txt): a new version rebuilds it, not
// every file that shows the version.
const char* server_version() { return VOLTLOCK_VERSION; }

}  // namespace voltlock
