#include "shell/replication_key.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <sstream>

namespace voltlock {

namespace {

constexpr size_t kKeyBytes = 16;
constexpr const char* kKeyFileHeader =
    "# Voltlock replication key (docs/security.md). Secret: keep it 0600, on the replicas only.\n"
    "# First key: signs and verifies. A second key: verifies only (during a rotation).\n";

int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string trimmed(const std::string& line)
{
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) return "";
    const auto last = line.find_last_not_of(" \t\r");
    return line.substr(first, last - first + 1);
}

// 32 hex digits: key bytes 0..15; k0 and k1 are bytes 0..7 and 8..15, little-endian, as the
// SipHash reference reads its key.
bool parse_key(const std::string& text, vl_mac_key& key)
{
    if (text.size() != 2 * kKeyBytes) return false;
    std::array<uint8_t, kKeyBytes> bytes{};
    for (size_t i = 0; i < kKeyBytes; i++) {
        const int high = hex_digit(text[2 * i]);
        const int low = hex_digit(text[2 * i + 1]);
        if (high < 0 || low < 0) return false;
        bytes[i] = static_cast<uint8_t>(high << 4 | low);
    }
    key = {};
    for (size_t b = 0; b < 8; b++) {
        key.k0 |= uint64_t{bytes[b]} << (8 * b);
        key.k1 |= uint64_t{bytes[8 + b]} << (8 * b);
    }
    return true;
}

}  // namespace

Result<vl_mac_keys> parse_replication_keys(const std::string& text)
{
    vl_mac_keys keys{};
    std::istringstream lines(text);
    std::string line;
    for (size_t number = 1; std::getline(lines, line); number++) {
        line = trimmed(line);
        if (line.empty() || line[0] == '#') continue;
        const std::string where = "line " + std::to_string(number);
        if (keys.count == VL_MAC_KEYS)
            return Error{0, where + ": more than " + std::to_string(VL_MAC_KEYS) +
                                " keys (the current one, and one more during a rotation)"};
        if (!parse_key(line, keys.key[keys.count]))
            return Error{0, where + ": a key is 32 hex digits (128 bits)"};
        if (keys.key[keys.count].k0 == 0 && keys.key[keys.count].k1 == 0)
            return Error{0, where + ": the all-zero key is no secret"};
        keys.count++;
    }
    if (keys.count == 0) return Error{0, "no key in the file"};
    return keys;
}

Result<vl_mac_keys> load_replication_keys(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return os_error("replication key file " + path);
    struct stat info{};
    std::string text;
    if (::fstat(fd, &info) != 0) {
        const Error error = os_error("replication key file " + path);
        ::close(fd);
        return error;
    }
    if (S_ISREG(info.st_mode) && (info.st_mode & 077) == 0) {
        std::array<char, 4096> buffer{};
        ssize_t got = 0;
        while ((got = ::read(fd, buffer.data(), buffer.size())) > 0 && text.size() < 65536)
            text.append(buffer.data(), static_cast<size_t>(got));
    }
    ::close(fd);
    if (!S_ISREG(info.st_mode))
        return Error{0, "replication key file " + path + ": not a regular file"};
    if ((info.st_mode & 077) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
        return Error{0, "replication key file " + path + ": mode " + mode +
                            " lets others read or change the key; fix: chmod 600 " + path};
    }
    auto keys = parse_replication_keys(text);
    if (!keys.ok()) return Error{0, "replication key file " + path + ": " + keys.error().context};
    return keys;
}

Result<std::string> fresh_replication_key()
{
    std::array<uint8_t, kKeyBytes> bytes{};
    if (::getrandom(bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
        return os_error("getrandom for a replication key");
    std::string hex;
    for (const uint8_t byte : bytes) {
        char digits[3];
        std::snprintf(digits, sizeof digits, "%02x", byte);
        hex += digits;
    }
    return hex;
}

Result<Ok> write_replication_key_file(const std::string& path, const std::string& key_lines)
{
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return os_error("creating " + path);
    const std::string text = std::string(kKeyFileHeader) + key_lines + "\n";
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    const Error error = os_error("writing " + path);
    ::close(fd);
    if (!written) return error;
    return Ok{};
}

}  // namespace voltlock
