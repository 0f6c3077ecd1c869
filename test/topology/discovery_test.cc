// Discovery against real machine exports (test/fixtures/topologies), synthetic shapes and the live
// machine. Expected values come from the fixtures' README and from reading the XML by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "test/testing/fixtures.h"
#include "topology/discoverer.h"

namespace topodra::topology {
namespace {

using ::testing::HasSubstr;

std::string Fixture(const std::string& name) { return testing::FixturePath(name); }

Topology MustLoadXml(const std::string& name) {
  absl::StatusOr<Topology> t = Discover(TopologySource::XmlFile(Fixture(name)));
  EXPECT_TRUE(t.ok()) << name << ": " << t.status();
  return t.ok() ? *std::move(t) : Topology{};
}

Topology MustLoadSynthetic(const std::string& desc) {
  absl::StatusOr<Topology> t = Discover(TopologySource::Synthetic(desc));
  EXPECT_TRUE(t.ok()) << desc << ": " << t.status();
  return t.ok() ? *std::move(t) : Topology{};
}

struct FixtureCounts {
  const char* file;
  int cpus;
  int cores;
  int numa;
  int packages;
  int gpus;
  int threads_per_core;
  const char* online;
  const char* offline;
};

// PUs/cores/NUMA/packages from test/fixtures/topologies/README.md; GPU counts are the PCI devices
// of class 03xx in each file (grep 'pci_type="03').
constexpr FixtureCounts kFixtures[] = {
    {"16em64t-4s2c2t.xml", 16, 8, 1, 4, 0, 2, "0-15", ""},
    {"16em64t-4s2c2t-offlines.xml", 7, 6, 1, 4, 0, 2, "0-1,3-4,6,12,15", "2,5,7-11,13-14"},
    {"28intel64-2p2g7c-CoDgroups.v1tov2.xml", 28, 28, 4, 2, 0, 1, "0-27", ""},
    {"32em64t-2n8c2t-pci-normalio.xml", 32, 16, 2, 2, 5, 2, "0-31", ""},
    {"64intel64-fakeKNL-SNC4-hybrid.xml", 64, 16, 8, 1, 0, 4, "0-63", ""},
    {"96em64t-4n4d3ca2co-pci.xml", 96, 96, 4, 16, 1, 1, "0-95", ""},
    {"192em64t-24n8c2t.xml", 384, 192, 24, 24, 1, 2, "0-383", ""},
    {"fakecpukinds.xml", 4, 2, 1, 1, 0, 2, "0-3", ""},
    {"power8gpudistances.xml", 16, 8, 2, 2, 4, 2, "0-1,8-9,16-17,24-25,80-81,88-89,96-97,104-105",
     ""},
    {"nvidiaDGX2.xml", 4, 4, 2, 2, 16, 1, "0-1,24-25", ""},
};

TEST(DiscoveryTest, EveryFixtureLoadsWithItsCounts) {
  for (const FixtureCounts& f : kFixtures) {
    SCOPED_TRACE(f.file);
    const Topology t = MustLoadXml(f.file);
    EXPECT_EQ(static_cast<int>(t.cpus.size()), f.cpus);
    EXPECT_EQ(static_cast<int>(t.cores.size()), f.cores);
    EXPECT_EQ(static_cast<int>(t.numa_nodes.size()), f.numa);
    EXPECT_EQ(static_cast<int>(t.packages.size()), f.packages);
    EXPECT_EQ(static_cast<int>(t.gpus.size()), f.gpus);
    EXPECT_EQ(t.MaxThreadsPerCore(), f.threads_per_core);
    EXPECT_EQ(t.online.ToString(), f.online);
    EXPECT_EQ(t.offline.ToString(), f.offline);
    EXPECT_EQ(t.source, "xml:" + Fixture(f.file));
  }
}

// Invariants every discovered topology must satisfy, whatever the machine.
void ExpectConsistent(const Topology& t) {
  CpuSet from_cores;
  for (const Core& c : t.cores) {
    EXPECT_FALSE(c.cpus.Empty()) << "core " << c.id;
    EXPECT_FALSE(from_cores.Intersects(c.cpus)) << "core " << c.id << " overlaps another";
    from_cores |= c.cpus;
    for (int cpu : c.cpus) {
      EXPECT_EQ(t.CoreOf(cpu), &c);
      EXPECT_EQ(t.NumaOf(cpu), c.numa);
      EXPECT_EQ(t.SmtSiblings(cpu), c.cpus);
      if (c.package != kNone) {
        EXPECT_TRUE(t.CpusOfPackage(c.package).Contains(cpu));
      }
      if (c.numa != kNone) {
        EXPECT_TRUE(t.CpusOfNuma(c.numa).Contains(cpu));
      }
      if (c.l3 != kNone) {
        EXPECT_TRUE(t.CpusOfL3(c.l3).Contains(cpu));
      }
    }
  }
  EXPECT_EQ(from_cores, t.online);
  CpuSet from_numa;
  for (const NumaNode& n : t.numa_nodes) {
    EXPECT_FALSE(from_numa.Intersects(n.cpus)) << "NUMA " << n.id << " overlaps another";
    EXPECT_TRUE(n.cpus.IsSubsetOf(n.local_cpus)) << "NUMA " << n.id;
    from_numa |= n.cpus;
  }
  EXPECT_EQ(from_numa, t.online);
  EXPECT_FALSE(t.online.Intersects(t.offline));
}

TEST(DiscoveryTest, EveryFixtureIsConsistent) {
  for (const FixtureCounts& f : kFixtures) {
    SCOPED_TRACE(f.file);
    ExpectConsistent(MustLoadXml(f.file));
  }
}

struct GpuExpectation {
  const char* bus_id;
  int numa;
  const char* pcie_root;
};

void ExpectGpus(const Topology& t, const std::vector<GpuExpectation>& want) {
  ASSERT_EQ(t.gpus.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].bus_id);
    EXPECT_EQ(t.gpus[i].pci_bus_id, want[i].bus_id);
    EXPECT_EQ(t.gpus[i].numa, want[i].numa);
    EXPECT_EQ(t.gpus[i].pcie_root, want[i].pcie_root);
    EXPECT_EQ(t.gpus[i].vendor_id, 0x10de);
    EXPECT_EQ(t.gpus[i].local_cpus, t.CpusOfNuma(want[i].numa));
  }
}

