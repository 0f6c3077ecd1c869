// The fields a node publishes behind alpha feature gates: resource.kubernetes.io/pcieRoot as a
// list on CPU devices (DRAListTypeAttributes) and the mapping to the node's cpu allocatable
// (DRANodeAllocatableResources, 1.36 and 1.37 shapes), over the shared machine exports.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "driver/publish/device_builder.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_features.h"
#include "driver/publish/slice_json.h"
#include "test/testing/fixtures.h"

namespace topodra::publish {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using topology::Topology;

Topology Load(const std::string& name) { return testing::LoadTopology(name); }

PublishOptions Opts(CpuDeviceMode mode, GroupBy by = GroupBy::kNuma) {
  PublishOptions o;
  o.node_name = "node-a";
  o.cpu_mode = mode;
  o.group_by = by;
  return o;
}

PublishOptions Gated(PublishOptions o) {
  o.pcie_root_lists = true;
  o.node_allocatable = true;
  return o;
}

const Device& Find(const Pool& p, const std::string& name) {
  for (const Device& d : p.devices) {
    if (d.name == name) return d;
  }
  ADD_FAILURE() << "no device " << name;
  static const Device none;
  return none;
}

std::vector<std::string> Roots(const Device& d) {
  auto it = d.attributes.find("resource.kubernetes.io/pcieRoot");
  if (it == d.attributes.end()) return {};
  const StringList* l = std::get_if<StringList>(&it->second);
  return l == nullptr ? std::vector<std::string>{"<not a list>"} : l->values;
}

// Table: fixture, CPU device mode and grouping, device -> the PCIe roots its list names. The
// expectations come from the fixtures' host bridges and their locality (hwloc XML: the host
// bridge's parent object), read independently of the code under test.
struct RootsCase {
  std::string fixture;
  CpuDeviceMode mode;
  GroupBy by;
  std::map<std::string, std::vector<std::string>> roots;  // device -> roots; {} = no attribute
};

TEST(PcieRootListTest, RootsLocalToEachCpuDevice) {
  const std::vector<std::string> p0 = {"pci0002:00", "pci0003:00"};
  const std::vector<std::string> p1 = {"pci000a:00", "pci000b:00"};
  const std::vector<RootsCase> cases = {
      {"power8gpudistances.xml",
       CpuDeviceMode::kGrouped,
       GroupBy::kNuma,
       {{"cpudevnuma000", p0}, {"cpudevnuma001", p1}}},
      {"power8gpudistances.xml",
       CpuDeviceMode::kGrouped,
       GroupBy::kMachine,
       {{"cpudevmachine", {"pci0002:00", "pci0003:00", "pci000a:00", "pci000b:00"}}}},
      // CPU 0 is cpudev000; CPU 80 (first of NUMA node 1) is cpudev008.
      {"power8gpudistances.xml",
       CpuDeviceMode::kIndividual,
       GroupBy::kNuma,
       {{"cpudev000", p0}, {"cpudev008", p1}}},
      {"nvidiaDGX2.xml",
       CpuDeviceMode::kGrouped,
       GroupBy::kNuma,
       {{"cpudevnuma000", {"pci0000:2b", "pci0000:4e"}},
        {"cpudevnuma001", {"pci0000:ae", "pci0000:d7"}}}},
      {"nvidiaDGX2.xml",
       CpuDeviceMode::kGrouped,
       GroupBy::kSocket,
       {{"cpudevsocket000", {"pci0000:2b", "pci0000:4e"}},
        {"cpudevsocket001", {"pci0000:ae", "pci0000:d7"}}}},
      {"32em64t-2n8c2t-pci-normalio.xml",
       CpuDeviceMode::kGrouped,
       GroupBy::kNuma,
       {{"cpudevnuma000", {"pci0000:00"}}, {"cpudevnuma001", {"pci0000:80"}}}},
      // Host bridges below groups of 24 CPUs (one per NUMA node), two of them in the first.
      {"96em64t-4n4d3ca2co-pci.xml",
       CpuDeviceMode::kGrouped,
       GroupBy::kNuma,
       {{"cpudevnuma000", {"pci0000:00", "pci0000:03"}},
        {"cpudevnuma001", {"pci0000:30"}},
        {"cpudevnuma002", {"pci0000:60"}},
        {"cpudevnuma003", {"pci0000:90"}}}},
      // Five roots on 24 packages: most NUMA nodes have none, and publish no list.
      {"192em64t-24n8c2t.xml",
       CpuDeviceMode::kGrouped,
       GroupBy::kNuma,
       {{"cpudevnuma000", {"pci0000:00"}},
        {"cpudevnuma001", {"pci0001:00"}},
        {"cpudevnuma002", {}},
        {"cpudevnuma004", {"pci0002:00"}}}},
      {"192em64t-24n8c2t.xml",
       CpuDeviceMode::kGrouped,
       GroupBy::kMachine,
       {{"cpudevmachine", {"pci0000:00", "pci0001:00", "pci0002:00", "pci0003:00", "pci0004:00"}}}},
      // No PCI information: no attribute at all.
      {"16em64t-4s2c2t.xml", CpuDeviceMode::kGrouped, GroupBy::kNuma, {{"cpudevnuma000", {}}}},
      {"16em64t-4s2c2t.xml", CpuDeviceMode::kIndividual, GroupBy::kNuma, {{"cpudev000", {}}}},
  };
  for (const RootsCase& c : cases) {
    SCOPED_TRACE(c.fixture + " " + CpuDeviceModeName(c.mode) + " " + GroupByName(c.by));
    const Pool pool = BuildPools(Load(c.fixture), Gated(Opts(c.mode, c.by))).at(0);
    for (const auto& [device, roots] : c.roots) {
      EXPECT_EQ(Roots(Find(pool, device)), roots) << device;
    }
  }
}

TEST(PcieRootListTest, GpusKeepTheScalarRoot) {
  const Pool gpus = BuildPools(Load("nvidiaDGX2.xml"), Gated(Opts(CpuDeviceMode::kGrouped))).at(1);
  ASSERT_FALSE(gpus.devices.empty());
  for (const Device& d : gpus.devices) {
    const AttributeValue& v = d.attributes.at("resource.kubernetes.io/pcieRoot");
    EXPECT_TRUE(std::holds_alternative<std::string>(v)) << d.name;
    EXPECT_TRUE(d.extra.is_null() || !d.extra.contains(kNodeAllocatableResources)) << d.name;
  }
}

// Every GPU's root is in the list of the CPU group of its NUMA node, so a matchAttribute on
// pcieRoot between a GPU request and a CPU request can be satisfied on the same node.
TEST(PcieRootListTest, EveryGpuRootIsInItsNumaGroupsList) {
  for (const std::string& fixture : testing::AllFixtures()) {
    SCOPED_TRACE(fixture);
    const Topology t = Load(fixture);
    const std::vector<Pool> pools = BuildPools(t, Gated(Opts(CpuDeviceMode::kGrouped)));
    if (pools.size() < 2) continue;
    for (const topology::Gpu& g : t.gpus) {
      if (g.numa == topology::kNone || g.pcie_root.empty()) continue;
      char name[32];
      std::snprintf(name, sizeof name, "cpudevnuma%03d", g.numa);
      EXPECT_THAT(Roots(Find(pools[0], name)), ::testing::Contains(g.pcie_root)) << g.pci_bus_id;
    }
  }
}

// Without the options nothing changes, and stripping the gated fields gives back exactly that.
TEST(GatedFieldsTest, WithoutTheOptionsNothingChanges) {
  for (const std::string& fixture : testing::AllFixtures()) {
    const Topology t = Load(fixture);
    for (CpuDeviceMode mode : {CpuDeviceMode::kGrouped, CpuDeviceMode::kIndividual}) {
      SCOPED_TRACE(fixture + " " + CpuDeviceModeName(mode));
      const std::vector<Pool> plain = BuildPools(t, Opts(mode));
      const std::vector<Pool> gated = BuildPools(t, Gated(Opts(mode)));
      ASSERT_EQ(plain.size(), gated.size());
      for (size_t i = 0; i < plain.size(); ++i) {
        EXPECT_FALSE(HasListAttributes(plain[i]));
        EXPECT_FALSE(HasNodeAllocatable(plain[i]));
        EXPECT_EQ(HasNodeAllocatable(gated[i]), i == 0);  // CPUs only
        EXPECT_EQ(
            WithNodeAllocatableField(WithoutListAttributes(gated[i]), NodeAllocatableField::kNone),
            plain[i]);
        // And the gated pool is within the API's limits (list attributes: 64 per slice).
        for (SliceForm form : {SliceForm::kFlat, SliceForm::kMixins}) {
          absl::StatusOr<std::vector<Slice>> slices = BuildSlices(gated[i], form);
          ASSERT_TRUE(slices.ok()) << slices.status();
          for (const Slice& s : *slices) {
            EXPECT_LE(s.devices.size(), HasListAttributes(gated[i]) ? 64u : 128u);
          }
        }
      }
    }
  }
}

TEST(GatedFieldsTest, ListAttributesCutSlicesAt64Devices) {
  const Topology t = Load("192em64t-24n8c2t.xml");  // 384 CPUs
  PublishOptions o = Opts(CpuDeviceMode::kIndividual);
  EXPECT_EQ(BuildSlices(BuildPools(t, o)[0], SliceForm::kFlat)->size(), 3u);
  o.pcie_root_lists = true;
  const Pool lists = BuildPools(t, o)[0];
  ASSERT_TRUE(HasListAttributes(lists));
  EXPECT_EQ(BuildSlices(lists, SliceForm::kFlat)->size(), 6u);
  EXPECT_EQ(BuildSlices(WithoutListAttributes(lists), SliceForm::kFlat)->size(), 3u);
}

TEST(GatedFieldsTest, NodeAllocatableShapes) {
  const Topology t = Load("32em64t-2n8c2t-pci-normalio.xml");
  PublishOptions grouped = Opts(CpuDeviceMode::kGrouped);
  grouped.node_allocatable = true;
  grouped.reservations = {{"job-a", CpuSet{0, 1}, {}, ""}};
  PublishOptions individual = Opts(CpuDeviceMode::kIndividual);
  individual.node_allocatable = true;
  const json v137_grouped = {
      {"cpu", {{"mapping", {{"capacityKey", "dra.cpu/cpu"}, {"capacityMultiplier", "1"}}}}}};
  const json v137_individual = {{"cpu", {{"mapping", {{"deviceMultiplier", "1"}}}}}};
  const json v136_grouped = {
      {"cpu", {{"capacityKey", "dra.cpu/cpu"}, {"allocationMultiplier", "1"}}}};
  const json v136_individual = {{"cpu", {{"allocationMultiplier", "1"}}}};
  struct Case {
    PublishOptions opts;
    NodeAllocatableField field;
    const char* key;  // nullptr: none
    json want;
  };
  const std::vector<Case> cases = {
      {grouped, NodeAllocatableField::kV137, kNodeAllocatableResources, v137_grouped},
      {grouped, NodeAllocatableField::kV136, kNodeAllocatableResourceMappings, v136_grouped},
      {grouped, NodeAllocatableField::kNone, nullptr, nullptr},
      {individual, NodeAllocatableField::kV137, kNodeAllocatableResources, v137_individual},
      {individual, NodeAllocatableField::kV136, kNodeAllocatableResourceMappings, v136_individual},
      {individual, NodeAllocatableField::kNone, nullptr, nullptr},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(CpuDeviceModeName(c.opts.cpu_mode)) + " " +
                 NodeAllocatableFieldName(c.field));
    const Pool pool = WithNodeAllocatableField(BuildPools(t, c.opts).at(0), c.field);
    ASSERT_FALSE(pool.devices.empty());
    for (const Device& d : pool.devices) {
      for (const char* k : {kNodeAllocatableResources, kNodeAllocatableResourceMappings}) {
        const bool want = c.key != nullptr && std::string(k) == c.key;
        ASSERT_EQ(d.extra.is_object() && d.extra.contains(k), want) << d.name << " " << k;
        if (want) {
          EXPECT_EQ(d.extra[k], c.want) << d.name;
        }
      }
    }
  }
  // The reservation's own grouped device maps too: its claims are CPUs of the node.
  const Pool held = BuildPools(t, grouped).at(0);
  EXPECT_EQ(Find(held, "cpudevresv-job-a").extra[kNodeAllocatableResources], v137_grouped);
  // In the slice JSON the field sits on the device.
  const json slice = SliceToJson(BuildSlices(held, SliceForm::kFlat)->at(0));
  EXPECT_EQ(slice["spec"]["devices"][0][kNodeAllocatableResources], v137_grouped);
}

