// Writes the binary seeds of tests/fuzz/corpus/ (op_codec, message, snapshot) with the codecs
// themselves, so that they stay valid inputs when an encoding changes: run it again then
// (docs/fuzzing.md). The text seeds (request_target, translate, config) are written by hand.
//   build/fuzz/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/lock_machine.h"
#include "core/lock_ops.h"
#include "core/message.h"
#include "core/replica.h"

using namespace voltlock;

namespace {

void write_seed(const std::filesystem::path& dir, const std::string& name, std::string_view bytes)
{
    std::filesystem::create_directories(dir);
    std::ofstream(dir / name, std::ios::binary).write(bytes.data(),
                                                      static_cast<std::streamsize>(bytes.size()));
}

// One op of each kind, as a client session's life would send them.
std::vector<std::pair<std::string, LockOp>> sample_ops()
{
    const Sequencer sequencer{.lock = "app/l", .mode = LockMode::exclusive, .generation = 1,
                              .session = 1};
    return {
        {"create_session", CreateSession{.ttl_ms = 10'000, .lock_delay_ms = 100, .name = "worker",
                                         .owner = "app"}},
        {"keepalive", KeepAlive{.session = 1}},
        {"acquire", Acquire{.lock = "app/l", .session = 1, .wait_ms = 0}},
        {"acquire_shared", Acquire{.lock = "app/s", .session = 1, .mode = LockMode::shared}},
        {"check_sequencer", CheckSequencer{.sequencer = sequencer}},
        {"put", Put{.key = "app/k", .value = "v1"}},
        {"put_cas", Put{.key = "app/k", .value = "v2", .prev_revision = 3,
                        .sequencer = sequencer}},
        {"put_ephemeral", Put{.key = "app/e", .value = "here", .session = 1}},
        {"get", Get{.key = "app/k"}},
        {"get_prefix", Get{.key = "app/", .prefix = true, .after = "app/a", .limit = 10,
                           .max_result_bytes = 1300}},
        {"barrier_enter", BarrierEnter{.barrier = "app/b", .session = 1, .count = 1}},
        {"barrier_leave", BarrierLeave{.barrier = "app/b", .session = 1}},
        {"release", Release{.lock = "app/s", .session = 1}},
        {"withdraw_wait", WithdrawWait{.lock = "app/s", .session = 1, .deadline_ms = 60'000}},
        {"withdraw_enter", WithdrawEnter{.barrier = "app/b", .session = 1, .deadline_ms = 60'000}},
        {"delete", Delete{.key = "app/k", .prev_revision = 6}},
        {"delete_prefix", Delete{.key = "app/", .prefix = true}},
        {"expire_session", ExpireSession{.session = 2, .lease_epoch = 1}},
        {"expire_waiters", ExpireWaiters{}},
        {"close_session", CloseSession{.session = 1}},
    };
}

// Applies the sample ops to `machine`; writes each op and its result as op_codec seeds and the
// machine's snapshot halfway through (locks, keys, a barrier) as a snapshot seed.
void write_op_and_snapshot_seeds(const std::filesystem::path& corpus, LockMachine& machine)
{
    Op op = 0;
    for (const auto& [name, lock_op] : sample_ops()) {
        const Bytes payload = encode_op(lock_op);
        write_seed(corpus / "op_codec", "op_" + name, payload);
        op += 1;
        const Bytes result =
            machine.apply(op, Entry{.timestamp_ms = 1'000'000 + op * 10, .payload = payload});
        write_seed(corpus / "op_codec", "result_" + name, result);
        if (name == "barrier_leave") write_seed(corpus / "snapshot", "machine", machine.snapshot());
    }
}

std::vector<std::pair<std::string, Message>> sample_messages()
{
    const Bytes payload = encode_op(Put{.key = "app/k", .value = "v"});
    const std::vector<Entry> entries{
        Entry{.timestamp_ms = 5, .client_id = 9, .request_number = 1, .payload = payload},
        Entry{.timestamp_ms = 6, .client_id = 9, .request_number = 2, .payload = payload}};
    return {
        {"request", Request{.view = 1, .client_id = 9, .request_number = 1, .payload = payload}},
        {"reply", Reply{.view = 1, .replica = 0, .client_id = 9, .request_number = 1,
                        .result = encode_result(PutResult{})}},
        {"prepare", Prepare{.view = 1, .replica = 0, .op = 2, .commit = 0, .entries = entries}},
        {"prepare_ok", PrepareOk{.view = 1, .replica = 1, .op = 2}},
        {"commit", Commit{.view = 1, .replica = 0, .commit = 2, .heartbeat = 7}},
        {"start_view_change", StartViewChange{.view = 2, .replica = 1}},
        {"do_view_change", DoViewChange{.view = 2, .replica = 1, .last_normal_view = 1, .op = 2,
                                        .commit = 1, .fence_view = 1}},
        {"start_view", StartView{.view = 2, .replica = 2, .op = 2, .commit = 1, .first_op = 0,
                                 .entries = entries}},
        {"recovery", Recovery{.replica = 1, .nonce = 42}},
        {"recovery_response", RecoveryResponse{.view = 2, .replica = 0, .nonce = 42, .op = 2,
                                               .commit = 1, .last_normal_view = 2}},
        {"get_state", GetState{.view = 2, .replica = 1, .op = 1}},
        {"replies", Replies{.view = 1,
                            .replica = 0,
                            .items = {{.client_id = 9, .request_number = 1, .commit = 2,
                                         .result = encode_result(PutResult{})},
                                        {.client_id = 10, .request_number = 3, .commit = 2}}}},
        {"requests", Requests{.view = 1,
                              .replica = 2,
                              .items = {{.client_id = 9, .request_number = 2, .payload = payload},
                                        {.client_id = 10, .request_number = 4,
                                         .payload = payload}}}},
    };
}

// The message target reads its first byte as the cell: 0 a checksum, 1 a replication key.
void write_message_seeds(const std::filesystem::path& corpus)
{
    for (const auto& [name, message] : sample_messages()) {
        const std::vector<uint8_t> datagram = encode(message, CellWire(7));
        std::string seed(1, '\0');
        seed.append(datagram.begin(), datagram.end());
        write_seed(corpus / "message", name, seed);
        seed[0] = 1;
        write_seed(corpus / "message", name + "_keyed", seed);
    }
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
        return 2;
    }
    const std::filesystem::path corpus = argv[1];
    LockMachine machine;
    write_op_and_snapshot_seeds(corpus, machine);
    write_message_seeds(corpus);
    // A replica's snapshot of that machine, without its trailing CRC-32C (the target adds it).
    ReplicaConfig config;
    config.cluster_id = 7;
    config.replica_count = 1;
    const Replica replica(config, machine, StartFresh{});
    const Bytes snapshot = replica.encode_snapshot();
    write_seed(corpus / "snapshot", "replica",
               std::string_view(snapshot).substr(0, snapshot.size() - 4));
    return 0;
}
