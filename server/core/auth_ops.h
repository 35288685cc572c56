// The auth ops (docs/security-auth.md, "Users, roles and tokens through the API"): users, roles
// and bearer tokens as replicated state, changed through the log like any other state, so that
// every replica enforces the same rules at the same op. They travel as one LockOp alternative,
// AuthOp (op code `auth`); core/auth_state.h applies and checks them, core/auth_codec.h
// encodes them.
//
// Encoding, after the op code `auth` (lock_ops.h's conventions: little-endian, str = u16 length):
//   u8 kind (AuthOpKind), then
//   put_role      str role, u8 count, count x (u8 permissions, u8 scope, str prefix)
//   delete_role   str role
//   put_user      str user, u8 count, count x str role
//   delete_user   str user
//   create_token  str user, 32 bytes SHA-256 of the token, u64 ttl_ms (0: never expires)
//   revoke_token  str id
// The token itself never enters the log: the API layer makes it (32 random bytes), answers it
// once, and proposes only its hash.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace voltlock {

inline constexpr size_t kMaxAuthNameBytes = 64;  // user and role names (recorded in sessions)
inline constexpr size_t kMaxRoleGrants = 32;
inline constexpr size_t kMaxUserRoles = 32;
inline constexpr uint64_t kMaxTokenTtlMs = uint64_t{10} * 366 * 86'400'000;  // ten years
inline constexpr const char* kBuiltinAdminRole = "admin";  // every permission on everything

using TokenDigest = std::array<uint8_t, 32>;  // SHA-256 of the token

// Permission bits, as shell/auth.h's Permission: read 1, write 2, lock 4, watch 8, admin 16.
inline constexpr uint8_t kAllPermissionBits = 1 | 2 | 4 | 8 | 16;
// Their names in the API's JSON (and libvoltlock's, which checks a role before sending it).
inline constexpr std::array<std::pair<const char*, uint8_t>, 5> kPermissionNames{{
    {"read", 1}, {"write", 2}, {"lock", 4}, {"watch", 8}, {"admin", 16}}};
// What a grant covers: every kind (`*`), or names of one kind starting with the prefix.
enum class GrantScope : uint8_t { all = 0, key = 1, lock = 2, barrier = 3 };
inline constexpr uint8_t kMaxGrantScope = 3;
// A grant's resource in the API is `<scope>:PREFIX`, or `*` for GrantScope::all.
inline constexpr std::array<std::pair<const char*, GrantScope>, 3> kGrantScopeNames{{
    {"key", GrantScope::key}, {"lock", GrantScope::lock}, {"barrier", GrantScope::barrier}}};

struct RoleGrant {
    uint8_t permissions = 0;  // bits above, at least one
    GrantScope scope = GrantScope::all;
    std::string prefix;       // "" with scope all
    bool operator==(const RoleGrant&) const = default;
};

// Creates the role or replaces its grants.
struct PutRole {
    std::string role;
    std::vector<RoleGrant> grants;
    bool operator==(const PutRole&) const = default;
};

// Removes the role, and takes it from every user that has it (as etcd's role delete does).
struct DeleteRole {
    std::string role;
    bool operator==(const DeleteRole&) const = default;
};

// Creates the user or replaces its roles; each role is `admin` or one PutRole made.
struct PutUser {
    std::string user;
    std::vector<std::string> roles;
    bool operator==(const PutUser&) const = default;
};

// Removes the user and revokes its tokens. Its sessions keep their owner.
struct DeleteUser {
    std::string user;
    bool operator==(const DeleteUser&) const = default;
};

// Records a token of `user`: its hash, and its expiry, `ttl_ms` after the op's timestamp (the
// leader's clock when it ordered the op, as for leases).
struct CreateToken {
    std::string user;
    TokenDigest hash{};
    uint64_t ttl_ms = 0;  // 0: never expires
    bool operator==(const CreateToken&) const = default;
};

// Removes a token by its id (token_id(): 16 hex digits of its hash).
struct RevokeToken {
    std::string id;
    bool operator==(const RevokeToken&) const = default;
};

// Alternatives in AuthOpKind order: index + 1 is the kind.
enum class AuthOpKind : uint8_t {
    put_role = 1,
    delete_role = 2,
    put_user = 3,
    delete_user = 4,
    create_token = 5,
    revoke_token = 6,
};
using AuthChange =
    std::variant<PutRole, DeleteRole, PutUser, DeleteUser, CreateToken, RevokeToken>;

struct AuthOp {
    AuthChange change;
    bool operator==(const AuthOp&) const = default;
};

// u64 auth_revision. The auth tables have a revision of their own (etcd's auth revision): auth
// changes make no watch events, so they leave the key/lock revision as it is.
struct AuthResult {
    uint64_t revision = 0;       // the key/lock revision, unchanged
    uint64_t auth_revision = 0;  // after this op
    bool operator==(const AuthResult&) const = default;
};

}  // namespace voltlock
