// The daemon's config parser (server/shell/config.cpp parse_config): the JSON an operator
// writes, read at start, on --check-config and on SIGHUP. Properties: no crash and no exception
// on any bytes (a bad file is an error saying what is wrong, never an abort); an accepted config
// names its own replica among the cell's.
#include <string>

#include "fuzz_check.h"
#include "shell/config.h"

using namespace voltlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string text(fuzz::as_text(data, size));
    auto config = parse_config(text);
    if (!config.ok()) {
        FUZZ_REQUIRE(!config.error().context.empty());
        return 0;
    }
    FUZZ_REQUIRE(config.value().replica < config.value().replicas.size());
    return 0;
}
