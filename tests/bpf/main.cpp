// The bpf tier's entry point. Probes once whether the kernel tests can run here (root, a private
// network namespace, the bpf() syscall). If they cannot, every kernel test returns early, the
// reason is printed once, and the exit code is 77 so that ctest reports "skipped" (the pure
// tests, suite "pure", run regardless). If they can, a failure to load the programs is a test
// failure, never a skip: loading is the verifier's verdict on this kernel.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <sched.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "harness.h"

namespace {

std::string probe_kernel()
{
    if (geteuid() != 0)
        return "not running as root; the kernel tests load eBPF programs and need CAP_BPF, "
               "CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root, e.g. sudo ctest -L bpf)";
    // Everything that follows happens in a network namespace of our own: the clones and the
    // programs attached to lo never reach the host's interfaces.
    if (unshare(CLONE_NEWNET) != 0)
        return std::string("cannot create a private network namespace: ") + std::strerror(errno);
    const int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "vl_probe", 4, 4, 1, nullptr);
    if (fd < 0)
        return std::string("the bpf() syscall is unavailable: ") + std::strerror(errno);
    close(fd);
    return {};
}

int print_libbpf(enum libbpf_print_level level, const char* format, va_list args)
{
    if (level == LIBBPF_DEBUG) return 0;
    return std::vfprintf(stderr, format, args);
}

}  // namespace

int main(int argc, char** argv)
{
    libbpf_set_print(print_libbpf);
    const std::string reason = probe_kernel();
    voltlock::bpf_test::set_kernel_unavailable_reason(reason);

    doctest::Context context(argc, argv);
    const int rc = context.run();
    if (context.shouldExit()) return rc;

    const int skipped = voltlock::bpf_test::kernel_tests_skipped();
    if (skipped > 0) {
        std::printf("SKIPPED %d kernel test case(s): %s\n", skipped, reason.c_str());
        if (rc == 0) return 77;
    }
    return rc;
}
