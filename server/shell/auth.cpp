#include "shell/auth.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace voltlock {

namespace {

std::vector<std::string> split(std::string_view text, char separator)
{
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        const size_t end = text.find(separator, start);
        parts.emplace_back(text.substr(start, end == std::string_view::npos ? text.npos
                                                                           : end - start));
        if (end == std::string_view::npos) return parts;
        start = end + 1;
    }
}

// The lines of a table file, without comments and blank lines, each split on blanks, with its
// line number.
std::vector<std::pair<size_t, std::vector<std::string>>> table_lines(std::string_view text)
{
    std::vector<std::pair<size_t, std::vector<std::string>>> lines;
    size_t number = 0;
    for (const std::string& raw : split(text, '\n')) {
        number++;
        std::istringstream words(raw.substr(0, raw.find('#')));
        std::vector<std::string> fields;
        for (std::string word; words >> word;) fields.push_back(word);
        if (!fields.empty()) lines.emplace_back(number, std::move(fields));
    }
    return lines;
}

Error line_error(const char* file, size_t line, const std::string& problem)
{
    return Error{0, std::string(file) + " line " + std::to_string(line) + ": " + problem};
}

std::optional<Permission> parse_permission(std::string_view name)
{
    for (Permission p : {Permission::read, Permission::write, Permission::lock, Permission::watch,
                         Permission::admin})
        if (name == permission_name(p)) return p;
    return std::nullopt;
}

