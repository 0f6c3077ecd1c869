// Where a Reservation's CPUs and GPUs go: the same policies as claims (driver/allocation: fewest
// NUMA nodes, one L3, whole cores, tightest fit; GPUs closest in the PCI tree). Pure.
#pragma once

#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "driver/reservation/spec.h"
#include "topology/topology.h"

namespace topodra::reservation {

// What the node has and who holds what, at the moment of placing.
struct NodeView {
  CpuSet reserved_cpus;                     // --reserved-cpus: never reservable
  CpuSet busy_cpus;                         // held by claims and device-plugin allocations
  CpuSet other_reservations;                // placed for other reservations
  std::map<std::string, std::string> gpus;  // published GPUs: device name -> PCI bus id
  std::set<std::string> busy_gpus;          // PCI bus ids
  std::set<std::string> reserved_gpus;      // PCI bus ids placed for other reservations
};

struct Placement {
  CpuSet cpus;
  std::set<std::string> gpus;  // PCI bus ids
  bool operator==(const Placement&) const = default;
};

// Errors: FailedPrecondition when the spec can never be placed on this node (a CPU or GPU it
// names does not exist or is --reserved-cpus, more CPUs than the NUMA node has, ...);
// ResourceExhausted when it cannot be placed now (busy or reserved by others) but might later.
// Messages name the values. With pre_allocation, busy CPUs and GPUs may be placed (free ones
// first): they become reserved as they are released.
absl::StatusOr<Placement> Place(const Spec& spec, const topology::Topology& topo,
                                const NodeView& node);

}  // namespace topodra::reservation
