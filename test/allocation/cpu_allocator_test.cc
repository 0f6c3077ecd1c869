// AllocateCpus on the shared machine exports and synthetic shapes. Expected answers are worked
// out by hand from `topodra topology` output of each fixture; the comparison test checks the
// promise against a packed greedy in the style of the kubelet's static CPU manager.
#include "driver/allocation/cpu_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "test/testing/fixtures.h"
#include "topology/discoverer.h"

namespace topodra::allocation {
namespace {

using ::testing::HasSubstr;
using topology::Core;
using topology::kNone;
using topology::Topology;

constexpr char kLinuxStyle[] = "synthetic:pack:2 numa:2 core:10 pu:2(indexes=2*40:1*2)";

// "synthetic:<desc>" or a file name under shared/topologies. Loaded once per test binary: the
// 384-CPU export takes a while to parse under ASan.
const Topology& Load(const std::string& spec) {
  static std::map<std::string, Topology> cache;
  auto it = cache.find(spec);
  if (it != cache.end()) return it->second;
  const std::string synthetic = "synthetic:";
  const bool is_synthetic = spec.rfind(synthetic, 0) == 0;
  return cache
      .emplace(spec, testing::LoadTopology(is_synthetic ? spec.substr(synthetic.size()) : spec))
      .first->second;
}

CpuSet Set(const char* text) {
  absl::StatusOr<CpuSet> s = CpuSet::Parse(text);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : CpuSet();
}

struct Case {
  const char* name;
  const char* machine;
  int count;
  const char* available;  // nullptr: every online CPU
  const char* must_include;
  const char* want;
};

// Fixture layouts the answers rely on:
//  16em64t-4s2c2t: one NUMA node, 4 packages each with one L3 and 2 cores; core siblings are N
//    and N+8, package p holds p, p+4, p+8, p+12.
//  16em64t-4s2c2t-offlines: online 0-1,3-4,6,12,15; L3 #0 = {0} {4,12}, #1 = {1}, #2 = {6},
//    #3 = {3} {15} (braces are cores).
//  Linux-style synthetic: 2 packages x 2 NUMA nodes x 10 cores, no L3, siblings N and N+40;
//    NUMA 0 = 0-9,40-49, NUMA 1 = 10-19,50-59.
//  192em64t-24n8c2t: 24 packages = 24 NUMA nodes = 24 L3s of 8 cores, siblings N and N+192;
//    node n = 8n..8n+7 and 192+8n..; distance 50 between nodes 2k and 2k+1, 65 or 79 otherwise.
//  64intel64-fakeKNL: one package, 4 NUMA nodes with CPUs, one L3 each, 4-way SMT (N, N+16,
//    N+32, N+48).
const Case kCases[] = {
    // Whole cores, one cache, tightest fit.
    {"4s2c2t_one_core", "16em64t-4s2c2t.xml", 2, nullptr, "", "0,8"},
    {"4s2c2t_one_package", "16em64t-4s2c2t.xml", 4, nullptr, "", "0,4,8,12"},
    // One whole core and one thread of the other core in the same package: the L3 holds 3, a
    // split is unavoidable with 2-thread cores, and the kubelet's packed order gives the same.
    {"4s2c2t_three", "16em64t-4s2c2t.xml", 3, nullptr, "", "0,4,8"},
    // Package 0 whole, then one thread of the lowest core of package 1.
    {"4s2c2t_five", "16em64t-4s2c2t.xml", 5, nullptr, "", "0-1,4,8,12"},
    {"4s2c2t_two_packages", "16em64t-4s2c2t.xml", 8, nullptr, "", "0-1,4-5,8-9,12-13"},
    // CPU 8 is held elsewhere: its sibling 0 is a leftover, taken before breaking a fresh core.
    {"4s2c2t_leftover_thread_first", "16em64t-4s2c2t.xml", 1, "0-7,9-15", "", "0"},
    // Package 0 has 3 free (the leftover 0 and core 4,12), the others 4: tightest fit.
    {"4s2c2t_tightest_package", "16em64t-4s2c2t.xml", 2, "0-7,9-15", "", "4,12"},
    // The same in the last package: the tighter package wins over lower ids.
    {"4s2c2t_tightest_last_package", "16em64t-4s2c2t.xml", 2, "0-10,12-15", "", "7,15"},
    {"4s2c2t_restricted", "16em64t-4s2c2t.xml", 4, "2-3,6-7,10-11,14-15", "", "2,6,10,14"},

    {"linux_one_core", kLinuxStyle, 2, nullptr, "", "0,40"},
    {"linux_one_thread", kLinuxStyle, 1, nullptr, "", "0"},
    {"linux_one_numa", kLinuxStyle, 20, nullptr, "", "0-9,40-49"},
    // NUMA 0 plus one whole core of NUMA 1, in the same package, not the other socket.
    {"linux_numa_plus_core", kLinuxStyle, 22, nullptr, "", "0-10,40-50"},
    {"linux_one_package", kLinuxStyle, 40, nullptr, "", "0-19,40-59"},
    // NUMA 0 has only 18 free: 22 needs two nodes either way; NUMA 2+3 (package 1, 40 free)
    // and NUMA 0+1 (package 0, 38 free) are both one package, and the tighter pair wins.
    {"linux_tighter_pair", kLinuxStyle, 22, "1-9,11-39,41-49,51-79", "", "1-9,11-12,41-49,51-52"},
    {"linux_numa1_only", kLinuxStyle, 4, "10-19,50-59", "", "10-11,50-51"},

    {"192_one_numa", "192em64t-24n8c2t.xml", 16, nullptr, "", "0-7,192-199"},
    // Node 0 and one thread of node 1, its nearest (distance 50).
    {"192_numa_plus_thread", "192em64t-24n8c2t.xml", 17, nullptr, "", "0-8,192-199"},
    // Node 0 has exactly 8 free: the tightest fit.
    {"192_tightest_numa", "192em64t-24n8c2t.xml", 8, "4-191,196-383", "", "4-7,196-199"},
    // Node 1 has exactly 8 free and node 0 all 16: the tighter node wins over lower ids.
    {"192_tightest_not_lowest", "192em64t-24n8c2t.xml", 8, "0-11,16-203,208-383", "",
     "8-11,200-203"},
    // Node 0 has 6 free, too few: the next tightest is any full node, the lowest being node 1.
    {"192_skip_too_small", "192em64t-24n8c2t.xml", 8, "5-191,197-383", "", "8-11,200-203"},
    // Node 1 is gone, so no pair with node 0 is at distance 50; nodes 2 and 3 are.
    {"192_nearest_pair", "192em64t-24n8c2t.xml", 17, "0-7,16-199,208-383", "", "16-24,208-215"},
    // CPU 0 must be in: node 0 plus a thread of a node at distance 65 (the lowest, node 2),
    // keeping CPU 0's own core whole.
    {"192_must_nearest", "192em64t-24n8c2t.xml", 17, "0-7,16-199,208-383", "0", "0-7,16,192-199"},

    {"knl_one_core", "64intel64-fakeKNL-SNC4-hybrid.xml", 4, nullptr, "", "0,16,32,48"},
    {"knl_two_threads", "64intel64-fakeKNL-SNC4-hybrid.xml", 2, nullptr, "", "0,16"},
    {"knl_one_numa", "64intel64-fakeKNL-SNC4-hybrid.xml", 16, nullptr, "", "0-3,16-19,32-35,48-51"},

    // A core with an offline sibling is whole with its online thread(s): L3 #3's two lone
    // threads are a tighter fit than core 4,12 in L3 #0.
    {"offline_two", "16em64t-4s2c2t-offlines.xml", 2, nullptr, "", "3,15"},
    {"offline_three", "16em64t-4s2c2t-offlines.xml", 3, nullptr, "", "0,4,12"},
    {"offline_four", "16em64t-4s2c2t-offlines.xml", 4, nullptr, "", "0-1,4,12"},
    // Offline CPUs listed as available are never handed out.
    {"offline_all", "16em64t-4s2c2t-offlines.xml", 7, "0-15", "", "0-1,3-4,6,12,15"},

    // must_include: taken first, the rest chosen around it.
    {"must_core_sibling", "16em64t-4s2c2t.xml", 2, nullptr, "9", "1,9"},
    {"must_package", "16em64t-4s2c2t.xml", 4, nullptr, "9", "1,5,9,13"},
    {"must_two_packages", "16em64t-4s2c2t.xml", 3, nullptr, "0-1", "0-1,8"},
    {"must_exact", "16em64t-4s2c2t.xml", 2, nullptr, "3,7", "3,7"},
    {"must_linux", kLinuxStyle, 3, nullptr, "45", "0,5,45"},
};

TEST(AllocateCpusTest, HandWorkedCases) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Topology& topo = Load(c.machine);
    CpuRequest req{.count = c.count,
                   .available = c.available == nullptr ? topo.online : Set(c.available),
                   .must_include = Set(c.must_include)};
    absl::StatusOr<CpuSet> got = AllocateCpus(topo, req);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->ToString(), c.want);
  }
}

