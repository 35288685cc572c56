// Basic vocabulary of the VR core, in the paper's words (VR Revisited, Liskov & Cowling 2012).
#pragma once

#include <cstdint>
#include <string>

namespace voltlock {

using View = uint64_t;          // view-number
using Op = uint64_t;            // op-number; ops are numbered from 1, 0 means "none"
using ReplicaIndex = uint8_t;   // replica-number, 0..replica_count-1
using ClientId = uint64_t;
// Reserved: entries the cell itself puts in the log (Replica: the restart fence). Requests from
// this client id are refused.
inline constexpr ClientId kCellClientId = 0;
using RequestNumber = uint64_t;
using Bytes = std::string;      // opaque payloads and results

// One operation in the log: what the client asked for, and the leader's clock when it was
// assigned its op-number, so that every replica applies it with the same time.
struct Entry {
    uint64_t timestamp_ms = 0;
    ClientId client_id = 0;
    RequestNumber request_number = 0;
    Bytes payload;

    bool operator==(const Entry&) const = default;
};

enum class Status : uint8_t {
    normal = 1,       // VL_STATUS_NORMAL
    view_change = 2,  // VL_STATUS_VIEW_CHANGE
    recovering = 3,   // VL_STATUS_RECOVERING
};

const char* status_name(Status status);

}  // namespace voltlock
