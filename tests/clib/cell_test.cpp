// libvoltlock against a real cell: every call, its errors, and threads sharing one client.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "c11_calls.h"
#include "rig.h"

namespace {

std::string text_of(const vl_kv* kv)
{
    return std::string(reinterpret_cast<const char*>(kv->value), kv->value_len);
}

vl_status put_text(vl_client* c, const std::string& key, const std::string& value,
                   const vl_put_options* opts = nullptr, vl_put_result* result = nullptr)
{
    return vl_put(c, key.c_str(), value.data(), value.size(), opts, result);
}

}  // namespace

TEST_CASE("the API from plain C11: every call once")
{
    char why[512] = "";
    CHECK_MESSAGE(c11_walkthrough(rig::endpoints().c_str(), rig::unique("c11").c_str(), why,
                                  sizeof why) == 0,
                  why);
}

TEST_CASE("kv: put, get, compare-and-set, delete, binary values, paging, stale reads")
{
    vl_client* c = rig::open_client();
    const std::string prefix = rig::unique("kv") + "/";
    vl_put_result first{};
    REQUIRE(put_text(c, prefix + "a", "1", nullptr, &first) == VL_OK);
    CHECK(first.version == 1);

    vl_put_options cas{};
    cas.check_prev_revision = true;
    cas.prev_revision = first.revision + 1000;
    CHECK(put_text(c, prefix + "a", "2", &cas) == VL_ERR_CAS_MISMATCH);
    CHECK(std::string(vl_client_errstr(c)).starts_with("cas_mismatch: "));
    cas.prev_revision = 0;  // only if absent
    CHECK(put_text(c, prefix + "a", "2", &cas) == VL_ERR_CAS_MISMATCH);
    cas.prev_revision = first.revision;
    vl_put_result second{};
    REQUIRE(put_text(c, prefix + "a", "2", &cas, &second) == VL_OK);
    CHECK(second.prev_mod_revision == first.revision);
    CHECK(second.version == 2);

    vl_kv* kv = nullptr;
    REQUIRE(vl_get(c, (prefix + "a").c_str(), VL_READ_LINEARIZABLE, &kv) == VL_OK);
    CHECK(text_of(kv) == "2");
    CHECK(kv->mod_revision == second.revision);
    vl_kv_free(kv);
    CHECK(vl_get(c, (prefix + "nothing").c_str(), 0, &kv) == VL_ERR_KEY_NOT_FOUND);
    CHECK(kv == nullptr);
    CHECK(std::string(vl_client_errstr(c)).starts_with("key_not_found: "));

    // Any bytes, NULs and invalid UTF-8 included.
    const std::string binary("\0\xff\xfe\n\0z", 6);
    REQUIRE(put_text(c, prefix + "bin", binary) == VL_OK);
    REQUIRE(vl_get(c, (prefix + "bin").c_str(), VL_READ_STALE, &kv) == VL_OK);
    CHECK(text_of(kv) == binary);
    vl_kv_free(kv);

    for (int i = 0; i < 7; i++)
        REQUIRE(put_text(c, prefix + "page/" + std::to_string(i), "v") == VL_OK);
    std::vector<std::string> keys;
    std::string after;
    int pages = 0;
    while (true) {
        vl_kv_list* list = nullptr;
        REQUIRE(vl_get_prefix(c, (prefix + "page/").c_str(),
                              after.empty() ? nullptr : after.c_str(), 3, 0, &list) == VL_OK);
        pages++;
        for (size_t i = 0; i < list->count; i++) keys.emplace_back(list->kvs[i].key);
        const bool more = list->more;
        if (more) after = list->next_after;
        vl_kv_list_free(list);
        if (!more) break;
    }
    CHECK(pages == 3);
    REQUIRE(keys.size() == 7);
    CHECK(keys.front() == prefix + "page/0");
    CHECK(keys.back() == prefix + "page/6");

    vl_delete_options one{};
    one.check_prev_revision = true;
    one.prev_revision = first.revision;  // stale: the key was written again since
    CHECK(vl_delete(c, (prefix + "a").c_str(), &one, nullptr) == VL_ERR_CAS_MISMATCH);
    vl_delete_options everything{};
    everything.prefix = true;
    vl_delete_result deleted{};
    REQUIRE(vl_delete(c, prefix.c_str(), &everything, &deleted) == VL_OK);
    CHECK(deleted.deleted == 9);

    const std::string too_large(4000, 'x');
    CHECK(put_text(c, prefix + "big", too_large) == VL_ERR_TOO_LARGE);
    vl_client_close(c);
}

