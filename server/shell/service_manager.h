// Telling systemd how the daemon is doing: sd_notify(3)'s protocol, spoken here rather than
// through libsystemd (docs/operations.md says why). The service manager passes a unix datagram
// socket in NOTIFY_SOCKET; each datagram is newline-separated KEY=VALUE assignments:
// READY=1 once the replica serves HTTP (so `systemctl start` returns when it is up),
// WATCHDOG=1 every half of WATCHDOG_USEC from the event loop (a stuck loop gets restarted),
// STOPPING=1 when a shutdown begins. Started by anything else (no NOTIFY_SOCKET), it does nothing.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "shell/event_loop.h"
#include "shell/result.h"

namespace voltlock {

class ServiceManager {
public:
    // Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID, and unsets them so that children
    // (the snapshot encoder is a fork) never speak for this process.
    static Result<ServiceManager> from_environment();

    bool notifying() const { return !socket_path_.empty(); }
    // How often to ping the watchdog: half its timeout, as sd_watchdog_enabled(3) advises;
    // nullopt when no watchdog is set for this process.
    std::optional<std::chrono::microseconds> watchdog_interval() const
    {
        return watchdog_interval_;
    }

    // Sends one datagram of assignments ("READY=1\nSTATUS=..."); Ok without a socket.
    Result<Ok> notify(std::string_view assignments) const;

    // Arms a timer on `loop` that sends WATCHDOG=1 at watchdog_interval(); the returned
    // descriptor must outlive the loop's run. Without a watchdog it returns no timer.
    Result<FileDescriptor> start_watchdog(EventLoop& loop) const;

private:
    std::string socket_path_;  // "@name" is an abstract socket
    std::optional<std::chrono::microseconds> watchdog_interval_;
};

}  // namespace voltlock
