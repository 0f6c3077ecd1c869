// What the allocator tests compare against, written here from the policy's definitions and share
// nothing with driver/allocation:
//  - PlacementOf: the measures of a chosen set (NUMA nodes, cores held in part, L3 groups, and the
//    fragmentation counts), counted straight from the topology;
//  - KubeletPacked: the kubelet static CPU manager's takeByTopology in packed mode (its
//    cpu_assignment.go, without the uncore-cache option): whole NUMA nodes and sockets (the
//    larger first), then whole cores, then single CPUs, each candidate list ordered by the fewest
//    free CPUs first, then id.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "topology/cpuset.h"
#include "topology/topology.h"

namespace topodra::allocation::reference {

// The cache group of a core: its L3, or on machines without one, its NUMA node within its package
// (the stand-in the policy documents).
inline std::tuple<int, int, int> GroupOf(const topology::Core& c) {
  if (c.l3 != topology::kNone) return {0, c.l3, 0};
  return {1, c.numa, c.package};
}

struct Placement {
  int numa = 0;           // NUMA nodes the set touches
  int partial = 0;        // cores of which the set holds some but not all online threads
  int l3 = 0;             // cache groups the set touches
  int broken_cores = 0;   // cores fully available before that the set holds in part
  int broken_groups = 0;  // groups fully available before that the set holds in part
  // The order of the issue: NUMA nodes, partial cores, L3 groups.
  std::tuple<int, int, int> Isolation() const { return {numa, partial, l3}; }
  std::tuple<int, int, int, int, int> Full() const {
    return {numa, partial, l3, broken_cores, broken_groups};
  }
};

inline Placement PlacementOf(const topology::Topology& topo, const CpuSet& available,
                             const CpuSet& chosen) {
  std::set<int> numa;
  std::map<std::tuple<int, int, int>, std::tuple<int, int, int>> groups;  // online, avail, taken
  Placement p;
  for (const topology::Core& c : topo.cores) {
    const int online = c.cpus.Size();
    const int avail = (c.cpus & available).Size();
    const int taken = (c.cpus & chosen).Size();
    auto& [g_online, g_avail, g_taken] = groups[GroupOf(c)];
    g_online += online;
    g_avail += avail;
    g_taken += taken;
    if (taken == 0) continue;
    numa.insert(c.numa);
    if (taken < online) {
      ++p.partial;
      if (avail == online) ++p.broken_cores;
    }
  }
  for (const auto& [key, counts] : groups) {
    const auto [online, avail, taken] = counts;
    if (taken == 0) continue;
    ++p.l3;
    if (avail == online && taken < online) ++p.broken_groups;
  }
  p.numa = static_cast<int>(numa.size());
  return p;
}

// Cores whose online threads are all in `free`, and cache groups likewise.
inline int FreeWholeCores(const topology::Topology& topo, const CpuSet& free) {
  int n = 0;
  for (const topology::Core& c : topo.cores) n += c.cpus.IsSubsetOf(free) ? 1 : 0;
  return n;
}
inline int FreeWholeGroups(const topology::Topology& topo, const CpuSet& free) {
  std::map<std::tuple<int, int, int>, bool> whole;
  for (const topology::Core& c : topo.cores) {
    auto [it, inserted] = whole.try_emplace(GroupOf(c), true);
    it->second = it->second && c.cpus.IsSubsetOf(free);
  }
  int n = 0;
  for (const auto& [key, w] : whole) n += w ? 1 : 0;
  return n;
}

// takeByTopology, packed. The kubelet sees online CPUs only, so everything here is counted over
// topo.cores. Its per-socket and per-core sizes are machine averages (CPUs / sockets, CPUs /
// cores), as the kubelet's are; a unit whose free count differs from the average is not "free".
class KubeletPacked {
 public:
  explicit KubeletPacked(const topology::Topology& topo) : topo_(topo) {
    std::set<int> sockets, nodes;
    for (size_t i = 0; i < topo.cores.size(); ++i) {
      const topology::Core& c = topo.cores[i];
      for (int cpu : c.cpus) {
        cpus_.push_back({cpu, static_cast<int>(i), c.numa, c.package});
        sockets.insert(c.package);
        nodes.insert(c.numa);
        ++node_total_[c.numa];
        ++socket_total_[c.package];
      }
    }
    std::sort(cpus_.begin(), cpus_.end(),
              [](const CpuInfo& a, const CpuInfo& b) { return a.id < b.id; });
    const int n_cpus = static_cast<int>(cpus_.size());
    cpus_per_core_ = topo.cores.empty() ? 0 : n_cpus / static_cast<int>(topo.cores.size());
    cpus_per_socket_ = sockets.empty() ? 0 : n_cpus / static_cast<int>(sockets.size());
    numa_first_ = sockets.size() >= nodes.size();
  }

  // Exactly `count` CPUs of `available`, or the empty set when there are too few.
  CpuSet Take(const CpuSet& available, int count) const {
    Run run{*this, available, count};
    if (run.need > run.FreeTotal()) return CpuSet();
    if (numa_first_) {
      run.TakeFullNuma();
      run.TakeFullSockets();
    } else {
      run.TakeFullSockets();
      run.TakeFullNuma();
    }
    run.TakeFullCores();
    run.TakeRemaining();
    return run.result;
  }

 private:
  struct CpuInfo {
    int id, core, numa, socket;
  };

