#include "rig.h"

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace rig {

namespace {

std::string env(const char* name)
{
    const char* value = std::getenv(name);
    if (!value || !*value)
        FAIL("the clib cell tests run under run_in_cell.py, which sets " << name);
    return value;
}

}  // namespace

std::string endpoints() { return env("VL_TEST_ENDPOINTS"); }

std::string unique(const std::string& what)
{
    static std::atomic<int> counter{0};
    return env("VL_TEST_RUN") + "/" + what + "/" + std::to_string(counter++);
}

void cell(const std::string& command, const std::string& args)
{
    const std::string line = env("VL_TEST_CELL_SCRIPT") + " " + command + " --name " +
                             env("VL_TEST_CELL") + " " + args + " >/dev/null";
    INFO(line);
    REQUIRE(std::system(line.c_str()) == 0);
}

int leader(vl_client* c)
{
    int found = -1;
    const bool known = eventually(std::chrono::seconds(20), [&] {
        for (size_t i = 0; i < vl_client_endpoint_count(c); i++) {
            char* text = nullptr;
            if (vl_info_get(c, "/v1/cluster", int(i), &text) != VL_OK) continue;
            const auto body = nlohmann::json::parse(text);
            vl_string_free(text);
            if (body["status"] == "normal" && body["leader"].is_number()) {
                found = body["leader"].get<int>();
                return true;
            }
        }
        return false;
    });
    REQUIRE(known);
    return found;
}

int pid(int replica)
{
    std::ifstream file(env("VL_TEST_CELL_STATE") + "/cell.json");
    const auto record = nlohmann::json::parse(file);
    for (const auto& r : record["replicas"])
        if (r["index"] == replica) return r["process"]["pid"].get<int>();
    FAIL("no replica " << replica);
    return -1;
}

std::string admin_token() { return env("VL_TEST_ADMIN_TOKEN"); }

vl_client* open_client(uint32_t command_timeout_ms, const std::string& list,
                       const std::string& token)
{
    vl_client_options options;
    vl_client_options_init(&options);
    options.command_timeout_ms = command_timeout_ms;
    options.dial_timeout_ms = 500;
    if (!token.empty()) options.token = token.c_str();
    char why[256];
    vl_client* c = nullptr;
    const std::string chosen = list.empty() ? endpoints() : list;
    REQUIRE_MESSAGE(vl_client_open(chosen.c_str(), &options, why, sizeof why, &c) == VL_OK, why);
    return c;
}

bool eventually(std::chrono::milliseconds timeout, const std::function<bool()>& condition)
{
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
        if (condition()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return condition();
}

long long elapsed_ms(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now() - start)
        .count();
}

}  // namespace rig
