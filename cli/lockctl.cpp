// lockctl: Voltlock from the shell (issue 15, docs/lockctl.md), built on libvoltlock's C API.
// etcdctl's conventions: global --endpoints/--dial-timeout/--command-timeout/-w, one error line
// on stderr, distinct exit codes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "shell/owner_only_files.h"
#include "voltlock.h"

namespace {

using Json = nlohmann::json;

constexpr const char* kVersion = "0.1.0";
// The longest wait the cell takes in one request (docs/api.md, "Waits": up to an hour).
constexpr uint32_t kLongestWaitMs = 3600u * 1000;

enum Exit : int {
    kExitOk = 0,
    kExitFailedCondition = 1,
    kExitUsage = 2,
    kExitUnavailable = 3,
    kExitServerError = 4,
    kExitDenied = 5,
};

const char* const kUsage = R"(lockctl: Voltlock from the shell

Usage: lockctl [global flags] COMMAND [args] [flags]

Commands:
  put KEY VALUE [--prev-revision N] [--lease SESSION] [--sequencer SEQ]
                                   write a key (VALUE '-' reads stdin, any bytes; after
                                   "--", '-' is the value itself)
  set KEY VALUE                    the same as put
  get KEY [--prefix] [--limit N] [--consistency l|s]
      [--rev-only | --keys-only | --print-value-only]
  del KEY [--prefix] [--prev-revision N]
                                   print how many keys went (0, exit 0: none were there)
  watch KEY [--prefix] [--rev N]   stream changes until interrupted; resumes across failover
  lock NAME [--shared] [--ttl 10s] [--wait 30s] [--kill-grace 10s] [-- COMMAND ARGS...]
                                   hold a lock while COMMAND runs (its fencing token in
                                   $VOLTLOCK_SEQUENCER), or print the sequencer and hold it
                                   until interrupted
  elect NAME [PROPOSAL] [--listen] [--ttl 10s]
                                   campaign and keep leadership until interrupted, or print
                                   each new leader's value
  barrier NAME --count N [--wait 30s] [--ttl 10s]
  session grant --ttl 10s [--name NAME] | keepalive ID [--once] | revoke ID | list | get ID
  sequencer check [SEQ]            SEQ as printed by lock (default $VOLTLOCK_SEQUENCER)
  member list | endpoint status | endpoint health | status
  snapshot save FILE               back up the newest snapshot of the first endpoint that
                                   answers (give one --endpoints URL to pick the replica); FILE
                                   is what `voltlockd --import-snapshot FILE` restores
  role add NAME | get NAME | list | delete NAME
  role grant-permission NAME PERMS RESOURCE | revoke-permission NAME RESOURCE [PERMS]
                                   PERMS: read,write,lock,watch,admin; RESOURCE: key:PREFIX,
                                   lock:PREFIX, barrier:PREFIX or '*' (needs the admin role,
                                   as do user and token)
  user add NAME | get NAME | list | delete NAME | grant-role NAME ROLE | revoke-role NAME ROLE
  token create USER [--ttl 24h] | revoke ID | list
                                   create prints the new token: the only time it is shown
  version | completion bash|zsh

Global flags:
  --endpoints LIST         comma-separated URLs (else $VOLTLOCK_ENDPOINTS, else
                           http://127.0.0.1:7480)
  --dial-timeout DUR       connecting to one endpoint (default 2s)
  --command-timeout DUR    one request, every retry included (default 10s)
  --cacert FILE            https endpoints: the cell CA's certificate (else $VOLTLOCK_CACERT,
                           else the system's CAs)
  --cert FILE, --key FILE  a client certificate and its key, for a cell that requires one (else
                           $VOLTLOCK_CERT, $VOLTLOCK_KEY)
  --token TOKEN            a bearer token, for a cell with auth on (else $VOLTLOCK_TOKEN)
  --user NAME:TOKEN        the same, etcdctl's form (the cell knows the user by its token)
  -w, --write-out FORMAT   simple (default), json (one document per result), table; values
                           in simple are their bytes, each followed by a newline
  -h, --help               this text, or a command's

Durations: 500ms, 10s, 1m, 1h (a bare number is seconds).
"--" ends the flags: the words after it are positional, so they may start with '-'
(lockctl put KEY -- -5), and a '-' among them is itself, not stdin; for lock, the words after
NAME and "--" are COMMAND ARGS, which "--" must be followed by.

Exit codes:
  0  success
  1  a failed condition: key not found, CAS mismatch, lock busy, wait timed out, sequencer
     invalid, session unknown or lost, barrier not ready, no such user, role or token, or one
     that exists already
  2  usage error (bad command, flag or argument)
  3  the cell is unavailable or unreachable (no endpoint answered in time, no leader)
  4  any other server error
  5  unauthenticated (no token, or an unknown one) or permission denied
  lock -- COMMAND exits with COMMAND's status (128+N if killed by signal N), or 1 if the lock
     was lost while COMMAND ran, whatever COMMAND returned.
  128+N  a wait in line (lock, elect, barrier) given up on signal N (130: Ctrl-C).
Errors go to stderr as one line, "Error: <code>: <message>": the server's code and message,
or unavailable when no endpoint answered in time; usage errors say what is wrong.
)";

// ---- Arguments ---------------------------------------------------------------------------------

struct UsageError {
    std::string text;
};

const std::set<std::string> kValueFlags = {
    "--endpoints", "--dial-timeout", "--command-timeout", "--write-out", "--prev-revision",
    "--lease", "--sequencer", "--limit", "--consistency", "--rev", "--ttl", "--wait",
    "--count", "--kill-grace", "--name", "--cacert", "--cert", "--key", "--token", "--user"};
const std::set<std::string> kBoolFlags = {
    "--prefix", "--rev-only", "--keys-only", "--print-value-only", "--shared", "--listen",
    "--help",   "--once"};
const std::set<std::string> kGlobalFlags = {"--endpoints", "--dial-timeout", "--command-timeout",
                                            "--write-out", "--help", "--cacert", "--cert",
                                            "--key", "--token", "--user"};

// Short flags, and the long ones they stand for (-w json, -w=json).
const std::map<std::string, std::string> kShortFlags = {{"-w", "--write-out"}, {"-h", "--help"}};

struct Args {
    std::vector<std::string> words;            // command and positionals
    // How many of `words` came before "--": the ones after it are only themselves (a '-' value
    // is not stdin).
    size_t words_before_dashes = SIZE_MAX;
    std::map<std::string, std::string> flags;  // given flags (booleans as "true")
    std::vector<std::string> command;          // lock NAME -- COMMAND ARGS...

    bool has(const std::string& flag) const { return flags.count(flag) > 0; }
    std::optional<std::string> get(const std::string& flag) const
    {
        const auto found = flags.find(flag);
        if (found == flags.end()) return std::nullopt;
        return found->second;
    }
};

// "--" ends the flags, as in etcdctl: every word after it is positional, so a key or value may
// start with '-' (`put k -- -5`). For lock, what follows NAME after "--" is the command
// (`lock NAME -- CMD`, or `lock -- -NAME -- CMD` for a name starting with '-').
Args parse_args(int argc, char** argv)
{
    Args args;
    for (int i = 1; i < argc; i++) {
        std::string word = argv[i];
        if (word == "--") {
            args.words_before_dashes = args.words.size();
            const bool lock = !args.words.empty() && args.words[0] == "lock";
            if (lock && args.words.size() == 1 && i + 1 < argc) {
                args.words.push_back(argv[++i]);
                if (i + 1 < argc && std::string(argv[i + 1]) != "--")
                    throw UsageError{"usage: lockctl lock -- NAME -- COMMAND ARGS..."};
                i++;  // onto the "--" before the command, if there is one
            }
            if (lock && i == argc) break;  // `lock -- -NAME`: held until interrupted
            // As flock(1): "--" promises a command (without it, lock holds until interrupted).
            if (lock && i + 1 == argc)
                throw UsageError{"lock: no COMMAND after \"--\" (leave \"--\" out to hold the "
                                 "lock until interrupted)"};
            if (lock) args.command.assign(argv + i + 1, argv + argc);
            else args.words.insert(args.words.end(), argv + i + 1, argv + argc);
            break;
        }
        if (word.size() > 1 && word[0] == '-' && word != "-") {
            std::string value;
            bool has_value = false;
            if (const size_t eq = word.find('='); eq != std::string::npos) {
                value = word.substr(eq + 1);
                word = word.substr(0, eq);
                has_value = true;
            }
            if (const auto long_name = kShortFlags.find(word); long_name != kShortFlags.end())
                word = long_name->second;
            if (kBoolFlags.count(word)) {
                if (has_value) throw UsageError{"flag " + word + " takes no value"};
                args.flags[word] = "true";
            } else if (kValueFlags.count(word)) {
                if (!has_value) {
                    if (i + 1 >= argc) throw UsageError{"flag " + word + " needs a value"};
                    value = argv[++i];
                }
                args.flags[word] = value;
            } else {
                throw UsageError{"unknown flag " + word};
            }
            continue;
        }
        args.words.push_back(word);
    }
    return args;
}

// Refuses flags the command does not take (global flags are always allowed).
void allow_flags(const Args& args, const std::set<std::string>& allowed, const std::string& cmd)
{
    for (const auto& [flag, value] : args.flags)
        if (!kGlobalFlags.count(flag) && !allowed.count(flag))
            throw UsageError{cmd + " does not take " + flag};
}

void expect_words(const Args& args, size_t least, size_t most, const std::string& shape)
{
    if (args.words.size() < least || args.words.size() > most)
        throw UsageError{"usage: lockctl " + shape};
}

// Refuses a command line that does not fit `usage` ("del KEY [--prefix]"): a flag the command
// does not take, or too few or too many words. The command's name is usage's leading lower-case
// words ("session grant").
void expect_usage(const Args& args, const std::set<std::string>& allowed, size_t least,
                  size_t most, const std::string& usage)
{
    std::string name;
    std::istringstream words(usage);
    for (std::string word; words >> word && std::all_of(word.begin(), word.end(), ::islower);)
        name += (name.empty() ? "" : " ") + word;
    allow_flags(args, allowed, name);
    expect_words(args, least, most, usage);
}

uint64_t parse_u64(const std::string& text, const std::string& what)
{
    uint64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc{} || end != text.data() + text.size())
        throw UsageError{what + ": '" + text + "' is not a non-negative integer"};
    return value;
}

