// The web UI (webui/, docs/webui.md): files embedded in voltlockd at build time
// (cmake/embed_files.cmake) and served under /ui/ by every replica. Independent of the HTTP
// server: a router hands ui_response() the request's path and If-None-Match and sends back what
// it answers.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace voltlock::api {

// The prefix the UI is served under; "/ui" alone redirects to "/ui/".
inline constexpr std::string_view kUiPrefix = "/ui/";

struct EmbeddedFile {
    std::string_view path;  // below /ui/, e.g. "app.js" or "vendor/uPlot.esm.js"
    std::string_view etag;  // quoted, from the content's hash
    std::string_view bytes;
};

// Defined in the generated source (build/generated/ui_assets_data.cpp).
std::span<const EmbeddedFile> embedded_ui_files();

struct UiResponse {
    int status = 200;
    std::string content_type;
    std::string_view body;  // points into the embedded files (or a static string)
    std::vector<std::pair<std::string, std::string>> headers;  // caching, redirect, security
};

// The answer to GET `path` (starting with /ui), given the request's If-None-Match header ("" if
// none): 200 with the file, 304 when the ETag matches, 301 from /ui to /ui/, 404 otherwise.
UiResponse ui_response(std::string_view path, std::string_view if_none_match);

// The content type for a file name, by its extension.
std::string content_type_for(std::string_view path);

}  // namespace voltlock::api
