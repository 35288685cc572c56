// vl_codec_bench: the cost of the core's codecs (issue 19: one codec must not be slower than the
// five hand-written ones it replaced). Times, on this thread, best of 5 rounds:
//   message encode/decode: a Prepare of 10 entries of 100-byte payloads, and a Commit
//   op encode/decode:      a Put with a sequencer and prev_revision
//   result encode/decode:  a GetResult of 10 keys
//   snapshot/restore/digest: a LockMachine of --keys keys (32-byte keys, 64-byte values)
//   API JSON (the HTTP layer's codec, api/translate.h): an acquire's body parsed into its op,
//   and the answers to a granted acquire and to that get, each made and written as text
//
//   vl_codec_bench [--keys N]   (default 200000)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "api/translate.h"
#include "core/lock_machine.h"
#include "core/lock_ops.h"
#include "core/message.h"

using namespace voltlock;

namespace {

// Nanoseconds per call of `body`, best of 5 rounds of `calls` calls.
template <typename Body>
double ns_per_call(size_t calls, Body body)
{
    double best = 1e300;
    for (int round = 0; round < 5; round++) {
        const auto start = std::chrono::steady_clock::now();
        for (size_t i = 0; i < calls; i++) body();
        const std::chrono::duration<double, std::nano> took =
            std::chrono::steady_clock::now() - start;
        best = std::min(best, took.count() / static_cast<double>(calls));
    }
    return best;
}

// Keeps a result alive so the optimizer does not drop the work.
volatile size_t sink;

void row(const char* name, double ns) { std::printf("%-28s %10.1f\n", name, ns); }

// Snapshot, restore and digest of a lock machine of `keys` keys; whether the restored machine
// has the same digest.
bool bench_snapshot(size_t keys)
{
    LockMachine machine;
    uint64_t op = 0;
    for (size_t i = 0; i < keys; i++) {
        char key[33];
        std::snprintf(key, sizeof key, "bench/key/%022zu", i);
        machine.apply(++op, Entry{.timestamp_ms = 1'700'000'000'000,
                                  .payload = encode_op(Put{.key = key, .value = Bytes(64, 'v')})});
    }
    Bytes snapshot;
    const double encode_ns = ns_per_call(1, [&] { snapshot = machine.snapshot(); });
    LockMachine restored;
    const double restore_ns = ns_per_call(1, [&] { sink = restored.restore(snapshot); });
    const double digest_ns = ns_per_call(1, [&] { sink = machine.state_digest(); });
    std::printf("%-28s %10.1f ms (%zu keys, %.1f MiB)\n", "lock machine snapshot", encode_ns / 1e6,
                keys, static_cast<double>(snapshot.size()) / (1 << 20));
    std::printf("%-28s %10.1f ms\n", "lock machine restore", restore_ns / 1e6);
    std::printf("%-28s %10.1f ms\n", "lock machine state_digest", digest_ns / 1e6);
    return restored.state_digest() == machine.state_digest();
}

// The HTTP layer's JSON: an acquire's body into its op; a granted acquire's and a get's answer
// made and written as text.
void bench_api_json(const OpResult& get_result)
{
    const std::string acquire_body = R"({"session": 77, "mode": "exclusive", "wait_ms": 0})";
    const OpResult granted = AcquireResult{
        .revision = 100,
        .status = AcquireStatus::granted,
        .sequencer = Sequencer{.lock = "db/primary", .generation = 9, .session = 77}};
    using api::ValueEncoding;
    row("API acquire body -> op", ns_per_call(500'000, [&] {
            sink = api::acquire_op("db/primary", acquire_body, VL_MAX_MESSAGE_BYTES).ok();
        }));
    row("API acquire answer", ns_per_call(500'000, [&] {
            sink = api::json_text(api::result_json(granted, ValueEncoding::automatic)).size();
        }));
    row("API get answer (10 keys)", ns_per_call(200'000, [&] {
            sink = api::json_text(api::result_json(get_result, ValueEncoding::automatic)).size();
        }));
}

}  // namespace

int main(int argc, char** argv)
{
    size_t keys = 200'000;
    for (int i = 1; i < argc; i++)
        if (std::strcmp(argv[i], "--keys") == 0 && i + 1 < argc)
            keys = std::strtoull(argv[++i], nullptr, 10);
        else {
            std::fprintf(stderr, "usage: %s [--keys N]\n", argv[0]);
            return 2;
        }

    const CellWire wire(7);
    Prepare prepare{.view = 3, .replica = 0, .op = 100, .commit = 90};
    for (uint64_t i = 0; i < 10; i++)
        prepare.entries.push_back(Entry{.timestamp_ms = 1'700'000'000'000 + i,
                                        .client_id = 42 + i,
                                        .request_number = i,
                                        .payload = Bytes(100, 'p')});
    const Message prepare_message = prepare;
    const Message commit_message = Commit{.view = 3, .replica = 0, .commit = 99, .heartbeat = 7};
    std::vector<uint8_t> buffer(VL_MAX_MESSAGE_BYTES);
    const auto encoded_prepare = encode(prepare_message, wire);
    const auto encoded_commit = encode(commit_message, wire);

    const LockOp put = Put{.key = "config/service/primary",
                           .value = Bytes(64, 'v'),
                           .session = 77,
                           .prev_revision = 12,
                           .sequencer = Sequencer{.lock = "db/primary", .generation = 9,
                                                  .session = 77}};
    const Bytes encoded_put = encode_op(put);
    GetResult get{.revision = 100};
    for (int i = 0; i < 10; i++)
        get.kvs.push_back(KeyValue{.key = "config/key/" + std::to_string(i),
                                   .value = Bytes(64, 'v'), .create_revision = 5,
                                   .mod_revision = 9, .version = 2});
    const OpResult get_result = get;
    const Bytes encoded_get = encode_result(get_result);

    std::printf("%-28s %10s\n", "codec", "ns/call");
    row("prepare encode", ns_per_call(200'000, [&] {
            sink = encode(prepare_message, wire, 0, buffer);
        }));
    row("prepare decode", ns_per_call(200'000, [&] {
            sink = decode(encoded_prepare, wire).ok();
        }));
    row("commit encode", ns_per_call(1'000'000, [&] {
            sink = encode(commit_message, wire, 0, buffer);
        }));
    row("commit decode", ns_per_call(1'000'000, [&] {
            sink = decode(encoded_commit, wire).ok();
        }));
    row("put op encode", ns_per_call(1'000'000, [&] { sink = encode_op(put).size(); }));
    row("put op decode", ns_per_call(1'000'000, [&] { sink = decode_op(encoded_put).ok(); }));
    row("get result encode (10 keys)", ns_per_call(500'000, [&] {
            sink = encode_result(get_result).size();
        }));
    row("get result decode (10 keys)", ns_per_call(500'000, [&] {
            sink = decode_result(encoded_get).ok();
        }));
    bench_api_json(get_result);

    return bench_snapshot(keys) ? 0 : 1;
}
