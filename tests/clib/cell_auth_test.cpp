// libvoltlock's users, roles and tokens against a real cell with auth on (run_in_cell.py --auth):
// the admin (the cell's bootstrap token) makes a role, a user and a token; the token reads what
// the role grants and nothing else; revoked, every replica refuses it; a token without the admin
// role manages nothing; bad arguments and unknown names change nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "c11_calls.h"
#include "rig.h"

namespace {

using namespace std::chrono_literals;
using Client = std::unique_ptr<vl_client, void (*)(vl_client*)>;

constexpr auto kApplied = 10s;  // a follower applies an auth op one commit round after the leader

Client client_as(const std::string& token, const std::string& list = "")
{
    return {rig::open_client(10000, list, token), vl_client_close};
}

// A user or role name no other test or run uses: rig::unique's, without its '/'s.
std::string unique_name(const std::string& what)
{
    std::string name = rig::unique(what);
    std::replace(name.begin(), name.end(), '/', '-');
    return name;
}

std::vector<std::string> each_endpoint()
{
    std::vector<std::string> endpoints;
    std::istringstream list(rig::endpoints());
    for (std::string endpoint; std::getline(list, endpoint, ',');) endpoints.push_back(endpoint);
    return endpoints;
}

vl_status put_text(vl_client* c, const std::string& key, const std::string& value)
{
    return vl_put(c, key.c_str(), value.data(), value.size(), nullptr, nullptr);
}

vl_status get_status(vl_client* c, const std::string& key)
{
    vl_kv* kv = nullptr;
    const vl_status status = vl_get(c, key.c_str(), VL_READ_LINEARIZABLE, &kv);
    vl_kv_free(kv);
    return status;
}

std::string read_text(vl_client* c, const std::string& key)
{
    vl_kv* kv = nullptr;
    REQUIRE(vl_get(c, key.c_str(), VL_READ_LINEARIZABLE, &kv) == VL_OK);
    std::string text(reinterpret_cast<const char*>(kv->value), kv->value_len);
    vl_kv_free(kv);
    return text;
}

uint64_t auth_revision(vl_client* admin)
{
    vl_role_list* roles = nullptr;
    REQUIRE(vl_roles_list(admin, VL_READ_LINEARIZABLE, &roles) == VL_OK);
    const uint64_t revision = roles->auth_revision;
    vl_role_list_free(roles);
    return revision;
}

std::vector<std::string> roles_of(vl_client* admin, const std::string& user)
{
    vl_user* found = nullptr;
    REQUIRE(vl_user_get(admin, user.c_str(), VL_READ_LINEARIZABLE, &found) == VL_OK);
    std::vector<std::string> roles(found->roles, found->roles + found->role_count);
    vl_user_free(found);
    return roles;
}

bool token_listed(vl_client* admin, const std::string& id)
{
    vl_token_list* tokens = nullptr;
    REQUIRE(vl_tokens_list(admin, VL_READ_LINEARIZABLE, &tokens) == VL_OK);
    bool found = false;
    for (size_t i = 0; i < tokens->count; i++) found |= tokens->tokens[i].id == id;
    vl_token_list_free(tokens);
    return found;
}

// The admin makes a role granting `permissions` on `resource`, a user with it, and its token.
struct Grantee {
    std::string role;
    std::string user;
    std::string token;
    std::string id;
};

Grantee grant(vl_client* admin, const std::string& what, unsigned permissions,
              const std::string& resource)
{
    Grantee made{unique_name(what + "-role"), unique_name(what), "", ""};
    const vl_grant grants[] = {{permissions, resource.c_str()}};
    REQUIRE(vl_role_put(admin, made.role.c_str(), grants, 1, nullptr) == VL_OK);
    const char* roles[] = {made.role.c_str()};
    REQUIRE(vl_user_put(admin, made.user.c_str(), roles, 1, nullptr) == VL_OK);
    vl_new_token* token = nullptr;
    REQUIRE_MESSAGE(vl_token_create(admin, made.user.c_str(), 0, &token) == VL_OK,
                    vl_client_errstr(admin));
    made.token = token->token;
    made.id = token->id;
    vl_new_token_free(token);
    return made;
}

// Every replica answers `expected` to the token's read of `key`, once it has applied the op.
void every_replica_answers(const std::string& token, const std::string& key, vl_status expected)
{
    for (const std::string& endpoint : each_endpoint()) {
        const Client one = client_as(token, endpoint);
        INFO(endpoint << " answered " << vl_client_errstr(one.get()));
        CHECK(rig::eventually(kApplied, [&] { return get_status(one.get(), key) == expected; }));
    }
}

}  // namespace

TEST_CASE("the users, roles and tokens calls from plain C11")
{
    char why[512] = "";
    CHECK_MESSAGE(c11_auth_walkthrough(rig::endpoints().c_str(), rig::admin_token().c_str(),
                                       unique_name("c11").c_str(), rig::unique("c11").c_str(),
                                       why, sizeof why) == 0,
                  why);
}

