// The C ABI of libvoltlock (include/voltlock.h) over the codec and the transport. Every entry
// point catches everything: no exception crosses the ABI.
#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <new>
#include <thread>
#include <unordered_map>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include <httplib.h>

#include "codec.h"
#include "core/auth_ops.h"
#include "core/checksum.h"
#include "core/lock_ops.h"
#include "transport.h"
#include "voltlock.h"

using namespace voltlock::client;

namespace {

// The last error's text, one slot per thread, on each handle (hiredis keeps it on the handle;
// per thread because a client is shared by threads).
class ErrorSlots {
public:
    vl_status set(vl_status status, std::string text) const
    {
        std::lock_guard lock(mutex_);
        slots_[std::this_thread::get_id()] = status == VL_OK ? std::string{} : std::move(text);
        return status;
    }
    const char* get() const
    {
        std::lock_guard lock(mutex_);
        return slots_[std::this_thread::get_id()].c_str();
    }

private:
    mutable std::mutex mutex_;
    mutable std::unordered_map<std::thread::id, std::string> slots_;
};

// Runs body, turning any exception into a status and text on the handle.
template <class Body>
vl_status guarded(const ErrorSlots& errors, Body&& body)
{
    try {
        return body();
    } catch (const std::bad_alloc&) {
        return errors.set(VL_ERR_NO_MEMORY, "out of memory");
    } catch (const std::exception& e) {
        return errors.set(VL_ERR_PROTOCOL, std::string("unexpected answer: ") + e.what());
    } catch (...) {
        return errors.set(VL_ERR_PROTOCOL, "unexpected failure");
    }
}

vl_status invalid(const ErrorSlots& errors, const std::string& what)
{
    return errors.set(VL_ERR_INVALID_ARGUMENT, "client_invalid_argument: " + what);
}

std::string u64(uint64_t n) { return std::to_string(n); }

// What valid_name refuses, as the refusal says it.
constexpr const char* kKeyRule = "a key is 1 to 512 bytes of UTF-8 text, no control characters";
constexpr const char* kLockNameRule =
    "a lock name is 1 to 512 bytes of UTF-8 text, no control characters";
constexpr const char* kBarrierNameRule =
    "a barrier name is 1 to 512 bytes of UTF-8 text, no control characters";

// A read's flags are vl_read_flags: another bit is a mistake, refused rather than ignored.
constexpr const char* kReadFlagsRule = "flags is VL_READ_LINEARIZABLE or VL_READ_STALE";
bool bad_read_flags(int flags) { return (flags & ~VL_READ_STALE) != 0; }

}  // namespace

struct vl_client {
    vl_client(std::vector<Endpoint> endpoints, TransportOptions options)
        : transport(std::move(endpoints), options)
    {
    }
    Transport transport;
    ErrorSlots errors;

    // Sends a request with the client's deadline (plus extra for waits); the outcome's text
    // goes on `errors`.
    vl_status send(const ErrorSlots& on, const Request& request, Json* body,
                   milliseconds extra = milliseconds(0), CancelToken* cancel = nullptr)
    {
        Outcome outcome = transport.call(request, transport.deadline_after(extra), cancel);
        if (body) *body = std::move(outcome.body);
        return on.set(outcome.status, outcome.text);
    }
};

struct vl_session {
    vl_client* client = nullptr;
    uint64_t id = 0;
    milliseconds ttl{0};
    vl_session_lost_fn on_lost = nullptr;
    void* user_data = nullptr;
    ErrorSlots errors;

    // The lease, on the client's clock: counted from when the last answered keepalive was sent.
    std::atomic<Clock::rep> lease_end{0};
    std::atomic<int> lost{VL_OK};  // VL_OK, or why it was lost

    std::mutex mutex;
    std::condition_variable wake;
    bool stopping = false;
    CancelToken calls;      // the session's own calls: cancelled when it is lost,
                            // interrupted by vl_session_interrupt
    CancelToken keepalive;  // the keepalive in flight: cancelled by vl_session_close
    std::thread keepalive_thread;

    Clock::time_point lease_deadline() const
    {
        return Clock::time_point(Clock::duration(lease_end.load()));
    }
    bool lease_holds() const { return lost.load() == VL_OK && Clock::now() < lease_deadline(); }
    void declare_lost(vl_status why);
    void run_keepalives();
    // The status a call on the session answers: its own, unless the session was lost meanwhile.
    vl_status after_call(vl_status status);
};

void vl_session::declare_lost(vl_status why)
{
    int expected = VL_OK;
    if (!lost.compare_exchange_strong(expected, why)) return;
    calls.cancel();
    if (on_lost) on_lost(this, why, user_data);
}

vl_status vl_session::after_call(vl_status status)
{
    if (status == VL_ERR_UNKNOWN_SESSION) declare_lost(VL_ERR_UNKNOWN_SESSION);
    if (!lease_holds()) {
        if (lost.load() == VL_OK) declare_lost(VL_ERR_SESSION_LOST);
        return errors.set(static_cast<vl_status>(lost.load()),
                          std::string(status_name(static_cast<vl_status>(lost.load()))) +
                              ": the session's lease ran out or the cell ended it; its locks "
                              "are gone");
    }
    return status;
}

namespace {

// A keepalive is due when a third of the TTL has passed, so a failure may leave it as little as
// two thirds of the TTL. Its attempt at one replica is cut after an eighth of the TTL: a leader
// cut off from everything answers nothing, and the attempts at the others must fit in what is
// left once they have elected a new leader (about 1.5 s), which grants the session a fresh TTL.
// With the 3 s cut of other calls, a TTL under about 4.5 s ran out at the silent old leader. At
// least 250 ms, though: a fresh connection, a TLS handshake and a commit must fit in one.
constexpr int kKeepaliveAttemptsPerTtl = 8;
constexpr milliseconds kKeepaliveAttemptFloor{250};

}  // namespace

void vl_session::run_keepalives()
{
    const milliseconds interval = ttl / 3;
    constexpr milliseconds kRetryPause{100};
    Clock::time_point next = Clock::now() + interval;
    const Request request{.method = "POST",
                          .path = "/v1/sessions/" + u64(id) + ":keepalive",
                          .mutating = true,
                          .attempt_cap = std::clamp(ttl / kKeepaliveAttemptsPerTtl,
                                                    kKeepaliveAttemptFloor, kAttemptCap)};
    while (true) {
        {
            std::unique_lock lock(mutex);
            wake.wait_until(lock, std::min(next, lease_deadline()), [&] { return stopping; });
            if (stopping) return;
        }
        if (Clock::now() >= lease_deadline()) {
            declare_lost(VL_ERR_SESSION_LOST);
            return;
        }
        const Clock::time_point sent = Clock::now();
        // An answer after the lease ran out is no use: the lease is the deadline.
        Outcome outcome = client->transport.call(request, lease_deadline(), &keepalive);
        if (outcome.status == VL_OK) {
            const auto granted = milliseconds(outcome.body.value("ttl_ms", uint64_t(ttl.count())));
            lease_end = (sent + granted).time_since_epoch().count();
            next = sent + interval;
        } else if (outcome.status == VL_ERR_UNKNOWN_SESSION) {
            declare_lost(VL_ERR_UNKNOWN_SESSION);
            return;
        } else {
            next = Clock::now() + kRetryPause;
        }
    }
}

