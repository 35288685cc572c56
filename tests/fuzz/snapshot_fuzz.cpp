// The snapshot decoders: decode_replica_snapshot (server/core/replica.cpp), which reads what a
// replica restores from its data directory or fetches from a peer, and LockMachine::restore
// (server/core/lock_machine.cpp), which reads the state machine's part. The replica snapshot
// ends in a CRC-32C; the target appends the right one to the input (as an honest writer would)
// so the fuzzer explores the parsers, not the checksum. Properties: no crash; a state restore()
// accepts passes check_invariants() and snapshots back to bytes that restore to the same state.
#include <string>

#include "core/checksum.h"
#include "core/lock_machine.h"
#include "core/replica.h"
#include "fuzz_check.h"

using namespace voltlock;

namespace {

void restore_machine(std::string_view bytes)
{
    LockMachine machine;
    if (!machine.restore(bytes)) return;
    machine.check_invariants();
    const Bytes again = machine.snapshot();
    LockMachine copy;
    FUZZ_REQUIRE(copy.restore(again));
    FUZZ_REQUIRE(copy.state_digest() == machine.state_digest());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    std::string bytes(fuzz::as_text(data, size));
    const uint32_t checksum = crc32c(bytes);
    for (int shift = 0; shift < 32; shift += 8)
        bytes.push_back(static_cast<char>(checksum >> shift));  // little-endian, as ByteWriter
    const auto snapshot = decode_replica_snapshot(bytes);
    // The same bytes as the machine's own snapshot: the fuzzer reaches restore() directly too.
    restore_machine(fuzz::as_text(data, size));
    if (!snapshot) return 0;
    FUZZ_REQUIRE(snapshot->last_normal_view <= snapshot->view);
    restore_machine(snapshot->machine);
    return 0;
}
