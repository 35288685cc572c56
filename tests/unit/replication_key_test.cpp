// The replication key file (server/shell/replication_key.h, docs/security.md): what a good one
// holds, every way a bad one is refused (and why), and that a generated one loads.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "shell/config.h"
#include "shell/replication_key.h"

namespace voltlock {
namespace {

const std::string key_a = "000102030405060708090a0b0c0d0e0f";
const std::string key_b = "F0E1D2C3B4A5968778695A4B3C2D1E0F";

struct TempDir {
    TempDir()
    {
        char pattern[] = "/tmp/vl-key-test-XXXXXX";
        path = ::mkdtemp(pattern);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string file(const std::string& name, const std::string& text, mode_t mode) const
    {
        const std::string full = path + "/" + name;
        std::ofstream(full) << text;
        ::chmod(full.c_str(), mode);
        return full;
    }
    std::string path;
};

std::string error_of(const Result<vl_mac_keys>& r) { return r.ok() ? "ok" : r.error().message(); }

}  // namespace

TEST_CASE("replication key: one key, or two during a rotation, with comments and blank lines")
{
    auto one = parse_replication_keys("# the cell's key\n\n" + key_a + "\n");
    REQUIRE(one.ok());
    CHECK(one.value().count == 1);
    CHECK(one.value().key[0].k0 == 0x0706050403020100ull);  // bytes little-endian, as SipHash
    CHECK(one.value().key[0].k1 == 0x0F0E0D0C0B0A0908ull);
    auto two = parse_replication_keys("  " + key_b + "  \r\n" + key_a);
    REQUIRE(two.ok());
    CHECK(two.value().count == 2);
    CHECK(two.value().key[0].k0 == 0x8796A5B4C3D2E1F0ull);
    CHECK(two.value().key[1].k0 == 0x0706050403020100ull);
}

TEST_CASE("replication key: bad files are refused naming the line and the problem")
{
    CHECK(error_of(parse_replication_keys("")) == "no key in the file");
    CHECK(error_of(parse_replication_keys("# only a comment\n")) == "no key in the file");
    CHECK(error_of(parse_replication_keys(key_a.substr(1))) ==
          "line 1: a key is 32 hex digits (128 bits)");
    CHECK(error_of(parse_replication_keys("\n" + key_a + "0")) ==
          "line 2: a key is 32 hex digits (128 bits)");
    CHECK(error_of(parse_replication_keys("zz" + key_a.substr(2))) ==
          "line 1: a key is 32 hex digits (128 bits)");
    CHECK(error_of(parse_replication_keys(std::string(32, '0'))) ==
          "line 1: the all-zero key is no secret");
    CHECK(error_of(parse_replication_keys(key_a + "\n" + key_b + "\n" + key_a)) ==
          "line 3: more than 2 keys (the current one, and one more during a rotation)");
}

TEST_CASE("replication key: a file others may read or write is refused, with the fix")
{
    TempDir dir;
    CHECK(load_replication_keys(dir.file("ok.key", key_a, 0600)).ok());
    CHECK(load_replication_keys(dir.file("ro.key", key_a, 0400)).ok());
    for (const mode_t mode : {0640, 0604, 0660, 0644, 0666}) {
        CAPTURE(mode);
        const std::string path = dir.file("open.key", key_a, mode);
        const std::string error = error_of(load_replication_keys(path));
        CHECK(error.find("lets others read or change the key; fix: chmod 600 " + path) !=
              std::string::npos);
    }
    CHECK(error_of(load_replication_keys(dir.path)).find("not a regular file") !=
          std::string::npos);
    CHECK(error_of(load_replication_keys(dir.path + "/missing.key")).find("No such file") !=
          std::string::npos);
}

TEST_CASE("replication key: a generated key file is 0600, loads, and is never overwritten")
{
    TempDir dir;
    auto key = fresh_replication_key();
    REQUIRE(key.ok());
    CHECK(key.value().size() == 32);
    CHECK(key.value() != fresh_replication_key().value());
    const std::string path = dir.path + "/cell.key";
    REQUIRE(write_replication_key_file(path, key.value()).ok());
    struct stat info{};
    REQUIRE(::stat(path.c_str(), &info) == 0);
    CHECK((info.st_mode & 0777) == 0600);
    auto loaded = load_replication_keys(path);
    REQUIRE(loaded.ok());
    CHECK(loaded.value().count == 1);
    CHECK(loaded.value().key[0].k0 == parse_replication_keys(key.value()).value().key[0].k0);
    CHECK(!write_replication_key_file(path, key.value()).ok());
}

TEST_CASE("replication key: the config's replication_key_file is read beside the config")
{
    TempDir dir;
    dir.file("cell.key", key_a, 0600);
    const std::string config =
        R"({"cluster_id": 7, "replica": 0, "replication_key_file": "cell.key",
        "replicas": [{"ip": "127.0.0.1", "udp_port": 7400, "http_port": 7480}]})";
    const std::string config_path = dir.file("r0.json", config, 0640);
    auto loaded = load_config(config_path);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().message());
    CHECK(loaded.value().replication_keys.count == 1);
    ::chmod((dir.path + "/cell.key").c_str(), 0644);
    auto refused = load_config(config_path);
    REQUIRE(!refused.ok());
    CHECK(refused.error().message().find("config: replication_key_file: ") == 0);
}

}  // namespace voltlock
