#include "shell/config.h"

#include "shell/replication_key.h"

#include <arpa/inet.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

namespace voltlock {

namespace {

using Json = nlohmann::json;

Error field_error(const std::string& field, const std::string& problem)
{
    return Error{0, "config: " + field + ": " + problem};
}

// Where nlohmann's parser stopped, as an editor counts: "line 4, column 12 (byte 48)". Its
// parse_error::byte is the 1-based offset of the last byte it read, the end of the token it
// could not take (one past the last byte when the text ends too soon).
std::string position_of(const std::string& text, size_t byte)
{
    const size_t at = std::min(byte > 0 ? byte - 1 : 0, text.size());
    const std::string_view before(text.data(), at);
    const size_t newline = before.rfind('\n');
    const size_t column = newline == std::string_view::npos ? at + 1 : at - newline;
    const auto lines = std::count(before.begin(), before.end(), '\n');
    return "line " + std::to_string(lines + 1) + ", column " + std::to_string(column) + " (byte " +
           std::to_string(byte) + ")";
}

// Reads the fields of one JSON object, remembering which were read so that unknown ones (most
// often typos) are reported instead of silently ignored.
class ObjectReader {
public:
    ObjectReader(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

    template <typename T>
    Result<Ok> integer(const char* name, T& out, bool required, uint64_t min, uint64_t max)
    {
        seen_.insert(name);
        const auto it = object_.find(name);
        if (it == object_.end())
            return required ? Result<Ok>(field_error(field(name), "is required")) : Ok{};
        if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
            return field_error(field(name), "must be a non-negative integer");
        const uint64_t value = it->get<uint64_t>();
        if (value < min || value > max)
            return field_error(field(name), "must be between " + std::to_string(min) + " and " +
                                                std::to_string(max) + ", not " +
                                                std::to_string(value));
        out = static_cast<T>(value);
        return Ok{};
    }

    Result<Ok> string(const char* name, std::string& out, bool required)
    {
        seen_.insert(name);
        const auto it = object_.find(name);
        if (it == object_.end())
            return required ? Result<Ok>(field_error(field(name), "is required")) : Ok{};
        if (!it->is_string()) return field_error(field(name), "must be a string");
        out = it->get<std::string>();
        return Ok{};
    }

    void mark_known(const char* name) { seen_.insert(name); }

    // Every unknown field in one line, each with the known one it most likely meant: a config
    // with two typos is fixed in one round, not two.
    Result<Ok> no_unknown_fields() const
    {
        std::string fields, fixes;
        size_t unknown = 0;
        for (const auto& [key, value] : object_.items()) {
            if (seen_.contains(key)) continue;
            fields += (unknown++ ? ", " : "") + field(key);
            const std::string meant = nearest_known(key);
            fixes += (fixes.empty() ? "" : "; ") + field(key) + ": " +
                     (meant.empty() ? "remove it" : "rename it to \"" + meant + "\"");
        }
        if (unknown == 0) return Ok{};
        return field_error(fields, std::string(unknown == 1 ? "unknown field" : "unknown fields") +
                                       "; fix: " + fixes +
                                       " (voltlockd --help lists every config key)");
    }

    std::string field(const std::string& name) const
    {
        return path_.empty() ? name : path_ + "." + name;
    }

private:
    // The known field a typo most likely meant: within two edits, or one name the start or end
    // of the other ("tls_cert" for "tls_cert_file"); "" if none.
    std::string nearest_known(const std::string& name) const
    {
        std::string best;
        size_t best_distance = 3;
        for (const std::string& known : seen_) {
            size_t distance = edit_distance(name, known);
            const auto& [shorter, longer] =
                name.size() < known.size() ? std::tie(name, known) : std::tie(known, name);
            if (shorter.size() >= 4 && (longer.starts_with(shorter) || longer.ends_with(shorter)))
                distance = std::min<size_t>(distance, 2);
            if (distance < best_distance) {
                best = known;
                best_distance = distance;
            }
        }
        return best;
    }

    static size_t edit_distance(const std::string& a, const std::string& b)
    {
        std::vector<size_t> row(b.size() + 1);
        for (size_t j = 0; j <= b.size(); j++) row[j] = j;
        for (size_t i = 1; i <= a.size(); i++) {
            size_t diagonal = row[0];
            row[0] = i;
            for (size_t j = 1; j <= b.size(); j++) {
                const size_t above = row[j];
                row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                                   diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
                diagonal = above;
            }
        }
        return row[b.size()];
    }

    const Json& object_;
    std::string path_;
    std::set<std::string> seen_;
};

Result<PeerAddress> parse_peer(const Json& json, const std::string& path)
{
    if (!json.is_object()) return field_error(path, "must be an object");
    ObjectReader reader(json, path);
    PeerAddress peer;
    VL_TRY(reader.string("ip", peer.ip, true));
    VL_TRY(reader.integer("udp_port", peer.udp_port, true, 1, 65535));
    VL_TRY(reader.integer("http_port", peer.http_port, true, 1, 65535));
    VL_TRY(reader.no_unknown_fields());
    in_addr addr{};
    if (inet_pton(AF_INET, peer.ip.c_str(), &addr) != 1)
        return field_error(path + ".ip", "'" + peer.ip + "' is not an IPv4 address");
    return peer;
}

// The HTTP front end's keys (docs/frontend.md, "Limits that protect the cell").
Result<Ok> read_http_keys(ObjectReader& reader, DaemonConfig& config)
{
    VL_TRY(reader.integer("http_max_connections", config.http_max_connections, false, 1,
                          1'000'000));
    VL_TRY(reader.integer("http_max_connections_per_address",
                          config.http_max_connections_per_address, false, 1, 1'000'000));
    VL_TRY(reader.integer("http_max_streams", config.http_max_streams, false, 1, 1'000'000));
    VL_TRY(reader.integer("http_listen_backlog", config.http_listen_backlog, false, 16, 65535));
    VL_TRY(reader.integer("http_header_timeout_ms", config.http_header_timeout_ms, false, 100,
                          600'000));
    VL_TRY(reader.integer("http_body_timeout_ms", config.http_body_timeout_ms, false, 100,
                          600'000));
    VL_TRY(reader.integer("http_idle_timeout_ms", config.http_idle_timeout_ms, false, 1000,
                          3'600'000));
    VL_TRY(reader.integer("http_stream_buffer_bytes", config.http_stream_buffer_bytes, false,
                          1024, 1u << 30));
    VL_TRY(reader.integer("http_forward_threads", config.http_forward_threads, false, 1, 256));
    VL_TRY(reader.integer("http_io_threads", config.http_io_threads, false, 0, 1));
    return Ok{};
}

}  // namespace

ReplicaConfig DaemonConfig::replica_config() const
{
    ReplicaConfig config;
    config.cluster_id = cluster_id;
    config.replica = replica;
    config.replica_count = static_cast<uint8_t>(replicas.size());
    config.max_message_bytes = max_message_bytes;
    config.heartbeat_ticks = heartbeat_ticks;
    config.view_change_timeout_ticks = view_change_timeout_ticks;
    config.retransmit_ticks = retransmit_ticks;
    config.pipeline_ops = pipeline_ops;
    config.snapshot_every_ops = snapshot_every_ops;
    config.snapshot_every_ticks = uint64_t{snapshot_every_seconds} * 1000 / tick_ms;
    config.persist_log = durability == Durability::sync && !data_dir.empty();
    config.persist_view = !data_dir.empty();
    config.leader_lease_ms = uint64_t{view_change_timeout_ticks} * tick_ms;
    return config;
}

namespace {

// The config's JSON object, or where the text stops being one.
Result<Json> parse_config_object(const std::string& json_text)
{
    // The throwing parse, caught here, is the one that says where the text stops being JSON. It
    // also throws out_of_range for a number no double holds (1e999), with no position.
    Json json;
    try {
        json = Json::parse(json_text);
    } catch (const Json::parse_error& error) {
        return Error{0, "config: not valid JSON at " + position_of(json_text, error.byte)};
    } catch (const Json::exception& error) {
        return Error{0, "config: not valid JSON: " + std::string(error.what())};
    }
    if (!json.is_object()) return Error{0, "config: the document must be a JSON object"};
    return json;
}

}  // namespace

Result<DaemonConfig> parse_config_fields(const std::string& json_text)
{
    Json json = VL_TRY(parse_config_object(json_text));
    ObjectReader reader(json, "");
    DaemonConfig config;
    VL_TRY(reader.integer("cluster_id", config.cluster_id, true, 0, UINT32_MAX));
    VL_TRY(reader.integer("replica", config.replica, true, 0, VL_MAX_REPLICAS - 1));
    VL_TRY(reader.string("interface", config.interface, false));
    VL_TRY(reader.integer("max_message_bytes", config.max_message_bytes, false,
                          VL_MIN_MESSAGE_BYTES, VL_MAX_MESSAGE_BYTES));
    VL_TRY(reader.integer("tick_ms", config.tick_ms, false, 1, 1000));
    VL_TRY(reader.integer("heartbeat_ticks", config.heartbeat_ticks, false, 1, 10000));
    VL_TRY(reader.integer("view_change_timeout_ticks", config.view_change_timeout_ticks, false,
                          2, 100000));
    VL_TRY(reader.integer("retransmit_ticks", config.retransmit_ticks, false, 1, 10000));
    VL_TRY(reader.integer("pipeline_ops", config.pipeline_ops, false, 1, 1u << 20));
    std::string electrode = "off";
    VL_TRY(reader.string("electrode", electrode, false));
    if (electrode != "on" && electrode != "off")
        return field_error("electrode", "must be \"on\" or \"off\", not \"" + electrode + "\"");
    config.electrode = electrode == "on" ? ElectrodeMode::on : ElectrodeMode::off;
    VL_TRY(reader.string("log_level", config.log_level, false));
    std::string fast_paths = "all";
    VL_TRY(reader.string("fast_paths", fast_paths, false));
    auto parsed_paths = parse_fast_paths(fast_paths);
    if (!parsed_paths.ok()) return field_error("fast_paths", parsed_paths.error().context);
    config.fast_paths = parsed_paths.value();
    std::string machine = "lock";
    VL_TRY(reader.string("machine", machine, false));
    if (machine != "lock" && machine != "register")
        return field_error("machine", "must be \"lock\" or \"register\", not \"" + machine + "\"");
    config.machine = machine == "lock" ? MachineKind::lock : MachineKind::register_machine;
    VL_TRY(reader.string("data_dir", config.data_dir, false));
    std::string durability = "snapshot";
    VL_TRY(reader.string("durability", durability, false));
    auto parsed_durability = parse_durability(durability);
    if (!parsed_durability.ok())
        return field_error("durability", parsed_durability.error().context);
    config.durability = parsed_durability.value();
    // At most 2^30: the restart fence (LockMachine::kLostWritesBound) relies on it.
    VL_TRY(reader.integer("snapshot_every_ops", config.snapshot_every_ops, false, 0,
                          uint64_t{1} << 30));
    VL_TRY(reader.integer("snapshot_every_seconds", config.snapshot_every_seconds, false, 0,
                          7 * 24 * 3600));
    VL_TRY(reader.integer("quota_bytes", config.quota_bytes, false, 0, uint64_t{1} << 50));
    VL_TRY(read_http_keys(reader, config));
    VL_TRY(reader.string("tls_cert_file", config.tls_cert_file, false));
    VL_TRY(reader.string("tls_key_file", config.tls_key_file, false));
    VL_TRY(reader.string("tls_ca_file", config.tls_ca_file, false));
    VL_TRY(reader.string("tls_client_ca_file", config.tls_client_ca_file, false));
    VL_TRY(reader.string("replication_key_file", config.replication_key_file, false));
    VL_TRY(reader.string("auth_token_file", config.auth_token_file, false));
    VL_TRY(reader.string("auth_roles_file", config.auth_roles_file, false));

    reader.mark_known("replicas");
    const auto replicas = json.find("replicas");
    if (replicas == json.end()) return field_error("replicas", "is required");
    if (!replicas->is_array()) return field_error("replicas", "must be an array");
    for (size_t i = 0; i < replicas->size(); i++) {
        config.replicas.push_back(
            VL_TRY(parse_peer((*replicas)[i], "replicas[" + std::to_string(i) + "]")));
    }
    VL_TRY(reader.no_unknown_fields());
    return config;
}

Result<DaemonConfig> parse_config(const std::string& json_text)
{
    DaemonConfig config = VL_TRY(parse_config_fields(json_text));
    VL_TRY(validate_config(config));
    return config;
}

std::string ConfigProblem::line() const { return field + ": " + problem + "; fix: " + fix; }

std::vector<ConfigProblem> config_problems(const DaemonConfig& config)
{
    std::vector<ConfigProblem> problems;
    const size_t count = config.replicas.size();
    if (count == 0 || count > VL_MAX_REPLICAS || count % 2 == 0)
        problems.push_back({"replicas",
                            "lists " + std::to_string(count) + " replicas; a cell has an odd "
                            "number from 1 to " + std::to_string(VL_MAX_REPLICAS) +
                                " (3, 5 or 7 in production)",
                            "list every replica of the cell, the same list in each replica's "
                            "config (voltlockd init-cell writes them)"});
    if (config.replica >= count)
        problems.push_back({"replica",
                            "index " + std::to_string(config.replica) + " is not in replicas" +
                                (count > 0 ? " (0.." + std::to_string(count - 1) + ")" : ""),
                            "set it to this host's position in the replicas list, counting "
                            "from 0"});
    std::map<std::pair<std::string, uint16_t>, std::string> endpoints;  // -> the field using it
    for (size_t i = 0; i < count; i++) {
        const PeerAddress& peer = config.replicas[i];
        const std::string field = "replicas[" + std::to_string(i) + "]";
        for (const auto& [port, name] : {std::pair{peer.udp_port, "udp_port"},
                                         std::pair{peer.http_port, "http_port"}}) {
            const auto [first, added] =
                endpoints.emplace(std::pair{peer.ip, port}, field + "." + name);
            if (!added)
                problems.push_back({field + "." + name,
                                    peer.ip + ":" + std::to_string(port) + " is also " +
                                        first->second,
                                    "give every replica's udp_port and http_port a port no "
                                    "other replica on " + peer.ip + " uses"});
        }
    }
    if (config.durability == Durability::sync && config.data_dir.empty())
        problems.push_back({"durability", "sync needs a data_dir to write to",
                            "set data_dir (or pass --data-dir), or use durability snapshot"});
    if (config.heartbeat_ticks >= config.view_change_timeout_ticks)
        problems.push_back({"heartbeat_ticks",
                            std::to_string(config.heartbeat_ticks) + " is not less than "
                            "view_change_timeout_ticks (" +
                                std::to_string(config.view_change_timeout_ticks) + ")",
                            "make it a fraction of view_change_timeout_ticks (defaults: 5 and "
                            "30)"});
    if (config.tls_cert_file.empty() != config.tls_key_file.empty())
        problems.push_back({config.tls() ? "tls_key_file" : "tls_cert_file",
                            "TLS needs both a certificate and its key",
                            "set both tls_cert_file and tls_key_file, or neither (no TLS)"});
    for (const auto& [field, value] : {std::pair{"tls_ca_file", &config.tls_ca_file},
                                       std::pair{"tls_client_ca_file", &config.tls_client_ca_file}})
        if (!value->empty() && !config.tls())
            problems.push_back({field, "is set but TLS is off (no tls_cert_file)",
                                "set tls_cert_file and tls_key_file, or remove " +
                                    std::string(field)});
    static const std::set<std::string> levels = {"trace", "debug", "info", "warn", "error"};
    if (!levels.contains(config.log_level))
        problems.push_back({"log_level", "'" + config.log_level + "' is not a level",
                            "use one of trace, debug, info, warn, error"});
    return problems;
}

Result<Ok> validate_config(const DaemonConfig& config)
{
    const auto problems = config_problems(config);
    if (!problems.empty()) return Error{0, "config: " + problems.front().line()};
    return Ok{};
}

namespace {
constexpr std::pair<const char*, uint32_t> fast_path_names[] = {
    {"broadcast", VL_FAST_PATH_BROADCAST},
    {"fast-ack", VL_FAST_PATH_FAST_ACK},
    {"quorum", VL_FAST_PATH_QUORUM},
};
}  // namespace

Result<uint32_t> parse_fast_paths(const std::string& list)
{
    if (list == "all") return uint32_t{VL_FAST_PATHS_ALL};
    if (list == "none") return uint32_t{0};
    uint32_t paths = 0;
    std::stringstream items(list);
    std::string item;
    while (std::getline(items, item, ',')) {
        bool known = false;
        for (const auto& [name, bit] : fast_path_names)
            if (item == name) {
                paths |= bit;
                known = true;
            }
        if (!known)
            return Error{0, "'" + item + "' is not a fast path (broadcast, fast-ack, quorum, "
                                         "all, none)"};
    }
    return paths;
}

std::string fast_paths_name(uint32_t fast_paths)
{
    std::string names;
    for (const auto& [name, bit] : fast_path_names)
        if (fast_paths & bit) names += (names.empty() ? "" : ",") + std::string(name);
    return names.empty() ? "none" : names;
}

Result<Durability> parse_durability(const std::string& name)
{
    if (name == "snapshot") return Durability::snapshot;
    if (name == "sync") return Durability::sync;
    return Error{0, "must be \"snapshot\" or \"sync\", not \"" + name + "\""};
}

const char* durability_name(Durability durability)
{
    return durability == Durability::sync ? "sync" : "snapshot";
}

Result<std::string> read_config_text(const std::string& path)
{
    std::ifstream file(path);
    if (!file) return os_error("config: cannot read " + path);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
}

Result<Ok> load_replication_key(DaemonConfig& config, const std::string& config_path)
{
    if (config.replication_key_file.empty()) return Ok{};
    std::filesystem::path key_path(config.replication_key_file);
    if (key_path.is_relative())
        key_path = std::filesystem::path(config_path).parent_path() / key_path;
    auto keys = load_replication_keys(key_path.string());
    if (!keys.ok())
        return Error{keys.error().code, "config: replication_key_file: " + keys.error().context};
    config.replication_keys = keys.value();
    return Ok{};
}

Result<DaemonConfig> load_config(const std::string& path)
{
    const std::string text = VL_TRY(read_config_text(path));
    DaemonConfig config = VL_TRY(parse_config(text));
    VL_TRY(load_replication_key(config, path));
    return config;
}

}  // namespace voltlock
