#include "api/metrics.h"

#include <cctype>

namespace voltlock::api {

namespace {

using Json = nlohmann::json;

std::string metric_name(const std::string& text)
{
    std::string out;
    for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return out;
}

std::string label_value(const std::string& text)
{
    std::string out;
    for (char c : text) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

std::string number(const Json& value)
{
    if (value.is_boolean()) return value.get<bool>() ? "1" : "0";
    if (value.is_number_unsigned()) return std::to_string(value.get<uint64_t>());
    if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
    if (value.is_number()) return std::to_string(value.get<double>());
    return "0";
}

class Writer {
public:
    void family(const std::string& name, const char* type, const std::string& help)
    {
        out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    }
    void sample(const std::string& name, const std::string& labels, const std::string& value)
    {
        out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + value + "\n";
    }
    std::string take() { return std::move(out_); }

private:
    std::string out_;
};

std::string label(const std::string& name, const std::string& value)
{
    return name + "=\"" + label_value(value) + "\"";
}

// A label name for a counter group in /v1/status's "counters".
std::string group_label(const std::string& group)
{
    if (group == "messages_in" || group == "messages_out") return "type";
    if (group == "rejected" || group == "ignored") return "reason";
    if (group == "kernel") return "counter";  // the eBPF programs' vl_stat counters
    return "kind";
}

// /v1/cluster's api gauges, each as voltlock_<name>.
constexpr std::pair<const char*, const char*> kApiGauges[] = {
    {"revision", "The lock service's revision as applied here."},
    {"oldest_revision", "The oldest revision a watch can start from here."},
    {"sessions", "Open sessions."},
    {"locks", "Locks with a holder, a waiter or a lock-delay."},
    {"keys", "Keys in the key/value namespace."},
    {"client_table", "Clients in VR's client table (the oldest forgotten past its limit)."},
    {"barriers", "Barriers with members."},
    {"stored_bytes", "About the memory the records take (keys, values, sessions, locks)."},
    {"quota_bytes", "Past this, puts, new sessions and acquires get 507 (0: no quota)."},
    {"cell_clock_ahead_ms",
     "How far the cell's time (the largest op timestamp applied) ran ahead of this replica's "
     "clock; this replica stamps and measures by the cell's time."},
    {"watchers", "Watch streams open on this replica."},
    {"waiters", "HTTP requests waiting here for a lock or barrier."},
    {"leases_tracked", "Session leases this replica tracks as the leader."},
    {"client_ids", "Internal VR client ids this replica has made."},
    {"connections", "HTTP connections open on this replica."},
};

// /v1/cluster's api counters, each as voltlock_api_<name>_total.
constexpr std::pair<const char*, const char*> kApiCounters[] = {
    {"forwarded", "Requests this replica forwarded to the leader."},
    {"forwarded_as_requests",
     "Ops this replica forwarded to the leader as VR Requests, answered by its Reply."},
    {"request_retransmits", "VR Requests to the leader sent again for want of a Reply."},
    {"request_fallbacks",
     "Ops that could travel as VR Requests and were forwarded over HTTP instead."},
    {"keepalives_as_requests", "Keepalives sent to the leader as VR Requests, answered."},
    {"keepalive_requests_served", "Followers' keepalive Requests answered as the leader."},
    {"withdrawals_too_late",
     "Withdrawals of a hung-up client's wait that found it over (granted, timed out, ended)."},
    {"keepalives_asked_again",
     "Keepalive Requests answered with the op's result by a new leader, asked again over HTTP."},
    {"reads_at_commit_point", "Linearizable reads answered here at the leader's commit."},
    {"expiries_proposed", "ExpireSession ops this replica proposed as the leader."},
    {"expire_waiters_proposed", "ExpireWaiters ops this replica proposed as the leader."},
    {"connections_refused", "Connections answered 503 for being over a connection limit."},
    {"connections_timed_out", "Connections closed for headers, body or idle time running out."},
    {"connections_evicted", "Idle connections closed to make room at the connection cap."},
    {"clients_hung_up", "Clients that hung up while their request waited."},
    {"slow_readers_cut", "Watch streams cut for reading too slowly."},
    {"waits_withdrawn", "Lock waits and barrier enters withdrawn because their client hung up."},
};

// The replica's event loop: one long turn delays every request, timer and datagram.
void write_event_loop(Writer& w, const Json& loop)
{
    if (!loop.contains("longest_turn_us")) return;
    w.family("voltlock_event_loop_longest_turn_seconds", "gauge",
             "The longest turn of the replica's event loop since it started.");
    w.sample("voltlock_event_loop_longest_turn_seconds", "",
             std::to_string(loop["longest_turn_us"].get<double>() / 1e6));
    w.family("voltlock_event_loop_turns_total", "counter", "Turns of the event loop.");
    w.sample("voltlock_event_loop_turns_total", "", number(loop["turns"]));
    w.family("voltlock_event_loop_slow_turns_total", "counter",
             "Turns of the event loop at least 0.1 s and 1 s long.");
    w.sample("voltlock_event_loop_slow_turns_total", label("over_seconds", "0.1"),
             number(loop["turns_over_100ms"]));
    w.sample("voltlock_event_loop_slow_turns_total", label("over_seconds", "1"),
             number(loop["turns_over_1s"]));
}

// What runs where: the server's version and this replica's place in its cell.
void write_info(Writer& w, const Json& cluster)
{
    w.family("voltlock_build_info", "gauge", "The server's version (always 1).");
    w.sample("voltlock_build_info", label("version", cluster.value("version", "")), "1");
    w.family("voltlock_replica_info", "gauge",
             "This replica: its index and cluster id (always 1).");
    w.sample("voltlock_replica_info",
             label("replica", std::to_string(cluster.value("replica", 0))) + "," +
                 label("cluster_id", std::to_string(cluster.value("cluster_id", 0))) + "," +
                 label("electrode", cluster.value("electrode", "off")),
             "1");
}

// /v1/cluster's api.tls_certificates (TLS on), for alerts before a certificate expires.
void write_tls_expiries(Writer& w, const Json& certificates)
{
    if (certificates.empty()) return;
    const std::string name = "voltlock_tls_cert_expiry_timestamp_seconds";
    w.family(name, "gauge",
             "When a TLS certificate file in use stops being valid: the earliest notAfter of "
             "its certificates, in Unix seconds.");
    for (const Json& certificate : certificates)
        w.sample(name, label("file", certificate.value("file", "")),
                 number(certificate.value("not_after_unix_s", Json(0))));
}

// /v1/cluster's api figures.
void write_api(Writer& w, const Json& api)
{
    for (const auto& [field, help] : kApiGauges) {
        if (!api.contains(field)) continue;
        const std::string name = std::string("voltlock_") + field;
        w.family(name, "gauge", help);
        w.sample(name, "", number(api[field]));
    }
    for (const auto& [field, help] : kApiCounters) {
        if (!api.contains(field)) continue;
        const std::string name = std::string("voltlock_api_") + field + "_total";
        w.family(name, "counter", help);
        w.sample(name, "", number(api[field]));
    }
    if (api.contains("tls_certificates")) write_tls_expiries(w, api["tls_certificates"]);
}

}  // namespace

std::string render_metrics(const Json& cluster,
                           const std::map<std::tuple<std::string, std::string, int>, uint64_t>&
                               requests)
{
    Writer w;
    write_info(w, cluster);
    const std::pair<const char*, const char*> gauges[] = {
        {"view", "The current view number."},
        {"op", "The highest op in this replica's log."},
        {"commit", "The highest committed (and applied) op."},
        {"is_leader", "1 if this replica is the leader of its view."},
    };
    for (const auto& [field, help] : gauges) {
        const std::string name = std::string("voltlock_") + field;
        w.family(name, "gauge", help);
        w.sample(name, "", number(cluster.value(field, Json(0))));
    }
    w.family("voltlock_status", "gauge", "1 for this replica's VR status.");
    for (const char* status : {"normal", "view_change", "recovering"})
        w.sample("voltlock_status", label("status", status),
                 cluster.value("status", "") == status ? "1" : "0");
    w.family("voltlock_leader", "gauge", "The leader's replica index (-1: none known).");
    w.sample("voltlock_leader", "",
             cluster.contains("leader") && !cluster["leader"].is_null()
                 ? number(cluster["leader"])
                 : "-1");

    bool lag_family = false;
    static const Json kNone = Json::array();
    const Json& members = cluster.contains("members") ? cluster["members"] : kNone;
    for (const Json& member : members) {
        if (!member.contains("lag_ops")) continue;
        if (!lag_family) {
            w.family("voltlock_replica_lag_ops", "gauge",
                     "Ops the leader has that a replica has not acknowledged (leader only).");
            lag_family = true;
        }
        w.sample("voltlock_replica_lag_ops",
                 label("replica", std::to_string(member.value("replica", 0))),
                 number(member["lag_ops"]));
    }

    // Every counter in /v1/status, as <name>_total, grouped ones with a label.
    static const Json kNoCounters = Json::object();
    const Json& counters = cluster.contains("counters") ? cluster["counters"] : kNoCounters;
    for (const auto& [group, value] : counters.items()) {
        const std::string name = "voltlock_" + metric_name(group) + "_total";
        if (value.is_object()) {
            w.family(name, "counter", "VR counter '" + group + "', by " + group_label(group) + ".");
            for (const auto& [key, count] : value.items())
                w.sample(name, label(group_label(group), key), number(count));
        } else if (value.is_number()) {
            w.family(name, "counter", "VR counter '" + group + "'.");
            w.sample(name, "", number(value));
        }
    }

    if (cluster.contains("event_loop")) write_event_loop(w, cluster["event_loop"]);

    if (cluster.contains("api")) write_api(w, cluster["api"]);

    w.family("voltlock_http_requests_total", "counter",
             "HTTP requests answered, by method, endpoint and status code.");
    for (const auto& [key, count] : requests) {
        const auto& [method, endpoint, status] = key;
        w.sample("voltlock_http_requests_total",
                 label("method", method) + "," + label("endpoint", endpoint) + "," +
                     label("code", std::to_string(status)),
                 std::to_string(count));
    }
    return w.take();
}

}  // namespace voltlock::api