// "500ms", "10s", "1m", "1h", or a bare number of seconds.
uint64_t parse_duration_ms(const std::string& text, const std::string& what)
{
    size_t digits = 0;
    while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) ||
                                     text[digits] == '.'))
        digits++;
    const std::string number = text.substr(0, digits), unit = text.substr(digits);
    double value = 0;
    try {
        size_t used = 0;
        value = std::stod(number, &used);
        if (used != number.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
        throw UsageError{what + ": '" + text + "' is not a duration (like 500ms, 10s, 1m)"};
    }
    const std::map<std::string, double> units = {
        {"", 1000}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    const auto found = units.find(unit);
    if (found == units.end())
        throw UsageError{what + ": unknown unit in '" + text + "' (ms, s, m, h)"};
    const double ms = value * found->second;
    if (ms > 1e12) throw UsageError{what + ": '" + text + "' is too long"};
    return static_cast<uint64_t>(ms);
}

uint32_t duration_flag(const Args& args, const std::string& flag, uint64_t fallback_ms)
{
    const auto text = args.get(flag);
    const uint64_t ms = text ? parse_duration_ms(*text, flag) : fallback_ms;
    if (ms > UINT32_MAX) throw UsageError{flag + " is too long"};
    return static_cast<uint32_t>(ms);
}

// ---- Output ------------------------------------------------------------------------------------

enum class Format { simple, json, table };

// JSON text is UTF-8 and nlohmann's dump refuses anything else (overlong forms and surrogates
// included), so it is the check: what passes here can be printed with -w json.
bool is_utf8(std::string_view bytes)
{
    try {
        (void)Json(std::string(bytes)).dump();
        return true;
    } catch (const Json::type_error&) {
        return false;
    }
}

std::string base64(std::string_view bytes)
{
    static constexpr char kAlphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t i = 0; i < bytes.size(); i += 3) {
        uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
        if (i + 1 < bytes.size()) n |= uint32_t(uint8_t(bytes[i + 1])) << 8;
        if (i + 2 < bytes.size()) n |= uint8_t(bytes[i + 2]);
        out += kAlphabet[(n >> 18) & 63];
        out += kAlphabet[(n >> 12) & 63];
        out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
        out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
    }
    return out;
}

// A value in JSON output: the text when it is UTF-8, else base64 with "encoding": "base64".
void put_value(Json& object, std::string_view bytes)
{
    if (is_utf8(bytes)) {
        object["value"] = std::string(bytes);
    } else {
        object["value"] = base64(bytes);
        object["encoding"] = "base64";
    }
}

std::string_view value_of(const vl_kv& kv)
{
    return {reinterpret_cast<const char*>(kv.value), kv.value_len};
}

Json kv_json(const vl_kv& kv)
{
    Json object{{"key", kv.key},
                {"create_revision", kv.create_revision},
                {"mod_revision", kv.mod_revision},
                {"version", kv.version},
                {"session", kv.session}};
    put_value(object, value_of(kv));
    return object;
}

void print_json(const Json& document) { std::cout << document.dump() << "\n" << std::flush; }

// A value as its raw bytes on a line of its own (so `get K` gives back what `put K -` wrote).
void print_value_line(const uint8_t* value, size_t length)
{
    std::cout.write(reinterpret_cast<const char*>(value), static_cast<std::streamsize>(length));
    std::cout << "\n" << std::flush;
}

// A table in etcdctl's style: a header, rows, '|' between columns.
void print_table(const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows)
{
    std::vector<size_t> width(header.size());
    for (size_t i = 0; i < header.size(); i++) width[i] = header[i].size();
    for (const auto& row : rows)
        for (size_t i = 0; i < row.size() && i < width.size(); i++)
            width[i] = std::max(width[i], row[i].size());
    auto rule = [&] {
        std::string line = "+";
        for (size_t w : width) line += std::string(w + 2, '-') + "+";
        std::cout << line << "\n";
    };
    auto line = [&](const std::vector<std::string>& cells) {
        std::string text = "|";
        for (size_t i = 0; i < width.size(); i++) {
            const std::string cell = i < cells.size() ? cells[i] : "";
            text += " " + cell + std::string(width[i] - cell.size(), ' ') + " |";
        }
        std::cout << text << "\n";
    };
    rule();
    line(header);
    rule();
    for (const auto& row : rows) line(row);
    rule();
    std::cout << std::flush;
}

std::string printable(std::string_view bytes)
{
    return is_utf8(bytes) ? std::string(bytes) : "base64:" + base64(bytes);
}

// ---- Errors ------------------------------------------------------------------------------------

int exit_code_for(vl_status status)
{
    switch (status) {
    case VL_OK:
        return kExitOk;
    case VL_ERR_KEY_NOT_FOUND:
    case VL_ERR_BARRIER_NOT_FOUND:
    case VL_ERR_CAS_MISMATCH:
    case VL_ERR_LOCK_BUSY:
    case VL_ERR_WAIT_TIMED_OUT:
    case VL_ERR_SEQUENCER_INVALID:
    case VL_ERR_BARRIER_NOT_READY:
    case VL_ERR_UNKNOWN_SESSION:
    case VL_ERR_SESSION_LOST:
    case VL_ERR_NOT_HELD:
    case VL_ERR_NOT_MEMBER:
    case VL_ERR_MODE_CONFLICT:
    case VL_ERR_COUNT_MISMATCH:
    case VL_ERR_BARRIER_IN_USE:
    case VL_ERR_WAIT_WITHDRAWN:
    case VL_ERR_COMPACTED:
    case VL_ERR_NOT_FOUND:
        return kExitFailedCondition;
    case VL_ERR_INVALID_ARGUMENT:
        return kExitUsage;
    case VL_ERR_TRANSPORT:
    case VL_ERR_TIMEOUT:
    case VL_ERR_UNAVAILABLE:
    case VL_ERR_NOT_LEADER:
    case VL_ERR_WAIT_OUTCOME_UNKNOWN:
    case VL_ERR_NOT_READY:
        return kExitUnavailable;
    case VL_ERR_UNAUTHENTICATED:
    case VL_ERR_PERMISSION_DENIED:
        return kExitDenied;
    default:
        return kExitServerError;
    }
}

// A failed call: its one error line on stderr, and the exit code it maps to.
struct Failed {
    vl_status status;
    std::string text;
};

// `text` as the documented error line's "<code>: <message>". The cell's errors come with their
// code; a failure of the client's own gets the code that fits: `unavailable` when no endpoint
// answered in time (exit 3 as for the cell's 503), else the library's name for the status.
std::string coded(vl_status status, const std::string& text)
{
    const size_t colon = text.find(": ");
    const bool has_code = colon != std::string::npos && colon > 0 &&
                          std::all_of(text.begin(), text.begin() + long(colon),
                                      [](unsigned char c) { return std::islower(c) || c == '_'; });
    if (has_code) return text;
    const bool unanswered = status == VL_ERR_TRANSPORT || status == VL_ERR_TIMEOUT;
    const std::string code = unanswered ? "unavailable" : vl_status_name(status);
    return text.empty() ? code : code + ": " + text;
}

// The error text is read from the handle after the call (never before: the call replaces it).
void check(vl_status status, const char* text)
{
    if (status != VL_OK) throw Failed{status, coded(status, text ? text : "")};
}
void check(vl_status status, vl_client* c) { check(status, c ? vl_client_errstr(c) : nullptr); }
void check(vl_status status, vl_session* s) { check(status, s ? vl_session_errstr(s) : nullptr); }
void check(vl_status status, vl_watch* w) { check(status, w ? vl_watch_errstr(w) : nullptr); }

// ---- Signals -----------------------------------------------------------------------------------

// The signals lockctl passes on to `lock -- CMD` (and that end its waits).
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

volatile sig_atomic_t g_signal = 0;  // the last forwarded signal that came, 0 if none
// How many of each came, so that `lock -- CMD` passes every one on, repeats included. Atomics:
// the handler runs on whichever thread the kernel picks, the library's included.
std::atomic<unsigned> g_received[NSIG];

void on_signal(int signal_number)
{
    g_received[signal_number]++;
    g_signal = signal_number;
}

