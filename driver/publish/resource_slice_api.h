// The ResourceSlice and Node calls the publisher makes, over any RestClient: paths, the API
// version the list settled (v1 or v1beta2), and the error conventions of spec §3.2. Listing and
// watching are the informer's (driver/kube/informer.h).
#pragma once

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

  // The collection in each API version the publisher speaks, newest first: v1, or v1beta2 (same
  // JSON) on a server that does not serve v1. The informer lists the first one served.
  static std::vector<std::string> Collections();
  // Writes go to `collection` (one of Collections()) from now on.
  void UseCollection(const std::string& collection);
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