namespace {

// The events a watch holds for a consumer that is behind, at most (about: a revision is never
// split). Past it the watch's thread stops reading: the cell's buffer for the stream fills, the
// cell cuts it (slow_reader) and the watch resumes where it was, so a slow consumer costs the
// cell its bounded buffer and this process a bounded queue, and loses nothing.
constexpr size_t kMaxReadyBytes = size_t{4} << 20;

size_t held_bytes(const vl_event* event)
{
    return sizeof(vl_event) + std::strlen(event->json) + event->value_len;
}

}  // namespace

struct vl_watch {
    vl_client* client = nullptr;
    std::string path;  // without start_revision
    ErrorSlots errors;

    std::mutex mutex;
    std::condition_variable changed;  // ready, the queue's room, the end: any change
    std::deque<vl_event*> ready;
    size_t ready_bytes = 0;  // held_bytes of `ready`
    std::vector<vl_event*> pending;  // events of a revision whose id has not come yet
    // Resume from last_complete + 1; unset until the watch has a place in the history (a
    // start_revision, or the server's "watching from" comment), so that start_revision 1 is
    // sent as 1 and not taken for "from the next change".
    std::optional<uint64_t> last_complete;
    uint64_t last_delivered = 0;
    bool opened = false;             // the first stream answered 200
    Clock::time_point open_deadline;  // vl_watch_open's: no connect attempt outlasts it
    vl_status final_status = VL_OK;  // the watch failed for good
    std::string final_text;
    bool stopping = false;
    bool cut_for_slowness = false;  // the cell ended this stream with slow_reader: resume it
    httplib::Client* streaming = nullptr;
    std::thread thread;

    ~vl_watch()
    {
        for (vl_event* e : ready) vl_event_free(e);
        for (vl_event* e : pending) vl_event_free(e);
    }
    void run();
    // One stream from endpoint `index` until it ends; false if it failed for good.
    void stream_once(size_t index);
    void take(const SseBlock& block);
    void fail(vl_status status, std::string text);
};

void vl_watch::fail(vl_status status, std::string text)
{
    std::lock_guard lock(mutex);
    final_status = status;
    final_text = std::move(text);
    changed.notify_all();
}

void vl_watch::take(const SseBlock& block)
{
    std::lock_guard lock(mutex);
    for (const std::string& comment : block.comments)
        if (auto from = watching_from_revision(comment); from && !last_complete && *from > 0)
            last_complete = *from - 1;
    if (block.event == "error") {
        Json body = Json::parse(block.data, nullptr, false);
        const std::string code = body.is_object() ? body.value("code", "") : "";
        if (code == "slow_reader") {  // its resume_revision is last_complete + 1
            cut_for_slowness = true;
            return;
        }
        final_status = code.empty() ? VL_ERR_PROTOCOL : status_from_code(code);
        final_text = code + ": " + (body.is_object() ? body.value("message", "") : block.data);
        changed.notify_all();
        return;
    }
    if (block.data.empty()) return;
    vl_event* event = event_from_json(block.data);
    if (!event) throw std::bad_alloc();
    if (last_complete && event->revision <= *last_complete) {  // delivered before a resume
        vl_event_free(event);
        return;
    }
    pending.push_back(event);
    if (block.id) {
        // The id closes its revision: only now are its events safe to hand out, since a
        // resume starts at the next revision.
        for (vl_event* e : pending) {
            ready.push_back(e);
            ready_bytes += held_bytes(e);
        }
        pending.clear();
        last_complete = *block.id;
        changed.notify_all();
    }
}

void vl_watch::stream_once(size_t index)
{
    Transport& transport = client->transport;
    auto http = transport.checkout(index);
    milliseconds dial_timeout = transport.options().dial_timeout;
    {
        // A connect cannot be stopped: before the first stream opens, none may run past
        // vl_watch_open's deadline, which would hold up the close that follows it.
        std::lock_guard lock(mutex);
        if (!opened)
            dial_timeout = std::clamp(std::chrono::duration_cast<milliseconds>(
                                          open_deadline - Clock::now()),
                                      milliseconds(1), dial_timeout);
    }
    http->set_connection_timeout(dial_timeout);
    // The server sends a comment every 10 s of quiet: 15 s of nothing is a dead stream.
    http->set_read_timeout(std::chrono::seconds(15));
    std::string resume_path;
    {
        std::lock_guard lock(mutex);
        if (stopping) return;
        streaming = http.get();
        resume_path = path;
        if (last_complete) resume_path += "&start_revision=" + u64(*last_complete + 1);
        for (vl_event* e : pending) vl_event_free(e);  // an unfinished revision comes again
        pending.clear();
    }
    int status = 0;
    std::string error_body;
    SseParser parser;
    auto result = http->Get(
        resume_path, httplib::Headers{},
        [&](const httplib::Response& response) {
            status = response.status;
            if (status == 200) {
                std::lock_guard lock(mutex);
                opened = true;
                changed.notify_all();
            }
            return true;
        },
        [&](const char* data, size_t length) {
            if (status != 200) {
                error_body.append(data, length);
                return error_body.size() < 65536;
            }
            for (const SseBlock& block : parser.feed(std::string_view(data, length))) take(block);
            std::unique_lock lock(mutex);
            changed.wait(lock, [&] {
                return stopping || final_status != VL_OK || ready_bytes <= kMaxReadyBytes;
            });
            return !stopping && final_status == VL_OK;
        });
    {
        std::lock_guard lock(mutex);
        streaming = nullptr;
    }
    if (result && status != 200) {
        const Failure failure = decode_answer(Answer{status, error_body, std::nullopt}, nullptr);
        if (!is_retryable(failure.status)) fail(failure.status, failure.text);
        return;
    }
    if (result) transport.checkin(index, std::move(http));
    else transport.note_failure(index);
}