TEST_CASE("a reader's token reads its prefix, is refused elsewhere, and is 401 once revoked")
{
    const Client admin = client_as(rig::admin_token());
    const std::string app = rig::unique("app") + "/";
    const std::string other = rig::unique("other") + "/";
    REQUIRE(put_text(admin.get(), app + "x", "v1") == VL_OK);
    REQUIRE(put_text(admin.get(), other + "x", "theirs") == VL_OK);
    const Grantee reader = grant(admin.get(), "reader", VL_PERMISSION_READ, "key:" + app);
    CHECK(reader.token.starts_with("vl_"));
    CHECK(reader.token.size() == 3 + 64);
    CHECK(reader.id.size() == 16);

    every_replica_answers(reader.token, app + "x", VL_OK);
    const Client c = client_as(reader.token);
    CHECK(read_text(c.get(), app + "x") == "v1");
    CHECK(put_text(c.get(), app + "x", "mine") == VL_ERR_PERMISSION_DENIED);
    CHECK(std::string(vl_client_errstr(c.get())).starts_with("permission_denied: "));
    CHECK(get_status(c.get(), other + "x") == VL_ERR_PERMISSION_DENIED);
    CHECK(read_text(admin.get(), app + "x") == "v1");

    CHECK(token_listed(admin.get(), reader.id));
    vl_user* user = nullptr;
    REQUIRE(vl_user_get(admin.get(), reader.user.c_str(), VL_READ_LINEARIZABLE, &user) == VL_OK);
    REQUIRE(user->token_count == 1);
    CHECK(std::string(user->token_ids[0]) == reader.id);
    vl_user_free(user);

    uint64_t before = 0, after = 0;
    vl_token_list* tokens = nullptr;
    REQUIRE(vl_tokens_list(admin.get(), VL_READ_LINEARIZABLE, &tokens) == VL_OK);
    before = tokens->auth_revision;
    vl_token_list_free(tokens);
    REQUIRE(vl_token_revoke(admin.get(), reader.id.c_str(), &after) == VL_OK);
    CHECK(after == before + 1);
    every_replica_answers(reader.token, app + "x", VL_ERR_UNAUTHENTICATED);
    CHECK(get_status(c.get(), app + "x") == VL_ERR_UNAUTHENTICATED);
    CHECK(std::string(vl_client_errstr(c.get())).starts_with("unauthenticated: "));
    CHECK_FALSE(token_listed(admin.get(), reader.id));
}

TEST_CASE("a token without the admin role manages nothing, and no token is 401")
{
    const Client admin = client_as(rig::admin_token());
    const std::string app = rig::unique("app") + "/";
    const Grantee writer =
        grant(admin.get(), "writer", VL_PERMISSION_READ | VL_PERMISSION_WRITE, "key:" + app);
    every_replica_answers(writer.token, app + "x", VL_ERR_KEY_NOT_FOUND);
    const uint64_t revision = auth_revision(admin.get());

    const Client c = client_as(writer.token);
    const char* admin_role[] = {"admin"};
    CHECK(vl_user_put(c.get(), writer.user.c_str(), admin_role, 1, nullptr) ==
          VL_ERR_PERMISSION_DENIED);
    CHECK(std::string(vl_client_errstr(c.get())).starts_with("permission_denied: "));
    const vl_grant everything[] = {{VL_PERMISSION_ADMIN, "*"}};
    CHECK(vl_role_put(c.get(), writer.role.c_str(), everything, 1, nullptr) ==
          VL_ERR_PERMISSION_DENIED);
    CHECK(vl_role_delete(c.get(), writer.role.c_str(), nullptr) == VL_ERR_PERMISSION_DENIED);
    CHECK(vl_user_delete(c.get(), writer.user.c_str(), nullptr) == VL_ERR_PERMISSION_DENIED);
    vl_new_token* made = nullptr;
    CHECK(vl_token_create(c.get(), writer.user.c_str(), 0, &made) == VL_ERR_PERMISSION_DENIED);
    CHECK(made == nullptr);
    CHECK(vl_token_revoke(c.get(), writer.id.c_str(), nullptr) == VL_ERR_PERMISSION_DENIED);
    vl_user_list* users = nullptr;
    CHECK(vl_users_list(c.get(), VL_READ_LINEARIZABLE, &users) == VL_ERR_PERMISSION_DENIED);
    CHECK(users == nullptr);

    const Client nobody = client_as("");
    vl_role_list* roles = nullptr;
    CHECK(vl_roles_list(nobody.get(), VL_READ_LINEARIZABLE, &roles) == VL_ERR_UNAUTHENTICATED);
    CHECK(vl_role_delete(nobody.get(), writer.role.c_str(), nullptr) == VL_ERR_UNAUTHENTICATED);

    CHECK(auth_revision(admin.get()) == revision);
    CHECK(roles_of(admin.get(), writer.user) == std::vector<std::string>{writer.role});
    CHECK(token_listed(admin.get(), writer.id));
}

