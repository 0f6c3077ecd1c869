// PreferGpus on the shared machine exports and small hand-built machines. Expected answers are
// worked out by hand from the GPUs' NUMA nodes, host bridges and bridge paths (the first test
// prints them); the property tests compare against an exhaustive search of the same policy.
#include "driver/allocation/gpu_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "test/testing/fixtures.h"

namespace topodra::allocation {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using topology::Gpu;
using topology::kNone;
using topology::Topology;

const Topology& Load(const std::string& name) {
  static std::map<std::string, Topology> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, testing::LoadTopology(name)).first;
  return it->second;
}

std::vector<std::string> AllGpus(const Topology& t) {
  std::vector<std::string> ids;
  for (const Gpu& g : t.gpus) ids.push_back(g.pci_bus_id);
  return ids;
}

// Short names: "34" is 0000:34:00.0 on the DGX-2.
std::vector<std::string> Dgx(const std::vector<std::string>& buses) {
  std::vector<std::string> out;
  out.reserve(buses.size());
  for (const std::string& b : buses) out.push_back("0000:" + b + ":00.0");
  return out;
}

TEST(GpuAllocatorTest, PrintsFixtureGpus) {
  // Not an assertion: the listing the expectations below were worked out from.
  for (const char* f :
       {"nvidiaDGX2.xml", "power8gpudistances.xml", "32em64t-2n8c2t-pci-normalio.xml"}) {
    const Topology& t = Load(f);
    std::cout << f << ": NUMA distances [";
    for (const auto& row : t.numa_distances) std::cout << "[" << absl::StrJoin(row, " ") << "]";
    std::cout << "]\n";
    for (const Gpu& g : t.gpus) {
      std::cout << "  " << g.pci_bus_id << " vendor=0x" << std::hex << g.vendor_id << std::dec
                << " numa=" << g.numa << " root=" << g.pcie_root << " path=["
                << absl::StrJoin(g.pci_path, ",") << "]\n";
    }
  }
  // The discoverer's bridge path: host bridge first, then each bridge's own bus id.
  const Topology& dgx = Load("nvidiaDGX2.xml");
  ASSERT_EQ(dgx.gpus.size(), 16u);
  EXPECT_THAT(dgx.gpus[0].pci_path,
              ElementsAreArray({"pci0000:2b", "0000:2b:00.0", "0000:2c:00.0", "0000:2d:04.0",
                                "0000:32:00.0", "0000:33:00.0"}));
  EXPECT_EQ(dgx.gpus[0].pci_path[0], dgx.gpus[0].pcie_root);
  const Topology& p8 = Load("power8gpudistances.xml");
  ASSERT_EQ(p8.gpus.size(), 4u);
  EXPECT_THAT(p8.gpus[3].pci_path, ElementsAreArray({"pci000b:00", "000b:00:00.0"}));
}

struct Case {
  const char* name;
  const char* fixture;
  int count;
  std::vector<std::string> available;  // empty: every GPU of the fixture
  std::vector<std::string> must_include;
  std::vector<std::string> want;
};

