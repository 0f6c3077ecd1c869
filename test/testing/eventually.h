// Polls a condition of a component running in other threads or processes until it holds or the
// limit passes. The limit is a hang guard for a loaded CI machine, not a timing assertion.
#pragma once

#include <chrono>
#include <thread>

namespace topodra::testing {

template <typename F>
bool Eventually(F condition, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

}  // namespace topodra::testing
