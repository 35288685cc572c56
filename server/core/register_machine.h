// A small state machine for driving and testing the replication core before the lock service:
// one register. Every operation goes through the log, so reads are linearizable.
//
// Operations (payload):  'W' value...  write the value      'R'  read
// Result: 16 bytes, u64 version (writes so far) then u64 digest of every value written, in
// order. The version of a write is its position among all writes, which lets a checker recover
// the order the cell chose; the digest lets it compare states without the values.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/state_machine.h"

namespace voltlock {

class RegisterMachine final : public StateMachine {
public:
    struct Result {
        uint64_t version = 0;
        uint64_t digest = 0;
        bool operator==(const Result&) const = default;
    };

    Bytes apply(Op op, const Entry& entry) override;

    uint64_t version() const { return version_; }
    uint64_t digest() const { return digest_; }
    uint64_t state_digest() const override { return digest_; }
    // The register is for measuring replication: its version counts the writes it applied, and
    // a restart that lost some starts counting again from its snapshot.
    void skip_past_lost_writes() override {}
    // It counts writes and nothing else: no time.
    uint64_t time_ms() const override { return 0; }
    void reset() override { *this = RegisterMachine{}; }
    // Snapshot: u32 magic "VLR1", u64 version, u64 digest, u32 value length, the value.
    Bytes snapshot() const override;
    bool restore(std::string_view snapshot) override;
    const Bytes& value() const { return value_; }

    static Bytes write_op(const Bytes& value) { return "W" + value; }
    static Bytes read_op() { return "R"; }
    static bool is_write(const Bytes& payload) { return !payload.empty() && payload[0] == 'W'; }
    // Decodes a result; false if `result` is not one (an unknown operation's result).
    static bool parse_result(const Bytes& result, Result& out);
    static uint64_t next_digest(uint64_t digest, const Bytes& value);

private:
    uint64_t version_ = 0;
    uint64_t digest_ = 0;
    Bytes value_;
};

}  // namespace voltlock
