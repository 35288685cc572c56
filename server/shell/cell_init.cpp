#include "shell/cell_init.h"

#include "shell/auth.h"
#include "shell/tls.h"
#include "shell/replication_key.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace voltlock {

const char* const init_cell_usage =
    R"(usage: voltlockd init-cell --replicas 3|5|7 --hosts H1,H2,... --out DIR [options]

  Writes the configs of a new cell into DIR, one per replica (r0.json, r1.json, ...), with a
  fresh cluster id, and the cell's fresh replication key (cell.key, mode 0600, the same on
  every replica), and prints what to copy to which host and how to start it.

  --replicas N           3, 5 or 7
  --hosts H1,H2,...      one host per replica, in order: IPv4 addresses, or names this machine
                         resolves to one. A host named twice runs two replicas, the second on
                         the next ports (for a test cell on one machine)
  --out DIR              where to write the configs (made if missing; existing ones are kept)
  --electrode on|off     the eBPF fast paths (default off); on needs --interface
  --interface NAME       the interface carrying each host's address (Electrode attaches there)
  --durability snapshot|sync
                         default snapshot (docs/operations.md: what each survives)
  --udp-port PORT        VR's UDP port (default 7400)
  --http-port PORT       the HTTP API's port (default 7480)
  --cluster-id N         use this cell id instead of a fresh random one (1 to 4294967295)
  --tls on|off           TLS on the API and between replicas (default on): writes a cell CA
                         (ca.pem, ca-key.pem: keep the key off the replicas) and a certificate
                         and key per replica for its address (rK.pem, rK-key.pem), made with
                         GnuTLS, and configs that use them
  --tls-days N           how long the certificates are valid (default 825 days)
  --auth on|off          bearer-token auth on the API (default on): writes `tokens` (one
                         user, admin, its token printed once and stored only as a SHA-256)
                         and an empty `roles`, and configs that name them
  --config-dir DIR       where the configs and TLS files will live on the hosts (default
                         /etc/voltlock); the configs name the TLS files there
)";

namespace {

using Json = nlohmann::json;

Error flag_error(const std::string& flag, const std::string& problem)
{
    return Error{0, "init-cell: " + flag + ": " + problem};
}

Result<uint64_t> number(const std::string& flag, const std::string& text, uint64_t min,
                        uint64_t max)
{
    uint64_t value = 0;
    size_t used = 0;
    try {
        value = std::stoull(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || text[0] == '-' || value < min || value > max)
        return flag_error(flag, "must be a number from " + std::to_string(min) + " to " +
                                    std::to_string(max) + ", not '" + text + "'");
    return value;
}

Result<CellHost> resolve_host(const std::string& name)
{
    in_addr literal{};
    if (inet_pton(AF_INET, name.c_str(), &literal) == 1) return CellHost{name, name};
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* found = nullptr;
    if (name.empty() || ::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0 || !found)
        return flag_error("--hosts", "'" + name + "' is neither an IPv4 address nor a name "
                                     "this machine resolves; give its address instead");
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr, text,
              sizeof text);
    ::freeaddrinfo(found);
    return CellHost{name, text};
}

std::string config_name(size_t replica) { return "r" + std::to_string(replica); }

// The cell's replication key, one file for every replica, installed beside the configs.
constexpr const char* kCellKeyFile = "cell.key";

}  // namespace

