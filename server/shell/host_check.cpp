#include "shell/host_check.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "shell/event_loop.h"

namespace voltlock {

namespace {

sockaddr_in socket_address(const std::string& ip, uint16_t port)
{
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
    return address;
}

// errno of binding ip:port (port 0: any) with a socket of `type`; 0 if it binds.
int bind_error(const std::string& ip, uint16_t port, int type)
{
    FileDescriptor fd(::socket(AF_INET, type | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return errno;
    // As the HTTP server (http_server.cpp) binds, with SO_REUSEADDR: connections a killed run
    // left behind do not count; a listener still does, and listening() asks as well.
    const int on = 1;
    if (type == SOCK_STREAM) ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    const sockaddr_in address = socket_address(ip, port);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
        return errno;
    return 0;
}

// Whether something accepts TCP connections on ip:port (this host's own address: the answer,
// accepted or refused, is immediate).
bool listening(const std::string& ip, uint16_t port)
{
    FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_in address = socket_address(ip, port);
    return fd.get() >= 0 &&
           ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
}

// This host's interfaces as getifaddrs() sees them, or nullopt if it cannot (it asks over
// netlink, which the systemd unit allows only with Electrode's drop-in).
struct Carrier {
    std::optional<std::string> name;  // the interface that carries the address, if any
};
std::optional<Carrier> interface_carrying(const std::string& ip)
{
    in_addr wanted{};
    if (inet_pton(AF_INET, ip.c_str(), &wanted) != 1) return Carrier{};
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return std::nullopt;
    Carrier carrier;
    // An interface carries ip if it has it, or for loopback, its network (lo holds all 127/8).
    for (const ifaddrs* entry = list; entry && !carrier.name; entry = entry->ifa_next) {
        if (!entry->ifa_addr || entry->ifa_addr->sa_family != AF_INET || !entry->ifa_netmask)
            continue;
        const auto address = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr;
        const auto mask = reinterpret_cast<const sockaddr_in*>(entry->ifa_netmask)->sin_addr;
        if (address.s_addr == wanted.s_addr ||
            (mask.s_addr != 0 && (address.s_addr & mask.s_addr) == (wanted.s_addr & mask.s_addr) &&
             (entry->ifa_flags & IFF_LOOPBACK)))
            carrier.name = entry->ifa_name;
    }
    ::freeifaddrs(list);
    return carrier;
}

// The socket inode bound to ip:port in this network namespace (/proc/net/udp or tcp; for TCP
// a listener only), or 0. The kernel prints the address as the raw 32-bit word, as s_addr.
uint64_t socket_inode(const std::string& ip, uint16_t port, int type)
{
    const in_addr wanted = socket_address(ip, port).sin_addr;
    std::ifstream table(type == SOCK_DGRAM ? "/proc/net/udp" : "/proc/net/tcp");
    std::string line;
    std::getline(table, line);  // the heading
    while (std::getline(table, line)) {
        unsigned address = 0, local_port = 0, state = 0;
        uint64_t inode = 0;
        if (std::sscanf(line.c_str(),
                        " %*d: %x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %" SCNu64, &address,
                        &local_port, &state, &inode) != 4)
            continue;
        constexpr unsigned kTcpListen = 0x0A;
        if (local_port == port && (address == wanted.s_addr || address == INADDR_ANY) &&
            (type == SOCK_DGRAM || state == kTcpListen))
            return inode;
    }
    return 0;
}

// The process holding the socket `inode` open, or 0 (none found, or not ours to look at:
// another user's /proc/PID/fd is readable by root only).
pid_t socket_holder(uint64_t inode)
{
    namespace fs = std::filesystem;
    const std::string link = "socket:[" + std::to_string(inode) + "]";
    std::error_code error;
    for (const auto& process : fs::directory_iterator("/proc", error)) {
        const std::string pid = process.path().filename();
        if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
        for (const auto& fd : fs::directory_iterator(process.path() / "fd", error)) {
            std::error_code unreadable;
            if (fs::read_symlink(fd.path(), unreadable).string() == link)
                return static_cast<pid_t>(std::stol(pid));
        }
    }
    return 0;
}

std::string read_whole(const std::string& path)
{
    std::ifstream file(path, std::ios::binary);
    std::ostringstream text;
    text << file.rdbuf();
    return text.str();
}

// Whether `pid` is a voltlockd running this replica: its --config (read as it sees it, from
// its working directory) is of the same cell, the same replica, at the same address and ports.
bool runs_this_replica(pid_t pid, const DaemonConfig& config)
{
    const std::string proc = "/proc/" + std::to_string(pid);
    if (read_whole(proc + "/comm") != "voltlockd\n") return false;
    const std::string cmdline = read_whole(proc + "/cmdline");
    std::vector<std::string> args;
    for (size_t at = 0; at < cmdline.size();) {
        const size_t end = std::min(cmdline.find('\0', at), cmdline.size());
        args.push_back(cmdline.substr(at, end - at));
        at = end + 1;
    }
    for (size_t i = 0; i + 1 < args.size(); i++) {
        if (args[i] != "--config") continue;
        std::filesystem::path path = args[i + 1];
        // Through /proc/PID/root as well: the holder may run in a chroot or mount namespace.
        const std::string root = proc + "/root";
        if (path.is_relative()) {
            std::error_code error;
            path = std::filesystem::read_symlink(proc + "/cwd", error) / path;
            if (error) return false;
        }
        auto theirs = parse_config_fields(read_whole(root + path.string()));
        if (!theirs.ok() || theirs.value().replica >= theirs.value().replicas.size())
            return false;
        const DaemonConfig& other = theirs.value();
        return other.cluster_id == config.cluster_id && other.replica == config.replica &&
               other.self().ip == config.self().ip &&
               other.self().udp_port == config.self().udp_port &&
               other.self().http_port == config.self().http_port;
    }
    return false;
}

std::string port_fix(uint16_t port, const char* protocol)
{
    return std::string("stop what holds it (ss -") + protocol + "lnp 'sport = :" +
           std::to_string(port) + "'), or give this replica another port in every replica's "
           "config";
}

// Which holders of the replica's ports are a problem: any (a start), or all but the replica of
// this very config, running (a check of its config in place, after new TLS or auth files and
// before the SIGHUP).
enum class PortHolders { any, but_this_replica };

void check_port(const DaemonConfig& config, PortHolders allowed, const std::string& field,
                const std::string& ip, uint16_t port, int type,
                std::vector<ConfigProblem>& problems)
{
    const char* protocol = type == SOCK_DGRAM ? "u" : "t";
    const std::string endpoint =
        ip + ":" + std::to_string(port) + (type == SOCK_DGRAM ? "/udp" : "/tcp");
    int error = bind_error(ip, port, type);
    if (error == 0 && type == SOCK_STREAM && listening(ip, port)) error = EADDRINUSE;
    switch (error) {
    case 0:
        return;
    case EADDRINUSE: {
        const uint64_t inode = socket_inode(ip, port, type);
        const pid_t holder = inode ? socket_holder(inode) : 0;
        if (allowed == PortHolders::but_this_replica && holder && runs_this_replica(holder, config))
            return;
        problems.push_back({field,
                            endpoint + " is in use by another process" +
                                (holder ? " (pid " + std::to_string(holder) + ")" : ""),
                            port_fix(port, protocol)});
        return;
    }
    case EACCES:
        problems.push_back({field, endpoint + " is a privileged port and voltlockd runs "
                                              "without CAP_NET_BIND_SERVICE",
                            "use a port above 1023 (init-cell's defaults are 7400 and 7480)"});
        return;
    default:
        problems.push_back({field, "cannot bind " + endpoint + ": " + std::strerror(error),
                            "make " + endpoint + " bindable on this host"});
    }
}

bool is_local(const std::string& ip) { return bind_error(ip, 0, SOCK_DGRAM) == 0; }

std::vector<ConfigProblem> host_problems_with(const DaemonConfig& config, PortHolders allowed)
{
    std::vector<ConfigProblem> problems;
    if (config.replica >= config.replicas.size()) return problems;  // config_problems() says so
    const PeerAddress& self = config.self();
    const std::string self_field = "replicas[" + std::to_string(config.replica) + "]";
    if (!is_local(self.ip)) {
        problems.push_back({self_field + ".ip",
                            self.ip + " (this replica's, replica " +
                                std::to_string(config.replica) + ") is not an address of this "
                                "host",
                            "set replica to this host's position in replicas, or run this config "
                            "on the host that has " + self.ip});
        return problems;
    }
    check_port(config, allowed, self_field + ".udp_port", self.ip, self.udp_port, SOCK_DGRAM,
               problems);
    check_port(config, allowed, self_field + ".http_port", self.ip, self.http_port, SOCK_STREAM,
               problems);
    return problems;
}

}  // namespace

std::vector<ConfigProblem> host_problems(const DaemonConfig& config)
{
    return host_problems_with(config, PortHolders::any);
}

std::vector<ConfigProblem> host_problems_beside_itself(const DaemonConfig& config)
{
    return host_problems_with(config, PortHolders::but_this_replica);
}

std::vector<ConfigProblem> interface_problems(const DaemonConfig& config)
{
    std::vector<ConfigProblem> problems;
    if (config.replica >= config.replicas.size()) return problems;
    const std::string& ip = config.self().ip;
    const auto interfaces = interface_carrying(ip);
    const std::optional<std::string> carrier = interfaces ? interfaces->name : std::nullopt;
    const std::string use_carrier =
        carrier ? "set interface to \"" + *carrier + "\", which carries " + ip
                : "set interface to the network interface that carries " + ip +
                      " (ip -br addr lists them)";
    if (config.interface.empty()) {
        if (config.electrode == ElectrodeMode::on)
            problems.push_back({"interface", "electrode is on but no interface is named for "
                                             "the eBPF programs",
                                use_carrier + ", or set electrode to \"off\""});
    } else if (::if_nametoindex(config.interface.c_str()) == 0) {
        problems.push_back({"interface", "no interface \"" + config.interface + "\" on this host",
                            use_carrier});
    } else if (config.electrode == ElectrodeMode::on && interfaces && is_local(ip) &&
               carrier != config.interface) {
        problems.push_back({"interface",
                            "\"" + config.interface + "\" does not carry " + ip +
                                ", so the replicas' packets would not pass its eBPF programs",
                            use_carrier});
    }
    return problems;
}

}  // namespace voltlock
