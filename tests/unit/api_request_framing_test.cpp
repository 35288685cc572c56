// How a request's body is framed and whom it names as its host (api/request_framing.h; issue
// 12's hostile clients).
#include <doctest/doctest.h>

#include "api/request_framing.h"

using namespace voltlock::api;

using Headers = std::vector<std::pair<std::string, std::string>>;

TEST_CASE("Content-Length or one chunked Transfer-Encoding frames a body")
{
    CHECK_FALSE(framing_error({}));
    CHECK_FALSE(framing_error(Headers{{"host", "x"}, {"content-length", "15"}}));
    CHECK_FALSE(framing_error(Headers{{"transfer-encoding", "Chunked"}}));
    // The same length twice says one thing (RFC 9110 8.6 lets a recipient take it).
    CHECK_FALSE(framing_error(Headers{{"content-length", "5"}, {"content-length", "5 "}}));
}

TEST_CASE("any other framing is 400 naming the header")
{
    const std::vector<std::pair<Headers, std::string>> cases = {
        {{{"transfer-encoding", "gzip"}}, "Transfer-Encoding"},
        {{{"transfer-encoding", "gzip, chunked"}}, "Transfer-Encoding"},
        // Not chunked to libmicrohttpd, which keeps the whitespace after a value.
        {{{"transfer-encoding", "chunked "}}, "Transfer-Encoding"},
        {{{"transfer-encoding", "chunked\t"}}, "Transfer-Encoding"},
        {{{"transfer-encoding", "chunked"}, {"transfer-encoding", "chunked"}}, "Transfer-Encoding"},
        {{{"transfer-encoding", "identity"}, {"content-length", "3"}}, "Transfer-Encoding"},
        {{{"content-length", "5"}, {"content-length", "6"}}, "Content-Length"},
        {{{"content-length", "13"}, {"transfer-encoding", "chunked"}}, "Content-Length"},
        {{{"transfer-encoding", "chunked"}, {"content-length", "13"}}, "Content-Length"},
        {{{"x-a ", "1"}}, "x-a "},
        {{{"x\tb", "1"}}, "x\tb"},
        {{{"", "1"}}, ""},
    };
    for (const auto& [headers, field] : cases) {
        const auto error = framing_error(headers);
        REQUIRE(error);
        CHECK(error->status == 400);
        CHECK(error->code == "invalid_argument");
        CHECK(error->details["field"] == field);
        CHECK(error->details["in"] == "header");
    }
}

TEST_CASE("an HTTP/1.1 request names one host, with or without a port")
{
    for (const char* host : {"x", "10.77.0.10:7480", "[::1]:7480", "db-1.example_zone.", ""})
        CHECK_FALSE(host_error("HTTP/1.1", Headers{{"host", host}}));
    // HTTP/1.0 had no Host: a request without one is served.
    CHECK_FALSE(host_error("HTTP/1.0", {}));
}

TEST_CASE("a request without its Host, with two, or with one that is no host is 400")
{
    const std::vector<std::pair<std::string, Headers>> cases = {
        {"HTTP/1.1", {}},
        {"HTTP/1.1", {{"content-length", "0"}}},
        {"HTTP/1.1", {{"host", "a"}, {"host", "b"}}},
        {"HTTP/1.0", {{"host", "a"}, {"host", "a"}}},
        {"HTTP/1.1", {{"host", "a b"}}},
        {"HTTP/1.1", {{"host", "a/b"}}},
        {"HTTP/1.1", {{"host", "user@a"}}},
        {"HTTP/1.0", {{"host", "a?b"}}},
    };
    for (const auto& [version, headers] : cases) {
        const auto error = host_error(version, headers);
        REQUIRE(error);
        CHECK(error->status == 400);
        CHECK(error->code == "invalid_argument");
        CHECK(error->details["field"] == "Host");
        CHECK(error->details["in"] == "header");
    }
}
