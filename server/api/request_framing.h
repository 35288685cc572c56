// How a request's body is framed, checked once its headers are in and before any of the body is
// read. libmicrohttpd reads a body by Content-Length or by chunked Transfer-Encoding. Any other
// Transfer-Encoding it reads until the connection closes, so the client waits for an answer that
// never comes. Of two different Content-Lengths it takes the first, where a proxy in front may
// take the other; of a Content-Length beside a chunked Transfer-Encoding it takes the encoding,
// where a proxy may take the length; and a header name with whitespace before its colon is read
// differently by different parsers: all are request smuggling (RFC 9112 sections 5.1 and 6.3).
// Each is 400, and the connection closes after it. Pure.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/translate.h"

namespace voltlock::api {

// `headers`: as received, names in lower case. The first reason the body cannot be read safely,
// as 400 `invalid_argument` naming the header; nullopt when the framing is sound.
std::optional<ApiError> framing_error(
    const std::vector<std::pair<std::string, std::string>>& headers);

}  // namespace voltlock::api
