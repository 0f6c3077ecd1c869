// What the legacy device-plugin API (v1beta1) means for topodra, as pure functions: the device
// list ListAndWatch reports, the choice GetPreferredAllocation answers with and what Allocate
// hands out, all against the one node State the DRA path uses too. No I/O, no clock, no gRPC:
// DevicePluginService locks, writes and journals around these.
//
// Device ids: a GPU is its PCI bus id ("0000:3b:00.0"), a CPU its decimal id ("17"). Both are
// stable across restarts and are what an operator sees in sysfs.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cdi/spec.h"
#include "driver/prepare/planner.h"
#include "driver/state/state.h"
#include "nlohmann/json.hpp"
#include "topology/topology.h"

namespace topodra::deviceplugin {

enum class ResourceKind { kCpu, kGpu };

// One extended resource topodra serves through the device-plugin API.
struct ResourceSetup {
  ResourceKind kind = ResourceKind::kGpu;
  std::string resource;  // "topodra.io/gpu"; also the CDI kind of its allocations
  CpuSet reserved;       // kCpu: never listed
  // kCpu with --enforce=cgroup: the hook goes into every allocation's CDI spec, and no
  // allocation may empty the shared pool.
  std::optional<prepare::CpusetHook> cpuset_hook;
  // kGpu: the GPUs served, by PCI bus id, with the device nodes a container needs.
  std::map<std::string, prepare::GpuDevice> gpus;
  // kGpu: GPUs of `gpus` that are unhealthy now (driver/health), PCI bus id -> cause: listed
  // Unhealthy, never offered or allocated, and never a reason to fail a request for others.
  std::map<std::string, std::string> unhealthy;
  // prepare::CdiInstanceMarker of this daemon, in the name of every CDI file ("" for none).
  std::string cdi_marker;
};

struct Device {
  std::string id;
  bool healthy = true;
  std::vector<int> numa_nodes;  // empty: no NUMA affinity known
  bool operator==(const Device&) const = default;
};

// The full list for ListAndWatch, sorted (CPUs numerically, GPUs by PCI bus id).
//  * Healthy: can be allocated through the device plugin now, or is allocated through it.
//  * Unhealthy: a GPU the health checks find faulty (ResourceSetup::unhealthy), a device held by
//    a DRA claim (counted in capacity, never allocatable, so the kubelet
//    never offers it), a CPU that went offline, or a GPU that disappeared while a device-plugin
//    allocation still holds it (the pod keeps seeing it, as unhealthy).
// Reserved CPUs are not listed at all.
std::vector<Device> ListDevices(const ResourceSetup& setup, const topology::Topology& topo,
                                const state::State& held);

// GetPreferredAllocation for one container: exactly `size` ids from `available`, containing
// every id of `must_include`, chosen by the allocator the DRA path uses (CPUs: fewest NUMA
// nodes, L3 caches and split cores; GPUs: fewest NUMA nodes, then PCIe roots, then closest in
// the PCI tree). Ids held by a DRA claim or unhealthy are not offered even when the kubelet
// lists them (it may not have seen the change yet): they never fail the request for the others.
// Deterministic; sorted like ListDevices. InvalidArgument for malformed or unknown ids and
// impossible requests, ResourceExhausted when too few are available; messages quote the values.
absl::StatusOr<std::vector<std::string>> PreferredAllocation(
    const ResourceSetup& setup, const topology::Topology& topo, const state::State& held,
    const std::vector<std::string>& available, const std::vector<std::string>& must_include,
    int size);

// What a container gets for one Allocate request (ContainerAllocateResponse).
struct DeviceNodeGrant {
  std::string container_path, host_path, permissions;
  bool operator==(const DeviceNodeGrant&) const = default;
};
struct ContainerGrant {
  std::map<std::string, std::string> envs;
  std::vector<DeviceNodeGrant> devices;
  std::vector<std::string> cdi_devices;  // fully qualified: "topodra.io/gpu=<allocation id>"
  bool operator==(const ContainerGrant&) const = default;
};
nlohmann::json GrantToJson(const ContainerGrant& grant);
absl::StatusOr<ContainerGrant> GrantFromJson(const nlohmann::json& j);

struct AllocatePlan {
  // kDevicePlugin, phase Prepared, owner "<resource>/<allocation id>", answer and cdi set.
  state::Allocation allocation;
  ContainerGrant grant;
  std::string cdi_file;
  cdi::Spec cdi_spec;
  // The kubelet is the authority over device-plugin devices: when it hands out ids an earlier
  // device-plugin allocation of this resource still holds (an init container's devices reused,
  // or a pod gone before we noticed), that allocation gives them up. These are the earlier
  // allocations as they must become; one without devices left is to be removed.
  std::vector<state::Allocation> shrunk;
  // True when an identical allocation exists already (Allocate repeated): nothing to change.
  bool replay = false;
};

// Allocate for one container. Every id must be a device of this resource, healthy (online CPU,
// not reserved; GPU present and not unhealthy) and not held by a DRA claim; otherwise
// InvalidArgument (unknown, malformed, repeated ids) or FailedPrecondition (unhealthy, held through
// DRA), naming the id and, for a DRA holder, the claim.
absl::StatusOr<AllocatePlan> PlanAllocate(const ResourceSetup& setup,
                                          const topology::Topology& topo, const state::State& held,
                                          const std::vector<std::string>& ids);

// "<resource>/<16 hex digits>": a digest of the resource and the sorted ids, so a repeated
// Allocate of the same devices is recognised as the same allocation.
std::string AllocationOwner(const std::string& resource, std::vector<std::string> ids);
// The device ids an allocation of `setup`'s resource holds, sorted like ListDevices.
std::vector<std::string> DeviceIds(const ResourceSetup& setup, const state::Allocation& a);
// True when `a` is a device-plugin allocation of `resource`.
bool IsAllocationOf(const std::string& resource, const state::Allocation& a);
// The CDI spec file of one allocation: "<resource with '/' as '_'>-dp_<allocation id>.json", or
// "..._i<marker>.json" with a marker (prepare::CdiInstanceMarker).
std::string DpCdiFileName(const std::string& resource, const std::string& owner,
                          const std::string& marker = "");
bool IsDpCdiFileOf(const std::string& resource, const std::string& file_name);

// Device-plugin allocations of `resource` of which the kubelet reports none of the devices as
// assigned to a container (`assigned`: every id it reports for the resource).
std::vector<std::string> UnusedAllocations(const state::State& held, const std::string& resource,
                                           const std::set<std::string>& assigned);

}  // namespace topodra::deviceplugin
