// The ResourceSlice and Node calls the publisher makes, over any RestClient: paths, selectors,
// the v1 -> v1beta2 fallback, and the error conventions of spec §3.2.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/kube/rest_client.h"
#include "nlohmann/json.hpp"

namespace topodra::publish {

class ResourceSliceApi {
 public:
  explicit ResourceSliceApi(kube::RestClient* client) : client_(client) {}

  struct SliceList {
    std::vector<nlohmann::json> items;
    std::string resource_version;
  };
  // Lists the slices of one driver on one node. The first list also settles the API version:
  // v1, or v1beta2 (same JSON) when the server does not serve v1 (404 on the collection).
  absl::StatusOr<SliceList> List(const std::string& driver, const std::string& node);
  // Streams events after resource_version with bookmarks until the server ends the stream after
  // timeout_seconds, the handler returns false, or *stop is set.
  absl::Status Watch(const std::string& driver, const std::string& node,
                     const std::string& resource_version, int timeout_seconds,
                     const kube::WatchHandler& handler, const std::atomic<bool>* stop);
  // Strict field validation, so a field the server does not know is an error, not a silent drop.
  absl::StatusOr<kube::Response> Create(const nlohmann::json& slice, bool dry_run = false);
  absl::StatusOr<kube::Response> Update(const nlohmann::json& slice);
  // With uid and resourceVersion preconditions; an object already gone counts as deleted.
  absl::Status Delete(const std::string& name, const std::string& uid,
                      const std::string& resource_version);
  absl::StatusOr<std::string> NodeUid(const std::string& node);

  std::string api_version() const;  // "resource.k8s.io/v1" or "resource.k8s.io/v1beta2"

 private:
  std::string Collection() const;
  kube::RestClient* client_;
  mutable std::mutex mu_;
  std::string version_ = "v1";
};

}  // namespace topodra::publish
