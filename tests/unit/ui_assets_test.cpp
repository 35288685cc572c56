// The web UI's embedded files (server/api/ui_assets.h) and the commit-latency histogram that its
// cell page reads (server/shell/latency_histogram.h).
#include <doctest/doctest.h>

#include <string>

#include "api/ui_assets.h"
#include "shell/latency_histogram.h"

namespace voltlock::api {
namespace {

std::string header(const UiResponse& response, const std::string& name)
{
    for (const auto& [key, value] : response.headers)
        if (key == name) return value;
    return "";
}

TEST_CASE("/ui/ serves the embedded index page with its ETag and a same-origin policy")
{
    const UiResponse index = ui_response("/ui/", "");
    CHECK(index.status == 200);
    CHECK(index.content_type == "text/html; charset=utf-8");
    CHECK(index.body.starts_with("<!doctype html>"));
    CHECK(header(index, "Cache-Control") == "no-cache");
    CHECK(header(index, "ETag").starts_with("\""));
    CHECK(header(index, "Content-Security-Policy").starts_with("default-src 'self'"));
    CHECK(ui_response("/ui/index.html", "").body == index.body);
}

TEST_CASE("a request carrying the file's ETag is answered 304 with no body")
{
    const std::string etag = header(ui_response("/ui/", ""), "ETag");
    const UiResponse again = ui_response("/ui/", etag);
    CHECK(again.status == 304);
    CHECK(again.body.empty());
    CHECK(ui_response("/ui/", "W/" + etag + ", \"other\"").status == 304);
    CHECK(ui_response("/ui/", "\"some-older-build\"").status == 200);
}

TEST_CASE("/ui redirects to /ui/; unknown files and other paths are 404")
{
    const UiResponse redirect = ui_response("/ui", "");
    CHECK(redirect.status == 301);
    CHECK(header(redirect, "Location") == "/ui/");
    CHECK(ui_response("/ui/no-such-file.js", "").status == 404);
    CHECK(ui_response("/ui/../CMakeLists.txt", "").status == 404);
    CHECK(ui_response("/v1/kv/x", "").status == 404);
}

TEST_CASE("every embedded file has a known content type, and each one is served")
{
    REQUIRE_FALSE(embedded_ui_files().empty());
    for (const EmbeddedFile& file : embedded_ui_files()) {
        CAPTURE(file.path);
        CHECK(content_type_for(file.path) != "application/octet-stream");
        const UiResponse served = ui_response("/ui/" + std::string(file.path), "");
        CHECK(served.status == 200);
        CHECK(served.body == file.bytes);
    }
    CHECK(content_type_for("app.js") == "text/javascript; charset=utf-8");
    CHECK(content_type_for("style.css") == "text/css; charset=utf-8");
}

}  // namespace
}  // namespace voltlock::api

namespace voltlock {
namespace {

TEST_CASE("the latency histogram counts each sample in the first bucket whose bound holds it")
{
    LatencyHistogram histogram;
    const nlohmann::json empty = histogram.json();
    const auto& bounds = empty["bounds_us"];
    REQUIRE(bounds.size() == LatencyHistogram::kBounds);
    CHECK(bounds[0] == 8);
    CHECK(bounds[1] == 11);
    CHECK(bounds[2] == 16);
    for (size_t i = 1; i < bounds.size(); i++) CHECK(bounds[i] > bounds[i - 1]);
    CHECK(empty["counts"].size() == LatencyHistogram::kBounds + 1);

    histogram.record(0);
    histogram.record(8);     // on the bound: that bucket
    histogram.record(9);     // above it: the next
    histogram.record(16);
    histogram.record(100'000'000);  // slower than every bound
    const nlohmann::json json = histogram.json();
    CHECK(json["counts"][0] == 2);
    CHECK(json["counts"][1] == 1);
    CHECK(json["counts"][2] == 1);
    CHECK(json["counts"][LatencyHistogram::kBounds] == 1);
    CHECK(json["count"] == 5);
    CHECK(json["sum_us"] == 100'000'033u);
    CHECK(histogram.count() == 5);
}

}  // namespace
}  // namespace voltlock
