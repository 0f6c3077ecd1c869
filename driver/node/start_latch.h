// Background work the node starts with (the DRA drivers' checks of their claims' files), counted
// so that later background work can wait for it to end: the confirmation of a stored machine
// model (Node::SettleStoredTopology) runs hwloc, which would otherwise take a CPU from the
// kubelet's registration and the check on a small node.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace topodra::node {

class StartLatch {
 public:
  enum class WaitEnd { kDone, kTimedOut, kStopped };

  // How many Done calls Wait waits for.
  void Expect(size_t pieces) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = pieces;
  }
  // One piece ended, whatever its outcome. More calls than expected are ignored.
  void Done() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_ > 0) --pending_;
    }
    cv_.notify_all();
  }
  // Wakes every waiter; Wait answers kStopped from now on.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }
  // Until every expected piece ended, Stop, or `timeout`, whichever comes first.
  WaitEnd Wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return pending_ == 0 || stopped_; });
    if (stopped_) return WaitEnd::kStopped;
    return pending_ == 0 ? WaitEnd::kDone : WaitEnd::kTimedOut;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t pending_ = 0;    // guarded by mu_
  bool stopped_ = false;  // guarded by mu_
};

}  // namespace topodra::node