TEST_CASE("bad arguments are refused before anything is sent, and change nothing")
{
    const Client admin = client_as(rig::admin_token());
    vl_client* c = admin.get();
    const uint64_t revision = auth_revision(c);
    const std::string too_long(65, 'r');
    const vl_grant fine{VL_PERMISSION_READ, "key:app/"};
    const std::vector<vl_grant> too_many(33, fine);
    std::vector<const char*> many_roles(33, "reader");
    vl_role* role = nullptr;
    vl_new_token* made = nullptr;
    const auto refused = [&](vl_status status) {
        INFO(vl_client_errstr(c));
        CHECK(status == VL_ERR_INVALID_ARGUMENT);
        CHECK(std::string(vl_client_errstr(c)).starts_with("client_invalid_argument: "));
    };
    for (const char* name : {"a/b", "", "tab\tname", "\xff\xfe", too_long.c_str(), "admin"})
        refused(vl_role_put(c, name, &fine, 1, nullptr));
    refused(vl_role_put(c, nullptr, &fine, 1, nullptr));
    for (const vl_grant bad : std::vector<vl_grant>{{0, "key:app/"},
                                                    {32, "key:app/"},
                                                    {VL_PERMISSION_READ, "keys:app/"},
                                                    {VL_PERMISSION_READ, "key"},
                                                    {VL_PERMISSION_READ, ""},
                                                    {VL_PERMISSION_READ, "key:a\x01"},
                                                    {VL_PERMISSION_READ, nullptr}})
        refused(vl_role_put(c, "fine", &bad, 1, nullptr));
    refused(vl_role_put(c, "fine", too_many.data(), too_many.size(), nullptr));
    refused(vl_role_put(c, "fine", nullptr, 1, nullptr));
    refused(vl_role_delete(c, "admin", nullptr));
    refused(vl_role_get(c, "a/b", VL_READ_LINEARIZABLE, &role));
    CHECK(role == nullptr);
    const char* slashed[] = {"a/b"};
    refused(vl_user_put(c, "fine", slashed, 1, nullptr));
    refused(vl_user_put(c, "fine", many_roles.data(), many_roles.size(), nullptr));
    refused(vl_user_put(c, "fine", nullptr, 1, nullptr));
    refused(vl_user_put(c, "a/b", nullptr, 0, nullptr));
    refused(vl_user_delete(c, too_long.c_str(), nullptr));
    refused(vl_token_create(c, "fine", 316'224'001, &made));
    refused(vl_token_create(c, "", 0, &made));
    refused(vl_token_create(c, "fine", 0, nullptr));
    CHECK(made == nullptr);
    for (const char* id : {"xyz", "0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0"})
        refused(vl_token_revoke(c, id, nullptr));
    CHECK(auth_revision(c) == revision);
}

TEST_CASE("names that do not exist are VL_ERR_NOT_FOUND and change nothing")
{
    const Client admin = client_as(rig::admin_token());
    vl_client* c = admin.get();
    const uint64_t revision = auth_revision(c);
    const std::string missing = unique_name("missing");
    vl_role* role = nullptr;
    vl_user* user = nullptr;
    vl_new_token* made = nullptr;
    CHECK(vl_role_get(c, missing.c_str(), VL_READ_LINEARIZABLE, &role) == VL_ERR_NOT_FOUND);
    CHECK(std::string(vl_client_errstr(c)).starts_with("not_found: "));
    CHECK(vl_user_get(c, missing.c_str(), VL_READ_STALE, &user) == VL_ERR_NOT_FOUND);
    CHECK(vl_role_delete(c, missing.c_str(), nullptr) == VL_ERR_NOT_FOUND);
    CHECK(vl_user_delete(c, missing.c_str(), nullptr) == VL_ERR_NOT_FOUND);
    CHECK(vl_token_revoke(c, "0000000000000000", nullptr) == VL_ERR_NOT_FOUND);
    CHECK(vl_token_create(c, missing.c_str(), 0, &made) == VL_ERR_NOT_FOUND);
    const char* roles[] = {missing.c_str()};
    CHECK(vl_user_put(c, missing.c_str(), roles, 1, nullptr) == VL_ERR_NOT_FOUND);
    CHECK((role == nullptr && user == nullptr && made == nullptr));
    CHECK(auth_revision(c) == revision);
}

TEST_CASE("deleting a role takes it from its users; deleting a user revokes its tokens")
{
    const Client admin = client_as(rig::admin_token());
    const std::string app = rig::unique("app") + "/";
    const Grantee gone = grant(admin.get(), "gone", VL_PERMISSION_READ, "key:" + app);
    every_replica_answers(gone.token, app + "x", VL_ERR_KEY_NOT_FOUND);
    REQUIRE(vl_role_delete(admin.get(), gone.role.c_str(), nullptr) == VL_OK);
    CHECK(roles_of(admin.get(), gone.user).empty());
    const Client c = client_as(gone.token);
    CHECK(rig::eventually(kApplied, [&] {
        return get_status(c.get(), app + "x") == VL_ERR_PERMISSION_DENIED;
    }));
    REQUIRE(vl_user_delete(admin.get(), gone.user.c_str(), nullptr) == VL_OK);
    CHECK_FALSE(token_listed(admin.get(), gone.id));
    every_replica_answers(gone.token, app + "x", VL_ERR_UNAUTHENTICATED);
}