TEST(AllocateCpusTest, SameInputSameOutput) {
  const Topology& topo = Load("192em64t-24n8c2t.xml");
  const CpuRequest req{.count = 37, .available = Set("3-100,150-300,333")};
  absl::StatusOr<CpuSet> first = AllocateCpus(topo, req);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<CpuSet> again = AllocateCpus(topo, req);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *first);
  }
}

struct ErrorCase {
  const char* name;
  int count;
  const char* available;
  const char* must_include;
  absl::StatusCode code;
  std::vector<std::string> mentions;
};

TEST(AllocateCpusTest, ImpossibleRequestsNameTheValues) {
  const ErrorCase kErrors[] = {
      {"zero", 0, "0-15", "", absl::StatusCode::kInvalidArgument, {"count 0", "\"0-15\""}},
      {"negative", -3, "0-15", "", absl::StatusCode::kInvalidArgument, {"count -3"}},
      {"too_many", 17, "0-15", "", absl::StatusCode::kResourceExhausted, {"17", "\"0-15\""}},
      {"too_many_restricted",
       5,
       "0-3",
       "",
       absl::StatusCode::kResourceExhausted,
       {"5 CPUs", "only 4", "\"0-3\""}},
      {"must_outside",
       2,
       "0-2",
       "3",
       absl::StatusCode::kInvalidArgument,
       {"must_include CPUs \"3\"", "\"0-2\""}},
      {"must_not_on_machine",
       2,
       "0-20",
       "20",
       absl::StatusCode::kInvalidArgument,
       {"must_include CPUs \"20\""}},
      {"must_too_big",
       1,
       "0-15",
       "0-1",
       absl::StatusCode::kInvalidArgument,
       {"must_include has 2 CPUs", "count 1"}},
  };
  const Topology& topo = Load("16em64t-4s2c2t.xml");
  for (const ErrorCase& e : kErrors) {
    SCOPED_TRACE(e.name);
    absl::StatusOr<CpuSet> got = AllocateCpus(
        topo,
        {.count = e.count, .available = Set(e.available), .must_include = Set(e.must_include)});
    ASSERT_FALSE(got.ok()) << *got;
    EXPECT_EQ(got.status().code(), e.code) << got.status();
    for (const std::string& m : e.mentions) {
      EXPECT_THAT(std::string(got.status().message()), HasSubstr(m));
    }
  }
}

