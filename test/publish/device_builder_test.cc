// Which devices a node publishes, per mode, over the shared machine exports.
#include "driver/publish/device_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "absl/strings/str_format.h"
#include "driver/publish/names.h"
#include "driver/publish/slice_json.h"
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
      // Whole CPUs, at least one. A range needs min + step <= value (k8s-api-cdi.md §1.6), so
      // a group of one CPU lists its one value instead.
      const nlohmann::json want =
          c.cpus[i] == 1
              ? nlohmann::json{{"default", "1"}, {"validValues", {"1"}}}
              : nlohmann::json{{"default", "1"}, {"validRange", {{"min", "1"}, {"step", "1"}}}};
      EXPECT_EQ(CapacityToJson(cap)["requestPolicy"].dump(), want.dump());
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
  // An unhealthy GPU stays published, tainted NoSchedule with its cause; the others are not.
  o.unhealthy_gpus = {{"0003:01:00.0", "aer-fatal"}};
  g = BuildPools(power8, o)[1];
  EXPECT_THAT(Names(g), ElementsAre("gpu-0002-01-00-0", "gpu-0003-01-00-0", "gpu-000a-01-00-0",
                                    "gpu-000b-01-00-0"));
  EXPECT_EQ(g.devices[1].extra,
            nlohmann::json({{"taints", nlohmann::json::array({{{"key", "gpu.topodra.io/unhealthy"},
                                                               {"value", "aer-fatal"},
                                                               {"effect", "NoSchedule"}}})}}));
  for (size_t i : {0, 2, 3}) EXPECT_FALSE(g.devices[i].extra.contains("taints")) << i;
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

