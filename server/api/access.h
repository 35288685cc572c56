// Who a request comes from, and whether it may do what it asks (docs/security-auth.md). Checked
// on the I/O thread when a request is routed, before anything is proposed or forwarded: the
// replica that receives the client's request enforces, whichever replica then serves it.
//
// An identity is a bearer token's user (`Authorization: Bearer <token>`, compared by SHA-256 in
// constant time against every hash of auth_token_file) or, with mTLS, the client certificate's
// CN. A replica's own certificate ("voltlock cell <id> r<K>", as init-cell makes them) is a
// peer: peers forward requests the sending replica has already checked, and fetch snapshots.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/call.h"
#include "shell/auth.h"
#include "shell/config.h"
#include "shell/result.h"

namespace voltlock::api {

struct Identity {
    std::string user;
    std::vector<std::string> roles;
    bool peer = false;  // another replica of this cell, by its certificate
};

class Access {
public:
    explicit Access(const DaemonConfig& config);

    // Reads the auth files (at start and on SIGHUP); on an error the tables in use stay.
    Result<Ok> load();
    bool on() const { return on_; }

    // Nothing when `call` may go on (its identity set), or the 401/403 to answer. Any thread.
    std::optional<ApiError> check(Call& call) const;

private:
    Result<Identity> identify(const Call& call, const AuthTables& tables) const;

    const DaemonConfig config_;
    const bool on_;
    mutable std::mutex mutex_;
    std::shared_ptr<const AuthTables> tables_;
};

}  // namespace voltlock::api
