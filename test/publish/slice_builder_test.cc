// Splitting pools into slices, KEP-5234 mixins and flattening.
#include "driver/publish/slice_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/names.h"
#include "driver/publish/slice_json.h"
#include "test/testing/fixtures.h"

namespace topodra::publish {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

topology::Topology Load(const std::string& src) { return testing::LoadTopology(src); }

std::vector<Slice> Build(const Pool& pool, SliceForm form) {
  absl::StatusOr<std::vector<Slice>> s = BuildSlices(pool, form);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : std::vector<Slice>{};
}

size_t Bytes(const std::vector<Slice>& slices) { return SliceListToJson(slices).dump().size(); }

struct ModeCase {
  const char* label;
  CpuDeviceMode mode;
  GroupBy by;
};
constexpr ModeCase kModes[] = {
    {"individual", CpuDeviceMode::kIndividual, GroupBy::kNuma},
    {"numa", CpuDeviceMode::kGrouped, GroupBy::kNuma},
    {"socket", CpuDeviceMode::kGrouped, GroupBy::kSocket},
    {"machine", CpuDeviceMode::kGrouped, GroupBy::kMachine},
};

PublishOptions Opts(const ModeCase& m) {
  PublishOptions o;
  o.node_name = "node-a";
  o.cpu_mode = m.mode;
  o.group_by = m.by;
  return o;
}

// The core property: flattening the mixin form gives exactly the flat form, for every machine
// and mode, and the mixin form is never larger.
TEST(SliceBuilderTest, FlattenOfMixinFormIsTheFlatForm) {
  for (const std::string& fixture : testing::AllFixtures()) {
    const topology::Topology t = Load(fixture);
    for (const ModeCase& m : kModes) {
      SCOPED_TRACE(std::string(fixture) + " " + m.label);
      for (const Pool& pool : BuildPools(t, Opts(m))) {
        const std::vector<Slice> mixed = Build(pool, SliceForm::kMixins);
        const std::vector<Slice> flat = Build(pool, SliceForm::kFlat);
        absl::StatusOr<std::vector<Slice>> flattened = Flatten(mixed);
        ASSERT_TRUE(flattened.ok()) << flattened.status();
        EXPECT_EQ(*flattened, flat);
        EXPECT_LE(Bytes(mixed), Bytes(flat));
        for (const std::vector<Slice>* form : {&mixed, &flat}) {
          for (const Slice& s : *form) {
            EXPECT_EQ(SliceJsonSize(s), DumpJson(SliceToJson(s)).size());
          }
        }
        for (const Slice& s : mixed) {
          for (const Device& d : s.devices) EXPECT_LE(d.includes.size(), 8u);
        }
      }
    }
  }
}

TEST(SliceBuilderTest, SplitsAt128DevicesWithCountsAndNames) {
  const Pool pool = BuildPools(Load("192em64t-24n8c2t.xml"), Opts(kModes[0]))[0];
  ASSERT_EQ(pool.devices.size(), 384u);
  const std::vector<Slice> slices = Build(pool, SliceForm::kMixins);
  ASSERT_EQ(slices.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(slices[i].devices.size(), 128u);
    EXPECT_EQ(slices[i].slice_count, 3);
    EXPECT_EQ(slices[i].generation, 0);
    EXPECT_EQ(slices[i].driver, "dra.cpu");
    EXPECT_EQ(slices[i].pool, "node-a");
    EXPECT_EQ(slices[i].node_name, "node-a");
    EXPECT_EQ(slices[i].metadata["name"], absl::StrCat("node-a-dra.cpu-", i));
  }
  EXPECT_EQ(slices[1].devices.front().name, "cpudev128");
  // Mixin form is at least 3x smaller on the wire for this machine.
  EXPECT_GE(Bytes(Build(pool, SliceForm::kFlat)), 3 * Bytes(slices));
}

TEST(SliceBuilderTest, SharedFieldsMoveIntoMixins) {
  const Pool pool = BuildPools(Load("power8gpudistances.xml"), Opts(kModes[0]))[0];
  const std::vector<Slice> slices = Build(pool, SliceForm::kMixins);
  ASSERT_EQ(slices.size(), 1u);
  const Slice& s = slices[0];
  // Two NUMA nodes (= sockets = L3 groups of 2 here), so two hierarchy mixins.
  ASSERT_GE(s.mixins.size(), 2u);
  const Device& d = s.devices[0];
  EXPECT_EQ(d.includes.front(), "m0");
  EXPECT_EQ(d.attributes.count("dra.cpu/cpuID"), 1u);       // unique: stays inline
  EXPECT_EQ(d.attributes.count("dra.cpu/smtEnabled"), 0u);  // shared by all: in a mixin
  EXPECT_EQ(s.mixins[0].attributes.count("dra.cpu/smtEnabled"), 1u);
}

TEST(SliceBuilderTest, WithoutTaintsLeavesOutUnhealthyGpusAndKeepsReservedDevices) {
  Pool pool;
  pool.driver = "gpu.topodra.io";
  auto device = [](const std::string& name, const std::string& key) {
    Device d;
    d.name = name;
    if (!key.empty()) {
      d.extra["taints"] = json::array({{{"key", key}, {"value", "v"}, {"effect", "NoSchedule"}}});
    }
    return d;
  };
  pool.devices = {device("gpu-a", ""), device("gpu-b", kUnhealthyTaintKey),
                  device("gpu-c", "topodra.io/reserved")};
  // A server without taints would otherwise hand the broken GPU to the next claim.
  const Pool stripped = WithoutTaints(pool);
  ASSERT_EQ(stripped.devices.size(), 2u);
  EXPECT_EQ(stripped.devices[0].name, "gpu-a");
  EXPECT_EQ(stripped.devices[1].name, "gpu-c");
  EXPECT_FALSE(HasTaints(stripped));
}

TEST(SliceBuilderTest, EmptyPoolStillHasOneSlice) {
  Pool pool{"dra.cpu", "n1", "n1", {}};
  const std::vector<Slice> slices = Build(pool, SliceForm::kMixins);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_TRUE(slices[0].devices.empty());
  EXPECT_EQ(slices[0].slice_count, 1);
}

Device Dev(const std::string& name, Attributes attrs = {}, std::vector<std::string> inc = {}) {
  Device d;
  d.name = name;
  d.attributes = std::move(attrs);
  d.includes = std::move(inc);
  return d;
}

Slice OneSlice(std::vector<DeviceMixin> mixins, std::vector<Device> devices) {
  Slice s;
  s.driver = "d.example.com";
  s.pool = "n1";
  s.node_name = "n1";
  s.mixins = std::move(mixins);
  s.devices = std::move(devices);
  return s;
}

TEST(FlattenTest, LaterMixinWinsAndDeviceWinsOverMixins) {
  const Slice s =
      OneSlice({{"a", {{"x", int64_t{1}}, {"y", int64_t{1}}}, {{"mem", Capacity{"1Gi", {}}}}},
                {"b", {{"y", int64_t{2}}, {"z", std::string("b")}}, {}}},
               {Dev("d0", {{"z", std::string("own")}}, {"a", "b"}), Dev("d1", {}, {"b", "a"})});
  absl::StatusOr<std::vector<Slice>> f = Flatten({s});
  ASSERT_TRUE(f.ok()) << f.status();
  const Device& d0 = (*f)[0].devices[0];
  EXPECT_EQ(d0.attributes.at("x"), AttributeValue(int64_t{1}));
  EXPECT_EQ(d0.attributes.at("y"), AttributeValue(int64_t{2}));
  EXPECT_EQ(d0.attributes.at("z"), AttributeValue(std::string("own")));
  EXPECT_EQ(d0.capacity.at("mem").value, "1Gi");
  EXPECT_TRUE(d0.includes.empty());
  const Device& d1 = (*f)[0].devices[1];
  EXPECT_EQ(d1.attributes.at("y"), AttributeValue(int64_t{1}));  // "a" comes last for d1
  EXPECT_EQ(d1.attributes.at("z"), AttributeValue(std::string("b")));
  EXPECT_TRUE((*f)[0].mixins.empty());
}

TEST(FlattenTest, ErrorsNameTheCulprit) {
  Attributes many;
  for (int i = 0; i < 20; ++i) many[absl::StrCat("a", i)] = int64_t{i};
  Attributes more;
  for (int i = 0; i < 13; ++i) more[absl::StrCat("b", i)] = int64_t{i};
  std::vector<Device> too_many_devices;
  for (int i = 0; i < 129; ++i) too_many_devices.push_back(Dev(absl::StrCat("d", i)));
  std::vector<Device> tainted;
  for (int i = 0; i < 65; ++i) tainted.push_back(Dev(absl::StrCat("t", i)));
  tainted[7].extra["taints"] = json::array({{{"key", "k"}, {"effect", "NoSchedule"}}});

  struct Case {
    const char* label;
    std::vector<Slice> slices;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"unknown mixin",
       {OneSlice({}, {Dev("gpu-0", {}, {"nope"})})},
       "device \"gpu-0\" includes unknown mixin \"nope\""},
      {"duplicate mixin",
       {OneSlice({{"a", {}, {}}, {"a", {}, {}}}, {})},
       "duplicate mixin name \"a\""},
      {"bad mixin name", {OneSlice({{"Not_A_Label", {}, {}}}, {})}, "\"Not_A_Label\""},
      {"duplicate device in pool",
       {OneSlice({}, {Dev("cpu-1")}), OneSlice({}, {Dev("cpu-1")})},
       "duplicate device name \"cpu-1\""},
      {"too many includes",
       {OneSlice({{"a", {}, {}}}, {Dev("x", {}, {"a", "a", "a", "a", "a", "a", "a", "a", "a"})})},
       "includes 9 mixins, more than 8"},
      {"too many attributes after flattening",
       {OneSlice({{"m", many, {}}}, {Dev("big", more, {"m"})})},
       "device \"big\" has 33 attributes and capacities, more than 32"},
      {"too many devices",
       {OneSlice({}, too_many_devices)},
       "129 devices, more than the limit of 128"},
      {"taints lower the device limit",
       {OneSlice({}, tainted)},
       "65 devices, more than the limit of 64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<std::vector<Slice>> f = Flatten(c.slices);
    ASSERT_FALSE(f.ok());
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.message));
  }
}