TEST(DiscoveryTest, Power8HasFourP100sOnTwoNumaNodes) {
  const Topology t = MustLoadXml("power8gpudistances.xml");
  ExpectGpus(t, {{"0002:01:00.0", 0, "pci0002:00"},
                 {"0003:01:00.0", 0, "pci0003:00"},
                 {"000a:01:00.0", 1, "pci000a:00"},
                 {"000b:01:00.0", 1, "pci000b:00"}});
  const Gpu& g = t.gpus[0];
  EXPECT_EQ(g.device_id, 0x15f9);
  EXPECT_EQ(g.class_id, 0x0302);
  EXPECT_EQ(g.model, "Tesla P100-SXM2-16GB");
  EXPECT_EQ(g.memory_bytes, 16671616ull * 1024);
  ASSERT_EQ(g.os_devices.size(), 3u);
  EXPECT_EQ(g.os_devices[0].name, "cuda0");
  EXPECT_EQ(g.os_devices[0].subtype, "CUDA");
  EXPECT_EQ(g.os_devices[2].name, "nvml0");
  // NUMA latencies from the file's NUMALatency matrix.
  EXPECT_EQ(t.NumaDistance(0, 0), 10u);
  EXPECT_EQ(t.NumaDistance(0, 1), 40u);
  EXPECT_EQ(t.NumaDistance(1, 0), 40u);
  EXPECT_EQ(t.NumaDistance(0, 7), std::nullopt);
}

TEST(DiscoveryTest, Dgx2HasSixteenV100sBehindFourHostBridges) {
  const Topology t = MustLoadXml("nvidiaDGX2.xml");
  ExpectGpus(t, {{"0000:34:00.0", 0, "pci0000:2b"},
                 {"0000:36:00.0", 0, "pci0000:2b"},
                 {"0000:39:00.0", 0, "pci0000:2b"},
                 {"0000:3b:00.0", 0, "pci0000:2b"},
                 {"0000:57:00.0", 0, "pci0000:4e"},
                 {"0000:59:00.0", 0, "pci0000:4e"},
                 {"0000:5c:00.0", 0, "pci0000:4e"},
                 {"0000:5e:00.0", 0, "pci0000:4e"},
                 {"0000:b7:00.0", 1, "pci0000:ae"},
                 {"0000:b9:00.0", 1, "pci0000:ae"},
                 {"0000:bc:00.0", 1, "pci0000:ae"},
                 {"0000:be:00.0", 1, "pci0000:ae"},
                 {"0000:e0:00.0", 1, "pci0000:d7"},
                 {"0000:e2:00.0", 1, "pci0000:d7"},
                 {"0000:e5:00.0", 1, "pci0000:d7"},
                 {"0000:e7:00.0", 1, "pci0000:d7"}});
  EXPECT_EQ(t.gpus[0].uuid, "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6");
  EXPECT_EQ(t.gpus[0].model, "Tesla V100-SXM3-32GB-H");
  ASSERT_EQ(t.gpus[15].os_devices.size(), 1u);
  EXPECT_EQ(t.gpus[15].os_devices[0].name, "nvml15");
}