  struct Run {
    Run(const KubeletPacked& k, const CpuSet& available, int count) : k(k), need(count) {
      for (const CpuInfo& c : k.cpus_) {
        if (available.Contains(c.id)) {
          free.Add(c.id);
          ++free_total;
        }
      }
    }
    const KubeletPacked& k;
    int need;
    int free_total = 0;
    CpuSet free;
    CpuSet result;

    int FreeTotal() const { return free_total; }
    void Take(const std::vector<int>& ids) {
      for (int id : ids) {
        free.Remove(id);
        result.Add(id);
        --need;
      }
    }
    // Free CPUs per core, node or socket, counted now.
    std::map<int, int> FreeBy(int CpuInfo::*field) const {
      std::map<int, int> out;
      for (const CpuInfo& c : k.cpus_) {
        if (free.Contains(c.id)) ++out[c.*field];
      }
      return out;
    }
    // Ids of `field` with free CPUs, fewest free first, then id.
    std::vector<int> Sorted(int CpuInfo::*field) const {
      const std::map<int, int> counts = FreeBy(field);
      std::vector<int> out;
      for (const auto& [id, n] : counts) out.push_back(id);
      std::sort(out.begin(), out.end(), [&](int a, int b) {
        return std::make_pair(counts.at(a), a) < std::make_pair(counts.at(b), b);
      });
      return out;
    }
    // A lower level ordered inside each unit of the higher one, in the higher one's order; a
    // unit reached twice (a socket spread over NUMA nodes) keeps its first place.
    std::vector<int> Nested(const std::vector<int>& outer, int CpuInfo::*outer_field,
                            int CpuInfo::*field) const {
      const std::map<int, int> counts = FreeBy(field);
      std::map<int, std::set<int>> inside;
      for (const CpuInfo& c : k.cpus_) {
        if (free.Contains(c.id)) inside[c.*outer_field].insert(c.*field);
      }
      std::vector<int> out;
      std::set<int> seen;
      for (int o : outer) {
        std::vector<int> ids(inside[o].begin(), inside[o].end());
        std::sort(ids.begin(), ids.end(), [&](int a, int b) {
          return std::make_pair(counts.at(a), a) < std::make_pair(counts.at(b), b);
        });
        for (int id : ids) {
          if (seen.insert(id).second) out.push_back(id);
        }
      }
      return out;
    }
    std::vector<int> SortedNuma() const {
      if (k.numa_first_) return Sorted(&CpuInfo::numa);
      return Nested(Sorted(&CpuInfo::socket), &CpuInfo::socket, &CpuInfo::numa);
    }
    std::vector<int> SortedSockets() const {
      if (!k.numa_first_) return Sorted(&CpuInfo::socket);
      return Nested(Sorted(&CpuInfo::numa), &CpuInfo::numa, &CpuInfo::socket);
    }
    std::vector<int> SortedCores() const {
      if (k.numa_first_) return Nested(SortedSockets(), &CpuInfo::socket, &CpuInfo::core);
      return Nested(SortedNuma(), &CpuInfo::numa, &CpuInfo::core);
    }
    std::vector<int> FreeIn(int CpuInfo::*field, int id) const {
      std::vector<int> out;
      for (const CpuInfo& c : k.cpus_) {
        if (c.*field == id && free.Contains(c.id)) out.push_back(c.id);
      }
      return out;
    }
    std::vector<int> FreeInCore(int core) const {
      std::vector<int> out;
      for (int cpu : k.topo_.cores[static_cast<size_t>(core)].cpus) {
        if (free.Contains(cpu)) out.push_back(cpu);
      }
      return out;
    }
    void TakeFullNuma() {
      const std::map<int, int> counts = FreeBy(&CpuInfo::numa);
      std::vector<int> whole;
      for (int n : SortedNuma()) {
        if (counts.at(n) == k.node_total_.at(n)) whole.push_back(n);
      }
      for (int n : whole) {
        if (need > 0 && need >= k.node_total_.at(n)) Take(FreeIn(&CpuInfo::numa, n));
      }
    }
    void TakeFullSockets() {
      const std::map<int, int> counts = FreeBy(&CpuInfo::socket);
      std::vector<int> whole;
      for (int s : SortedSockets()) {
        if (counts.at(s) == k.cpus_per_socket_) whole.push_back(s);
      }
      for (int s : whole) {
        if (need > 0 && need >= k.socket_total_.at(s)) Take(FreeIn(&CpuInfo::socket, s));
      }
    }
    void TakeFullCores() {
      if (need <= 0) return;
      const std::map<int, int> counts = FreeBy(&CpuInfo::core);
      std::vector<int> whole;
      for (int c : SortedCores()) {
        if (counts.at(c) == k.cpus_per_core_) whole.push_back(c);
      }
      for (int c : whole) {
        const int size = k.topo_.cores[static_cast<size_t>(c)].cpus.Size();
        if (need > 0 && need >= size) Take(FreeInCore(c));
      }
    }
    void TakeRemaining() {
      if (need <= 0) return;
      for (int c : SortedCores()) {
        for (int cpu : FreeInCore(c)) {
          if (need > 0) Take({cpu});
        }
      }
    }
  };

  const topology::Topology& topo_;
  std::vector<CpuInfo> cpus_;
  std::map<int, int> node_total_, socket_total_;
  int cpus_per_core_ = 0;
  int cpus_per_socket_ = 0;
  bool numa_first_ = true;
};

}  // namespace topodra::allocation::reference
