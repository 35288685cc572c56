#include "shell/forked_encoding.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

namespace voltlock {

namespace {

// The child's exit codes.
constexpr int kEncoded = 0;
constexpr int kEncodeFailed = 1;  // `encode` threw (out of memory)
constexpr int kWriteFailed = 2;

[[noreturn]] void run_child(const std::function<Bytes()>& encode, int fd)
{
    // Dies with the daemon rather than outlive it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Background work: where cores are short, the event loop comes first.
    ::setpriority(PRIO_PROCESS, 0, 19);
    Bytes bytes;
    try {
        bytes = encode();
    } catch (...) {
        ::_exit(kEncodeFailed);
    }
    for (size_t done = 0; done < bytes.size();) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) ::_exit(kWriteFailed);
        done += static_cast<size_t>(n);
    }
    // Not exit(): this process's atexit handlers and static destructors belong to the parent.
    ::_exit(kEncoded);
}

std::string describe_exit(int status)
{
    if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
    switch (WEXITSTATUS(status)) {
    case kEncodeFailed: return "could not encode (out of memory?)";
    case kWriteFailed: return "could not write what it encoded to memory";
    default: return "exited with " + std::to_string(WEXITSTATUS(status));
    }
}

}  // namespace

Result<ForkedEncoding> ForkedEncoding::start(const std::function<Bytes()>& encode)
{
    FileDescriptor bytes(::memfd_create("voltlock-snapshot", MFD_CLOEXEC));
    if (bytes.get() < 0) return os_error("memfd_create for a snapshot");
    const pid_t child = ::fork();
    if (child < 0) return os_error("fork to encode a snapshot");
    if (child == 0) run_child(encode, bytes.get());
    return ForkedEncoding(child, std::move(bytes));
}

Result<Bytes> ForkedEncoding::finish()
{
    int status = 0;
    while (::waitpid(child_, &status, 0) < 0)
        if (errno != EINTR) return os_error("waiting for the snapshot's encoding child");
    child_ = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != kEncoded)
        return Error{0, "the child encoding the snapshot " + describe_exit(status)};
    struct stat file {};
    if (::fstat(bytes_.get(), &file) != 0) return os_error("the encoded snapshot's size");
    Bytes out(static_cast<size_t>(file.st_size), '\0');
    for (size_t done = 0; done < out.size();) {
        const ssize_t n = ::pread(bytes_.get(), out.data() + done, out.size() - done,
                                  static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return os_error("reading the encoded snapshot");
        done += static_cast<size_t>(n);
    }
    return out;
}

ForkedEncoding::ForkedEncoding(ForkedEncoding&& other) noexcept
    : child_(std::exchange(other.child_, -1)), bytes_(std::move(other.bytes_))
{
}

ForkedEncoding& ForkedEncoding::operator=(ForkedEncoding&& other) noexcept
{
    if (this != &other) {
        abandon();
        child_ = std::exchange(other.child_, -1);
        bytes_ = std::move(other.bytes_);
    }
    return *this;
}

void ForkedEncoding::abandon()
{
    if (child_ < 0) return;
    ::kill(child_, SIGKILL);
    while (::waitpid(child_, nullptr, 0) < 0 && errno == EINTR) {
    }
    child_ = -1;
}

}  // namespace voltlock
