// A cell's replication keys as the kernel's vl_mac_keys record holds them (the sending key
// first), for the tests of the codec (tests/unit) and of the kernel programs (tests/bpf).
#pragma once

#include <initializer_list>

#include "voltlock/wire.h"

namespace voltlock::test_support {

inline vl_mac_keys keys_of(std::initializer_list<vl_mac_key> keys)
{
    vl_mac_keys out{};
    for (const vl_mac_key& key : keys) out.key[out.count++] = key;
    return out;
}

}  // namespace voltlock::test_support