TEST(SliceBuilderTest, ADeviceOverTheLimitIsAnError) {
  Attributes attrs;
  for (int i = 0; i < 33; ++i) attrs[absl::StrCat("a", i)] = int64_t{i};
  Pool pool{"dra.cpu", "n1", "n1", {Dev("cpudev000", attrs)}};
  for (SliceForm form : {SliceForm::kMixins, SliceForm::kFlat}) {
    absl::StatusOr<std::vector<Slice>> s = BuildSlices(pool, form);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("\"cpudev000\" has 33"));
  }
}

TEST(SliceBuilderTest, SliceNamesAreDnsSubdomainsOfBoundedLength) {
  EXPECT_EQ(SliceName("node-1", "dra.cpu", 2), "node-1-dra.cpu-2");
  const std::string long_node = std::string(240, 'a') + ".example";
  const std::string a = SliceName(long_node, "gpu.topodra.io", 0);
  const std::string b = SliceName(long_node, "dra.cpu", 0);
  EXPECT_LE(a.size(), 253u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, SliceName(long_node, "gpu.topodra.io", 0));
}

// Reservations on every machine and mode: the reservation attribute may move into mixins like
// any other, taints stay on their devices, and flattening still gives the flat form.
TEST(SliceBuilderTest, ReservationsWithMixins) {
  for (const std::string& fixture : testing::AllFixtures()) {
    const topology::Topology t = Load(fixture);
    std::vector<int> ids(t.online.begin(), t.online.end());
    for (const ModeCase& m : kModes) {
      SCOPED_TRACE(std::string(fixture) + " " + m.label);
      PublishOptions o = Opts(m);
      o.reservations = {{"resv-a", CpuSet{ids[0], ids.back()}, {}, "2025-03-01T09:00:00Z"},
                        {"resv.b", CpuSet{ids[ids.size() / 2]}, {}, ""}};
      for (const topology::Gpu& g : t.gpus) o.reservations[1].gpus.insert(g.pci_bus_id);
      ASSERT_TRUE(ValidateOptions(o, t).ok()) << ValidateOptions(o, t);
      for (const Pool& pool : BuildPools(t, o)) {
        const std::vector<Slice> mixed = Build(pool, SliceForm::kMixins);
        const std::vector<Slice> flat = Build(pool, SliceForm::kFlat);
        absl::StatusOr<std::vector<Slice>> flattened = Flatten(mixed);
        ASSERT_TRUE(flattened.ok()) << flattened.status();
        EXPECT_EQ(*flattened, flat);
        EXPECT_LE(Bytes(mixed), Bytes(flat));
        size_t marked = 0;
        for (const Slice& s : flat) {
          EXPECT_LE(s.devices.size(), 64u);  // taints lower the limit
          for (const Device& d : s.devices) {
            const bool held = d.attributes.count(kReservationAttribute) == 1;
            marked += held;
            EXPECT_EQ(d.extra.contains("taints"), held) << d.name;
          }
        }
        EXPECT_GT(marked, 0u);
      }
    }
  }
}