TEST(GatedFieldsTest, OverheadHasNoV136Form) {
  Pool p;
  Device d;
  d.name = "gpu-0";
  d.extra[kNodeAllocatableResources] = {{"memory", {{"overhead", {{"perPod", "1Gi"}}}}},
                                        {"cpu", {{"mapping", {{"deviceMultiplier", "2"}}}}}};
  p.devices.push_back(d);
  const Pool v136 = WithNodeAllocatableField(p, NodeAllocatableField::kV136);
  EXPECT_EQ(v136.devices[0].extra,
            json({{kNodeAllocatableResourceMappings, {{"cpu", {{"allocationMultiplier", "2"}}}}}}));
  d.extra[kNodeAllocatableResources].erase("cpu");
  p.devices[0] = d;
  EXPECT_EQ(WithNodeAllocatableField(p, NodeAllocatableField::kV136).devices[0].extra,
            json::object());
}

// A machine with more roots near one CPU than a device has values left: the list is cut so the
// device stays within 48 values, and the slice validates.
TEST(PcieRootListTest, ListIsCutToTheValueBudget) {
  Topology t = Load("16em64t-4s2c2t.xml");
  for (int i = 0; i < 60; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "pci0000:%02x", i);
    t.pcie_roots.push_back({name, t.online, topology::kNone});
  }
  t.Finalize();
  for (CpuDeviceMode mode : {CpuDeviceMode::kGrouped, CpuDeviceMode::kIndividual}) {
    SCOPED_TRACE(CpuDeviceModeName(mode));
    PublishOptions o = Opts(mode);
    o.pcie_root_lists = true;
    o.reservations = {{"job-a", CpuSet{0}, {}, ""}};
    const Pool pool = BuildPools(t, o).at(0);
    for (const Device& d : pool.devices) {
      int values = 0;
      for (const auto& [k, v] : d.attributes) values += ValueCount(v);
      EXPECT_EQ(values, 48) << d.name;
      const std::vector<std::string> roots = Roots(d);
      ASSERT_FALSE(roots.empty());
      EXPECT_EQ(roots.front(), "pci0000:00");  // the first ones, in name order
    }
    EXPECT_TRUE(BuildSlices(pool, SliceForm::kMixins).ok());
  }
}

