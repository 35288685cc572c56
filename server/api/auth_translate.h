// JSON <-> the auth ops and tables (core/auth_ops.h, core/auth_state.h) for the admin endpoints
// under /v1/auth (docs/api.md, "Users, roles and tokens"). Pure, like translate.h: the endpoints
// (api/auth_admin.h) call these, the unit tests pin them. Every parser checks the JSON shape, the
// names and the datagram budget (check_op), so a returned op can be proposed as it is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "api/translate.h"
#include "core/auth_state.h"

namespace voltlock::api {

// PUT /v1/auth/roles/{role}: {"grants": [{"permissions": ["read", ...], "resource": "key:app/"}]}
// (resource: key:PREFIX, lock:PREFIX, barrier:PREFIX or *).
Parsed<LockOp> put_role_op(const std::string& role, std::string_view body,
                           uint32_t max_message_bytes);
// PUT /v1/auth/users/{user}: {"roles": ["app-rw", ...]}.
Parsed<LockOp> put_user_op(const std::string& user, std::string_view body,
                           uint32_t max_message_bytes);
// DELETE /v1/auth/roles/{role}, /v1/auth/users/{user}, /v1/auth/tokens/{id}: no body, or `{}`.
Parsed<LockOp> delete_role_op(const std::string& role, std::string_view body,
                              uint32_t max_message_bytes);
Parsed<LockOp> delete_user_op(const std::string& user, std::string_view body,
                              uint32_t max_message_bytes);
Parsed<LockOp> revoke_token_op(const std::string& id, std::string_view body,
                               uint32_t max_message_bytes);
// POST /v1/auth/tokens: {"user": "billing", "ttl_s": 3600} (ttl_s absent or 0: never expires).
// The token is made by the caller; only its hash goes into the op.
Parsed<LockOp> create_token_op(std::string_view body, const TokenDigest& hash,
                               uint32_t max_message_bytes);

// "key:app/" <-> a grant's scope and prefix; "*" is every kind.
std::string grant_resource(const RoleGrant& grant);
Json grant_json(const RoleGrant& grant);
Json role_json(const std::string& name, const RoleRecord& role);
Json user_json(const std::string& name, const UserRecord& user, const AuthState& state);
// Never the token: its id, user, and times.
Json token_json(const std::string& id, const TokenRecord& token);

}  // namespace voltlock::api
