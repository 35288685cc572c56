// The cell's replication key file (docs/security.md "Authenticated replication"): the secret
// that every replication datagram's MAC is keyed with. One key per line, 32 hex digits (128
// bits); blank lines and lines starting with '#' are ignored. The first key signs what this
// replica sends and verifies; a second, if present, only verifies, so that a key can be
// rotated replica by replica without the cell ever splitting. The file must be a regular file
// that nobody but its owner can read or write (mode 0600 or stricter): a key others can read
// authenticates nothing.
#pragma once

#include <string>

#include "shell/result.h"
#include "voltlock/wire.h"

namespace voltlock {

// Parses a key file's text. Errors name the line and what is wrong with it.
Result<vl_mac_keys> parse_replication_keys(const std::string& text);

// Reads and parses `path`, refusing a file that group or others may access.
Result<vl_mac_keys> load_replication_keys(const std::string& path);

// A fresh random key as a key file's line (32 hex digits, no newline).
Result<std::string> fresh_replication_key();

// Creates `path` (mode 0600; it must not exist) holding `key_lines` and a comment on what it is.
Result<Ok> write_replication_key_file(const std::string& path, const std::string& key_lines);

}  // namespace voltlock
