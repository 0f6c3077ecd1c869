#include "driver/node/extended_resource_check.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace topodra::node {

ExtendedResourceCheck::ExtendedResourceCheck(deviceclass::CheckMode mode,
                                             std::unique_ptr<deviceclass::MappingSource> source,
                                             std::vector<std::string> resources)
    : mode_(mode), source_(std::move(source)), resources_(std::move(resources)) {}

ExtendedResourceCheck::~ExtendedResourceCheck() { Stop(); }

ExtendedResourceCheck::Refused ExtendedResourceCheck::Decide(
    const std::vector<deviceclass::Mapping>& mappings, const std::vector<std::string>& resources) {
  Refused out;
  for (const deviceclass::Conflict& c : deviceclass::Conflicts(mappings, resources)) {
    out[c.resource] = deviceclass::Describe(c);
  }
  return out;
}

absl::StatusOr<ExtendedResourceCheck::Refused> ExtendedResourceCheck::Check() {
  watch_ = false;
  if (mode_ == deviceclass::CheckMode::kOff || source_ == nullptr || resources_.empty()) {
    return Refused{};
  }
  absl::StatusOr<std::vector<deviceclass::Mapping>> listed = source_->List();
  if (listed.ok()) {
    watch_ = true;
    return Decide(*listed, resources_);
  }
  const std::string why(listed.status().message());
  switch (deviceclass::OnListFailure(mode_, listed.status())) {
    case deviceclass::ListFailure::kFail:
      return absl::Status(listed.status().code(),
                          absl::StrCat("--extended-resource-check=on: cannot list DeviceClasses, "
                                       "so cannot tell whether DRA serves the device plugins' "
                                       "resources: ",
                                       why));
    case deviceclass::ListFailure::kNoCheck:
      spdlog::info(
          "--extended-resource-check=auto: DeviceClasses cannot be listed ({}); the device "
          "plugins are served without the check (grant list and watch on deviceclasses, or set "
          "--extended-resource-check=off)",
          why);
      return Refused{};
    case deviceclass::ListFailure::kRetry:
      spdlog::warn(
          "--extended-resource-check=auto: DeviceClasses cannot be listed yet ({}); the device "
          "plugins are served, and left out when a DeviceClass maps their resource",
          why);
      watch_ = true;
      return Refused{};
  }
  return Refused{};
}

void ExtendedResourceCheck::Watch(std::function<void(const Refused&)> on_change) {
  if (!watch_) return;
  source_->Watch(
      [this, on_change = std::move(on_change)](const std::vector<deviceclass::Mapping>& mappings) {
        on_change(Decide(mappings, resources_));
      });
}

void ExtendedResourceCheck::Stop() {
  if (source_ != nullptr) source_->Stop();
}

}  // namespace topodra::node
