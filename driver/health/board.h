// The health of one DRA driver's devices as its health streams send it: the node writes it
// (Set) whenever it has looked at the machine; every open stream sends the changed list at once
// and the full list again on its own timer. Thread-safe; no I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "driver/health/health.h"

namespace topodra::health {

class Board {
 public:
  struct Snapshot {
    uint64_t version = 0;  // bumped by every Set that changed something
    std::vector<DeviceStatus> devices;
  };
  // Replaces the list; listeners are called (outside the lock) when it differs.
  void Set(std::vector<DeviceStatus> devices);
  Snapshot Get() const;
  // Called after every change, from the thread that called Set. Listeners are added before
  // anything calls Set concurrently (at plugin start) and live as long as the board.
  void Listen(std::function<void()> fn);

 private:
  mutable std::mutex mu_;
  Snapshot now_;
  std::vector<std::function<void()>> listeners_;
};

}  // namespace topodra::health
