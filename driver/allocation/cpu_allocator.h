// Picks the concrete CPUs of a claim. Pure: a topology and a request in, a CpuSet out.
//
// The choice minimises, in this order: NUMA nodes used, L3 caches used, cores split. That order
// is what the kubelet's static CPU manager (takeByTopology, packed) aims at too, but it gets there
// by greedy passes that can miss; here each candidate placement is scored, so the result is never
// worse than a packed greedy on the same input on those three measures, compared in that order.
#pragma once

#include "absl/status/statusor.h"
#include "topology/cpuset.h"
#include "topology/topology.h"

namespace topodra::allocation {

struct CpuRequest {
  int count = 0;  // CPUs wanted, >= 1
  // CPUs that may be taken: online, not reserved, not held by other claims, possibly already
  // restricted to one NUMA node or socket group. CPUs the topology does not list as online are
  // ignored, as if absent.
  CpuSet available;
  // CPUs that must be part of the answer (a device plugin's must_include); a subset of available.
  CpuSet must_include;
};

// Returns exactly req.count CPUs: a superset of req.must_include and a subset of req.available.
//
// Policy, each step breaking the ties of the one before:
//  1. Fewest NUMA nodes. A request that fits in one node stays in one node.
//  2. Fewest L3 caches (on machines without L3: fewest NUMA-node-within-package groups).
//  3. Fewest split cores: a core is split when the answer takes some of its available threads
//     and leaves others free, which is what fragments the machine. Taking the last free threads
//     of a core another claim already uses is not a split, so those leftovers are preferred over
//     breaking a fresh core. A core whose siblings are offline is whole with its online threads.
//  4. Fewest packages, then the smallest sum of NUMA distances between the chosen nodes.
//  5. Tightest fit: the fewest free CPUs left behind in the chosen caches, then in the chosen
//     NUMA nodes, so large free blocks stay whole for large requests.
//  6. Lowest CPU ids.
// must_include CPUs are taken first; their nodes and caches are part of every candidate.
//
// Errors: InvalidArgument for count < 1, must_include outside available (or offline), or
// must_include larger than count; ResourceExhausted when available has fewer usable CPUs than
// count. Messages quote count, available and must_include.
//
// Cost: linear in cores per candidate; candidates are the NUMA node sets of the minimal size
// (all of them when there are at most kMaxNumaCombinations, otherwise a greedy family seeded
// from every node). On a 384-CPU machine that is tens to a few hundred microseconds; heavily
// fragmented machines with large requests can approach a millisecond.
absl::StatusOr<CpuSet> AllocateCpus(const topology::Topology& topo, const CpuRequest& req);

// Above this many NUMA node combinations of the minimal size, candidates come from greedy growth
// around each node instead of exhaustive enumeration.
inline constexpr int kMaxNumaCombinations = 64;

}  // namespace topodra::allocation