void install_signal_handlers()
{
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    for (int signal_number : kForwardedSignals) sigaction(signal_number, &action, nullptr);
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// A wait given up because a signal came: the process exits 128 + the signal, as a shell
// reports a command a signal ended.
struct Interrupted {
    int signal_number;
};

// ---- The context every command runs in ----------------------------------------------------------

// A refusal of vl_client_open in lockctl's words: the library names vl_client_options' fields
// (or the environment variables they fell back to), the user gave flags.
std::string in_flag_names(std::string text)
{
    // cacert_file before cert_file, which it contains.
    using Naming = std::pair<std::string, std::string>;
    for (const auto& [field, flag] : {Naming{"cacert_file", "--cacert"},
                                      Naming{"cert_file", "--cert"}, Naming{"key_file", "--key"}})
        for (size_t at = text.find(field); at != std::string::npos; at = text.find(field, at))
            text.replace(at, field.size(), flag);
    return text;
}

class Context {
public:
    Context(const Args& args) : args_(args)
    {
        const std::string format = args.get("--write-out").value_or("simple");
        if (format == "simple") format_ = Format::simple;
        else if (format == "json") format_ = Format::json;
        else if (format == "table") format_ = Format::table;
        else throw UsageError{"-w: '" + format + "' is not simple, json or table"};
        // Without --endpoints the library takes $VOLTLOCK_ENDPOINTS, else http://127.0.0.1:7480.
        endpoints_ = args.get("--endpoints");
        vl_client_options_init(&options_);
        options_.dial_timeout_ms = duration_flag(args, "--dial-timeout", 2000);
        options_.command_timeout_ms = duration_flag(args, "--command-timeout", 10000);
        if (options_.dial_timeout_ms == 0 || options_.command_timeout_ms == 0)
            throw UsageError{"timeouts must be above zero"};
        // Unset, the library takes $VOLTLOCK_CACERT, $VOLTLOCK_CERT, $VOLTLOCK_KEY.
        for (auto [flag, file, option] :
             {std::tuple{"--cacert", &cacert_, &options_.cacert_file},
              std::tuple{"--cert", &cert_, &options_.cert_file},
              std::tuple{"--key", &key_, &options_.key_file}}) {
            *file = args.get(flag);
            if (*file) *option = (*file)->c_str();
        }
        // Unset, the library takes $VOLTLOCK_TOKEN.
        token_ = args.get("--token");
        if (const auto user = args.get("--user")) {
            const size_t colon = user->find(':');
            if (colon == std::string::npos || colon + 1 == user->size())
                throw UsageError{"--user: want NAME:TOKEN"};
            if (token_) throw UsageError{"--user and --token: give one"};
            token_ = user->substr(colon + 1);
        }
        if (token_) options_.token = token_->c_str();
    }
    ~Context() { vl_client_close(client_); }

    vl_client* client()
    {
        if (!client_) {
            char why[512];
            const vl_status status =
                vl_client_open(endpoints_ ? endpoints_->c_str() : nullptr, &options_, why,
                               sizeof why, &client_);
            if (status == VL_ERR_INVALID_ARGUMENT) throw UsageError{in_flag_names(why)};
            check(status, why);
        }
        return client_;
    }
    Format format() const { return format_; }
    const Args& args() const { return args_; }

private:
    const Args& args_;
    Format format_ = Format::simple;
    std::optional<std::string> endpoints_;
    std::optional<std::string> cacert_, cert_, key_, token_;  // what options_ points into
    vl_client_options options_{};
    vl_client* client_ = nullptr;
};

// A session for a command that needs one, closed on every way out.
class ScopedSession {
public:
    ScopedSession(Context& ctx, uint32_t ttl_ms, vl_session_lost_fn on_lost = nullptr,
                  void* user_data = nullptr)
    {
        vl_session_options options;
        vl_session_options_init(&options);
        options.name = "lockctl";
        options.on_session_lost = on_lost;
        options.user_data = user_data;
        check(vl_session_open(ctx.client(), ttl_ms, &options, &session_), ctx.client());
    }
    ~ScopedSession() { vl_session_close(session_); }
    vl_session* get() const { return session_; }

private:
    vl_session* session_ = nullptr;
};

// Positional word `index` as a value: '-' before "--" reads stdin.
std::string read_value(const Args& args, size_t index)
{
    const std::string& word = args.words[index];
    if (word != "-" || index >= args.words_before_dashes) return word;
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

std::unique_ptr<vl_sequencer, void (*)(vl_sequencer*)> parse_sequencer(const std::string& text)
{
    vl_sequencer* seq = nullptr;
    if (vl_sequencer_parse(text.c_str(), &seq) != VL_OK)
        throw UsageError{"sequencer: '" + text + "' is not a sequencer (the JSON lock prints)"};
    return {seq, vl_sequencer_free};
}

std::string sequencer_text(const vl_sequencer* seq)
{
    char* text = nullptr;
    check(vl_sequencer_format(seq, &text), "the sequencer could not be formatted");
    std::string out = text;
    vl_string_free(text);
    return out;
}

// ---- KV commands -------------------------------------------------------------------------------

int cmd_put(Context& ctx)
{
    const Args& args = ctx.args();
    expect_usage(args, {"--prev-revision", "--lease", "--sequencer"}, 3, 3,
                 "put KEY VALUE [--prev-revision N] [--lease SESSION] [--sequencer SEQ]");
    const std::string value = read_value(args, 2);
    vl_put_options options{};
    if (auto rev = args.get("--prev-revision")) {
        options.check_prev_revision = true;
        options.prev_revision = parse_u64(*rev, "--prev-revision");
    }
    if (auto lease = args.get("--lease")) options.session_id = parse_u64(*lease, "--lease");
    std::unique_ptr<vl_sequencer, void (*)(vl_sequencer*)> seq(nullptr, vl_sequencer_free);
    if (auto text = args.get("--sequencer")) {
        seq = parse_sequencer(*text);
        options.sequencer = seq.get();
    }
    vl_put_result result{};
    check(
        vl_put(ctx.client(), args.words[1].c_str(), value.data(), value.size(), &options, &result),
        ctx.client());
    const Json document{{"revision", result.revision},
                        {"prev_mod_revision", result.prev_mod_revision},
                        {"create_revision", result.create_revision},
                        {"version", result.version}};
    if (ctx.format() == Format::json) print_json(document);
    else if (ctx.format() == Format::table)
        print_table({"REVISION", "VERSION"}, {{std::to_string(result.revision),
                                               std::to_string(result.version)}});
    else std::cout << "OK\n";
    return kExitOk;
}

// What `get` prints of each key: everything, or one part (--rev-only, --keys-only,
// --print-value-only).
enum class GetPart { all, revision, key, value };

// The keys `get` read: each as JSON, and its value's raw bytes for the simple format.
struct GetResult {
    std::vector<Json> kvs;
    std::vector<std::string> values;
    uint64_t revision = 0;
};

// Prints what `get` read in `format`; with GetPart::key the values leave `got`'s JSON too.
void print_get(Format format, GetResult& got, bool prefix, GetPart part)
{
    if (part == GetPart::key)
        for (Json& kv : got.kvs) {
            kv.erase("value");
            kv.erase("encoding");
        }
    const std::vector<Json>& kvs = got.kvs;
    if (format == Format::json) {
        Json document{{"kvs", kvs}, {"count", kvs.size()}};
        if (prefix) document["revision"] = got.revision;
        print_json(document);
    } else if (format == Format::table) {
        const bool no_value = part == GetPart::revision || part == GetPart::key;
        std::vector<std::vector<std::string>> rows;
        for (size_t i = 0; i < kvs.size(); i++)
            rows.push_back({kvs[i]["key"], no_value ? "" : printable(got.values[i]),
                            std::to_string(kvs[i]["mod_revision"].get<uint64_t>()),
                            std::to_string(kvs[i]["version"].get<uint64_t>()),
                            std::to_string(kvs[i]["session"].get<uint64_t>())});
        print_table({"KEY", "VALUE", "MOD_REVISION", "VERSION", "SESSION"}, rows);
    } else {
        // etcdctl's simple format: the key, then the value, each on its own line; the raw
        // bytes, so `get K` gives back what `put K -` wrote.
        for (size_t i = 0; i < kvs.size(); i++) {
            if (part == GetPart::revision) {
                std::cout << kvs[i]["mod_revision"].get<uint64_t>() << "\n";
                continue;
            }
            if (part != GetPart::value) std::cout << kvs[i]["key"].get<std::string>() << "\n";
            if (part != GetPart::key) std::cout << got.values[i] << "\n";
        }
        std::cout << std::flush;
    }
}

int cmd_get(Context& ctx)
{
    const Args& args = ctx.args();
    expect_usage(args,
                 {"--prefix", "--limit", "--rev-only", "--keys-only", "--print-value-only",
                  "--consistency"},
                 2, 2,
                 "get KEY [--prefix] [--limit N] [--consistency l|s] "
                 "[--rev-only | --keys-only | --print-value-only]");
    if (args.has("--rev-only") + args.has("--keys-only") + args.has("--print-value-only") > 1)
        throw UsageError{"--rev-only, --keys-only and --print-value-only go one at a time"};
    const GetPart part = args.has("--rev-only")           ? GetPart::revision
                         : args.has("--keys-only")        ? GetPart::key
                         : args.has("--print-value-only") ? GetPart::value
                                                          : GetPart::all;
    const std::string consistency = args.get("--consistency").value_or("l");
    if (consistency != "l" && consistency != "s")
        throw UsageError{"--consistency: 'l' (linearizable) or 's' (serializable, stale)"};
    const int flags = consistency == "s" ? VL_READ_STALE : VL_READ_LINEARIZABLE;
    const uint64_t limit = args.has("--limit") ? parse_u64(*args.get("--limit"), "--limit") : 0;
    if (args.has("--limit") && !args.has("--prefix")) throw UsageError{"--limit needs --prefix"};
    GetResult got;
    const std::string& key = args.words[1];
    auto take = [&](const vl_kv& kv) {
        got.kvs.push_back(kv_json(kv));
        got.values.emplace_back(value_of(kv));
    };
    if (args.has("--prefix")) {
        std::string after;
        while (limit == 0 || got.kvs.size() < limit) {
            vl_kv_list* list = nullptr;
            const uint64_t want = limit ? std::min<uint64_t>(limit - got.kvs.size(), 1000) : 0;
            check(vl_get_prefix(ctx.client(), key.c_str(), after.empty() ? nullptr : after.c_str(),
                                static_cast<uint32_t>(want), flags, &list),
                  ctx.client());
            for (size_t i = 0; i < list->count; i++) take(list->kvs[i]);
            got.revision = list->revision;
            const bool more = list->more;
            if (more) after = list->next_after;
            vl_kv_list_free(list);
            if (!more) break;
        }
    } else {
        vl_kv* kv = nullptr;
        check(vl_get(ctx.client(), key.c_str(), flags, &kv), ctx.client());
        take(*kv);
        got.revision = kv->mod_revision;
        vl_kv_free(kv);
    }
    print_get(ctx.format(), got, args.has("--prefix"), part);
    return kExitOk;
}

int cmd_del(Context& ctx)
{
    const Args& args = ctx.args();
    expect_usage(args, {"--prefix", "--prev-revision"}, 2, 2,
                 "del KEY [--prefix] [--prev-revision N]");
    vl_delete_options options{};
    options.prefix = args.has("--prefix");
    if (auto rev = args.get("--prev-revision")) {
        if (options.prefix) throw UsageError{"--prev-revision applies to one key, not --prefix"};
        options.check_prev_revision = true;
        options.prev_revision = parse_u64(*rev, "--prev-revision");
    }
    vl_delete_result result{};
    check(vl_delete(ctx.client(), args.words[1].c_str(), &options, &result), ctx.client());
    if (ctx.format() == Format::json)
        print_json({{"deleted", result.deleted}, {"revision", result.revision}});
    else if (ctx.format() == Format::table)
        print_table({"DELETED", "REVISION"},
                    {{std::to_string(result.deleted), std::to_string(result.revision)}});
    else std::cout << result.deleted << "\n";
    // As etcdctl's del: deleting nothing (no such key, or none under the prefix) is no error;
    // the count says so. A failed --prev-revision is (cas_mismatch, exit 1).
    return kExitOk;
}

Json event_json(const vl_event& e)
{
    Json object{{"revision", e.revision}, {"type", e.type},       {"key", e.key},
                {"prev_revision", e.prev_revision}, {"session", e.session}, {"cause", e.cause}};
    if (e.value) put_value(object, {reinterpret_cast<const char*>(e.value), e.value_len});
    return object;
}

void print_event(Format format, const vl_event& e)
{
    if (format == Format::json) {
        print_json(event_json(e));
        return;
    }
    std::string type = e.type;
    std::transform(type.begin(), type.end(), type.begin(), ::toupper);
    if (format == Format::table) {
        const std::string value =
            e.value ? printable({reinterpret_cast<const char*>(e.value), e.value_len}) : "";
        print_table({"TYPE", "KEY", "VALUE", "REVISION"}, {{type, e.key, value,
                                                            std::to_string(e.revision)}});
        return;
    }
    // etcdctl watch's simple format: type, key, value on lines of their own.
    std::cout << type << "\n" << e.key << "\n";
    if (e.value) print_value_line(e.value, e.value_len);
    std::cout << std::flush;
}

// Hands each event of a watch on `key` to `on_event` until an interrupt (SIGINT, SIGTERM).
void follow_watch(Context& ctx, const std::string& key, const vl_watch_options& options,
                  const std::function<void(const vl_event&)>& on_event)
{
    vl_watch* w = nullptr;
    check(vl_watch_open(ctx.client(), key.c_str(), &options, &w), ctx.client());
    std::unique_ptr<vl_watch, void (*)(vl_watch*)> watch(w, vl_watch_close);
    while (!g_signal) {
        vl_event* e = nullptr;
        const vl_status status = vl_watch_next(w, 200, &e);
        if (status == VL_ERR_TIMEOUT) continue;
        check(status, w);
        std::unique_ptr<vl_event, void (*)(vl_event*)> event(e, vl_event_free);
        on_event(*event);
    }
}

int cmd_watch(Context& ctx)
{
    const Args& args = ctx.args();
    expect_usage(args, {"--prefix", "--rev"}, 2, 2, "watch KEY [--prefix] [--rev N]");
    vl_watch_options options{};
    options.prefix = args.has("--prefix");
    if (auto rev = args.get("--rev")) options.start_revision = parse_u64(*rev, "--rev");
    follow_watch(ctx, args.words[1], options, [&](const vl_event& e) {
        print_event(ctx.format(), e);
    });
    return kExitOk;
}

// ---- Lock, elect, barrier ----------------------------------------------------------------------

struct LossFlag {
    std::atomic<bool> lost{false};
};

void note_loss(vl_session*, vl_status, void* user_data)
{
    static_cast<LossFlag*>(user_data)->lost = true;
}

// Keeps what the session holds until an interrupt; fails with `gone` if the session is lost
// first.
void hold_until_interrupted(ScopedSession& session, const LossFlag& loss, const char* gone)
{
    while (!g_signal && !loss.lost) sleep_ms(50);
    if (loss.lost) check(vl_session_status(session.get()), gone);
}

// Runs `call`, a wait on `session` (a lock or barrier wait), so that a signal ends it at once: a
// thread watches for one and interrupts the session's calls, and the cell withdraws the wait
// when its connection closes. What the session may hold then is the caller's to give up (the
// session's close, as the Interrupted unwinds, releases it).
void wait_interruptibly(vl_session* session, const std::function<vl_status()>& call)
{
    std::atomic<bool> done{false};
    std::thread watcher([&] {
        while (!done) {
            if (g_signal) {
                vl_session_interrupt(session);
                return;
            }
            sleep_ms(20);
        }
    });
    const vl_status status = call();
    done = true;
    watcher.join();
    if (status == VL_ERR_CLOSED && g_signal) throw Interrupted{g_signal};
    check(status, session);
}

int exit_status_of(int wait_status)
{
    if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
    return kExitServerError;
}

// ---- lock -- CMD: the command's process group (docs/lockctl.md, "lock -- CMD") --------------
// CMD runs under a guard: lockctl forks the guard, which leads a process group of its own and
// forks CMD into it. The guard holds the one job a SIGKILLed lockctl cannot do: when lockctl
// dies (kill -9, the OOM killer) the kernel signals the guard (PR_SET_PDEATHSIG), and the guard
// kills its whole group, CMD and CMD's children with it, so nothing runs on after the lock is
// gone. lockctl hands the terminal's foreground to that group while CMD runs (as a shell does
// for a job), so an interactive CMD reads the terminal, and takes it back afterwards.

// SIGUSR1 tells the guard that lockctl died: the guard keeps SIGINT, SIGTERM and SIGHUP ignored
// (lockctl sends them to the whole group, for CMD).
constexpr int kLockctlGoneSignal = SIGUSR1;
constexpr int kExitCannotRun = 127;
// The group's guard ignores what lockctl sends the group for CMD, and the terminal's SIGQUIT.
constexpr int kGuardIgnores[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

volatile sig_atomic_t g_lockctl_pid = 0;  // the guard's parent while lockctl lives

void on_lockctl_gone(int)
{
    // A stray SIGUSR1 while lockctl lives changes nothing.
    if (getppid() != g_lockctl_pid) kill(0, SIGKILL);  // the guard's group, the guard last
}

// CMD's argv and environment (with VOLTLOCK_SEQUENCER), made before fork: the forked processes
// of a threaded program should not allocate.
class PreparedCommand {
public:
    PreparedCommand(const std::vector<std::string>& command, const std::string& sequencer)
        : words_(command)
    {
        for (const auto& word : words_) argv_.push_back(const_cast<char*>(word.c_str()));
        argv_.push_back(nullptr);
        for (char** entry = environ; *entry; entry++)
            if (std::strncmp(*entry, "VOLTLOCK_SEQUENCER=", 19) != 0) env_.emplace_back(*entry);
        env_.push_back("VOLTLOCK_SEQUENCER=" + sequencer);
        for (const auto& entry : env_) envp_.push_back(const_cast<char*>(entry.c_str()));
        envp_.push_back(nullptr);
    }
    char* const* argv() const { return argv_.data(); }
    char* const* envp() const { return envp_.data(); }

private:
    std::vector<std::string> words_, env_;
    std::vector<char*> argv_, envp_;
};

// The controlling terminal, and whether lockctl has handed its foreground to CMD's group.
class Terminal {
public:
    Terminal() : fd_(open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)) {}
    ~Terminal()
    {
        take_back();
        if (fd_ >= 0) close(fd_);
    }
    int fd() const { return fd_; }
    bool lockctl_in_foreground() const { return fd_ >= 0 && tcgetpgrp(fd_) == getpgrp(); }
    // After the guard made `group` the foreground itself (before CMD could read), or again
    // after a stop.
    void note_handed() { handed_ = true; }
    void hand_to(pid_t group)
    {
        if (lockctl_in_foreground() && tcsetpgrp(fd_, group) == 0) handed_ = true;
    }
    // From the background: with SIGTTOU blocked, so that tcsetpgrp does not stop lockctl.
    void take_back()
    {
        if (!handed_) return;
        sigset_t ttou, before;
        sigemptyset(&ttou);
        sigaddset(&ttou, SIGTTOU);
        pthread_sigmask(SIG_BLOCK, &ttou, &before);
        tcsetpgrp(fd_, getpgrp());
        pthread_sigmask(SIG_SETMASK, &before, nullptr);
        handed_ = false;
    }

private:
    int fd_;
    bool handed_ = false;
};

// In the forked child: becomes the guard of a new process group, runs CMD in it and exits with
// CMD's status (128+N for signal N, as exit_status_of reports it). `ready` gets a byte once CMD
// is in the group: a signal lockctl forwards from then on reaches CMD. The fork_mask signals
// stay blocked until each process has set its dispositions; `lockctl_mask` is lockctl's mask,
// which CMD gets back.
[[noreturn]] void guard_command(const PreparedCommand& command, int terminal, int ready,
                                const sigset_t& lockctl_mask)
{
    setpgid(0, 0);
    if (terminal >= 0) tcsetpgrp(terminal, getpid());  // SIGTTOU is blocked (fork_mask)
    struct sigaction gone {};
    gone.sa_handler = on_lockctl_gone;
    sigemptyset(&gone.sa_mask);
    sigaction(kLockctlGoneSignal, &gone, nullptr);
    prctl(PR_SET_PDEATHSIG, kLockctlGoneSignal);
    if (getppid() != g_lockctl_pid) kill(0, SIGKILL);  // lockctl died before the prctl
    for (int signal_number : kGuardIgnores) signal(signal_number, SIG_IGN);
    const pid_t child = fork();
    if (child == 0) {
        for (int signal_number : kGuardIgnores) signal(signal_number, SIG_DFL);
        signal(kLockctlGoneSignal, SIG_DFL);
        sigprocmask(SIG_SETMASK, &lockctl_mask, nullptr);
        execvpe(command.argv()[0], command.argv(), command.envp());
        dprintf(STDERR_FILENO, "Error: cannot run %s: %s\n", command.argv()[0],
                std::strerror(errno));
        _exit(kExitCannotRun);
    }
    if (child < 0) {
        dprintf(STDERR_FILENO, "Error: cannot run %s: fork: %s\n", command.argv()[0],
                std::strerror(errno));
        _exit(kExitCannotRun);
    }
    while (write(ready, "r", 1) < 0 && errno == EINTR) {
    }
    close(ready);
    sigprocmask(SIG_SETMASK, &lockctl_mask, nullptr);
    int status = 0;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) _exit(kExitServerError);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

// Blocked from before fork until each process has set its dispositions: the forwarded signals
// (one sent to the new group in between would run an inherited handler and be lost) and
// SIGTTOU (the guard takes the terminal's foreground while in the background).
sigset_t fork_mask()
{
    sigset_t mask;
    sigemptyset(&mask);
    for (int signal_number : kForwardedSignals) sigaddset(&mask, signal_number);
    sigaddset(&mask, SIGTTOU);
    return mask;
}

// Starts CMD under its guard; returns the guard's pid, which is CMD's process group, once CMD
// is in it.
pid_t start_guarded(const PreparedCommand& command, Terminal& terminal)
{
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0)
        throw Failed{VL_ERR_SERVER_OTHER, std::string("internal: pipe: ") + std::strerror(errno)};
    const bool foreground = terminal.lockctl_in_foreground();
    g_lockctl_pid = getpid();
    const sigset_t blocked = fork_mask();
    sigset_t lockctl_mask;
    pthread_sigmask(SIG_BLOCK, &blocked, &lockctl_mask);
    const pid_t guard = fork();
    if (guard == 0) {
        close(ready[0]);
        guard_command(command, foreground ? terminal.fd() : -1, ready[1], lockctl_mask);
    }
    const int fork_error = errno;
    close(ready[1]);
    if (guard > 0) {
        setpgid(guard, guard);  // as the guard does: a kill(-guard) never misses the group
        if (foreground) terminal.note_handed();
        char byte;
        while (read(ready[0], &byte, 1) < 0 && errno == EINTR) {
        }
    }
    close(ready[0]);
    pthread_sigmask(SIG_SETMASK, &lockctl_mask, nullptr);
    if (guard < 0)
        throw Failed{VL_ERR_SERVER_OTHER,
                     std::string("internal: fork: ") + std::strerror(fork_error)};
    return guard;
}

// CMD's group stopped (Ctrl-Z, or CMD read the terminal from the background): lockctl stops
// with the same signal, so that the shell sees its job stopped, and when continued continues
// the group, in the foreground if lockctl is.
void stop_along_with(pid_t group, int stop_signal, Terminal& terminal)
{
    terminal.take_back();
    raise(stop_signal);
    terminal.hand_to(group);
    kill(-group, SIGCONT);
}

// Runs command with the lock held (VOLTLOCK_SEQUENCER set) until it exits; signals to lockctl
// go on to its group, each one; if the session is lost, SIGTERM, then SIGKILL after the grace.
int run_holding(const std::vector<std::string>& command, const std::string& sequencer,
                const LossFlag& loss, uint32_t grace_ms)
{
    const PreparedCommand prepared(command, sequencer);
    Terminal terminal;
    const pid_t group = start_guarded(prepared, terminal);
    std::optional<std::chrono::steady_clock::time_point> kill_at;
    unsigned forwarded[NSIG] = {};
    while (true) {
        int status = 0;
        const pid_t done = waitpid(group, &status, WNOHANG | WUNTRACED);
        if (done == group && WIFSTOPPED(status)) {
            stop_along_with(group, WSTOPSIG(status), terminal);
            continue;
        }
        if (done == group) {
            terminal.take_back();
            // The guard killed rather than exiting: what it guarded goes too.
            if (WIFSIGNALED(status)) kill(-group, SIGKILL);
            return exit_status_of(status);
        }
        // One of each kind per turn: sent at once, a repeat could merge with the one CMD has
        // not taken yet.
        for (int signal_number : kForwardedSignals)
            if (forwarded[signal_number] < g_received[signal_number].load()) {
                forwarded[signal_number]++;
                kill(-group, signal_number);
            }
        if (loss.lost && !kill_at) {
            std::cerr << "Error: session_lost: the lock's session was lost; stopping the command\n";
            kill(-group, SIGTERM);
            kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
        }
        if (kill_at && std::chrono::steady_clock::now() >= *kill_at) {
            kill(-group, SIGKILL);
            kill_at = std::chrono::steady_clock::time_point::max();
        }
        sleep_ms(20);
    }
}

int cmd_lock(Context& ctx)
{
    const Args& args = ctx.args();
    expect_usage(args, {"--shared", "--ttl", "--wait", "--kill-grace"}, 2, 2,
                 "lock NAME [--shared] [--ttl 10s] [--wait 30s] [-- COMMAND ARGS...]");
    const uint32_t ttl = duration_flag(args, "--ttl", 10000);
    const uint32_t wait = duration_flag(args, "--wait", 30000);
    const uint32_t grace = duration_flag(args, "--kill-grace", 10000);
    LossFlag loss;
    ScopedSession session(ctx, ttl, note_loss, &loss);
    vl_sequencer* raw = nullptr;
    wait_interruptibly(session.get(), [&] {
        return vl_lock_acquire(session.get(), args.words[1].c_str(),
                               args.has("--shared") ? VL_LOCK_SHARED : VL_LOCK_EXCLUSIVE, wait,
                               &raw);
    });
    std::unique_ptr<vl_sequencer, void (*)(vl_sequencer*)> seq(raw, vl_sequencer_free);
    const std::string text = sequencer_text(seq.get());
    if (!args.command.empty()) {
        const int status = run_holding(args.command, text, loss, grace);
        // A lock lost while CMD ran is exit 1 whatever CMD returned: CMD may have exited 0 on
        // the SIGTERM it got for the loss, or finished unaware that it was no longer fenced.
        if (loss.lost) return kExitFailedCondition;  // its error line is out already
        const vl_status released = vl_lock_release(session.get(), args.words[1].c_str());
        if (released == VL_ERR_SESSION_LOST || released == VL_ERR_UNKNOWN_SESSION ||
            released == VL_ERR_NOT_HELD) {
            std::cerr << "Error: session_lost: the lock was lost while the command ran\n";
            return kExitFailedCondition;
        }
        return status;
    }
    if (ctx.format() == Format::json)
        print_json({{"sequencer", Json::parse(text)}, {"session", vl_session_id(session.get())}});
    else if (ctx.format() == Format::table)
        print_table({"LOCK", "MODE", "GENERATION", "SESSION"},
                    {{seq->lock, seq->mode == VL_LOCK_SHARED ? "shared" : "exclusive",
                      std::to_string(seq->generation), std::to_string(seq->session)}});
    else std::cout << text << "\n" << std::flush;
    hold_until_interrupted(session, loss, "session_lost: the lock is gone");
    check(vl_lock_release(session.get(), args.words[1].c_str()), session.get());
    return kExitOk;
}

int cmd_elect(Context& ctx)
{
    const Args& args = ctx.args();
    allow_flags(args, {"--listen", "--ttl"}, "elect");
    const std::string& name = args.words.size() > 1 ? args.words[1] : "";
    if (args.has("--listen")) {
        expect_words(args, 2, 2, "elect NAME --listen");
        // The leader's value is the key NAME, owned by the leader's session: print each one.
        uint64_t from = 0;
        vl_kv* current = nullptr;
        const vl_status status = vl_get(ctx.client(), name.c_str(), 0, &current);
        if (status == VL_OK) {
            print_value_line(current->value, current->value_len);
            from = current->mod_revision + 1;
            vl_kv_free(current);
        } else if (status != VL_ERR_KEY_NOT_FOUND) {
            check(status, ctx.client());
        }
        vl_watch_options options{};
        options.start_revision = from;
        follow_watch(ctx, name, options, [](const vl_event& e) {
            if (e.value) print_value_line(e.value, e.value_len);
        });
        return kExitOk;
    }
    expect_words(args, 3, 3, "elect NAME PROPOSAL [--ttl 10s]");
    const std::string& proposal = args.words[2];
    LossFlag loss;
    ScopedSession session(ctx, duration_flag(args, "--ttl", 10000), note_loss, &loss);
    // Campaign: wait in line for the election's lock, an hour (the longest wait) at a time.
    vl_sequencer* raw = nullptr;
    bool won = false;
    while (!won) {
        wait_interruptibly(session.get(), [&] {
            const vl_status status = vl_lock_acquire(session.get(), name.c_str(),
                                                     VL_LOCK_EXCLUSIVE, kLongestWaitMs, &raw);
            won = status == VL_OK;
            return status == VL_ERR_WAIT_TIMED_OUT ? VL_OK : status;
        });
    }
    std::unique_ptr<vl_sequencer, void (*)(vl_sequencer*)> seq(raw, vl_sequencer_free);
    // The leader's value: owned by its session (gone with it), written fenced by its grant.
    vl_put_options options{};
    options.session = session.get();
    options.sequencer = seq.get();
    check(vl_put(ctx.client(), name.c_str(), proposal.data(), proposal.size(), &options, nullptr),
          ctx.client());
    if (ctx.format() == Format::json)
        print_json({{"name", name}, {"value", proposal}, {"session", vl_session_id(session.get())},
                    {"generation", seq->generation}});
    else std::cout << proposal << "\n" << std::flush;
    hold_until_interrupted(session, loss, "session_lost: leadership is gone");
    vl_delete_options fenced{};
    fenced.sequencer = seq.get();
    vl_delete(ctx.client(), name.c_str(), &fenced, nullptr);
    return kExitOk;
}

int cmd_barrier(Context& ctx)
{
    const Args& args = ctx.args();
    expect_usage(args, {"--count", "--wait", "--ttl"}, 2, 2, "barrier NAME --count N [--wait 30s]");
    if (!args.has("--count")) throw UsageError{"barrier needs --count N"};
    const uint64_t count = parse_u64(*args.get("--count"), "--count");
    if (count < 1 || count > 1024) throw UsageError{"--count must be 1 to 1024"};
    const uint32_t wait = duration_flag(args, "--wait", 30000);
    ScopedSession session(ctx, duration_flag(args, "--ttl", 10000));
    wait_interruptibly(session.get(), [&] {
        return vl_barrier_enter(session.get(), args.words[1].c_str(),
                                static_cast<uint32_t>(count), wait);
    });
    wait_interruptibly(session.get(), [&] {
        return vl_barrier_leave(session.get(), args.words[1].c_str(), wait);
    });
    if (ctx.format() == Format::json) print_json({{"barrier", args.words[1]}, {"passed", true}});
    else std::cout << "passed\n";
    return kExitOk;
}

// ---- Sessions, sequencers ---------------------------------------------------------------------

void print_info(Context& ctx, const std::string& path)
{
    char* text = nullptr;
    check(vl_info_get(ctx.client(), path.c_str(), -1, &text), ctx.client());
    const Json document = Json::parse(text);
    vl_string_free(text);
    if (ctx.format() == Format::table && document.contains("sessions")) {
        std::vector<std::vector<std::string>> rows;
        for (const Json& s : document["sessions"])
            rows.push_back({std::to_string(s.value("session", uint64_t{0})), s.value("name", ""),
                            std::to_string(s.value("ttl_ms", uint64_t{0}))});
        print_table({"SESSION", "NAME", "TTL_MS"}, rows);
        return;
    }
    if (ctx.format() == Format::simple && document.contains("sessions")) {
        for (const Json& s : document["sessions"])
            std::cout << s.value("session", uint64_t{0}) << " " << s.value("name", "") << "\n";
        return;
    }
    std::cout << (ctx.format() == Format::json ? document.dump() : document.dump(2)) << "\n";
}

int cmd_session(Context& ctx)
{
    const Args& args = ctx.args();
    const std::string sub = args.words.size() > 1 ? args.words[1] : "";
    if (sub == "grant") {
        expect_usage(args, {"--ttl", "--name"}, 2, 2, "session grant --ttl 10s [--name NAME]");
        if (!args.has("--ttl")) throw UsageError{"session grant needs --ttl"};
        uint64_t id = 0;
        const std::string name = args.get("--name").value_or("lockctl");
        check(vl_session_grant_id(ctx.client(), duration_flag(args, "--ttl", 0), name.c_str(), &id),
              ctx.client());
        if (ctx.format() == Format::json) print_json({{"session", id}});
        else std::cout << id << "\n";
        return kExitOk;
    }
    if (sub == "keepalive") {
        expect_usage(args, {"--once"}, 3, 3, "session keepalive ID [--once]");
        const uint64_t id = parse_u64(args.words[2], "ID");
        while (true) {
            uint32_t ttl = 0;
            check(vl_session_keepalive_id(ctx.client(), id, &ttl), ctx.client());
            if (ctx.format() == Format::json) print_json({{"session", id}, {"ttl_ms", ttl}});
            else std::cout << "session " << id << " kept alive with TTL " << ttl << "ms\n"
                           << std::flush;
            if (args.has("--once")) return kExitOk;
            for (uint32_t slept = 0; slept < ttl / 3 && !g_signal; slept += 50) sleep_ms(50);
            if (g_signal) return kExitOk;
        }
    }
    if (sub == "revoke") {
        expect_usage(args, {}, 3, 3, "session revoke ID");
        check(vl_session_revoke_id(ctx.client(), parse_u64(args.words[2], "ID")), ctx.client());
        if (ctx.format() == Format::json) print_json({{"revoked", true}});
        else std::cout << "session " << args.words[2] << " revoked\n";
        return kExitOk;
    }
    if (sub == "list") {
        expect_usage(args, {}, 2, 2, "session list");
        print_info(ctx, "/v1/sessions");
        return kExitOk;
    }
    if (sub == "get") {
        expect_usage(args, {}, 3, 3, "session get ID");
        print_info(ctx, "/v1/sessions/" + std::to_string(parse_u64(args.words[2], "ID")));
        return kExitOk;
    }
    throw UsageError{"usage: lockctl session grant|keepalive|revoke|list|get"};
}

int cmd_sequencer(Context& ctx)
{
    const Args& args = ctx.args();
    allow_flags(args, {}, "sequencer check");
    if (args.words.size() < 2 || args.words[1] != "check")
        throw UsageError{"usage: lockctl sequencer check [SEQ]"};
    expect_words(args, 2, 3, "sequencer check [SEQ]");
    const char* env = std::getenv("VOLTLOCK_SEQUENCER");
    if (args.words.size() == 2 && !env)
        throw UsageError{"sequencer check: give SEQ or set VOLTLOCK_SEQUENCER"};
    const auto seq = parse_sequencer(args.words.size() == 3 ? args.words[2] : env);
    bool valid = false;
    check(vl_sequencer_check(ctx.client(), seq.get(), &valid), ctx.client());
    if (ctx.format() == Format::json) print_json({{"valid", valid}});
    else std::cout << (valid ? "valid" : "invalid") << "\n";
    if (!valid) {
        std::cerr << "Error: sequencer_invalid: that grant of " << seq->lock << " has ended\n";
        return kExitFailedCondition;
    }
    return kExitOk;
}

// ---- Cluster information -----------------------------------------------------------------------

Json info(Context& ctx, const std::string& path, int endpoint)
{
    char* text = nullptr;
    check(vl_info_get(ctx.client(), path.c_str(), endpoint, &text), ctx.client());
    Json document = Json::parse(text);
    vl_string_free(text);
    return document;
}

std::string text_of(const Json& value)
{
    return value.is_string() ? value.get<std::string>() : value.dump();
}

int cmd_member(Context& ctx)
{
    const Args& args = ctx.args();
    allow_flags(args, {}, "member list");
    if (args.words.size() != 2 || args.words[1] != "list")
        throw UsageError{"usage: lockctl member list"};
    const Json cluster = info(ctx, "/v1/cluster", -1);
    if (ctx.format() == Format::json) {
        print_json({{"members", cluster["members"]}, {"leader", cluster["leader"]},
                    {"view", cluster["view"]}});
        return kExitOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const Json& m : cluster["members"])
        rows.push_back({text_of(m["replica"]), text_of(m["role"]),
                        "http://" + text_of(m["ip"]) + ":" + text_of(m["http_port"]),
                        text_of(m["ip"]) + ":" + text_of(m["udp_port"])});
    if (ctx.format() == Format::table) {
        print_table({"REPLICA", "ROLE", "HTTP", "UDP"}, rows);
    } else {
        for (const auto& row : rows)
            std::cout << row[0] << ", " << row[1] << ", " << row[2] << ", " << row[3] << "\n";
    }
    return kExitOk;
}

int cmd_endpoint(Context& ctx)
{
    const Args& args = ctx.args();
    allow_flags(args, {}, "endpoint");
    const std::string sub = args.words.size() == 2 ? args.words[1] : "";
    if (sub != "status" && sub != "health")
        throw UsageError{"usage: lockctl endpoint status|health"};
    vl_client* c = ctx.client();
    int worst = kExitOk;
    vl_status worst_status = VL_OK;
    std::vector<Json> documents;
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < vl_client_endpoint_count(c); i++) {
        const std::string url = vl_client_endpoint(c, i);
        const auto start = std::chrono::steady_clock::now();
        char* text = nullptr;
        const vl_status status =
            vl_info_get(c, sub == "status" ? "/v1/status" : "/readyz", int(i), &text);
        const std::chrono::duration<double, std::milli> took =
            std::chrono::steady_clock::now() - start;
        char took_text[32];
        std::snprintf(took_text, sizeof took_text, "%.1fms", took.count());
        if (status != VL_OK) {
            if (exit_code_for(status) > worst) {
                worst = exit_code_for(status);
                worst_status = status;
            }
            documents.push_back({{"endpoint", url}, {"health", false},
                                 {"error", vl_client_errstr(c)}});
            rows.push_back({url, "unhealthy", vl_client_errstr(c), took_text});
            continue;
        }
        Json document = Json::parse(text);
        vl_string_free(text);
        if (sub == "health") {
            documents.push_back({{"endpoint", url}, {"health", true}, {"took", took_text}});
            rows.push_back({url, "healthy", "", took_text});
        } else {
            documents.push_back({{"endpoint", url}, {"status", document}});
            rows.push_back({url, text_of(document["replica"]), text_of(document["status"]),
                            text_of(document["view"]), text_of(document["leader"]),
                            text_of(document["op"]), text_of(document["commit"])});
        }
    }
    if (ctx.format() == Format::json) {
        for (const Json& d : documents) print_json(d);
    } else if (sub == "health") {
        if (ctx.format() == Format::table) {
            print_table({"ENDPOINT", "HEALTH", "ERROR", "TOOK"}, rows);
        } else {
            for (const auto& row : rows)
                std::cout << row[0] << " is " << row[1] << (row[2].empty() ? "" : ": " + row[2])
                          << " (took " << row[3] << ")\n";
        }
    } else if (ctx.format() == Format::table) {
        print_table({"ENDPOINT", "REPLICA", "STATUS", "VIEW", "LEADER", "OP", "COMMIT"}, rows);
    } else {
        for (const auto& row : rows) {
            std::string line = row[0];
            for (size_t k = 1; k < row.size(); k++) line += ", " + row[k];
            std::cout << line << "\n";
        }
    }
    if (worst != kExitOk)
        std::cerr << "Error: " << coded(worst_status, "an endpoint failed (see above)") << "\n";
    return worst;
}

