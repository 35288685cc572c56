#include "api/access.h"

#include "api/leader_path.h"

namespace voltlock::api {

namespace {

ApiError unauthenticated(std::string message)
{
    return ApiError{401, "unauthenticated", std::move(message), Json::object()};
}

ApiError permission_denied(const Identity& who, Permission permission, std::string what,
                           const std::string& prefix)
{
    return ApiError{403, "permission_denied",
                    "user '" + who.user + "' lacks the " + permission_name(permission) +
                        " permission on " + what + " '" + prefix +
                        "': an admin grants it to one of its roles (PUT /v1/auth/roles, "
                        "`lockctl role grant-permission`, or auth_roles_file)",
                    Json{{"permission", permission_name(permission)},
                         {"resource", std::move(what)},
                         {"prefix", prefix},
                         {"user", who.user}}};
}

// Compares every byte whatever the first difference: the time says nothing of the hash.
bool same_hash(const TokenHash& a, const TokenHash& b)
{
    uint8_t difference = 0;
    for (size_t i = 0; i < a.size(); i++)
        difference = static_cast<uint8_t>(difference | (a[i] ^ b[i]));
    return difference == 0;
}

struct Need {
    enum class What { nothing, identity, resource, peer, admin } what = What::identity;
    Permission permission = Permission::read;
    std::vector<ResourceKind> kinds;
    std::string name;
};

// What each endpoint (the router's names) needs.
Need need_of(const Call& call)
{
    using What = Need::What;
    const std::string& e = call.endpoint;
    const std::string name = call.path_param;
    if (e == "/healthz" || e == "/readyz" || e == "/ui") return Need{What::nothing, {}, {}, {}};
    if (e == "/v1/internal/snapshot") return Need{What::peer, Permission::admin, {}, {}};
    if (e.starts_with("/v1/auth/")) return Need{What::admin, Permission::admin, {}, {}};
    if (e == "/v1/locks/{name}:acquire" || e == "/v1/locks/{name}:release")
        return Need{What::resource, Permission::lock, {ResourceKind::lock}, name};
    if (e == "/v1/barriers/{name}:enter" || e == "/v1/barriers/{name}:leave")
        return Need{What::resource, Permission::lock, {ResourceKind::barrier}, name};
    if (e == "/v1/locks/{name}" || e == "/v1/locks")
        return Need{What::resource, Permission::read, {ResourceKind::lock}, name};
    if (e == "/v1/barriers/{name}" || e == "/v1/barriers")
        return Need{What::resource, Permission::read, {ResourceKind::barrier}, name};
    if (e == "/v1/kv/{key}")
        return Need{What::resource, call.method == "GET" || call.method == "HEAD"
                                        ? Permission::read
                                        : Permission::write,
                    {ResourceKind::key}, name};
    if (e == "/v1/watch/{key}") {
        // A watch of locks, sessions or barriers sees every one of them.
        const auto spaces = call.param("spaces");
        if (spaces && *spaces != "kv")
            return Need{What::resource, Permission::watch,
                        {ResourceKind::key, ResourceKind::lock, ResourceKind::barrier}, ""};
        return Need{What::resource, Permission::watch, {ResourceKind::key}, name};
    }
    return Need{What::identity, {}, {}, {}};
}

}  // namespace

Access::Access(const DaemonConfig& config, std::function<uint64_t()> cell_clock)
    : config_(config),
      cell_clock_(std::move(cell_clock)),
      on_(config.auth()),
      peer_auth_(std::make_unique<PeerAuthVerifier>(config))
{
}

Result<Ok> Access::load()
{
    if (!on_) return Ok{};
    auto loaded = load_auth_tables(config_);
    if (!loaded.ok()) return loaded.error();
    std::lock_guard lock(mutex_);
    files_ = std::move(*loaded.value());
    join();
    return Ok{};
}

bool Access::publish(const AuthState& state)
{
    std::lock_guard lock(mutex_);
    if (published_revision_ == state.revision) return false;
    published_revision_ = state.revision;
    replicated_ = AuthTables{};
    for (const auto& [name, role] : state.roles)
        for (const RoleGrant& g : role.grants)
            replicated_.grants[name].push_back(AuthGrant{
                .permissions = g.permissions,
                .kind = g.scope == GrantScope::key    ? std::optional(ResourceKind::key)
                        : g.scope == GrantScope::lock ? std::optional(ResourceKind::lock)
                        : g.scope == GrantScope::barrier
                            ? std::optional(ResourceKind::barrier)
                            : std::nullopt,
                .prefix = g.prefix});
    // A user by its certificate's CN, then one entry per token.
    for (const auto& [name, user] : state.users)
        replicated_.users.push_back(AuthUser{.name = name, .roles = user.roles, .token_hash = {}});
    for (const auto& [id, token] : state.tokens)
        if (const auto user = state.users.find(token.user); user != state.users.end())
            replicated_.users.push_back(AuthUser{.name = token.user,
                                                 .roles = user->second.roles,
                                                 .token_hash = token.hash,
                                                 .expires_ms = token.expires_ms});
    join();
    return true;
}

void Access::join()
{
    AuthTables joined = files_;
    for (const AuthUser& user : replicated_.users) joined.users.push_back(user);
    for (const auto& [role, grants] : replicated_.grants)
        joined.grants[role].insert(joined.grants[role].end(), grants.begin(), grants.end());
    tables_ = std::make_shared<const AuthTables>(std::move(joined));
}

Result<Identity> Access::identify(const Call& call, const AuthTables& tables) const
{
    if (const auto authorization = call.header("Authorization")) {
        constexpr std::string_view scheme = "Bearer ";
        if (authorization->size() <= scheme.size() ||
            !equal_ignoring_case(std::string_view(*authorization).substr(0, scheme.size()),
                                 scheme))
            return Error{0, "the Authorization header is not `Bearer <token>`"};
        const TokenHash presented = sha256(std::string_view(*authorization).substr(scheme.size()));
        const AuthUser* matched = nullptr;
        for (const AuthUser& user : tables.users)
            if (user.token_hash && same_hash(*user.token_hash, presented) && !matched)
                matched = &user;
        if (!matched) return Error{0, "the token is not known (revoked, or mistyped)"};
        // The expiry is in the cell's time (the op's timestamp + ttl), which every replica's
        // cell clock follows closely enough for a validity of seconds at least.
        if (matched->expires_ms != 0 && matched->expires_ms <= cell_clock_())
            return Error{0, "the token expired; ask an admin for a new one"};
        return Identity{matched->name, matched->roles, false};
    }
    if (call.exchange && call.exchange->client_certificate_cn) {
        const std::string& cn = *call.exchange->client_certificate_cn;
        if (is_peer_certificate(cn)) return Identity{cn, {}, true};
        if (const AuthUser* user = tables.user(cn)) return Identity{cn, user->roles, false};
        return Identity{cn, {}, false};
    }
    return Error{0, "this endpoint needs credentials: send `Authorization: Bearer <token>` (or "
                    "a TLS client certificate)"};
}

bool Access::is_peer_certificate(const std::string& cn) const
{
    for (size_t replica = 0; replica < config_.replicas.size(); replica++)
        if (cn == "voltlock cell " + std::to_string(config_.cluster_id) + " r" +
                      std::to_string(replica))
            return true;
    return false;
}

std::optional<ApiError> Access::recognise_peer(Call& call) const
{
    // Checked once: a fresh one's nonce is spent.
    if (const auto signature = call.header(kPeerAuthHeader)) {
        const PeerFreshness freshness = need_of(call).what == Need::What::peer
                                            ? PeerFreshness::required
                                            : PeerFreshness::not_required;
        auto peer =
            peer_auth_->verify(*signature, call.method, call.target, unix_ms(), freshness);
        if (peer.ok())
            call.signed_by_peer = peer.value();
        else
            call.peer_signature_refusal = peer.error().message();
    }
    const bool by_certificate = call.exchange && call.exchange->client_certificate_cn &&
                                is_peer_certificate(*call.exchange->client_certificate_cn);
    const bool peers_unknowable =
        config_.replication_keys.count == 0 && config_.tls_client_ca_file.empty();
    if (by_certificate || call.signed_by_peer || peers_unknowable) return std::nullopt;
    for (const char* name :
         {kForwardedHeader, kWaitHereHeader, kOnBehalfOfHeader, kLocalViewHeader}) {
        if (!call.header(name)) continue;
        std::string message = std::string(name) + " is internal to the cell's replicas: a " +
                              "client may not send it";
        if (!call.peer_signature_refusal.empty())
            message += " (" + std::string(kPeerAuthHeader) + ": " +
                       call.peer_signature_refusal + ")";
        return ApiError{400, "invalid_argument", message,
                        Json{{"field", name}, {"in", "header"}, {"violation", "internal"}}};
    }
    return std::nullopt;
}

std::optional<ApiError> Access::check(Call& call) const
{
    if (!on_) return std::nullopt;
    const Need need = need_of(call);
    if (need.what == Need::What::nothing) return std::nullopt;
    std::shared_ptr<const AuthTables> tables;
    {
        std::lock_guard lock(mutex_);
        tables = tables_;
    }
    // A peer without a client certificate, by the cell's replication key (recognise_peer): an
    // admin for snapshots only. Elsewhere (a forwarded request) it proves the request a peer's,
    // and the client the peer forwards for is who its own credentials say.
    if (call.header(kPeerAuthHeader)) {
        if (!call.signed_by_peer) return unauthenticated(call.peer_signature_refusal);
        if (need.what == Need::What::peer) {
            call.user = "r" + std::to_string(*call.signed_by_peer);
            call.admin = true;
            return std::nullopt;
        }
    }
    auto identity = identify(call, *tables);
    if (!identity.ok()) return unauthenticated(identity.error().message());
    const Identity& who = identity.value();
    call.user = who.user;
    call.admin = who.peer || tables->is_admin(who.roles);
    if (who.peer) {
        // A peer forwards what it already checked; the client it forwards for owns what the
        // request creates.
        call.user = call.header(kOnBehalfOfHeader).value_or("");
        return std::nullopt;
    }
    switch (need.what) {
    case Need::What::nothing:
    case Need::What::identity: return std::nullopt;
    case Need::What::admin:
        if (call.admin) return std::nullopt;
        return ApiError{403, "permission_denied",
                        "user '" + who.user + "' lacks the admin role: only an admin may "
                        "change or list users, roles and tokens",
                        Json{{"permission", "admin"}, {"user", who.user}}};
    case Need::What::peer:
        if (call.admin) return std::nullopt;
        return ApiError{403, "permission_denied",
                        "only the cell's replicas (by their TLS client certificate) and the admin "
                        "role may fetch snapshots",
                        Json{{"permission", "admin"}, {"user", who.user}}};
    case Need::What::resource:
        for (ResourceKind kind : need.kinds)
            if (!tables->allows(who.roles, need.permission, kind, need.name))
                return permission_denied(who, need.permission, resource_kind_name(kind),
                                         need.name);
        return std::nullopt;
    }
    return std::nullopt;
}

}  // namespace voltlock::api