// DGX-2 (from the listing): NUMA 0 holds host bridges pci0000:2b {34 36 39 3b} and pci0000:4e
// {57 59 5c 5e}; NUMA 1 holds pci0000:ae {b7 b9 bc be} and pci0000:d7 {e0 e2 e5 e7}. Under each
// host bridge a top switch has two second-level switches with two GPUs each: {34 36} {39 3b}
// {57 59} {5c 5e} {b7 b9} {bc be} {e0 e2} {e5 e7}. Tree distances (machine -> NUMA -> host bridge
// -> 5 bridges -> GPU): switch mates 4, same host bridge 8, same NUMA node 14, else 16.
// power8: one GPU per host bridge, 0002 and 0003 on NUMA 0, 000a and 000b on NUMA 1.
// 32em64t: 03:00.0 on NUMA 0 (05:03.0 is the Matrox BMC display, never offered); NUMA 1 holds
// 83:00.0 behind bridge 80:02.0, and 84:00.0 and 84:00.1 (two functions) behind bridge 80:03.0.
const std::vector<Case>& Cases() {
  static const std::vector<Case> kCases = {
      // One switch pair, the lowest one.
      {"dgx_2_switch_pair", "nvidiaDGX2.xml", 2, {}, {}, Dgx({"34", "36"})},
      // One host bridge: a pair (4) plus the lowest of the other pair (8 + 8).
      {"dgx_3_one_bridge", "nvidiaDGX2.xml", 3, {}, {}, Dgx({"34", "36", "39"})},
      {"dgx_4_host_bridge", "nvidiaDGX2.xml", 4, {}, {}, Dgx({"34", "36", "39", "3b"})},
      // Both NUMA nodes tie on every measure: all 8 of the lower node.
      {"dgx_8_numa_node",
       "nvidiaDGX2.xml",
       8,
       {},
       {},
       Dgx({"34", "36", "39", "3b", "57", "59", "5c", "5e"})},
      // Two nodes and three host bridges are needed either way; 8 + 1 has fewer cross-node pairs
      // than 4 + 4 + 1 split (tree sum 432 against 456).
      {"dgx_9_full_node_plus_one",
       "nvidiaDGX2.xml",
       9,
       {},
       {},
       Dgx({"34", "36", "39", "3b", "57", "59", "5c", "5e", "b7"})},
      {"dgx_16_all",
       "nvidiaDGX2.xml",
       16,
       {},
       {},
       Dgx({"34", "36", "39", "3b", "57", "59", "5c", "5e", "b7", "b9", "bc", "be", "e0", "e2",
            "e5", "e7"})},
      // must_include pulls the answer to its node, its host bridge and its switch.
      {"dgx_2_must_b9", "nvidiaDGX2.xml", 2, {}, {"0000:b9:00.0"}, Dgx({"b7", "b9"})},
      {"dgx_4_must_b9", "nvidiaDGX2.xml", 4, {}, {"0000:b9:00.0"}, Dgx({"b7", "b9", "bc", "be"})},
      {"dgx_4_must_e5", "nvidiaDGX2.xml", 4, {}, {"0000:e5:00.0"}, Dgx({"e0", "e2", "e5", "e7"})},
      // must_include on both nodes: 3 + 1 has fewer cross-node pairs than 2 + 2 (sum 20 + 3 x 16
      // = 68 against 4 + 4 + 4 x 16 = 72). Any third GPU under 3b's host bridge makes 20 (34 36,
      // 34 39 or 36 39 with 3b; so does b7 or bc with be on NUMA 1); 34 36 are the lowest ids.
      {"dgx_4_must_two_nodes",
       "nvidiaDGX2.xml",
       4,
       {},
       Dgx({"3b", "be"}),
       Dgx({"34", "36", "3b", "be"})},
      // Mixed offer, 2 wanted: NUMA 0 offers 34 39 57 (best pair 8 apart), NUMA 1 offers
      // b7 b9 bc e0 (b7 b9 are switch mates, 4 apart): closeness beats lower ids.
      {"dgx_2_mixed_switch_mates",
       "nvidiaDGX2.xml",
       2,
       Dgx({"e0", "57", "b9", "34", "bc", "39", "b7"}),
       {},
       Dgx({"b7", "b9"})},
      // 5 of 34 36 39 | b7 e0 e2 e5: two nodes either way; two host bridges only without b7;
      // {34 36 39 e0 e2} and {34 36 e0 e2 e5} both sum to 120, the first has lower ids.
      {"dgx_5_two_nodes_avoid_third_bridge",
       "nvidiaDGX2.xml",
       5,
       Dgx({"34", "36", "39", "b7", "e0", "e2", "e5"}),
       {},
       Dgx({"34", "36", "39", "e0", "e2"})},
      // 3 of 34 57 | b7 b9 e0: NUMA 1 alone fits; b7 b9 e0 is its only triple.
      {"dgx_3_only_node_that_fits",
       "nvidiaDGX2.xml",
       3,
       Dgx({"34", "57", "b7", "b9", "e0"}),
       {},
       Dgx({"b7", "b9", "e0"})},
      // 2 of 34 5e | b7 e7: one node either way, two host bridges either way; lowest ids.
      {"dgx_2_cross_bridge",
       "nvidiaDGX2.xml",
       2,
       Dgx({"e7", "b7", "5e", "34"}),
       {},
       Dgx({"34", "5e"})},
      // Unknown ids in available are ignored.
      {"dgx_unknown_ids_ignored",
       "nvidiaDGX2.xml",
       2,
       {"0000:99:00.0", "0000:be:00.0", "not-a-bus-id", "0000:bc:00.0", "0000:34:00.0"},
       {},
       {"0000:bc:00.0", "0000:be:00.0"}},
      // Repeats count once.
      {"dgx_repeats",
       "nvidiaDGX2.xml",
       2,
       Dgx({"b7", "b7", "57", "57", "b9"}),
       {},
       Dgx({"b7", "b9"})},

      {"power8_1", "power8gpudistances.xml", 1, {}, {}, {"0002:01:00.0"}},
      {"power8_2_one_node", "power8gpudistances.xml", 2, {}, {}, {"0002:01:00.0", "0003:01:00.0"}},
      {"power8_2_must_000b",
       "power8gpudistances.xml",
       2,
       {},
       {"000b:01:00.0"},
       {"000a:01:00.0", "000b:01:00.0"}},
      {"power8_2_node_beats_ids",
       "power8gpudistances.xml",
       2,
       {"000b:01:00.0", "0002:01:00.0", "000a:01:00.0"},
       {},
       {"000a:01:00.0", "000b:01:00.0"}},
      {"power8_2_forced_across",
       "power8gpudistances.xml",
       2,
       {"000a:01:00.0", "0002:01:00.0"},
       {},
       {"0002:01:00.0", "000a:01:00.0"}},
      {"power8_3",
       "power8gpudistances.xml",
       3,
       {},
       {},
       {"0002:01:00.0", "0003:01:00.0", "000a:01:00.0"}},

      {"em64t_1",
       "32em64t-2n8c2t-pci-normalio.xml",
       1,
       {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0", "0000:84:00.1"},
       {},
       {"0000:03:00.0"}},
      // Two functions behind the same bridge (2 apart) beat 83:00.0 (4 apart).
      {"em64t_2_same_bridge",
       "32em64t-2n8c2t-pci-normalio.xml",
       2,
       {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0", "0000:84:00.1"},
       {},
       {"0000:84:00.0", "0000:84:00.1"}},
      {"em64t_2_must_83",
       "32em64t-2n8c2t-pci-normalio.xml",
       2,
       {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0", "0000:84:00.1"},
       {"0000:83:00.0"},
       {"0000:83:00.0", "0000:84:00.0"}},
      {"em64t_2_must_03",
       "32em64t-2n8c2t-pci-normalio.xml",
       2,
       {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0", "0000:84:00.1"},
       {"0000:03:00.0"},
       {"0000:03:00.0", "0000:83:00.0"}},
      {"em64t_3_one_node",
       "32em64t-2n8c2t-pci-normalio.xml",
       3,
       {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0", "0000:84:00.1"},
       {},
       {"0000:83:00.0", "0000:84:00.0", "0000:84:00.1"}},
  };
  return kCases;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class PreferGpusCaseTest : public ::testing::TestWithParam<Case> {};

TEST_P(PreferGpusCaseTest, HandWorkedAnswer) {
  const Case& c = GetParam();
  const Topology& t = Load(c.fixture);
  GpuRequest req{c.count, c.available.empty() ? AllGpus(t) : c.available, c.must_include};
  absl::StatusOr<std::vector<std::string>> got = PreferGpus(t, req);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, c.want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PreferGpusCaseTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

// Three NUMA nodes, one GPU each on its own host bridge, no bridge paths (a hand-built model):
// steps 1-3 tie for every pair, so the NUMA distance decides.
Topology ThreeNodes() {
  Topology t;
  for (int n = 0; n < 3; ++n) t.numa_nodes.push_back(topology::NumaNode{n, {}, {}, "", 0});
  t.numa_distances = {{10, 30, 20}, {30, 10, 12}, {20, 12, 10}};
  for (int n = 0; n < 3; ++n) {
    Gpu g;
    g.pci_bus_id = "0000:0" + std::to_string(n + 1) + ":00.0";
    g.numa = n;
    g.pcie_root = "pci0000:0" + std::to_string(n);
    t.gpus.push_back(g);
  }
  t.Finalize();
  return t;
}

TEST(GpuAllocatorTest, NumaDistanceBreaksTies) {
  const Topology t = ThreeNodes();
  const std::vector<std::string> all = AllGpus(t);
  // Nodes 1 and 2 are 12 apart, nodes 0 and 2 20, nodes 0 and 1 30.
  EXPECT_EQ(*PreferGpus(t, {2, all, {}}),
            std::vector<std::string>({"0000:02:00.0", "0000:03:00.0"}));
  EXPECT_EQ(*PreferGpus(t, {2, all, {"0000:01:00.0"}}),
            std::vector<std::string>({"0000:01:00.0", "0000:03:00.0"}));
  // Without distances the lowest ids win.
  Topology flat = t;
  flat.numa_distances.clear();
  EXPECT_EQ(*PreferGpus(flat, {2, all, {}}),
            std::vector<std::string>({"0000:01:00.0", "0000:02:00.0"}));
}

TEST(GpuAllocatorTest, GpusWithoutNumaNodeCountAsTheirOwnNode) {
  Topology t;
  t.numa_nodes.push_back(topology::NumaNode{0, {}, {}, "", 0});
  for (const char* id : {"0000:01:00.0", "0000:02:00.0"}) {  // lowest ids, no node
    Gpu g;
    g.pci_bus_id = id;
    g.pcie_root = "pci0000:00";
    t.gpus.push_back(g);
  }
  for (const char* id : {"0000:81:00.0", "0000:82:00.0"}) {
    Gpu g;
    g.pci_bus_id = id;
    g.numa = 0;
    g.pcie_root = "pci0000:80";
    t.gpus.push_back(g);
  }
  t.Finalize();
  const std::vector<std::string> all = AllGpus(t);
  EXPECT_EQ(*PreferGpus(t, {2, all, {}}),
            std::vector<std::string>({"0000:81:00.0", "0000:82:00.0"}));
  // One node-less GPU plus one of node 0 is two "nodes", the same as the two node-less GPUs;
  // those share a host bridge.
  EXPECT_EQ(*PreferGpus(t, {2, {"0000:01:00.0", "0000:02:00.0", "0000:81:00.0"}, {}}),
            std::vector<std::string>({"0000:01:00.0", "0000:02:00.0"}));
  EXPECT_EQ(*PreferGpus(t, {3, all, {}}),
            std::vector<std::string>({"0000:01:00.0", "0000:81:00.0", "0000:82:00.0"}));
}

TEST(GpuAllocatorTest, Errors) {
  const Topology& t = Load("nvidiaDGX2.xml");
  const std::vector<std::string> all = AllGpus(t);
  struct ErrorCase {
    GpuRequest req;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<ErrorCase> cases = {
      {{0, all, {}}, absl::StatusCode::kInvalidArgument, "count 0 must be at least 1"},
      {{-3, all, {}}, absl::StatusCode::kInvalidArgument, "count -3 must be at least 1"},
      {{2, all, {"0000:ff:00.0"}},
       absl::StatusCode::kInvalidArgument,
       "must_include \"0000:ff:00.0\" is not a GPU of this node"},
      {{2, Dgx({"34", "36"}), {"0000:b7:00.0"}},
       absl::StatusCode::kInvalidArgument,
       "must_include \"0000:b7:00.0\" is not in available"},
      {{1, all, Dgx({"34", "36"})},
       absl::StatusCode::kInvalidArgument,
       "must_include holds 2 GPUs, more than the count 1"},
      {{4, {"0000:34:00.0", "0000:99:00.0", "0000:36:00.0", "0000:36:00.0", "x"}, {}},
       absl::StatusCode::kResourceExhausted,
       "only 2 known GPUs available, 4 requested"},
      {{17, all, {}},
       absl::StatusCode::kResourceExhausted,
       "only 16 known GPUs available, 17 requested"},
  };
  for (const ErrorCase& c : cases) {
    absl::StatusOr<std::vector<std::string>> got = PreferGpus(t, c.req);
    ASSERT_FALSE(got.ok()) << c.message;
    EXPECT_EQ(got.status().code(), c.code) << got.status();
    EXPECT_THAT(got.status().message(), HasSubstr(c.message));
    EXPECT_THAT(got.status().message(),
                HasSubstr("GPU request for " + std::to_string(c.req.count)));
  }
  // The values are quoted.
  absl::StatusOr<std::vector<std::string>> got = PreferGpus(t, {3, Dgx({"34", "36"}), {}});
  EXPECT_THAT(got.status().message(),
              HasSubstr("available [\"0000:34:00.0\", \"0000:36:00.0\"], must_include []"));
  // A machine without GPUs.
  Topology none;
  none.Finalize();
  EXPECT_EQ(PreferGpus(none, {1, {"0000:34:00.0"}, {}}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(GpuAllocatorTest, AnswerDoesNotDependOnOrderOfAvailable) {
  std::mt19937 rng(7);
  for (const Case& c : Cases()) {
    const Topology& t = Load(c.fixture);
    std::vector<std::string> avail = c.available.empty() ? AllGpus(t) : c.available;
    for (int round = 0; round < 20; ++round) {
      std::shuffle(avail.begin(), avail.end(), rng);
      std::vector<std::string> must = c.must_include;
      std::shuffle(must.begin(), must.end(), rng);
      absl::StatusOr<std::vector<std::string>> got = PreferGpus(t, {c.count, avail, must});
      ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
      EXPECT_EQ(*got, c.want) << c.name << " with available " << absl::StrJoin(avail, ",");
    }
  }
}

// An independent statement of the policy: every combination scored on the five measures.
std::vector<std::string> Exhaustive(const Topology& t, const GpuRequest& req) {
  std::vector<const Gpu*> cand;
  std::set<std::string> offered(req.available.begin(), req.available.end());
  for (const Gpu& g : t.gpus) {
    if (offered.count(g.pci_bus_id)) cand.push_back(&g);
  }
  const std::set<std::string> must(req.must_include.begin(), req.must_include.end());
  auto path = [](const Gpu& g) {
    std::vector<std::string> p = {g.numa == kNone ? "none" : "node" + std::to_string(g.numa)};
    for (const std::string& s : g.pci_path) p.push_back(s);
    if (g.pci_path.empty()) p.push_back(g.pcie_root);
    p.push_back(g.pci_bus_id);
    return p;
  };
  auto distance = [&](const Gpu& a, const Gpu& b) {
    const std::vector<std::string> pa = path(a), pb = path(b);
    size_t common = 0;
    while (common < pa.size() && common < pb.size() && pa[common] == pb[common]) ++common;
    return static_cast<int64_t>(pa.size() + pb.size() - 2 * common);
  };
  using Score = std::tuple<int64_t, int64_t, int64_t, uint64_t, std::vector<std::string>>;
  std::optional<Score> best;
  const size_t n = cand.size();
  std::vector<bool> pick(n, false);
  std::fill(pick.begin(), pick.begin() + req.count, true);
  do {
    std::vector<const Gpu*> chosen;
    for (size_t i = 0; i < n; ++i) {
      if (pick[i]) chosen.push_back(cand[i]);
    }
    size_t forced = 0;
    for (const Gpu* g : chosen) forced += must.count(g->pci_bus_id);
    if (forced != must.size()) continue;
    std::set<int> nodes;
    std::set<std::string> roots;
    int64_t orphans = 0;
    int64_t tree = 0;
    for (const Gpu* g : chosen) {
      if (g->numa == kNone)
        ++orphans;
      else
        nodes.insert(g->numa);
      roots.insert(g->pci_path.empty() ? g->pcie_root : g->pci_path[0]);
      for (const Gpu* h : chosen) {
        if (g < h) tree += distance(*g, *h);
      }
    }
    uint64_t numa_dist = 0;
    for (int a : nodes) {
      for (int b : nodes) {
        if (a != b) numa_dist += t.NumaDistance(a, b).value_or(0);
      }
    }
    std::vector<std::string> ids;
    ids.reserve(chosen.size());
    for (const Gpu* g : chosen) ids.push_back(g->pci_bus_id);
    Score s{static_cast<int64_t>(nodes.size()) + orphans, static_cast<int64_t>(roots.size()), tree,
            numa_dist, ids};
    if (!best || s < *best) best = s;
  } while (std::prev_permutation(pick.begin(), pick.end()));
  return best ? std::get<4>(*best) : std::vector<std::string>{};
}

// Random offers on each fixture: the answer is a valid one, never uses more NUMA nodes than the
// offer needs, and matches the exhaustive search of the same policy.
TEST(GpuAllocatorTest, RandomOffersMatchExhaustiveSearch) {
  std::mt19937 rng(20240611);
  int checked = 0;
  for (const char* f :
       {"nvidiaDGX2.xml", "power8gpudistances.xml", "32em64t-2n8c2t-pci-normalio.xml"}) {
    const Topology& t = Load(f);
    std::vector<std::string> all = AllGpus(t);
    for (int round = 0; round < 300; ++round) {
      std::shuffle(all.begin(), all.end(), rng);
      // At most 12 offered, so the exhaustive search stays small.
      const size_t offered =
          std::uniform_int_distribution<size_t>(1, std::min<size_t>(12, all.size()))(rng);
      std::vector<std::string> avail(all.begin(), all.begin() + static_cast<long>(offered));
      const int count = std::uniform_int_distribution<int>(1, static_cast<int>(offered))(rng);
      const int musts = std::uniform_int_distribution<int>(0, std::min(count, 2))(rng);
      std::vector<std::string> must(avail.begin(), avail.begin() + musts);
      avail.push_back("0000:ff:1f.7");  // not a GPU: ignored
      std::shuffle(avail.begin(), avail.end(), rng);
      const GpuRequest req{count, avail, must};
      absl::StatusOr<std::vector<std::string>> got = PreferGpus(t, req);
      ASSERT_TRUE(got.ok()) << got.status();
      SCOPED_TRACE(absl::StrCat(f, " count ", count, " available ", absl::StrJoin(avail, ","),
                                " must ", absl::StrJoin(must, ",")));
      ASSERT_EQ(got->size(), static_cast<size_t>(count));
      EXPECT_TRUE(std::is_sorted(got->begin(), got->end()));
      for (const std::string& m : must)
        EXPECT_NE(std::find(got->begin(), got->end(), m), got->end());

      // Fewest NUMA nodes: must_include's nodes, then the fullest other nodes until enough.
      std::map<int, int> free_per_node;
      std::set<int> must_nodes;
      int used_by_must = 0;
      for (const Gpu& g : t.gpus) {
        if (std::find(avail.begin(), avail.end(), g.pci_bus_id) == avail.end()) continue;
        const bool forced = std::find(must.begin(), must.end(), g.pci_bus_id) != must.end();
        if (forced && !must_nodes.count(g.numa)) must_nodes.insert(g.numa);
        ++free_per_node[g.numa];
      }
      int have = 0;
      std::vector<int> others;
      for (const auto& [node, n] : free_per_node) {
        if (must_nodes.count(node)) {
          have += n;
          ++used_by_must;
        } else {
          others.push_back(n);
        }
      }
      std::sort(others.rbegin(), others.rend());
      size_t needed = static_cast<size_t>(used_by_must);
      for (size_t i = 0; have < count && i < others.size(); ++i, ++needed) have += others[i];
      std::set<int> nodes;
      for (const Gpu& g : t.gpus) {
        if (std::find(got->begin(), got->end(), g.pci_bus_id) != got->end()) nodes.insert(g.numa);
      }
      EXPECT_EQ(nodes.size(), needed);

      EXPECT_EQ(*got, Exhaustive(t, req));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 900);
}

// Random hand-built machines exercise what the fixtures do not: more than two NUMA nodes with
// uneven distances (step 4), GPUs without a NUMA node, and bridge trees of varied depth.
TEST(GpuAllocatorTest, RandomMachinesMatchExhaustiveSearch) {
  std::mt19937 rng(5);
  for (int machine = 0; machine < 60; ++machine) {
    Topology t;
    const int nodes = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int n = 0; n < nodes; ++n) t.numa_nodes.push_back(topology::NumaNode{n, {}, {}, "", 0});
    if (machine % 4 != 0) {
      t.numa_distances.assign(static_cast<size_t>(nodes), std::vector<uint64_t>(nodes, 10));
      for (int a = 0; a < nodes; ++a) {
        for (int b = 0; b < nodes; ++b) {
          if (a != b) t.numa_distances[a][b] = std::uniform_int_distribution<uint64_t>(11, 40)(rng);
        }
      }
    }
    const int gpus = std::uniform_int_distribution<int>(2, 10)(rng);
    for (int i = 0; i < gpus; ++i) {
      Gpu g;
      g.pci_bus_id = absl::StrFormat("0000:%02x:00.0", 16 * i + 1);
      g.numa = std::uniform_int_distribution<int>(-1, nodes - 1)(rng);  // -1 is kNone
      // Host bridges belong to one node: name them after it.
      g.pcie_root = absl::StrFormat("pci0000:%x%x", g.numa + 1,
                                    std::uniform_int_distribution<int>(0, 1)(rng));
      if (rng() % 3 != 0) {
        g.pci_path.push_back(g.pcie_root);
        const int depth = std::uniform_int_distribution<int>(0, 3)(rng);
        for (int d = 0; d < depth; ++d) {
          g.pci_path.push_back(absl::StrCat(g.pci_path.back(), "/", rng() % 2));
        }
      }
      t.gpus.push_back(g);
    }
    t.Finalize();
    const std::vector<std::string> all = AllGpus(t);
    for (int round = 0; round < 20; ++round) {
      const int count = std::uniform_int_distribution<int>(1, gpus)(rng);
      std::vector<std::string> avail = all;
      std::shuffle(avail.begin(), avail.end(), rng);
      const int musts = std::uniform_int_distribution<int>(0, std::min(count, 2))(rng);
      const GpuRequest req{count, avail, {avail.begin(), avail.begin() + musts}};
      absl::StatusOr<std::vector<std::string>> got = PreferGpus(t, req);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, Exhaustive(t, req)) << "machine " << machine << " count " << count;
    }
  }
}

}  // namespace
}  // namespace topodra::allocation
