// Picks the GPUs of a device-plugin GetPreferredAllocation. Pure: a topology and a request in,
// PCI bus ids out.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "topology/topology.h"

namespace topodra::allocation {

struct GpuRequest {
  int count = 0;  // allocation_size, >= 1
  // PCI bus ids (dddd:bb:dd.f) the kubelet offers, in any order. Ids the topology does not list
  // as GPUs are ignored (they may be another driver's devices); repeats count once.
  std::vector<std::string> available;
  // PCI bus ids that must be part of the answer; each must be a known GPU listed in available.
  std::vector<std::string> must_include;
};

// Returns exactly req.count PCI bus ids, sorted: a superset of req.must_include and a subset of
// the known GPUs in req.available.
//
// The GPUs are seen as leaves of one tree: machine -> NUMA node -> host bridge (pcie_root) ->
// PCI bridges (Gpu::pci_path) -> GPU; GPUs without a NUMA node hang from one shared pseudo node,
// and a GPU without a pci_path from its pcie_root alone. Policy, each step breaking the ties of the
// one before:
//  1. Fewest NUMA nodes. A GPU without a NUMA node counts as a node of its own.
//  2. Fewest PCIe roots (host bridges). A GPU without a known root counts as a root of its own.
//  3. Closest in the PCI tree: the smallest sum, over every pair of chosen GPUs, of the number of
//     tree edges between the two. Two functions of one device are 2 apart, two GPUs on ports of
//     the same PCIe switch 4 (GPU, port, switch, port, GPU); the deeper the bridge two GPUs
//     share, the closer they are. A sum, not a maximum: it also prefers uneven splits (3 + 1
//     has fewer far pairs than 2 + 2) when a request must span nodes or switches.
//  4. When the topology has a NUMA distance matrix: the smallest sum of distances between the
//     chosen NUMA nodes (over ordered pairs of distinct nodes; GPUs without a node add nothing).
//  5. Lowest PCI bus ids (the sorted answer is lexicographically smallest).
// must_include GPUs are in every candidate, so they count towards every measure.
//
// Steps 1-3 and 5 are exact for any number of GPUs: each measure is a sum over tree nodes and
// edges, so a knapsack over the tree (one table per subtree, indexed by how many GPUs it gives)
// finds the optimum without enumerating combinations. Step 4 is not such a sum; it is applied
// exactly by re-solving the top of the tree for every set of NUMA nodes no larger than the
// optimal count, as long as there are at most kMaxNumaNodeSets such sets; beyond that (only on
// machines with many NUMA nodes holding GPUs) step 4 is skipped and ties fall to step 5.
// On the 16-GPU DGX-2 export a request takes under 100 microseconds even in an unoptimised
// (Debug) build; the tables hold at most count + 1 entries, so the cost grows with the number of
// GPUs offered times count squared, never with the number of combinations.
//
// Errors: InvalidArgument for count < 1, an id of must_include that is not a known GPU or not in
// available, must_include larger than count, or more than kMaxGpus known GPUs offered;
// ResourceExhausted when available holds fewer known GPUs than count. Messages quote the values.
absl::StatusOr<std::vector<std::string>> PreferGpus(const topology::Topology& topo,
                                                    const GpuRequest& req);

// Largest number of known GPUs one request may offer (chosen sets are fixed-size bitmaps).
inline constexpr int kMaxGpus = 256;

// Above this many candidate NUMA node sets, step 4 (NUMA distance) is not applied.
inline constexpr int kMaxNumaNodeSets = 256;

}  // namespace topodra::allocation