TEST_CASE("a value no cell takes is VL_ERR_TOO_LARGE at once, not a timeout")
{
    // Over about 786 KB, base64 made the body pass the cell's 1 MiB limit: the cell answered 413
    // and closed before the body was written, which the client took for a transport failure
    // and retried at every endpoint until the deadline.
    vl_client* c = rig::open_client(5000);
    const std::string key = rig::unique("huge");
    for (const size_t size : {size_t{800'000}, size_t{20'000'000}}) {
        CAPTURE(size);
        const auto start = std::chrono::steady_clock::now();
        CHECK(put_text(c, key, std::string(size, 'x')) == VL_ERR_TOO_LARGE);
        CHECK(rig::elapsed_ms(start) < 1000);
        CHECK(std::string(vl_client_errstr(c)).starts_with("too_large: "));
    }
    vl_client_close(c);
}

TEST_CASE("names that are not UTF-8 are refused before anything is sent")
{
    vl_client* c = rig::open_client();
    vl_session* s = nullptr;
    REQUIRE(vl_session_open(c, 10000, nullptr, &s) == VL_OK);
    // Named, not shown: the test's output goes through Python, which wants it UTF-8.
    const std::pair<const char*, std::string> bad_names[] = {
        {"a stray byte", "bad\xff"},
        {"a truncated sequence", "cut\xe2\x82"},
        {"an overlong '/'", "over\xc0\xaf"},
        {"a surrogate", "half\xed\xa0\x80"},
        {"past U+10FFFF", "big\xf4\x90\x80\x80"}};
    for (const auto& [what, bad] : bad_names) {
        CAPTURE(what);
        // The error text is read after the call (an argument's could be read before it).
        const auto client_why = [&] { return vl_client_errstr(c); };
        const auto session_why = [&] { return vl_session_errstr(s); };
        const auto refused_here = [&](vl_status status, const auto& why) {
            CHECK(status == VL_ERR_INVALID_ARGUMENT);  // the cell's is VL_ERR_SERVER_INVALID_...
            CHECK(std::string(why()).starts_with("client_invalid_argument: "));
        };
        refused_here(put_text(c, bad, "v"), client_why);
        vl_kv* kv = nullptr;
        refused_here(vl_get(c, bad.c_str(), 0, &kv), client_why);
        vl_kv_list* list = nullptr;
        refused_here(vl_get_prefix(c, bad.c_str(), nullptr, 0, 0, &list), client_why);
        refused_here(vl_delete(c, bad.c_str(), nullptr, nullptr), client_why);
        vl_watch* w = nullptr;
        refused_here(vl_watch_open(c, bad.c_str(), nullptr, &w), client_why);
        refused_here(vl_lock_acquire(s, bad.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr), session_why);
        refused_here(vl_barrier_enter(s, bad.c_str(), 2, 0), session_why);
    }
    // Text that is UTF-8 goes through.
    const std::string key = rig::unique("utf8") + "/\xc3\xbc\xf0\x9f\x94\x91";
    CHECK(put_text(c, key, "v") == VL_OK);
    CHECK(vl_session_close(s) == VL_OK);
    vl_client_close(c);
}

TEST_CASE("bad arguments are refused before anything is sent")
{
    vl_client* c = rig::open_client();
    vl_kv* kv = nullptr;
    CHECK(vl_get(c, "", 0, &kv) == VL_ERR_INVALID_ARGUMENT);
    CHECK(vl_get(c, "a\nb", 0, &kv) == VL_ERR_INVALID_ARGUMENT);
    CHECK(std::string(vl_client_errstr(c)).find("key") != std::string::npos);
    CHECK(vl_put(c, "k", nullptr, 3, nullptr, nullptr) == VL_ERR_INVALID_ARGUMENT);
    vl_session* s = nullptr;
    CHECK(vl_session_open(c, 10, nullptr, &s) == VL_ERR_INVALID_ARGUMENT);
    CHECK(s == nullptr);
    vl_sequencer* seq = nullptr;
    CHECK(vl_sequencer_parse("{\"lock\":\"l\"}", &seq) == VL_ERR_INVALID_ARGUMENT);
    CHECK(vl_sequencer_parse("not json", &seq) == VL_ERR_INVALID_ARGUMENT);
    // Exactly the four fields, and a lock name the cell takes.
    const std::string rest = "\"mode\":\"exclusive\",\"generation\":1,\"session\":1";
    for (const std::string lock : {"\"\"", "\"a\\nb\"", "7", "null"})
        CHECK(vl_sequencer_parse(("{\"lock\":" + lock + "," + rest + "}").c_str(), &seq) ==
              VL_ERR_INVALID_ARGUMENT);
    CHECK(vl_sequencer_parse(("{\"lock\":\"l\"," + rest + ",\"extra\":1}").c_str(), &seq) ==
          VL_ERR_INVALID_ARGUMENT);
    REQUIRE(vl_sequencer_parse(("{\"lock\":\"l\"," + rest + "}").c_str(), &seq) == VL_OK);
    vl_sequencer_free(seq);
    seq = nullptr;
    CHECK(seq == nullptr);
    char why[128];
    vl_client* bad = nullptr;
    CHECK(vl_client_open("http://x:1,https://y:1", nullptr, why, sizeof why, &bad) ==
          VL_ERR_INVALID_ARGUMENT);
    CHECK(std::string(why).find("mix http:// and https://") != std::string::npos);
    vl_client_options key_alone;
    vl_client_options_init(&key_alone);
    key_alone.key_file = "k.pem";
    CHECK(vl_client_open("https://x:1", &key_alone, why, sizeof why, &bad) ==
          VL_ERR_INVALID_ARGUMENT);
    CHECK(std::string(why).find("key_file without cert_file") != std::string::npos);
    CHECK(vl_client_open(",,", nullptr, why, sizeof why, &bad) == VL_ERR_INVALID_ARGUMENT);
    CHECK(bad == nullptr);
    char* json = nullptr;
    CHECK(vl_info_get(c, "/v1/kv/x", -1, &json) == VL_ERR_INVALID_ARGUMENT);
    vl_client_close(c);
}

TEST_CASE("NULL handles, undefined flag bits and endpoint indexes, bad sequencer numbers")
{
    // A NULL client: the getters answer as their siblings do (no crash).
    CHECK(vl_client_current_endpoint(nullptr) == nullptr);
    CHECK(vl_client_endpoint_count(nullptr) == 0);
    CHECK(vl_client_endpoint(nullptr, 0) == nullptr);
    CHECK(std::string(vl_client_errstr(nullptr)) == "client is NULL");
    vl_client* c = rig::open_client();
    const std::string key = rig::unique("flags");
    REQUIRE(put_text(c, key, "v") == VL_OK);
    vl_kv* kv = nullptr;
    // Bits vl_read_flags does not define: refused, not ignored.
    CHECK(vl_get(c, key.c_str(), 7, &kv) == VL_ERR_INVALID_ARGUMENT);
    CHECK(kv == nullptr);
    CHECK(std::string(vl_client_errstr(c)).find("VL_READ_STALE") != std::string::npos);
    CHECK(vl_get(c, key.c_str(), VL_READ_STALE | 4, &kv) == VL_ERR_INVALID_ARGUMENT);
    vl_kv_list* list = nullptr;
    CHECK(vl_get_prefix(c, key.c_str(), nullptr, 0, 2, &list) == VL_ERR_INVALID_ARGUMENT);
    CHECK(list == nullptr);
    vl_role_list* roles = nullptr;
    CHECK(vl_roles_list(c, -1, &roles) == VL_ERR_INVALID_ARGUMENT);
    REQUIRE(vl_get(c, key.c_str(), VL_READ_STALE, &kv) == VL_OK);
    vl_kv_free(kv);
    // -1 is any endpoint; other negative indexes are mistakes.
    char* json = nullptr;
    CHECK(vl_info_get(c, "/v1/status", -2, &json) == VL_ERR_INVALID_ARGUMENT);
    CHECK(vl_info_get(c, "/v1/status", INT32_MIN, &json) == VL_ERR_INVALID_ARGUMENT);
    CHECK(json == nullptr);
    CHECK(vl_snapshot_save(c, -2, "/nonexistent/x.snap", nullptr, nullptr) ==
          VL_ERR_INVALID_ARGUMENT);
    REQUIRE(vl_info_get(c, "/v1/status", -1, &json) == VL_OK);
    vl_string_free(json);
    // A sequencer's numbers are JSON integers from 0 up: not -1 (taken as 2^64-1), not 1.5.
    const auto parse = [](const std::string& generation, const std::string& session) {
        vl_sequencer* seq = nullptr;
        const std::string text = "{\"generation\":" + generation +
                                 ",\"lock\":\"L\",\"mode\":\"exclusive\",\"session\":" +
                                 session + "}";
        const vl_status status = vl_sequencer_parse(text.c_str(), &seq);
        CHECK((status == VL_OK) == (seq != nullptr));
        vl_sequencer_free(seq);
        return status;
    };
    CHECK(parse("-1", "1") == VL_ERR_INVALID_ARGUMENT);
    CHECK(parse("1.5", "1") == VL_ERR_INVALID_ARGUMENT);
    CHECK(parse("1", "-7") == VL_ERR_INVALID_ARGUMENT);
    CHECK(parse("1", "2.0") == VL_ERR_INVALID_ARGUMENT);
    CHECK(parse("\"1\"", "1") == VL_ERR_INVALID_ARGUMENT);
    CHECK(parse("0", "18446744073709551615") == VL_OK);
    vl_client_close(c);
}

TEST_CASE("TLS files are checked when the client is made, the error naming option and file")
{
    char dir_template[] = "/tmp/clib-tls-XXXXXX";
    REQUIRE(mkdtemp(dir_template) != nullptr);
    const std::string dir = dir_template;
    const std::string garbage = dir + "/garbage.pem";
    std::FILE* file = std::fopen(garbage.c_str(), "w");
    REQUIRE(file != nullptr);
    std::fputs("not a certificate\n", file);
    std::fclose(file);
    const auto refusal = [](const char* cacert, const char* cert, const char* key) {
        vl_client_options options;
        vl_client_options_init(&options);
        options.cacert_file = cacert;
        options.cert_file = cert;
        options.key_file = key;
        char why[512] = "";
        vl_client* c = nullptr;
        const auto start = std::chrono::steady_clock::now();
        const vl_status status = vl_client_open("https://10.77.0.99:7480", &options, why,
                                                sizeof why, &c);
        CHECK(rig::elapsed_ms(start) < 500);  // nothing is dialled
        CHECK(status == VL_ERR_INVALID_ARGUMENT);
        CHECK(c == nullptr);
        vl_client_close(c);
        return std::string(why);
    };
    CHECK(refusal("/nonexistent/ca.pem", nullptr, nullptr) ==
          "cacert_file /nonexistent/ca.pem: No such file or directory");
    CHECK(refusal(garbage.c_str(), nullptr, nullptr) ==
          "cacert_file " + garbage + ": no PEM certificate in it");
    CHECK(refusal(nullptr, garbage.c_str(), nullptr) == "cert_file without key_file");
    CHECK(refusal(nullptr, nullptr, garbage.c_str()) == "key_file without cert_file");
    CHECK(refusal(nullptr, "/nonexistent/c.pem", garbage.c_str()) ==
          "cert_file /nonexistent/c.pem: No such file or directory");
    CHECK(refusal(nullptr, garbage.c_str(), garbage.c_str()) ==
          "key_file " + garbage + ": not an unencrypted PEM private key");
    // A path from the environment is named by its variable.
    setenv("VOLTLOCK_CACERT", "/nonexistent/env.pem", 1);
    CHECK(refusal(nullptr, nullptr, nullptr) ==
          "$VOLTLOCK_CACERT /nonexistent/env.pem: No such file or directory");
    unsetenv("VOLTLOCK_CACERT");
    std::remove(garbage.c_str());
    rmdir(dir.c_str());
}

TEST_CASE("locks: busy, waits that time out, shared holders, fencing, release")
{
    vl_client* c = rig::open_client();
    const std::string lock = rig::unique("lock");
    vl_session *a = nullptr, *b = nullptr;
    REQUIRE(vl_session_open(c, 10000, nullptr, &a) == VL_OK);
    REQUIRE(vl_session_open(c, 10000, nullptr, &b) == VL_OK);

    vl_sequencer* held = nullptr;
    REQUIRE(vl_lock_acquire(a, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, &held) == VL_OK);
    CHECK(vl_lock_acquire(b, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_ERR_LOCK_BUSY);
    CHECK(std::string(vl_session_errstr(b)).starts_with("lock_busy: "));
    const auto start = std::chrono::steady_clock::now();
    CHECK(vl_lock_acquire(b, lock.c_str(), VL_LOCK_EXCLUSIVE, 1000, nullptr) ==
          VL_ERR_WAIT_TIMED_OUT);
    CHECK(rig::elapsed_ms(start) >= 900);
    CHECK(rig::elapsed_ms(start) < 5000);
    CHECK(vl_lock_acquire(b, lock.c_str(), VL_LOCK_SHARED, 0, nullptr) == VL_ERR_LOCK_BUSY);

    // A fenced write goes through while the grant is current, and not after it ended.
    const std::string key = rig::unique("fenced");
    vl_put_options fenced{};
    fenced.sequencer = held;
    CHECK(put_text(c, key, "by a", &fenced) == VL_OK);
    REQUIRE(vl_lock_release(a, lock.c_str()) == VL_OK);
    CHECK(vl_lock_release(a, lock.c_str()) == VL_ERR_NOT_HELD);
    CHECK(put_text(c, key, "late", &fenced) == VL_ERR_SEQUENCER_INVALID);
    bool valid = true;
    REQUIRE(vl_sequencer_check(c, held, &valid) == VL_OK);
    CHECK_FALSE(valid);
    vl_delete_options fenced_delete{};
    fenced_delete.sequencer = held;
    CHECK(vl_delete(c, key.c_str(), &fenced_delete, nullptr) == VL_ERR_SEQUENCER_INVALID);

    // Shared: both hold at once; generations grow.
    vl_sequencer *sa = nullptr, *sb = nullptr;
    REQUIRE(vl_lock_acquire(a, lock.c_str(), VL_LOCK_SHARED, 0, &sa) == VL_OK);
    REQUIRE(vl_lock_acquire(b, lock.c_str(), VL_LOCK_SHARED, 0, &sb) == VL_OK);
    CHECK(sa->mode == VL_LOCK_SHARED);
    CHECK(sa->generation > held->generation);
    char* formatted = nullptr;
    REQUIRE(vl_sequencer_format(sb, &formatted) == VL_OK);
    CHECK(nlohmann::json::parse(formatted)["mode"] == "shared");
    vl_string_free(formatted);
    vl_sequencer_free(sa);
    vl_sequencer_free(sb);
    vl_sequencer_free(held);

    // Ending a session releases its locks at once.
    CHECK(vl_session_close(b) == VL_OK);
    CHECK(vl_lock_release(a, lock.c_str()) == VL_OK);
    CHECK(vl_session_close(a) == VL_OK);
    vl_client_close(c);
}

TEST_CASE("a wait interrupted from another thread ends at once, is withdrawn, the session goes on")
{
    vl_client* c = rig::open_client();
    const std::string lock = rig::unique("interrupted");
    // The lock as the leader has it (linearizable read); null once it has neither holder nor
    // waiter.
    const auto lock_state = [&] {
        char* json = nullptr;
        const vl_status status = vl_info_get(c, ("/v1/locks/" + lock).c_str(), -1, &json);
        if (status == VL_ERR_NOT_FOUND) return nlohmann::json();
        REQUIRE(status == VL_OK);
        nlohmann::json state = nlohmann::json::parse(json);
        vl_string_free(json);
        return state;
    };
    vl_session *a = nullptr, *b = nullptr;
    REQUIRE(vl_session_open(c, 10000, nullptr, &a) == VL_OK);
    REQUIRE(vl_session_open(c, 10000, nullptr, &b) == VL_OK);
    REQUIRE(vl_lock_acquire(a, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_OK);

    std::atomic<int> outcome{-1};
    std::string outcome_text;  // the error text is per thread
    std::thread waiter([&] {
        outcome = vl_lock_acquire(b, lock.c_str(), VL_LOCK_EXCLUSIVE, 30000, nullptr);
        outcome_text = vl_session_errstr(b);
    });
    REQUIRE(rig::eventually(std::chrono::seconds(5), [&] {
        const nlohmann::json state = lock_state();
        return state.is_object() && state["waiters"].size() == 1;
    }));
    const auto start = std::chrono::steady_clock::now();
    vl_session_interrupt(b);
    waiter.join();
    CHECK(rig::elapsed_ms(start) < 1000);
    CHECK(outcome.load() == VL_ERR_CLOSED);
    CHECK_MESSAGE(outcome_text.find("interrupted") != std::string::npos, outcome_text);

    // The cell withdrew the wait when its connection closed: a's release grants nobody.
    CHECK(rig::eventually(std::chrono::seconds(5), [&] {
        const nlohmann::json state = lock_state();
        return state.is_object() && state["waiters"].empty();
    }));
    REQUIRE(vl_lock_release(a, lock.c_str()) == VL_OK);
    const nlohmann::json after = lock_state();
    CHECK((after.is_null() || after["holders"].empty()));

    // Only the calls in flight were ended: b's next ones run as usual.
    CHECK(vl_session_status(b) == VL_OK);
    CHECK(vl_lock_acquire(b, lock.c_str(), VL_LOCK_EXCLUSIVE, 1000, nullptr) == VL_OK);
    CHECK(vl_lock_release(b, lock.c_str()) == VL_OK);
    vl_session_interrupt(b);  // nothing in flight: nothing to end
    CHECK(vl_lock_acquire(b, lock.c_str(), VL_LOCK_EXCLUSIVE, 0, nullptr) == VL_OK);
    CHECK(vl_session_close(b) == VL_OK);
    CHECK(vl_session_close(a) == VL_OK);
    vl_client_close(c);
}

TEST_CASE("ephemeral keys go with their session; sessions by id")
{
    vl_client* c = rig::open_client();
    vl_session* s = nullptr;
    vl_session_options options;
    vl_session_options_init(&options);
    options.name = "ephemeral-owner";
    REQUIRE(vl_session_open(c, 10000, &options, &s) == VL_OK);
    const std::string key = rig::unique("ephemeral");
    vl_put_options owned{};
    owned.session = s;
    REQUIRE(put_text(c, key, "here", &owned) == VL_OK);
    vl_kv* kv = nullptr;
    REQUIRE(vl_get(c, key.c_str(), 0, &kv) == VL_OK);
    CHECK(kv->session == vl_session_id(s));
    vl_kv_free(kv);

    char* json = nullptr;
    const std::string path = "/v1/sessions/" + std::to_string(vl_session_id(s));
    REQUIRE(vl_info_get(c, path.c_str(), -1, &json) == VL_OK);
    CHECK(nlohmann::json::parse(json)["name"] == "ephemeral-owner");
    vl_string_free(json);
    uint32_t ttl = 0;
    REQUIRE(vl_session_keepalive_id(c, vl_session_id(s), &ttl) == VL_OK);
    CHECK(ttl == 10000);

    CHECK(vl_session_close(s) == VL_OK);
    CHECK(vl_get(c, key.c_str(), 0, &kv) == VL_ERR_KEY_NOT_FOUND);
    CHECK(vl_session_keepalive_id(c, 999999999, &ttl) == VL_ERR_UNKNOWN_SESSION);
    CHECK(vl_session_revoke_id(c, 999999999) == VL_ERR_UNKNOWN_SESSION);
    vl_client_close(c);
}

TEST_CASE("barriers: two sessions on two threads pass together")
{
    vl_client* c = rig::open_client();
    const std::string barrier = rig::unique("barrier");
    vl_session *a = nullptr, *b = nullptr;
    REQUIRE(vl_session_open(c, 10000, nullptr, &a) == VL_OK);
    REQUIRE(vl_session_open(c, 10000, nullptr, &b) == VL_OK);
    CHECK(vl_barrier_enter(a, barrier.c_str(), 2, 0) == VL_ERR_BARRIER_NOT_READY);
    std::atomic<int> entered_b{-1};
    std::thread other([&] { entered_b = vl_barrier_enter(b, barrier.c_str(), 2, 10000); });
    CHECK(vl_barrier_enter(a, barrier.c_str(), 2, 10000) == VL_OK);
    other.join();
    CHECK(entered_b == VL_OK);
    CHECK(vl_barrier_enter(a, barrier.c_str(), 3, 0) != VL_OK);
    std::thread leave_b([&] { entered_b = vl_barrier_leave(b, barrier.c_str(), 10000); });
    CHECK(vl_barrier_leave(a, barrier.c_str(), 10000) == VL_OK);
    leave_b.join();
    CHECK(entered_b == VL_OK);
    vl_session_close(a);
    vl_session_close(b);
    vl_client_close(c);
}

TEST_CASE("8 threads sharing one client increment a counter under one lock, exactly")
{
    vl_client* c = rig::open_client(20000);
    const std::string lock = rig::unique("counter-lock");
    const std::string key = rig::unique("counter");
    REQUIRE(put_text(c, key, "0") == VL_OK);
    constexpr int kThreads = 8, kRounds = 15;
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) {
        threads.emplace_back([&] {
            vl_session* s = nullptr;
            if (vl_session_open(c, 10000, nullptr, &s) != VL_OK) {
                failures++;
                return;
            }
            for (int round = 0; round < kRounds; round++) {
                vl_sequencer* seq = nullptr;
                if (vl_lock_acquire(s, lock.c_str(), VL_LOCK_EXCLUSIVE, 30000, &seq) != VL_OK) {
                    failures++;
                    continue;
                }
                vl_kv* kv = nullptr;
                if (vl_get(c, key.c_str(), 0, &kv) == VL_OK) {
                    const std::string next = std::to_string(std::stoi(text_of(kv)) + 1);
                    vl_put_options fenced{};
                    fenced.sequencer = seq;
                    if (put_text(c, key, next, &fenced) != VL_OK) failures++;
                    vl_kv_free(kv);
                } else {
                    failures++;
                }
                if (vl_lock_release(s, lock.c_str()) != VL_OK) failures++;
                vl_sequencer_free(seq);
            }
            if (vl_session_close(s) != VL_OK) failures++;
        });
    }
    for (auto& t : threads) t.join();
    CHECK(failures == 0);
    vl_kv* kv = nullptr;
    REQUIRE(vl_get(c, key.c_str(), 0, &kv) == VL_OK);
    CHECK(text_of(kv) == std::to_string(kThreads * kRounds));
    vl_kv_free(kv);
    vl_client_close(c);
}

TEST_CASE("watches: from a revision, from now, and closed while waiting")
{
    vl_client* c = rig::open_client();
    const std::string prefix = rig::unique("watch") + "/";
    vl_put_result first{};
    REQUIRE(put_text(c, prefix + "x", "1", nullptr, &first) == VL_OK);
    REQUIRE(put_text(c, prefix + "y", "2") == VL_OK);
    REQUIRE(vl_delete(c, (prefix + "x").c_str(), nullptr, nullptr) == VL_OK);

    vl_watch_options from_first{};
    from_first.prefix = true;
    from_first.start_revision = first.revision;
    vl_watch* w = nullptr;
    REQUIRE(vl_watch_open(c, prefix.c_str(), &from_first, &w) == VL_OK);
    std::vector<std::string> seen;
    for (int i = 0; i < 3; i++) {
        vl_event* e = nullptr;
        REQUIRE(vl_watch_next(w, 5000, &e) == VL_OK);
        seen.push_back(std::string(e->type) + " " + e->key);
        vl_event_free(e);
    }
    CHECK(seen == std::vector<std::string>{"put " + prefix + "x", "put " + prefix + "y",
                                           "delete " + prefix + "x"});
    vl_event* none = nullptr;
    CHECK(vl_watch_next(w, 200, &none) == VL_ERR_TIMEOUT);
    vl_watch_close(w);

    // From now: only what happens after the open.
    vl_watch_options from_now{};
    from_now.prefix = true;
    REQUIRE(vl_watch_open(c, prefix.c_str(), &from_now, &w) == VL_OK);
    vl_put_result later{};
    REQUIRE(put_text(c, prefix + "z", "3", nullptr, &later) == VL_OK);
    vl_event* e = nullptr;
    REQUIRE(vl_watch_next(w, 5000, &e) == VL_OK);
    CHECK(e->revision == later.revision);
    vl_event_free(e);
    // Closing does not wait for the server's next heartbeat.
    const auto start = std::chrono::steady_clock::now();
    vl_watch_close(w);
    CHECK(rig::elapsed_ms(start) < 1000);
    vl_client_close(c);
}

TEST_CASE("a consumer far behind holds a bounded queue: the stream is cut and resumes, no gap")
{
    // One replica, so that its slow-reader count is the watch's.
    const std::string all = rig::endpoints();
    vl_client* watcher = rig::open_client(10000, all.substr(0, all.find(',')));
    vl_client* writer = rig::open_client();
    const auto cut = [&] {
        char* cluster = nullptr;
        REQUIRE(vl_info_get(watcher, "/v1/cluster", 0, &cluster) == VL_OK);
        const auto n = nlohmann::json::parse(cluster)["api"]["slow_readers_cut"].get<uint64_t>();
        vl_string_free(cluster);
        return n;
    };
    const uint64_t cut_before = cut();
    const std::string prefix = rig::unique("behind") + "/";
    vl_watch_options from_now{};
    from_now.prefix = true;
    vl_watch* w = nullptr;
    REQUIRE(vl_watch_open(watcher, prefix.c_str(), &from_now, &w) == VL_OK);
    // About 9 MB of events while nobody calls vl_watch_next: more than the watch's queue (4 MiB),
    // the cell's buffer for the stream (1 MiB) and the sockets hold. Before, the watch's thread
    // queued them all (and any more) in memory.
    std::mutex mutex;
    std::vector<uint64_t> written;
    std::atomic<int> failures{0};  // counted, not asserted: a REQUIRE may not throw in a thread
    const auto put = [&](const std::string& key, const std::string& value) {
        vl_put_result result{};
        if (put_text(writer, key, value, nullptr, &result) != VL_OK) {
            failures++;
            return;
        }
        std::lock_guard lock(mutex);
        written.push_back(result.revision);
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; t++)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 750; i++) put(prefix + std::to_string(t), std::string(1300, 'v'));
        });
    for (auto& thread : threads) thread.join();
    REQUIRE(failures == 0);
    // The cell cuts a stream whose buffer stayed full for 5 s when it next has an event for it:
    // an event every poll until then. The kernel may have grown the connection's socket buffers
    // to hold much of the 9 MB (several MB each way), leaving the cell's buffer not full, so
    // 2,500 more come first. At most 3,400 in all, so that every event of the test stays in
    // the cell's history (10,000) for the watch to resume from.
    int more = 0;
    CHECK(rig::eventually(std::chrono::seconds(60), [&] {
        for (int i = 0; i < (more < 2500 ? 50 : 1) && more < 3400; i++, more++)
            put(prefix + "more", std::string(1300, 'v'));
        return cut() > cut_before;
    }));
    std::sort(written.begin(), written.end());
    std::vector<uint64_t> seen;
    for (size_t i = 0; i < written.size(); i++) {
        vl_event* e = nullptr;
        REQUIRE(vl_watch_next(w, 10000, &e) == VL_OK);
        seen.push_back(e->revision);
        vl_event_free(e);
    }
    CHECK(seen == written);
    CHECK(failures == 0);
    vl_watch_close(w);
    vl_client_close(writer);
    vl_client_close(watcher);
}