void vl_watch::run()
{
    const size_t count = client->transport.endpoints().size();
    size_t index = client->transport.preferred();
    size_t failures = 0;
    while (true) {
        try {
            stream_once(index);
        } catch (const std::bad_alloc&) {
            fail(VL_ERR_NO_MEMORY, "out of memory");
        } catch (const std::exception& e) {
            fail(VL_ERR_PROTOCOL, std::string("a watch event was not understood: ") + e.what());
        }
        std::unique_lock lock(mutex);
        if (stopping || final_status != VL_OK) return;
        // Cut for reading slowly: the same endpoint, at once (the queue has room by now).
        if (std::exchange(cut_for_slowness, false)) {
            failures = 0;
            continue;
        }
        // The stream broke: resume at the next endpoint, pausing a little more after each
        // failure in a row (a view change, a replica restarting).
        index = (index + 1) % count;
        failures++;
        const auto pause = milliseconds(std::min<size_t>(50 * failures, 1000));
        changed.wait_for(lock, pause, [&] { return stopping; });
        if (stopping) return;
    }
}

namespace {

// An endpoint index names one in the list, or is -1 for any that answers.
bool bad_endpoint_index(const vl_client* c, int index)
{
    return index < -1 || index >= int(c->transport.endpoints().size());
}

// Sends `request` and makes *out of the answer's body with `build` (nullptr: out of memory).
// Here, not by its callers: a template cannot stand in the extern "C" part below.
template <typename T, typename Build>
vl_status read_into(vl_client* c, const Request& request, T** out, Build build)
{
    Json body;
    const vl_status status = c->send(c->errors, request, &body);
    if (status != VL_OK) return status;
    *out = build(body);
    return *out ? VL_OK : c->errors.set(VL_ERR_NO_MEMORY, "out of memory");
}

// ---- Users, roles and tokens: what their calls share ------------------------------------------

// /v1/auth/<table>/<name>: names hold no '/' (valid_auth_name), so the name is one segment.
std::string auth_path(const char* table, const char* name)
{
    return std::string("/v1/auth/") + table + "/" + encode_path_segment(name);
}

std::string read_path(std::string path, int flags)
{
    return flags & VL_READ_STALE ? path + "?stale=true" : path;
}

// Why a user or role name (a token id) cannot be sent, or nullptr. The role "admin" may be
// asked for, but neither put nor deleted.
const char* bad_auth_name(const char* name)
{
    return valid_auth_name(name) ? nullptr : kAuthNameRule;
}

const char* bad_role_name(const char* name)
{
    if (!valid_auth_name(name)) return kAuthNameRule;
    if (std::string_view(name) == voltlock::kBuiltinAdminRole)
        return "'admin' is built in (every permission on everything) and cannot be changed";
    return nullptr;
}

const char* bad_token_id(const char* id)
{
    return valid_token_id(id) ? nullptr : "a token id is 16 lowercase hex digits (vl_tokens_list)";
}

// A change to the auth tables: an op through the log, retried like any write.
vl_status auth_change(vl_client* c, const char* method, std::string path, const Json& body,
                      uint64_t* auth_revision_out)
{
    Json answer;
    const vl_status status = c->send(
        c->errors,
        Request{.method = method, .path = std::move(path),
                .body = body.is_null() ? "" : body.dump(), .mutating = true},
        &answer);
    if (status == VL_OK && auth_revision_out)
        *auth_revision_out = answer.at("auth_revision").get<uint64_t>();
    return status;
}

// PUT /v1/auth/<table>/<name> with the body make_body(&why) builds (nullopt: not sent, why).
template <class MakeBody>
vl_status auth_put(vl_client* c, const char* table, const char* name,
                   const char* (*bad_name)(const char*), MakeBody make_body,
                   uint64_t* auth_revision_out)
{
    return guarded(c->errors, [&] {
        if (const char* why = bad_name(name)) return invalid(c->errors, why);
        std::string why;
        const std::optional<Json> body = make_body(&why);
        if (!body) return invalid(c->errors, why);
        return auth_change(c, "PUT", auth_path(table, name), *body, auth_revision_out);
    });
}

// DELETE /v1/auth/<table>/<name> (a role, a user, a token by its id).
vl_status auth_delete(vl_client* c, const char* table, const char* name,
                      const char* (*bad_name)(const char*), uint64_t* auth_revision_out)
{
    return guarded(c->errors, [&] {
        if (const char* why = bad_name(name)) return invalid(c->errors, why);
        return auth_change(c, "DELETE", auth_path(table, name), Json(), auth_revision_out);
    });
}

// GET /v1/auth/<table>/<name>: one role or user.
template <typename T, typename Build>
vl_status auth_get(vl_client* c, const char* table, const char* name, int flags, T** out,
                   Build build)
{
    if (out) *out = nullptr;
    return guarded(c->errors, [&] {
        if (const char* why = bad_auth_name(name)) return invalid(c->errors, why);
        if (!out) return invalid(c->errors, "out is NULL");
        if (bad_read_flags(flags)) return invalid(c->errors, kReadFlagsRule);
        return read_into(c, Request{.path = read_path(auth_path(table, name), flags)}, out,
                         build);
    });
}

// GET /v1/auth/<table>: every role, user or token.
template <typename T, typename Build>
vl_status auth_list(vl_client* c, const char* path, int flags, T** out, Build build)
{
    *out = nullptr;
    return guarded(c->errors, [&] {
        if (bad_read_flags(flags)) return invalid(c->errors, kReadFlagsRule);
        return read_into(c, Request{.path = read_path(path, flags)}, out, build);
    });
}

}  // namespace

