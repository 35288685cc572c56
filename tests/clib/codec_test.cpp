// libvoltlock's codec against answers recorded from a real cell (docs/api.md, README): every
// error code mapped, values in both encodings, listings, sequencers, watch streams cut anywhere.
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <string>

#include "codec.h"
#include "error_codes.h"
#include "transport.h"

using namespace voltlock::client;

TEST_CASE("every error code of the server maps to its own status and back to its name")
{
#define VOLTLOCK_CODE(status, name) name,
    const char* codes[] = {VOLTLOCK_SERVER_ERROR_CODES(VOLTLOCK_CODE)};
#undef VOLTLOCK_CODE
    std::set<int> seen;
    for (const char* code : codes) {
        const vl_status status = status_from_code(code);
        CAPTURE(code);
        CHECK(status != VL_ERR_SERVER_OTHER);
        CHECK(std::string(status_name(status)) == code);
        CHECK(seen.insert(status).second);
    }
    // ... and every status the library has for a server code is one code's.
    for (int status = VL_ERR_BAD_JSON; status <= VL_ERR_QUOTA_EXCEEDED; status++)
        if (status != VL_ERR_SERVER_OTHER) CHECK(seen.count(status) == 1);
    CHECK(status_from_code("something_new") == VL_ERR_SERVER_OTHER);
    CHECK(status_from_code("ok") == VL_ERR_SERVER_OTHER);  // "ok" is not a server error code
    CHECK(std::string(status_name(VL_OK)) == "ok");
}

TEST_CASE("only 503s and transport failures are retried")
{
    CHECK(is_retryable(VL_ERR_UNAVAILABLE));
    CHECK(is_retryable(VL_ERR_NOT_LEADER));
    CHECK(is_retryable(VL_ERR_WAIT_OUTCOME_UNKNOWN));
    CHECK(is_retryable(VL_ERR_TRANSPORT));
    CHECK_FALSE(is_retryable(VL_ERR_LOCK_BUSY));
    CHECK_FALSE(is_retryable(VL_ERR_CAS_MISMATCH));
    CHECK_FALSE(is_retryable(VL_ERR_TIMEOUT));
    CHECK_FALSE(is_retryable(VL_ERR_QUOTA_EXCEEDED));  // 507: it stays full until space is freed
}

TEST_CASE("answers: success, server errors, and what is not the API")
{
    Json body;
    Failure ok = decode_answer(
        {201, R"({"deadline_ms":1795311458578,"lease_epoch":1,"lock_delay_ms":0,"name":"demo",)"
              R"("revision":1,"session":1,"ttl_ms":10000})", std::nullopt},
        &body);
    CHECK(ok.status == VL_OK);
    CHECK(body["session"] == 1);

    Failure busy = decode_answer(
        {409, R"({"code":"lock_busy","details":{"delay_until_ms":0,"revision":5},)"
              R"("message":"the lock is held; try again, or wait with wait_ms"})", std::nullopt},
        &body);
    CHECK(busy.status == VL_ERR_LOCK_BUSY);
    CHECK(busy.text == "lock_busy: the lock is held; try again, or wait with wait_ms");
    CHECK(body["details"]["revision"] == 5);

    CHECK(decode_answer({503, "", std::nullopt}, nullptr).status == VL_ERR_UNAVAILABLE);
    CHECK(decode_answer({502, "<html>bad gateway</html>", std::nullopt}, nullptr).status ==
          VL_ERR_PROTOCOL);
    CHECK(decode_answer({200, "[1,2]", std::nullopt}, nullptr).status == VL_ERR_PROTOCOL);
    CHECK(decode_answer({200, "{trunc", std::nullopt}, nullptr).status == VL_ERR_PROTOCOL);
}

