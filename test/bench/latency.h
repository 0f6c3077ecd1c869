// Latency figures shared by the benchmark programs: milliseconds, and p50/p99/max of samples.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace topodra::bench {

inline double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

struct Stats {
  double p50 = 0, p99 = 0, max = 0;
};

inline Stats Of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)], v.back()};
}

}  // namespace topodra::bench
