// voltlockd: one replica of a Voltlock cell.
#include <sys/random.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
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
  --data-dir DIR         the replica's data directory (overrides the config's data_dir)
  --durability snapshot|sync
                         write snapshots only, or also persist every batch before
                         acknowledging it (overrides the config; docs/storage.md)
  --recover              this replica lost its state: rejoin through VR's recovery protocol
                         (only for a new, empty data directory: one with state restarts from it)
  --export-snapshot FILE copy the newest snapshot in the (stopped) replica's data directory to
                         FILE, and exit: a backup (docs/storage.md)
  --import-snapshot FILE write FILE's snapshot into the replica's new, empty data directory,
                         and exit: a restore, done on every replica before they start
  --help                 this text
)";

struct Flags {
    std::string config_path;
    std::string log_level;
    std::string electrode;
    std::string data_dir;
    std::string durability;
    std::string export_snapshot;
    std::string import_snapshot;
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
        } else if (arg == "--data-dir") {
            if (!value(flags.data_dir)) return false;
        } else if (arg == "--durability") {
            if (!value(flags.durability)) return false;
        } else if (arg.starts_with("--durability=")) {
            flags.durability = arg.substr(std::strlen("--durability="));
        } else if (arg == "--export-snapshot") {
            if (!value(flags.export_snapshot)) return false;
        } else if (arg == "--import-snapshot") {
            if (!value(flags.import_snapshot)) return false;
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
    if (!flags.data_dir.empty()) config.value().data_dir = flags.data_dir;
    if (!flags.durability.empty()) {
        auto durability = parse_durability(flags.durability);
        if (!durability.ok()) return Error{0, "--durability: " + durability.error().context};
        config.value().durability = durability.value();
    }
    if (auto valid = validate_config(config.value()); !valid.ok()) return valid.error();
    return config;
}

uint64_t recovery_nonce()
{
    uint64_t nonce = 0;
    while (getrandom(&nonce, sizeof nonce, 0) != sizeof nonce) {
    }
    return nonce;
}

CellIdentity identity_of(const DaemonConfig& config)
{
    return CellIdentity{.cluster_id = config.cluster_id,
                        .replica = config.replica,
                        .replica_count = static_cast<uint8_t>(config.replicas.size())};
}

Result<Ok> export_snapshot(const DaemonConfig& config, const std::string& file)
{
    if (config.data_dir.empty()) return Error{0, "--export-snapshot: the config has no data_dir"};
    auto storage = Storage::open(config.data_dir, identity_of(config));
    if (!storage.ok()) return storage.error();
    auto loaded = storage.value()->load();
    if (!loaded.ok()) return loaded.error();
    const StoredState& state = loaded.value();
    if (state.snapshot_refused) return Error{0, *state.snapshot_refused};
    if (!state.snapshot_op)
        return Error{0, "data directory " + config.data_dir + ": no snapshot written yet"};
    // Whole or not at all: written aside, synced, then renamed into place.
    const std::string partial = file + ".partial";
    FILE* out = std::fopen(partial.c_str(), "wb");
    if (!out) return os_error("--export-snapshot: cannot create " + partial);
    const bool written =
        std::fwrite(state.snapshot.data(), 1, state.snapshot.size(), out) == state.snapshot.size() &&
        std::fflush(out) == 0 && ::fsync(fileno(out)) == 0;
    const int error = errno;
    std::fclose(out);
    if (!written || std::rename(partial.c_str(), file.c_str()) != 0) {
        std::remove(partial.c_str());
        return Error{written ? errno : error, "--export-snapshot: cannot write " + file};
    }
    spdlog::info("exported the snapshot of op {} ({} bytes) from {} to {}", *state.snapshot_op,
                 state.snapshot.size(), config.data_dir, file);
    return Ok{};
}

Result<Ok> import_snapshot(const DaemonConfig& config, const std::string& file)
{
    if (config.data_dir.empty()) return Error{0, "--import-snapshot: the config has no data_dir"};
    std::ifstream in(file, std::ios::binary);
    if (!in) return os_error("--import-snapshot: cannot read " + file);
    const Bytes bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const auto snapshot = decode_replica_snapshot(bytes);
    if (!snapshot)
        return Error{0, "--import-snapshot: " + file + " is not a Voltlock snapshot, or it is "
                        "damaged (its checksum fails)"};
    auto storage = Storage::open(config.data_dir, identity_of(config));
    if (!storage.ok()) return storage.error();
    auto loaded = storage.value()->load();
    if (!loaded.ok()) return loaded.error();
    if (loaded.value().initialized)
        return Error{0, "--import-snapshot: data directory " + config.data_dir +
                            " already holds state; move it aside first"};
    if (auto written = storage.value()->write_snapshot(snapshot->op, bytes); !written.ok())
        return written.error();
    spdlog::info("imported the snapshot of op {} from {} into {}", snapshot->op, file,
                 config.data_dir);
    return Ok{};
}

// How this replica starts, from its data directory if it has one (docs/storage.md).
struct Startup {
    Start start;
    std::unique_ptr<Storage> storage;
    std::shared_ptr<const ServedSnapshot> restored;
    std::string description;
};