TEST(DiscoveryTest, GpuWithDrmDeviceAndNamesFromPciDatabase) {
  const Topology t = MustLoadXml("32em64t-2n8c2t-pci-normalio.xml");
  const Gpu* k40 = nullptr;
  for (const Gpu& g : t.gpus) {
    if (g.pci_bus_id == "0000:84:00.0") k40 = &g;
  }
  ASSERT_NE(k40, nullptr);
  EXPECT_EQ(k40->numa, 1);
  EXPECT_EQ(k40->pcie_root, "pci0000:80");
  EXPECT_EQ(k40->vendor_name, "NVIDIA Corporation");
  // The export is from a patched machine: the PCI database and the CUDA device disagree, and
  // both are kept.
  EXPECT_EQ(k40->device_name, "Tesla M2075 Dual-Slot Computing Processor Module");
  EXPECT_EQ(k40->model, "Tesla K40m");
  std::vector<std::string> names;
  for (const OsDevice& d : k40->os_devices) names.push_back(d.name);
  EXPECT_THAT(names, ::testing::ElementsAre("cuda0", "card0"));
}

TEST(DiscoveryTest, OfflineCpusLeaveHolesAndTheirCoresShrink) {
  const Topology t = MustLoadXml("16em64t-4s2c2t-offlines.xml");
  EXPECT_EQ(t.FindCpu(2), nullptr);
  EXPECT_EQ(t.CoreOf(2), nullptr);
  EXPECT_EQ(t.NumaOf(2), kNone);
  EXPECT_TRUE(t.SmtSiblings(2).Empty());
  // Core P#1 of package 0 keeps PUs 4 and 12; core P#0 lost PU 8.
  EXPECT_EQ(t.SmtSiblings(4), (CpuSet{4, 12}));
  EXPECT_EQ(t.SmtSiblings(0), (CpuSet{0}));
  EXPECT_EQ(t.CpusOfPackage(0), (CpuSet{0, 4, 12}));
}

TEST(DiscoveryTest, SiblingsNumberedApart) {
  const Topology t = MustLoadXml("16em64t-4s2c2t.xml");
  EXPECT_EQ(t.SmtSiblings(0), (CpuSet{0, 8}));
  EXPECT_EQ(t.SmtSiblings(12), (CpuSet{4, 12}));
  EXPECT_EQ(t.PackageOf(8), 0);
  EXPECT_EQ(t.PackageOf(1), 1);
}