int cmd_status(Context& ctx)
{
    allow_flags(ctx.args(), {}, "status");
    expect_words(ctx.args(), 1, 1, "status");
    const Json cluster = info(ctx, "/v1/cluster", -1);
    const Json api = cluster.value("api", Json::object());
    if (ctx.format() == Format::json) {
        print_json(cluster);
    } else if (ctx.format() == Format::table) {
        print_table({"CLUSTER", "STATUS", "VIEW", "LEADER", "COMMIT", "REVISION", "SESSIONS",
                     "LOCKS", "KEYS"},
                    {{text_of(cluster["cluster_id"]), text_of(cluster["status"]),
                      text_of(cluster["view"]), text_of(cluster["leader"]),
                      text_of(cluster["commit"]), text_of(api.value("revision", Json())),
                      text_of(api.value("sessions", Json())), text_of(api.value("locks", Json())),
                      text_of(api.value("keys", Json()))}});
    } else {
        std::cout << "cluster " << text_of(cluster["cluster_id"]) << ": "
                  << text_of(cluster["status"]) << ", view " << text_of(cluster["view"])
                  << ", leader r" << text_of(cluster["leader"]) << ", commit "
                  << text_of(cluster["commit"]) << ", revision "
                  << text_of(api.value("revision", Json())) << "\n";
    }
    return kExitOk;
}