extern "C" {

const char* vl_version(void) { return "0.2.0"; }

const char* vl_status_name(vl_status status) { return status_name(status); }

void vl_client_options_init(vl_client_options* opts)
{
    if (opts) *opts = vl_client_options{2000, 10000, 0, nullptr, nullptr, nullptr, nullptr};
}

vl_status vl_client_open(const char* endpoints, const vl_client_options* opts, char* errstr_out,
                         size_t errstr_len, vl_client** out)
{
    auto report = [&](vl_status status, const std::string& text) {
        if (errstr_out && errstr_len > 0) {
            const size_t n = std::min(text.size(), errstr_len - 1);
            std::memcpy(errstr_out, text.data(), n);
            errstr_out[n] = '\0';
        }
        return status;
    };
    if (!out) return report(VL_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = nullptr;
    if (!endpoints) {
        const char* from_environment = std::getenv("VOLTLOCK_ENDPOINTS");
        endpoints = from_environment && *from_environment ? from_environment
                                                           : "http://127.0.0.1:7480";
    }
    try {
        std::string why;
        auto parsed = parse_endpoints(endpoints, &why);
        if (!parsed) return report(VL_ERR_INVALID_ARGUMENT, why);
        vl_client_options defaults;
        vl_client_options_init(&defaults);
        const vl_client_options& o = opts ? *opts : defaults;
        TransportOptions options;
        options.dial_timeout = milliseconds(o.dial_timeout_ms ? o.dial_timeout_ms : 2000);
        options.command_timeout = milliseconds(o.command_timeout_ms ? o.command_timeout_ms : 10000);
        options.client_id_seed = o.client_id_seed;
        const auto given_or_environment = [](const char* given, const char* variable) {
            const char* value = given ? given : std::getenv(variable);
            return std::string(value ? value : "");
        };
        // An error names where a file's path came from: its field, or its variable.
        const auto pem_file = [&](const char* given, const char* field, const char* variable) {
            std::string path = given_or_environment(given, variable);
            const bool from_environment = !given && !path.empty();
            return PemFile{std::move(path), from_environment ? std::string("$") + variable
                                                             : std::string(field)};
        };
        const PemFile cacert = pem_file(o.cacert_file, "cacert_file", "VOLTLOCK_CACERT");
        const PemFile cert = pem_file(o.cert_file, "cert_file", "VOLTLOCK_CERT");
        const PemFile key = pem_file(o.key_file, "key_file", "VOLTLOCK_KEY");
        if (std::string problem = tls_files_problem(cacert, cert, key); !problem.empty())
            return report(VL_ERR_INVALID_ARGUMENT, problem);
        options.cacert_file = cacert.path;
        options.cert_file = cert.path;
        options.key_file = key.path;
        options.token = given_or_environment(o.token, "VOLTLOCK_TOKEN");
        *out = new vl_client(std::move(*parsed), options);
        return report(VL_OK, "");
    } catch (...) {
        return report(VL_ERR_NO_MEMORY, "out of memory");
    }
}

void vl_client_close(vl_client* c) { delete c; }

const char* vl_client_errstr(const vl_client* c) { return c ? c->errors.get() : "client is NULL"; }

const char* vl_client_current_endpoint(const vl_client* c)
{
    return c ? c->transport.endpoints()[c->transport.preferred()].url.c_str() : nullptr;
}

size_t vl_client_endpoint_count(const vl_client* c)
{
    return c ? c->transport.endpoints().size() : 0;
}

const char* vl_client_endpoint(const vl_client* c, size_t index)
{
    if (!c || index >= c->transport.endpoints().size()) return nullptr;
    return c->transport.endpoints()[index].url.c_str();
}

// ---- Sessions ---------------------------------------------------------------------------------

void vl_session_options_init(vl_session_options* opts)
{
    if (opts) *opts = vl_session_options{0, nullptr, nullptr, nullptr};
}

namespace {

// The body of POST /v1/sessions, or the reason it cannot be sent.
std::optional<Json> session_request(const vl_client* c, uint32_t ttl_ms, uint32_t lock_delay_ms,
                                    const char* name)
{
    if (ttl_ms < 1000 || ttl_ms > 24u * 3600 * 1000) {
        invalid(c->errors, "ttl_ms must be 1,000 to 86,400,000");
        return std::nullopt;
    }
    Json body{{"ttl_ms", ttl_ms}};
    if (lock_delay_ms) {
        if (lock_delay_ms > 60000) {
            invalid(c->errors, "lock_delay_ms must be at most 60,000");
            return std::nullopt;
        }
        body["lock_delay_ms"] = lock_delay_ms;
    }
    if (name) {
        if (std::strlen(name) > voltlock::kMaxSessionNameBytes || (*name && !valid_name(name))) {
            invalid(c->errors, "a session name is at most 128 bytes of UTF-8 text");
            return std::nullopt;
        }
        body["name"] = name;
    }
    return body;
}


// ---- Snapshot backups (vl_snapshot_save) -------------------------------------------------------
// The client of the replicas' state-transfer endpoint (server/shell/snapshot_transfer.h): the
// same headers, checksum (core/checksum.h, shared with the server) and chunk rules.

constexpr const char* kSnapshotPath = "/v1/internal/snapshot";
// A snapshot replaced by a newer one mid-fetch (HTTP 409) is fetched again from byte 0, this
// many times at most: a replica writes one every --snapshot-every-ops, not continuously.
constexpr int kSnapshotRefetches = 5;

struct SnapshotFetch {
    vl_status status = VL_OK;
    std::string text;
    bool unreachable = false;  // a transport failure: the next endpoint may answer
    uint64_t op = 0;
    uint64_t size = 0;
};

bool header_u64(const httplib::Response& response, const char* name, uint64_t& out)
{
    const std::string value = response.get_header_value(name);
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), out);
    return !value.empty() && error == std::errc{} && end == value.data() + value.size();
}

// The whole snapshot endpoint `index` serves, written to `out` from its start.
SnapshotFetch fetch_snapshot_into(Transport& transport, size_t index, std::FILE* out)
{
    const Endpoint& endpoint = transport.endpoints()[index];
    auto client = transport.checkout(index);
    client->set_connection_timeout(transport.options().dial_timeout);
    client->set_read_timeout(transport.options().command_timeout);
    client->set_write_timeout(transport.options().command_timeout);
    const auto failed = [&](vl_status status, const std::string& text) {
        return SnapshotFetch{.status = status, .text = text + " (" + endpoint.url + ")"};
    };
    for (int fetch = 0; fetch < kSnapshotRefetches; fetch++) {
        if (std::fseek(out, 0, SEEK_SET) != 0 || ::ftruncate(fileno(out), 0) != 0)
            return failed(VL_ERR_INVALID_ARGUMENT, std::string("cannot rewind the file: ") +
                                                std::strerror(errno));
        uint64_t op = 0, size = 0, whole_crc = 0, offset = 0;
        uint32_t running_crc = 0;
        bool replaced = false;
        do {
            const std::string path = std::string(kSnapshotPath) + "?offset=" + u64(offset) +
                                     (op ? "&op=" + u64(op) : std::string{});
            const auto response = client->Get(path);
            if (!response) {
                transport.note_failure(index);
                SnapshotFetch fetch_failed =
                    failed(VL_ERR_TRANSPORT, httplib::to_string(response.error()));
                fetch_failed.unreachable = true;
                return fetch_failed;
            }
            if (response->status == 409) {
                replaced = true;
                break;
            }
            if (response->status != 200) {
                Json body;
                const Failure failure =
                    decode_answer(Answer{response->status, response->body, std::nullopt}, &body);
                return failed(failure.status, failure.text);
            }
            uint64_t served_op = 0, served_size = 0, served_crc = 0, chunk_crc = 0;
            if (!header_u64(*response, "X-Voltlock-Snapshot-Op", served_op) ||
                !header_u64(*response, "X-Voltlock-Snapshot-Size", served_size) ||
                !header_u64(*response, "X-Voltlock-Snapshot-Crc32c", served_crc) ||
                !header_u64(*response, "X-Voltlock-Chunk-Crc32c", chunk_crc))
                return failed(VL_ERR_PROTOCOL, "a snapshot chunk without its headers");
            if (op == 0) {
                op = served_op;
                size = served_size;
                whole_crc = served_crc;
            }
            const std::string& chunk = response->body;
            if (served_op != op || served_size != size || served_crc != whole_crc ||
                chunk.size() > size - offset || (chunk.empty() && offset < size))
                return failed(VL_ERR_PROTOCOL, "a chunk that does not continue the snapshot");
            if (voltlock::crc32c(chunk) != chunk_crc)
                return failed(VL_ERR_PROTOCOL,
                              "the chunk at byte " + u64(offset) + " failed its checksum");
            if (std::fwrite(chunk.data(), 1, chunk.size(), out) != chunk.size())
                return failed(VL_ERR_INVALID_ARGUMENT,
                              std::string("cannot write the file: ") + std::strerror(errno));
            running_crc = voltlock::crc32c(chunk, running_crc);
            offset += chunk.size();
        } while (offset < size);
        if (replaced) continue;
        transport.checkin(index, std::move(client));
        if (running_crc != whole_crc)
            return failed(VL_ERR_PROTOCOL, "the whole snapshot of op " + u64(op) +
                                               " failed its checksum");
        return SnapshotFetch{.op = op, .size = size};
    }
    return failed(VL_ERR_UNAVAILABLE, "the snapshot was replaced by a newer one " +
                                          std::to_string(kSnapshotRefetches) +
                                          " times during the fetch; try again");
}

// Makes a rename in `path`'s directory durable.
bool sync_parent_directory(const std::string& path)
{
    const size_t slash = path.rfind('/');
    const std::string directory = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return false;
    const bool synced = ::fsync(fd) == 0;
    ::close(fd);
    return synced;
}

}  // namespace

