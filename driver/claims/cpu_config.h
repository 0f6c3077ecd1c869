// The opaque cpuset config of a claim, compatible with kubernetes-sigs/dra-driver-cpu:
//   {"apiVersion":"v1alpha1","cpuConfig":{"cpuset":"2-11"}}
// with topodra's own optional "numaMemory" beside "cpuset" (either may be left out, not both):
//   {"apiVersion":"v1alpha1","cpuConfig":{"numaMemory":["local","2-3"]}}
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

// Which NUMA nodes the memory of a claim's containers comes from (--numa-memory=claim):
//   "local"          the nodes of the claim's CPUs (the default without a numaMemory field)
//   "all"            every memory node of the machine: the claim does not narrow memory
//   ["local","2-3"]  the local nodes and nodes 2 and 3 (CPU-less HBM or CXL memory tiers)
//   ["2-3"]          nodes 2 and 3 only
// A string is the same as a list holding it. Node lists use the Linux list format.
struct NumaMemory {
  bool local = true;
  bool all = false;
  CpuSet nodes;  // named nodes (ids), besides the local ones when `local`
  bool operator==(const NumaMemory&) const = default;
};
// The largest node id accepted: Linux has at most 1024 nodes (NODES_SHIFT <= 10).
inline constexpr int kMaxNumaNodeId = 1023;
// At most this many list entries: each is a node list already.
inline constexpr size_t kMaxNumaMemoryEntries = 64;

// A whole cpuConfig: cpuset and numaMemory are each optional, one of them is there.
struct CpuConfig {
  std::optional<CpuSet> cpuset;
  std::optional<NumaMemory> numa_memory;
};

// Decodes opaque parameters strictly: unknown fields at any level, a missing or other apiVersion,
// an empty or unparsable cpuset, an invalid numaMemory (ParseNumaMemory) and a cpuConfig with
// neither are InvalidArgument errors quoting the value.
absl::StatusOr<CpuConfig> ParseCpuConfigParameters(const nlohmann::json& parameters);
// The same, for a config that must name its CPUs: a missing cpuset is an error.
absl::StatusOr<CpuSet> ParseCpuConfig(const nlohmann::json& parameters);
// cpuConfig.numaMemory alone (the JSON value of the field): "local", "all", a node list, or a
// non-empty list of those; "all" stands alone, nothing is named twice, node ids are at most
// kMaxNumaNodeId. Errors name the entry ("cpuConfig.numaMemory[1]") and quote the value.
absl::StatusOr<NumaMemory> ParseNumaMemory(const nlohmann::json& value);

// The memory nodes of a claim's result holding `cpus` under `policy`: the NUMA nodes of `cpus`
// when local, the named nodes, or with `all` every node of the machine that has memory (every
// node when the topology does not say). Named nodes must be NUMA nodes of `topo`:
// InvalidArgument naming the missing ones and the machine's nodes otherwise.
absl::StatusOr<CpuSet> MemoryNodes(const NumaMemory& policy, const CpuSet& cpus,
                                   const topology::Topology& topo);

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
  // From the config's numaMemory; nullopt: none given (local). Named nodes are checked against
  // the topology already.
  std::optional<NumaMemory> numa_memory;
};

// One assignment per result of `driver`, in claim order, or the first violation as
// InvalidArgument prefixed with `claim <ns>/<name>` (and `request "<r>"` when it is about one
// result). Config precedence: claim configs override class configs; two applicable configs of the
// same source are ambiguous and rejected. Results must name a device of `pool`. An explicit
// cpuset must lie inside its group device; the machine device requires one; individual devices
// take no cpuset config (the device is the CPU), only a numaMemory one. A numaMemory naming a node
// the topology lacks is rejected here.
absl::StatusOr<std::vector<CpuAssignment>> ResolveCpuAssignments(
    const Claim& claim, std::string_view driver, const topology::Topology& topo,
    const NodeCpuState& node, const CpuPool& pool,
    std::string_view cpu_capacity_name = kCpuCapacityName);

}  // namespace topodra::claims
