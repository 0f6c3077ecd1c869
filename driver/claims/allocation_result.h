// What a node driver reads from a ResourceClaim: identity, and the allocation's device results and
// configs (spec/k8s-api-cdi.md §2.2). Parsed strictly by type, leniently by field set: the API
// server adds fields over releases, so unknown fields of the claim itself are ignored, but a known
// field of the wrong type is an error naming its JSON path.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace topodra::claims {

// Well above the API limits (32 results, 64 configs), so a future raise does not break us, while
// still bounding what outside input can make us walk.
inline constexpr int kMaxResults = 256;
inline constexpr int kMaxConfigs = 256;
inline constexpr int kMaxRequestsPerConfig = 256;

struct DeviceResult {
  std::string request;  // "<main>" or, for a firstAvailable subrequest, "<main>/<sub>"
  std::string driver;
  std::string pool;
  std::string device;
  std::string share_id;  // empty unless the device allows multiple allocations
  bool admin_access = false;
  // Capacity name -> quantity text as the API server stored it ("4", "4000m").
  std::map<std::string, std::string> consumed_capacity;
};

enum class ConfigSource { kFromClass, kFromClaim };
const char* ConfigSourceName(ConfigSource source);

struct DeviceConfig {
  ConfigSource source = ConfigSource::kFromClaim;
  std::vector<std::string> requests;  // empty: applies to every request
  std::string driver;                 // opaque.driver
  nlohmann::json parameters;          // opaque.parameters, a JSON object, undecoded
};

// An ownerReference of the claim (metadata.ownerReferences[] with controller: true).
struct ControllerRef {
  std::string api_version;
  std::string kind;
  std::string name;
  std::string uid;
  bool operator==(const ControllerRef&) const = default;
};

struct Claim {
  std::string uid;
  std::string namespace_name;
  std::string name;
  bool allocated = false;             // status.allocation is present
  std::vector<DeviceResult> results;  // status.allocation.devices.results, in order
  std::vector<DeviceConfig> configs;  // status.allocation.devices.config, in order
  // "namespace/name" of the pods in status.reservedFor, for log lines.
  std::vector<std::string> pods;
  // metadata.labels and the controller reference: what Reservation owners match on.
  std::map<std::string, std::string> labels;
  std::optional<ControllerRef> controller;
  // metadata.annotations["resource.kubernetes.io/pod-claim-name"]: the pod's name for a claim
  // made from a ResourceClaimTemplate ("" for a claim the pod names itself).
  std::string pod_claim_name;

  // "namespace/name", the form every claim-scoped message starts with.
  std::string Ref() const;
};

// Errors are InvalidArgument and name the JSON path: `status.allocation.devices.results[2].pool:
// expected a string, got number`. A config without `opaque` is an error: it is a config kind this
// driver does not know, and silently preparing without it could give the wrong CPUs.
absl::StatusOr<Claim> ParseClaim(const nlohmann::json& claim);

// "main/sub" -> "main"; "main" -> "main".
std::string BaseRequest(std::string_view request);

// The results allocated from `driver`, in claim order. Pointers into claim.results.
std::vector<const DeviceResult*> ResultsForDriver(const Claim& claim, std::string_view driver);

// The configs of `driver` that apply to `result` (requests empty, naming the base request, or
// naming the exact "main/sub"), class configs first, then claim configs, each in claim order: a
// later entry overrides an earlier one. Pointers into claim.configs.
std::vector<const DeviceConfig*> ConfigsFor(const Claim& claim, const DeviceResult& result,
                                            std::string_view driver);

}  // namespace topodra::claims