int cmd_version(Context& ctx)
{
    allow_flags(ctx.args(), {}, "version");
    if (ctx.format() == Format::json)
        print_json({{"lockctl", kVersion}, {"libvoltlock", vl_version()}, {"api", "v1"}});
    else std::cout << "lockctl version: " << kVersion << "\nlibvoltlock version: " << vl_version()
                   << "\nAPI version: v1\n";
    return kExitOk;
}

int cmd_snapshot(Context& ctx)
{
    const Args& args = ctx.args();
    allow_flags(args, {}, "snapshot save");
    if (args.words.size() != 3 || args.words[1] != "save")
        throw UsageError{"usage: lockctl snapshot save FILE"};
    const std::string& file = args.words[2];
    uint64_t op = 0, size = 0;
    {
        // A backup: its owner's only from the first byte of FILE.partial, which libvoltlock
        // writes and then renames to FILE.
        const voltlock::OwnerOnlyFiles owner_only;
        check(vl_snapshot_save(ctx.client(), -1, file.c_str(), &op, &size), ctx.client());
    }
    if (ctx.format() == Format::json)
        print_json({{"file", file}, {"op", op}, {"size", size}});
    else if (ctx.format() == Format::table)
        print_table({"FILE", "OP", "SIZE"}, {{file, std::to_string(op), std::to_string(size)}});
    else
        std::cout << "Snapshot of op " << op << " (" << size << " bytes) saved to " << file
                  << "\n";
    return kExitOk;
}