// A packed greedy in the manner of the kubelet's static policy (takeByTopology, packed; written
// from its documented behaviour): whole free units of the first level (NUMA nodes when there are
// at least as many packages as nodes, else packages), then of the second, then whole free cores,
// then single CPUs; each while the request needs at least the unit's size. Candidates are
// ordered by free CPUs in their NUMA node, package and core (fewest first, to pack), then id.
CpuSet ReferencePacked(const Topology& topo, const CpuSet& available, int count) {
  CpuSet free;
  for (const Core& c : topo.cores) free |= c.cpus & available;
  CpuSet result;
  int need = count;
  auto take = [&](const CpuSet& cpus) {
    result |= cpus;
    free -= cpus;
    need -= cpus.Size();
  };
  struct Unit {
    int id;
    CpuSet cpus;
  };
  std::vector<Unit> numa, packages;
  for (const auto& n : topo.numa_nodes) {
    if (!n.cpus.Empty()) numa.push_back({n.id, n.cpus});
  }
  for (const auto& p : topo.packages) packages.push_back({p.id, p.cpus});
  const bool numa_first = packages.size() >= numa.size();
  auto take_whole = [&](const std::vector<Unit>& units) {
    std::vector<Unit> sorted = units;
    std::stable_sort(sorted.begin(), sorted.end(), [&](const Unit& a, const Unit& b) {
      return std::make_tuple((a.cpus & free).Size(), a.id) <
             std::make_tuple((b.cpus & free).Size(), b.id);
    });
    for (const Unit& u : sorted) {
      if (need > 0 && u.cpus.IsSubsetOf(free) && need >= u.cpus.Size()) take(u.cpus);
    }
  };
  take_whole(numa_first ? numa : packages);
  take_whole(numa_first ? packages : numa);
  auto sorted_cores = [&] {
    std::vector<int> order;
    for (size_t i = 0; i < topo.cores.size(); ++i) {
      if (topo.cores[i].cpus.Intersects(free)) order.push_back(static_cast<int>(i));
    }
    std::map<int, int> numa_free, package_free;
    for (int cpu : free) {
      ++numa_free[topo.NumaOf(cpu)];
      ++package_free[topo.PackageOf(cpu)];
    }
    using Key = std::tuple<int, int, int, int, int, int>;
    std::vector<std::pair<Key, int>> keyed;
    for (int i : order) {
      const Core& c = topo.cores[static_cast<size_t>(i)];
      const int nf = numa_free[c.numa];
      const int pf = package_free[c.package];
      const int cf = (c.cpus & free).Size();
      keyed.emplace_back(numa_first ? Key(nf, c.numa, pf, c.package, cf, i)
                                    : Key(pf, c.package, nf, c.numa, cf, i),
                         i);
    }
    std::sort(keyed.begin(), keyed.end());
    order.clear();
    for (const auto& [key, i] : keyed) order.push_back(i);
    return order;
  };
  for (int i : sorted_cores()) {
    const CpuSet& cpus = topo.cores[static_cast<size_t>(i)].cpus;
    if (need > 0 && cpus.IsSubsetOf(free) && need >= cpus.Size()) take(cpus);
  }
  for (int i : sorted_cores()) {
    for (int cpu : topo.cores[static_cast<size_t>(i)].cpus& free) {
      if (need > 0) take(CpuSet{cpu});
    }
  }
  return result;
}