vl_status vl_session_grant_id(vl_client* c, uint32_t ttl_ms, const char* name,
                              uint64_t* session_id_out)
{
    if (!c || !session_id_out) return VL_ERR_INVALID_ARGUMENT;
    return guarded(c->errors, [&] {
        const auto request_body = session_request(c, ttl_ms, 0, name);
        if (!request_body) return VL_ERR_INVALID_ARGUMENT;
        Json body;
        const vl_status status = c->send(
            c->errors, Request{.method = "POST", .path = "/v1/sessions",
                               .body = request_body->dump(), .mutating = true},
            &body);
        if (status == VL_OK) *session_id_out = body.at("session").get<uint64_t>();
        return status;
    });
}

vl_status vl_session_open(vl_client* c, uint32_t ttl_ms, const vl_session_options* opts,
                          vl_session** out)
{
    if (!c || !out) return VL_ERR_INVALID_ARGUMENT;
    *out = nullptr;
    return guarded(c->errors, [&] {
        const auto request_body =
            session_request(c, ttl_ms, opts ? opts->lock_delay_ms : 0, opts ? opts->name : nullptr);
        if (!request_body) return VL_ERR_INVALID_ARGUMENT;
        auto session = std::make_unique<vl_session>();
        session->client = c;
        session->ttl = milliseconds(ttl_ms);
        if (opts) {
            session->on_lost = opts->on_session_lost;
            session->user_data = opts->user_data;
        }
        const Clock::time_point sent = Clock::now();
        Json body;
        const vl_status status = c->send(
            c->errors, Request{.method = "POST", .path = "/v1/sessions",
                               .body = request_body->dump(), .mutating = true},
            &body);
        if (status != VL_OK) return status;
        session->id = body.at("session").get<uint64_t>();
        session->lease_end = (sent + milliseconds(ttl_ms)).time_since_epoch().count();
        vl_session* raw = session.get();
        session->keepalive_thread = std::thread([raw] { raw->run_keepalives(); });
        *out = session.release();
        return VL_OK;
    });
}

vl_status vl_session_close(vl_session* s)
{
    if (!s) return VL_OK;
    vl_client* c = s->client;
    {
        std::lock_guard lock(s->mutex);
        s->stopping = true;
    }
    s->wake.notify_all();
    s->keepalive.cancel();
    if (s->keepalive_thread.joinable()) s->keepalive_thread.join();
    vl_status status = VL_OK;
    if (s->lost.load() == VL_OK) {
        status = guarded(c->errors, [&] {
            const vl_status ended = c->send(
                c->errors,
                Request{.method = "DELETE", .path = "/v1/sessions/" + u64(s->id), .mutating = true},
                nullptr);
            return ended == VL_ERR_UNKNOWN_SESSION ? c->errors.set(VL_OK, "") : ended;
        });
    }
    delete s;
    return status;
}

void vl_session_interrupt(vl_session* s)
{
    if (s) s->calls.interrupt();
}

uint64_t vl_session_id(const vl_session* s) { return s ? s->id : 0; }

vl_status vl_session_status(const vl_session* s)
{
    if (!s) return VL_ERR_INVALID_ARGUMENT;
    const int lost = s->lost.load();
    if (lost != VL_OK) return static_cast<vl_status>(lost);
    return s->lease_holds() ? VL_OK : VL_ERR_SESSION_LOST;
}

uint64_t vl_session_lease_remaining_ms(const vl_session* s)
{
    if (!s || !s->lease_holds()) return 0;
    return uint64_t(std::chrono::duration_cast<milliseconds>(s->lease_deadline() - Clock::now())
                        .count());
}

const char* vl_session_errstr(const vl_session* s)
{
    return s ? s->errors.get() : "session is NULL";
}

vl_status vl_session_keepalive_id(vl_client* c, uint64_t session_id, uint32_t* ttl_ms_out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return guarded(c->errors, [&] {
        Json body;
        const vl_status status = c->send(
            c->errors, Request{.method = "POST", .path = "/v1/sessions/" + u64(session_id) +
                                                         ":keepalive", .mutating = true},
            &body);
        if (status == VL_OK && ttl_ms_out) *ttl_ms_out = body.at("ttl_ms").get<uint32_t>();
        return status;
    });
}

vl_status vl_session_revoke_id(vl_client* c, uint64_t session_id)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return guarded(c->errors, [&] {
        return c->send(c->errors,
                       Request{.method = "DELETE", .path = "/v1/sessions/" + u64(session_id),
                               .mutating = true},
                       nullptr);
    });
}

// ---- Sequencers and locks ---------------------------------------------------------------------


vl_status vl_sequencer_format(const vl_sequencer* seq, char** out)
{
    if (!seq || !seq->lock || !out) return VL_ERR_INVALID_ARGUMENT;
    try {
        *out = copy_string(sequencer_to_json(*seq).dump());
        return *out ? VL_OK : VL_ERR_NO_MEMORY;
    } catch (...) {
        *out = nullptr;
        return VL_ERR_INVALID_ARGUMENT;  // a lock name that is not UTF-8
    }
}

