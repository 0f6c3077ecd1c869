#include "driver/node/component.h"

#include <spdlog/spdlog.h>

namespace topodra::node {

ComponentList::~ComponentList() {
  Stop();
  // Later ones may hold pointers into earlier ones.
  while (!components_.empty()) components_.pop_back();
}

absl::Status ComponentList::Start() {
  for (; started_ < components_.size(); ++started_) {
    spdlog::debug("starting {}", components_[started_]->name());
    if (absl::Status st = components_[started_]->Start(); !st.ok()) {
      Stop();
      return st;
    }
  }
  return absl::OkStatus();
}

void ComponentList::Stop() {
  while (started_ > 0) {
    --started_;
    spdlog::debug("stopping {}", components_[started_]->name());
    components_[started_]->Stop();
  }
}

void ComponentList::OnInventory(const Inventory& now) {
  for (const std::unique_ptr<Component>& c : components_) c->OnInventory(now);
}

std::vector<std::string> ComponentList::Names() const {
  std::vector<std::string> out;
  for (const std::unique_ptr<Component>& c : components_) out.push_back(c->name());
  return out;
}

}  // namespace topodra::node
