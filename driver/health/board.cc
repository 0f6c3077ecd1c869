#include "driver/health/board.h"

#include <utility>

namespace topodra::health {

void Board::Set(std::vector<DeviceStatus> devices) {
  std::vector<std::function<void()>> call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (devices == now_.devices && now_.version != 0) return;
    now_.devices = std::move(devices);
    ++now_.version;
    call = listeners_;
  }
  for (const auto& fn : call) fn();
}

Board::Snapshot Board::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

void Board::Listen(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.push_back(std::move(fn));
}

}  // namespace topodra::health
