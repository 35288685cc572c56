// voltlockd init-cell: the configs it writes, and every command line it refuses.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "shell/auth.h"
#include "shell/cell_init.h"
#include "shell/tls.h"

using namespace voltlock;

namespace {

std::vector<std::string> words(const std::string& line)
{
    std::vector<std::string> out;
    std::istringstream in(line);
    for (std::string word; in >> word;) out.push_back(word);
    return out;
}

// The message init-cell refuses `line` with; fails the test if it accepts it.
std::string refusal(const std::string& line)
{
    auto plan = parse_init_cell(words(line), 77);
    REQUIRE_MESSAGE(!plan.ok(), "accepted: " << line);
    return plan.error().message();
}

struct TempDir {
    std::filesystem::path path;
    TempDir()
    {
        char name[] = "/tmp/vl-init-cell-XXXXXX";
        path = ::mkdtemp(name);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("init-cell: three hosts give three configs of one cell, each passing the config rules")
{
    auto plan = parse_init_cell(words("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out d"),
                                77);
    REQUIRE(plan.ok());
    auto configs = cell_configs(plan.value());
    REQUIRE(configs.ok());
    REQUIRE(configs.value().size() == 3);
    for (size_t r = 0; r < 3; r++) {
        const auto& [name, text] = configs.value()[r];
        CHECK(name == "r" + std::to_string(r) + ".json");
        auto config = parse_config(text);
        REQUIRE(config.ok());
        CHECK(config.value().cluster_id == 77);
        CHECK(config.value().replica == r);
        CHECK(config.value().replicas.size() == 3);
        CHECK(config.value().self().ip == "10.0.0." + std::to_string(r + 1));
        CHECK(config.value().self().udp_port == 7400);
        CHECK(config.value().self().http_port == 7480);
        CHECK(config.value().electrode == ElectrodeMode::off);
        CHECK(config.value().durability == Durability::snapshot);
        CHECK(config.value().data_dir == "/var/lib/voltlock/r" + std::to_string(r));
    }
}

TEST_CASE("init-cell: a host named twice runs its second replica on the next ports")
{
    auto plan = parse_init_cell(
        words("--replicas 5 --hosts 127.0.0.1,127.0.0.1,127.0.0.1,10.0.0.9,10.0.0.9 --out d "
              "--udp-port=9000 --http-port 9100 --durability sync --electrode on --interface lo "
              "--cluster-id 12345"),
        77);
    REQUIRE(plan.ok());
    auto configs = cell_configs(plan.value());
    REQUIRE(configs.ok());
    auto config = parse_config(configs.value()[0].second);
    REQUIRE(config.ok());
    const auto& replicas = config.value().replicas;
    const std::vector<std::tuple<std::string, int, int>> expected = {
        {"127.0.0.1", 9000, 9100}, {"127.0.0.1", 9001, 9101}, {"127.0.0.1", 9002, 9102},
        {"10.0.0.9", 9000, 9100},  {"10.0.0.9", 9001, 9101}};
    for (size_t r = 0; r < 5; r++) {
        CHECK(replicas[r].ip == std::get<0>(expected[r]));
        CHECK(replicas[r].udp_port == std::get<1>(expected[r]));
        CHECK(replicas[r].http_port == std::get<2>(expected[r]));
    }
    CHECK(config.value().cluster_id == 12345);
    CHECK(config.value().durability == Durability::sync);
    CHECK(config.value().electrode == ElectrodeMode::on);
    CHECK(config.value().interface == "lo");
}

TEST_CASE("init-cell: host names resolve to their IPv4 address")
{
    auto plan = parse_init_cell(words("--replicas 3 --hosts localhost,127.0.0.2,127.0.0.3 --out d"),
                                77);
    REQUIRE(plan.ok());
    CHECK(plan.value().hosts[0].name == "localhost");
    CHECK(plan.value().hosts[0].ip == "127.0.0.1");
}

TEST_CASE("init-cell: every bad command line is refused, naming the flag")
{
    const std::string hosts = " --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out d";
    CHECK(refusal("--hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out d").find("--replicas: is required") !=
          std::string::npos);
    CHECK(refusal("--replicas 3 --out d").find("--hosts: is required") != std::string::npos);
    CHECK(refusal("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3").find("--out: is required") !=
          std::string::npos);
    for (const char* count : {"1", "2", "4", "9", "three", "-3"})
        CHECK(refusal(std::string("--replicas ") + count + hosts)
                  .find("--replicas: a cell has 3, 5 or 7 replicas") != std::string::npos);
    CHECK(refusal("--replicas 5" + hosts).find("--hosts: names 3 hosts for 5 replicas") !=
          std::string::npos);
    CHECK(refusal("--replicas 3 --hosts 10.0.0.1,10.0.0.2 --out d").find("names 2 hosts") !=
          std::string::npos);
    CHECK(refusal("--replicas 3 --hosts 10.0.0.1,,10.0.0.3 --out d")
              .find("'' is neither an IPv4 address") != std::string::npos);
    CHECK(refusal("--replicas 3 --hosts 10.0.0.1,no-such-host.invalid,10.0.0.3 --out d")
              .find("'no-such-host.invalid' is neither an IPv4 address nor a name") !=
          std::string::npos);
    CHECK(refusal("--replicas 3" + hosts + " --electrode maybe")
              .find("--electrode: must be on or off") != std::string::npos);
    CHECK(refusal("--replicas 3" + hosts + " --electrode on")
              .find("--electrode: on needs --interface") != std::string::npos);
    CHECK(refusal("--replicas 3" + hosts + " --durability fsync")
              .find("--durability: must be \"snapshot\" or \"sync\"") != std::string::npos);
    for (const char* port : {"0", "65536", "http", "-1", "80x"}) {
        CHECK(refusal("--replicas 3" + hosts + " --udp-port " + port)
                  .find("--udp-port: must be a number from 1 to 65535") != std::string::npos);
        CHECK(refusal("--replicas 3" + hosts + " --http-port " + port)
                  .find("--http-port: must be a number from 1 to 65535") != std::string::npos);
    }
    CHECK(refusal("--replicas 3" + hosts + " --cluster-id 0")
              .find("--cluster-id: must be a number from 1 to 4294967295") != std::string::npos);
    CHECK(refusal("--replicas 3" + hosts + " --cluster-id 4294967296")
              .find("--cluster-id: must be a number") != std::string::npos);
    CHECK(refusal("--replicas 3" + hosts + " --replicas 3").find("--replicas: is given twice") !=
          std::string::npos);
    CHECK(refusal("--replicas 3" + hosts + " --port 1").find("unknown argument '--port'") !=
          std::string::npos);
    CHECK(refusal("--replicas 3" + hosts + " --udp-port").find("--udp-port: needs a value") !=
          std::string::npos);
    // Two replicas on one host whose UDP and HTTP ports meet.
    CHECK(refusal("--replicas 3 --hosts 127.0.0.1,127.0.0.1,10.0.0.3 --out d --udp-port 7480 "
                  "--http-port 7481")
              .find("the ports collide: replicas[1].udp_port: 127.0.0.1:7481 is also "
                    "replicas[0].http_port") != std::string::npos);
    CHECK(refusal("--replicas 3 --hosts 127.0.0.1,127.0.0.1,127.0.0.1 --out d --udp-port 65535")
              .find("more replicas than there are ports") != std::string::npos);
}

TEST_CASE("init-cell: writes the configs, and refuses a directory that has some, writing nothing")
{
    TempDir dir;
    auto plan = parse_init_cell(words("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out " +
                                      (dir.path / "cell").string()),
                                77);
    REQUIRE(plan.ok());
    REQUIRE(write_cell(plan.value()).ok());
    for (const char* name : {"r0.json", "r1.json", "r2.json"}) {
        std::ifstream file(dir.path / "cell" / name);
        std::stringstream text;
        text << file.rdbuf();
        CHECK(parse_config(text.str()).ok());
    }
    // Three configs, the CA's certificate and key, each replica's certificate and key, and the
    // cell's replication key, which every config names, readable by its owner only, and the
    // auth files (tokens, roles).
    CHECK(std::distance(std::filesystem::directory_iterator(dir.path / "cell"),
                        std::filesystem::directory_iterator()) == 3 + 2 + 3 * 2 + 1 + 2);
    auto config = load_config((dir.path / "cell" / "r0.json").string());
    REQUIRE_MESSAGE(config.ok(), config.error().message());
    CHECK(config.value().replication_key_file == "cell.key");
    CHECK(config.value().replication_keys.count == 1);
    CHECK((std::filesystem::status(dir.path / "cell" / "cell.key").permissions() &
           std::filesystem::perms::all) ==
          (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));

    // A second cell into the same directory: refused, and r0.json keeps the first cell's id.
    std::filesystem::remove(dir.path / "cell" / "r1.json");
    plan.value().cluster_id = 78;
    auto again = write_cell(plan.value());
    REQUIRE(!again.ok());
    CHECK(again.error().message().find("r0.json exists already") != std::string::npos);
    CHECK(!std::filesystem::exists(dir.path / "cell" / "r1.json"));
    std::ifstream first(dir.path / "cell" / "r0.json");
    std::stringstream text;
    text << first.rdbuf();
    CHECK(parse_config(text.str()).value().cluster_id == 77);
}

TEST_CASE("init-cell: the firewall line names every port a host uses; keys for voltlock only")
{
    auto spread = parse_init_cell(words("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out /x"),
                                  77);
    REQUIRE(spread.ok());
    std::string text = cell_instructions(spread.value(), "/e.conf");
    CHECK(text.find("Open udp/7400 and tcp/7480 between the hosts, and tcp/7480 to clients") !=
          std::string::npos);
    // The unit runs as voltlock (deploy/systemd): the key is its alone, like cell.key.
    CHECK(text.find("install -m 0600 -o voltlock -g voltlock /x/r1-key.pem /etc/voltlock/") !=
          std::string::npos);
    auto one_host = parse_init_cell(
        words("--replicas 3 --hosts 127.0.0.1,127.0.0.1,127.0.0.1 --out /x --udp-port 7600 "
              "--http-port 7680"),
        77);
    REQUIRE(one_host.ok());
    text = cell_instructions(one_host.value(), "/e.conf");
    CHECK(text.find("Open udp/7600-7602 and tcp/7680-7682 between the hosts, and tcp/7680-7682 "
                    "to clients") != std::string::npos);
}

TEST_CASE("init-cell: the instructions say what goes to which host")
{
    auto plan = parse_init_cell(words("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out /x "
                                      "--electrode on --interface eth0"),
                                77);
    REQUIRE(plan.ok());
    const std::string text = cell_instructions(plan.value(), "/usr/share/voltlock/electrode.conf");
    for (int r = 0; r < 3; r++) {
        const std::string name = "r" + std::to_string(r);
        CHECK(text.find("10.0.0." + std::to_string(r + 1) +
                        ":\n    install -m 0640 -g voltlock /x/" + name + ".json /etc/voltlock/" +
                        name + ".json") != std::string::npos);
        CHECK(text.find("cp /usr/share/voltlock/electrode.conf /etc/systemd/system/voltlockd@" +
                        name + ".service.d/") != std::string::npos);
        CHECK(text.find("systemctl enable --now voltlockd@" + name) != std::string::npos);
    }
    CHECK(text.find("cluster_id 77") != std::string::npos);
    CHECK(text.find("starts once all 3 replicas run, and then serves while 2 of 3 do") !=
          std::string::npos);
    // Every install command names what to copy and where (tokens once had no destination).
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind("    install ", 0) != 0) continue;
        std::istringstream words_of_line(line);
        std::vector<std::vector<std::string>> commands(1);  // split at &&
        for (std::string word; words_of_line >> word;) {
            if (word == "&&") commands.emplace_back();
            else if (word == "-m" || word == "-o" || word == "-g") words_of_line >> word;
            else if (word != "install") commands.back().push_back(word);
        }
        for (const auto& operands : commands) {
            REQUIRE_MESSAGE(operands.size() >= 2, line);
            CHECK_MESSAGE(operands.back().rfind("/etc/voltlock/", 0) == 0, line);
        }
    }
}

TEST_CASE("init-cell: TLS on by default, a CA and a certificate per replica that check out")
{
    TempDir dir;
    const std::string out = (dir.path / "cell").string();
    auto plan = parse_init_cell(
        words("--replicas 3 --hosts 127.0.0.1,127.0.0.1,127.0.0.1 --out " + out +
              " --config-dir " + out + " --udp-port 17400 --http-port 17480"),
        77);
    REQUIRE(plan.ok());
    REQUIRE(write_cell(plan.value()).ok());
    for (int r = 0; r < 3; r++) {
        const std::string name = "r" + std::to_string(r);
        auto config = load_config(out + "/" + name + ".json");
        REQUIRE(config.ok());
        CHECK(config.value().tls_cert_file == out + "/" + name + ".pem");
        CHECK(config.value().tls_key_file == out + "/" + name + "-key.pem");
        CHECK(config.value().tls_ca_file == out + "/ca.pem");
        // Readable, the key the certificate's, valid now, for 127.0.0.1, signed by the CA.
        for (const auto& problem : tls_problems(config.value())) FAIL(problem.line());
        CHECK((std::filesystem::status(out + "/" + name + "-key.pem").permissions() &
               std::filesystem::perms::group_all) == std::filesystem::perms::none);
    }
    // Another cell's certificate is not trusted by this cell's CA.
    TempDir other;
    auto other_plan = parse_init_cell(
        words("--replicas 3 --hosts 127.0.0.1,127.0.0.1,127.0.0.1 --out " +
              (other.path / "cell").string()),
        78);
    REQUIRE(other_plan.ok());
    REQUIRE(write_cell(other_plan.value()).ok());
    auto config = load_config(out + "/r0.json").value();
    config.tls_cert_file = (other.path / "cell" / "r0.pem").string();
    config.tls_key_file = (other.path / "cell" / "r0-key.pem").string();
    const auto problems = tls_problems(config);
    REQUIRE(problems.size() == 1);
    CHECK(problems.front().line().find("is not trusted by tls_ca_file") != std::string::npos);

    auto plain = parse_init_cell(words("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out " +
                                       out + "-plain --tls off --auth off"),
                                 79);
    REQUIRE(plain.ok());
    REQUIRE(write_cell(plain.value()).ok());
    // The configs and the replication key: no certificates.
    CHECK(std::distance(std::filesystem::directory_iterator(out + "-plain"),
                        std::filesystem::directory_iterator()) == 3 + 1);
    CHECK(!load_config(out + "-plain/r0.json").value().tls());
    CHECK(refusal("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out d --tls maybe")
              .find("--tls: must be on or off") != std::string::npos);
}

TEST_CASE("init-cell: auth on by default, the admin's token stored only hashed, in a 0600 file")
{
    TempDir dir;
    const std::string out = (dir.path / "cell").string();
    auto plan = parse_init_cell(words("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out " +
                                      out + " --config-dir " + out),
                                80);
    REQUIRE(plan.ok());
    CHECK(plan.value().auth);
    plan.value().admin_token = make_token().value();
    REQUIRE(write_cell(plan.value()).ok());
    const auto mode = std::filesystem::status(out + "/tokens").permissions();
    CHECK((mode & std::filesystem::perms::all) ==
          (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
    const DaemonConfig config = load_config(out + "/r0.json").value();
    REQUIRE(config.auth());
    CHECK(auth_problems(config).empty());
    const auto tables = load_auth_tables(config);
    REQUIRE(tables.ok());
    const AuthUser* admin = tables.value()->user("admin");
    REQUIRE(admin != nullptr);
    CHECK(admin->token_hash == sha256(plan.value().admin_token));
    CHECK(tables.value()->is_admin(admin->roles));
    std::ifstream tokens(out + "/tokens");
    std::stringstream text;
    text << tokens.rdbuf();
    CHECK(text.str().find(plan.value().admin_token) == std::string::npos);
    CHECK(cell_instructions(plan.value(), "").find(plan.value().admin_token) != std::string::npos);

    auto off = parse_init_cell(words("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out " +
                                     out + "-off --auth off"),
                               81);
    REQUIRE(off.ok());
    REQUIRE(write_cell(off.value()).ok());
    CHECK(!std::filesystem::exists(out + "-off/tokens"));
    CHECK(!load_config(out + "-off/r0.json").value().auth());
    CHECK(refusal("--replicas 3 --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out d --auth maybe")
              .find("--auth: must be on or off") != std::string::npos);
}

TEST_CASE("auth tables: grants cover names under their prefix, of their kind")
{
    const auto tables = parse_auth_tables("alice app-rw " + hex(sha256("t")) + "\nbob admin -\n",
                                          "app-rw read,write key:app/\napp-rw lock lock:jobs/\n");
    REQUIRE(tables.ok());
    const auto& t = tables.value();
    const std::vector<std::string> roles = t.user("alice")->roles;
    CHECK(t.allows(roles, Permission::read, ResourceKind::key, "app/x"));
    CHECK(t.allows(roles, Permission::write, ResourceKind::key, "app/"));
    CHECK_FALSE(t.allows(roles, Permission::read, ResourceKind::key, "ap"));
    CHECK_FALSE(t.allows(roles, Permission::read, ResourceKind::key, ""));
    CHECK_FALSE(t.allows(roles, Permission::watch, ResourceKind::key, "app/x"));
    CHECK_FALSE(t.allows(roles, Permission::read, ResourceKind::lock, "app/x"));
    CHECK(t.allows(roles, Permission::lock, ResourceKind::lock, "jobs/1"));
    CHECK(t.allows(t.user("bob")->roles, Permission::write, ResourceKind::barrier, "anything"));
    CHECK_FALSE(t.user("bob")->token_hash.has_value());
    for (const auto& [tokens, roles_text, problem] :
         {std::tuple{"a nope " + hex(sha256("t")), "", "'nope' is not in auth_roles_file"},
          std::tuple{std::string("a admin xyz"), "", "64 hex digits"},
          std::tuple{std::string("a admin -\na admin -"), "", "user 'a' twice"},
          std::tuple{std::string(""), "r fly key:a", "'fly' is not a permission"},
          std::tuple{std::string(""), "r read table:a", "is not a resource"},
          std::tuple{std::string(""), "r read", "want `role"}}) {
        const auto parsed = parse_auth_tables(tokens, roles_text);
        REQUIRE_FALSE(parsed.ok());
        CHECK(parsed.error().message().find(problem) != std::string::npos);
    }
}
