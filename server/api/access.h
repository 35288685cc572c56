// Who a request comes from, and whether it may do what it asks (docs/security-auth.md). Checked
// on the I/O thread when a request is routed, before anything is proposed or forwarded: the
// replica that receives the client's request enforces, whichever replica then serves it.
//
// An identity is a bearer token's user (`Authorization: Bearer <token>`, compared by SHA-256 in
// constant time against every hash of auth_token_file and of the replicated tokens) or, with
// mTLS, the client certificate's CN. The rules are the files' (the bootstrap: how the first admin
// gets in) joined with the replicated users, roles and tokens (core/auth_state.h) as of the op
// this replica has applied, so every replica enforces the same rules at the same op. A
// replica's own certificate ("voltlock cell <id> r<K>", as init-cell makes them) is a peer:
// peers forward requests the sending replica has already checked, and fetch snapshots.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/call.h"
#include "core/auth_state.h"
#include "shell/auth.h"
#include "shell/config.h"
#include "shell/peer_auth.h"
#include "shell/result.h"

namespace voltlock::api {

struct Identity {
    std::string user;
    std::vector<std::string> roles;
    bool peer = false;  // another replica of this cell, by its certificate
};

class Access {
public:
    // `cell_clock`: what a token's expiry, in the cell's time, is measured by
    // (Node::cell_clock_ms); called from any thread.
    Access(const DaemonConfig& config, std::function<uint64_t()> cell_clock);

    // Reads the auth files (at start and on SIGHUP); on an error the tables in use stay.
    Result<Ok> load();
    // The replicated tables, as of the op just applied (loop thread, after every apply and
    // snapshot install); cheap when they did not change. True: they changed.
    bool publish(const AuthState& state);
    bool on() const { return on_; }

    // The headers only replicas send each other (api/leader_path.h: forwarding, waits held at a
    // follower, a follower asking the leader's /v1/cluster) are believed from a peer replica of
    // this cell alone: one with its certificate (mTLS), or whose request carries the cell's
    // replication key's signature (X-Voltlock-Peer-Auth, set as call.signed_by_peer). From a
    // client they would make a follower refuse to forward, a leader hold a wait nobody hears
    // of, or a follower's /v1/cluster leave out what the leader sees. In a cell with neither a
    // replication key nor client certificates a peer cannot be told from a client, and every
    // request is believed, as the cell's datagrams are (docs/security.md). The 400 to answer a
    // request that is not a peer's and carries one of them; checks the signature whatever the
    // auth. Any thread, before check().
    std::optional<ApiError> recognise_peer(Call& call) const;
    // Nothing when `call` may go on (its identity set), or the 401/403 to answer. Any thread.
    std::optional<ApiError> check(Call& call) const;

private:
    Result<Identity> identify(const Call& call, const AuthTables& tables) const;
    bool is_peer_certificate(const std::string& cn) const;

    const DaemonConfig config_;
    const std::function<uint64_t()> cell_clock_;
    const bool on_;
    const std::unique_ptr<PeerAuthVerifier> peer_auth_;  // snapshot fetches without mTLS
    // Files and replicated tables joined: users of both, grants of a role from both.
    void join();

    mutable std::mutex mutex_;
    AuthTables files_;
    AuthTables replicated_;
    std::optional<uint64_t> published_revision_;  // of the replicated tables
    std::shared_ptr<const AuthTables> tables_;
};

}  // namespace voltlock::api
