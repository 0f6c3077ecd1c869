// --extended-resource-check: which device plugins the cluster's DeviceClasses leave out. A
// DeviceClass whose spec.extendedResourceName is a device plugin's resource makes the scheduler
// serve that name through DRA; the node then must not serve it through the device plugin too
// (driver/deviceclass/extended_resources.h). The DevicePlugins component asks Check before it
// serves anything and follows every later decision.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/deviceclass/extended_resources.h"
#include "driver/deviceclass/mapping_source.h"

namespace topodra::node {

class ExtendedResourceCheck {
 public:
  // Resource -> why it is not served (which DeviceClasses map it).
  using Refused = std::map<std::string, std::string>;

  // `resources`: the device plugins' resource names. `source` may be null (mode off).
  ExtendedResourceCheck(deviceclass::CheckMode mode,
                        std::unique_ptr<deviceclass::MappingSource> source,
                        std::vector<std::string> resources);
  ~ExtendedResourceCheck();  // Stop()

  // One list of the DeviceClasses: what not to serve now. A list that fails is an error with
  // mode on; with auto, forbidden or not served ends the check (said once), anything else
  // leaves every plugin served until the watch gets a list through.
  absl::StatusOr<Refused> Check();
  // After Check: `on_change` gets every later decision (on the watch's thread) until Stop.
  // Nothing when the check has ended.
  void Watch(std::function<void(const Refused&)> on_change);
  void Stop();

  // The pure step, for tests: the mappings to what not to serve.
  static Refused Decide(const std::vector<deviceclass::Mapping>& mappings,
                        const std::vector<std::string>& resources);

 private:
  const deviceclass::CheckMode mode_;
  std::unique_ptr<deviceclass::MappingSource> source_;
  const std::vector<std::string> resources_;
  bool watch_ = false;
};

}  // namespace topodra::node
