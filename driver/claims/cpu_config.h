// The opaque cpuset config of a claim, compatible with kubernetes-sigs/dra-driver-cpu:
//   {"apiVersion":"v1alpha1","cpuConfig":{"cpuset":"2-11"}}
// and its check against the node before anything is prepared. Pure: the node's state comes in as
// values, so the kubelet plugin, the checkpoint replay and the tests all share one set of rules.
//
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/claims/allocation_result.h"
#include "nlohmann/json.hpp"
#include "topology/cpuset.h"
#include "topology/topology.h"

namespace topodra::claims {

inline constexpr std::string_view kCpuCapacityName = "dra.cpu/cpu";
inline constexpr std::string_view kCpuConfigApiVersion = "v1alpha1";

// Decodes opaque parameters strictly: unknown fields at any level, a missing or other apiVersion,
// and a missing, empty or unparsable cpuset are InvalidArgument errors quoting the value.
absl::StatusOr<CpuSet> ParseCpuConfig(const nlohmann::json& parameters);

// Who already holds a CPU on this node, for messages.
struct ClaimRef {
  std::string namespace_name;
  std::string name;
  std::string uid;
};

struct NodeCpuState {
  CpuSet reserved;        // --reserved-cpus
  CpuSet held_by_others;  // CPUs prepared for other claims
  // Who holds a CPU of held_by_others, as messages name it ("claim ns/name (uid u)",
  // "device-plugin allocation ..."); may be empty or answer nullopt, then the message says
  // "another claim".
  std::function<std::optional<std::string>(int cpu)> holder;
  // CPUs held by Reservations this claim is not an owner of, and which one holds a CPU
  // (`Reservation "r1"`), for messages.
  CpuSet reserved_for_others;
  std::function<std::string(int cpu)> reservation;
};

// The node's CPU pool as published: what each device name stands for.
enum class CpuDeviceKind {
  kIndividual,  // one CPU, named exactly; no consumed capacity
  kGroup,       // a NUMA node or socket: the driver picks `dra.cpu/cpu` CPUs inside it
  kMachine,     // every CPU: the claim must name its CPUs with an opaque cpuset config
};
struct CpuDevice {
  CpuDeviceKind kind = CpuDeviceKind::kGroup;
  CpuSet cpus;  // individual: its CPU; groups: the usable CPUs of the group
};
struct CpuPool {
  std::string name;  // the pool name (the node name)
  std::map<std::string, CpuDevice> devices;
};

struct CpuAssignment {
  int result_index = 0;  // into Claim::results
  std::string request;   // as in the result: "<main>" or "<main>/<sub>"
  std::string base_request;
  std::string pool;
  std::string device;
  std::string share_id;
  // Set when a config names the CPUs or the device is one CPU; otherwise the allocator picks
  // `count` CPUs of `device_cpus` later.
  std::optional<CpuSet> explicit_cpus;
  CpuSet device_cpus;
  int count = 0;  // the consumed capacity; equals explicit_cpus->Size() when set
};

// One assignment per result of `driver`, in claim order, or the first violation as
// InvalidArgument prefixed with `claim <ns>/<name>` (and `request "<r>"` when it is about one
// result). Config precedence: claim configs override class configs; two applicable configs of the
// same source are ambiguous and rejected. Results must name a device of `pool`. An explicit
// cpuset must lie inside its group device; the machine device requires one; individual devices
// take no cpuset config (the device is the CPU).
absl::StatusOr<std::vector<CpuAssignment>> ResolveCpuAssignments(
    const Claim& claim, std::string_view driver, const topology::Topology& topo,
    const NodeCpuState& node, const CpuPool& pool,
    std::string_view cpu_capacity_name = kCpuCapacityName);

}  // namespace topodra::claims
