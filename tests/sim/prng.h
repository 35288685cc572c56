// The simulator's only source of randomness: xoshiro256** seeded through splitmix64. A seed gives
// the same run on every platform and standard library, which <random>'s distributions do not
// promise (std::uniform_int_distribution differs between libstdc++ and libc++), so none are used.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/assert.h"

namespace voltlock::sim {

inline uint64_t splitmix64(uint64_t& state)
{
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

class Prng {
public:
    explicit Prng(uint64_t seed)
    {
        for (uint64_t& word : state_) word = splitmix64(seed);
    }

    uint64_t next()
    {
        const uint64_t result = rotl(state_[1] * 5, 7) * 9;
        const uint64_t t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = rotl(state_[3], 45);
        return result;
    }

    // Uniform in [0, bound). Draws below 2^64 mod bound are rejected so every value is equally
    // likely.
    uint64_t below(uint64_t bound)
    {
        VL_ASSERT(bound > 0, "an empty range has nothing to draw");
        const uint64_t rejected = (0 - bound) % bound;
        for (;;) {
            const uint64_t draw = next();
            if (draw >= rejected) return draw % bound;
        }
    }

    // Uniform in [low, high].
    uint64_t between(uint64_t low, uint64_t high)
    {
        VL_ASSERT(low <= high && high - low < UINT64_MAX, "a range within 64 bits");
        return low + below(high - low + 1);
    }

    // Uniform in [0, 1), from the top 53 bits: exact in IEEE doubles, so the same everywhere.
    double fraction() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

    bool chance(double probability) { return fraction() < probability; }

    // A generator for a sub-system, so that its draws do not shift everyone else's.
    Prng fork() { return Prng(next()); }

    template <typename T>
    void shuffle(std::vector<T>& items)
    {
        for (size_t i = items.size(); i > 1; i--) std::swap(items[i - 1], items[below(i)]);
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

    uint64_t state_[4];
};

}  // namespace voltlock::sim
