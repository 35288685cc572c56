#include "api/ui_assets.h"

#include <algorithm>

namespace voltlock::api {

namespace {

// Every page loads only from its own origin: the UI talks to the replica that served it, and
// this makes the browser refuse anything else (and say so in the console, which the browser
// tests read).
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

bool ends_with(std::string_view s, std::string_view suffix)
{
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool etag_matches(std::string_view if_none_match, std::string_view etag)
{
    // A list of tags, or "*"; weak tags (W/"...") compare by their value.
    if (if_none_match.find('*') != std::string_view::npos) return true;
    return if_none_match.find(etag) != std::string_view::npos;
}

UiResponse plain(int status, std::string_view body)
{
    return UiResponse{.status = status,
                      .content_type = "text/plain; charset=utf-8",
                      .body = body,
                      .headers = {{"Cache-Control", "no-store"}}};
}

}  // namespace

std::string content_type_for(std::string_view path)
{
    static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".json", "application/json"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
    };
    for (const auto& [extension, type] : kTypes)
        if (ends_with(path, extension)) return std::string(type);
    return "application/octet-stream";
}

UiResponse ui_response(std::string_view path, std::string_view if_none_match)
{
    if (path == "/ui") {
        UiResponse redirect = plain(301, "the web UI is at /ui/\n");
        redirect.headers.emplace_back("Location", std::string(kUiPrefix));
        return redirect;
    }
    if (!path.starts_with(kUiPrefix)) return plain(404, "not part of the web UI\n");
    std::string_view name = path.substr(kUiPrefix.size());
    if (name.empty()) name = "index.html";
    const auto files = embedded_ui_files();
    const auto file = std::find_if(files.begin(), files.end(),
                                   [&](const EmbeddedFile& f) { return f.path == name; });
    if (file == files.end()) return plain(404, "no such file in the web UI\n");

    // The files change only with the binary: "no-cache" revalidates on every load, which the
    // ETag answers with an empty 304, so an upgraded replica never serves a stale mix.
    UiResponse answer{.status = 200,
                      .content_type = content_type_for(name),
                      .body = file->bytes,
                      .headers = {{"Cache-Control", "no-cache"},
                                  {"ETag", std::string(file->etag)},
                                  {"X-Content-Type-Options", "nosniff"},
                                  {"Content-Security-Policy", kContentSecurityPolicy},
                                  {"Referrer-Policy", "no-referrer"}}};
    if (etag_matches(if_none_match, file->etag)) {
        answer.status = 304;
        answer.body = {};
    }
    return answer;
}

}  // namespace voltlock::api
