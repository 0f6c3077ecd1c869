// The cluster's DeviceClasses, as far as extended resources go (extended_resources.h): the one
// piece of I/O behind the device plugins' check. The real source lists and watches them through
// a kube::Informer; tests give the node a double.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/deviceclass/extended_resources.h"

namespace topodra::kube {
class RestClient;
}

namespace topodra::deviceclass {

class MappingSource {
 public:
  using OnChange = std::function<void(const std::vector<Mapping>&)>;
  virtual ~MappingSource() = default;
  // One list now: every mapping, sorted. The list's error as the REST client has it.
  virtual absl::StatusOr<std::vector<Mapping>> List() = 0;
  // From now until Stop, on a thread of its own: `on_change` with every mapping whenever they
  // differ from what the last List or call gave. Failures are retried with backoff, the last
  // mappings kept meanwhile; each change between failing and working is logged once.
  virtual void Watch(OnChange on_change) = 0;
  // Ends the watch; on_change is not called after it returns. Idempotent.
  virtual void Stop() = 0;
};

// DeviceClasses of resource.k8s.io v1, else v1beta2, else v1beta1 (the first the server
// serves). `client` outlives the source.
std::unique_ptr<MappingSource> NewApiMappingSource(kube::RestClient* client);

}  // namespace topodra::deviceclass
