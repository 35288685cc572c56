// The replicated users, roles and tokens (core/auth_ops.h, core/auth_state.h): the ops' codec,
// what each op does to the tables through LockMachine (as a replica applies it, with the entry's
// timestamp as the only clock), and the tables in the snapshot and the state digest.
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "core/auth_state.h"
#include "core/lock_machine.h"
#include "core/lock_ops.h"

namespace voltlock {
namespace {

constexpr LockMachineConfig kConfig{.history_events = 16, .check_invariants_every_apply = true};

TokenDigest digest_of(uint8_t seed)
{
    TokenDigest d{};
    for (size_t i = 0; i < d.size(); i++) d[i] = static_cast<uint8_t>(seed + i * 7);
    return d;
}

const RoleGrant kReadApp{.permissions = 1 | 8, .scope = GrantScope::key, .prefix = "app/"};

class Driver {
public:
    explicit Driver(LockMachine& machine) : machine_(machine) {}
    OpResult apply(const LockOp& op)
    {
        const Entry entry{.timestamp_ms = now_ms, .payload = encode_op(op)};
        const Bytes result = machine_.apply(machine_.last_applied_op() + 1, entry);
        const auto decoded = decode_result(result);
        REQUIRE(decoded.ok());
        return decoded.value();
    }
    AuthResult run(AuthChange change)
    {
        const OpResult r = apply(AuthOp{std::move(change)});
        REQUIRE(std::holds_alternative<AuthResult>(r));
        return std::get<AuthResult>(r);
    }
    OpError fail(AuthChange change)
    {
        const OpResult r = apply(AuthOp{std::move(change)});
        REQUIRE(std::holds_alternative<OpError>(r));
        return std::get<OpError>(r);
    }
    uint64_t now_ms = 1'000'000;

private:
    LockMachine& machine_;
};

// A machine with a role, two users (one an admin) and three tokens, one of them expiring.
void make_tables(LockMachine& machine)
{
    Driver d(machine);
    d.run(PutRole{.role = "reader", .grants = {kReadApp}});
    d.run(PutRole{.role = "locker",
                  .grants = {RoleGrant{.permissions = 4, .scope = GrantScope::lock, .prefix = ""},
                             RoleGrant{.permissions = 1, .scope = GrantScope::all, .prefix = ""}}});
    d.run(PutUser{.user = "billing", .roles = {"reader", "locker"}});
    d.run(PutUser{.user = "root", .roles = {"admin"}});
    d.run(CreateToken{.user = "billing", .hash = digest_of(1), .ttl_ms = 0});
    d.run(CreateToken{.user = "billing", .hash = digest_of(2), .ttl_ms = 60'000});
    d.run(CreateToken{.user = "root", .hash = digest_of(3), .ttl_ms = 0});
}

}  // namespace

TEST_CASE("auth ops: every kind round-trips the codec and re-encodes to itself")
{
    const std::vector<AuthChange> changes = {
        PutRole{.role = "r", .grants = {kReadApp, RoleGrant{.permissions = 31}}},
        DeleteRole{.role = "r"},
        PutUser{.user = "u", .roles = {"r", "admin"}},
        DeleteUser{.user = "u"},
        CreateToken{.user = "u", .hash = digest_of(9), .ttl_ms = 3'600'000},
        RevokeToken{.id = "0123456789abcdef"},
    };
    for (const AuthChange& change : changes) {
        const LockOp op = AuthOp{change};
        const Bytes encoded = encode_op(op);
        CHECK(encoded.size() == encoded_size(op));
        CHECK(static_cast<uint8_t>(encoded[0]) == static_cast<uint8_t>(OpCode::auth));
        const auto decoded = decode_op(encoded);
        REQUIRE(decoded.ok());
        CHECK(decoded.value() == op);
        CHECK(encode_op(decoded.value()) == encoded);
        // Cut short anywhere, or a byte more: refused with a reason.
        for (size_t size = 1; size < encoded.size(); size++)
            CHECK_FALSE(decode_op(std::string_view(encoded).substr(0, size)).ok());
        CHECK(decode_op(encoded + '\0').error() == OpDecodeError::trailing_bytes);
    }
    // An unknown kind, and a grant scope out of range.
    CHECK(decode_op(Bytes{"\x0e\x07", 2}).error() == OpDecodeError::bad_enum);
    Bytes bad_scope = encode_op(AuthOp{PutRole{.role = "r", .grants = {kReadApp}}});
    bad_scope[1 + 1 + 2 + 1 + 1 + 1] = 9;  // kind, str "r", count, permissions, then the scope
    CHECK(decode_op(bad_scope).error() == OpDecodeError::bad_enum);
}

TEST_CASE("auth ops: validate refuses bad names, permissions, counts, ttl and the admin role")
{
    auto invalid = [](AuthChange change) {
        const auto found = validate(LockOp{AuthOp{std::move(change)}});
        return found ? found->violation : Violation::none;
    };
    CHECK(invalid(PutRole{.role = "", .grants = {}}) == Violation::name_empty);
    CHECK(invalid(PutRole{.role = std::string(65, 'r'), .grants = {}}) ==
          Violation::name_too_long);
    CHECK(invalid(PutRole{.role = "admin", .grants = {}}) == Violation::reserved_name);
    CHECK(invalid(DeleteRole{.role = "admin"}) == Violation::reserved_name);
    CHECK(invalid(PutRole{.role = "r", .grants = {RoleGrant{.permissions = 0}}}) ==
          Violation::permissions_invalid);
    CHECK(invalid(PutRole{.role = "r", .grants = {RoleGrant{.permissions = 32}}}) ==
          Violation::permissions_invalid);
    CHECK(invalid(PutRole{.role = "r",
                          .grants = {RoleGrant{.permissions = 1, .prefix = "x"}}}) ==
          Violation::permissions_invalid);  // `*` has no prefix
    CHECK(invalid(PutRole{.role = "r", .grants = std::vector<RoleGrant>(33, kReadApp)}) ==
          Violation::too_many);
    CHECK(invalid(PutUser{.user = "u\n", .roles = {}}) == Violation::name_control_character);
    CHECK(invalid(PutUser{.user = "u", .roles = std::vector<std::string>(33, "r")}) ==
          Violation::too_many);
    CHECK(invalid(CreateToken{.user = "u", .hash = {}, .ttl_ms = kMaxTokenTtlMs + 1}) ==
          Violation::ttl_out_of_range);
    CHECK(invalid(PutRole{.role = "r", .grants = {kReadApp}}) == Violation::none);
}

TEST_CASE("auth ops: the tables change at the op, with an auth revision of their own")
{
    LockMachine machine(kConfig);
    Driver d(machine);
    d.apply(Put{.key = "k", .value = "v"});
    const Revision revision = machine.revision();
    make_tables(machine);
    const AuthState& auth = machine.state().auth;
    CHECK(auth.revision == 7);
    CHECK(machine.revision() == revision);  // no watch event, no key/lock revision
    CHECK(auth.roles.at("reader").grants == std::vector<RoleGrant>{kReadApp});
    CHECK(auth.users.at("billing").roles == std::vector<std::string>{"reader", "locker"});
    const TokenRecord& expiring = auth.tokens.at(token_id(digest_of(2)));
    CHECK(expiring.user == "billing");
    CHECK(expiring.created_ms == d.now_ms);
    CHECK(expiring.expires_ms == d.now_ms + 60'000);
    CHECK(auth.tokens.at(token_id(digest_of(1))).expires_ms == 0);

    SUBCASE("a role or user that does not exist: not_found, nothing changes")
    {
        const LockServiceState before = machine.state();
        CHECK(d.fail(PutUser{.user = "x", .roles = {"nope"}}).code == ErrorCode::not_found);
        CHECK(d.fail(PutUser{.user = "x", .roles = {"nope"}}).detail == uint64_t(AuthTable::role));
        CHECK(d.fail(CreateToken{.user = "nobody", .hash = digest_of(4)}).detail ==
              uint64_t(AuthTable::user));
        CHECK(d.fail(DeleteRole{.role = "nope"}).code == ErrorCode::not_found);
        CHECK(d.fail(DeleteUser{.user = "nobody"}).code == ErrorCode::not_found);
        CHECK(d.fail(RevokeToken{.id = "0000000000000000"}).detail ==
              uint64_t(AuthTable::token));
        CHECK(d.fail(CreateToken{.user = "root", .hash = digest_of(3)}).code ==
              ErrorCode::already_exists);
        CHECK(d.fail(PutRole{.role = "admin", .grants = {}}).code ==
              ErrorCode::invalid_argument);
        CHECK(machine.state().auth == before.auth);
    }
    SUBCASE("revoke removes the token; deleting a user revokes its tokens")
    {
        d.run(RevokeToken{.id = token_id(digest_of(3))});
        CHECK_FALSE(machine.state().auth.tokens.contains(token_id(digest_of(3))));
        d.run(DeleteUser{.user = "billing"});
        CHECK(machine.state().auth.tokens.empty());
        CHECK(machine.state().auth.users.size() == 1);
    }
    SUBCASE("deleting a role takes it from its users; putting a user replaces its roles")
    {
        d.run(DeleteRole{.role = "locker"});
        CHECK(machine.state().auth.users.at("billing").roles == std::vector<std::string>{"reader"});
        d.run(PutUser{.user = "billing", .roles = {"admin", "admin"}});
        CHECK(machine.state().auth.users.at("billing").roles == std::vector<std::string>{"admin"});
    }
    SUBCASE("an expired token is dropped by the next auth op at or after its expiry, by op time")
    {
        d.now_ms += 59'999;
        d.run(PutRole{.role = "other", .grants = {}});
        CHECK(machine.state().auth.tokens.size() == 3);
        d.now_ms += 1;
        d.run(PutRole{.role = "other", .grants = {}});
        CHECK(machine.state().auth.tokens.size() == 2);
        CHECK_FALSE(machine.state().auth.tokens.contains(token_id(digest_of(2))));
    }
}

TEST_CASE("auth tables: in the snapshot (VLM3) and the digest; VLM2 restores with none")
{
    LockMachine source(kConfig);
    make_tables(source);
    const Bytes snapshot = source.snapshot();
    CHECK(snapshot.substr(0, 4) == "VLM3");
    LockMachine target(kConfig);
    REQUIRE(target.restore(snapshot));
    CHECK(target.state() == source.state());
    CHECK(target.state_digest() == source.state_digest());
    // Both answer the next auth op the same way.
    Driver(source).run(RevokeToken{.id = token_id(digest_of(1))});
    Driver(target).run(RevokeToken{.id = token_id(digest_of(1))});
    CHECK(target.state_digest() == source.state_digest());

    SUBCASE("the digest covers the tables")
    {
        LockMachine other(kConfig);
        REQUIRE(other.restore(snapshot));
        Driver(other).run(PutUser{.user = "billing", .roles = {"reader"}});
        CHECK(other.state_digest() != source.state_digest());
    }
    SUBCASE("a VLM2 snapshot (before the tables) restores with empty tables")
    {
        LockMachine plain(kConfig);
        Driver(plain).apply(Put{.key = "k", .value = "v"});
        Bytes old = plain.snapshot();
        const size_t empty_tables = 8 + 3 * 4;  // revision, three empty maps
        REQUIRE(old.substr(old.size() - empty_tables) == Bytes(empty_tables, '\0'));
        old.erase(old.size() - empty_tables);
        old[3] = '2';
        LockMachine restored(kConfig);
        REQUIRE(restored.restore(old));
        CHECK(restored.state() == plain.state());
    }
    SUBCASE("tables naming a role or user that does not exist are refused")
    {
        AuthState broken = source.state().auth;
        broken.users["ghost"] = UserRecord{.roles = {"nope"}};
        CHECK(broken_auth_state(broken) != nullptr);
        broken = source.state().auth;
        broken.tokens.begin()->second.user = "nobody";
        CHECK(broken_auth_state(broken) != nullptr);
        broken = source.state().auth;
        broken.roles.begin()->second.grants[0].permissions = 0;
        CHECK(broken_auth_state(broken) != nullptr);
        CHECK(broken_auth_state(source.state().auth) == nullptr);
        // In a snapshot: the user "billing" renamed, so that its tokens name no user.
        Bytes renamed = snapshot;
        const std::string user = std::string("\x07\0\0\0", 4) + "billing";
        const size_t at = renamed.find(user);
        REQUIRE(at != Bytes::npos);
        renamed[at + user.size() - 1] = 'h';
        LockMachine refused(kConfig);
        CHECK_FALSE(refused.restore(renamed));
        CHECK(refused.state() == LockMachine(kConfig).state());
    }
}

}  // namespace voltlock
