// The OpenAPI 3.1 document served at /v1/openapi.json. Its source is server/api/openapi.json,
// compiled into the daemon at build time (server/api/openapi.cpp.in).
#pragma once

#include <string>

namespace voltlock::api {

const std::string& openapi_json();

}  // namespace voltlock::api
