// voltlockd --check-config: each rule a config can break, and each way it can fail to fit its
// host, gives one problem naming the field and the fix.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shell/config.h"
#include "shell/event_loop.h"
#include "shell/host_check.h"

using namespace voltlock;

namespace {

DaemonConfig loopback_cell(uint16_t first_port)
{
    DaemonConfig config;
    config.cluster_id = 9;
    config.replica = 0;
    for (uint16_t r = 0; r < 3; r++)
        config.replicas.push_back({"127.0.0.1", static_cast<uint16_t>(first_port + 2 * r),
                                   static_cast<uint16_t>(first_port + 2 * r + 1)});
    return config;
}

// A port the kernel just handed out for `type`, and so free (for a moment) on 127.0.0.1.
uint16_t free_port(int type)
{
    FileDescriptor fd(::socket(AF_INET, type, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    socklen_t size = sizeof address;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &size);
    return ntohs(address.sin_port);
}

// Holds 127.0.0.1:port (a listening TCP socket, or a bound UDP one) while it lives.
FileDescriptor hold(uint16_t port, int type)
{
    FileDescriptor fd(::socket(AF_INET, type, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    if (type == SOCK_STREAM) REQUIRE(::listen(fd.get(), 1) == 0);
    return fd;
}

// One problem a line, for CAPTURE and for comparing with an expected list.
std::string lines(const std::vector<ConfigProblem>& problems)
{
    std::string out;
    for (const auto& problem : problems) out += problem.line() + "\n";
    return out;
}

bool has(const std::vector<ConfigProblem>& problems, const std::string& field,
         const std::string& words)
{
    for (const auto& problem : problems)
        if (problem.field == field && problem.line().find(words) != std::string::npos &&
            !problem.fix.empty())
            return true;
    return false;
}

}  // namespace

TEST_CASE("check-config: a good config has no problem")
{
    DaemonConfig config = loopback_cell(free_port(SOCK_DGRAM));
    config.replicas[0] = {"127.0.0.1", free_port(SOCK_DGRAM), free_port(SOCK_STREAM)};
    CHECK(lines(config_problems(config)) == "");
    CHECK(lines(host_problems(config)) == "");
    CHECK(lines(interface_problems(config)) == "");
}

TEST_CASE("check-config: a wrong peer count names replicas and the fix")
{
    for (size_t count : {0, 2, 4, 17}) {
        DaemonConfig config = loopback_cell(20000);
        config.replicas.resize(count, PeerAddress{"127.0.0.9", 1, 2});
        for (size_t i = 3; i < count; i++)
            config.replicas[i] = {"127.0.0.9", static_cast<uint16_t>(2 * i),
                                  static_cast<uint16_t>(2 * i + 1)};
        const auto problems = config_problems(config);
        CAPTURE(lines(problems));
        CHECK(has(problems, "replicas", "lists " + std::to_string(count) +
                                            " replicas; a cell has an odd number from 1 to 15 (3, "
                                            "5 or 7 in production); fix: list every replica of "
                                            "the cell"));
    }
}

TEST_CASE("check-config: a duplicate address names both fields")
{
    DaemonConfig config = loopback_cell(20000);
    config.replicas[2].udp_port = config.replicas[0].udp_port;
    config.replicas[2].http_port = config.replicas[1].udp_port;
    const auto problems = config_problems(config);
    CAPTURE(lines(problems));
    CHECK(problems.size() == 2);
    CHECK(has(problems, "replicas[2].udp_port",
              "127.0.0.1:20000 is also replicas[0].udp_port; fix: give every replica's udp_port "
              "and http_port a port no other replica on 127.0.0.1 uses"));
    CHECK(has(problems, "replicas[2].http_port", "127.0.0.1:20002 is also replicas[1].udp_port"));
}

TEST_CASE("check-config: every other rule is its own line, all reported at once")
{
    DaemonConfig config = loopback_cell(20000);
    config.replica = 5;
    config.durability = Durability::sync;
    config.heartbeat_ticks = 40;
    config.log_level = "loud";
    const auto problems = config_problems(config);
    CAPTURE(lines(problems));
    CHECK(problems.size() == 4);
    CHECK(has(problems, "replica", "index 5 is not in replicas (0..2)"));
    CHECK(has(problems, "durability", "sync needs a data_dir"));
    CHECK(has(problems, "heartbeat_ticks", "40 is not less than view_change_timeout_ticks (30)"));
    CHECK(has(problems, "log_level", "'loud' is not a level"));
    CHECK(validate_config(config).error().message() == "config: " + problems.front().line());
}

TEST_CASE("check-config: every unknown field at once, each with the key it likely meant")
{
    const auto parsed = parse_config_fields(
        R"({"cluster_id": 1, "replica": 0, "durabilty": "sync", "tls_cert": "/x.pem", "zzzz": 1,
            "replicas": [{"ip": "127.0.0.1", "udp_port": 7701, "http_port": 7781}]})");
    REQUIRE(!parsed.ok());
    CHECK(parsed.error().message() ==
          "config: durabilty, tls_cert, zzzz: unknown fields; fix: durabilty: rename it to "
          "\"durability\"; tls_cert: rename it to \"tls_cert_file\"; zzzz: remove it (voltlockd "
          "--help lists every config key)");
}

TEST_CASE("check-config: a missing interface, with the one that carries the address as the fix")
{
    DaemonConfig config = loopback_cell(free_port(SOCK_DGRAM));
    config.electrode = ElectrodeMode::on;
    CHECK(lines(host_problems(config)) == "");  // the daemon starts, without Electrode
    auto problems = interface_problems(config);
    CAPTURE(lines(problems));
    CHECK(has(problems, "interface", "electrode is on but no interface is named for the eBPF "
                                     "programs; fix: set interface to \"lo\", which carries "
                                     "127.0.0.1"));

    config.interface = "vl-missing0";
    problems = interface_problems(config);
    CAPTURE(lines(problems));
    CHECK(has(problems, "interface", "no interface \"vl-missing0\" on this host; fix: set "
                                     "interface to \"lo\""));
    config.electrode = ElectrodeMode::off;  // named but not used: still not there
    CHECK(has(interface_problems(config), "interface", "no interface \"vl-missing0\""));
}

TEST_CASE("check-config: an address that is not this host's")
{
    DaemonConfig config = loopback_cell(20000);
    config.replicas[0].ip = "192.0.2.1";  // TEST-NET-1: on no host
    const auto problems = host_problems(config);
    CAPTURE(lines(problems));
    CHECK(problems.size() == 1);
    CHECK(has(problems, "replicas[0].ip",
              "192.0.2.1 (this replica's, replica 0) is not an address of this host; fix: set "
              "replica to this host's position"));
}

TEST_CASE("check-config: a port in use, UDP or HTTP, names the port's field and who to ask")
{
    DaemonConfig config = loopback_cell(20000);
    const uint16_t udp = free_port(SOCK_DGRAM);
    const uint16_t http = free_port(SOCK_STREAM);
    config.replicas[0] = {"127.0.0.1", udp, http};
    {
        FileDescriptor udp_holder = hold(udp, SOCK_DGRAM);
        FileDescriptor http_holder = hold(http, SOCK_STREAM);
        const auto problems = host_problems(config);
        CAPTURE(lines(problems));
        CHECK(problems.size() == 2);
        // The holder named by its pid (this test, which is no voltlockd of this config).
        const std::string by = " (pid " + std::to_string(::getpid()) + ")";
        CHECK(has(problems, "replicas[0].udp_port",
                  "127.0.0.1:" + std::to_string(udp) + "/udp is in use by another process" + by +
                  "; fix: stop what holds it (ss -ulnp 'sport = :" + std::to_string(udp) + "')"));
        CHECK(has(problems, "replicas[0].http_port",
                  "127.0.0.1:" + std::to_string(http) + "/tcp is in use by another process" + by +
                  "; fix: stop what holds it (ss -tlnp"));
    }
    CHECK(lines(host_problems(config)) == "");  // released: fine again
}