// Reservations: held CPUs and GPUs leave the shared devices and come back marked.
namespace topodra::publish {
namespace {

using nlohmann::json;

constexpr char kSince[] = "2025-03-01T09:00:00Z";

ReservedDevices Resv(std::string name, CpuSet cpus, std::set<std::string> gpus = {},
                     std::string since = kSince) {
  return ReservedDevices{std::move(name), std::move(cpus), std::move(gpus), std::move(since)};
}

json TaintsFor(const std::string& name, const std::string& since = kSince) {
  json t{{"key", "topodra.io/reservation"}, {"value", name}, {"effect", "NoSchedule"}};
  if (!since.empty()) t["timeAdded"] = since;
  return json::array({t});
}

std::string StrAttr(const Device& d, const std::string& key) {
  auto it = d.attributes.find(key);
  if (it == d.attributes.end()) return "<none>";
  return std::get<std::string>(it->second);
}

// One expected grouped device: numa / socket -1 when the attributes must be absent.
struct WantDevice {
  std::string name;
  CpuSet cpus;
  std::string reservation;  // "" for a group device
  int numa;
  int socket;
};

struct ReservationCase {
  const char* label;
  const char* fixture;
  GroupBy by;
  CpuSet reserved_cpus;
  std::vector<ReservedDevices> reservations;
  std::vector<WantDevice> want;  // the whole CPU pool, in order
};

void ExpectGroupedPool(const Topology& t, const PublishOptions& o,
                       const std::vector<WantDevice>& want) {
  const Pool p = BuildPools(t, o)[0];
  const std::map<std::string, CpuSet> cpus = CpuDeviceCpus(t, o);
  std::vector<std::string> want_names;
  for (const WantDevice& w : want) want_names.push_back(w.name);
  ASSERT_EQ(Names(p), want_names);
  ASSERT_EQ(cpus.size(), want.size());
  const bool smt = t.MaxThreadsPerCore() > 1;
  for (size_t i = 0; i < want.size(); ++i) {
    const WantDevice& w = want[i];
    const Device& d = p.devices[i];
    SCOPED_TRACE(d.name);
    EXPECT_EQ(cpus.at(d.name), w.cpus);
    EXPECT_TRUE(d.allow_multiple_allocations);
    EXPECT_TRUE(d.includes.empty());
    ASSERT_EQ(d.capacity.size(), 1u);
    EXPECT_EQ(d.capacity.at("dra.cpu/cpu"),
              (Capacity{std::to_string(w.cpus.Size()),
                        RequestPolicy{"1", {}, ValidRange{"1", std::nullopt, "1"}}}));
    EXPECT_EQ(IntAttr(d, "dra.cpu/numCPUs"), w.cpus.Size());
    EXPECT_EQ(std::get<bool>(d.attributes.at("dra.cpu/smtEnabled")), smt);
    EXPECT_EQ(IntAttr(d, "resource.kubernetes.io/numaNode"), w.numa);
    EXPECT_EQ(IntAttr(d, "dra.cpu/numaNodeID"), w.numa);
    EXPECT_EQ(IntAttr(d, "dra.net/numaNode"), w.numa);
    EXPECT_EQ(IntAttr(d, "dra.cpu/socketID"), w.socket);
    if (w.reservation.empty()) {
      EXPECT_EQ(d.attributes.count("topodra.io/reservation"), 0u);
      EXPECT_EQ(d.extra, json::object());
    } else {
      EXPECT_EQ(StrAttr(d, "topodra.io/reservation"), w.reservation);
      std::string since = kSince;
      for (const ReservedDevices& r : o.reservations) {
        if (r.name == w.reservation) since = r.since;
      }
      EXPECT_EQ(d.extra, json({{"taints", TaintsFor(w.reservation, since)}}));
    }
    // Group shape: the NUMA and socket attributes, numCPUs and smtEnabled, nothing else but
    // the reservation's name.
    const size_t expected_attrs =
        (w.numa >= 0 ? 3 : 0) + (w.socket >= 0 ? 1 : 0) + 2 + (w.reservation.empty() ? 0 : 1);
    EXPECT_EQ(d.attributes.size(), expected_attrs);
  }
}

TEST(ReservationTest, GroupedDevices) {
  // 32em64t: NUMA node = socket; node 0 holds 0-7,16-23, node 1 8-15,24-31.
  // 28intel64 CoD: no SMT, NUMA n holds 7n..7n+6, sockets hold NUMA 0-1 and 2-3.
  // 16em64t offlines: one NUMA node, online 0-1,3-4,6,12,15; CPU 3 on socket 3, 12 on socket 0.
  const std::vector<ReservationCase> cases = {
      {"numa, one reservation",
       "32em64t-2n8c2t-pci-normalio.xml",
       GroupBy::kNuma,
       {},
       {Resv("job-a", CpuSet::Range(8, 11))},
       {{"cpudevnuma000", CpuSet::Range(0, 7) | CpuSet::Range(16, 23), "", 0, 0},
        {"cpudevnuma001", CpuSet::Range(12, 15) | CpuSet::Range(24, 31), "", 1, 1},
        {"cpudevresv-job-a", CpuSet::Range(8, 11), "job-a", 1, 1}}},
      {"numa, two reservations, devices in name order",
       "32em64t-2n8c2t-pci-normalio.xml",
       GroupBy::kNuma,
       {},
       {Resv("job-a", CpuSet::Range(8, 11)), Resv("batch.team-b", CpuSet{0, 1, 16, 17}, {}, "")},
       {{"cpudevnuma000", CpuSet::Range(2, 7) | CpuSet::Range(18, 23), "", 0, 0},
        {"cpudevnuma001", CpuSet::Range(12, 15) | CpuSet::Range(24, 31), "", 1, 1},
        {"cpudevresv-batch-team-b", CpuSet{0, 1, 16, 17}, "batch.team-b", 0, 0},
        {"cpudevresv-job-a", CpuSet::Range(8, 11), "job-a", 1, 1}}},
      {"numa, a reservation spanning two NUMA nodes has no NUMA or socket attributes",
       "32em64t-2n8c2t-pci-normalio.xml",
       GroupBy::kNuma,
       {},
       {Resv("wide", CpuSet::Range(6, 9))},
       {{"cpudevnuma000", CpuSet::Range(0, 5) | CpuSet::Range(16, 23), "", 0, 0},
        {"cpudevnuma001", CpuSet::Range(10, 15) | CpuSet::Range(24, 31), "", 1, 1},
        {"cpudevresv-wide", CpuSet::Range(6, 9), "wide", -1, -1}}},
      {"numa, a reservation holding a whole NUMA node leaves no group device there",
       "32em64t-2n8c2t-pci-normalio.xml",
       GroupBy::kNuma,
       {},
       {Resv("node1", CpuSet::Range(8, 15) | CpuSet::Range(24, 31))},
       {{"cpudevnuma000", CpuSet::Range(0, 7) | CpuSet::Range(16, 23), "", 0, 0},
        {"cpudevresv-node1", CpuSet::Range(8, 15) | CpuSet::Range(24, 31), "node1", 1, 1}}},
      {"socket, a reservation across two NUMA nodes of one socket keeps the socket",
       "28intel64-2p2g7c-CoDgroups.v1tov2.xml",
       GroupBy::kSocket,
       {},
       {Resv("cod", CpuSet::Range(5, 8))},
       {{"cpudevsocket000", CpuSet::Range(0, 4) | CpuSet::Range(9, 13), "", -1, 0},
        {"cpudevsocket001", CpuSet::Range(14, 27), "", -1, 1},
        {"cpudevresv-cod", CpuSet::Range(5, 8), "cod", -1, 0}}},
      {"socket, a reservation within one NUMA node",
       "28intel64-2p2g7c-CoDgroups.v1tov2.xml",
       GroupBy::kSocket,
       {},
       {Resv("n3", CpuSet{21, 27})},
       {{"cpudevsocket000", CpuSet::Range(0, 13), "", -1, 0},
        {"cpudevsocket001", CpuSet::Range(14, 20) | CpuSet::Range(22, 26), "", -1, 1},
        {"cpudevresv-n3", CpuSet{21, 27}, "n3", 3, 1}}},
      {"machine, two reservations",
       "32em64t-2n8c2t-pci-normalio.xml",
       GroupBy::kMachine,
       {},
       {Resv("a", CpuSet::Range(0, 3)), Resv("b", CpuSet{8, 9})},
       {{"cpudevmachine", CpuSet::Range(4, 7) | CpuSet::Range(10, 31), "", -1, -1},
        {"cpudevresv-a", CpuSet::Range(0, 3), "a", 0, 0},
        {"cpudevresv-b", CpuSet{8, 9}, "b", 1, 1}}},
      {"reserved CPUs are never published, held or not",
       "32em64t-2n8c2t-pci-normalio.xml",
       GroupBy::kNuma,
       CpuSet{0, 8, 9},
       {Resv("job-a", CpuSet::Range(8, 11)), Resv("gone", CpuSet{0})},
       {{"cpudevnuma000", CpuSet::Range(1, 7) | CpuSet::Range(16, 23), "", 0, 0},
        {"cpudevnuma001", CpuSet::Range(12, 15) | CpuSet::Range(24, 31), "", 1, 1},
        {"cpudevresv-job-a", CpuSet{10, 11}, "job-a", 1, 1}}},
      {"offline CPUs of a reservation are not published",
       "16em64t-4s2c2t-offlines.xml",
       GroupBy::kNuma,
       {},
       {Resv("off", CpuSet{2, 3, 12}), Resv("all-offline", CpuSet{5, 7})},
       {{"cpudevnuma000", CpuSet{0, 1, 4, 6, 15}, "", 0, -1},
        {"cpudevresv-off", CpuSet{3, 12}, "off", 0, -1}}},
  };
  for (const ReservationCase& c : cases) {
    SCOPED_TRACE(c.label);
    const Topology t = Load(c.fixture);
    PublishOptions o = Opts(CpuDeviceMode::kGrouped, c.by, c.reserved_cpus);
    o.reservations = c.reservations;
    ASSERT_TRUE(ValidateOptions(o, t).ok()) << ValidateOptions(o, t);
    ExpectGroupedPool(t, o, c.want);
  }
}

TEST(ReservationTest, GroupCapacitiesShrinkExactlyOn192em64t) {
  // 24 sockets of one NUMA node each: node n holds 8n..8n+7 and 192+8n..192+8n+7.
  const Topology t = Load("192em64t-24n8c2t.xml");
  for (GroupBy by : {GroupBy::kNuma, GroupBy::kSocket}) {
    SCOPED_TRACE(GroupByName(by));
    PublishOptions o = Opts(CpuDeviceMode::kGrouped, by, CpuSet{0});
    o.reservations = {Resv("x", CpuSet{24, 25, 216, 217}), Resv("y", CpuSet{100, 101, 0})};
    std::vector<WantDevice> want;
    const std::string prefix = by == GroupBy::kNuma ? "cpudevnuma" : "cpudevsocket";
    for (int n = 0; n < 24; ++n) {
      const CpuSet node = CpuSet::Range(8 * n, 8 * n + 7) | CpuSet::Range(192 + 8 * n, 199 + 8 * n);
      want.push_back({absl::StrFormat("%s%03d", prefix, n),
                      node - CpuSet{0, 24, 25, 216, 217, 100, 101}, "", n, n});
    }
    want.push_back({"cpudevresv-x", CpuSet{24, 25, 216, 217}, "x", 3, 3});
    want.push_back({"cpudevresv-y", CpuSet{100, 101}, "y", 12, 12});
    ExpectGroupedPool(t, o, want);
  }
}

TEST(ReservationTest, IndividualDevicesKeepTheirNamesAndGetMarked) {
  const Topology t = Load("28intel64-2p2g7c-CoDgroups.v1tov2.xml");  // cpudevNNN = CPU NNN
  const Pool base = BuildPools(t, Opts(CpuDeviceMode::kIndividual, GroupBy::kNuma, CpuSet{8}))[0];
  PublishOptions o = Opts(CpuDeviceMode::kIndividual, GroupBy::kNuma, CpuSet{8});
  o.reservations = {Resv("ind", CpuSet{7, 8, 20}), Resv("other", CpuSet{27}, {}, "")};
  ASSERT_TRUE(ValidateOptions(o, t).ok());
  const Pool p = BuildPools(t, o)[0];
  ASSERT_EQ(Names(p), Names(base));
  ASSERT_EQ(p.devices.size(), 27u);
  for (size_t i = 0; i < p.devices.size(); ++i) {
    const Device& d = p.devices[i];
    SCOPED_TRACE(d.name);
    const int cpu = static_cast<int>(IntAttr(d, "dra.cpu/cpuID"));
    Device want = base.devices[i];
    if (cpu == 7 || cpu == 20) {
      want.attributes["topodra.io/reservation"] = std::string("ind");
      want.extra["taints"] = TaintsFor("ind");
    } else if (cpu == 27) {
      want.attributes["topodra.io/reservation"] = std::string("other");
      want.extra["taints"] = TaintsFor("other", "");
    }
    EXPECT_EQ(d, want);
  }
  const std::map<std::string, CpuSet> cpus = CpuDeviceCpus(t, o);
  EXPECT_EQ(cpus.size(), 27u);
  EXPECT_EQ(cpus.at("cpudev007"), CpuSet{7});
  EXPECT_EQ(cpus.count("cpudev008"), 0u);
  EXPECT_EQ(cpus.count(ReservationCpuDeviceName("ind")), 0u);
}

TEST(ReservationTest, GpusKeepTheirNamesAndGetMarked) {
  const Topology t = Load("nvidiaDGX2.xml");
  const std::vector<Pool> base = BuildPools(t, Opts(CpuDeviceMode::kGrouped));
  PublishOptions o = Opts(CpuDeviceMode::kGrouped);
  // A GPU that is not (or no longer) on the machine is not an error: it is just not published.
  o.reservations = {Resv("train", {}, {"0000:e7:00.0", "0000:34:00.0", "0000:ff:00.0"}),
                    Resv("infer", CpuSet{24}, {"0000:b7:00.0"})};
  // Unhealthy and held: published, marked held, with both taints.
  o.unhealthy_gpus = {{"0000:b7:00.0", "link-down"}};
  ASSERT_TRUE(ValidateOptions(o, t).ok());
  const std::vector<Pool> pools = BuildPools(t, o);
  ASSERT_EQ(pools.size(), 2u);
  const Pool& g = pools[1];
  ASSERT_EQ(g.devices.size(), 16u);
  size_t b = 0;
  for (const Device& d : g.devices) {
    SCOPED_TRACE(d.name);
    Device want = base[1].devices[b++];
    if (d.name == "gpu-0000-e7-00-0" || d.name == "gpu-0000-34-00-0") {
      want.attributes["topodra.io/reservation"] = std::string("train");
      want.extra["taints"] = TaintsFor("train");
    }
    if (d.name == "gpu-0000-b7-00-0") {
      want.attributes["topodra.io/reservation"] = std::string("infer");
      want.extra["taints"] = TaintsFor("infer");
      want.extra["taints"].push_back(
          {{"key", "gpu.topodra.io/unhealthy"}, {"value", "link-down"}, {"effect", "NoSchedule"}});
    }
    EXPECT_EQ(d, want);
  }
  EXPECT_EQ(Names(pools[0]),
            (std::vector<std::string>{"cpudevnuma000", "cpudevnuma001", "cpudevresv-infer"}));
  EXPECT_EQ(IntAttr(pools[0].devices[1], "dra.cpu/numCPUs"), 1);  // 25 left on node 1
}

TEST(ReservationTest, TaintsOffAndTimes) {
  const Topology t = Load("nvidiaDGX2.xml");
  PublishOptions o = Opts(CpuDeviceMode::kGrouped);
  o.reservations = {Resv("r", CpuSet{0}, {"0000:34:00.0"})};
  o.reservation_taints = false;
  std::vector<Pool> pools = BuildPools(t, o);
  ASSERT_EQ(Names(pools[0]).back(), "cpudevresv-r");
  for (const Device* d : {&pools[0].devices.back(), &pools[1].devices.front()}) {
    EXPECT_EQ(StrAttr(*d, "topodra.io/reservation"), "r") << d->name;
    EXPECT_EQ(d->extra, json::object()) << d->name;
  }
  // timeAdded goes out as the API server stores a time (UTC, whole seconds), so what it stores
  // equals what was sent.
  o.reservation_taints = true;
  struct TimeCase {
    std::string since;
    std::string want;  // "" when timeAdded is left to the server
  };
  for (const TimeCase& c : std::vector<TimeCase>{
           {"2025-03-01T09:00:00Z", "2025-03-01T09:00:00Z"},
           {"2025-03-01T10:00:00.5+01:00", "2025-03-01T09:00:00Z"},
           {"2025-03-01t00:30:00-01:15", "2025-03-01T01:45:00Z"},
           {"2024-12-31T23:59:59.999-00:30", "2025-01-01T00:29:59Z"},
           {"", ""},
       }) {
    SCOPED_TRACE(c.since);
    o.reservations[0].since = c.since;
    EXPECT_TRUE(ValidateOptions(o, t).ok());
    pools = BuildPools(t, o);
    EXPECT_EQ(pools[0].devices.back().extra["taints"], TaintsFor("r", c.want));
    EXPECT_EQ(pools[1].devices.front().extra["taints"], TaintsFor("r", c.want));
  }
}

TEST(ReservationTest, DeviceNames) {
  struct NameCase {
    std::string reservation;
    std::string want;
  };
  const std::string r52(52, 'r');
  const std::vector<NameCase> cases = {
      {"job-a", "cpudevresv-job-a"},
      {"team.b.job-1", "cpudevresv-team-b-job-1"},
      {r52, "cpudevresv-" + r52},  // exactly 63
      {std::string(53, 'r'), "cpudevresv-" + std::string(43, 'r') + "-d90afcd5"},
      {std::string(30, 'a') + "." + std::string(30, 'b'),
       "cpudevresv-" + std::string(30, 'a') + "-" + std::string(12, 'b') + "-a0e3c7f7"},
      // The cut lands on a '-': trimmed.
      {std::string(42, 'x') + "." + std::string(20, 'y'),
       "cpudevresv-" + std::string(42, 'x') + "-cbe674dd"},
      // Not a DNS subdomain (ValidateOptions rejects it): still a label.
      {"Job_A", "cpudevresv-job-a-bd4bcf88"},
  };
  for (const NameCase& c : cases) {
    SCOPED_TRACE(c.reservation);
    const std::string got = ReservationCpuDeviceName(c.reservation);
    EXPECT_EQ(got, c.want);
    EXPECT_LE(got.size(), 63u);
    EXPECT_TRUE(IsDnsLabel(got));
    EXPECT_EQ(got, ReservationCpuDeviceName(c.reservation));
  }
  // Long names differing only after the cut stay apart.
  const std::string stem(50, 'p');
  EXPECT_NE(ReservationCpuDeviceName(stem + "-one"), ReservationCpuDeviceName(stem + "-two"));
  for (const char* odd : {"", "-", ".", "UPPER", "a_b_c", "-x-"}) {
    EXPECT_TRUE(IsDnsLabel(ReservationCpuDeviceName(odd))) << odd;
  }
}

// The names individual devices have always had (absl::StrFormat("cpudev%03d") before).
TEST(DeviceBuilderTest, IndividualCpuDeviceNames) {
  const std::vector<std::pair<int, std::string>> cases = {
      {0, "cpudev000"},     {7, "cpudev007"},     {42, "cpudev042"},      {999, "cpudev999"},
      {1000, "cpudev1000"}, {4095, "cpudev4095"}, {65535, "cpudev65535"},
  };
  for (const auto& [index, want] : cases) EXPECT_EQ(IndividualCpuDeviceName(index), want);
}

TEST(ReservationTest, ValidateOptionsErrors) {
  const Topology t = Load("32em64t-2n8c2t-pci-normalio.xml");
  struct Case {
    const char* label;
    CpuDeviceMode mode;
    std::vector<ReservedDevices> reservations;
    const char* message;  // nullptr: valid
  };
  const std::vector<Case> cases = {
      {"fine",
       CpuDeviceMode::kGrouped,
       {Resv("a", CpuSet{1}), Resv("b", CpuSet{2}, {"x"})},
       nullptr},
      {"empty name",
       CpuDeviceMode::kGrouped,
       {Resv("", CpuSet{1})},
       "invalid reservation name \"\": must be a DNS subdomain of at most 63 characters"},
      {"bad name", CpuDeviceMode::kGrouped, {Resv("Job_A", CpuSet{1})}, "\"Job_A\""},
      {"long name",
       CpuDeviceMode::kGrouped,
       {Resv(std::string(64, 'a'), CpuSet{1})},
       "at most 63 characters"},
      {"unknown CPU",
       CpuDeviceMode::kGrouped,
       {Resv("a", CpuSet{31, 32, 99})},
       "reservation \"a\": CPUs 32,99 do not exist on this node (CPUs 0-31)"},
      {"shared CPU",
       CpuDeviceMode::kIndividual,
       {Resv("a", CpuSet{1, 2, 3}), Resv("b", CpuSet{3, 4})},
       "reservations \"a\" and \"b\" both hold CPUs 3"},
      {"shared GPU",
       CpuDeviceMode::kGrouped,
       {Resv("a", {}, {"0000:03:00.0", "0000:83:00.0"}), Resv("b", {}, {"0000:83:00.0"})},
       "reservations \"a\" and \"b\" both hold GPU \"0000:83:00.0\""},
      {"same name",
       CpuDeviceMode::kGrouped,
       {Resv("a", CpuSet{1}), Resv("a", CpuSet{2})},
       "two reservations are named \"a\""},
      {"same CPU device",
       CpuDeviceMode::kGrouped,
       {Resv("a.b", CpuSet{1}), Resv("a-b", CpuSet{2})},
       "reservations \"a.b\" and \"a-b\" would publish the same CPU device \"cpudevresv-a-b\""},
      {"same CPU device name is fine without grouped CPU devices",
       CpuDeviceMode::kIndividual,
       {Resv("a.b", CpuSet{1}), Resv("a-b", CpuSet{2})},
       nullptr},
      {"bad time",
       CpuDeviceMode::kGrouped,
       {Resv("a", CpuSet{1}, {}, "2025-03-01 09:00:00")},
       "reservation \"a\": invalid time \"2025-03-01 09:00:00\": want RFC 3339"},
      {"impossible date",
       CpuDeviceMode::kGrouped,
       {Resv("a", CpuSet{1}, {}, "2025-02-30T00:00:00Z")},
       "invalid time"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    PublishOptions o = Opts(c.mode);
    o.reservations = c.reservations;
    const absl::Status st = ValidateOptions(o, t);
    if (c.message == nullptr) {
      EXPECT_TRUE(st.ok()) << st;
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(st.message()), HasSubstr(c.message));
    }
  }
  // An offline CPU exists: holding it is fine (it is just not published).
  PublishOptions o = Opts(CpuDeviceMode::kGrouped);
  o.reservations = {Resv("a", CpuSet{2, 3})};
  EXPECT_TRUE(ValidateOptions(o, Load("16em64t-4s2c2t-offlines.xml")).ok());
}

// Options that fail ValidateOptions still give a pool whose device names are unique and where
// no CPU is published twice.
TEST(ReservationTest, InvalidOptionsStillPublishEachCpuOnce) {
  const Topology t = Load("32em64t-2n8c2t-pci-normalio.xml");
  PublishOptions o = Opts(CpuDeviceMode::kGrouped);
  o.reservations = {Resv("b", CpuSet{1, 2}), Resv("a", CpuSet{2, 3}), Resv("a.x", CpuSet{4}),
                    Resv("a-x", CpuSet{5})};
  const std::map<std::string, CpuSet> cpus = CpuDeviceCpus(t, o);
  EXPECT_EQ(cpus.at("cpudevresv-a"), (CpuSet{2, 3}));
  EXPECT_EQ(cpus.at("cpudevresv-b"), CpuSet{1});
  EXPECT_EQ(cpus.at("cpudevresv-a-x"), CpuSet{5});  // "a-x" sorts before "a.x"
  EXPECT_EQ(cpus.at("cpudevnuma000"), (CpuSet{0, 6, 7} | CpuSet::Range(16, 23)));
  EXPECT_EQ(Names(BuildPools(t, o)[0]).size(), cpus.size());
}

// The prepare side resolves reservation devices through CpuDeviceCpus too.
TEST(ReservationTest, CpuDeviceCpusMatchesThePublishedDevices) {
  for (const std::string& fixture : testing::AllFixtures()) {
    const Topology topo = Load(fixture);
    const CpuSet usable = topo.online - CpuSet{1};
    std::vector<int> ids(usable.begin(), usable.end());
    if (ids.size() < 3) continue;
    for (CpuDeviceMode mode : {CpuDeviceMode::kGrouped, CpuDeviceMode::kIndividual}) {
      for (GroupBy by : {GroupBy::kNuma, GroupBy::kSocket, GroupBy::kMachine}) {
        SCOPED_TRACE(fixture + " " + CpuDeviceModeName(mode) + " " + GroupByName(by));
        PublishOptions opts = Opts(mode, by, CpuSet{1});
        opts.reservations = {Resv("first", CpuSet{ids[0], ids[1], 1}),
                             Resv("last", CpuSet{ids.back()})};
        ASSERT_TRUE(ValidateOptions(opts, topo).ok());
        const std::map<std::string, CpuSet> cpus = CpuDeviceCpus(topo, opts);
        const Pool pool = BuildPools(topo, opts)[0];
        ASSERT_EQ(cpus.size(), pool.devices.size());
        CpuSet all;
        for (const Device& d : pool.devices) {
          auto it = cpus.find(d.name);
          ASSERT_NE(it, cpus.end()) << d.name;
          EXPECT_TRUE((all & it->second).Empty()) << d.name;
          all |= it->second;
          EXPECT_EQ(it->second.Size(),
                    mode == CpuDeviceMode::kIndividual ? 1 : IntAttr(d, "dra.cpu/numCPUs"));
          const bool held = (it->second & CpuSet{ids[0], ids[1], ids.back()}) == it->second;
          EXPECT_EQ(d.attributes.count("topodra.io/reservation"), held ? 1u : 0u) << d.name;
        }
        EXPECT_EQ(all, usable);
        if (mode == CpuDeviceMode::kGrouped) {
          EXPECT_EQ(cpus.at("cpudevresv-first"), (CpuSet{ids[0], ids[1]}));
          EXPECT_EQ(cpus.at("cpudevresv-last"), CpuSet{ids.back()});
        }
      }
    }
  }
}

}  // namespace
}  // namespace topodra::publish
