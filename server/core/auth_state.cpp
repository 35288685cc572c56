#include "core/auth_state.h"

#include <algorithm>

#include "core/byte_reader.h"
#include "core/byte_writer.h"
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

// ---- The op's body ---------------------------------------------------------------------------

class BodyWriter {
public:
    explicit BodyWriter(Bytes& out) : out_(out) {}
    void u8(uint8_t v) { out_.u8(v); }
    void u64(uint64_t v) { out_.u64(v); }
    void str(std::string_view s)
    {
        out_.u16(static_cast<uint16_t>(s.size()));
        out_.bytes(s);
    }
    void digest(const TokenDigest& d)
    {
        out_.bytes(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
    }

private:
    ByteWriter out_;
};

class BodyReader {
public:
    explicit BodyReader(std::string_view in) : in_(in) {}
    bool u8(uint8_t& v) { return in_.u8(v) || fail(OpDecodeError::truncated); }
    bool u64(uint64_t& v) { return in_.u64(v) || fail(OpDecodeError::truncated); }
    bool str(std::string& s)
    {
        uint16_t size = 0;
        return (in_.u16(size) && in_.bytes(s, size)) || fail(OpDecodeError::truncated);
    }
    bool digest(TokenDigest& d)
    {
        Bytes raw;
        if (!in_.bytes(raw, d.size())) return fail(OpDecodeError::truncated);
        std::copy(raw.begin(), raw.end(), d.begin());
        return true;
    }
    bool fail(OpDecodeError error)
    {
        if (!error_) error_ = error;
        return false;
    }
    bool done() const { return in_.done(); }
    OpDecodeError error() const { return error_.value_or(OpDecodeError::trailing_bytes); }

private:
    ByteReader in_;
    std::optional<OpDecodeError> error_;
};

bool read_change(AuthOpKind kind, BodyReader& r, AuthChange& out)
{
    uint8_t count = 0;
    switch (kind) {
    case AuthOpKind::put_role: {
        PutRole o;
        if (!(r.str(o.role) && r.u8(count))) return false;
        for (uint8_t i = 0; i < count; i++) {
            RoleGrant& g = o.grants.emplace_back();
            uint8_t scope = 0;
            if (!(r.u8(g.permissions) && r.u8(scope) && r.str(g.prefix))) return false;
            if (scope > kMaxGrantScope) return r.fail(OpDecodeError::bad_enum);
            g.scope = static_cast<GrantScope>(scope);
        }
        out = std::move(o);
        return true;
    }
    case AuthOpKind::delete_role: {
        DeleteRole o;
        if (!r.str(o.role)) return false;
        out = std::move(o);
        return true;
    }
    case AuthOpKind::put_user: {
        PutUser o;
        if (!(r.str(o.user) && r.u8(count))) return false;
        for (uint8_t i = 0; i < count; i++)
            if (!r.str(o.roles.emplace_back())) return false;
        out = std::move(o);
        return true;
    }
    case AuthOpKind::delete_user: {
        DeleteUser o;
        if (!r.str(o.user)) return false;
        out = std::move(o);
        return true;
    }
    case AuthOpKind::create_token: {
        CreateToken o;
        if (!(r.str(o.user) && r.digest(o.hash) && r.u64(o.ttl_ms))) return false;
        out = std::move(o);
        return true;
    }
    case AuthOpKind::revoke_token: {
        RevokeToken o;
        if (!r.str(o.id)) return false;
        out = std::move(o);
        return true;
    }
    }
    return r.fail(OpDecodeError::bad_enum);
}

// ---- The snapshot section --------------------------------------------------------------------

class StateWriter {
public:
    explicit StateWriter(Bytes& out) : out_(out) {}
    void u8(uint8_t v) { out_.u8(v); }
    void u64(uint64_t v) { out_.u64(v); }
    void str(std::string_view s)
    {
        out_.u32(static_cast<uint32_t>(s.size()));
        out_.bytes(s);
    }
    void count(size_t n) { out_.u32(static_cast<uint32_t>(n)); }
    void digest(const TokenDigest& d)
    {
        out_.bytes(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
    }

private:
    ByteWriter out_;
};

class StateReader {
public:
    explicit StateReader(std::string_view in) : in_(in) {}
    bool u8(uint8_t& v) { return in_.u8(v); }
    bool u64(uint64_t& v) { return in_.u64(v); }
    bool count(uint32_t& n) { return in_.u32(n); }
    bool str(std::string& s)
    {
        uint32_t size = 0;
        return in_.u32(size) && in_.bytes(s, size);
    }
    bool digest(TokenDigest& d)
    {
        Bytes raw;
        if (!in_.bytes(raw, d.size())) return false;
        std::copy(raw.begin(), raw.end(), d.begin());
        return true;
    }
    bool done() const { return in_.done(); }

private:
    ByteReader in_;
};

void write_record(StateWriter& w, const RoleRecord& r)
{
    w.count(r.grants.size());
    for (const RoleGrant& g : r.grants) {
        w.u8(g.permissions);
        w.u8(static_cast<uint8_t>(g.scope));
        w.str(g.prefix);
    }
}

void write_record(StateWriter& w, const UserRecord& r)
{
    w.count(r.roles.size());
    for (const std::string& role : r.roles) w.str(role);
}

void write_record(StateWriter& w, const TokenRecord& r)
{
    w.str(r.user);
    w.digest(r.hash);
    w.u64(r.created_ms);
    w.u64(r.expires_ms);
}

bool read_record(StateReader& r, RoleRecord& out)
{
    uint32_t count = 0;
    if (!r.count(count)) return false;
    for (uint32_t i = 0; i < count; i++) {
        RoleGrant& g = out.grants.emplace_back();
        uint8_t scope = 0;
        if (!(r.u8(g.permissions) && r.u8(scope) && r.str(g.prefix)) || scope > kMaxGrantScope)
            return false;
        g.scope = static_cast<GrantScope>(scope);
        if (check_grant(g)) return false;
    }
    return true;
}

bool read_record(StateReader& r, UserRecord& out)
{
    uint32_t count = 0;
    if (!r.count(count)) return false;
    for (uint32_t i = 0; i < count; i++)
        if (!r.str(out.roles.emplace_back())) return false;
    return true;
}

bool read_record(StateReader& r, TokenRecord& out)
{
    return r.str(out.user) && r.digest(out.hash) && r.u64(out.created_ms) &&
           r.u64(out.expires_ms);
}

template <typename Record>
void write_map(StateWriter& w, const std::map<std::string, Record>& records)
{
    w.count(records.size());
    for (const auto& [key, record] : records) {
        w.str(key);
        write_record(w, record);
    }
}

// Keys strictly increasing, as write_map writes them.
template <typename Record>
bool read_map(StateReader& r, std::map<std::string, Record>& records)
{
    uint32_t count = 0;
    if (!r.count(count)) return false;
    for (uint32_t i = 0; i < count; i++) {
        std::string key;
        Record record;
        if (!r.str(key) || !read_record(r, record)) return false;
        if (!records.empty() && !(records.rbegin()->first < key)) return false;
        records.emplace_hint(records.end(), std::move(key), std::move(record));
    }
    return true;
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

Bytes encode_auth_op(const AuthOp& op)
{
    Bytes out;
    BodyWriter w(out);
    w.u8(static_cast<uint8_t>(op.change.index() + 1));
    std::visit(Overloaded{
                   [&](const PutRole& o) {
                       w.str(o.role);
                       w.u8(static_cast<uint8_t>(o.grants.size()));
                       for (const RoleGrant& g : o.grants) {
                           w.u8(g.permissions);
                           w.u8(static_cast<uint8_t>(g.scope));
                           w.str(g.prefix);
                       }
                   },
                   [&](const DeleteRole& o) { w.str(o.role); },
                   [&](const PutUser& o) {
                       w.str(o.user);
                       w.u8(static_cast<uint8_t>(o.roles.size()));
                       for (const std::string& role : o.roles) w.str(role);
                   },
                   [&](const DeleteUser& o) { w.str(o.user); },
                   [&](const CreateToken& o) {
                       w.str(o.user);
                       w.digest(o.hash);
                       w.u64(o.ttl_ms);
                   },
                   [&](const RevokeToken& o) { w.str(o.id); },
               },
               op.change);
    return out;
}

OpDecodeResult<AuthOp> decode_auth_op(std::string_view body)
{
    BodyReader r(body);
    uint8_t kind = 0;
    if (!r.u8(kind)) return OpDecodeError::truncated;
    if (kind < 1 || kind > static_cast<uint8_t>(AuthOpKind::revoke_token))
        return OpDecodeError::bad_enum;
    AuthOp op;
    if (!read_change(static_cast<AuthOpKind>(kind), r, op.change) || !r.done()) return r.error();
    return op;
}

Bytes encode_auth_state(const AuthState& state)
{
    Bytes out;
    StateWriter w(out);
    w.u64(state.revision);
    write_map(w, state.roles);
    write_map(w, state.users);
    write_map(w, state.tokens);
    return out;
}

bool decode_auth_state(std::string_view bytes, AuthState& state)
{
    AuthState decoded;
    StateReader r(bytes);
    if (!(r.u64(decoded.revision) && read_map(r, decoded.roles) && read_map(r, decoded.users) &&
          read_map(r, decoded.tokens) && r.done()))
        return false;
    for (const auto& [name, user] : decoded.users)
        for (const std::string& role : user.roles)
            if (role != kBuiltinAdminRole && !decoded.roles.contains(role)) return false;
    for (const auto& [id, token] : decoded.tokens)
        if (!decoded.users.contains(token.user) || id != token_id(token.hash)) return false;
    state = std::move(decoded);
    return true;
}

}  // namespace voltlock