vl_status vl_sequencer_parse(const char* text, vl_sequencer** out)
{
    if (!text || !out) return VL_ERR_INVALID_ARGUMENT;
    *out = nullptr;
    try {
        const Json object = Json::parse(text);
        // Exactly the four fields vl_sequencer_format writes, naming a lock the cell could hold
        // (get<std::string> and a missing field throw).
        if (!object.is_object() || object.size() != 4 ||
            !valid_name(object.at("lock").get<std::string>()))
            return VL_ERR_INVALID_ARGUMENT;
        *out = sequencer_from_json(object);
        return *out ? VL_OK : VL_ERR_NO_MEMORY;
    } catch (const std::bad_alloc&) {
        return VL_ERR_NO_MEMORY;
    } catch (...) {
        return VL_ERR_INVALID_ARGUMENT;
    }
}

vl_status vl_sequencer_check(vl_client* c, const vl_sequencer* seq, bool* valid_out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return guarded(c->errors, [&] {
        if (!seq || !valid_name(seq->lock) || !valid_out)
            return invalid(c->errors, "a sequencer with a lock name and valid_out are required");
        Json body;
        const vl_status status = c->send(
            c->errors, Request{.method = "POST", .path = "/v1/sequencers:check",
                               .body = Json{{"sequencer", sequencer_to_json(*seq)}}.dump()},
            &body);
        if (status == VL_OK) *valid_out = body.at("valid").get<bool>();
        return status;
    });
}

namespace {

// A call of session `s` that may wait up to wait_ms in the cell (lock and barrier waits): a wait
// over an hour is refused, a lost session answers at once, and the outcome is noted in `s`.
vl_status session_wait_call(vl_session* s, const std::string& path, const Json& request,
                            uint32_t wait_ms, Json* body)
{
    if (wait_ms > 3600u * 1000) return invalid(s->errors, "wait_ms is at most an hour");
    if (s->after_call(VL_OK) != VL_OK) return static_cast<vl_status>(s->lost.load());
    const vl_status status = s->client->send(
        s->errors,
        Request{.method = "POST", .path = path, .body = request.dump(), .mutating = true,
                .waits = wait_ms > 0},
        body, milliseconds(wait_ms), &s->calls);
    return s->after_call(status);
}

}  // namespace

vl_status vl_lock_acquire(vl_session* s, const char* name, vl_lock_mode mode, uint32_t wait_ms,
                          vl_sequencer** seq_out)
{
    if (!s) return VL_ERR_INVALID_ARGUMENT;
    if (seq_out) *seq_out = nullptr;
    return guarded(s->errors, [&] {
        if (!valid_name(name)) return invalid(s->errors, kLockNameRule);
        if (mode != VL_LOCK_EXCLUSIVE && mode != VL_LOCK_SHARED)
            return invalid(s->errors, "mode must be VL_LOCK_EXCLUSIVE or VL_LOCK_SHARED");
        Json body;
        const vl_status status = session_wait_call(
            s, "/v1/locks/" + encode_path_segment(name) + ":acquire",
            Json{{"session", s->id},
                 {"mode", mode == VL_LOCK_SHARED ? "shared" : "exclusive"},
                 {"wait_ms", wait_ms}},
            wait_ms, &body);
        if (status != VL_OK) return status;
        vl_sequencer* seq = sequencer_from_json(body.at("sequencer"));
        if (!seq) return s->errors.set(VL_ERR_NO_MEMORY, "out of memory");
        if (seq_out) *seq_out = seq;
        else vl_sequencer_free(seq);
        return VL_OK;
    });
}

vl_status vl_lock_release(vl_session* s, const char* name)
{
    if (!s) return VL_ERR_INVALID_ARGUMENT;
    return guarded(s->errors, [&] {
        if (!valid_name(name)) return invalid(s->errors, kLockNameRule);
        if (s->lost.load() != VL_OK) return s->after_call(VL_OK);
        Json body;
        const vl_status status = s->client->send(
            s->errors,
            Request{.method = "POST", .path = "/v1/locks/" + encode_path_segment(name) + ":release",
                    .body = Json{{"session", s->id}}.dump(), .mutating = true},
            &body, milliseconds(0), &s->calls);
        if (status == VL_ERR_UNKNOWN_SESSION) return s->after_call(status);
        return status;
    });
}

// ---- Key-value --------------------------------------------------------------------------------



vl_status vl_get(vl_client* c, const char* key, int flags, vl_kv** out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    if (out) *out = nullptr;
    return guarded(c->errors, [&] {
        if (!valid_name(key)) return invalid(c->errors, kKeyRule);
        if (!out) return invalid(c->errors, "out is NULL");
        if (bad_read_flags(flags)) return invalid(c->errors, kReadFlagsRule);
        std::string path = "/v1/kv/" + encode_path_segment(key) + "?encoding=base64";
        if (flags & VL_READ_STALE) path += "&stale=true";
        return read_into(c, Request{.path = path}, out, kv_from_json);
    });
}

vl_status vl_get_prefix(vl_client* c, const char* prefix, const char* after, uint32_t limit,
                        int flags, vl_kv_list** out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    if (out) *out = nullptr;
    return guarded(c->errors, [&] {
        if (!prefix || std::strlen(prefix) > 512 || (*prefix && !valid_name(prefix)))
            return invalid(c->errors, "a prefix is 0 to 512 bytes of UTF-8 text");
        if (!out) return invalid(c->errors, "out is NULL");
        if (bad_read_flags(flags)) return invalid(c->errors, kReadFlagsRule);
        std::string path = "/v1/kv/" + encode_path_segment(prefix) + "?prefix=true&encoding=base64";
        if (after && *after) path += "&after=" + encode_query_value(after);
        if (limit) path += "&limit=" + u64(limit);
        if (flags & VL_READ_STALE) path += "&stale=true";
        return read_into(c, Request{.path = path}, out, kv_list_from_json);
    });
}

vl_status vl_put(vl_client* c, const char* key, const void* value, size_t value_len,
                 const vl_put_options* opts, vl_put_result* result)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return guarded(c->errors, [&] {
        if (!valid_name(key)) return invalid(c->errors, kKeyRule);
        if (!value && value_len > 0) return invalid(c->errors, "value is NULL");
        // Refused here, as the cell would: base64 makes a value over about 786 KB a body past
        // the cell's 1 MiB limit, which it refuses (413) and hangs up on before reading, so the
        // write fails and the refusal is never read.
        if (value_len > voltlock::kMaxValueBytes)
            return c->errors.set(VL_ERR_TOO_LARGE,
                                 "too_large: the value is " + u64(value_len) +
                                     " bytes; a cell takes at most " +
                                     u64(voltlock::kMaxValueBytes) +
                                     " (fewer: what fits one replication datagram with the key)");
        const std::string_view bytes(static_cast<const char*>(value), value ? value_len : 0);
        Json request{{"value", base64_encode(bytes)}, {"encoding", "base64"}};
        if (opts && opts->check_prev_revision) request["prev_revision"] = opts->prev_revision;
        if (opts && opts->session) {
            if (opts->session->lost.load() != VL_OK)
                return c->errors.set(VL_ERR_SESSION_LOST,
                                     "session_lost: the key's session is lost");
            request["session"] = opts->session->id;
        } else if (opts && opts->session_id) {
            request["session"] = opts->session_id;
        }
        if (opts && opts->sequencer) {
            if (!valid_name(opts->sequencer->lock))
                return invalid(c->errors, "the sequencer has no lock name");
            request["sequencer"] = sequencer_to_json(*opts->sequencer);
        }
        Json body;
        const vl_status status = c->send(
            c->errors, Request{.method = "PUT", .path = "/v1/kv/" + encode_path_segment(key),
                               .body = request.dump(), .mutating = true},
            &body);
        if (status == VL_OK && result) {
            result->revision = body.at("revision").get<uint64_t>();
            result->prev_mod_revision = body.value("prev_mod_revision", uint64_t{0});
            result->create_revision = body.value("create_revision", uint64_t{0});
            result->version = body.value("version", uint64_t{0});
        }
        return status;
    });
}

