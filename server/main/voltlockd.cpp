// voltlockd: one replica of a Voltlock cell.
#include <sys/random.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "api/http_api.h"
#include "core/lock_machine.h"
#include "shell/cell_init.h"
#include "shell/config.h"
#include "shell/event_loop.h"
#include "shell/host_check.h"
#include "shell/node.h"
#include "shell/owner_only_files.h"
#include "shell/peer_http.h"
#include "shell/service_manager.h"
#include "shell/auth.h"
#include "shell/version.h"
#include "shell/tls.h"

namespace {

using namespace voltlock;

constexpr const char* usage = R"(Usage: voltlockd --config FILE [options]
  or:  voltlockd --check-config FILE [options]
  or:  voltlockd init-cell --replicas 3|5|7 --hosts H1,H2,... --out DIR [options]

voltlockd is one replica of a Voltlock cell: a lock and configuration service whose 3, 5 or 7
replicas agree by Viewstamped Replication over UDP and serve a JSON/HTTP API. Under systemd
each replica runs as voltlockd@NAME, reading /etc/voltlock/NAME.json.

Options:
  --config FILE          the replica's JSON configuration (written by init-cell)
  --log-level LEVEL      trace, debug, info, warn or error (overrides the config)
  --electrode on|off     run VR's hot path in the kernel with eBPF, or not (overrides the config)
  --data-dir DIR         the replica's data directory (overrides the config's data_dir)
  --durability snapshot|sync
                         write snapshots only, or also persist every batch before
                         acknowledging it (overrides the config; docs/storage.md)
  --recover              this replica lost its state: rejoin through VR's recovery protocol,
                         never as a new cell's (only for a new, empty data directory: one with
                         state restarts from it; without it, a replica with no state starts a
                         new cell only if every other replica's answer shows that the cell
                         committed nothing)
  --export-snapshot FILE copy the newest snapshot in the (stopped) replica's data directory to
                         FILE (mode 0600), and exit: a backup (docs/storage.md)
  --import-snapshot FILE write FILE's snapshot into the replica's new, empty data directory,
                         and exit: a restore, done on every replica before they start
  --check-config FILE    check FILE, with the options above that override it, and whether
                         it can run on this host (its address is here, its interface exists,
                         its ports are free); print one line per problem naming the field and
                         the fix, and exit. Pass the options the replica runs with: the unit's
                         ExecStartPre passes ExecStart's
  --help                 this text
  --version              the version

Commands:
  init-cell              write the configs of a new cell, one per host, and print what to
                         copy where (voltlockd init-cell --help lists its options)

