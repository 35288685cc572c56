// The auth ops', results' and tables' layouts on codec.h (docs/codec.md): the op's body after
// its code `auth` (auth_ops.h gives it field by field), AuthResult's field, and the auth section
// of the lock machine's snapshot (auth_state.h). lock_ops.cpp runs the first two as it runs every
// op and result; lock_machine_snapshot.cpp runs the tables' layouts on its SnapshotIo, whose
// `text` (a u32 length), `list` and `map` (u32 counts, keys strictly increasing) they use.
#pragma once

#include <type_traits>
#include <variant>

#include "core/auth_ops.h"
#include "core/auth_state.h"
#include "core/codec.h"

namespace voltlock {

inline bool known(AuthOpKind kind)
{
    switch (kind) {
    case AuthOpKind::put_role:
    case AuthOpKind::delete_role:
    case AuthOpKind::put_user:
    case AuthOpKind::delete_user:
    case AuthOpKind::create_token:
    case AuthOpKind::revoke_token: return true;
    }
    return false;
}

inline bool known(GrantScope scope)
{
    switch (scope) {
    case GrantScope::all:
    case GrantScope::key:
    case GrantScope::lock:
    case GrantScope::barrier: return true;
    }
    return false;
}

// ---- The op (auth_ops.h): u8 kind, then the change; strings with u16 lengths, counts u8 -------

// A grant, in an op and in the snapshot alike but for its prefix's length: the snapshot's `text`
// (a u32 length) where the Io has one, else an op's u16.
template <typename Io, codec::MaybeConst<RoleGrant> R>
bool fields(Io& io, R& g)
{
    if (!(io.u8(g.permissions) && io.enumeration(g.scope, known))) return false;
    if constexpr (requires { io.text(g.prefix); })
        return io.text(g.prefix);
    else
        return io.template str<uint16_t>(g.prefix);
}

template <typename Io, codec::MaybeConst<PutRole> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.role) && io.template sequence<uint8_t>(o.grants);
}

template <typename Io, codec::MaybeConst<DeleteRole> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.role);
}

template <typename Io, codec::MaybeConst<PutUser> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.user) && io.template strings<uint8_t, uint16_t>(o.roles);
}

template <typename Io, codec::MaybeConst<DeleteUser> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.user);
}

// The token's hash, not the token: it never enters the log.
template <typename Io, codec::MaybeConst<CreateToken> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.user) && io.fixed_bytes(o.hash) && io.u64(o.ttl_ms);
}

template <typename Io, codec::MaybeConst<RevokeToken> R>
bool fields(Io& io, R& o)
{
    return io.template str<uint16_t>(o.id);
}

// The kind, then that alternative's layout (AuthChange's alternatives are in kind order).
template <typename Io, codec::MaybeConst<AuthOp> R>
bool fields(Io& io, R& o)
{
    auto kind = static_cast<AuthOpKind>(o.change.index() + 1);
    if (!io.enumeration(kind, known)) return false;
    if constexpr (!std::is_const_v<R>)
        o.change = codec::alternative<AuthChange>(static_cast<size_t>(kind) - 1);
    return std::visit([&](auto& change) { return fields(io, change); }, o.change);
}

// After the result's op code, error code and (key/lock) revision.
template <typename Io, codec::MaybeConst<AuthResult> R>
bool fields(Io& io, R& r)
{
    return io.u64(r.auth_revision);
}

// ---- The snapshot's auth section: u64 revision, then the three maps in key order --------------
// Records in declaration order; every string and count a u32 (the snapshot's text and list).

template <typename Io, codec::MaybeConst<RoleRecord> R>
bool fields(Io& io, R& r)
{
    return io.list(r.grants);
}

template <typename Io, codec::MaybeConst<UserRecord> R>
bool fields(Io& io, R& r)
{
    return io.template strings<uint32_t, uint32_t>(r.roles);
}

template <typename Io, codec::MaybeConst<TokenRecord> R>
bool fields(Io& io, R& r)
{
    return io.text(r.user) && io.fixed_bytes(r.hash) && io.u64(r.created_ms) &&
           io.u64(r.expires_ms);
}

// Read, the tables are checked afterwards (broken_auth_state): grants valid, and every role a
// user has and every token's user existing.
template <typename Io, codec::MaybeConst<AuthState> R>
bool fields(Io& io, R& s)
{
    return io.u64(s.revision) && io.map(s.roles) && io.map(s.users) && io.map(s.tokens);
}

}  // namespace voltlock