vl_status vl_delete(vl_client* c, const char* key, const vl_delete_options* opts,
                    vl_delete_result* result)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return guarded(c->errors, [&] {
        const bool prefix = opts && opts->prefix;
        if (!key || (!prefix && !valid_name(key)) || (prefix && *key && !valid_name(key)))
            return invalid(c->errors, kKeyRule);
        std::string path = "/v1/kv/" + encode_path_segment(key);
        char separator = '?';
        if (prefix) {
            path += "?prefix=true";
            separator = '&';
        }
        if (opts && opts->check_prev_revision) {
            if (prefix) return invalid(c->errors, "prev_revision applies to one key, not a prefix");
            path += separator + std::string("prev_revision=") + u64(opts->prev_revision);
        }
        std::string request_body;
        if (opts && opts->sequencer)
            request_body = Json{{"sequencer", sequencer_to_json(*opts->sequencer)}}.dump();
        Json body;
        const vl_status status = c->send(
            c->errors,
            Request{.method = "DELETE", .path = path, .body = request_body, .mutating = true},
            &body);
        if (status == VL_OK && result) {
            result->deleted = body.at("deleted").get<uint64_t>();
            result->revision = body.at("revision").get<uint64_t>();
        }
        return status;
    });
}

// ---- Watches ----------------------------------------------------------------------------------


vl_status vl_watch_open(vl_client* c, const char* key, const vl_watch_options* opts,
                        vl_watch** out)
{
    if (!c || !out) return VL_ERR_INVALID_ARGUMENT;
    *out = nullptr;
    return guarded(c->errors, [&] {
        const bool prefix = opts && opts->prefix;
        if (!key || (!prefix && !valid_name(key)) || (prefix && *key && !valid_name(key)))
            return invalid(c->errors, kKeyRule);
        auto watch = std::make_unique<vl_watch>();
        watch->client = c;
        watch->path = "/v1/watch/" + encode_path_segment(key) + "?encoding=base64";
        if (prefix) watch->path += "&prefix=true";
        if (opts && opts->spaces) watch->path += "&spaces=" + encode_query_value(opts->spaces);
        if (opts && opts->start_revision > 0) watch->last_complete = opts->start_revision - 1;
        watch->open_deadline = c->transport.deadline_after();
        vl_watch* raw = watch.get();
        watch->thread = std::thread([raw] { raw->run(); });
        std::unique_lock lock(watch->mutex);
        const bool settled = watch->changed.wait_until(
            lock, watch->open_deadline,
            [&] { return watch->opened || watch->final_status != VL_OK; });
        vl_status status = VL_OK;
        std::string text;
        if (!settled) {
            status = VL_ERR_TIMEOUT;
            text = "no endpoint opened the watch before the deadline";
        } else if (!watch->opened) {
            status = watch->final_status;
            text = watch->final_text;
        }
        lock.unlock();
        if (status != VL_OK) {
            vl_watch_close(watch.release());
            return c->errors.set(status, text);
        }
        *out = watch.release();
        return VL_OK;
    });
}

vl_status vl_watch_next(vl_watch* w, uint32_t timeout_ms, vl_event** event_out)
{
    if (!w || !event_out) return VL_ERR_INVALID_ARGUMENT;
    *event_out = nullptr;
    return guarded(w->errors, [&] {
        std::unique_lock lock(w->mutex);
        w->changed.wait_for(lock, milliseconds(timeout_ms), [&] {
            return !w->ready.empty() || w->final_status != VL_OK || w->stopping;
        });
        if (!w->ready.empty()) {
            *event_out = w->ready.front();
            w->ready.pop_front();
            w->ready_bytes -= held_bytes(*event_out);
            w->changed.notify_all();  // room in the queue, for the watch's thread
            w->last_delivered = (*event_out)->revision;
            return w->errors.set(VL_OK, "");
        }
        if (w->final_status != VL_OK) return w->errors.set(w->final_status, w->final_text);
        if (w->stopping) return w->errors.set(VL_ERR_CLOSED, "closed: the watch was closed");
        return w->errors.set(VL_ERR_TIMEOUT, "timeout: no event within the time given");
    });
}

uint64_t vl_watch_last_revision(const vl_watch* w)
{
    if (!w) return 0;
    std::lock_guard lock(const_cast<vl_watch*>(w)->mutex);
    return w->last_delivered;
}

void vl_watch_close(vl_watch* w)
{
    if (!w) return;
    {
        std::lock_guard lock(w->mutex);
        w->stopping = true;
        if (w->streaming) w->streaming->stop();
        w->changed.notify_all();
    }
    if (w->thread.joinable()) w->thread.join();
    delete w;
}

const char* vl_watch_errstr(const vl_watch* w) { return w ? w->errors.get() : "watch is NULL"; }

// ---- Barriers ---------------------------------------------------------------------------------

vl_status vl_barrier_enter(vl_session* s, const char* name, uint32_t count, uint32_t wait_ms)
{
    if (!s) return VL_ERR_INVALID_ARGUMENT;
    return guarded(s->errors, [&] {
        if (!valid_name(name)) return invalid(s->errors, kBarrierNameRule);
        if (count < 1 || count > 1024) return invalid(s->errors, "count must be 1 to 1,024");
        return session_wait_call(
            s, "/v1/barriers/" + encode_path_segment(name) + ":enter",
            Json{{"session", s->id}, {"count", count}, {"wait_ms", wait_ms}}, wait_ms, nullptr);
    });
}

vl_status vl_barrier_leave(vl_session* s, const char* name, uint32_t wait_ms)
{
    if (!s) return VL_ERR_INVALID_ARGUMENT;
    return guarded(s->errors, [&] {
        if (!valid_name(name)) return invalid(s->errors, kBarrierNameRule);
        return session_wait_call(s, "/v1/barriers/" + encode_path_segment(name) + ":leave",
                                 Json{{"session", s->id}, {"wait_ms", wait_ms}}, wait_ms, nullptr);
    });
}

