// Which device-plugin devices the kubelet has given to which container, from the kubelet's
// PodResources API v1 (List). The device-plugin API never says which pod an Allocate was for;
// this is where the daemon learns it. The only file that sees the PodResources protobuf types.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace topodra::plugin {

// Where the kubelet serves the API, under its root directory (default /var/lib/kubelet).
inline std::string PodResourcesSocket(const std::string& kubelet_root) {
  return kubelet_root + "/pod-resources/kubelet.sock";
}

// Devices the kubelet reports as assigned to one container, for one extended resource.
struct AssignedDevices {
  std::string pod_namespace, pod_name, container, resource;
  std::vector<std::string> device_ids;
  bool operator==(const AssignedDevices&) const = default;
};

class PodResourcesLister {  // interface so the daemon's logic can be tested without gRPC
 public:
  virtual ~PodResourcesLister() = default;
  // Every container's device-plugin devices (ContainerResources.devices) of every pod the kubelet
  // knows, in the kubelet's order. A resource entry without device IDs is left out: it assigns
  // nothing.
  virtual absl::StatusOr<std::vector<AssignedDevices>> List() = 0;
};

// gRPC client of <socket_path>; each List() call has `timeout`. Unavailable (with the socket path
// in the message) when the kubelet does not answer: no socket, nobody listening, or no answer
// within the timeout. Other errors keep the kubelet's code. Safe to call from several threads;
// never throws.
std::unique_ptr<PodResourcesLister> NewPodResourcesClient(std::string socket_path,
                                                          absl::Duration timeout);

}  // namespace topodra::plugin
