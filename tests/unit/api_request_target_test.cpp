// The request target, decoded strictly (api/request_target.h; issue 11).
#include <doctest/doctest.h>

#include "api/request_target.h"

using namespace voltlock::api;

TEST_CASE("a target splits into a decoded path and query")
{
    auto t = parse_target("/v1/kv/a%2Fb%25c?prefix=true&after=x%20y+z&bare");
    REQUIRE(t.ok());
    CHECK(t.value().path == "/v1/kv/a/b%c");
    CHECK(t.value().get("prefix") == "true");
    CHECK(t.value().get("after") == "x y z");  // '+' is a space in the query only
    CHECK(t.value().get("bare") == "");
    CHECK_FALSE(t.value().has("limit"));
    auto plus = parse_target("/v1/kv/a+b");
    REQUIRE(plus.ok());
    CHECK(plus.value().path == "/v1/kv/a+b");
}

TEST_CASE("a bad escape is 400 naming where")
{
    for (const char* bad : {"/v1/kv/a/%zz", "/v1/kv/a/%", "/v1/kv/a/%4", "/v1/kv/%g0"}) {
        auto t = parse_target(bad);
        REQUIRE_FALSE(t.ok());
        CHECK(t.error().status == 400);
        CHECK(t.error().code == "invalid_argument");
        CHECK(t.error().details["field"] == "path");
    }
    auto query = parse_target("/v1/kv/a?after=%zz");
    REQUIRE_FALSE(query.ok());
    CHECK(query.error().details["field"] == "after");
}

TEST_CASE("a parameter given twice is 400")
{
    auto t = parse_target("/v1/kv/a?stale=true&stale=false");
    REQUIRE_FALSE(t.ok());
    CHECK(t.error().details["field"] == "stale");
}

TEST_CASE("more than 64 query parameters is 400")
{
    std::string raw = "/v1/kv/a?";
    for (int i = 0; i < 64; i++) raw += "p" + std::to_string(i) + "=1&";
    auto most = parse_target(raw);
    REQUIRE(most.ok());
    CHECK(most.value().query.size() == 64);
    auto t = parse_target(raw + "one-more");
    REQUIRE_FALSE(t.ok());
    CHECK(t.error().status == 400);
    CHECK(t.error().details["field"] == "query");
    CHECK(t.error().details["violation"] == "too many parameters");
}

TEST_CASE("a parameter the endpoint does not take is 400 unknown_field")
{
    auto t = parse_target("/v1/kv/?prefix=true&dry=1");
    REQUIRE(t.ok());
    const auto error = check_query(t.value(), {"prefix", "prev_revision"});
    REQUIRE(error);
    CHECK(error->status == 400);
    CHECK(error->code == "unknown_field");
    CHECK(error->details["field"] == "dry");
    CHECK(error->details["allowed"] == Json::array({"prefix", "prev_revision"}));
    CHECK_FALSE(check_query(t.value(), std::vector<std::string>{"prefix", "dry"}));
    CHECK(check_query(parse_target("/healthz?x").value(), {}));
}

TEST_CASE("a raw space or control byte in the target is 400, not part of a key")
{
    for (const char* bad : {"/v1/kv/sp ace", "/v1/kv/t\tb", "/v1/kv/a?after=x y", "/v1/kv/\x7f"}) {
        auto t = parse_target(bad);
        REQUIRE_FALSE(t.ok());
        CHECK(t.error().status == 400);
        CHECK(t.error().details["field"] == "target");
    }
    CHECK(parse_target("/v1/kv/sp%20ace").value().path == "/v1/kv/sp ace");
}

TEST_CASE("a target in the absolute form is read as its path and query")
{
    auto t = parse_target("http://10.0.0.1:7480/v1/kv/a?prefix=true");
    REQUIRE(t.ok());
    CHECK(t.value().path == "/v1/kv/a");
    CHECK(t.value().get("prefix") == "true");
    CHECK(parse_target("HTTPS://example/healthz").value().path == "/healthz");
    CHECK(parse_target("http://example").value().path == "/");
    CHECK(parse_target("http://example?x").value().get("x") == "");
    CHECK(parse_target("ftp://example/healthz").value().path == "ftp://example/healthz");
}

TEST_CASE("an empty target stays empty: only the absolute form's empty path is '/'")
{
    CHECK(parse_target("").value().path.empty());
    CHECK(parse_target("?x").value().path.empty());
}