// ---- Users, roles and tokens (the admin role; docs/security-auth.md) ---------------------------
// The cell replaces a role's grants and a user's roles whole (PUT /v1/auth/...), so grant and
// revoke read the role or user, change it here and write it back.

template <class T>
using Owned = std::unique_ptr<T, void (*)(T*)>;

// The names of the permission bits set in `bits`, as libvoltlock names them.
std::vector<std::string> permission_names(unsigned bits)
{
    std::vector<std::string> names;
    for (unsigned bit = 1; const char* name = vl_permission_name(bit); bit <<= 1)
        if (bits & bit) names.emplace_back(name);
    return names;
}

std::string joined(const std::vector<std::string>& words, const char* separator)
{
    std::string text;
    for (const std::string& word : words) text += (text.empty() ? "" : separator) + word;
    return text;
}

std::vector<std::string> strings(char* const* items, size_t count)
{
    return {items, items + count};
}

// "read,write" -> bits; an unknown name is a usage error.
unsigned parse_permissions(const std::string& text)
{
    unsigned bits = 0;
    std::istringstream names(text);
    for (std::string word; std::getline(names, word, ',');) {
        unsigned found = 0;
        for (unsigned bit = 1; const char* name = vl_permission_name(bit); bit <<= 1)
            if (word == name) found = bit;
        if (found == 0)
            throw UsageError{"PERMS: '" + word + "' is not a permission (" +
                             joined(permission_names(~0u), ", ") + ")"};
        bits |= found;
    }
    if (bits == 0) throw UsageError{"PERMS: give one or more, like read,write"};
    return bits;
}

std::string utc_text(uint64_t unix_ms)
{
    const auto seconds = static_cast<std::time_t>(unix_ms / 1000);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return text;
}

Json role_json(const vl_role& role)
{
    Json grants = Json::array();
    for (size_t i = 0; i < role.grant_count; i++)
        grants.push_back({{"permissions", permission_names(role.grants[i].permissions)},
                          {"resource", role.grants[i].resource}});
    return {{"name", role.name}, {"grants", grants}};
}

Json user_json(const vl_user& user)
{
    return {{"name", user.name},
            {"roles", strings(user.roles, user.role_count)},
            {"tokens", strings(user.token_ids, user.token_count)}};
}

Json token_json(const vl_token_info& token)
{
    return {{"id", token.id},
            {"user", token.user},
            {"created_ms", token.created_ms},
            {"expires_ms", token.expires_ms ? Json(token.expires_ms) : Json(nullptr)}};
}

// "read,watch key:app/"
std::string grant_text(const vl_grant& grant)
{
    return joined(permission_names(grant.permissions), ",") + " " + grant.resource;
}

// One table row per grant (one with empty cells for a role without grants).
void add_role_rows(std::vector<std::vector<std::string>>& rows, const vl_role& role)
{
    if (role.grant_count == 0) rows.push_back({role.name, "", ""});
    for (size_t i = 0; i < role.grant_count; i++)
        rows.push_back({role.name, joined(permission_names(role.grants[i].permissions), ","),
                        role.grants[i].resource});
}

std::vector<std::string> user_row(const vl_user& user)
{
    return {user.name, joined(strings(user.roles, user.role_count), ","),
            joined(strings(user.token_ids, user.token_count), ",")};
}

std::vector<std::string> token_row(const vl_token_info& token)
{
    return {token.id, token.user, utc_text(token.created_ms),
            token.expires_ms ? utc_text(token.expires_ms) : "never"};
}

// A role, user or token listing in each format: one JSON document {<field>: [...],
// auth_revision}, a table, or a line per item.
struct Listing {
    const char* field;
    uint64_t auth_revision;
    std::vector<std::string> header;
    std::vector<Json> documents;
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> lines;
};

int print_listing(Context& ctx, const Listing& listing)
{
    if (ctx.format() == Format::json)
        print_json({{listing.field, listing.documents}, {"auth_revision", listing.auth_revision}});
    else if (ctx.format() == Format::table) print_table(listing.header, listing.rows);
    else for (const std::string& line : listing.lines) std::cout << line << "\n";
    return kExitOk;
}

// What a change prints: etcdctl's sentence, or the auth tables' revision after it.
void print_change(Context& ctx, const std::string& sentence, uint64_t auth_revision)
{
    if (ctx.format() == Format::json) print_json({{"auth_revision", auth_revision}});
    else if (ctx.format() == Format::table)
        print_table({"AUTH_REVISION"}, {{std::to_string(auth_revision)}});
    else std::cout << sentence << "\n";
}

