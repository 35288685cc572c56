#include "api/auth_admin.h"

#include "api/auth_translate.h"
#include "shell/auth.h"

namespace voltlock::api {

namespace {

ApiError not_found(const char* kind, const std::string& name)
{
    return ApiError{404, "not_found", std::string("no such ") + kind + " '" + name + "'",
                    Json{{"kind", kind}, {"name", name}}};
}

// A listing's body: the tables' revision with it, like every read's `revision`.
Json with_revisions(Json body, const LockMachine& machine)
{
    body["auth_revision"] = machine.state().auth.revision;
    body["revision"] = machine.revision();
    return body;
}

}  // namespace

AuthAdmin::AuthAdmin(const LockMachine* machine, uint32_t max_message_bytes, RunOp run_op,
                     ReadState read_state)
    : machine_(machine),
      max_message_bytes_(max_message_bytes),
      run_op_(std::move(run_op)),
      read_state_(std::move(read_state))
{
}

void AuthAdmin::install(const AddRoute& add)
{
    add("GET", "/v1/auth/roles", "/v1/auth/roles", {"stale"}, [this](const CallPtr& call) {
        return list(call, [](const AuthState& state) {
            Json roles = Json::array();
            for (const auto& [name, role] : state.roles) roles.push_back(role_json(name, role));
            return Json{{"roles", roles}};
        });
    });
    add("GET", R"(/v1/auth/roles/([^/]+))", "/v1/auth/roles/{role}", {"stale"},
        [this](const CallPtr& call) {
            return list(call, [name = call->match(1)](const AuthState& state) {
                const auto found = state.roles.find(name);
                if (found == state.roles.end()) return error_body(not_found("role", name));
                return role_json(name, found->second);
            });
        });
    add("PUT", R"(/v1/auth/roles/([^/]+))", "/v1/auth/roles/{role}", {},
        [this](const CallPtr& call) { return put_role(call); });
    add("DELETE", R"(/v1/auth/roles/([^/]+))", "/v1/auth/roles/{role}", {},
        [this](const CallPtr& call) {
            return run(call, delete_role_op(call->match(1), max_message_bytes_));
        });

    add("GET", "/v1/auth/users", "/v1/auth/users", {"stale"}, [this](const CallPtr& call) {
        return list(call, [](const AuthState& state) {
            Json users = Json::array();
            for (const auto& [name, user] : state.users)
                users.push_back(user_json(name, user, state));
            return Json{{"users", users}};
        });
    });
    add("GET", R"(/v1/auth/users/([^/]+))", "/v1/auth/users/{user}", {"stale"},
        [this](const CallPtr& call) {
            return list(call, [name = call->match(1)](const AuthState& state) {
                const auto found = state.users.find(name);
                if (found == state.users.end()) return error_body(not_found("user", name));
                return user_json(name, found->second, state);
            });
        });
    add("PUT", R"(/v1/auth/users/([^/]+))", "/v1/auth/users/{user}", {},
        [this](const CallPtr& call) { return put_user(call); });
    add("DELETE", R"(/v1/auth/users/([^/]+))", "/v1/auth/users/{user}", {},
        [this](const CallPtr& call) {
            return run(call, delete_user_op(call->match(1), max_message_bytes_));
        });

    add("GET", "/v1/auth/tokens", "/v1/auth/tokens", {"stale"}, [this](const CallPtr& call) {
        return list(call, [](const AuthState& state) {
            Json tokens = Json::array();
            for (const auto& [id, token] : state.tokens) tokens.push_back(token_json(id, token));
            return Json{{"tokens", tokens}};
        });
    });
    add("POST", "/v1/auth/tokens", "/v1/auth/tokens", {},
        [this](const CallPtr& call) { return create_token(call); });
    add("DELETE", R"(/v1/auth/tokens/([^/]+))", "/v1/auth/tokens/{id}", {},
        [this](const CallPtr& call) {
            return run(call, revoke_token_op(call->match(1), max_message_bytes_));
        });
}

Served AuthAdmin::run(const CallPtr& call, Parsed<LockOp> op)
{
    run_op_(call, VL_TRY(std::move(op)), [call](const OpResult& result) {
        call->answer_json(200, result_json(result, ValueEncoding::automatic));
    });
    return answering;
}

Served AuthAdmin::list(const CallPtr& call, std::function<Json(const AuthState&)> body)
{
    const LockMachine* machine = machine_;
    return read_state_(call, [machine, body = std::move(body)] {
        Json json = body(machine->state().auth);
        // An error body (a name not found) keeps its shape; its status comes from "status".
        if (json.contains("code"))
            json["status"] = 404;
        else
            json = with_revisions(std::move(json), *machine);
        return json;
    });
}

Served AuthAdmin::put_role(const CallPtr& call)
{
    return run(call, put_role_op(call->match(1), call->body, max_message_bytes_));
}

Served AuthAdmin::put_user(const CallPtr& call)
{
    return run(call, put_user_op(call->match(1), call->body, max_message_bytes_));
}

Served AuthAdmin::create_token(const CallPtr& call)
{
    auto token = make_token();
    if (!token.ok()) return ApiError{500, "internal", token.error().message(), Json::object()};
    const TokenDigest hash = sha256(token.value());
    const LockOp op = VL_TRY(create_token_op(call->body, hash, max_message_bytes_));
    const CreateToken& create = std::get<CreateToken>(std::get<AuthOp>(op).change);
    run_op_(call, op,
            [call, secret = token.value(), id = token_id(hash), user = create.user,
             ttl_s = create.ttl_ms / 1000](const OpResult& result) {
                const auto& r = std::get<AuthResult>(result);
                // The only time the token is shown: the replicas keep its hash.
                call->answer_json(201, Json{{"token", secret},
                                            {"id", id},
                                            {"user", user},
                                            {"ttl_s", ttl_s},
                                            {"auth_revision", r.auth_revision},
                                            {"revision", r.revision}});
            });
    return answering;
}

}  // namespace voltlock::api
