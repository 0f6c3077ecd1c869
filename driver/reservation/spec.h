// A Reservation (topodra.io/v1alpha1, charts/topodra/crds/reservations.topodra.io.yaml) as plain
// values: what to hold, for whom, for how long. Pure: JSON in, values or errors out. The daemon
// checks everything the CRD schema checks again, because the CRD installed on a cluster may be
// older than the daemon (or edited).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "driver/claims/allocation_result.h"
#include "nlohmann/json.hpp"
#include "topology/cpuset.h"

namespace topodra::reservation {

inline constexpr char kGroup[] = "topodra.io";
inline constexpr char kVersion[] = "v1alpha1";
inline constexpr char kPlural[] = "reservations";

struct CpuWant {
  int count = 0;                 // always set after parsing (the cpuset's size when only that)
  std::optional<CpuSet> cpuset;  // exactly these CPUs
  std::optional<int> numa_node;  // take them from this NUMA node
  std::optional<int> socket;     // ... or this package
  bool operator==(const CpuWant&) const = default;
};

struct GpuWant {
  int count = 0;                     // always set after parsing
  std::vector<std::string> devices;  // device names (gpu-0000-3b-00-0) or PCI bus ids
  bool operator==(const GpuWant&) const = default;
};

struct LabelRequirement {
  enum class Op { kIn, kNotIn, kExists, kDoesNotExist };
  std::string key;
  Op op = Op::kExists;
  std::vector<std::string> values;
  bool operator==(const LabelRequirement&) const = default;
};

struct LabelSelector {
  std::map<std::string, std::string> match_labels;
  std::vector<LabelRequirement> match_expressions;
  bool operator==(const LabelSelector&) const = default;
};

// Matches the claim's controller ownerReference; empty api_version/uid match any.
struct ControllerMatch {
  std::string api_version;
  std::string kind;
  std::string name;
  std::string uid;
  bool operator==(const ControllerMatch&) const = default;
};

// One owner: every field that is set must match (AND). A spec's owners are ORed.
struct Owner {
  std::optional<std::string> ns;
  std::optional<std::string> claim_name;
  std::optional<LabelSelector> claim_selector;
  std::optional<ControllerMatch> controller;
  bool operator==(const Owner&) const = default;
};

struct Spec {
  std::string node_name;
  std::optional<CpuWant> cpus;
  std::optional<GpuWant> gpus;
  std::vector<Owner> owners;
  std::optional<absl::Duration> ttl;
  std::optional<absl::Time> expires;
  bool pre_allocation = false;
  bool allocate_once = true;
  bool operator==(const Spec&) const = default;
};

// InvalidArgument naming the JSON path and value: `spec.cpus.cpuset: "4-x" is not a CPU list`.
absl::StatusOr<Spec> ParseSpec(const nlohmann::json& spec);

// A Reservation object as the API server holds it. The spec is parsed separately (spec_error
// says why it is not usable), so a bad spec can still be reported in the object's status.
struct Object {
  std::string name;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  absl::Time created = absl::InfinitePast();
  bool deleting = false;  // metadata.deletionTimestamp is set
  nlohmann::json spec = nlohmann::json::object();
  nlohmann::json status = nlohmann::json::object();
  std::optional<Spec> parsed;  // nullopt when spec_error is set
  std::string spec_error;
};
// InvalidArgument only when the object cannot be identified (no name or uid).
absl::StatusOr<Object> ParseObject(const nlohmann::json& object);

// "30m", "1h30m", "90s", "500ms" (Go durations without fractions or signs; what the CRD allows).
absl::StatusOr<absl::Duration> ParseDuration(const std::string& text);
// RFC 3339 with seconds ("2026-11-22T10:00:00Z"), and back (UTC, whole seconds).
absl::StatusOr<absl::Time> ParseRfc3339(const std::string& text);
std::string Rfc3339(absl::Time t);

bool Matches(const LabelSelector& selector, const std::map<std::string, std::string>& labels);
bool Matches(const Owner& owner, const claims::Claim& claim);
// True when any owner matches.
bool IsOwner(const Spec& spec, const claims::Claim& claim);

// When the reservation expires: expires, or created + ttl; nullopt for never.
std::optional<absl::Time> ExpiryOf(const Spec& spec, absl::Time created);

}  // namespace topodra::reservation
