#include "core/auth_state.h"

#include <algorithm>

#include "core/overloaded.h"

namespace voltlock {

namespace {

std::optional<Invalid> check_auth_name(std::string_view name, const char* field)
{
    if (name.size() > kMaxAuthNameBytes) return Invalid{Violation::name_too_long, field};
    if (const Violation v = validate_name(name); v != Violation::none) return Invalid{v, field};
    return std::nullopt;
}

std::optional<Invalid> check_grant(const RoleGrant& grant)
{
    if (grant.permissions == 0 || (grant.permissions & ~kAllPermissionBits) != 0)
        return Invalid{Violation::permissions_invalid, "grants.permissions"};
    if (static_cast<uint8_t>(grant.scope) > kMaxGrantScope)
        return Invalid{Violation::permissions_invalid, "grants.resource"};
    if (grant.scope == GrantScope::all && !grant.prefix.empty())
        return Invalid{Violation::permissions_invalid, "grants.resource"};
    if (grant.prefix.size() > kMaxNameBytes)
        return Invalid{Violation::name_too_long, "grants.resource"};
    if (!grant.prefix.empty())
        if (const Violation v = validate_name(grant.prefix); v != Violation::none)
            return Invalid{v, "grants.resource"};
    return std::nullopt;
}

}  // namespace

std::string token_id(const TokenDigest& hash)
{
    static const char digits[] = "0123456789abcdef";
    std::string id;
    for (size_t i = 0; i < 8; i++) {
        id += digits[hash[i] >> 4];
        id += digits[hash[i] & 15];
    }
    return id;
}

std::optional<Invalid> validate_auth_op(const AuthOp& op)
{
    return std::visit(
        Overloaded{
            [](const PutRole& o) -> std::optional<Invalid> {
                if (auto bad = check_auth_name(o.role, "role")) return bad;
                if (o.role == kBuiltinAdminRole) return Invalid{Violation::reserved_name, "role"};
                if (o.grants.size() > kMaxRoleGrants) return Invalid{Violation::too_many, "grants"};
                for (const RoleGrant& g : o.grants)
                    if (auto bad = check_grant(g)) return bad;
                return std::nullopt;
            },
            [](const DeleteRole& o) -> std::optional<Invalid> {
                if (auto bad = check_auth_name(o.role, "role")) return bad;
                if (o.role == kBuiltinAdminRole) return Invalid{Violation::reserved_name, "role"};
                return std::nullopt;
            },
            [](const PutUser& o) -> std::optional<Invalid> {
                if (auto bad = check_auth_name(o.user, "user")) return bad;
                if (o.roles.size() > kMaxUserRoles) return Invalid{Violation::too_many, "roles"};
                for (const std::string& role : o.roles)
                    if (auto bad = check_auth_name(role, "roles")) return bad;
                return std::nullopt;
            },
            [](const DeleteUser& o) { return check_auth_name(o.user, "user"); },
            [](const CreateToken& o) -> std::optional<Invalid> {
                if (auto bad = check_auth_name(o.user, "user")) return bad;
                if (o.ttl_ms > kMaxTokenTtlMs)
                    return Invalid{Violation::ttl_out_of_range, "ttl_s"};
                return std::nullopt;
            },
            [](const RevokeToken& o) { return check_auth_name(o.id, "id"); },
        },
        op.change);
}

AuthOutcome apply_auth_op(AuthState& state, const AuthOp& op, uint64_t now_ms)
{
    std::erase_if(state.tokens, [&](const auto& entry) {
        return token_expired(entry.second, now_ms);
    });
    const auto fail = [](ErrorCode code, AuthTable table) { return AuthOutcome{code, table}; };
    const AuthOutcome outcome = std::visit(
        Overloaded{
            [&](const PutRole& o) {
                state.roles[o.role] = RoleRecord{o.grants};
                return AuthOutcome{};
            },
            [&](const DeleteRole& o) {
                if (state.roles.erase(o.role) == 0)
                    return fail(ErrorCode::not_found, AuthTable::role);
                for (auto& [name, user] : state.users) std::erase(user.roles, o.role);
                return AuthOutcome{};
            },
            [&](const PutUser& o) {
                UserRecord record;
                for (const std::string& role : o.roles) {
                    if (role != kBuiltinAdminRole && !state.roles.contains(role))
                        return fail(ErrorCode::not_found, AuthTable::role);
                    if (std::find(record.roles.begin(), record.roles.end(), role) ==
                        record.roles.end())
                        record.roles.push_back(role);
                }
                state.users[o.user] = std::move(record);
                return AuthOutcome{};
            },
            [&](const DeleteUser& o) {
                if (state.users.erase(o.user) == 0)
                    return fail(ErrorCode::not_found, AuthTable::user);
                std::erase_if(state.tokens,
                              [&](const auto& entry) { return entry.second.user == o.user; });
                return AuthOutcome{};
            },
            [&](const CreateToken& o) {
                if (!state.users.contains(o.user))
                    return fail(ErrorCode::not_found, AuthTable::user);
                const std::string id = token_id(o.hash);
                if (state.tokens.contains(id))
                    return fail(ErrorCode::already_exists, AuthTable::token);
                state.tokens[id] = TokenRecord{.user = o.user,
                                               .hash = o.hash,
                                               .created_ms = now_ms,
                                               .expires_ms = o.ttl_ms ? now_ms + o.ttl_ms : 0};
                return AuthOutcome{};
            },
            [&](const RevokeToken& o) {
                if (state.tokens.erase(o.id) == 0)
                    return fail(ErrorCode::not_found, AuthTable::token);
                return AuthOutcome{};
            },
        },
        op.change);
    // A failed op changes nothing it was asked to; the dead tokens it dropped were already
    // unusable. Either way the tables' revision counts ops that changed them.
    if (outcome.code == ErrorCode::ok) state.revision++;
    return outcome;
}

const char* broken_auth_state(const AuthState& state)
{
    for (const auto& [name, role] : state.roles)
        for (const RoleGrant& grant : role.grants)
            if (check_grant(grant)) return "a role's grant is invalid";
    for (const auto& [name, user] : state.users)
        for (const std::string& role : user.roles)
            if (role != kBuiltinAdminRole && !state.roles.contains(role))
                return "a user has a role that does not exist";
    for (const auto& [id, token] : state.tokens) {
        if (!state.users.contains(token.user)) return "a token's user does not exist";
        if (id != token_id(token.hash)) return "a token is not under its id";
    }
    return nullptr;
}

}  // namespace voltlock
