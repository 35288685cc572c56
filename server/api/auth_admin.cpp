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

AuthAdmin::AuthAdmin(const LockMachine* machine, uint32_t max_message_bytes, LeaderPath& leader,
                     RunOp run_op, ReadState read_state)
    : machine_(machine),
      max_message_bytes_(max_message_bytes),
      leader_(leader),
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
    add("GET", "/v1/auth/roles/{role}", "/v1/auth/roles/{role}", {"stale"},
        [this](const CallPtr& call) {
            return list(call, [name = call->path_param](const AuthState& state) {
                const auto found = state.roles.find(name);
                if (found == state.roles.end()) return error_body(not_found("role", name));
                return role_json(name, found->second);
            });
        });
    add("PUT", "/v1/auth/roles/{role}", "/v1/auth/roles/{role}", {},
        [this](const CallPtr& call) { return put_role(call); });
    add("DELETE", "/v1/auth/roles/{role}", "/v1/auth/roles/{role}", {},
        [this](const CallPtr& call) {
            return run(call, delete_role_op(call->path_param, call->body, max_message_bytes_));
        });

    add("GET", "/v1/auth/users", "/v1/auth/users", {"stale"}, [this](const CallPtr& call) {
        return list(call, [](const AuthState& state) {
            Json users = Json::array();
            for (const auto& [name, user] : state.users)
                users.push_back(user_json(name, user, state));
            return Json{{"users", users}};
        });
    });
    add("GET", "/v1/auth/users/{user}", "/v1/auth/users/{user}", {"stale"},
        [this](const CallPtr& call) {
            return list(call, [name = call->path_param](const AuthState& state) {
                const auto found = state.users.find(name);
                if (found == state.users.end()) return error_body(not_found("user", name));
                return user_json(name, found->second, state);
            });
        });
    add("PUT", "/v1/auth/users/{user}", "/v1/auth/users/{user}", {},
        [this](const CallPtr& call) { return put_user(call); });
    add("DELETE", "/v1/auth/users/{user}", "/v1/auth/users/{user}", {},
        [this](const CallPtr& call) {
            return run(call, delete_user_op(call->path_param, call->body, max_message_bytes_));
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
    add("DELETE", "/v1/auth/tokens/{id}", "/v1/auth/tokens/{id}", {},
        [this](const CallPtr& call) {
            return run(call, revoke_token_op(call->path_param, call->body, max_message_bytes_));
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
    return run(call, put_role_op(call->path_param, call->body, max_message_bytes_));
}

Served AuthAdmin::put_user(const CallPtr& call)
{
    return run(call, put_user_op(call->path_param, call->body, max_message_bytes_));
}

Served AuthAdmin::create_token(const CallPtr& call)
{
    VL_TRY(create_token_op(call->body, TokenDigest{}, max_message_bytes_));  // 400 here, at once
    // The secret is made at the leader, and shown only if the tokens the leader applied hold its
    // hash. A request retried with the same client id and request number after its answer was
    // lost is answered by VR's client table with the first attempt's result, which was for
    // another secret, now shown to nobody: that retry gets 409, not a token that does not work.
    leader_.at_leader(call, 0, [this, call](const LeaderPath::AtLeader& at,
                                            LeaderPath::NotLeader not_leader) {
        auto token = make_token();
        if (!token.ok())
            return call->fail(ApiError{500, "internal", token.error().message(), Json::object()});
        const TokenDigest hash = sha256(token.value());
        const LockOp op = create_token_op(call->body, hash, max_message_bytes_).value();
        const CreateToken& create = std::get<CreateToken>(std::get<AuthOp>(op).change);
        const std::string id = token_id(hash);
        const LockMachine* machine = machine_;
        auto held = [machine, id] { return Json(machine->state().auth.tokens.contains(id)); };
        leader_.propose(
            at.identity, encode_op(op), at.until, std::move(held),
            [call, not_leader, identity = at.identity, secret = token.value(), id,
             user = create.user, ttl_s = create.ttl_ms / 1000](LeaderPath::Proposed proposed) {
                using Kind = LeaderPath::Proposed::Kind;
                if (proposed.kind == Kind::not_leader) return not_leader();
                if (proposed.kind == Kind::stale)
                    return call->fail(stale_request_error(identity, proposed.latest));
                if (proposed.kind == Kind::reused)
                    return call->fail(reused_request_error(identity));
                if (proposed.kind == Kind::timed_out)
                    return call->fail(unavailable("the token was not committed in time"));
                auto decoded = decode_result(proposed.result);
                const auto* r = decoded.ok() ? std::get_if<AuthResult>(&decoded.value()) : nullptr;
                if (!r) {
                    const auto* error = decoded.ok() ? std::get_if<OpError>(&decoded.value())
                                                     : nullptr;
                    return call->fail(error ? op_error(*error)
                                            : ApiError{409, "request_number_reused",
                                                       "this request number was used for "
                                                       "another request; use a higher one",
                                                       Json::object()});
                }
                if (!proposed.snapshot.get<bool>())
                    return call->fail(ApiError{
                        409, "request_number_reused",
                        "this request (client id and request number) already created a token, "
                        "shown only in the answer to it: revoke that one (GET /v1/auth/tokens "
                        "lists them) and create another with a new request number",
                        Json{{"request_number", identity.request_number}}});
                // The only time the token is shown: the replicas keep its hash.
                call->answer_json(201, Json{{"token", secret},
                                            {"id", id},
                                            {"user", user},
                                            {"ttl_s", ttl_s},
                                            {"auth_revision", r->auth_revision},
                                            {"revision", r->revision}});
            });
    });
    return answering;
}

}  // namespace voltlock::api
