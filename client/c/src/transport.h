// The transport of libvoltlock: endpoints, kept-alive connections, failover, leader hints and
// idempotent retries. It moves requests and answers; codec.h says what they mean.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codec.h"

namespace httplib {
class Client;
}

namespace voltlock::client {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Endpoint {
    std::string url;   // "http://10.77.0.10:7480"
    std::string host;  // "10.77.0.10"
    int port = 0;
    bool tls = false;  // https://
};

// Parses "http://a:1,b:2" into endpoints; nullopt and the reason in *why on a bad list.
std::optional<std::vector<Endpoint>> parse_endpoints(std::string_view list, std::string* why);

// A PEM file of the client's TLS options (empty path: none), and its name in an error: the
// vl_client_options field, or the environment variable the path came from.
struct PemFile {
    std::string path;
    std::string name;
};

// Why the files cannot make a TLS client, naming the file (empty if they can): a certificate
// without its key or the reverse, a file that cannot be read or is not of its kind, a key that is
// not the certificate's. Checked when the client is made, so that a mistake is an invalid
// argument at once rather than every connection failing until the deadline.
std::string tls_files_problem(const PemFile& cacert, const PemFile& cert, const PemFile& key);

// Lets another thread abort the requests running under it: a session that is lost stops the
// waits made on its behalf at once instead of at their deadlines (cancel, for good), and
// vl_session_interrupt ends the calls in flight without touching later ones (interrupt).
class CancelToken {
public:
    void cancel();
    void interrupt();
    // What a call that began when interrupts() was `since` ends with: VL_OK (go on),
    // VL_ERR_SESSION_LOST (cancelled) or VL_ERR_CLOSED (interrupted since).
    vl_status stop_reason(uint64_t since) const;
    uint64_t interrupts() const { return interrupts_.load(); }
    // While registered, cancel() and interrupt() shut the client's socket down, waking its
    // blocked read. False (nothing registered) if the call is to stop already.
    bool enter(httplib::Client* client, uint64_t since);
    void leave(httplib::Client* client);

private:
    void stop_running();  // with mutex_ held

    std::mutex mutex_;
    std::set<httplib::Client*> running_;
    std::atomic<bool> cancelled_{false};
    std::atomic<uint64_t> interrupts_{0};
};

// A request that does not wait at the server and has no answer within this long (connecting
// included) is sent again elsewhere (same identity): a replica stopped or cut off must not hold
// the call to its deadline while the others could answer.
inline constexpr milliseconds kAttemptCap{3000};

struct Request {
    const char* method = "GET";  // GET, POST, PUT, DELETE
    std::string path;            // encoded, with its query
    std::string body;            // JSON, or empty
    // Changes state: carries X-Voltlock-Client-Id / X-Voltlock-Request-Number, the same on
    // every retry, so the cell applies it at most once.
    bool mutating = false;
    // Holds the request at the server up to wait_ms: no per-attempt cap below the deadline.
    bool waits = false;
    // -1: any endpoint, failing over; else only that one, once.
    int endpoint_index = -1;
    // The most one attempt at one endpoint may take when the request does not wait: below
    // kAttemptCap for a call that must have tried the others by a deadline of its own (a
    // session's keepalive, within the lease).
    milliseconds attempt_cap = kAttemptCap;

    // How long the attempt that has `remaining` until the call's deadline may take.
    milliseconds attempt_within(milliseconds remaining) const
    {
        return waits ? remaining : std::min(remaining, attempt_cap);
    }
};

struct Outcome {
    vl_status status = VL_OK;
    std::string text;  // the error line, naming the endpoint when the transport failed
    Json body;         // the answer's JSON (2xx, or the error object)
};

struct TransportOptions {
    milliseconds dial_timeout{2000};
    milliseconds command_timeout{10000};
    uint64_t client_id_seed = 0;
    // https: PEM files; empty ones are not used.
    std::string cacert_file;
    std::string cert_file;
    std::string key_file;
    std::string token;  // empty: no Authorization header
};

class Transport {
public:
    Transport(std::vector<Endpoint> endpoints, TransportOptions options);
    ~Transport();
    Transport(const Transport&) = delete;
    Transport& operator=(const Transport&) = delete;

    // Sends until an answer that is not "try again" (VL_OK or a server error), the deadline, or
    // a cancel. Retries (transport failures, 503s) go round the endpoints from the preferred
    // one, with the same identity.
    Outcome call(const Request& request, Clock::time_point deadline,
                 CancelToken* cancel = nullptr);

    Clock::time_point deadline_after(milliseconds extra = milliseconds(0)) const
    {
        return Clock::now() + options_.command_timeout + extra;
    }

    const std::vector<Endpoint>& endpoints() const { return endpoints_; }
    size_t preferred() const { return preferred_.load(); }
    const TransportOptions& options() const { return options_; }

    // A connection to endpoint `index` from the pool (or a new one), set up for one request.
    std::unique_ptr<httplib::Client> checkout(size_t index);
    // A new connection to endpoint `index`, set up for one request.
    std::unique_ptr<httplib::Client> connect(size_t index);
    // Back to the pool if it is still usable.
    void checkin(size_t index, std::unique_ptr<httplib::Client> client);
    // The answering endpoint becomes the preferred one; a leader hint moves it to the leader.
    void note_answer(size_t index, std::optional<int> leader_hint);
    void note_failure(size_t index);
    // Whether endpoint `index` answered /healthz within the last check interval, or does now
    // (on a connection of its own, stopped by `cancel`: then true, the caller sees why).
    bool answers_healthz(size_t index, CancelToken* cancel, uint64_t since);

private:
    struct Identity {
        uint64_t client_id = 0;
        uint64_t last_request_number = 0;
    };
    Identity take_identity();
    void give_back_identity(Identity identity);
    void learn_members(size_t index);

    const std::vector<Endpoint> endpoints_;
    const TransportOptions options_;
    std::atomic<size_t> preferred_{0};

    std::mutex pool_mutex_;
    std::vector<std::vector<std::unique_ptr<httplib::Client>>> idle_;  // per endpoint

    std::mutex health_mutex_;
    std::vector<std::optional<Clock::time_point>> healthz_answered_;  // per endpoint

    std::mutex identity_mutex_;
    std::vector<Identity> idle_identities_;
    uint64_t next_client_id_;

    std::mutex members_mutex_;
    bool members_known_ = false;
    std::map<int, size_t> replica_to_endpoint_;  // from /v1/cluster's members
};

}  // namespace voltlock::client