// NUMA nodes used, L3 caches used, cores split (the answer takes some of a core's available
// threads and leaves others available). On cores without an L3 the cache measure counts the
// stand-in the policy uses there, the core's NUMA node within its package, so that machines
// without L3 still measure spreading over sockets. "Never worse" means the allocator's triple is
// lexicographically <= the reference's: fewer NUMA nodes wins outright; with equal NUMA nodes,
// fewer L3 caches wins; with both equal, fewer split cores wins.
using Measures = std::tuple<int, int, int>;
Measures Measure(const Topology& topo, const CpuSet& available, const CpuSet& chosen) {
  std::set<int> numa;
  std::set<std::tuple<int, int, int>> l3;
  int splits = 0;
  for (const Core& c : topo.cores) {
    const CpuSet taken = c.cpus & chosen;
    if (taken.Empty()) continue;
    numa.insert(c.numa);
    l3.insert(c.l3 != kNone ? std::make_tuple(0, c.l3, 0) : std::make_tuple(1, c.numa, c.package));
    if (!((c.cpus & available) - chosen).Empty()) ++splits;
  }
  return {static_cast<int>(numa.size()), static_cast<int>(l3.size()), splits};
}

TEST(AllocateCpusTest, NeverWorseThanPackedGreedy) {
  std::vector<std::string> machines = testing::AllFixtures();
  for (const char* synthetic :
       {kLinuxStyle, "synthetic:pack:2 numa:2 l3:2 core:6 pu:2", "synthetic:pack:2 core:8 pu:4"}) {
    machines.push_back(synthetic);
  }
  constexpr int kCasesPerMachine = 250;
  std::mt19937 rng(20240611);
  int cases = 0, better_numa = 0, better_l3 = 0, better_splits = 0, equal = 0;
  for (const std::string& machine : machines) {
    SCOPED_TRACE(machine);
    const Topology& topo = Load(machine);
    const std::vector<int> online = topo.online.ToVector();
    for (int i = 0; i < kCasesPerMachine; ++i) {
      // Free fractions from nearly empty to fully free, so both fresh and fragmented machines
      // are covered.
      const double keep = std::uniform_real_distribution<double>(0.2, 1.0)(rng);
      CpuSet available;
      for (int cpu : online) {
        if (std::uniform_real_distribution<double>(0, 1)(rng) < keep) available.Add(cpu);
      }
      if (available.Empty()) continue;
      const int count = std::uniform_int_distribution<int>(1, available.Size())(rng);
      SCOPED_TRACE(::testing::Message() << "count " << count << " available " << available);
      absl::StatusOr<CpuSet> got = AllocateCpus(topo, {.count = count, .available = available});
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->Size(), count);
      ASSERT_TRUE(got->IsSubsetOf(available));
      const CpuSet ref = ReferencePacked(topo, available, count);
      ASSERT_EQ(ref.Size(), count);
      const Measures mine = Measure(topo, available, *got);
      const Measures theirs = Measure(topo, available, ref);
      EXPECT_LE(mine, theirs) << "mine " << *got << " reference " << ref;
      ++cases;
      if (std::get<0>(mine) < std::get<0>(theirs)) {
        ++better_numa;
      } else if (std::get<0>(mine) == std::get<0>(theirs) &&
                 std::get<1>(mine) < std::get<1>(theirs)) {
        ++better_l3;
      } else if (std::get<0>(mine) == std::get<0>(theirs) &&
                 std::get<1>(mine) == std::get<1>(theirs) &&
                 std::get<2>(mine) < std::get<2>(theirs)) {
        ++better_splits;
      } else if (mine == theirs) {
        ++equal;
      }
    }
  }
  std::cout << "compared " << cases << " random requests: strictly better on NUMA nodes "
            << better_numa << ", on L3 caches " << better_l3 << ", on split cores " << better_splits
            << ", equal " << equal << "\n";
  EXPECT_GT(cases, 2500);
}

}  // namespace
}  // namespace topodra::allocation