TEST(DiscoveryTest, KnlMemoryOnlyNodesOwnNoCpus) {
  const Topology t = MustLoadXml("64intel64-fakeKNL-SNC4-hybrid.xml");
  for (int id : {4, 5, 6, 7}) {
    const NumaNode* n = t.FindNuma(id);
    ASSERT_NE(n, nullptr);
    EXPECT_TRUE(n->cpus.Empty()) << id;
    EXPECT_EQ(n->subtype, "MCDRAM");
    EXPECT_EQ(n->local_cpus.Size(), 16) << id;
  }
  EXPECT_EQ(t.CpusOfNuma(0).ToString(), "0-3,16-19,32-35,48-51");
  EXPECT_EQ(t.NumaOf(48), 0);
  EXPECT_EQ(t.SmtSiblings(0), (CpuSet{0, 16, 32, 48}));
  // NUMA nodes are listed by id even though hwloc orders DRAM before MCDRAM.
  std::vector<int> ids;
  for (const NumaNode& n : t.numa_nodes) ids.push_back(n.id);
  EXPECT_THAT(ids, ::testing::ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(DiscoveryTest, ClusterOnDieHasTwoNumaNodesPerPackage) {
  const Topology t = MustLoadXml("28intel64-2p2g7c-CoDgroups.v1tov2.xml");
  for (const Package& p : t.packages) {
    std::set<int> numa;
    for (int cpu : p.cpus) numa.insert(t.NumaOf(cpu));
    EXPECT_EQ(numa.size(), 2u) << "package " << p.id;
  }
}

TEST(DiscoveryTest, CpuKindsClassifyPerformanceAndEfficiency) {
  const Topology t = MustLoadXml("fakecpukinds.xml");
  ASSERT_EQ(t.cpu_kinds.size(), 3u);
  EXPECT_EQ(t.cpu_kinds[0].cpus, (CpuSet{0, 1}));
  EXPECT_EQ(t.cpu_kinds[0].type, CoreType::kEfficiency);
  EXPECT_EQ(t.cpu_kinds[0].infos.at("CoreType"), "MySmallCore");
  EXPECT_EQ(t.cpu_kinds[2].cpus, (CpuSet{3}));
  EXPECT_EQ(t.cpu_kinds[2].type, CoreType::kPerformance);
  EXPECT_EQ(t.cpu_kinds[2].infos.at("CoreType"), "IntelCore");
  // A homogeneous server reports no efficiency cores.
  for (const Core& c : MustLoadXml("192em64t-24n8c2t.xml").cores) {
    EXPECT_NE(c.type, CoreType::kEfficiency);
  }
}

TEST(DiscoveryTest, Large384CpuMachine) {
  const Topology t = MustLoadXml("192em64t-24n8c2t.xml");
  for (const NumaNode& n : t.numa_nodes) EXPECT_EQ(n.cpus.Size(), 16) << n.id;
  ASSERT_EQ(t.numa_distances.size(), 24u);
  EXPECT_EQ(t.NumaDistance(5, 5), 10u);
}

struct SyntheticCase {
  const char* desc;
  int cpus;
  int cores;
  int numa;
  int packages;
  int l3;
  int threads_per_core;
};

TEST(DiscoveryTest, SyntheticShapes) {
  constexpr SyntheticCase kCases[] = {
      {"pack:4 numa:2 l3:4 core:16 pu:2", 1024, 512, 8, 4, 32, 2},
      {"pack:2 core:8 pu:4", 64, 16, 1, 2, 0, 4},
      {"pack:2 numa:2 l3:2 core:8 pu:2", 128, 64, 4, 2, 8, 2},
      {"pack:2 numa:2 core:10 pu:2(indexes=2*40:1*2)", 80, 40, 4, 2, 0, 2},
      {"pack:1 pu:4", 4, 4, 1, 1, 0, 1},  // no Core level: each PU is its own core
  };
  for (const SyntheticCase& c : kCases) {
    SCOPED_TRACE(c.desc);
    const Topology t = MustLoadSynthetic(c.desc);
    EXPECT_EQ(static_cast<int>(t.cpus.size()), c.cpus);
    EXPECT_EQ(static_cast<int>(t.cores.size()), c.cores);
    EXPECT_EQ(static_cast<int>(t.numa_nodes.size()), c.numa);
    EXPECT_EQ(static_cast<int>(t.packages.size()), c.packages);
    EXPECT_EQ(static_cast<int>(t.l3.size()), c.l3);
    EXPECT_EQ(t.MaxThreadsPerCore(), c.threads_per_core);
    EXPECT_EQ(t.source, std::string("synthetic:") + c.desc);
    ExpectConsistent(t);
  }
}

TEST(DiscoveryTest, LinuxStyleInterleavedSiblings) {
  // A dual Xeon Gold 6230: CPU N and CPU N+40 are the two threads of one core.
  const Topology t = MustLoadSynthetic("pack:2 numa:2 core:10 pu:2(indexes=2*40:1*2)");
  EXPECT_EQ(t.online.ToString(), "0-79");
  EXPECT_EQ(t.SmtSiblings(0), (CpuSet{0, 40}));
  EXPECT_EQ(t.SmtSiblings(79), (CpuSet{39, 79}));
  EXPECT_EQ(t.CpusOfNuma(0).ToString(), "0-9,40-49");
  EXPECT_EQ(t.CpusOfPackage(1).ToString(), "20-39,60-79");
}

TEST(DiscoveryTest, LiveMachineLoads) {
  absl::StatusOr<Topology> t = Discover(TopologySource::Live());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->cpus.empty());
  EXPECT_GE(t->packages.size(), 1u);
  EXPECT_GE(t->numa_nodes.size(), 1u);
  EXPECT_EQ(t->source, "live");
  ExpectConsistent(*t);
}

TEST(DiscoveryTest, BadSourcesGiveClearErrors) {
  absl::StatusOr<Topology> missing = Discover(TopologySource::XmlFile("/nonexistent/topo.xml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("cannot read topology file \"/nonexistent/topo.xml\""));

  const std::string garbage = ::testing::TempDir() + "/garbage.xml";
  {
    FILE* f = fopen(garbage.c_str(), "w");
    fputs("<?xml version=\"1.0\"?><topology", f);
    fclose(f);
  }
  absl::StatusOr<Topology> bad = Discover(TopologySource::XmlFile(garbage));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("is not valid hwloc XML"));

  for (const char* desc : {"", "pack:2 foo:3", "pack:-1 pu:2", "garbage"}) {
    absl::StatusOr<Topology> s = Discover(TopologySource::Synthetic(desc));
    ASSERT_FALSE(s.ok()) << desc;
    EXPECT_THAT(s.status().message(), HasSubstr("invalid synthetic topology")) << desc;
  }
}

TEST(DiscoveryTest, DiscovererInterfaceMatchesOneShotHelper) {
  auto d = NewHwlocDiscoverer(TopologySource::XmlFile(Fixture("16em64t-4s2c2t.xml")));
  absl::StatusOr<Topology> a = d->Discover();
  absl::StatusOr<Topology> b = d->Discover();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->online, b->online);
  EXPECT_EQ(a->cores.size(), b->cores.size());
}

}  // namespace
}  // namespace topodra::topology
