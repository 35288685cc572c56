// The request-target parser (server/api/request_target.cpp) on any bytes: the raw target as the
// HTTP server hands it over. Properties: it never crashes; a refusal is a 400 whose error body
// serializes (the server sends it as JSON); an accepted target's path and parameters are no
// longer than what was sent (decoding only shrinks), and check_query() names a parameter that
// is really there. The same bytes, read as header lines, go to the framing and Host checks
// (api/request_framing.h), whose refusals are 400s that serialize too.
#include <algorithm>
#include <cctype>

#include "api/request_framing.h"
#include "api/request_target.h"
#include "fuzz_check.h"

using namespace voltlock;
using namespace voltlock::api;

namespace {

// "name: value" lines, names in lower case as the server keeps them.
std::vector<std::pair<std::string, std::string>> header_lines(std::string_view text)
{
    std::vector<std::pair<std::string, std::string>> headers;
    while (!text.empty()) {
        const std::string_view line = text.substr(0, text.find('\n'));
        text.remove_prefix(std::min(text.size(), line.size() + 1));
        const size_t colon = line.find(':');
        std::string name(line.substr(0, colon));
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        headers.emplace_back(std::move(name), colon == std::string_view::npos
                                                  ? std::string()
                                                  : std::string(line.substr(colon + 1)));
    }
    return headers;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string_view raw = fuzz::as_text(data, size);
    const auto headers = header_lines(raw);
    for (const auto& refused : {framing_error(headers), host_error("HTTP/1.1", headers)}) {
        if (!refused) continue;
        FUZZ_REQUIRE(refused->status == 400);
        FUZZ_REQUIRE(!json_text(error_body(*refused)).empty());
    }
    auto target = parse_target(raw);
    if (!target.ok()) {
        FUZZ_REQUIRE(target.error().status == 400);
        FUZZ_REQUIRE(!json_text(error_body(target.error())).empty());
        return 0;
    }
    size_t decoded = target.value().path.size();
    for (const auto& [name, value] : target.value().query) decoded += name.size() + value.size();
    FUZZ_REQUIRE(decoded <= raw.size());
    if (auto unknown = check_query(target.value(), {"prefix", "limit", "after", "encoding"})) {
        FUZZ_REQUIRE(unknown->status == 400);
        FUZZ_REQUIRE(!json_text(error_body(*unknown)).empty());
    } else {
        for (const auto& [name, value] : target.value().query)
            FUZZ_REQUIRE(target.value().has(name) && target.value().get(name) == value);
    }
    return 0;
}