// `role delete NAME`, `user delete NAME`, `token revoke ID`: one call on the name or id.
int remove_one(Context& ctx, const std::string& usage,
               vl_status (*remove)(vl_client*, const char*, uint64_t*), const std::string& kind,
               const std::string& done)
{
    expect_usage(ctx.args(), {}, 3, 3, usage);
    const std::string& name = ctx.args().words[2];
    uint64_t revision = 0;
    check(remove(ctx.client(), name.c_str(), &revision), ctx.client());
    print_change(ctx, kind + " " + name + " " + done, revision);
    return kExitOk;
}

int refuse(const std::string& code, const std::string& message)
{
    std::cerr << "Error: " << code << ": " << message << "\n";
    return kExitFailedCondition;
}

// The role (or user) `name`; with missing_ok, null if the cell has none by that name.
Owned<vl_role> get_role(Context& ctx, const std::string& name, bool missing_ok = false)
{
    vl_role* role = nullptr;
    const vl_status status = vl_role_get(ctx.client(), name.c_str(), VL_READ_LINEARIZABLE, &role);
    if (!(missing_ok && status == VL_ERR_NOT_FOUND)) check(status, ctx.client());
    return {role, vl_role_free};
}

Owned<vl_user> get_user(Context& ctx, const std::string& name, bool missing_ok = false)
{
    vl_user* user = nullptr;
    const vl_status status = vl_user_get(ctx.client(), name.c_str(), VL_READ_LINEARIZABLE, &user);
    if (!(missing_ok && status == VL_ERR_NOT_FOUND)) check(status, ctx.client());
    return {user, vl_user_free};
}

int put_role(Context& ctx, const std::string& name, const std::vector<vl_grant>& grants,
             const std::string& sentence)
{
    uint64_t revision = 0;
    check(vl_role_put(ctx.client(), name.c_str(), grants.data(), grants.size(), &revision),
          ctx.client());
    print_change(ctx, sentence, revision);
    return kExitOk;
}

int put_user(Context& ctx, const std::string& name, const std::vector<std::string>& roles,
             const std::string& sentence)
{
    std::vector<const char*> names;
    for (const std::string& role : roles) names.push_back(role.c_str());
    uint64_t revision = 0;
    check(vl_user_put(ctx.client(), name.c_str(), names.data(), names.size(), &revision),
          ctx.client());
    print_change(ctx, sentence, revision);
    return kExitOk;
}

int role_add(Context& ctx)
{
    expect_usage(ctx.args(), {}, 3, 3, "role add NAME");
    const std::string& name = ctx.args().words[2];
    // etcdctl's role add refuses a role that exists; a put would empty its grants.
    if (get_role(ctx, name, true)) return refuse("already_exists", "role " + name + " exists");
    return put_role(ctx, name, {}, "Role " + name + " created");
}

int role_grant_permission(Context& ctx)
{
    expect_usage(ctx.args(), {}, 5, 5, "role grant-permission NAME PERMS RESOURCE");
    const std::string& name = ctx.args().words[2];
    const unsigned adding = parse_permissions(ctx.args().words[3]);
    const std::string& resource = ctx.args().words[4];
    const auto role = get_role(ctx, name);
    std::vector<vl_grant> grants(role->grants, role->grants + role->grant_count);
    const auto same = std::find_if(grants.begin(), grants.end(),
                                   [&](const vl_grant& g) { return g.resource == resource; });
    if (same != grants.end()) same->permissions |= adding;
    else grants.push_back({adding, resource.c_str()});
    return put_role(ctx, name, grants, "Role " + name + " updated");
}

int role_revoke_permission(Context& ctx)
{
    expect_usage(ctx.args(), {}, 4, 5, "role revoke-permission NAME RESOURCE [PERMS]");
    const std::string& name = ctx.args().words[2];
    const std::string& resource = ctx.args().words[3];
    const unsigned removing =
        ctx.args().words.size() == 5 ? parse_permissions(ctx.args().words[4]) : ~0u;
    const auto role = get_role(ctx, name);
    std::vector<vl_grant> grants(role->grants, role->grants + role->grant_count);
    const auto same = std::find_if(grants.begin(), grants.end(), [&](const vl_grant& g) {
        return g.resource == resource && (g.permissions & removing);
    });
    if (same == grants.end()) {
        std::vector<std::string> held;
        for (const vl_grant& grant : grants) held.push_back(grant_text(grant));
        const std::string what =
            ctx.args().words.size() == 5 ? " of " + joined(permission_names(removing), ",") : "";
        return refuse("not_found", "role " + name + " has no grant" + what + " on " +
                                       resource + " (it has: " +
                                       (held.empty() ? "none" : joined(held, "; ")) + ")");
    }
    same->permissions &= ~removing;
    if (same->permissions == 0) grants.erase(same);
    return put_role(ctx, name, grants, "Role " + name + " updated");
}

int role_get(Context& ctx)
{
    expect_usage(ctx.args(), {}, 3, 3, "role get NAME");
    const auto role = get_role(ctx, ctx.args().words[2]);
    if (ctx.format() == Format::json) {
        print_json(role_json(*role));
    } else if (ctx.format() == Format::table) {
        std::vector<std::vector<std::string>> rows;
        add_role_rows(rows, *role);
        print_table({"ROLE", "PERMISSIONS", "RESOURCE"}, rows);
    } else {
        std::cout << "Role " << role->name << "\n";
        for (size_t i = 0; i < role->grant_count; i++)
            std::cout << "  " << grant_text(role->grants[i]) << "\n";
    }
    return kExitOk;
}

int role_list(Context& ctx)
{
    expect_usage(ctx.args(), {}, 2, 2, "role list");
    vl_role_list* raw = nullptr;
    check(vl_roles_list(ctx.client(), VL_READ_LINEARIZABLE, &raw), ctx.client());
    const Owned<vl_role_list> list(raw, vl_role_list_free);
    Listing listing{"roles", list->auth_revision, {"ROLE", "PERMISSIONS", "RESOURCE"}};
    for (const vl_role& role : std::span(list->roles, list->count)) {
        listing.documents.push_back(role_json(role));
        add_role_rows(listing.rows, role);
        listing.lines.emplace_back(role.name);
    }
    return print_listing(ctx, listing);
}

int role_delete(Context& ctx)
{
    return remove_one(ctx, "role delete NAME", vl_role_delete, "Role", "deleted");
}

int user_add(Context& ctx)
{
    expect_usage(ctx.args(), {}, 3, 3, "user add NAME");
    const std::string& name = ctx.args().words[2];
    // As role add: a put would take the roles of a user that exists.
    if (get_user(ctx, name, true)) return refuse("already_exists", "user " + name + " exists");
    return put_user(ctx, name, {}, "User " + name + " created");
}

int user_grant_role(Context& ctx)
{
    expect_usage(ctx.args(), {}, 4, 4, "user grant-role NAME ROLE");
    const std::string& name = ctx.args().words[2];
    const std::string& role = ctx.args().words[3];
    const auto user = get_user(ctx, name);
    std::vector<std::string> roles = strings(user->roles, user->role_count);
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) roles.push_back(role);
    return put_user(ctx, name, roles, "Role " + role + " is granted to user " + name);
}

int user_revoke_role(Context& ctx)
{
    expect_usage(ctx.args(), {}, 4, 4, "user revoke-role NAME ROLE");
    const std::string& name = ctx.args().words[2];
    const std::string& role = ctx.args().words[3];
    const auto user = get_user(ctx, name);
    std::vector<std::string> roles = strings(user->roles, user->role_count);
    const auto found = std::find(roles.begin(), roles.end(), role);
    if (found == roles.end())
        return refuse("not_found", "user " + name + " does not have role " + role);
    roles.erase(found);
    return put_user(ctx, name, roles, "Role " + role + " is revoked from user " + name);
}

int user_get(Context& ctx)
{
    expect_usage(ctx.args(), {}, 3, 3, "user get NAME");
    const auto user = get_user(ctx, ctx.args().words[2]);
    if (ctx.format() == Format::json) {
        print_json(user_json(*user));
    } else if (ctx.format() == Format::table) {
        print_table({"USER", "ROLES", "TOKENS"}, {user_row(*user)});
    } else {
        std::cout << "User: " << user->name
                  << "\nRoles: " << joined(strings(user->roles, user->role_count), " ")
                  << "\nTokens: " << joined(strings(user->token_ids, user->token_count), " ")
                  << "\n";
    }
    return kExitOk;
}

int user_list(Context& ctx)
{
    expect_usage(ctx.args(), {}, 2, 2, "user list");
    vl_user_list* raw = nullptr;
    check(vl_users_list(ctx.client(), VL_READ_LINEARIZABLE, &raw), ctx.client());
    const Owned<vl_user_list> list(raw, vl_user_list_free);
    Listing listing{"users", list->auth_revision, {"USER", "ROLES", "TOKENS"}};
    for (const vl_user& user : std::span(list->users, list->count)) {
        listing.documents.push_back(user_json(user));
        listing.rows.push_back(user_row(user));
        listing.lines.emplace_back(user.name);
    }
    return print_listing(ctx, listing);
}

int user_delete(Context& ctx)
{
    return remove_one(ctx, "user delete NAME", vl_user_delete, "User", "deleted");
}

int token_create(Context& ctx)
{
    expect_usage(ctx.args(), {"--ttl"}, 3, 3, "token create USER [--ttl 24h]");
    uint64_t ttl_s = 0;  // never expires
    if (const auto ttl = ctx.args().get("--ttl")) {
        const uint64_t ms = parse_duration_ms(*ttl, "--ttl");
        if (ms < 1000 || ms % 1000 != 0)
            throw UsageError{"--ttl: whole seconds, at least 1s (like 3600s, 90m, 24h)"};
        ttl_s = ms / 1000;
    }
    vl_new_token* raw = nullptr;
    check(vl_token_create(ctx.client(), ctx.args().words[2].c_str(), ttl_s, &raw), ctx.client());
    const Owned<vl_new_token> made(raw, vl_new_token_free);
    if (ctx.format() == Format::json)
        print_json({{"token", made->token}, {"id", made->id}, {"user", made->user},
                    {"ttl_s", made->ttl_s}, {"auth_revision", made->auth_revision}});
    else if (ctx.format() == Format::table)
        print_table({"TOKEN", "ID", "USER", "TTL_S"},
                    {{made->token, made->id, made->user, std::to_string(made->ttl_s)}});
    else std::cout << made->token << "\n";  // alone on its line, for TOKEN=$(lockctl ...)
    return kExitOk;
}

int token_revoke(Context& ctx)
{
    return remove_one(ctx, "token revoke ID", vl_token_revoke, "Token", "revoked");
}

int token_list(Context& ctx)
{
    expect_usage(ctx.args(), {}, 2, 2, "token list");
    vl_token_list* raw = nullptr;
    check(vl_tokens_list(ctx.client(), VL_READ_LINEARIZABLE, &raw), ctx.client());
    const Owned<vl_token_list> list(raw, vl_token_list_free);
    Listing listing{"tokens", list->auth_revision, {"ID", "USER", "CREATED", "EXPIRES"}};
    for (const vl_token_info& token : std::span(list->tokens, list->count)) {
        listing.documents.push_back(token_json(token));
        listing.rows.push_back(token_row(token));
        listing.lines.push_back(joined(listing.rows.back(), " "));
    }
    return print_listing(ctx, listing);
}

