// A histogram of latencies with fixed, logarithmic buckets: counts only, so it costs an array
// increment per sample and readers compute quantiles over any interval from two snapshots (what
// the web UI's p50/p99 charts do, like Prometheus's histogram_quantile).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace voltlock {

class LatencyHistogram {
public:
    // Upper bounds 8 us * sqrt(2)^i: 8 us to 11.6 s, each bucket about 41% wider than the one
    // before, so a quantile interpolated inside one is off by at most a fifth. A last bucket
    // holds everything slower.
    static constexpr size_t kBounds = 42;

    LatencyHistogram()
    {
        for (size_t i = 0; i < kBounds; i++) {
            const double bound_us = 8.0 * std::pow(2.0, static_cast<double>(i) / 2.0);
            bounds_us_[i] = static_cast<uint64_t>(std::llround(bound_us));
        }
    }

    void record(uint64_t latency_us)
    {
        size_t bucket = 0;
        while (bucket < kBounds && latency_us > bounds_us_[bucket]) bucket++;
        counts_[bucket] += 1;
        count_ += 1;
        sum_us_ += latency_us;
    }

    uint64_t count() const { return count_; }

    // {"bounds_us", "counts", "count", "sum_us"}: counts[i] is the number of samples in bucket i
    // (at most bounds_us[i], more than the bound before), counts has one more entry than
    // bounds_us (slower than every bound), and everything counts from the process's start.
    nlohmann::json json() const
    {
        return nlohmann::json{{"bounds_us", bounds_us_},
                              {"counts", counts_},
                              {"count", count_},
                              {"sum_us", sum_us_}};
    }

private:
    std::array<uint64_t, kBounds> bounds_us_{};
    std::array<uint64_t, kBounds + 1> counts_{};
    uint64_t count_ = 0;
    uint64_t sum_us_ = 0;
};

}  // namespace voltlock
