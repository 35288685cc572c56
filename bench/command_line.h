// The benchmark programs' command lines: parsed, or the usage printed.
#pragma once

#include <cstdio>
#include <exception>

namespace voltlock::bench {

// True if `parse(argc, argv, options)` took the command line. Else (it said false, or threw, as
// std::stoul does on a word that is not a number) prints `usage` to stderr and returns false:
// the program then exits 2.
template <typename Options, typename Parse>
bool parse_command_line(int argc, char** argv, Options& options, Parse parse, const char* usage)
{
    bool parsed = false;
    try {
        parsed = parse(argc, argv, options);
    } catch (const std::exception&) {
        parsed = false;
    }
    if (!parsed) std::fputs(usage, stderr);
    return parsed;
}

}  // namespace voltlock::bench