TEST(SliceLimitsTest, ListAttributeRules) {
  auto slice_with = [](AttributeValue v, int extra_scalars = 0) {
    Slice s;
    s.metadata["name"] = "s";
    Device d;
    d.name = "d0";
    d.attributes["resource.kubernetes.io/pcieRoot"] = std::move(v);
    for (int i = 0; i < extra_scalars; ++i) d.attributes["a" + std::to_string(i)] = int64_t{i};
    s.devices.push_back(d);
    return std::vector<Slice>{s};
  };
  EXPECT_TRUE(ValidateSlices(slice_with(StringList{{"pci0000:00"}}, 31)).ok());
  EXPECT_THAT(std::string(ValidateSlices(slice_with(StringList{{}})).message()),
              HasSubstr("list attribute \"resource.kubernetes.io/pcieRoot\" is empty"));
  EXPECT_THAT(std::string(ValidateSlices(slice_with(StringList{{std::string(65, 'x')}})).message()),
              HasSubstr("is longer than 64 bytes"));
  StringList many;
  for (int i = 0; i < 40; ++i) many.values.push_back("r" + std::to_string(i));
  EXPECT_TRUE(ValidateSlices(slice_with(many, 8)).ok());  // 40 + 8 = 48
  EXPECT_THAT(std::string(ValidateSlices(slice_with(many, 9)).message()),
              HasSubstr("device \"d0\" has 49 attribute values, more than 48"));
  // Without lists every attribute is one value, counted over the device and its mixins.
  Slice scalars;
  scalars.driver = "dra.cpu";
  scalars.mixins = {{"m0", {{"a", int64_t{1}}, {"b", true}}, {}}};
  Device own;
  own.name = "d0";
  own.includes = {"m0"};
  own.attributes = {{"b", false}, {"c", std::string("x")}};
  scalars.slice_count = 1;
  scalars.devices = {own};
  SliceLimits three;
  three.max_attribute_values_per_device = 3;
  EXPECT_TRUE(ValidateSlices({scalars}, three).ok());  // a, b, c
  scalars.devices[0].attributes["d"] = int64_t{4};
  EXPECT_THAT(std::string(ValidateSlices({scalars}, three).message()),
              HasSubstr("device \"d0\" has 4 attribute values, more than 3"));
  // Any list attribute lowers the device limit of the slice to 64.
  std::vector<Slice> big = slice_with(StringList{{"pci0000:00"}});
  for (int i = 1; i < 65; ++i) {
    Device d;
    d.name = "d" + std::to_string(i);
    big[0].devices.push_back(d);
  }
  EXPECT_THAT(std::string(ValidateSlices(big).message()),
              HasSubstr("has 65 devices, more than the limit of 64"));
}