TEST_CASE("base64 round trips every byte and refuses what is not base64")
{
    std::string all;
    for (int i = 0; i < 256; i++) all += char(i);
    for (size_t n = 0; n <= all.size(); n += 37) {
        const std::string part = all.substr(0, n);
        CHECK(base64_decode(base64_encode(part)) == part);
    }
    CHECK(base64_encode("ab") == "YWI=");
    CHECK(base64_encode("abc") == "YWJj");
    CHECK(base64_encode("a") == "YQ==");
    CHECK_FALSE(base64_decode("YQ=").has_value());
    CHECK_FALSE(base64_decode("Y===").has_value());
    CHECK_FALSE(base64_decode("YQ=a").has_value());
    CHECK_FALSE(base64_decode("Y*==").has_value());
}

TEST_CASE("names go percent-encoded, keeping '/' in paths")
{
    CHECK(encode_path_segment("db/primary") == "db/primary");
    CHECK(encode_path_segment("a b:c?d#%") == "a%20b%3Ac%3Fd%23%25");
    CHECK(encode_path_segment("\xc3\xa9") == "%C3%A9");
    CHECK(encode_query_value("cfg/a") == "cfg%2Fa");
    CHECK(valid_name("db/primary"));
    CHECK_FALSE(valid_name(""));
    CHECK_FALSE(valid_name("a\nb"));
    CHECK_FALSE(valid_name(std::string(513, 'k').c_str()));
    CHECK(valid_name(std::string(512, 'k').c_str()));
    // UTF-8 as the cell takes it: text in any script, but no stray or truncated byte, no
    // overlong form, surrogate or code point past U+10FFFF, and no NUL inside.
    CHECK(valid_name("\xc3\xbcn\xc3\xaf/\xd0\xba\xd0\xbb/\xf0\x9f\x94\x91"));
    CHECK(valid_name("\xf4\x8f\xbf\xbf"));  // U+10FFFF
    for (const char* bad : {"bad\xff", "cut\xe2\x82", "\xc0\xaf", "\xed\xa0\x80",
                            "\xf4\x90\x80\x80", "\x80"})
        CHECK_FALSE(valid_name(bad));
    CHECK_FALSE(valid_name(std::string_view("a\0b", 3)));
}

TEST_CASE("a key in UTF-8 and in base64")
{
    vl_kv* kv = kv_from_json(Json::parse(
        R"({"create_revision":3,"key":"config/db","mod_revision":3,"revision":5,)"
        R"("value":"10.0.0.5:5432","version":1})"));
    REQUIRE(kv);
    CHECK(std::string(kv->key) == "config/db");
    CHECK(std::string(reinterpret_cast<char*>(kv->value), kv->value_len) == "10.0.0.5:5432");
    CHECK(kv->value[kv->value_len] == 0);
    CHECK(kv->mod_revision == 3);
    CHECK(kv->session == 0);
    vl_kv_free(kv);

    kv = kv_from_json(Json::parse(
        R"({"create_revision":7,"key":"bin","mod_revision":8,"value":"AP8B","encoding":"base64",)"
        R"("version":2,"session":4})"));
    REQUIRE(kv);
    CHECK(kv->value_len == 3);
    CHECK(std::memcmp(kv->value, "\x00\xff\x01", 3) == 0);
    CHECK(kv->session == 4);
    vl_kv_free(kv);

    CHECK_THROWS(kv_from_json(Json::parse(R"({"key":"k","value":"%%%","encoding":"base64"})")));
    CHECK_THROWS(kv_from_json(Json::parse(R"({"key":"k"})")));
}

TEST_CASE("a listing page with more to come")
{
    vl_kv_list* list = kv_list_from_json(Json::parse(
        R"({"kvs":[{"create_revision":3,"key":"config/db","mod_revision":3,"value":"x",)"
        R"("version":1},{"create_revision":4,"key":"config/pool","mod_revision":4,)"
        R"("value":"16","version":1}],)"
        R"("more":true,"next_after":"config/pool","revision":4})"));
    REQUIRE(list);
    CHECK(list->count == 2);
    CHECK(list->more);
    CHECK(std::string(list->next_after) == "config/pool");
    CHECK(std::string(list->kvs[1].key) == "config/pool");
    vl_kv_list_free(list);

    list = kv_list_from_json(Json::parse(R"({"kvs":[],"more":false,"revision":9})"));
    REQUIRE(list);
    CHECK(list->count == 0);
    CHECK(list->next_after == nullptr);
    vl_kv_list_free(list);
}