TEST(SliceBuilderTest, TheReservationAttributeMovesIntoAMixinTaintsStayPerDevice) {
  const topology::Topology t = Load("192em64t-24n8c2t.xml");
  PublishOptions o = Opts(kModes[0]);
  // All of NUMA node 3: devices cpudev048..cpudev063, in the first slice of 64.
  o.reservations = {{"node3", CpuSet::Range(24, 31) | CpuSet::Range(216, 223), {}, ""}};
  const std::vector<Slice> mixed = Build(BuildPools(t, o)[0], SliceForm::kMixins);
  ASSERT_EQ(mixed.size(), 6u);
  const Slice& s = mixed[0];
  std::set<std::string> with_attribute;
  for (const DeviceMixin& m : s.mixins) {
    auto it = m.attributes.find(kReservationAttribute);
    if (it != m.attributes.end()) {
      EXPECT_EQ(std::get<std::string>(it->second), "node3");
      with_attribute.insert(m.name);
    }
  }
  ASSERT_EQ(with_attribute.size(), 1u);
  int held = 0;
  for (const Device& d : s.devices) {
    const bool includes = std::any_of(d.includes.begin(), d.includes.end(),
                                      [&](const auto& i) { return with_attribute.count(i) == 1; });
    EXPECT_EQ(d.attributes.count(kReservationAttribute), 0u) << d.name;
    EXPECT_EQ(includes, d.extra.contains("taints")) << d.name;
    held += includes;
  }
  EXPECT_EQ(held, 16);
  EXPECT_EQ(s.devices[48].name, "cpudev048");
  EXPECT_EQ(s.devices[48].extra["taints"][0]["value"], "node3");
}

