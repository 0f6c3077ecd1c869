// Picks the concrete CPUs of a claim. Pure: a topology and a request in, a CpuSet out.
//
// Isolation first: the claim touches the fewest NUMA nodes, then shares the fewest physical cores
// with anyone, then touches the fewest L3 caches. The answer is the best under the order below,
// found exactly (not by greedy passes as the kubelet's static CPU manager does), so it is never
// worse than the kubelet's packed takeByTopology on (NUMA nodes, partial cores, L3 groups).
#pragma once

#include <vector>

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
// Order, each step breaking the ties of the one before:
//  1. Fewest NUMA nodes.
//  2. Fewest cores held in part: cores of which the answer takes some online threads but not all,
//     whether the others are free or held by another claim. Offline siblings do not count, so a
//     core is whole with its online threads.
//  3. Fewest L3 caches (on machines without L3: fewest NUMA-node-within-package groups).
//  4. Fewest fully free cores cut (taken in part), then fewest fully free L3 groups cut: when a
//     partial core or another group is unavoidable, the lone threads and the groups that other
//     claims already use go first, so whole cores and whole caches stay free for later claims.
//  5. Lowest CPU ids (the sorted lists compared element by element).
// Step 4 is there for fragmentation only, and both of its parts are needed: without it, random
// prepare/unprepare runs leave fewer whole free cores and L3 groups than the kubelet's packed
// policy does; without either part, fewer of that kind (FragmentsNoMoreThanKubeletPacked).
// Nothing else is: NUMA distance, package count and tightest fit are not part of the order.
// must_include CPUs are always in; their cores, caches and nodes count like any other.
//
// Errors: InvalidArgument for count < 1, must_include outside available (or offline), or
// must_include larger than count; ResourceExhausted when available has fewer usable CPUs than
// count. Messages quote count, available and must_include.
//
// How: every measure is a sum over cores, caches or nodes, so the best answer for k CPUs of a
// part of the machine combines the best answers of its parts (a knapsack over cores, then caches,
// then nodes, with the CPU ids as a bitset tie-break); that is exact, and costs about
// (CPUs asked) x (usable CPUs) steps: tens of microseconds for typical picks on 384 CPUs
// (test/bench/allocator_bench.cc).
absl::StatusOr<CpuSet> AllocateCpus(const topology::Topology& topo, const CpuRequest& req);

// What AllocateCpus reads of a topology that no request changes (each core's CPUs, cache group and
// node, each group's online CPUs), built once. A pick then visits only the cores of its
// available CPUs: walking every core of a 384-CPU machine and its CPU set was most of a one-CPU
// pick's cost (about 160 k of its 165 k instructions).
class CpuLayout {
 public:
  explicit CpuLayout(const topology::Topology& topo);

 private:
  friend absl::StatusOr<CpuSet> AllocateCpus(const CpuLayout& layout, const CpuRequest& req);
  struct CoreInfo {
    std::vector<int> cpus;  // online threads, ascending
    int group = 0;          // index into group_online_, numbered as the cores first name them
    int numa = 0;           // NUMA node id
  };
  std::vector<CoreInfo> cores_;    // in topology order
  std::vector<int> core_of_;       // CPU id -> index into cores_; -1 for no core's CPU
  std::vector<int> group_online_;  // online CPUs of each group on the whole machine
  // A CPU listed by two cores (only a hand-made topology can say so): every pick visits every
  // core, as a pick did before the layout.
  bool shared_cpus_ = false;
};

// The same answer as AllocateCpus(topo, req) for the topology `layout` was built from.
absl::StatusOr<CpuSet> AllocateCpus(const CpuLayout& layout, const CpuRequest& req);

}  // namespace topodra::allocation