TEST_CASE("sequencers parse, format and refuse a bad mode")
{
    const Json recorded = Json::parse(
        R"({"generation":1,"lock":"db/primary","mode":"exclusive","session":1})");
    vl_sequencer* seq = sequencer_from_json(recorded);
    REQUIRE(seq);
    CHECK(std::string(seq->lock) == "db/primary");
    CHECK(seq->mode == VL_LOCK_EXCLUSIVE);
    CHECK(sequencer_to_json(*seq) == recorded);
    vl_sequencer_free(seq);
    CHECK_THROWS(sequencer_from_json(Json::parse(
        R"({"generation":1,"lock":"l","mode":"sideways","session":1})")));
    // Numbers that nlohmann's get<uint64_t> would wrap or truncate.
    CHECK_THROWS(sequencer_from_json(Json::parse(
        R"({"generation":-1,"lock":"l","mode":"exclusive","session":1})")));
    CHECK_THROWS(sequencer_from_json(Json::parse(
        R"({"generation":1.5,"lock":"l","mode":"exclusive","session":1})")));
    CHECK_THROWS(sequencer_from_json(Json::parse(
        R"({"generation":1,"lock":"l","mode":"exclusive","session":-1})")));
}

TEST_CASE("a watch stream split at every byte gives the same blocks")
{
    const std::string stream =
        "retry: 1000\n: watching from revision 3\n\n"
        "id: 3\nevent: put\ndata: {\"cause\":\"request\",\"key\":\"config/db\",\"prev_revision\":0,"
        "\"revision\":3,\"session\":0,\"type\":\"put\",\"value\":\"MTA=\",\"encoding\":\"base64\"}"
        "\n\n"
        "event: delete\r\ndata: {\"revision\":4,\"type\":\"delete\",\"key\":\"a\"}\r\n\r\n"
        ": heartbeat\n\n";
    for (size_t cut = 0; cut <= stream.size(); cut++) {
        SseParser parser;
        auto blocks = parser.feed(std::string_view(stream).substr(0, cut));
        auto rest = parser.feed(std::string_view(stream).substr(cut));
        blocks.insert(blocks.end(), rest.begin(), rest.end());
        REQUIRE(blocks.size() == 4);
        CHECK(watching_from_revision(blocks[0].comments.at(0)) == 3u);
        CHECK(blocks[1].id == 3u);
        CHECK(blocks[1].event == "put");
        CHECK_FALSE(blocks[2].id.has_value());
        CHECK(blocks[2].event == "delete");
        CHECK(blocks[3].comments.at(0) == "heartbeat");
    }
    SseParser parser;
    auto blocks = parser.feed(stream);
    vl_event* event = event_from_json(blocks[1].data);
    REQUIRE(event);
    CHECK(event->revision == 3);
    CHECK(std::string(event->type) == "put");
    CHECK(std::string(reinterpret_cast<char*>(event->value), event->value_len) == "10");
    vl_event_free(event);
    event = event_from_json(blocks[2].data);
    REQUIRE(event);
    CHECK(event->value == nullptr);
    vl_event_free(event);
    CHECK_FALSE(watching_from_revision("heartbeat").has_value());
}

TEST_CASE("endpoint lists: schemes, ports, spaces, and mistakes")
{
    std::string why;
    auto parsed = parse_endpoints("http://10.77.0.10:7480, 10.77.0.11:7481/,host", &why);
    REQUIRE(parsed);
    REQUIRE(parsed->size() == 3);
    CHECK((*parsed)[0].url == "http://10.77.0.10:7480");
    CHECK((*parsed)[1].port == 7481);
    CHECK((*parsed)[2].url == "http://host:7480");
    CHECK_FALSE(parse_endpoints("", &why));
    CHECK_FALSE(parse_endpoints("http://a:1,https://b:1", &why));
    CHECK(why.find("mix http:// and https://") != std::string::npos);
    auto secure = parse_endpoints("https://a:1,b:2", &why);
    CHECK_FALSE(secure);  // a missing scheme is http://: mixed
    secure = parse_endpoints("https://a:1,https://b:2", &why);
    REQUIRE(secure);
    CHECK((*secure)[0].tls);
    CHECK((*secure)[1].url == "https://b:2");
    CHECK_FALSE(parse_endpoints("a:notaport", &why));
    CHECK_FALSE(parse_endpoints("a:99999", &why));
}

