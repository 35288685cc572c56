// voltlockd's configuration: one JSON file per replica, fields overridable by flags. Parsing
// names the field and the problem, and a bad config stops the daemon before it starts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/replica.h"
#include "shell/result.h"

namespace voltlock {

struct PeerAddress {
    std::string ip;  // IPv4, dotted quad
    uint16_t udp_port = 0;
    uint16_t http_port = 0;
};

enum class ElectrodeMode { off, on };

// The replicated state machine: the lock service, or the register that benchmarks and
// replication tests use to measure VR alone.
enum class MachineKind { lock, register_machine };

// What a replica writes to its data directory (docs/storage.md): snapshots only, or also every
// batch of the log before acknowledging it.
enum class Durability { snapshot, sync };
Result<Durability> parse_durability(const std::string& name);
const char* durability_name(Durability durability);

struct DaemonConfig {
    uint32_t cluster_id = 0;
    uint8_t replica = 0;
    std::vector<PeerAddress> replicas;
    std::string interface;  // where the eBPF programs attach
    uint32_t max_message_bytes = VL_DEFAULT_MESSAGE_BYTES;
    uint32_t tick_ms = 10;
    uint32_t heartbeat_ticks = 5;
    uint32_t view_change_timeout_ticks = 30;
    uint32_t retransmit_ticks = 4;
    uint32_t pipeline_ops = 4096;
    ElectrodeMode electrode = ElectrodeMode::off;
    uint32_t fast_paths = VL_FAST_PATHS_ALL;  // with electrode on: enum vl_fast_path bits
    MachineKind machine = MachineKind::lock;
    std::string log_level = "info";
    std::string data_dir;  // empty: state in memory only
    Durability durability = Durability::snapshot;
    uint64_t snapshot_every_ops = 100'000;
    uint32_t snapshot_every_seconds = 300;
    // Once the records take this many bytes (LockMachine::stored_bytes), the API refuses what
    // would add one (a put, a new session, an acquire, a barrier entry) with 507
    // quota_exceeded; deletes, releases and closes still go through. 0: no quota. 2 GiB, as
    // etcd's quota-backend-bytes: every replica holds the records in memory.
    uint64_t quota_bytes = uint64_t{2} << 30;
    // The HTTP front end's limits (docs/frontend.md).
    // Room for 10,000 held watches or idle connections and the clients beside them, also when
    // they all come from one address; no address alone takes every connection.
    uint32_t http_max_connections = 16'000;
    uint32_t http_max_connections_per_address = 12'000;
    uint32_t http_max_streams = 10'000;  // watches and lock/barrier waits held open
    uint32_t http_listen_backlog = 4096;
    uint32_t http_header_timeout_ms = 10'000;
    uint32_t http_body_timeout_ms = 10'000;
    uint32_t http_idle_timeout_ms = 60'000;
    uint32_t http_stream_buffer_bytes = 1 << 20;  // per watch: a reader further behind is cut
    uint32_t http_forward_threads = 16;  // kept-alive connections a follower forwards on
    // 0: HTTP is parsed on the replica's event loop (no hand-off per request); 1: on an I/O
    // thread of its own.
    uint32_t http_io_threads = 0;
    // TLS on the HTTP API and on the replicas' HTTP to each other (shell/tls.h): on when
    // tls_cert_file is set. Every replica of a cell has it on, or none.
    std::string tls_cert_file;       // PEM: this replica's certificate (its chain after it)
    std::string tls_key_file;        // PEM: its private key
    std::string tls_ca_file;         // PEM: the CA peers' certificates are checked against
    std::string tls_client_ca_file;  // PEM: set, every client must present a certificate of it

    // Authentication and authorization (shell/auth.h, docs/security-auth.md): on when
    // auth_token_file is set; off, every client may do everything.
    std::string auth_token_file;  // `user role[,role] sha256-hex-of-token` lines, mode 0600
    std::string auth_roles_file;  // `role permission[,permission] resource` lines

    bool tls() const { return !tls_cert_file.empty(); }
    bool auth() const { return !auth_token_file.empty(); }

    // Authenticated replication (docs/security.md): the key file's path as written (relative:
    // to the config file's directory), and its keys as load_config() read them. No file: the
    // replication port trusts any datagram of the right cluster id, and the daemon says so.
    std::string replication_key_file;
    vl_mac_keys replication_keys{};

    const PeerAddress& self() const { return replicas.at(replica); }
    ReplicaConfig replica_config() const;
};

// Parses "broadcast,fast-ack,quorum" (any subset, "all" or "none") into enum vl_fast_path bits.
Result<uint32_t> parse_fast_paths(const std::string& list);
std::string fast_paths_name(uint32_t fast_paths);

// One thing wrong with a config and what to do about it; `voltlockd --check-config` prints one
// line per problem: "<field>: <problem>; fix: <fix>".
struct ConfigProblem {
    std::string field;  // as written in the file: "replicas[1].udp_port", "interface"
    std::string problem;
    std::string fix;

    std::string line() const;
};

// Parses and validates a config document. Errors read "config: <field>: <problem>".
Result<DaemonConfig> parse_config(const std::string& json_text);
// parse_config() and then the replication key file (load_replication_key).
Result<DaemonConfig> load_config(const std::string& path);
// Reads config.replication_key_file (if set) into config.replication_keys; `config_path` is
// where the config came from, for a relative key file path.
Result<Ok> load_replication_key(DaemonConfig& config, const std::string& config_path);
Result<std::string> read_config_text(const std::string& path);
// Only the fields, each on its own (the first error); the cross-field rules are left to
// config_problems(), for a caller that reports every problem at once.
Result<DaemonConfig> parse_config_fields(const std::string& json_text);
// Every cross-field rule the config breaks (peer count, duplicate addresses, ...), in field order.
std::vector<ConfigProblem> config_problems(const DaemonConfig& config);
// The first of config_problems() as an error; also used after flags override fields.
Result<Ok> validate_config(const DaemonConfig& config);

}  // namespace voltlock
