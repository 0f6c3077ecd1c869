// node::Inventory over the fixture machines: every consumer's view follows the published pools.
#include "driver/node/inventory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "driver/publish/names.h"
#include "driver/publish/slice_json.h"
#include "test/testing/fixtures.h"

namespace topodra::node {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const topology::Topology& Load(const std::string& name) {
  static auto* cache = new std::map<std::string, topology::Topology>();
  auto it = cache->find(name);
  if (it == cache->end()) it = cache->emplace(name, testing::LoadTopology(name)).first;
  return it->second;
}

InventoryOptions Options(publish::CpuDeviceMode mode, publish::GroupBy by) {
  InventoryOptions o;
  o.publish.node_name = "node1";
  o.publish.cpu_mode = mode;
  o.publish.group_by = by;
  o.cdi_marker = "0123456789abcdef";
  o.gpu_nodes = [](const topology::Gpu& gpu) {
    cdi::DeviceNode n;
    n.path = "/dev/fake-" + gpu.pci_bus_id;
    return std::vector<cdi::DeviceNode>{n};
  };
  return o;
}

std::set<std::string> DeviceNames(const std::optional<publish::Pool>& pool) {
  std::set<std::string> out;
  if (pool) {
    for (const publish::Device& d : pool->devices) out.insert(d.name);
  }
  return out;
}

template <typename Map>
std::set<std::string> Keys(const Map& m) {
  std::set<std::string> out;
  for (const auto& [k, v] : m) out.insert(k);
  return out;
}

struct Mode {
  const char* name;
  publish::CpuDeviceMode mode;
  publish::GroupBy by;
  claims::CpuDeviceKind kind;  // of the devices that are not a reservation's
};
const Mode kModes[] = {
    {"individual", publish::CpuDeviceMode::kIndividual, publish::GroupBy::kNuma,
     claims::CpuDeviceKind::kIndividual},
    {"numa", publish::CpuDeviceMode::kGrouped, publish::GroupBy::kNuma,
     claims::CpuDeviceKind::kGroup},
    {"socket", publish::CpuDeviceMode::kGrouped, publish::GroupBy::kSocket,
     claims::CpuDeviceKind::kGroup},
    {"machine", publish::CpuDeviceMode::kGrouped, publish::GroupBy::kMachine,
     claims::CpuDeviceKind::kMachine},
};

// Every fixture in every mode, with and without a reservation holding CPUs 0-1 and the first
// GPU: the setups name exactly the published devices, with the CPUs the pool gives them.
TEST(InventoryTest, EveryConsumerSeesThePublishedDevices) {
  for (const std::string& fixture : testing::AllFixtures()) {
    const topology::Topology& topo = Load(fixture);
    for (const Mode& m : kModes) {
      for (const bool reserve : {false, true}) {
        SCOPED_TRACE(fixture + " " + m.name + (reserve ? " with a reservation" : ""));
        std::vector<publish::ReservedDevices> held;
        if (reserve) {
          publish::ReservedDevices r{"r1", CpuSet::Parse("0-1").value(), {}, ""};
          if (!topo.gpus.empty()) r.gpus.insert(topo.gpus[0].pci_bus_id);
          held.push_back(r);
        }
        const Inventory inv = Inventory::Build(Options(m.mode, m.by), topo, held);
        const prepare::DriverSetup cpu = inv.CpuSetup();
        EXPECT_EQ(cpu.driver, "dra.cpu");
        EXPECT_EQ(cpu.cpu_pool.name, "node1");
        EXPECT_EQ(cpu.cdi_marker, "0123456789abcdef");
        EXPECT_EQ(Keys(cpu.cpu_pool.devices), DeviceNames(inv.CpuPool()));
        publish::PublishOptions opts = Options(m.mode, m.by).publish;
        opts.reservations = held;
        const std::map<std::string, CpuSet> cpus = publish::CpuDeviceCpus(topo, opts);
        const std::string reservation_device = publish::ReservationCpuDeviceName("r1");
        EXPECT_EQ(inv.CpuDevices(), cpus);
        for (const auto& [name, device] : cpu.cpu_pool.devices) {
          EXPECT_EQ(device.cpus, cpus.at(name)) << name;
          const bool own = reserve && name == reservation_device;
          EXPECT_EQ(device.kind, own ? claims::CpuDeviceKind::kGroup : m.kind) << name;
        }
        const prepare::DriverSetup gpu = inv.GpuSetup();
        EXPECT_EQ(Keys(gpu.gpus), DeviceNames(inv.GpuPool()));
        const reservation::NodeContext ctx = inv.ReservationContext();
        EXPECT_EQ(Keys(ctx.gpus), DeviceNames(inv.GpuPool()));
        std::set<std::string> pci;
        for (const auto& [name, g] : gpu.gpus) {
          pci.insert(g.pci_bus_id);
          ASSERT_EQ(g.device_nodes.size(), 1u);
          EXPECT_EQ(g.device_nodes[0].path, "/dev/fake-" + g.pci_bus_id);
          EXPECT_EQ(ctx.gpus.at(name), g.pci_bus_id);
        }
        EXPECT_EQ(Keys(inv.DevicePluginSetup(deviceplugin::ResourceKind::kGpu, "x.io/gpu").gpus),
                  pci);
        EXPECT_EQ(inv.ServesGpus(), !gpu.gpus.empty());
        EXPECT_EQ(ctx.devices, inv.ReservedDevices());
        if (!reserve) {
          EXPECT_THAT(inv.ReservedDevices(), IsEmpty());
        }
      }
    }
  }
}

struct GpuCase {
  const char* name;
  bool gpus;                               // --gpus=auto
  int unhealthy;                           // the first n GPUs unhealthy
  bool reserve_first;                      // a reservation holds the first GPU
  size_t want_gpus;                        // in the GPU setup
  bool want_pool;                          // a GPU pool at all
  std::vector<std::string> want_reserved;  // ReservedDevices()["r1"], device names
};

// The published-GPU filter on the 16 GPUs of a DGX-2: --gpus=none, unhealthy GPUs, reserved ones.
TEST(InventoryTest, PublishedGpuFilter) {
  const topology::Topology& topo = Load("nvidiaDGX2.xml");
  ASSERT_GE(topo.gpus.size(), 16u);
  const std::string first = publish::GpuDeviceName(topo.gpus[0]);
  const GpuCase cases[] = {
      {"all", true, 0, false, 16, true, {}},
      {"none", false, 0, false, 0, false, {}},
      {"two unhealthy: published, tainted", true, 2, false, 16, true, {}},
      {"reserved stays published, marked", true, 0, true, 16, true, {first}},
      {"unhealthy and reserved", true, 1, true, 16, true, {first}},
  };
  for (const GpuCase& c : cases) {
    SCOPED_TRACE(c.name);
    InventoryOptions o = Options(publish::CpuDeviceMode::kGrouped, publish::GroupBy::kNuma);
    o.publish.gpus = c.gpus;
    for (int i = 0; i < c.unhealthy; ++i) {
      o.publish.unhealthy_gpus[topo.gpus[i].pci_bus_id] = "removed";
    }
    std::vector<publish::ReservedDevices> held;
    if (c.reserve_first) held.push_back({"r1", CpuSet{}, {topo.gpus[0].pci_bus_id}, ""});
    const Inventory inv = Inventory::Build(o, topo, held);
    EXPECT_EQ(inv.GpuSetup().gpus.size(), c.want_gpus);
    EXPECT_EQ(inv.ReservationContext().gpus.size(), c.want_gpus);
    EXPECT_EQ(inv.DevicePluginSetup(deviceplugin::ResourceKind::kGpu, "x.io/gpu").gpus.size(),
              c.want_gpus);
    EXPECT_EQ(inv.GpuPool().has_value(), c.want_pool);
    EXPECT_EQ(inv.ServesGpus(), c.want_gpus > 0);
    EXPECT_EQ(inv.DevicePluginSetup(deviceplugin::ResourceKind::kGpu, "x.io/gpu").unhealthy.size(),
              static_cast<size_t>(c.gpus ? c.unhealthy : 0));
    std::vector<std::string> reserved;
    for (const auto& [name, refs] : inv.ReservedDevices()) {
      for (const reservation::DeviceRef& r : refs) {
        EXPECT_EQ(name, "r1");
        EXPECT_EQ(r.driver, "gpu.topodra.io");
        EXPECT_EQ(r.pool, "node1");
        reserved.push_back(r.device);
      }
    }
    EXPECT_EQ(reserved, c.want_reserved);
  }
}

// The CPU device plugin and the CPU driver share the hook, the reserved CPUs and the marker.
TEST(InventoryTest, DevicePluginSetupsFollowTheDriverSetups) {
  InventoryOptions o = Options(publish::CpuDeviceMode::kGrouped, publish::GroupBy::kNuma);
  o.publish.reserved_cpus = CpuSet::Parse("0").value();
  o.cpuset_hook = prepare::CpusetHook{"/opt/hook", "/state/containers", "/sys/fs/cgroup", true};
  const Inventory inv = Inventory::Build(o, Load("16em64t-4s2c2t.xml"), {});
  const deviceplugin::ResourceSetup cpu =
      inv.DevicePluginSetup(deviceplugin::ResourceKind::kCpu, "topodra.io/cpu");
  EXPECT_EQ(cpu.kind, deviceplugin::ResourceKind::kCpu);
  EXPECT_EQ(cpu.resource, "topodra.io/cpu");
  EXPECT_EQ(cpu.reserved, o.publish.reserved_cpus);
  EXPECT_EQ(cpu.cpuset_hook, o.cpuset_hook);
  EXPECT_EQ(cpu.cdi_marker, "0123456789abcdef");
  EXPECT_THAT(cpu.gpus, IsEmpty());
  EXPECT_EQ(inv.CpuSetup().cpuset_hook, o.cpuset_hook);
  EXPECT_EQ(inv.CpuSetup().reserved, o.publish.reserved_cpus);
  EXPECT_FALSE(inv.GpuSetup().cpuset_hook.has_value());
}

// --device-metadata: each published device's attributes as SliceToJson prints them, one
// attribute at a time (how the setup made them before), in every mode over every fixture.
TEST(InventoryTest, DeviceAttributesAreThePublishedOnes) {
  for (const std::string& fixture : testing::AllFixtures()) {
    for (const Mode& m : kModes) {
      SCOPED_TRACE(fixture + " " + m.name);
      InventoryOptions o = Options(m.mode, m.by);
      o.device_metadata = true;
      o.plugins_dir = "/kubelet/plugins";
      const topology::Topology& topo = Load(fixture);
      std::vector<publish::ReservedDevices> held = {{"r1", CpuSet::Parse("0-1").value(), {}, ""}};
      if (!topo.gpus.empty()) held[0].gpus.insert(topo.gpus[0].pci_bus_id);
      const Inventory inv = Inventory::Build(o, topo, held);
      for (const prepare::DriverSetup& setup : {inv.CpuSetup(), inv.GpuSetup()}) {
        EXPECT_TRUE(setup.device_metadata);
        EXPECT_EQ(setup.metadata_root,
                  "/kubelet/plugins/" + setup.driver + "/" + prepare::kMetadataDirName);
        std::map<std::string, nlohmann::json> want;
        if (const std::optional<publish::Pool> pool = inv.PoolOf(setup.driver)) {
          for (const publish::Device& d : pool->devices) {
            nlohmann::json attributes = nlohmann::json::object();
            for (const auto& [name, value] : d.attributes) {
              attributes[name] = publish::AttributeToJson(value);
            }
            want[d.name] = attributes;
          }
        }
        EXPECT_EQ(setup.device_attributes, want) << setup.driver;
      }
    }
  }
}

// The publishers get the pool itself, not a copy.
TEST(InventoryTest, SharedPoolIsThePool) {
  const InventoryOptions o = Options(publish::CpuDeviceMode::kIndividual, publish::GroupBy::kNuma);
  const Inventory inv = Inventory::Build(o, Load("nvidiaDGX2.xml"), {});
  for (const std::string& driver : {o.publish.cpu_driver, o.publish.gpu_driver}) {
    const std::shared_ptr<const publish::Pool> shared = inv.SharedPool(driver);
    ASSERT_NE(shared, nullptr) << driver;
    EXPECT_EQ(*shared, inv.PoolOf(driver).value());
    EXPECT_EQ(shared.get(), inv.SharedPool(driver).get());
    const Inventory copy = inv;
    EXPECT_EQ(shared.get(), copy.SharedPool(driver).get());
  }
  EXPECT_EQ(inv.SharedPool("other.example.com"), nullptr);
}

// What Republish compares: the pools, not the topology object.
TEST(InventoryTest, SamePoolsComparesWhatIsPublished) {
  const InventoryOptions o = Options(publish::CpuDeviceMode::kGrouped, publish::GroupBy::kNuma);
  const Inventory all = Inventory::Build(o, Load("16em64t-4s2c2t.xml"), {});
  EXPECT_TRUE(all.SamePools(Inventory::Build(o, Load("16em64t-4s2c2t.xml"), {})));
  EXPECT_FALSE(all.SamePools(Inventory::Build(o, Load("16em64t-4s2c2t-offlines.xml"), {})));
  EXPECT_FALSE(all.SamePools(
      Inventory::Build(o, Load("16em64t-4s2c2t.xml"), {{"r1", CpuSet::Parse("2-3").value()}})));
}

TEST(InventoryTest, ToPublishKeepsEveryField) {
  const std::vector<reservation::Held> held = {
      {"a", CpuSet::Parse("1").value(), {"0000:01:00.0"}, "2026-01-01T00:00:00Z"},
      {"b", {}, {}, ""}};
  const std::vector<publish::ReservedDevices> out = ToPublish(held);
  EXPECT_THAT(out,
              ElementsAre(
                  publish::ReservedDevices{
                      "a", CpuSet::Parse("1").value(), {"0000:01:00.0"}, "2026-01-01T00:00:00Z"},
                  publish::ReservedDevices{"b", {}, {}, ""}));
}

}  // namespace
}  // namespace topodra::node
