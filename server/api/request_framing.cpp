#include "api/request_framing.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace voltlock::api {

namespace {

std::string_view trimmed(std::string_view text)
{
    const size_t first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos) return {};
    return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// libmicrohttpd (0.9.75) drops the whitespace before a header's value but keeps what follows it,
// and takes a body as chunked only when the value is exactly "chunked" in any case; any other
// value it reads as a body that ends when the connection does. So "chunked " with a space or a
// tab after it is not chunked to libmicrohttpd: trimmed here, it passed our check and the client
// waited out the body timeout with no answer.
bool is_chunked(std::string_view coding)
{
    return std::equal(coding.begin(), coding.end(), std::string_view("chunked").begin(),
                      std::string_view("chunked").end(),
                      [](char a, char b) { return (a | 0x20) == b; });
}

ApiError bad_header(const std::string& name, const std::string& violation,
                    const std::string& message)
{
    return ApiError{400, "invalid_argument", message,
                    Json{{"field", name}, {"in", "header"}, {"violation", violation}}};
}

// uri-host [":" port] of RFC 3986: a reg-name, an IPv4 address or a bracketed IP literal, so
// no whitespace, '/', '?', '#' or '@'.
bool is_host_byte(char c)
{
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("-._~%!$&'()*+,;=:[]").find(c) != std::string_view::npos;
}

}  // namespace

std::optional<ApiError> host_error(std::string_view version,
                                   const std::vector<std::pair<std::string, std::string>>& headers)
{
    const std::string* host = nullptr;
    for (const auto& [name, value] : headers) {
        if (name != "host") continue;
        if (host) return bad_header("Host", "given twice", "Host is given more than once");
        host = &value;
    }
    if (!host) {
        if (version != "HTTP/1.1") return std::nullopt;
        return bad_header("Host", "missing", "an HTTP/1.1 request must have a Host header");
    }
    const std::string_view value = trimmed(*host);
    if (!std::all_of(value.begin(), value.end(), is_host_byte))
        return bad_header("Host", "not a host", "Host '" + *host + "' is not a host[:port]");
    return std::nullopt;
}

std::optional<ApiError> framing_error(
    const std::vector<std::pair<std::string, std::string>>& headers)
{
    std::optional<std::string> length;
    bool encoded = false;
    for (const auto& [name, value] : headers) {
        if (name.empty() || name.find_first_of(" \t") != std::string::npos)
            return bad_header(name, "whitespace in the name",
                              "header name '" + name +
                                  "' is empty or has whitespace in it (write 'Name: value')");
        if (name == "transfer-encoding") {
            if (encoded || !is_chunked(value))
                return bad_header("Transfer-Encoding", "not chunked",
                                  "Transfer-Encoding '" + value +
                                      "' is not supported: send the body with Content-Length, "
                                      "or with one 'Transfer-Encoding: chunked'");
            encoded = true;
        }
        if (name == "content-length") {
            if (length && trimmed(*length) != trimmed(value))
                return bad_header("Content-Length", "given twice",
                                  "Content-Length is given twice, as '" + *length + "' and '" +
                                      value + "'");
            length = value;
        }
    }
    if (encoded && length)
        return bad_header("Content-Length", "with Transfer-Encoding",
                          "Content-Length and Transfer-Encoding are both given: send one "
                          "(RFC 9112 6.3)");
    return std::nullopt;
}

}  // namespace voltlock::api
