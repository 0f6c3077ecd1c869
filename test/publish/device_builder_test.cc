// Which devices a node publishes, per mode, over the shared machine exports.
#include "driver/publish/device_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "test/testing/fixtures.h"

namespace topodra::publish {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using topology::Topology;

Topology Load(const std::string& name) { return testing::LoadTopology(name); }

PublishOptions Opts(CpuDeviceMode mode, GroupBy by = GroupBy::kNuma, CpuSet reserved = {}) {
  PublishOptions o;
  o.node_name = "node-a";
  o.cpu_mode = mode;
  o.group_by = by;
  o.reserved_cpus = std::move(reserved);
  return o;
}

int64_t IntAttr(const Device& d, const std::string& key) {
  auto it = d.attributes.find(key);
  if (it == d.attributes.end()) return -1;
  return std::get<int64_t>(it->second);
}

std::vector<std::string> Names(const Pool& p) {
  std::vector<std::string> out;
  for (const Device& d : p.devices) out.push_back(d.name);
  return out;
}

CpuSet CpusOf(const Pool& p) {
  CpuSet out;
  for (const Device& d : p.devices) out.Add(static_cast<int>(IntAttr(d, "dra.cpu/cpuID")));
  return out;
}

TEST(DeviceBuilderTest, IndividualModeNumbersSiblingsAdjacently) {
  // 16em64t: CPU N and N+8 are siblings.
  const std::vector<Pool> pools =
      BuildPools(Load("16em64t-4s2c2t.xml"), Opts(CpuDeviceMode::kIndividual));
  ASSERT_EQ(pools.size(), 1u);  // no GPUs
  const Pool& p = pools[0];
  EXPECT_EQ(p.driver, "dra.cpu");
  EXPECT_EQ(p.name, "node-a");
  ASSERT_EQ(p.devices.size(), 16u);
  EXPECT_EQ(p.devices[0].name, "cpudev000");
  EXPECT_EQ(IntAttr(p.devices[0], "dra.cpu/cpuID"), 0);
  EXPECT_EQ(IntAttr(p.devices[1], "dra.cpu/cpuID"), 8);
  EXPECT_EQ(IntAttr(p.devices[0], "dra.cpu/coreID"), IntAttr(p.devices[1], "dra.cpu/coreID"));
  EXPECT_EQ(IntAttr(p.devices[2], "dra.cpu/cpuID"), 4);
  EXPECT_EQ(IntAttr(p.devices[3], "dra.cpu/cpuID"), 12);
  const Device& d = p.devices[2];
  EXPECT_EQ(IntAttr(d, "resource.kubernetes.io/numaNode"), 0);
  EXPECT_EQ(IntAttr(d, "dra.cpu/numaNodeID"), 0);
  EXPECT_EQ(IntAttr(d, "dra.net/numaNode"), 0);
  EXPECT_EQ(IntAttr(d, "dra.cpu/socketID"), 0);
  EXPECT_EQ(IntAttr(d, "dra.cpu/cacheL3ID"), 0);
  EXPECT_EQ(std::get<bool>(d.attributes.at("dra.cpu/smtEnabled")), true);
  EXPECT_EQ(std::get<std::string>(d.attributes.at("dra.cpu/coreType")), "standard");
  EXPECT_TRUE(d.capacity.empty());
  EXPECT_FALSE(d.allow_multiple_allocations);
}

TEST(DeviceBuilderTest, ReservedAndOfflineCpusNeverAppear) {
  const Topology t = Load("16em64t-4s2c2t-offlines.xml");  // online 0-1,3-4,6,12,15
  const std::vector<Pool> pools =
      BuildPools(t, Opts(CpuDeviceMode::kIndividual, GroupBy::kNuma, CpuSet{1, 12}));
  EXPECT_EQ(CpusOf(pools[0]).ToString(), "0,3-4,6,15");
  // Names stay those of the full machine, so reserving a CPU renames nothing else.
  const std::vector<Pool> all = BuildPools(t, Opts(CpuDeviceMode::kIndividual));
  const std::vector<std::string> names = Names(pools[0]);
  const std::set<std::string> reserved_names(names.begin(), names.end());
  for (const Device& d : all[0].devices) {
    const int cpu = static_cast<int>(IntAttr(d, "dra.cpu/cpuID"));
    EXPECT_EQ(reserved_names.count(d.name) == 1, cpu != 1 && cpu != 12) << d.name;
  }
}

struct GroupCase {
  const char* fixture;
  GroupBy by;
  CpuSet reserved;
  std::vector<std::string> names;
  std::vector<int64_t> cpus;  // capacity per device
};

TEST(DeviceBuilderTest, GroupedModes) {
  const GroupCase cases[] = {
      {"power8gpudistances.xml", GroupBy::kNuma, {}, {"cpudevnuma000", "cpudevnuma001"}, {8, 8}},
      {"power8gpudistances.xml",
       GroupBy::kNuma,
       CpuSet{0, 1, 8, 9, 16, 17, 24, 25},
       {"cpudevnuma001"},
       {8}},  // a group with no usable CPU publishes nothing
      {"power8gpudistances.xml",
       GroupBy::kSocket,
       CpuSet{0},
       {"cpudevsocket000", "cpudevsocket001"},
       {7, 8}},
      {"power8gpudistances.xml", GroupBy::kMachine, CpuSet{0, 80}, {"cpudevmachine"}, {14}},
      {"64intel64-fakeKNL-SNC4-hybrid.xml",
       GroupBy::kNuma,
       {},
       {"cpudevnuma000", "cpudevnuma001", "cpudevnuma002", "cpudevnuma003"},  // MCDRAM: none
       {16, 16, 16, 16}},
      {"16em64t-4s2c2t-offlines.xml",
       GroupBy::kSocket,
       {},
       {"cpudevsocket000", "cpudevsocket001", "cpudevsocket002", "cpudevsocket003"},
       {3, 1, 1, 2}},
      {"192em64t-24n8c2t.xml", GroupBy::kMachine, {}, {"cpudevmachine"}, {384}},
  };
  for (const GroupCase& c : cases) {
    SCOPED_TRACE(std::string(c.fixture) + " " + GroupByName(c.by) + " reserved " +
                 c.reserved.ToString());
    const std::vector<Pool> pools =
        BuildPools(Load(c.fixture), Opts(CpuDeviceMode::kGrouped, c.by, c.reserved));
    const Pool& p = pools[0];
    EXPECT_EQ(Names(p), c.names);
    ASSERT_EQ(p.devices.size(), c.cpus.size());
    for (size_t i = 0; i < c.cpus.size(); ++i) {
      const Device& d = p.devices[i];
      EXPECT_TRUE(d.allow_multiple_allocations);
      const Capacity& cap = d.capacity.at("dra.cpu/cpu");
      EXPECT_EQ(cap.value, std::to_string(c.cpus[i]));
      ASSERT_TRUE(cap.request_policy.has_value());
      EXPECT_EQ(cap.request_policy->default_value, "1");
      ASSERT_TRUE(cap.request_policy->valid_range.has_value());
      EXPECT_EQ(cap.request_policy->valid_range->min, "1");
      EXPECT_EQ(cap.request_policy->valid_range->step, "1");
      EXPECT_EQ(IntAttr(d, "dra.cpu/numCPUs"), c.cpus[i]);
    }
  }
}

TEST(DeviceBuilderTest, GroupAttributesOnlyWhereTheyApply) {
  const Topology t = Load("28intel64-2p2g7c-CoDgroups.v1tov2.xml");  // 2 NUMA nodes per socket
  const Pool numa = BuildPools(t, Opts(CpuDeviceMode::kGrouped, GroupBy::kNuma))[0];
  ASSERT_EQ(numa.devices.size(), 4u);
  EXPECT_EQ(IntAttr(numa.devices[3], "resource.kubernetes.io/numaNode"), 3);
  EXPECT_EQ(IntAttr(numa.devices[3], "dra.cpu/socketID"), 1);
  const Pool socket = BuildPools(t, Opts(CpuDeviceMode::kGrouped, GroupBy::kSocket))[0];
  ASSERT_EQ(socket.devices.size(), 2u);
  EXPECT_EQ(IntAttr(socket.devices[1], "dra.cpu/socketID"), 1);
  EXPECT_EQ(socket.devices[1].attributes.count("resource.kubernetes.io/numaNode"), 0u);
  const Pool machine = BuildPools(t, Opts(CpuDeviceMode::kGrouped, GroupBy::kMachine))[0];
  EXPECT_EQ(machine.devices[0].attributes.count("dra.cpu/socketID"), 0u);
  EXPECT_EQ(std::get<bool>(machine.devices[0].attributes.at("dra.cpu/smtEnabled")), false);
}

TEST(DeviceBuilderTest, EverythingReservedGivesAnEmptyPool) {
  const Topology t = Load("fakecpukinds.xml");
  for (CpuDeviceMode m : {CpuDeviceMode::kGrouped, CpuDeviceMode::kIndividual}) {
    const std::vector<Pool> pools = BuildPools(t, Opts(m, GroupBy::kNuma, CpuSet::Range(0, 3)));
    ASSERT_EQ(pools.size(), 1u);
    EXPECT_TRUE(pools[0].devices.empty());
  }
}

TEST(DeviceBuilderTest, CpuKindsBecomeCoreTypes) {
  const Pool p = BuildPools(Load("fakecpukinds.xml"), Opts(CpuDeviceMode::kIndividual))[0];
  std::map<int64_t, std::string> type;
  for (const Device& d : p.devices) {
    type[IntAttr(d, "dra.cpu/cpuID")] = std::get<std::string>(d.attributes.at("dra.cpu/coreType"));
  }
  // A core's type is that of its first thread: core 0 = CPUs 0,2 (e-core), core 1 = 1,3.
  EXPECT_EQ(type[0], "e-core");
  EXPECT_EQ(type[2], "e-core");
}

TEST(DeviceBuilderTest, GpusOfDgx2) {
  const std::vector<Pool> pools = BuildPools(Load("nvidiaDGX2.xml"), Opts(CpuDeviceMode::kGrouped));
  ASSERT_EQ(pools.size(), 2u);
  const Pool& g = pools[1];
  EXPECT_EQ(g.driver, "gpu.topodra.io");
  ASSERT_EQ(g.devices.size(), 16u);
  const Device& d = g.devices[15];
  EXPECT_EQ(d.name, "gpu-0000-e7-00-0");
  EXPECT_EQ(std::get<std::string>(d.attributes.at("resource.kubernetes.io/pciBusID")),
            "0000:e7:00.0");
  EXPECT_EQ(std::get<std::string>(d.attributes.at("resource.kubernetes.io/pcieRoot")),
            "pci0000:d7");
  EXPECT_EQ(IntAttr(d, "resource.kubernetes.io/numaNode"), 1);
  EXPECT_EQ(std::get<std::string>(d.attributes.at("vendorID")), "0x10de");
  EXPECT_EQ(std::get<std::string>(d.attributes.at("deviceID")), "0x1db8");
  EXPECT_EQ(std::get<std::string>(d.attributes.at("productName")), "Tesla V100-SXM3-32GB-H");
  EXPECT_EQ(std::get<std::string>(d.attributes.at("type")), "gpu");
  EXPECT_EQ(d.capacity.count("memory"), 0u);  // NVML export without memory size
}

TEST(DeviceBuilderTest, GpuMemoryHealthAndBmcDisplays) {
  const Topology power8 = Load("power8gpudistances.xml");
  PublishOptions o = Opts(CpuDeviceMode::kGrouped);
  Pool g = BuildPools(power8, o)[1];
  EXPECT_EQ(g.devices[0].capacity.at("memory").value, std::to_string(16671616ull * 1024));
  o.unhealthy_gpus = {"0003:01:00.0"};
  g = BuildPools(power8, o)[1];
  EXPECT_THAT(Names(g), ElementsAre("gpu-0002-01-00-0", "gpu-000a-01-00-0", "gpu-000b-01-00-0"));
  o.gpus = false;
  EXPECT_EQ(BuildPools(power8, o).size(), 1u);
  // 32em64t has a Matrox BMC display next to its compute GPUs: only the latter are published.
  const Pool normalio =
      BuildPools(Load("32em64t-2n8c2t-pci-normalio.xml"), Opts(CpuDeviceMode::kGrouped))[1];
  EXPECT_THAT(Names(normalio), ElementsAre("gpu-0000-03-00-0", "gpu-0000-83-00-0",
                                           "gpu-0000-84-00-0", "gpu-0000-84-00-1"));
  // 192em64t's only display controller is a BMC one: no GPU pool at all.
  EXPECT_EQ(BuildPools(Load("192em64t-24n8c2t.xml"), Opts(CpuDeviceMode::kGrouped)).size(), 1u);
}

TEST(DeviceBuilderTest, LongPciNamesAreTruncatedTo64Bytes) {
  const Pool g =
      BuildPools(Load("32em64t-2n8c2t-pci-normalio.xml"), Opts(CpuDeviceMode::kGrouped))[1];
  for (const Device& d : g.devices) {
    for (const auto& [k, v] : d.attributes) {
      if (const std::string* s = std::get_if<std::string>(&v)) {
        EXPECT_LE(s->size(), 64u) << k;
      }
    }
  }
}

TEST(DeviceBuilderTest, FlagParsingAndValidation) {
  EXPECT_EQ(*ParseGroupBy("numanode"), GroupBy::kNuma);
  EXPECT_EQ(*ParseGroupBy("socket"), GroupBy::kSocket);
  EXPECT_THAT(std::string(ParseGroupBy("core").status().message()), HasSubstr("\"core\""));
  EXPECT_EQ(*ParseCpuDeviceMode("individual"), CpuDeviceMode::kIndividual);
  EXPECT_FALSE(ParseCpuDeviceMode("Grouped").ok());

  const Topology t = Load("16em64t-4s2c2t-offlines.xml");
  PublishOptions o = Opts(CpuDeviceMode::kGrouped);
  EXPECT_TRUE(ValidateOptions(o, t).ok());
  o.reserved_cpus = CpuSet{2, 15};  // 2 is offline but exists: fine
  EXPECT_TRUE(ValidateOptions(o, t).ok());
  o.reserved_cpus = CpuSet{16, 40};
  EXPECT_THAT(std::string(ValidateOptions(o, t).message()),
              HasSubstr("reserved CPUs 16,40 do not exist"));
  o = Opts(CpuDeviceMode::kGrouped);
  o.node_name = "Node_A";
  EXPECT_THAT(std::string(ValidateOptions(o, t).message()), HasSubstr("\"Node_A\""));
  o = Opts(CpuDeviceMode::kGrouped);
  o.cpu_driver = "DRA.cpu";
  EXPECT_FALSE(ValidateOptions(o, t).ok());
  o.cpu_driver = o.gpu_driver;
  EXPECT_THAT(std::string(ValidateOptions(o, t).message()), HasSubstr("must differ"));
}

}  // namespace
}  // namespace topodra::publish