std::optional<TokenHash> parse_hash(std::string_view text)
{
    if (text.size() != 64) return std::nullopt;
    TokenHash hash{};
    for (size_t i = 0; i < 32; i++) {
        unsigned value = 0;
        for (size_t j = 0; j < 2; j++) {
            const char c = text[2 * i + j];
            value <<= 4;
            if (c >= '0' && c <= '9') value |= unsigned(c - '0');
            else if (c >= 'a' && c <= 'f') value |= unsigned(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') value |= unsigned(c - 'A' + 10);
            else return std::nullopt;
        }
        hash[i] = static_cast<uint8_t>(value);
    }
    return hash;
}

Result<std::string> read_file(const std::string& path, bool secret)
{
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0)
        return Error{0, path + ": cannot read it: " + std::strerror(errno)};
    if (secret && (info.st_mode & 077) != 0)
        return Error{0, path + ": mode " + [&] {
            char mode[8];
            std::snprintf(mode, sizeof mode, "%04o", unsigned(info.st_mode & 07777));
            return std::string(mode);
        }() + " lets other users read it; chmod 600 it"};
    std::ifstream in(path, std::ios::binary);
    if (!in) return Error{0, path + ": cannot read it: " + std::strerror(errno)};
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

const char* permission_name(Permission permission)
{
    switch (permission) {
    case Permission::read: return "read";
    case Permission::write: return "write";
    case Permission::lock: return "lock";
    case Permission::watch: return "watch";
    case Permission::admin: return "admin";
    }
    return "unknown";
}

const char* resource_kind_name(ResourceKind kind)
{
    switch (kind) {
    case ResourceKind::key: return "key";
    case ResourceKind::lock: return "lock";
    case ResourceKind::barrier: return "barrier";
    }
    return "unknown";
}

const AuthUser* AuthTables::user(std::string_view name) const
{
    for (const AuthUser& u : users)
        if (u.name == name) return &u;
    return nullptr;
}

bool AuthTables::is_admin(const std::vector<std::string>& roles) const
{
    for (const std::string& role : roles) {
        if (role == kAdminRole) return true;
        if (auto found = grants.find(role); found != grants.end())
            for (const AuthGrant& grant : found->second)
                if ((grant.permissions & uint8_t(Permission::admin)) && !grant.kind &&
                    grant.prefix.empty())
                    return true;
    }
    return false;
}

bool AuthTables::allows(const std::vector<std::string>& roles, Permission permission,
                        ResourceKind kind, std::string_view name) const
{
    if (is_admin(roles)) return true;
    for (const std::string& role : roles) {
        const auto found = grants.find(role);
        if (found == grants.end()) continue;
        for (const AuthGrant& grant : found->second) {
            if (!(grant.permissions & uint8_t(permission))) continue;
            if (grant.kind && *grant.kind != kind) continue;
            if (name.starts_with(grant.prefix)) return true;
        }
    }
    return false;
}

TokenHash sha256(std::string_view bytes)
{
    TokenHash hash{};
    gnutls_hash_fast(GNUTLS_DIG_SHA256, bytes.data(), bytes.size(), hash.data());
    return hash;
}

std::string hex(const TokenHash& hash)
{
    static const char digits[] = "0123456789abcdef";
    std::string text;
    for (uint8_t byte : hash) {
        text += digits[byte >> 4];
        text += digits[byte & 15];
    }
    return text;
}

Result<std::string> make_token()
{
    TokenHash bytes{};
    if (gnutls_rnd(GNUTLS_RND_KEY, bytes.data(), bytes.size()) != 0)
        return Error{0, "cannot read the system's random source for a token"};
    return "vl_" + hex(bytes);
}

Result<AuthTables> parse_auth_tables(std::string_view tokens_text, std::string_view roles_text)
{
    AuthTables tables;
    for (const auto& [line, fields] : table_lines(roles_text)) {
        if (fields.size() != 3)
            return line_error("auth_roles_file", line,
                              "want `role permission[,permission...] resource`, e.g. "
                              "`reader read,watch key:app/`");
        AuthGrant grant;
        for (const std::string& name : split(fields[1], ',')) {
            const auto permission = parse_permission(name);
            if (!permission)
                return line_error("auth_roles_file", line,
                                  "'" + name + "' is not a permission (read, write, lock, watch, "
                                  "admin)");
            grant.permissions |= uint8_t(*permission);
        }
        const std::string& resource = fields[2];
        if (resource != "*") {
            const size_t colon = resource.find(':');
            const std::string kind = resource.substr(0, colon);
            if (colon == std::string::npos ||
                (kind != "key" && kind != "lock" && kind != "barrier"))
                return line_error("auth_roles_file", line,
                                  "'" + resource + "' is not a resource: key:PREFIX, lock:PREFIX, "
                                  "barrier:PREFIX or *");
            grant.kind = kind == "key"    ? ResourceKind::key
                         : kind == "lock" ? ResourceKind::lock
                                          : ResourceKind::barrier;
            grant.prefix = resource.substr(colon + 1);
            if (grant.permissions & uint8_t(Permission::admin))
                return line_error("auth_roles_file", line, kAdminOnEverythingOnly);
        }
        tables.grants[fields[0]].push_back(std::move(grant));
    }
    std::set<std::string> names;
    for (const auto& [line, fields] : table_lines(tokens_text)) {
        if (fields.size() != 3)
            return line_error("auth_token_file", line,
                              "want `user role[,role...] sha256-hex-of-token` (or `-` for a "
                              "certificate-only user)");
        AuthUser user{.name = fields[0], .roles = split(fields[1], ','), .token_hash = {}};
        if (user.name.size() > kMaxUserBytes)
            return line_error("auth_token_file", line,
                              "user names are at most " + std::to_string(kMaxUserBytes) +
                                  " bytes (they are recorded in each session the user opens)");
        if (!names.insert(user.name).second)
            return line_error("auth_token_file", line, "user '" + user.name + "' twice");
        for (const std::string& role : user.roles)
            if (role != kAdminRole && !tables.grants.contains(role))
                return line_error("auth_token_file", line,
                                  "role '" + role + "' is not in auth_roles_file");
        if (fields[2] != "-") {
            user.token_hash = parse_hash(fields[2]);
            if (!user.token_hash)
                return line_error("auth_token_file", line,
                                  "the token's hash must be 64 hex digits (sha256sum of the "
                                  "token), or `-`");
        }
        tables.users.push_back(std::move(user));
    }
    return tables;
}

Result<std::optional<AuthTables>> load_auth_tables(const DaemonConfig& config)
{
    if (config.auth_token_file.empty()) return std::optional<AuthTables>();
    auto tokens = read_file(config.auth_token_file, true);
    if (!tokens.ok()) return Error{0, "auth_token_file: " + tokens.error().message()};
    std::string roles_text;
    if (!config.auth_roles_file.empty()) {
        auto roles = read_file(config.auth_roles_file, false);
        if (!roles.ok()) return Error{0, "auth_roles_file: " + roles.error().message()};
        roles_text = roles.value();
    }
    auto tables = parse_auth_tables(tokens.value(), roles_text);
    if (!tables.ok()) return tables.error();
    return std::optional<AuthTables>(std::move(tables.value()));
}

std::vector<ConfigProblem> auth_problems(const DaemonConfig& config)
{
    std::vector<ConfigProblem> problems;
    if (config.auth_token_file.empty()) {
        if (!config.auth_roles_file.empty())
            problems.push_back({"auth_roles_file", "is set but auth is off (no auth_token_file)",
                                "set auth_token_file, or remove auth_roles_file"});
        return problems;
    }
    auto loaded = load_auth_tables(config);
    if (!loaded.ok()) {
        const std::string message = loaded.error().message();
        const std::string field = message.starts_with("auth_roles_file") ? "auth_roles_file"
                                                                         : "auth_token_file";
        problems.push_back({field, message.substr(message.find(':') + 2),
                            "check the path and that the user voltlockd runs as can read it; "
                            "docs/security-auth.md gives the file's format"});
    }
    return problems;
}

}  // namespace voltlock
