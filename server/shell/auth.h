// Authentication and authorization tables (docs/security-auth.md): who may use the API and what
// each may do. Two files named by the config, the same on every replica, read at start and again
// on SIGHUP:
//
//   auth_token_file   one user a line: `user role[,role...] sha256-hex-of-token` (or `-` for a
//                     user known only by its TLS client certificate's CN); mode 0600 or stricter
//   auth_roles_file   one grant a line: `role permission[,permission...] resource`, where a
//                     resource is `key:PREFIX`, `lock:PREFIX`, `barrier:PREFIX` or `*` (all)
//
// Permissions: read, write, lock, watch, admin. The role `admin` holds every permission on
// everything without a line. `#` starts a comment; blank lines are skipped.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shell/config.h"
#include "shell/result.h"

namespace voltlock {

enum class Permission : uint8_t { read = 1, write = 2, lock = 4, watch = 8, admin = 16 };
const char* permission_name(Permission permission);
// `admin` is the whole cell (its auth tables, every session), so it is granted on `*` only: on a
// prefix it would grant nothing, and a role file or API call that asks for it is refused.
inline constexpr const char* kAdminOnEverythingOnly =
    "admin is granted on * only: it is the whole cell (the auth tables, every session), not a "
    "prefix";

enum class ResourceKind { key, lock, barrier };
const char* resource_kind_name(ResourceKind kind);

inline constexpr const char* kAdminRole = "admin";
inline constexpr size_t kMaxUserBytes = 64;

using TokenHash = std::array<uint8_t, 32>;  // SHA-256

struct AuthUser {
    std::string name;
    std::vector<std::string> roles;
    std::optional<TokenHash> token_hash;  // none: a certificate-only user
    uint64_t expires_ms = 0;  // a replicated token's expiry (wall-clock ms); 0: never
};

struct AuthGrant {
    uint8_t permissions = 0;                 // Permission bits
    std::optional<ResourceKind> kind;        // none: every kind (`*`)
    std::string prefix;
};

struct AuthTables {
    std::vector<AuthUser> users;
    std::map<std::string, std::vector<AuthGrant>> grants;  // by role

    const AuthUser* user(std::string_view name) const;
    // Whether `roles` allow `permission` on `name` (of `kind`): a grant on a prefix of it. For a
    // prefix read, watch or list, `name` is the prefix: a grant on "app/" covers "app/x" and
    // every key under it, not a list of everything ("").
    bool allows(const std::vector<std::string>& roles, Permission permission, ResourceKind kind,
                std::string_view name) const;
    bool is_admin(const std::vector<std::string>& roles) const;
};

TokenHash sha256(std::string_view bytes);
std::string hex(const TokenHash& hash);
// A new random token (32 bytes, hex), from the system's random source.
Result<std::string> make_token();

// Parses the two files' text; errors name the file's line.
Result<AuthTables> parse_auth_tables(std::string_view tokens_text, std::string_view roles_text);
// Reads the config's files (the token file must be 0600 or stricter), or no tables when auth is
// off (no auth_token_file).
Result<std::optional<AuthTables>> load_auth_tables(const DaemonConfig& config);
// --check-config: the auth files' problems, one per line.
std::vector<ConfigProblem> auth_problems(const DaemonConfig& config);

}  // namespace voltlock