Result<CellPlan> parse_init_cell(const std::vector<std::string>& args, uint32_t fresh_cluster_id)
{
    std::map<std::string, std::string> given;
    static const std::set<std::string> flags = {
        "--replicas",   "--hosts",    "--out",       "--electrode",  "--interface",
        "--durability", "--udp-port", "--http-port", "--cluster-id", "--tls",
        "--tls-days",   "--auth",     "--config-dir"};
    for (size_t i = 0; i < args.size(); i++) {
        std::string flag = args[i];
        std::string value;
        const size_t equals = flag.find('=');
        if (flag.starts_with("--") && equals != std::string::npos) {
            value = flag.substr(equals + 1);
            flag = flag.substr(0, equals);
        } else if (flags.contains(flag)) {
            if (i + 1 >= args.size()) return flag_error(flag, "needs a value");
            value = args[++i];
        }
        if (!flags.contains(flag)) return Error{0, "init-cell: unknown argument '" + flag + "'"};
        if (given.contains(flag)) return flag_error(flag, "is given twice");
        given[flag] = value;
    }
    for (const char* required : {"--replicas", "--hosts", "--out"})
        if (!given.contains(required)) return flag_error(required, "is required");

    CellPlan plan;
    plan.cluster_id = fresh_cluster_id;
    const std::string& replicas_text = given["--replicas"];
    if (replicas_text != "3" && replicas_text != "5" && replicas_text != "7")
        return flag_error("--replicas", "a cell has 3, 5 or 7 replicas, not '" + replicas_text +
                                            "'");
    const size_t replicas = std::stoul(replicas_text);
    std::stringstream hosts(given["--hosts"]);
    for (std::string host; std::getline(hosts, host, ',');) {
        plan.hosts.push_back(VL_TRY(resolve_host(host)));
    }
    if (plan.hosts.size() != replicas)
        return flag_error("--hosts", "names " + std::to_string(plan.hosts.size()) +
                                         " hosts for " + replicas_text + " replicas; give one "
                                         "host per replica, comma-separated");
    plan.out_dir = given["--out"];
    if (plan.out_dir.empty()) return flag_error("--out", "needs a directory");
    if (given.contains("--electrode")) {
        const std::string& electrode = given["--electrode"];
        if (electrode != "on" && electrode != "off")
            return flag_error("--electrode", "must be on or off, not '" + electrode + "'");
        plan.electrode = electrode == "on" ? ElectrodeMode::on : ElectrodeMode::off;
    }
    plan.interface = given["--interface"];
    if (plan.electrode == ElectrodeMode::on && plan.interface.empty())
        return flag_error("--electrode", "on needs --interface, the interface that carries each "
                                         "host's address (the same name on every host)");
    if (given.contains("--durability")) {
        auto durability = parse_durability(given["--durability"]);
        if (!durability.ok()) return flag_error("--durability", durability.error().context);
        plan.durability = durability.value();
    }
    for (auto [flag, port] : {std::pair{"--udp-port", &plan.udp_port},
                              std::pair{"--http-port", &plan.http_port}}) {
        if (!given.contains(flag)) continue;
        *port = static_cast<uint16_t>(VL_TRY(number(flag, given[flag], 1, 65535)));
    }
    if (given.contains("--cluster-id")) {
        const uint64_t cluster_id =
            VL_TRY(number("--cluster-id", given["--cluster-id"], 1, UINT32_MAX));
        plan.cluster_id = static_cast<uint32_t>(cluster_id);
    }
    if (given.contains("--tls")) {
        const std::string& tls = given["--tls"];
        if (tls != "on" && tls != "off")
            return flag_error("--tls", "must be on or off, not '" + tls + "'");
        plan.tls = tls == "on";
    }
    if (given.contains("--auth")) {
        const std::string& auth = given["--auth"];
        if (auth != "on" && auth != "off")
            return flag_error("--auth", "must be on or off, not '" + auth + "'");
        plan.auth = auth == "on";
    }
    if (given.contains("--tls-days")) {
        plan.tls_days =
            static_cast<unsigned>(VL_TRY(number("--tls-days", given["--tls-days"], 1, 36'500)));
    }
    if (given.contains("--config-dir")) {
        plan.config_dir = given["--config-dir"];
        if (plan.config_dir.empty() || plan.config_dir[0] != '/')
            return flag_error("--config-dir", "must be an absolute path, not '" +
                                                  plan.config_dir + "'");
    }
    VL_TRY(cell_configs(plan));
    return plan;
}

Result<std::vector<std::pair<std::string, std::string>>> cell_configs(const CellPlan& plan)
{
    Json replicas = Json::array();
    std::map<std::string, uint16_t> replicas_on_host;
    for (const CellHost& host : plan.hosts) {
        const uint16_t earlier = replicas_on_host[host.ip]++;
        if (plan.udp_port + earlier > 65535 || plan.http_port + earlier > 65535)
            return flag_error("--hosts", host.name + " runs more replicas than there are ports "
                                                     "above the base ports");
        replicas.push_back({{"ip", host.ip},
                            {"udp_port", plan.udp_port + earlier},
                            {"http_port", plan.http_port + earlier}});
    }
    std::vector<std::pair<std::string, std::string>> configs;
    for (size_t replica = 0; replica < plan.hosts.size(); replica++) {
        Json config = {{"cluster_id", plan.cluster_id},
                       {"replica", replica},
                       {"replicas", replicas},
                       {"electrode", plan.electrode == ElectrodeMode::on ? "on" : "off"},
                       {"durability", durability_name(plan.durability)},
                       {"data_dir", "/var/lib/voltlock/" + config_name(replica)},
                       // Beside the config, wherever it is installed (docs/security.md).
                       {"replication_key_file", kCellKeyFile}};
        if (!plan.interface.empty()) config["interface"] = plan.interface;
        if (plan.auth) {
            config["auth_token_file"] = plan.config_dir + "/tokens";
            config["auth_roles_file"] = plan.config_dir + "/roles";
        }
        if (plan.tls) {
            const std::string dir = plan.config_dir + "/";
            config["tls_cert_file"] = dir + config_name(replica) + ".pem";
            config["tls_key_file"] = dir + config_name(replica) + "-key.pem";
            config["tls_ca_file"] = dir + "ca.pem";
        }
        const std::string text = config.dump(2) + "\n";
        auto parsed = parse_config_fields(text);
        if (!parsed.ok()) return Error{0, "init-cell: " + parsed.error().context};
        const auto problems = config_problems(parsed.value());
        if (!problems.empty())
            return Error{0, "init-cell: the ports collide: " + problems.front().line()};
        configs.emplace_back(config_name(replica) + ".json", text);
    }
    return configs;
}

Result<std::vector<std::pair<std::string, std::string>>> cell_tls_files(const CellPlan& plan)
{
    std::vector<std::pair<std::string, std::string>> files;
    if (!plan.tls) return files;
    auto ca = make_tls_ca("Voltlock cell " + std::to_string(plan.cluster_id) + " CA",
                          plan.tls_days);
    if (!ca.ok()) return Error{0, "init-cell: " + ca.error().message()};
    files.emplace_back("ca.pem", ca.value().certificate);
    files.emplace_back("ca-key.pem", ca.value().key);
    for (size_t replica = 0; replica < plan.hosts.size(); replica++) {
        auto certificate = make_tls_certificate(
            ca.value(),
            "voltlock cell " + std::to_string(plan.cluster_id) + " " + config_name(replica),
            {plan.hosts[replica].ip}, plan.tls_days);
        if (!certificate.ok()) return Error{0, "init-cell: " + certificate.error().message()};
        files.emplace_back(config_name(replica) + ".pem", certificate.value().certificate);
        files.emplace_back(config_name(replica) + "-key.pem", certificate.value().key);
    }
    return files;
}

std::vector<std::pair<std::string, std::string>> cell_auth_files(const CellPlan& plan)
{
    if (!plan.auth) return {};
    return {{"tokens", "# user role[,role...] sha256-hex-of-token (docs/security-auth.md)\n"
                       "admin admin " + hex(sha256(plan.admin_token)) + "\n"},
            {"roles", "# role permission[,permission...] resource (docs/security-auth.md), e.g.\n"
                      "# app-reader read,watch key:app/\n"
                      "# app-worker lock lock:app/\n"}};
}

Result<Ok> write_cell(const CellPlan& plan)
{
    auto configs = VL_TRY(cell_configs(plan));
    for (auto& file : VL_TRY(cell_tls_files(plan))) configs.push_back(std::move(file));
    for (auto& file : cell_auth_files(plan)) configs.push_back(std::move(file));
    namespace fs = std::filesystem;
    const fs::path out(plan.out_dir);
    std::vector<std::string> names;
    for (const auto& [name, text] : configs) names.push_back(name);
    names.push_back(kCellKeyFile);
    for (const auto& name : names)
        if (fs::exists(out / name))
            return Error{0, "init-cell: --out: " + (out / name).string() + " exists already (a "
                            "file of another cell?); choose a new directory, or remove it"};
    auto key = fresh_replication_key();
    if (!key.ok()) return Error{key.error().code, "init-cell: " + key.error().context};
    std::error_code error;
    fs::create_directories(out, error);
    if (error) return Error{error.value(), "init-cell: --out: cannot make " + out.string()};
    if (auto written = write_replication_key_file((out / kCellKeyFile).string(), key.value());
        !written.ok())
        return Error{written.error().code, "init-cell: " + written.error().context};
    // Each file whole or not at all: written aside, then renamed into place.
    for (const auto& [name, text] : configs) {
        const fs::path file = out / name;
        const fs::path partial = out / (name + ".partial");
        std::ofstream stream(partial);
        // Keys are for their owner only; the rest as the umask says.
        if (name.ends_with("-key.pem") || name == "tokens")
            fs::permissions(partial, fs::perms::owner_read | fs::perms::owner_write,
                            fs::perm_options::replace, error);
        stream << text;
        stream.close();
        if (!stream || std::rename(partial.c_str(), file.c_str()) != 0) {
            const int saved = errno;
            fs::remove(partial, error);
            return Error{saved, "init-cell: cannot write " + file.string()};
        }
    }
    return Ok{};
}

namespace {

// The ports from `base` a host uses: a host named twice runs its second replica on the next
// ports (cell_configs), so the firewall line names them all ("7400-7402").
std::string host_ports(const CellPlan& plan, uint16_t base)
{
    std::map<std::string, uint16_t> replicas_on_host;
    uint16_t most_on_a_host = 0;
    for (const CellHost& host : plan.hosts)
        most_on_a_host = std::max<uint16_t>(most_on_a_host, ++replicas_on_host[host.ip]);
    if (most_on_a_host <= 1) return std::to_string(base);
    return std::to_string(base) + "-" + std::to_string(base + most_on_a_host - 1);
}

}  // namespace

std::string cell_instructions(const CellPlan& plan, const std::string& electrode_dropin_path)
{
    const size_t count = plan.hosts.size();
    const std::string udp_ports = host_ports(plan, plan.udp_port);
    const std::string http_ports = host_ports(plan, plan.http_port);
    std::ostringstream text;
    text << "wrote a " << count << "-replica cell (cluster_id " << plan.cluster_id
         << ", durability " << durability_name(plan.durability) << ", electrode "
         << (plan.electrode == ElectrodeMode::on ? "on" : "off") << ") to " << plan.out_dir
         << "\n\non each host, with the voltlock package installed:\n";
    for (size_t replica = 0; replica < count; replica++) {
        const std::string name = config_name(replica);
        const CellHost& host = plan.hosts[replica];
        text << "  " << host.name << (host.name != host.ip ? " (" + host.ip + ")" : "") << ":\n"
             << "    install -m 0640 -g voltlock " << (std::filesystem::path(plan.out_dir) /
                                                     (name + ".json")).string()
             << " " << plan.config_dir << "/" << name << ".json\n"
             << "    install -m 0600 -o voltlock -g voltlock "
             << (std::filesystem::path(plan.out_dir) / kCellKeyFile).string() << " "
             << plan.config_dir << "/" << kCellKeyFile << "\n";
        if (plan.tls) {
            const std::filesystem::path out(plan.out_dir);
            text << "    install -m 0644 " << (out / "ca.pem").string() << " "
                 << (out / (name + ".pem")).string() << " " << plan.config_dir << "/\n"
                 << "    install -m 0600 -o voltlock -g voltlock "
                 << (out / (name + "-key.pem")).string() << " " << plan.config_dir << "/\n";
        }
        if (plan.auth) {
            const std::filesystem::path out(plan.out_dir);
            text << "    install -m 0600 -o voltlock " << (out / "tokens").string() << " "
                 << plan.config_dir << "/tokens\n"
                 << "    install -m 0644 " << (out / "roles").string() << " " << plan.config_dir
                 << "/roles\n";
        }
        if (plan.electrode == ElectrodeMode::on)
            text << "    mkdir -p /etc/systemd/system/voltlockd@" << name << ".service.d && cp "
                 << electrode_dropin_path << " /etc/systemd/system/voltlockd@" << name
                 << ".service.d/\n";
        text << "    voltlockd --check-config " << plan.config_dir << "/" << name << ".json"
             << " && systemctl enable --now voltlockd@" << name << "\n";
    }
    text << "\nThe new cell starts once all " << count << " replicas run, and then serves while "
         << count / 2 + 1 << " of " << count
         << " do; each running one answers GET /readyz with 200 (curl "
         << (plan.tls ? "--cacert " + (std::filesystem::path(plan.out_dir) / "ca.pem").string() +
                            " https://"
                      : std::string("http://"))
         << plan.hosts.front().ip << ":" << plan.http_port << "/readyz).\n"
         << "Open udp/" << udp_ports << " and tcp/" << http_ports
         << " between the hosts, and tcp/" << http_ports << " to clients "
         << "(docs/operations.md).\n"
         << "\n" << kCellKeyFile << " is the cell's replication key: every replica needs the same "
         << "one, and nothing else should have it (docs/security.md says how to rotate it).\n";
    if (plan.tls)
        text << "Clients trust ca.pem (--cacert). Keep ca-key.pem off the replicas, somewhere "
                "safe: it "
                "signs new certificates (docs/security-tls.md, Rotating certificates).\n";
    if (plan.auth)
        text << "\nAuth is on. The admin token (shown once, stored only hashed in tokens; keep it "
                "somewhere safe):\n  " << plan.admin_token << "\n"
             << "Clients send it as `Authorization: Bearer <token>` (lockctl --token, "
                "VOLTLOCK_TOKEN); add users to tokens and roles to roles, then SIGHUP every "
                "replica (docs/security-auth.md).\n";
    return text.str();
}

}  // namespace voltlock
