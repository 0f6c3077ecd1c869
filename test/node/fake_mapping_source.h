// The cluster's DeviceClasses as a test sets them: what List answers, and the changes the test
// pushes to whoever watches. The source is owned by the code under test; the test keeps the
// shared state.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "driver/deviceclass/mapping_source.h"

namespace topodra::node::testing {

class FakeMappingSource : public deviceclass::MappingSource {
 public:
  struct Shared {
    std::mutex mu;
    absl::StatusOr<std::vector<deviceclass::Mapping>> list = std::vector<deviceclass::Mapping>{};
    OnChange on_change;
    int lists = 0;
    bool watching = false;
    bool stopped = false;

    // As the real source after a watch event: on the caller's thread.
    void Push(const std::vector<deviceclass::Mapping>& mappings) {
      OnChange f;
      {
        std::lock_guard<std::mutex> lock(mu);
        f = on_change;
      }
      if (f) f(mappings);
    }
  };

  explicit FakeMappingSource(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  absl::StatusOr<std::vector<deviceclass::Mapping>> List() override {
    std::lock_guard<std::mutex> lock(shared_->mu);
    ++shared_->lists;
    return shared_->list;
  }
  void Watch(OnChange on_change) override {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->on_change = std::move(on_change);
    shared_->watching = true;
  }
  void Stop() override {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->on_change = nullptr;
    shared_->stopped = true;
  }

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace topodra::node::testing
