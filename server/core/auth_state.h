// Users, roles and tokens as replicated state (core/auth_ops.h has the ops): the tables, how an
// op changes them, and the checks of tables read from a snapshot, all pure and deterministic
// like the rest of the core (core/auth_codec.h has their encodings). LockMachine keeps an
// AuthState in its state and dispatches AuthOp here; the API layer (api/access.h) reads the
// tables as of the replica's applied op to authenticate and authorize requests.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/auth_ops.h"
#include "core/lock_ops.h"

namespace voltlock {

struct RoleRecord {
    std::vector<RoleGrant> grants;
    bool operator==(const RoleRecord&) const = default;
};

struct UserRecord {
    std::vector<std::string> roles;  // as PutUser gave them, without duplicates
    bool operator==(const UserRecord&) const = default;
};

struct TokenRecord {
    std::string user;
    TokenDigest hash{};
    uint64_t created_ms = 0;
    uint64_t expires_ms = 0;  // op time; 0: never
    bool operator==(const TokenRecord&) const = default;
};

struct AuthState {
    uint64_t revision = 0;  // auth changes applied (AuthResult::auth_revision)
    std::map<std::string, RoleRecord> roles;
    std::map<std::string, UserRecord> users;
    std::map<std::string, TokenRecord> tokens;  // by token_id()
    bool operator==(const AuthState&) const = default;
};

// Which table ErrorCode::not_found / already_exists names, in OpError::detail.
enum class AuthTable : uint8_t { user = 1, role = 2, token = 3 };

// A token's id: the first 8 bytes of its hash in hex. Shown in listings and used to revoke;
// it says nothing useful about the token (2^192 tokens share it).
std::string token_id(const TokenDigest& hash);
// Whether the token has expired at `now_ms` (an op timestamp, or the API's clock).
inline bool token_expired(const TokenRecord& token, uint64_t now_ms)
{
    return token.expires_ms != 0 && token.expires_ms <= now_ms;
}

// Names, counts, permission bits, scopes and ttl; nullopt when the op is well formed.
std::optional<Invalid> validate_auth_op(const AuthOp& op);
// Applies a valid op at the op's time `now_ms`: tokens expired by then are dropped first (so the
// tables do not grow with dead tokens). Fails without changing anything with not_found (a user
// or role the op names does not exist; detail: AuthTable) or already_exists.
struct AuthOutcome {
    ErrorCode code = ErrorCode::ok;
    AuthTable table = AuthTable::user;  // with an error
};
AuthOutcome apply_auth_op(AuthState& state, const AuthOp& op, uint64_t now_ms);

// The codec (the op's body, AuthResult, the snapshot's auth section) is core/auth_codec.h's
// layouts. A snapshot's tables are read as they come, then checked here: nullptr if every grant
// is valid, every role a user has exists (or is `admin`), and every token's user exists and the
// token is under its id; else what is wrong.
const char* broken_auth_state(const AuthState& state);

}  // namespace voltlock