namespace topodra::publish {
namespace {

// The prepare side resolves device names through CpuDeviceCpus: it must name exactly the CPU
// devices BuildPools publishes, with the CPUs they advertise.
TEST(DeviceBuilderTest, CpuDeviceCpusMatchesThePublishedDevices) {
  for (const std::string& fixture : testing::AllFixtures()) {
    const Topology topo = Load(fixture);
    for (const PublishOptions& opts : {Opts(CpuDeviceMode::kIndividual, GroupBy::kNuma, CpuSet{1}),
                                       Opts(CpuDeviceMode::kGrouped, GroupBy::kNuma, CpuSet{1}),
                                       Opts(CpuDeviceMode::kGrouped, GroupBy::kSocket),
                                       Opts(CpuDeviceMode::kGrouped, GroupBy::kMachine)}) {
      const std::map<std::string, CpuSet> cpus = CpuDeviceCpus(topo, opts);
      const Pool pool = BuildPools(topo, opts)[0];
      ASSERT_EQ(cpus.size(), pool.devices.size()) << fixture;
      CpuSet all;
      for (const Device& d : pool.devices) {
        auto it = cpus.find(d.name);
        ASSERT_NE(it, cpus.end()) << fixture << " " << d.name;
        all |= it->second;
        if (opts.cpu_mode == CpuDeviceMode::kIndividual) {
          EXPECT_EQ(it->second, CpuSet{static_cast<int>(IntAttr(d, "dra.cpu/cpuID"))}) << d.name;
        } else {
          EXPECT_EQ(it->second.Size(), IntAttr(d, "dra.cpu/numCPUs")) << fixture << " " << d.name;
        }
      }
      EXPECT_EQ(all, topo.online - opts.reserved_cpus) << fixture;
    }
  }
}

}  // namespace
}  // namespace topodra::publish