// `lockctl COMMAND SUB ...`: runs SUB, or says which there are.
int run_subcommand(Context& ctx, const std::string& command,
                   const std::vector<std::pair<std::string, int (*)(Context&)>>& subcommands)
{
    const std::string sub = ctx.args().words.size() > 1 ? ctx.args().words[1] : "";
    std::vector<std::string> names;
    for (const auto& [name, run] : subcommands) {
        if (name == sub) return run(ctx);
        names.push_back(name);
    }
    throw UsageError{"usage: lockctl " + command + " " + joined(names, "|")};
}

int cmd_role(Context& ctx)
{
    return run_subcommand(ctx, "role",
                          {{"add", role_add}, {"get", role_get}, {"list", role_list},
                           {"delete", role_delete}, {"grant-permission", role_grant_permission},
                           {"revoke-permission", role_revoke_permission}});
}

int cmd_user(Context& ctx)
{
    return run_subcommand(ctx, "user",
                          {{"add", user_add}, {"get", user_get}, {"list", user_list},
                           {"delete", user_delete}, {"grant-role", user_grant_role},
                           {"revoke-role", user_revoke_role}});
}

int cmd_token(Context& ctx)
{
    return run_subcommand(ctx, "token",
                          {{"create", token_create}, {"revoke", token_revoke},
                           {"list", token_list}});
}

const char* const kBashCompletion = R"(# lockctl bash completion: source <(lockctl completion bash)
_lockctl() {
    local cur prev words
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    local commands="put set get del watch lock elect barrier session sequencer member endpoint"
    commands+=" status snapshot role user token version completion"
    local globals="--endpoints --dial-timeout --command-timeout --cacert --cert --key --token"
    globals+=" --user -w --write-out --help"
    case "$prev" in
        -w|--write-out) COMPREPLY=($(compgen -W "simple json table" -- "$cur")); return ;;
        session) COMPREPLY=($(compgen -W "grant keepalive revoke list get" -- "$cur")); return ;;
        sequencer) COMPREPLY=($(compgen -W "check" -- "$cur")); return ;;
        member) COMPREPLY=($(compgen -W "list" -- "$cur")); return ;;
        endpoint) COMPREPLY=($(compgen -W "status health" -- "$cur")); return ;;
        snapshot) COMPREPLY=($(compgen -W "save" -- "$cur")); return ;;
        role) COMPREPLY=($(compgen -W "add get list delete grant-permission revoke-permission" \
                                     -- "$cur")); return ;;
        user) COMPREPLY=($(compgen -W "add get list delete grant-role revoke-role" -- "$cur"))
              return ;;
        token) COMPREPLY=($(compgen -W "create revoke list" -- "$cur")); return ;;
        save) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")); return ;;
    esac
    if [[ "$cur" == -* ]]; then
        local flags="$globals --prefix --limit --rev-only --keys-only --print-value-only"
        flags+=" --consistency --prev-revision --lease"
        flags+=" --sequencer --rev --shared --ttl --wait --kill-grace --listen --count --once"
        flags+=" --name"
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "$commands" -- "$cur"))
    fi
}
complete -F _lockctl lockctl
)";

// zsh's own completion system (_arguments), not bash's through bashcompinit: descriptions
// for the commands, and each flag's values.
const char* const kZshCompletion = R"(#compdef lockctl
# lockctl zsh completion: source <(lockctl completion zsh) after compinit, or save it as
# _lockctl in a directory on $fpath.
_lockctl() {
    local -a commands
    commands=(
        'put:write a key'
        'set:write a key (the same as put)'
        'get:read a key or a prefix'
        'del:delete a key or a prefix'
        'watch:stream changes until interrupted'
        'lock:hold a lock, or run a command while holding it'
        'elect:campaign for leadership, or listen to leaders'
        'barrier:enter a barrier and wait for all members'
        'session:grant, keep alive, revoke, list or get sessions'
        'sequencer:check a fencing token'
        'member:list the cell'"'"'s replicas'
        'endpoint:status or health of each endpoint'
        'status:the cell'"'"'s status'
        'snapshot:back up the newest snapshot of one replica'
        'role:add, get, list, delete roles; grant or revoke their permissions'
        'user:add, get, list, delete users; grant or revoke their roles'
        'token:create, revoke or list bearer tokens'
        'version:print the versions'
        'completion:print a shell completion script'
    )
    local -a globals
    globals=(
        '--endpoints[comma-separated URLs]:endpoints:'
        '--dial-timeout[connecting to one endpoint]:duration:'
        '--command-timeout[one request, every retry included]:duration:'
        '--cacert[the cell CA certificate]:file:_files'
        '--token[a bearer token]:token:'
        '--user[NAME\:TOKEN]:user:'
        '--cert[a client certificate]:file:_files'
        '--key[the client certificate key]:file:_files'
        '(-w --write-out)'{-w,--write-out}'[output format]:format:(simple json table)'
        '(-h --help)'{-h,--help}'[help]'
    )
    local curcontext="$curcontext" state line
    typeset -A opt_args
    _arguments -C $globals '1:command:->command' '*::argument:->argument' && return 0
    case $state in
    command)
        _describe -t commands 'lockctl command' commands
        ;;
    argument)
        local -a flags
        flags=($globals)
        case $words[1] in
        put|set) flags+=('--prev-revision[only if the key is at this revision]:revision:'
                         '--lease[attach to a session]:session:'
                         '--sequencer[fence with a sequencer]:sequencer:') ;;
        get) flags+=('--prefix[every key under KEY]' '--limit[at most N keys]:count:'
                     '--rev-only[only the revision]' '--keys-only[only the keys]'
                     '--print-value-only[only the values]'
                     '--consistency[linearizable or serializable]:consistency:(l s)') ;;
        del) flags+=('--prefix[every key under KEY]'
                     '--prev-revision[only if the key is at this revision]:revision:') ;;
        watch) flags+=('--prefix[every key under KEY]' '--rev[from this revision]:revision:') ;;
        lock) flags+=('--shared[a shared lock]' '--ttl[session TTL]:duration:'
                      '--wait[how long to wait]:duration:'
                      '--kill-grace[SIGTERM to SIGKILL]:duration:') ;;
        elect) flags+=('--listen[print each new leader]' '--ttl[session TTL]:duration:') ;;
        barrier) flags+=('--count[members]:count:' '--wait[how long to wait]:duration:'
                         '--ttl[session TTL]:duration:') ;;
        session) flags+=('--ttl[session TTL]:duration:' '--name[session name]:name:'
                         '--once[one keepalive]')
                 (( CURRENT == 2 )) &&
                     { _values 'session command' grant keepalive revoke list get; return }
                 ;;
        sequencer) (( CURRENT == 2 )) && { _values 'sequencer command' check; return } ;;
        member) (( CURRENT == 2 )) && { _values 'member command' list; return } ;;
        endpoint) (( CURRENT == 2 )) && { _values 'endpoint command' status health; return } ;;
        snapshot)
            (( CURRENT == 2 )) && { _values 'snapshot command' save; return }
            (( CURRENT == 3 )) && { _files; return }
            ;;
        role) (( CURRENT == 2 )) && { _values 'role command' add get list delete \
                                          grant-permission revoke-permission; return } ;;
        user) (( CURRENT == 2 )) && { _values 'user command' add get list delete grant-role \
                                          revoke-role; return } ;;
        token) flags+=('--ttl[the token expires after]:duration:')
               (( CURRENT == 2 )) && { _values 'token command' create revoke list; return } ;;
        completion) (( CURRENT == 2 )) && { _values 'shell' bash zsh; return } ;;
        esac
        _arguments $flags '*:argument:'
        ;;
    esac
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _lockctl "$@"
else
    compdef _lockctl lockctl
fi
)";

int cmd_completion(Context& ctx)
{
    const Args& args = ctx.args();
    allow_flags(args, {}, "completion");
    const std::string shell = args.words.size() == 2 ? args.words[1] : "";
    if (shell == "bash") std::cout << kBashCompletion;
    else if (shell == "zsh") std::cout << kZshCompletion;
    else throw UsageError{"usage: lockctl completion bash|zsh"};
    return kExitOk;
}

const std::map<std::string, std::function<int(Context&)>> kCommands = {
    {"put", cmd_put},         {"set", cmd_put},         {"get", cmd_get},
    {"del", cmd_del},         {"watch", cmd_watch},     {"lock", cmd_lock},
    {"elect", cmd_elect},     {"barrier", cmd_barrier}, {"session", cmd_session},
    {"sequencer", cmd_sequencer}, {"member", cmd_member}, {"endpoint", cmd_endpoint},
    {"status", cmd_status},   {"snapshot", cmd_snapshot}, {"version", cmd_version},
    {"completion", cmd_completion}, {"role", cmd_role}, {"user", cmd_user},
    {"token", cmd_token},
};

// The usage lines of one command, for `lockctl CMD --help`, then the global flags.
std::string command_help(const std::string& command)
{
    std::istringstream usage(kUsage);
    std::string line, lines;
    bool in_command = false;
    while (std::getline(usage, line)) {
        const bool starts = line.rfind("  " + command + " ", 0) == 0 || line == "  " + command;
        const bool continuation = line.rfind("        ", 0) == 0;
        in_command = starts || (in_command && continuation);
        if (in_command) lines += line + "\n";
    }
    const std::string all = kUsage;
    if (lines.empty()) return all;
    return "Usage:\n" + lines + "\n" + all.substr(all.find("Global flags:"));
}

}  // namespace

int main(int argc, char** argv)
{
    signal(SIGPIPE, SIG_IGN);
    install_signal_handlers();
    try {
        const Args args = parse_args(argc, argv);
        if (args.words.empty()) {
            std::cout << kUsage;
            return args.has("--help") ? kExitOk : kExitUsage;
        }
        const auto command = kCommands.find(args.words[0]);
        if (command == kCommands.end())
            throw UsageError{"unknown command '" + args.words[0] + "' (lockctl --help lists them)"};
        if (args.has("--help")) {
            std::cout << command_help(args.words[0]);
            return kExitOk;
        }
        Context ctx(args);
        return command->second(ctx);
    } catch (const UsageError& e) {
        std::cerr << "Error: " << e.text << "\n";
        return kExitUsage;
    } catch (const Failed& e) {
        std::cerr << "Error: " << e.text << "\n";
        return exit_code_for(e.status);
    } catch (const Interrupted& e) {
        std::cerr << "Error: interrupted: " << strsignal(e.signal_number)
                  << "; the wait was given up and nothing is held\n";
        return 128 + e.signal_number;
    } catch (const std::exception& e) {
        // What lockctl could not make sense of: an answer not in the API's shape, in practice.
        std::cerr << "Error: " << coded(VL_ERR_PROTOCOL, e.what()) << "\n";
        return kExitServerError;
    }
}