TEST(SliceJsonTest, StringsAttributes) {
  const json j = {{"strings", {"pci0000:00", "pci0000:80"}}};
  absl::StatusOr<AttributeValue> v = AttributeFromJson(j);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, AttributeValue(StringList{{"pci0000:00", "pci0000:80"}}));
  EXPECT_EQ(AttributeToJson(*v), j);
  for (const json& bad : {json{{"strings", json::array()}}, json{{"strings", "pci0000:00"}},
                          json{{"strings", {1}}}}) {
    EXPECT_FALSE(AttributeFromJson(bad).ok()) << bad.dump();
  }
  EXPECT_THAT(std::string(AttributeFromJson(json{{"ints", {1}}}).status().message()),
              HasSubstr("unsupported attribute type \"ints\""));
}

TEST(GatedFieldsTest, FeatureModes) {
  EXPECT_EQ(*ParseFeatureMode("auto", "x"), FeatureMode::kAuto);
  EXPECT_EQ(*ParseFeatureMode("on", "x"), FeatureMode::kOn);
  EXPECT_EQ(*ParseFeatureMode("off", "x"), FeatureMode::kOff);
  EXPECT_THAT(std::string(ParseFeatureMode("yes", "list attribute").status().message()),
              HasSubstr("invalid list attribute mode \"yes\" (want auto, on or off)"));
  EXPECT_STREQ(FeatureModeName(FeatureMode::kOff), "off");
  EXPECT_STREQ(NodeAllocatableFieldName(NodeAllocatableField::kV136),
               "nodeAllocatableResourceMappings");
  EXPECT_STREQ(NodeAllocatableFieldName(NodeAllocatableField::kNone), "none");
}

}  // namespace
}  // namespace topodra::publish
