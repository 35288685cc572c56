// SplitMix64 (Steele, Lea & Flood 2014): small, seeded, and the same sequence on every platform,
// for tests that fuzz bytes or draw a workload and must draw the same every run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace voltlock::test_support {

class SplitMix64 {
public:
    explicit SplitMix64(uint64_t seed) : state_(seed) {}

    uint64_t next()
    {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }

    // Uniform enough in [0, n) for n far below 2^64.
    size_t below(size_t n) { return static_cast<size_t>(next() % n); }

    uint8_t byte() { return static_cast<uint8_t>(next()); }

private:
    uint64_t state_;
};

}  // namespace voltlock::test_support