Configuration:
  A JSON object: cluster_id, replica (this one's index in replicas), replicas (a list of
  {"ip", "udp_port", "http_port"}), and optionally:
  - interface, electrode ("on"/"off"), fast_paths (docs/electrode.md);
  - durability ("snapshot"/"sync"), data_dir, snapshot_every_ops, snapshot_every_seconds
    (docs/storage.md);
  - quota_bytes, log_level, machine, tick_ms, heartbeat_ticks, view_change_timeout_ticks,
    retransmit_ticks, pipeline_ops, max_message_bytes;
  - http_max_connections, http_max_connections_per_address, http_max_streams,
    http_listen_backlog, http_header_timeout_ms, http_body_timeout_ms, http_idle_timeout_ms,
    http_stream_buffer_bytes, http_forward_threads, http_io_threads (docs/frontend.md);
  - replication_key_file (the cell's replication key, mode 0600, read beside the config if
    relative; without it replication is unauthenticated: docs/security.md);
  - tls_cert_file and tls_key_file (TLS on the HTTP API and between replicas), tls_ca_file
    (the CA peers' certificates are checked against), tls_client_ca_file (set, clients must
    present a certificate it signed) (docs/security-tls.md);
  - auth_token_file (users, roles and token hashes, mode 0600; set, auth is on) and
    auth_roles_file (roles' permissions) (docs/security-auth.md).

Signals:
  SIGTERM and SIGINT stop the replica; the others carry on without it.
  SIGHUP (the unit's ExecReload) reads tls_cert_file, tls_key_file and tls_client_ca_file
  again, and auth_token_file and auth_roles_file; files that do not load are logged and the
  ones in use stay.

Systemd:
  With NOTIFY_SOCKET set (Type=notify) it sends READY=1 once its HTTP API answers, WATCHDOG=1
  every half of WATCHDOG_USEC from its event loop, and STOPPING=1 when it stops.

Exit status:
  0 success; 1 a failure while running, or problems found by --check-config; 2 a command line
  or configuration that cannot start (each problem printed).

Files:
  /etc/voltlock/NAME.json       a replica's configuration under systemd
  /var/lib/voltlock/NAME        its data directory (the unit's StateDirectory)

See docs/operations.md (installed in /usr/share/doc/voltlock) for running a cell.
)";

struct Flags {
    std::string config_path;
    std::string log_level;
    std::string electrode;
    std::string data_dir;
    std::string durability;
    std::string export_snapshot;
    std::string import_snapshot;
    std::string check_config;
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
        } else if (arg == "--version") {
            std::printf("voltlockd %s\n", server_version());
            std::exit(0);
        } else if (arg == "--check-config") {
            if (!value(flags.check_config)) return false;
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
    if (flags.config_path.empty() && flags.check_config.empty()) {
        std::fprintf(stderr, "voltlockd: --config is required\n%s", usage);
        return false;
    }
    return true;
}

// The fields of the file at `path`, each on its own; a file that is not a config says which.
Result<DaemonConfig> read_config(const std::string& path)
{
    auto text = read_config_text(path);
    if (!text.ok()) return text.error();  // it names the file
    auto config = parse_config_fields(text.value());
    if (!config.ok()) return Error{0, path + ": " + config.error().context};
    return config;
}

// The flags that override fields. --check-config applies them too, so that it checks the
// configuration the replica runs with (sync durability is fine with --data-dir, say).
Result<Ok> apply_overrides(const Flags& flags, DaemonConfig& config)
{
    if (!flags.log_level.empty()) config.log_level = flags.log_level;
    if (!flags.electrode.empty()) {
        if (flags.electrode != "on" && flags.electrode != "off")
            return Error{0, "--electrode: must be on or off, not '" + flags.electrode + "'"};
        config.electrode = flags.electrode == "on" ? ElectrodeMode::on : ElectrodeMode::off;
    }
    if (!flags.data_dir.empty()) config.data_dir = flags.data_dir;
    if (!flags.durability.empty()) {
        auto durability = parse_durability(flags.durability);
        if (!durability.ok()) return Error{0, "--durability: " + durability.error().context};
        config.durability = durability.value();
    }
    return Ok{};
}

// The config file with the flags' overrides; its cross-field rules are left to problems().
Result<DaemonConfig> configure(const Flags& flags)
{
    auto config = read_config(flags.config_path);
    if (!config.ok()) return config;
    if (auto loaded = load_replication_key(config.value(), flags.config_path); !loaded.ok())
        return Error{loaded.error().code, flags.config_path + ": " + loaded.error().context};
    if (auto applied = apply_overrides(flags, config.value()); !applied.ok())
        return applied.error();
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
    const OwnerOnlyFiles owner_only;
    const std::string partial = file + ".partial";
    std::remove(partial.c_str());  // a failed run's, of any mode: created anew under the umask
    FILE* out = std::fopen(partial.c_str(), "wb");
    if (!out) return os_error("--export-snapshot: cannot create " + partial);
    const bool written = std::fwrite(state.snapshot.data(), 1, state.snapshot.size(), out) ==
                             state.snapshot.size() &&
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
    const Start without_state =
        StartRecovering{.nonce = recovery_nonce(), .may_bootstrap = !recover};
    const std::string without_state_name = recover ? "recovering" : "new cell or recovering";
    if (config.data_dir.empty())
        return Startup{without_state, nullptr, {}, without_state_name + ", state in memory only"};
    auto storage = Storage::open(config.data_dir, identity_of(config));
    if (!storage.ok()) return storage.error();
    auto loaded = storage.value()->load();
    if (!loaded.ok()) return loaded.error();
    StoredState& state = loaded.value();
    // New, or its replica never held the cell's state (it waited to recover and was stopped).
    if (state.holds_nothing())
        return Startup{without_state, std::move(storage.value()), {},
                       without_state_name + ", nothing yet in data directory " + config.data_dir};
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
        const std::string aside =
            config.data_dir + ".refused-" + std::to_string(steady_wall_clock_ms());
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

// "<4>" for a warning: the priority prefix of sd-daemon(3), which journald reads off each line.
class JournalPriority : public spdlog::custom_flag_formatter {
public:
    void format(const spdlog::details::log_msg& message, const std::tm&,
                spdlog::memory_buf_t& out) override
    {
        // trace, debug, info, warn, err, critical, off -> syslog's debug .. crit.
        static constexpr std::string_view prefixes[] = {"<7>", "<7>", "<6>", "<4>",
                                                        "<3>", "<2>", "<6>"};
        const std::string_view prefix = prefixes[message.level];
        out.append(prefix.data(), prefix.data() + prefix.size());
    }
    std::unique_ptr<custom_flag_formatter> clone() const override
    {
        return std::make_unique<JournalPriority>();
    }
};

enum class LogReader { terminal, journal };

// On a terminal: a timestamp and the level in colour. Into the journal (systemd sets
// JOURNAL_STREAM): no timestamp, as journald stamps each line, and the level as its priority,
// so that `journalctl -u voltlockd@r0 -p warning` shows warnings and worse.
void log_for(LogReader reader)
{
    if (reader == LogReader::terminal) {
        spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
        return;
    }
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JournalPriority>('*').set_pattern("%*%l %v");
    spdlog::set_formatter(std::move(formatter));
}

// SIGINT and SIGTERM (stop) and SIGHUP (reload the TLS files) arrive as readable data on a
// signalfd, so they are handled on the loop.
Result<FileDescriptor> handled_signals()
{
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
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

// What a line of error output starts with: the journal's error priority under systemd
// (log_for() does the same for the log).
const char* error_line_prefix() { return std::getenv("JOURNAL_STREAM") ? "<3>" : ""; }

// Every rule `config` breaks, then what else the checks `also` find.
std::vector<ConfigProblem> problems(
    const DaemonConfig& config,
    std::initializer_list<std::vector<ConfigProblem> (*)(const DaemonConfig&)> also)
{
    auto found = config_problems(config);
    for (const auto check : also)
        for (auto& problem : check(config)) found.push_back(std::move(problem));
    return found;
}

// --check-config: every problem of the file, with the flags' overrides, and of running it on
// this host, one line each.
int check_config(const Flags& flags)
{
    const std::string& path = flags.check_config;
    auto config = read_config(path);
    if (!config.ok()) {
        std::printf("%s%s\n", error_line_prefix(), config.error().message().c_str());
        return 1;
    }
    if (auto applied = apply_overrides(flags, config.value()); !applied.ok()) {
        std::fprintf(stderr, "voltlockd: %s\n", applied.error().message().c_str());
        return 2;
    }
    auto found = problems(config.value(), {host_problems_beside_itself, interface_problems,
                                           tls_problems, auth_problems});
    if (auto loaded = load_replication_key(config.value(), path); !loaded.ok())
        found.push_back({"replication_key_file", loaded.error().message(),
                         "point it at the cell's key file (voltlockd init-cell writes one), "
                         "owned by the daemon's user, mode 0600"});
    for (const auto& problem : found)
        std::printf("%s%s: %s\n", error_line_prefix(), path.c_str(), problem.line().c_str());
    if (!found.empty()) return 1;
    const DaemonConfig& ok = config.value();
    std::printf(
        "%s: ok: replica %u of %zu in cell %u, udp %s:%u, http %s:%u, replication %s\n",
        path.c_str(), unsigned{ok.replica}, ok.replicas.size(), ok.cluster_id, ok.self().ip.c_str(),
        unsigned{ok.self().udp_port}, ok.self().ip.c_str(), unsigned{ok.self().http_port},
        ok.replication_keys.count > 0
            ? (std::to_string(ok.replication_keys.count) + " key(s), MAC-authenticated").c_str()
            : "UNAUTHENTICATED (no replication_key_file)");
    return 0;
}

// Where the package put the Electrode drop-in: beside this voltlockd (PREFIX/bin/voltlockd ->
// PREFIX/share/voltlock/electrode.conf), else where this build installs it.
std::string electrode_dropin_path()
{
    std::error_code error;
    const auto beside = std::filesystem::read_symlink("/proc/self/exe", error)
                            .parent_path()
                            .parent_path() /
                        "share/voltlock/electrode.conf";
    return !error && std::filesystem::exists(beside, error) ? beside.string()
                                                            : VOLTLOCK_ELECTRODE_DROPIN;
}

int init_cell(const std::vector<std::string>& args)
{
    for (const auto& arg : args)
        if (arg == "--help") {
            std::fputs(init_cell_usage, stdout);
            return 0;
        }
    uint32_t fresh_cluster_id = 0;
    while (fresh_cluster_id == 0)  // 0 is what a config left at its default would say
        if (getrandom(&fresh_cluster_id, sizeof fresh_cluster_id, 0) != sizeof fresh_cluster_id)
            fresh_cluster_id = 0;
    auto plan = parse_init_cell(args, fresh_cluster_id);
    if (!plan.ok()) {
        std::fprintf(stderr, "voltlockd %s\n%s", plan.error().message().c_str(), init_cell_usage);
        return 2;
    }
    if (plan.value().auth) {
        auto token = make_token();
        if (!token.ok()) {
            std::fprintf(stderr, "voltlockd init-cell: %s\n", token.error().message().c_str());
            return 1;
        }
        plan.value().admin_token = token.value();
    }
    if (auto written = write_cell(plan.value()); !written.ok()) {
        std::fprintf(stderr, "voltlockd %s\n", written.error().message().c_str());
        return 1;
    }
    std::fputs(cell_instructions(plan.value(), electrode_dropin_path()).c_str(), stdout);
    return 0;
}

// Sends READY=1 once the replica's own HTTP API answers GET /healthz, so that `systemctl start`
// returns when clients can talk to it. It asks from a thread of its own while the loop runs (a
// handler may need the loop); if no answer comes within `within`, it stops the loop, and the
// daemon exits 1 for systemd to restart it.
class ReadinessAnnouncer {
public:
    ReadinessAnnouncer(const ServiceManager& manager, const DaemonConfig& config, EventLoop& loop,
                       std::string status, std::chrono::seconds within)
        : thread_([this, manager, &config, &loop, status = std::move(status), within] {
              const PeerAddress self = config.self();
              if (http_answers(config, within)) {
                  if (auto told = manager.notify("READY=1\nSTATUS=" + status); !told.ok())
                      spdlog::warn("{}", told.error().message());
                  return;
              }
              if (cancelled_) return;
              failed_ = true;
              loop.post([self, &loop] {
                  spdlog::error("the HTTP API on {}:{} does not answer GET /healthz; stopping",
                                self.ip, self.http_port);
                  loop.stop();
              });
          })
    {
    }
    ~ReadinessAnnouncer()
    {
        cancelled_ = true;
        thread_.join();
    }
    bool failed() const { return failed_; }

private:
    // Asks as a peer would (over TLS, when on).
    bool http_answers(const DaemonConfig& config, std::chrono::seconds within) const
    {
        const std::unique_ptr<httplib::Client> client = peer_client(config, config.self());
        client->set_connection_timeout(1, 0);
        client->set_read_timeout(5, 0);
        const auto deadline = std::chrono::steady_clock::now() + within;
        while (!cancelled_ && std::chrono::steady_clock::now() < deadline) {
            if (auto answer = client->Get("/healthz"); answer && answer->status == 200) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return false;
    }

    std::atomic<bool> cancelled_ = false;
    std::atomic<bool> failed_ = false;
    std::thread thread_;  // last: it starts once the flags exist
};

}  // namespace

int main(int argc, char** argv)
{
    if (argc >= 2 && std::string(argv[1]) == "init-cell")
        return init_cell(std::vector<std::string>(argv + 2, argv + argc));
    Flags flags;
    if (!parse_flags(argc, argv, flags)) return 2;
    if (!flags.check_config.empty()) return check_config(flags);
    auto config_result = configure(flags);
    if (!config_result.ok()) {
        std::fprintf(stderr, "voltlockd: %s\n", config_result.error().message().c_str());
        return 2;
    }
    const DaemonConfig& config = config_result.value();
    // A backup or restore runs beside the stopped replica: its address and ports do not matter.
    // An interface problem does not stop the replica: it runs without Electrode, saying why.
    const bool runs_here = flags.export_snapshot.empty() && flags.import_snapshot.empty();
    const auto found =
        runs_here ? problems(config, {host_problems, tls_problems, auth_problems})
                  : problems(config, {});
    if (!found.empty()) {
        for (const auto& problem : found)
            std::fprintf(stderr, "%svoltlockd: %s: %s\n", error_line_prefix(),
                         flags.config_path.c_str(), problem.line().c_str());
        return 2;
    }
    // Taken from the environment first, so that nothing this process forks can speak for it.
    auto service_manager = ServiceManager::from_environment();
    if (!service_manager.ok()) {
        std::fprintf(stderr, "voltlockd: %s\n", service_manager.error().message().c_str());
        return 2;
    }

    spdlog::set_default_logger(spdlog::stderr_color_mt("voltlockd"));
    log_for(std::getenv("JOURNAL_STREAM") ? LogReader::journal : LogReader::terminal);
    spdlog::set_level(spdlog::level::from_str(config.log_level));

    if (!flags.export_snapshot.empty() || !flags.import_snapshot.empty()) {
        auto done = flags.export_snapshot.empty() ? import_snapshot(config, flags.import_snapshot)
                                                  : export_snapshot(config, flags.export_snapshot);
        return done.ok() ? 0 : fail(done.error());
    }


    auto signals = handled_signals();
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
            if (info.ssi_signo == SIGHUP) {
                if (!config.tls())
                    spdlog::info("r{}: SIGHUP: TLS is off, nothing to reload", config.replica);
                else if (auto reloaded = http.reload_tls(); !reloaded.ok())
                    spdlog::error("r{}: SIGHUP: the TLS files are not loaded, the ones in use "
                                  "stay: {}",
                                  config.replica, reloaded.error().message());
                if (auto reloaded = http.reload_auth(); !reloaded.ok())
                    spdlog::error("r{}: SIGHUP: the auth files are not loaded, the ones in use "
                                  "stay: {}",
                                  config.replica, reloaded.error().message());
                else if (config.auth())
                    spdlog::info("r{}: SIGHUP: auth files reloaded", config.replica);
                return;
            }
            spdlog::info("r{}: signal {}: stopping", config.replica, info.ssi_signo);
            if (auto told = service_manager.value().notify("STOPPING=1"); !told.ok())
                spdlog::warn("r{}: {}", config.replica, told.error().message());
            node.value()->stop();  // takes nothing more; what it acknowledged is durable
            loop.value()->stop();
        });
        !watched.ok())
        return fail(watched.error());

    if (config.replication_keys.count == 0)
        spdlog::warn("r{}: replication is UNAUTHENTICATED: no replication_key_file, so anyone who "
                     "can reach udp {}:{} can forge the cell's messages (docs/security.md)",
                     config.replica, config.self().ip, config.self().udp_port);
    else
        spdlog::info("r{}: replication authenticated with SipHash-2-4, {} key(s) accepted",
                     config.replica, config.replication_keys.count);
    spdlog::info("r{}: cluster {} replica {} of {}, udp {}:{}, http {}:{}, durability {}, {}",
                 config.replica, config.cluster_id, config.replica, config.replicas.size(),
                 config.self().ip, config.self().udp_port, config.self().ip,
                 config.self().http_port, durability_name(config.durability),
                 startup.value().description);
    std::optional<ReadinessAnnouncer> readiness;
    if (service_manager.value().notifying())
        readiness.emplace(service_manager.value(), config, *loop.value(),
                          "r" + std::to_string(config.replica) + " serving HTTP on " +
                              config.self().ip + ":" + std::to_string(config.self().http_port),
                          std::chrono::seconds(30));
    auto watchdog = service_manager.value().start_watchdog(*loop.value());
    if (!watchdog.ok()) return fail(watchdog.error());
    loop.value()->run();
    const bool never_served = readiness && readiness->failed();
    readiness.reset();
    http.stop();
    return never_served ? 1 : 0;
}
