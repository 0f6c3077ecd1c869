// DRA extended resources (KEP-5004) as a node with a device plugin must see them: a DeviceClass
// whose spec.extendedResourceName is, say, topodra.io/gpu makes the scheduler serve pods asking
// `resources.limits: {topodra.io/gpu: 1}` through DRA wherever the node's allocatable has none
// of it. A device plugin registering the same name on a node would take those requests back
// while explicit claims could still allocate the same hardware through DRA, so a node must not
// serve one name both ways (k8s-1.35-1.37-addendum.md §2.5). Pure: DeviceClass objects and the
// device plugins' names in, what not to serve out.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace topodra::deviceclass {

// --extended-resource-check.
enum class CheckMode {
  kAuto,  // list and watch DeviceClasses; not allowed to or not served: no check
  kOn,    // the same; a failed list at start is an error
  kOff,   // no check: every device plugin is served
};
absl::StatusOr<CheckMode> ParseCheckMode(const std::string& s);  // auto | on | off
const char* CheckModeName(CheckMode m);

// A DeviceClass that maps an extended resource name.
struct Mapping {
  std::string device_class;  // metadata.name
  std::string resource;      // spec.extendedResourceName
  auto operator<=>(const Mapping&) const = default;
};

// The mapping of one DeviceClass as the API server sends it (any of v1, v1beta2, v1beta1: the
// field has the same name and place); nullopt when it maps no name. Every class also has an
// implicit name, deviceclass.resource.kubernetes.io/<class>, which no device plugin can register
// (the kubelet refuses kubernetes.io names), so only the explicit field counts. Outside input:
// an error names the field and the value, never throws.
absl::StatusOr<std::optional<Mapping>> MappingOf(const nlohmann::json& device_class);

// A device plugin's resource that DeviceClasses map.
struct Conflict {
  std::string resource;
  std::vector<std::string> device_classes;  // sorted
  bool operator==(const Conflict&) const = default;
};

// The resources of `plugin_resources` that any of `mappings` maps, in the order of
// `plugin_resources`. Any class counts, not only the one the scheduler picks when several map a
// name (the later created): whichever it picks, the node serves the name through DRA.
std::vector<Conflict> Conflicts(const std::vector<Mapping>& mappings,
                                const std::vector<std::string>& plugin_resources);

// For the log: `DeviceClass "gpu.topodra.io" maps "topodra.io/gpu" (spec.extendedResourceName)`.
std::string Describe(const Conflict& conflict);

// What the device plugins do when the DeviceClasses cannot be listed at start.
enum class ListFailure {
  kFail,     // the daemon does not start (--extended-resource-check=on)
  kNoCheck,  // serve every device plugin and never look again: the API server does not let us
             // (403) or serves no DeviceClasses (404)
  kRetry,    // serve every device plugin and keep trying: a passing failure
};
// `error` as kube::RestClient maps HTTP answers (403 PermissionDenied, 404 NotFound).
ListFailure OnListFailure(CheckMode mode, const absl::Status& error);

}  // namespace topodra::deviceclass
