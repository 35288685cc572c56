// voltlockd: one replica of a Voltlock cell.
#include <sys/random.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "api/http_api.h"
#include "core/lock_machine.h"
#include "shell/config.h"
#include "shell/event_loop.h"
#include "shell/node.h"

namespace {

using namespace voltlock;

constexpr const char* usage = R"(usage: voltlockd --config FILE [options]

  --config FILE          the replica's JSON configuration (see deploy/ and scripts/cell)
  --log-level LEVEL      trace, debug, info, warn or error (overrides the config)
  --electrode on|off     run VR's hot path in the kernel with eBPF, or not (overrides the config)
  --recover              this replica lost its state: rejoin through VR's recovery protocol
  --help                 this text
)";

struct Flags {
    std::string config_path;
    std::string log_level;
    std::string electrode;
    bool recover = false;
};

// Returns false (after printing why) if the command line is not usable.
bool parse_flags(int argc, char** argv, Flags& flags)
{
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        auto value = [&](std::string& out) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "voltlockd: %s needs a value\n%s", arg.c_str(), usage);
                return false;
            }
            out = argv[++i];
            return true;
        };
        if (arg == "--help") {
            std::fputs(usage, stdout);
            std::exit(0);
        } else if (arg == "--config") {
            if (!value(flags.config_path)) return false;
        } else if (arg == "--log-level") {
            if (!value(flags.log_level)) return false;
        } else if (arg == "--electrode") {
            if (!value(flags.electrode)) return false;
        } else if (arg.starts_with("--electrode=")) {
            flags.electrode = arg.substr(std::strlen("--electrode="));
        } else if (arg == "--recover") {
            flags.recover = true;
        } else {
            std::fprintf(stderr, "voltlockd: unknown argument '%s'\n%s", arg.c_str(), usage);
            return false;
        }
    }
    if (flags.config_path.empty()) {
        std::fprintf(stderr, "voltlockd: --config is required\n%s", usage);
        return false;
    }
    return true;
}

Result<DaemonConfig> configure(const Flags& flags)
{
    auto config = load_config(flags.config_path);
    if (!config.ok()) return config;
    if (!flags.log_level.empty()) config.value().log_level = flags.log_level;
    if (!flags.electrode.empty()) {
        if (flags.electrode != "on" && flags.electrode != "off")
            return Error{0, "--electrode: must be on or off, not '" + flags.electrode + "'"};
        config.value().electrode = flags.electrode == "on" ? ElectrodeMode::on : ElectrodeMode::off;
    }
    if (auto valid = validate_config(config.value()); !valid.ok()) return valid.error();
    return config;
}

// SIGINT and SIGTERM arrive as readable data on a signalfd, so shutdown runs on the loop.
Result<FileDescriptor> shutdown_signals()
{
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &signals, nullptr) != 0) return os_error("sigprocmask");
    FileDescriptor fd(::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC));
    if (fd.get() < 0) return os_error("signalfd");
    return fd;
}

uint64_t recovery_nonce()
{
    uint64_t nonce = 0;
    while (getrandom(&nonce, sizeof nonce, 0) != sizeof nonce) {
    }
    return nonce;
}

int fail(const Error& error)
{
    spdlog::error("{}", error.message());
    return 1;
}

}  // namespace

int main(int argc, char** argv)
{
    Flags flags;
    if (!parse_flags(argc, argv, flags)) return 2;
    auto config_result = configure(flags);
    if (!config_result.ok()) {
        std::fprintf(stderr, "voltlockd: %s\n", config_result.error().message().c_str());
        return 2;
    }
    const DaemonConfig& config = config_result.value();

    spdlog::set_default_logger(spdlog::stderr_color_mt("voltlockd"));
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    spdlog::set_level(spdlog::level::from_str(config.log_level));

    auto signals = shutdown_signals();
    if (!signals.ok()) return fail(signals.error());
    auto loop = EventLoop::create();
    if (!loop.ok()) return fail(loop.error());

    const Start start = flags.recover ? Start{StartRecovering{.nonce = recovery_nonce()}}
                                      : Start{StartFresh{}};
    auto node = Node::create(config, start, *loop.value());
    if (!node.ok()) return fail(node.error());

    // The lock service's API, or only the admin endpoints when the cell replicates the register.
    auto* lock_machine = dynamic_cast<LockMachine*>(&node.value()->machine());
    api::HttpApi http(*loop.value(), *node.value(), lock_machine);
    if (auto started = http.start(config.self().ip, config.self().http_port); !started.ok())
        return fail(started.error());

    if (auto watched = loop.value()->watch(signals.value().get(), [&] {
            signalfd_siginfo info{};
            [[maybe_unused]] ssize_t got = ::read(signals.value().get(), &info, sizeof info);
            spdlog::info("r{}: signal {}: shutting down", config.replica, info.ssi_signo);
            loop.value()->stop();
        });
        !watched.ok())
        return fail(watched.error());

    spdlog::info("r{}: cluster {} replica {} of {}, udp {}:{}, http {}:{}, {}", config.replica,
                 config.cluster_id, config.replica, config.replicas.size(), config.self().ip,
                 config.self().udp_port, config.self().ip, config.self().http_port,
                 flags.recover ? "recovering" : "fresh");
    loop.value()->run();
    http.stop();
    return 0;
}
