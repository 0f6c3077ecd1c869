// Arbitrary bytes as a ResourceClaim (its names, annotations and request names end up in host
// paths) and as the stored form of metadata files (the journal): the device metadata planner must
// return a status, never crash, and every file it plans must lie below its root and mount at the
// container path of its claim, with a CDI spec that validates.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cdi/spec.h"
#include "driver/claims/allocation_result.h"
#include "driver/prepare/device_metadata.h"
#include "nlohmann/json.hpp"

namespace {

namespace claims = topodra::claims;
namespace prepare = topodra::prepare;

constexpr char kRoot[] = "/k/plugins/dra.cpu/dra-device-metadata";

bool HasDotDot(const std::string& path) {
  return absl::StrContains(path, "/../") || absl::StrContains(path, "/./") ||
         absl::EndsWith(path, "/..") || absl::StrContains(path, "//");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  (void)prepare::MetadataFilesFromJson(j);
  if (j.is_object() && j.contains("stored")) (void)prepare::MetadataFilesFromJson(j["stored"]);
  absl::StatusOr<claims::Claim> claim = claims::ParseClaim(j);
  if (!claim.ok()) return 0;
  std::vector<prepare::MetadataDevice> devices;
  for (const claims::DeviceResult& r : claim->results) {
    nlohmann::json published = nlohmann::json::object();
    for (const auto& [name, quantity] : r.consumed_capacity)
      published[name] = {{"string", quantity}};
    devices.push_back(
        {r.request, r.pool, r.device, {{"dra.cpu/cpuset", {{"string", "0-3"}}}}, published});
  }
  absl::StatusOr<prepare::DeviceMetadataPlan> plan =
      prepare::PlanDeviceMetadata(*claim, "dra.cpu", kRoot, devices);
  if (!plan.ok()) return 0;
  for (const prepare::MetadataFile& f : plan->files) {
    if (!absl::StartsWith(f.host_path, std::string(kRoot) + "/") || HasDotDot(f.host_path)) {
      std::abort();
    }
    if (!topodra::cdi::Validate(f.cdi_spec).ok() || f.cdi_spec.devices.size() != 1) std::abort();
    const auto& mounts = f.cdi_spec.devices[0].container_edits.mounts;
    if (mounts.size() != 1 || mounts[0].host_path != f.host_path) std::abort();
    if (!absl::StartsWith(mounts[0].container_path,
                          std::string(prepare::kContainerMetadataRoot) + "/") ||
        HasDotDot(mounts[0].container_path)) {
      std::abort();
    }
    // The content is a stream of two objects, each valid JSON.
    const size_t split = f.content.find("}\n{");
    if (split == std::string::npos) std::abort();
    if (nlohmann::json::parse(f.content.substr(0, split + 1), nullptr, false).is_discarded() ||
        nlohmann::json::parse(f.content.substr(split + 2), nullptr, false).is_discarded()) {
      std::abort();
    }
  }
  absl::StatusOr<std::vector<prepare::MetadataFile>> back =
      prepare::MetadataFilesFromJson(prepare::MetadataFilesToJson(plan->files));
  if (!back.ok() || *back != plan->files) std::abort();
  return 0;
}