TEST_CASE("a watch from revision 1 starts at the history's beginning, not at the next change")
{
    // One replica, so that the history the watch reads is the one asked about below.
    const std::string all = rig::endpoints();
    vl_client* c = rig::open_client(10000, all.substr(0, all.find(',')));
    vl_put_result marker{};
    REQUIRE(put_text(c, rig::unique("from-one"), "1", nullptr, &marker) == VL_OK);
    char* cluster = nullptr;
    REQUIRE(vl_info_get(c, "/v1/cluster", 0, &cluster) == VL_OK);
    const auto oldest = nlohmann::json::parse(cluster)["api"]["oldest_revision"].get<uint64_t>();
    vl_string_free(cluster);
    vl_watch_options from_one{};
    from_one.prefix = true;
    from_one.start_revision = 1;
    vl_watch* w = nullptr;
    const vl_status opened = vl_watch_open(c, "", &from_one, &w);
    if (oldest > 1) {
        // The replica's history no longer reaches back to revision 1 (earlier tests wrote more
        // than it keeps): that is the answer then.
        CHECK(opened == VL_ERR_COMPACTED);
    } else {
        REQUIRE(opened == VL_OK);
        vl_event* e = nullptr;
        REQUIRE(vl_watch_next(w, 5000, &e) == VL_OK);
        CHECK(e->revision <= marker.revision);
        vl_event_free(e);
        vl_watch_close(w);
    }
    vl_client_close(c);
}

TEST_CASE("open and close cycles leave nothing behind (LeakSanitizer checks the asan build)")
{
    for (int i = 0; i < 20; i++) {
        vl_client* c = rig::open_client();
        vl_session* s = nullptr;
        REQUIRE(vl_session_open(c, 5000, nullptr, &s) == VL_OK);
        vl_watch_options options{};
        vl_watch* w = nullptr;
        REQUIRE(vl_watch_open(c, "cycle", &options, &w) == VL_OK);
        vl_watch_close(w);
        REQUIRE(vl_session_close(s) == VL_OK);
        vl_client_close(c);
    }
}
