// The admin endpoints of the replicated users, roles and tokens (docs/api.md, "Users, roles and
// tokens"; docs/security-auth.md): under /v1/auth, the admin role only (api/access.h). Changes
// are ops through the log (core/auth_ops.h); listings read the tables like the other state reads
// (through the leader, or this replica's with ?stale=true). Loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "api/call.h"
#include "api/leader_path.h"
#include "core/lock_machine.h"

namespace voltlock::api {

class AuthAdmin {
public:
    using Answer = std::function<void(const OpResult&)>;
    using RunOp = std::function<void(const CallPtr&, const LockOp&, Answer)>;
    using ReadState = std::function<Served(const CallPtr&, std::function<Json()>)>;
    using AddRoute = std::function<void(const char* method, const char* pattern,
                                        const char* endpoint, std::vector<std::string> params,
                                        std::function<Served(const CallPtr&)> handler)>;

    AuthAdmin(const LockMachine* machine, uint32_t max_message_bytes, LeaderPath& leader,
              RunOp run_op, ReadState read_state);
    void install(const AddRoute& add);

private:
    Served put_role(const CallPtr& call);
    Served put_user(const CallPtr& call);
    Served create_token(const CallPtr& call);
    Served run(const CallPtr& call, Parsed<LockOp> op);
    Served list(const CallPtr& call, std::function<Json(const AuthState&)> body);

    const LockMachine* machine_;
    const uint32_t max_message_bytes_;
    LeaderPath& leader_;  // tokens are made at the leader
    RunOp run_op_;
    ReadState read_state_;
};

}  // namespace voltlock::api