TEST(SliceBuilderTest, TaintsSplitSlicesAt64Devices) {
  const topology::Topology t = Load("192em64t-24n8c2t.xml");
  PublishOptions o = Opts(kModes[0]);  // individual: 384 devices
  o.reservations = {{"one", CpuSet{383}, {}, ""}};
  const Pool pool = BuildPools(t, o)[0];
  ASSERT_TRUE(HasTaints(pool));
  for (SliceForm form : {SliceForm::kMixins, SliceForm::kFlat}) {
    const std::vector<Slice> slices = Build(pool, form);
    ASSERT_EQ(slices.size(), 6u);
    for (const Slice& s : slices) {
      EXPECT_EQ(s.devices.size(), 64u);
      EXPECT_EQ(s.slice_count, 6);
    }
    EXPECT_EQ(slices[5].devices.back().extra["taints"][0]["value"], "one");
  }
  // Without taints (reservation_taints off, or stripped for a server without them) the device
  // limit is 128 again.
  const Pool stripped = WithoutTaints(pool);
  EXPECT_FALSE(HasTaints(stripped));
  EXPECT_EQ(Build(stripped, SliceForm::kFlat).size(), 3u);
  o.reservation_taints = false;
  const Pool untainted = BuildPools(t, o)[0];
  EXPECT_EQ(untainted, stripped);
  EXPECT_EQ(std::get<std::string>(untainted.devices.back().attributes.at(kReservationAttribute)),
            "one");
  // A limit that is too small for one slice is honoured too.
  SliceLimits tight;
  tight.max_devices_with_taints = 50;
  absl::StatusOr<std::vector<Slice>> s = BuildSlices(pool, SliceForm::kMixins, tight);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->size(), 8u);  // ceil(384 / 50)
  EXPECT_EQ(s->back().devices.size(), 34u);
}

// Golden JSON per mode on the shared machines (mixin form), so any change to what a node
// publishes shows up as a reviewed diff. Regenerate with TOPODRA_UPDATE_GOLDEN=1.
TEST(SliceBuilderTest, Goldens) {
  for (const std::string& fixture : testing::AllFixtures()) {
    const topology::Topology t = Load(fixture);
    for (const ModeCase& m : kModes) {
      SCOPED_TRACE(std::string(fixture) + " " + m.label);
      std::vector<Slice> all;
      for (const Pool& pool : BuildPools(t, Opts(m))) {
        for (Slice& s : Build(pool, SliceForm::kMixins)) all.push_back(std::move(s));
      }
      const std::string got = SliceListToJson(all).dump(1) + "\n";
      std::string base = fixture;
      base = base.substr(0, base.size() - 4);
      const std::string path = std::string(TOPODRA_SOURCE_DIR) + "/test/fixtures/slices/" + base +
                               "." + m.label + ".json";
      if (std::getenv("TOPODRA_UPDATE_GOLDEN") != nullptr) {
        std::ofstream(path) << got;
        continue;
      }
      std::ifstream in(path);
      ASSERT_TRUE(in) << "missing golden " << path;
      std::stringstream want;
      want << in.rdbuf();
      EXPECT_EQ(got, want.str()) << "slices changed; see " << path;
    }
  }
}

}  // namespace
}  // namespace topodra::publish
