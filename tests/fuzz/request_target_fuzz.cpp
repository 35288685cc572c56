// The request-target parser (server/api/request_target.cpp) on any bytes: the raw target as the
// HTTP server hands it over. Properties: it never crashes; a refusal is a 400 whose error body
// serializes (the server sends it as JSON); an accepted target's path and parameters are no
// longer than what was sent (decoding only shrinks), and check_query() names a parameter that
// is really there.
#include "api/request_target.h"
#include "fuzz_check.h"

using namespace voltlock;
using namespace voltlock::api;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string_view raw = fuzz::as_text(data, size);
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