TEST_CASE("roles, users and tokens as the admin endpoints answer them")
{
    vl_role* role = role_from_json(Json::parse(
        R"({"auth_revision":4,"grants":[{"permissions":["read","watch"],"resource":"key:app/"},)"
        R"({"permissions":["lock"],"resource":"lock:"},{"permissions":["admin"],)"
        R"("resource":"*"}],"name":"app-rw","revision":12})"));
    REQUIRE(role);
    CHECK(std::string(role->name) == "app-rw");
    REQUIRE(role->grant_count == 3);
    CHECK(role->grants[0].permissions == (VL_PERMISSION_READ | VL_PERMISSION_WATCH));
    CHECK(std::string(role->grants[0].resource) == "key:app/");
    CHECK(std::string(role->grants[1].resource) == "lock:");
    CHECK(role->grants[2].permissions == VL_PERMISSION_ADMIN);
    vl_role_free(role);

    vl_role_list* roles = role_list_from_json(Json::parse(
        R"({"auth_revision":4,"revision":12,"roles":[{"grants":[],"name":"empty"},)"
        R"({"grants":[{"permissions":["write"],"resource":"barrier:b"}],"name":"w"}]})"));
    REQUIRE(roles);
    CHECK(roles->count == 2);
    CHECK(roles->auth_revision == 4);
    CHECK(roles->roles[0].grant_count == 0);
    CHECK(roles->roles[0].grants == nullptr);
    CHECK(roles->roles[1].grants[0].permissions == VL_PERMISSION_WRITE);
    vl_role_list_free(roles);

    vl_user_list* users = user_list_from_json(Json::parse(
        R"({"auth_revision":6,"revision":12,"users":[{"name":"billing","roles":["app-rw"],)"
        R"("tokens":["3f2a9c0d11e5b7a8"]},{"name":"idle","roles":[],"tokens":[]}]})"));
    REQUIRE(users);
    REQUIRE(users->count == 2);
    CHECK(std::string(users->users[0].roles[0]) == "app-rw");
    CHECK(std::string(users->users[0].token_ids[0]) == "3f2a9c0d11e5b7a8");
    CHECK(users->users[1].role_count == 0);
    vl_user_list_free(users);

    vl_token_list* tokens = token_list_from_json(Json::parse(
        R"({"auth_revision":7,"revision":12,"tokens":[{"created_ms":1700000000000,)"
        R"("expires_ms":null,"id":"3f2a9c0d11e5b7a8","user":"billing"},{"created_ms":)"
        R"(1700000000500,"expires_ms":1700086400500,"id":"0011223344556677","user":"ci"}]})"));
    REQUIRE(tokens);
    REQUIRE(tokens->count == 2);
    CHECK(tokens->tokens[0].expires_ms == 0);
    CHECK(tokens->tokens[1].expires_ms == 1700086400500);
    CHECK(std::string(tokens->tokens[1].user) == "ci");
    vl_token_list_free(tokens);

    vl_new_token* made = new_token_from_json(Json::parse(
        R"({"auth_revision":8,"id":"0011223344556677","revision":12,"token":"vl_00ff","ttl_s":60,)"
        R"("user":"ci"})"));
    REQUIRE(made);
    CHECK(std::string(made->token) == "vl_00ff");
    CHECK(made->ttl_s == 60);
    CHECK(made->auth_revision == 8);
    vl_new_token_free(made);
}

