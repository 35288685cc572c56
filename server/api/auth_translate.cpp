#include "api/auth_translate.h"

#include "shell/auth.h"

namespace voltlock::api {

namespace {

ApiError invalid(std::string_view field, std::string message)
{
    return ApiError{400, "invalid_argument", std::string(field) + ": " + message,
                    Json{{"field", field}}};
}

// User and role names: check_name's rules, and at most kMaxAuthNameBytes.
std::optional<ApiError> check_auth_name(std::string_view field, const std::string& name)
{
    if (name.size() > kMaxAuthNameBytes)
        return invalid(field, "longer than " + std::to_string(kMaxAuthNameBytes) + " bytes");
    return check_name(field, name, false);
}

Parsed<RoleGrant> parse_grant(const Json& json)
{
    if (!json.is_object() || !json.contains("permissions") || !json.contains("resource"))
        return invalid("grants", "each grant is {\"permissions\": [...], \"resource\": ...}");
    for (const auto& [field, _] : json.items())
        if (field != "permissions" && field != "resource")
            return ApiError{400, "unknown_field", "unknown field 'grants[]." + field + "'",
                            Json{{"field", field}, {"allowed", {"permissions", "resource"}}}};
    RoleGrant grant;
    const Json& permissions = json["permissions"];
    if (!permissions.is_array() || permissions.empty())
        return invalid("grants.permissions",
                       "a non-empty list of read, write, lock, watch, admin");
    for (const Json& p : permissions) {
        uint8_t bit = 0;
        for (const auto& [name, value] : kPermissionNames)
            if (p.is_string() && p.get<std::string>() == name) bit = value;
        if (bit == 0)
            return invalid("grants.permissions",
                           p.dump() + " is not a permission (read, write, lock, watch, admin)");
        grant.permissions |= bit;
    }
    const Json& resource = json["resource"];
    const std::string text = resource.is_string() ? resource.get<std::string>() : "";
    if (text == "*") return grant;
    const size_t colon = text.find(':');
    bool known = false;
    for (const auto& [kind, scope] : kGrantScopeNames)
        if (colon != std::string::npos && text.compare(0, colon, kind) == 0 &&
            colon == std::string_view(kind).size()) {
            grant.scope = scope;
            known = true;
        }
    if (!known)
        return invalid("grants.resource",
                       resource.dump() + " is not key:PREFIX, lock:PREFIX, barrier:PREFIX or *");
    grant.prefix = text.substr(colon + 1);
    if (grant.permissions & uint8_t(Permission::admin))
        return invalid("grants.permissions", kAdminOnEverythingOnly);
    if (!grant.prefix.empty())
        if (auto bad = check_name("grants.resource", grant.prefix, false)) return *bad;
    return grant;
}

Parsed<LockOp> checked(AuthChange change, uint32_t max_message_bytes)
{
    LockOp op = AuthOp{std::move(change)};
    if (auto bad = check_op(op, max_message_bytes)) return *bad;
    return op;
}

}  // namespace

Parsed<LockOp> put_role_op(const std::string& role, std::string_view body,
                           uint32_t max_message_bytes)
{
    if (auto bad = check_auth_name("role", role)) return *bad;
    if (role == kBuiltinAdminRole)
        return invalid("role", "'admin' is built in (every permission on everything) and "
                               "cannot be changed");
    auto json = parse_object(body, {"grants"});
    if (!json.ok()) return json.error();
    const Json& grants = json.value().contains("grants") ? json.value()["grants"] : Json();
    if (!grants.is_array())
        return invalid("grants", "required: a list of {\"permissions\", \"resource\"}");
    if (grants.size() > kMaxRoleGrants)
        return invalid("grants", "at most " + std::to_string(kMaxRoleGrants) + " a role");
    PutRole put{.role = role, .grants = {}};
    for (const Json& g : grants) {
        auto grant = parse_grant(g);
        if (!grant.ok()) return grant.error();
        put.grants.push_back(std::move(grant.value()));
    }
    return checked(std::move(put), max_message_bytes);
}

Parsed<LockOp> put_user_op(const std::string& user, std::string_view body,
                           uint32_t max_message_bytes)
{
    if (auto bad = check_auth_name("user", user)) return *bad;
    auto json = parse_object(body, {"roles"});
    if (!json.ok()) return json.error();
    const Json& roles = json.value().contains("roles") ? json.value()["roles"] : Json();
    if (!roles.is_array()) return invalid("roles", "required: a list of role names");
    if (roles.size() > kMaxUserRoles)
        return invalid("roles", "at most " + std::to_string(kMaxUserRoles) + " a user");
    PutUser put{.user = user, .roles = {}};
    for (const Json& role : roles) {
        if (!role.is_string()) return invalid("roles", "role names are strings");
        if (auto bad = check_auth_name("roles", role.get<std::string>())) return *bad;
        put.roles.push_back(role.get<std::string>());
    }
    return checked(std::move(put), max_message_bytes);
}

Parsed<LockOp> delete_role_op(const std::string& role, std::string_view body,
                              uint32_t max_message_bytes)
{
    if (auto bad = check_auth_name("role", role)) return *bad;
    VL_TRY(parse_object(body, {}));
    if (role == kBuiltinAdminRole)
        return invalid("role", "'admin' is built in and cannot be deleted");
    return checked(DeleteRole{role}, max_message_bytes);
}

Parsed<LockOp> delete_user_op(const std::string& user, std::string_view body,
                              uint32_t max_message_bytes)
{
    if (auto bad = check_auth_name("user", user)) return *bad;
    VL_TRY(parse_object(body, {}));
    return checked(DeleteUser{user}, max_message_bytes);
}

Parsed<LockOp> revoke_token_op(const std::string& id, std::string_view body,
                               uint32_t max_message_bytes)
{
    if (id.size() != 16 || id.find_first_not_of("0123456789abcdef") != std::string::npos)
        return invalid("id", "a token id is 16 lowercase hex digits (GET /v1/auth/tokens)");
    VL_TRY(parse_object(body, {}));
    return checked(RevokeToken{id}, max_message_bytes);
}

Parsed<LockOp> create_token_op(std::string_view body, const TokenDigest& hash,
                               uint32_t max_message_bytes)
{
    auto json = parse_object(body, {"user", "ttl_s"});
    if (!json.ok()) return json.error();
    const Json& object = json.value();
    if (!object.contains("user") || !object["user"].is_string())
        return invalid("user", "required: the user the token authenticates");
    const std::string user = object["user"].get<std::string>();
    if (auto bad = check_auth_name("user", user)) return *bad;
    uint64_t ttl_s = 0;
    if (object.contains("ttl_s")) {
        const Json& ttl = object["ttl_s"];
        if (!ttl.is_number_unsigned() || ttl.get<uint64_t>() > kMaxTokenTtlMs / 1000)
            return invalid("ttl_s", "whole seconds, 0 (never expires) to " +
                                        std::to_string(kMaxTokenTtlMs / 1000));
        ttl_s = ttl.get<uint64_t>();
    }
    return checked(CreateToken{.user = user, .hash = hash, .ttl_ms = ttl_s * 1000},
                   max_message_bytes);
}

std::string grant_resource(const RoleGrant& grant)
{
    for (const auto& [kind, scope] : kGrantScopeNames)
        if (grant.scope == scope) return std::string(kind) + ":" + grant.prefix;
    return "*";
}

Json grant_json(const RoleGrant& grant)
{
    Json permissions = Json::array();
    for (const auto& [name, bit] : kPermissionNames)
        if (grant.permissions & bit) permissions.push_back(name);
    return Json{{"permissions", permissions}, {"resource", grant_resource(grant)}};
}

Json role_json(const std::string& name, const RoleRecord& role)
{
    Json grants = Json::array();
    for (const RoleGrant& grant : role.grants) grants.push_back(grant_json(grant));
    return Json{{"name", name}, {"grants", grants}};
}

Json user_json(const std::string& name, const UserRecord& user, const AuthState& state)
{
    Json tokens = Json::array();
    for (const auto& [id, token] : state.tokens)
        if (token.user == name) tokens.push_back(id);
    return Json{{"name", name}, {"roles", user.roles}, {"tokens", tokens}};
}

Json token_json(const std::string& id, const TokenRecord& token)
{
    return Json{{"id", id},
                {"user", token.user},
                {"created_ms", token.created_ms},
                {"expires_ms", token.expires_ms ? Json(token.expires_ms) : Json(nullptr)}};
}

}  // namespace voltlock::api