// ---- Information ------------------------------------------------------------------------------

vl_status vl_info_get(vl_client* c, const char* path, int endpoint_index, char** json_out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    if (json_out) *json_out = nullptr;
    return guarded(c->errors, [&] {
        if (!path || !json_out) return invalid(c->errors, "path and json_out are required");
        const std::string_view p = path;
        const bool known = p == "/v1/cluster" || p == "/v1/status" || p == "/healthz" ||
                           p == "/readyz" || p == "/v1/sessions" || p == "/v1/locks" ||
                           p == "/v1/barriers" || p.starts_with("/v1/sessions/") ||
                           p.starts_with("/v1/locks/") || p.starts_with("/v1/barriers/");
        if (!known) return invalid(c->errors, std::string("not an information path: ") + path);
        if (bad_endpoint_index(c, endpoint_index))
            return invalid(c->errors, "endpoint_index is -1 or one of the list's");
        std::string encoded = "/";
        size_t slash = 0;
        // Names after the collection go encoded; the collection's own path stays as it is.
        for (const char* collection : {"/v1/sessions/", "/v1/locks/", "/v1/barriers/"})
            if (p.starts_with(collection)) slash = std::strlen(collection);
        encoded = slash ? std::string(p.substr(0, slash)) + encode_path_segment(p.substr(slash))
                        : std::string(p);
        return read_into(c, Request{.path = encoded, .endpoint_index = endpoint_index}, json_out,
                         [](const Json& body) { return copy_string(body.dump()); });
    });
}

vl_status vl_snapshot_save(vl_client* c, int endpoint_index, const char* path, uint64_t* op_out,
                           uint64_t* size_out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return guarded(c->errors, [&] {
        if (!path || !*path) return invalid(c->errors, "path is required");
        const size_t count = c->transport.endpoints().size();
        if (bad_endpoint_index(c, endpoint_index))
            return invalid(c->errors, "endpoint_index is -1 or one of the list's");
        // Whole or not at all: written aside, synced, then renamed into place.
        const std::string target = path;
        const std::string partial = target + ".partial";
        std::remove(partial.c_str());  // a failed run's, of any mode: created anew
        std::FILE* out = std::fopen(partial.c_str(), "wb");
        if (!out)
            return c->errors.set(VL_ERR_INVALID_ARGUMENT, "cannot create " + partial + ": " +
                                                              std::strerror(errno));
        SnapshotFetch fetched{.status = VL_ERR_TRANSPORT, .text = "no endpoint was tried"};
        const size_t first = endpoint_index < 0 ? 0 : size_t(endpoint_index);
        const size_t last = endpoint_index < 0 ? count : first + 1;
        for (size_t index = first; index < last; index++) {
            fetched = fetch_snapshot_into(c->transport, index, out);
            if (!fetched.unreachable) break;
        }
        bool written = fetched.status == VL_OK && std::fflush(out) == 0 &&
                       ::fsync(fileno(out)) == 0;
        const int write_error = errno;
        written = std::fclose(out) == 0 && written;
        if (fetched.status != VL_OK) {
            std::remove(partial.c_str());
            return c->errors.set(fetched.status, fetched.text);
        }
        if (!written || std::rename(partial.c_str(), target.c_str()) != 0 ||
            !sync_parent_directory(target)) {
            const int error = written ? errno : write_error;
            std::remove(partial.c_str());
            return c->errors.set(VL_ERR_INVALID_ARGUMENT,
                                 "cannot write " + target + ": " + std::strerror(error));
        }
        if (op_out) *op_out = fetched.op;
        if (size_out) *size_out = fetched.size;
        return c->errors.set(VL_OK, "");
    });
}

// ---- Users, roles and tokens ------------------------------------------------------------------

vl_status vl_role_put(vl_client* c, const char* name, const vl_grant* grants, size_t grant_count,
                      uint64_t* auth_revision_out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return auth_put(
        c, "roles", name, bad_role_name,
        [&](std::string* why) { return role_body(grants, grant_count, why); }, auth_revision_out);
}

vl_status vl_role_delete(vl_client* c, const char* name, uint64_t* auth_revision_out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return auth_delete(c, "roles", name, bad_role_name, auth_revision_out);
}

vl_status vl_role_get(vl_client* c, const char* name, int flags, vl_role** out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return auth_get(c, "roles", name, flags, out, role_from_json);
}

vl_status vl_roles_list(vl_client* c, int flags, vl_role_list** out)
{
    if (!c || !out) return VL_ERR_INVALID_ARGUMENT;
    return auth_list(c, "/v1/auth/roles", flags, out, role_list_from_json);
}

vl_status vl_user_put(vl_client* c, const char* name, const char* const* roles, size_t role_count,
                      uint64_t* auth_revision_out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return auth_put(
        c, "users", name, bad_auth_name,
        [&](std::string* why) { return user_body(roles, role_count, why); }, auth_revision_out);
}

vl_status vl_user_delete(vl_client* c, const char* name, uint64_t* auth_revision_out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return auth_delete(c, "users", name, bad_auth_name, auth_revision_out);
}

vl_status vl_user_get(vl_client* c, const char* name, int flags, vl_user** out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return auth_get(c, "users", name, flags, out, user_from_json);
}

vl_status vl_users_list(vl_client* c, int flags, vl_user_list** out)
{
    if (!c || !out) return VL_ERR_INVALID_ARGUMENT;
    return auth_list(c, "/v1/auth/users", flags, out, user_list_from_json);
}

vl_status vl_token_create(vl_client* c, const char* user, uint64_t ttl_s, vl_new_token** out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    if (out) *out = nullptr;
    return guarded(c->errors, [&] {
        if (const char* why = bad_auth_name(user)) return invalid(c->errors, why);
        if (ttl_s > voltlock::kMaxTokenTtlMs / 1000)
            return invalid(c->errors, "ttl_s is at most ten years (316,224,000 s)");
        if (!out) return invalid(c->errors, "out is NULL");
        Json body{{"user", user}};
        if (ttl_s > 0) body["ttl_s"] = ttl_s;
        return read_into(c,
                         Request{.method = "POST", .path = "/v1/auth/tokens",
                                 .body = body.dump(), .mutating = true},
                         out, new_token_from_json);
    });
}

vl_status vl_token_revoke(vl_client* c, const char* id, uint64_t* auth_revision_out)
{
    if (!c) return VL_ERR_INVALID_ARGUMENT;
    return auth_delete(c, "tokens", id, bad_token_id, auth_revision_out);
}

vl_status vl_tokens_list(vl_client* c, int flags, vl_token_list** out)
{
    if (!c || !out) return VL_ERR_INVALID_ARGUMENT;
    return auth_list(c, "/v1/auth/tokens", flags, out, token_list_from_json);
}

}  // extern "C"