TEST_CASE("an auth answer of the wrong shape is refused, and what was built so far is freed")
{
    // Under ASan (LeakSanitizer): a half-built role, user or list leaks nothing.
    CHECK_THROWS(role_from_json(Json::parse(
        R"({"name":"r","grants":[{"permissions":["read"],"resource":"key:a"},)"
        R"({"permissions":["fly"],"resource":"key:b"}]})")));
    CHECK_THROWS(role_from_json(Json::parse(R"({"name":"r","grants":{"read":"key:a"}})")));
    CHECK_THROWS(role_from_json(Json::parse(R"({"name":"r"})")));
    CHECK_THROWS(user_list_from_json(Json::parse(
        R"({"auth_revision":1,"users":[{"name":"a","roles":["x"],"tokens":[]},)"
        R"({"name":"b","roles":[7],"tokens":[]}]})")));
    CHECK_THROWS(token_list_from_json(Json::parse(
        R"({"tokens":[{"id":"0011223344556677","user":"u","created_ms":1,"expires_ms":null}]})")));
    CHECK_THROWS(new_token_from_json(Json::parse(R"({"token":"vl_1","id":"x","user":"u"})")));
}

TEST_CASE("role and user bodies are checked as the cell checks them")
{
    std::string why;
    const vl_grant grants[] = {{VL_PERMISSION_READ | VL_PERMISSION_ADMIN, "key:app/"},
                               {VL_PERMISSION_LOCK, "*"}};
    const auto body = role_body(grants, 2, &why);
    REQUIRE(body);
    CHECK(*body == Json::parse(R"({"grants":[{"permissions":["read","admin"],)"
                               R"("resource":"key:app/"},)"
                               R"({"permissions":["lock"],"resource":"*"}]})"));
    CHECK(role_body(nullptr, 0, &why) == Json::parse(R"({"grants":[]})"));
    for (const vl_grant bad : std::initializer_list<vl_grant>{{0, "*"},
                                                             {64, "*"},
                                                             {1, "session:x"},
                                                             {1, "key"},
                                                             {1, "**"},
                                                             {1, "key:\x7f"},
                                                             {1, "key:\xc3"},
                                                             {1, nullptr}}) {
        CAPTURE(bad.permissions);
        CHECK_FALSE(role_body(&bad, 1, &why));
        CHECK(why.starts_with("grant 0: "));
    }
    const std::vector<vl_grant> too_many(33, grants[1]);
    CHECK_FALSE(role_body(too_many.data(), too_many.size(), &why));
    CHECK(role_body(too_many.data(), 32, &why));

    const char* roles[] = {"app-rw", "admin"};
    CHECK(user_body(roles, 2, &why) == Json::parse(R"({"roles":["app-rw","admin"]})"));
    const char* bad_roles[] = {"app-rw", "a/b"};
    CHECK_FALSE(user_body(bad_roles, 2, &why));
    CHECK(why.starts_with("role 1: "));
    CHECK_FALSE(user_body(nullptr, 1, &why));

    CHECK(valid_auth_name("billing"));
    CHECK(valid_auth_name(std::string(64, 'u').c_str()));
    CHECK_FALSE(valid_auth_name(std::string(65, 'u').c_str()));
    CHECK_FALSE(valid_auth_name("team/billing"));
    CHECK_FALSE(valid_auth_name("\xff"));
    CHECK_FALSE(valid_auth_name(""));
    CHECK(valid_token_id("0011223344556677"));
    CHECK_FALSE(valid_token_id("00112233445566778"));
    CHECK_FALSE(valid_token_id("001122334455667G"));
    CHECK_FALSE(valid_token_id(nullptr));

    CHECK(std::string(vl_permission_name(VL_PERMISSION_READ)) == "read");
    CHECK(std::string(vl_permission_name(VL_PERMISSION_ADMIN)) == "admin");
    CHECK(vl_permission_name(0) == nullptr);
    CHECK(vl_permission_name(3) == nullptr);
    CHECK(vl_permission_name(32) == nullptr);
}