Result<Startup> open_data_directory(const DaemonConfig& config, bool recover)
{
    const Start without_state = recover ? Start{StartRecovering{.nonce = recovery_nonce()}}
                                        : Start{StartFresh{}};
    const std::string without_state_name = recover ? "recovering" : "fresh";
    if (config.data_dir.empty())
        return Startup{without_state, nullptr, {}, without_state_name + ", state in memory only"};
    auto storage = Storage::open(config.data_dir, identity_of(config));
    if (!storage.ok()) return storage.error();
    auto loaded = storage.value()->load();
    if (!loaded.ok()) return loaded.error();
    StoredState& state = loaded.value();
    if (!state.initialized)
        return Startup{without_state, std::move(storage.value()), {},
                       without_state_name + ", new data directory " + config.data_dir};
    std::optional<ReplicaSnapshot> snapshot;
    if (state.snapshot_op) {
        snapshot = decode_replica_snapshot(state.snapshot);
        if (!snapshot || snapshot->op != *state.snapshot_op)
            state.snapshot_refused = "data directory " + config.data_dir + ": the snapshot of op " +
                                     std::to_string(*state.snapshot_op) +
                                     " is not one this replica can read";
    }
    if (state.snapshot_refused) {
        // The damaged files would fail RocksDB's next compaction, and every write after it: the
        // directory is moved aside (for whoever wants to look) and a new one takes its place.
        storage.value().reset();
        const std::string aside = config.data_dir + ".refused-" + std::to_string(wall_clock_ms());
        if (std::rename(config.data_dir.c_str(), aside.c_str()) != 0)
            return os_error("data directory " + config.data_dir + ": cannot move it aside to " +
                            aside);
        spdlog::error("r{}: {}: refused; moved to {}, recovering from the other replicas instead",
                      config.replica, *state.snapshot_refused, aside);
        auto fresh = Storage::open(config.data_dir, identity_of(config));
        if (!fresh.ok()) return fresh.error();
        return Startup{StartRecovering{.nonce = recovery_nonce()}, std::move(fresh.value()), {},
                       "recovering: the stored snapshot was refused"};
    }
    const Op snapshot_op = state.snapshot_op.value_or(0);
    // Durability snapshot: the log after the snapshot is whole only as a graceful stop left it
    // (issue 11, scenario 3), and only for the start that finds it: taken, it is cleared, so
    // that a crash after this start does not pass it off as what this replica acknowledged.
    const bool clean_stop = state.clean_stop;
    if (state.clean_stop || (config.durability == Durability::snapshot && !state.log.empty())) {
        StorageBatch taken;
        taken.set_clean_stop(false);
        if (config.durability == Durability::snapshot) taken.replace_log_after(snapshot_op, {});
        if (auto written = storage.value()->write(taken, /*sync=*/true); !written.ok())
            return written.error();
    }
    if (config.durability == Durability::snapshot && !clean_stop) state.log.clear();
    // The view tells two histories apart where their op numbers meet (a whole-cell restart
    // from older snapshots runs the same op numbers again, in a later view).
    const View snapshot_view = snapshot ? snapshot->view : 0;
    std::string description = "restarting from " + config.data_dir + ": snapshot of op " +
                              std::to_string(snapshot_op) + " (view " +
                              std::to_string(snapshot_view) + "), " +
                              std::to_string(state.log.size()) + " log entries after it" +
                              (clean_stop ? " (stopped cleanly)" : "");
    std::shared_ptr<const ServedSnapshot> restored;
    if (state.snapshot_op) restored = make_served_snapshot(snapshot_op, state.snapshot);
    return Startup{StartRestored{.nonce = recovery_nonce(),
                                 .snapshot = std::move(state.snapshot),
                                 .log = std::move(state.log),
                                 .view = state.view,
                                 .last_normal_view = state.last_normal_view,
                                 .clean_stop = clean_stop},
                   std::move(storage.value()), std::move(restored), std::move(description)};
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

    if (!flags.export_snapshot.empty() || !flags.import_snapshot.empty()) {
        auto done = flags.export_snapshot.empty() ? import_snapshot(config, flags.import_snapshot)
                                                  : export_snapshot(config, flags.export_snapshot);
        return done.ok() ? 0 : fail(done.error());
    }

    auto signals = shutdown_signals();
    if (!signals.ok()) return fail(signals.error());
    auto loop = EventLoop::create();
    if (!loop.ok()) return fail(loop.error());

    auto startup = open_data_directory(config, flags.recover);
    if (!startup.ok()) return fail(startup.error());
    auto node = Node::create(config, std::move(startup.value().start), *loop.value(),
                             std::move(startup.value().storage),
                             std::move(startup.value().restored));
    if (!node.ok()) return fail(node.error());

    // The lock service's API, or only the admin endpoints when the cell replicates the register.
    auto* lock_machine = dynamic_cast<LockMachine*>(&node.value()->machine());
    api::HttpApi http(*loop.value(), *node.value(), lock_machine);
    if (auto started = http.start(config.self().ip, config.self().http_port); !started.ok())
        return fail(started.error());

    if (auto watched = loop.value()->watch(signals.value().get(), [&] {
            signalfd_siginfo info{};
            [[maybe_unused]] ssize_t got = ::read(signals.value().get(), &info, sizeof info);
            spdlog::info("r{}: signal {}: stopping", config.replica, info.ssi_signo);
            node.value()->stop();  // takes nothing more; what it acknowledged is durable
            loop.value()->stop();
        });
        !watched.ok())
        return fail(watched.error());

    spdlog::info("r{}: cluster {} replica {} of {}, udp {}:{}, http {}:{}, durability {}, {}",
                 config.replica, config.cluster_id, config.replica, config.replicas.size(),
                 config.self().ip, config.self().udp_port, config.self().ip,
                 config.self().http_port, durability_name(config.durability),
                 startup.value().description);
    loop.value()->run();
    http.stop();
    return 0;
}
