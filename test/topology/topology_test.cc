// Queries of the pure model on a hand-built machine, so they are checked without hwloc.
#include <gtest/gtest.h>

#include "topology/topology.h"

namespace topodra::topology {
namespace {

// Two packages, one NUMA node each, 2 cores per package, siblings numbered apart (N, N+4);
// CPU 7 is offline, so core 3 has one thread left.
Topology HandBuilt() {
  Topology t;
  t.packages = {{0, CpuSet{0, 1, 4, 5}}, {1, CpuSet{2, 3, 6}}};
  t.numa_nodes = {{0, CpuSet{0, 1, 4, 5}, CpuSet{0, 1, 4, 5}, "", 1 << 30},
                  {1, CpuSet{2, 3, 6}, CpuSet{2, 3, 6, 7}, "", 1 << 30}};
  t.l3 = {{3, 0, 1 << 20, CpuSet{0, 1, 4, 5}}, {3, 1, 1 << 20, CpuSet{2, 3, 6}}};
  t.cores = {{0, 0, 0, 0, 0, kNone, CoreType::kUnknown, CpuSet{0, 4}},
             {1, 1, 0, 0, 0, kNone, CoreType::kUnknown, CpuSet{1, 5}},
             {2, 0, 1, 1, 1, kNone, CoreType::kUnknown, CpuSet{2, 6}},
             {3, 1, 1, 1, 1, kNone, CoreType::kUnknown, CpuSet{3}}};
  t.cpus = {{6, 2}, {0, 0}, {4, 0}, {1, 1}, {5, 1}, {2, 2}, {3, 3}};  // any order
  t.offline = CpuSet{7};
  t.numa_distances = {{10, 21}, {21, 10}};
  t.Finalize();
  return t;
}

TEST(TopologyTest, FinalizeSortsCpusAndDerivesOnline) {
  const Topology t = HandBuilt();
  ASSERT_EQ(t.cpus.size(), 7u);
  for (size_t i = 1; i < t.cpus.size(); ++i) EXPECT_LT(t.cpus[i - 1].id, t.cpus[i].id);
  EXPECT_EQ(t.online.ToString(), "0-6");
  EXPECT_EQ(t.offline.ToString(), "7");
}

TEST(TopologyTest, PerCpuQueries) {
  const Topology t = HandBuilt();
  struct Case {
    int cpu;
    int core, numa, package, l3;
    CpuSet siblings;
  };
  const Case cases[] = {
      {0, 0, 0, 0, 0, CpuSet{0, 4}}, {4, 0, 0, 0, 0, CpuSet{0, 4}}, {5, 1, 0, 0, 0, CpuSet{1, 5}},
      {6, 2, 1, 1, 1, CpuSet{2, 6}}, {3, 3, 1, 1, 1, CpuSet{3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.cpu);
    ASSERT_NE(t.CoreOf(c.cpu), nullptr);
    EXPECT_EQ(t.CoreOf(c.cpu)->id, c.core);
    EXPECT_EQ(t.NumaOf(c.cpu), c.numa);
    EXPECT_EQ(t.PackageOf(c.cpu), c.package);
    EXPECT_EQ(t.L3Of(c.cpu), c.l3);
    EXPECT_EQ(t.SmtSiblings(c.cpu), c.siblings);
  }
}

TEST(TopologyTest, UnknownIdsGiveNothing) {
  const Topology t = HandBuilt();
  for (int cpu : {-1, 7, 8, 1000, CpuSet::kMaxCpuId + 1}) {
    SCOPED_TRACE(cpu);
    EXPECT_EQ(t.FindCpu(cpu), nullptr);
    EXPECT_EQ(t.CoreOf(cpu), nullptr);
    EXPECT_EQ(t.NumaOf(cpu), kNone);
    EXPECT_EQ(t.PackageOf(cpu), kNone);
    EXPECT_EQ(t.L3Of(cpu), kNone);
    EXPECT_TRUE(t.SmtSiblings(cpu).Empty());
  }
  EXPECT_TRUE(t.CpusOfNuma(5).Empty());
  EXPECT_TRUE(t.CpusOfPackage(-1).Empty());
  EXPECT_TRUE(t.CpusOfL3(2).Empty());
  EXPECT_TRUE(t.CpusOfL3(-1).Empty());
  EXPECT_EQ(t.FindNuma(9), nullptr);
  EXPECT_EQ(t.FindPackage(9), nullptr);
}

TEST(TopologyTest, GroupQueries) {
  const Topology t = HandBuilt();
  EXPECT_EQ(t.CpusOfNuma(1).ToString(), "2-3,6");
  EXPECT_EQ(t.CpusOfPackage(0).ToString(), "0-1,4-5");
  EXPECT_EQ(t.CpusOfL3(1).ToString(), "2-3,6");
  EXPECT_EQ(t.MaxThreadsPerCore(), 2);
}

TEST(TopologyTest, NumaDistances) {
  Topology t = HandBuilt();
  EXPECT_EQ(t.NumaDistance(0, 1), 21u);
  EXPECT_EQ(t.NumaDistance(1, 1), 10u);
  EXPECT_EQ(t.NumaDistance(0, 3), std::nullopt);
  t.numa_distances.clear();
  EXPECT_EQ(t.NumaDistance(0, 1), std::nullopt);
}

TEST(TopologyTest, CoreTypeNames) {
  EXPECT_STREQ(CoreTypeName(CoreType::kPerformance), "performance");
  EXPECT_STREQ(CoreTypeName(CoreType::kEfficiency), "efficiency");
  EXPECT_STREQ(CoreTypeName(CoreType::kUnknown), "unknown");
}

}  // namespace
}  // namespace topodra::topology
