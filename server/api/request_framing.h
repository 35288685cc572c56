// How a request's body is framed, checked once its headers are in and before any of the body is
// read. libmicrohttpd reads a body by Content-Length or by chunked Transfer-Encoding. Any other
// Transfer-Encoding it reads until the connection closes, so the client waits for an answer that
// never comes. Of two different Content-Lengths it takes the first, where a proxy in front may
// take the other; of a Content-Length beside a chunked Transfer-Encoding it takes the encoding,
// where a proxy may take the length; and a header name with whitespace before its colon is read
// differently by different parsers: all are request smuggling (RFC 9112 sections 5.1 and 6.3).
// Each is 400, and the connection closes after it; so is a request that does not name one
// host (host_error). Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/translate.h"

namespace voltlock::api {

// `headers`: as received, names in lower case. The first reason the body cannot be read safely,
// as 400 `invalid_argument` naming the header; nullopt when the framing is sound.
std::optional<ApiError> framing_error(
    const std::vector<std::pair<std::string, std::string>>& headers);

// RFC 9112 section 3.2: an HTTP/1.1 request without Host, any request with more than one, or
// one whose value is not a host with an optional port, is 400 (as Go's net/http answers etcd's
// and Consul's clients). An empty Host is allowed: a target without an authority sends one.
// `version` as on the request line ("HTTP/1.1"); nullopt when the Host is sound.
std::optional<ApiError> host_error(std::string_view version,
                                   const std::vector<std::pair<std::string, std::string>>& headers);

}  // namespace voltlock::api
