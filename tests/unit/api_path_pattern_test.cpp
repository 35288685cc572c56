// Route patterns (api/path_pattern.h): what each placeholder takes, against the paths the
// router sees (already percent-decoded).
#include <doctest/doctest.h>

#include <stdexcept>

#include "api/path_pattern.h"

using voltlock::api::PathPattern;

namespace {

// The placeholder's text, or "<no match>".
std::string held(const char* pattern, const char* path)
{
    const auto match = PathPattern(pattern).match(path);
    return match ? std::string(*match) : "<no match>";
}

}  // namespace

TEST_CASE("a literal pattern matches its path exactly")
{
    CHECK(held("/v1/sessions", "/v1/sessions") == "");
    CHECK(held("/v1/sessions", "/v1/sessions/") == "<no match>");
    CHECK(held("/v1/sessions", "/v1/session") == "<no match>");
    CHECK(held("/", "/") == "");
    CHECK(held("/", "") == "<no match>");
}

TEST_CASE("{id} is one segment: at least a byte, no '/'")
{
    CHECK(held("/v1/sessions/{id}", "/v1/sessions/17") == "17");
    CHECK(held("/v1/sessions/{id}", "/v1/sessions/") == "<no match>");
    CHECK(held("/v1/sessions/{id}", "/v1/sessions/1/2") == "<no match>");
    CHECK(held("/v1/sessions/{id}:keepalive", "/v1/sessions/9:keepalive") == "9");
    CHECK(held("/v1/sessions/{id}:keepalive", "/v1/sessions/:keepalive") == "<no match>");
    CHECK(held("/v1/sessions/{id}:keepalive", "/v1/sessions/9:keepalivex") == "<no match>");
    CHECK(held("/v1/sessions/{id}", "/v1/sessions/a\nb") == "a\nb");
}

TEST_CASE("{name+} takes anything, '/' and ':' too; the suffix anchors at the end")
{
    CHECK(held("/v1/locks/{name+}:acquire", "/v1/locks/db/primary:acquire") == "db/primary");
    CHECK(held("/v1/locks/{name+}:acquire", "/v1/locks/a:acquire:acquire") == "a:acquire");
    CHECK(held("/v1/locks/{name+}:acquire", "/v1/locks/:acquire") == "<no match>");
    CHECK(held("/v1/locks/{name+}:acquire", "/v1/locks/x:release") == "<no match>");
    CHECK(held("/v1/locks/{name+}:acquire", "/v1/locks:acquire") == "<no match>");
    CHECK(held("/v1/locks/{name+}", "/v1/locks/a b\r\n") == "a b\r\n");
    CHECK(held("/v1/locks/{name+}", "/v1/locks/") == "<no match>");
    CHECK(held("/v1/locks/{name+}", "/v1/lock/x") == "<no match>");
}

TEST_CASE("{key*} takes anything or nothing")
{
    CHECK(held("/v1/kv/{key*}", "/v1/kv/") == "");
    CHECK(held("/v1/kv/{key*}", "/v1/kv/config/db") == "config/db");
    CHECK(held("/v1/kv/{key*}", "/v1/kv") == "<no match>");
    CHECK(held("/ui/{file*}", "/ui/app.js") == "app.js");
    CHECK(held("/ui/{file*}", "/uix") == "<no match>");
}

TEST_CASE("a pattern outside the forms is refused where it is written")
{
    CHECK_THROWS_AS(PathPattern("/v1/{a}/{b}"), std::invalid_argument);
    CHECK_THROWS_AS(PathPattern("/v1/{a"), std::invalid_argument);
    CHECK_THROWS_AS(PathPattern("/v1/{}"), std::invalid_argument);
}
