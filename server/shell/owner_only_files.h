// Files created while an OwnerOnlyFiles lives are for their owner only (mode 0600 or stricter),
// whatever the umask: backups hold every key and the token hashes. The umask makes it so from
// the first byte written, which a chmod after writing would not. Header-only, for lockctl too
// (cli/CMakeLists.txt), which has no part of the server but this.
//
// The umask is the process's: hold one only while no other thread creates files.
#pragma once

#include <sys/stat.h>

namespace voltlock {

class OwnerOnlyFiles {
public:
    OwnerOnlyFiles() : umask_before_(::umask(077)) {}
    ~OwnerOnlyFiles() { ::umask(umask_before_); }
    OwnerOnlyFiles(const OwnerOnlyFiles&) = delete;
    OwnerOnlyFiles& operator=(const OwnerOnlyFiles&) = delete;

private:
    const mode_t umask_before_;
};

}  // namespace voltlock
