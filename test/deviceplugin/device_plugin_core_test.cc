// The device-plugin API against the node State, on the shared machine exports. Expected answers
// are worked out by hand from each fixture's layout (`topodra topology --topology-file FILE`):
//
//  nvidiaDGX2: 16 GPUs. NUMA 0 holds host bridges pci0000:2b {34 36 39 3b} and pci0000:4e
//    {57 59 5c 5e}; NUMA 1 holds pci0000:ae {b7 b9 bc be} and pci0000:d7 {e0 e2 e5 e7}. Under each
//    host bridge two switches hold two GPUs each: {34 36} {39 3b} {57 59} {5c 5e} {b7 b9} {bc be}
//    {e0 e2} {e5 e7} ("34" is 0000:34:00.0). The GPU allocator prefers fewest NUMA nodes, then
//    fewest host bridges, then closest in the PCI tree (switch mates), then lowest ids.
//  power8gpudistances: 4 GPUs, one per host bridge: 0002:01:00.0 and 0003:01:00.0 on NUMA 0,
//    000a:01:00.0 and 000b:01:00.0 on NUMA 1.
//  32em64t-2n8c2t-pci-normalio: NUMA 0 = package 0 = CPUs 0-7,16-23, NUMA 1 = 8-15,24-31; core
//    siblings N and N+16. GPUs 03:00.0 (NUMA 0), 05:03.0 (Matrox BMC display, NUMA 0), 83:00.0,
//    84:00.0 and 84:00.1 (NUMA 1).
//  192em64t-24n8c2t: 24 NUMA nodes = 24 packages = 24 L3s of 8 cores; node n holds CPUs
//    8n..8n+7 and their siblings 192+8n..192+8n+7.
//  16em64t-4s2c2t-offlines: one NUMA node (0); online 0-1,3-4,6,12,15, offline 2,5,7-11,13-14.
#include "driver/deviceplugin/device_plugin_core.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "test/testing/fixtures.h"

namespace topodra::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;
using json = nlohmann::json;
using topology::Topology;

constexpr char kGpuResource[] = "topodra.io/gpu";
constexpr char kCpuResource[] = "topodra.io/cpu";
constexpr char kGpuDriver[] = "gpu.topodra.io";
constexpr char kCpuDriver[] = "dra.cpu";
constexpr ResourceKind kGpu = ResourceKind::kGpu;
constexpr ResourceKind kCpu = ResourceKind::kCpu;
constexpr char kDgx[] = "nvidiaDGX2.xml";
constexpr char kP8[] = "power8gpudistances.xml";
constexpr char k32[] = "32em64t-2n8c2t-pci-normalio.xml";
constexpr char k192[] = "192em64t-24n8c2t.xml";
constexpr char kOfflines[] = "16em64t-4s2c2t-offlines.xml";

using Ids = std::vector<std::string>;
using Held = std::vector<state::Allocation>;

// Parsed once per test binary: the 384-CPU export is slow to load under ASan.
const Topology& Load(const std::string& name) {
  static std::map<std::string, Topology> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, testing::LoadTopology(name)).first;
  return it->second;
}

// Short names: "34" is 0000:34:00.0 (DGX-2); "0002" is 0002:01:00.0 (power8).
std::vector<std::string> Dgx(const std::vector<std::string>& buses) {
  std::vector<std::string> out;
  out.reserve(buses.size());
  for (const std::string& b : buses) out.push_back("0000:" + b + ":00.0");
  return out;
}
std::string DgxId(const std::string& bus) { return "0000:" + bus + ":00.0"; }
std::vector<std::string> P8(const std::vector<std::string>& domains) {
  std::vector<std::string> out;
  out.reserve(domains.size());
  for (const std::string& d : domains) out.push_back(d + ":01:00.0");
  return out;
}

// A fake device node per GPU: /dev/nvidia<i>, i its position in the topology's sorted GPU list.
cdi::DeviceNode FakeNode(int i) {
  cdi::DeviceNode n;
  n.path = "/dev/nvidia" + std::to_string(i);
  n.type = "c";
  n.major = 195;
  n.minor = i;
  return n;
}

// Serves every GPU of `topo`, or only `only` when given.
ResourceSetup GpuSetup(const Topology& topo, const std::vector<std::string>& only = {}) {
  ResourceSetup s;
  s.kind = kGpu;
  s.resource = kGpuResource;
  for (size_t i = 0; i < topo.gpus.size(); ++i) {
    const std::string& id = topo.gpus[i].pci_bus_id;
    if (!only.empty() && std::find(only.begin(), only.end(), id) == only.end()) continue;
    s.gpus[id] = prepare::GpuDevice{id, {FakeNode(static_cast<int>(i))}};
  }
  return s;
}

ResourceSetup CpuSetup(CpuSet reserved = {}) {
  ResourceSetup s;
  s.kind = kCpu;
  s.resource = kCpuResource;
  s.reserved = std::move(reserved);
  return s;
}

CpuSet Cpus(const char* text) {
  absl::StatusOr<CpuSet> s = CpuSet::Parse(text);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : CpuSet();
}

std::vector<std::string> CpuIds(const char* text) {
  std::vector<std::string> out;
  for (int cpu : Cpus(text)) out.push_back(std::to_string(cpu));
  return out;
}

// A prepared DRA claim "default/<name>" holding `cpus` or `gpus`.
state::Allocation DraClaim(const std::string& uid, const std::string& name, CpuSet cpus,
                           std::set<std::string> gpus = {}) {
  state::Allocation a;
  a.kind = state::AllocationKind::kDraClaim;
  a.driver = cpus.Empty() ? kGpuDriver : kCpuDriver;
  a.owner = state::DraOwner(a.driver, uid);
  a.claim_namespace = "default";
  a.claim_name = name;
  a.cpus = std::move(cpus);
  a.gpus = std::move(gpus);
  a.phase = state::Phase::kPrepared;
  return a;
}

state::State Holding(const std::vector<state::Allocation>& allocations) {
  state::State s;
  for (const state::Allocation& a : allocations) EXPECT_TRUE(s.Add(a).ok()) << a.owner;
  return s;
}

// What DevicePluginService does with a plan: shrink or drop the earlier allocations, then add.
void Apply(const AllocatePlan& plan, state::State* s) {
  for (const state::Allocation& shrunk : plan.shrunk) {
    ASSERT_TRUE(s->Remove(shrunk.owner).ok());
    if (!shrunk.cpus.Empty() || !shrunk.gpus.empty()) {
      ASSERT_TRUE(s->Add(shrunk).ok());
    }
  }
  absl::Status st = s->Add(plan.allocation);
  ASSERT_TRUE(st.ok()) << st;
}

// A device-plugin allocation as Allocate of `ids` makes it, added to `s`.
state::Allocation Allocated(const ResourceSetup& setup, const Topology& topo,
                            const std::vector<std::string>& ids, state::State* s) {
  absl::StatusOr<AllocatePlan> plan = PlanAllocate(setup, topo, *s, ids);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return {};
  EXPECT_TRUE(plan->shrunk.empty());
  Apply(*plan, s);
  return plan->allocation;
}

// ---------------------------------------------------------------------------------------------
// ListDevices

std::vector<Device> GpuDevices(const std::vector<std::string>& ids, int numa) {
  std::vector<Device> out;
  out.reserve(ids.size());
  for (const std::string& id : ids) out.push_back(Device{id, true, {numa}});
  return out;
}

TEST(ListDevicesTest, DgxGpusWithTheirNumaNodes) {
  const Topology& t = Load(kDgx);
  std::vector<Device> want = GpuDevices(Dgx({"34", "36", "39", "3b", "57", "59", "5c", "5e"}), 0);
  for (const Device& d : GpuDevices(Dgx({"b7", "b9", "bc", "be", "e0", "e2", "e5", "e7"}), 1)) {
    want.push_back(d);
  }
  EXPECT_EQ(ListDevices(GpuSetup(t), t, state::State()), want);
}

TEST(ListDevicesTest, Power8GpusWithTheirNumaNodes) {
  const Topology& t = Load(kP8);
  EXPECT_EQ(ListDevices(GpuSetup(t), t, state::State()),
            (std::vector<Device>{{"0002:01:00.0", true, {0}},
                                 {"0003:01:00.0", true, {0}},
                                 {"000a:01:00.0", true, {1}},
                                 {"000b:01:00.0", true, {1}}}));
}

TEST(ListDevicesTest, OnlyServedGpusAreListed) {
  // The Matrox BMC display and the AMD function are not served: not ours to list.
  const Topology& t = Load(k32);
  const ResourceSetup setup = GpuSetup(t, {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0"});
  EXPECT_EQ(
      ListDevices(setup, t, state::State()),
      (std::vector<Device>{
          {"0000:03:00.0", true, {0}}, {"0000:83:00.0", true, {1}}, {"0000:84:00.0", true, {1}}}));
}

TEST(ListDevicesTest, DraHeldGpuIsUnhealthyDevicePluginHeldStaysHealthy) {
  const Topology& t = Load(kP8);
  const ResourceSetup setup = GpuSetup(t);
  state::State held = Holding({DraClaim("uid-1", "gpu-claim", {}, {"0003:01:00.0"})});
  Allocated(setup, t, {"000a:01:00.0"}, &held);
  EXPECT_EQ(ListDevices(setup, t, held), (std::vector<Device>{{"0002:01:00.0", true, {0}},
                                                              {"0003:01:00.0", false, {0}},
                                                              {"000a:01:00.0", true, {1}},
                                                              {"000b:01:00.0", true, {1}}}));
}

TEST(ListDevicesTest, DevicePluginHeldGpuThatDisappearedIsListedUnhealthy) {
  Topology t = Load(kP8);
  const ResourceSetup setup = GpuSetup(t);
  state::State held;
  Allocated(setup, t, {"0002:01:00.0"}, &held);
  // A DRA claim's vanished GPU is the DRA path's business, not the device plugin's list.
  ASSERT_TRUE(held.Add(DraClaim("uid-1", "gpu-claim", {}, {"000b:01:00.0"})).ok());
  // Both GPUs fall off the bus.
  t.gpus.erase(std::remove_if(t.gpus.begin(), t.gpus.end(),
                              [](const topology::Gpu& g) {
                                return g.pci_bus_id == "0002:01:00.0" ||
                                       g.pci_bus_id == "000b:01:00.0";
                              }),
               t.gpus.end());
  t.Finalize();
  ASSERT_EQ(t.gpus.size(), 2u);
  // 0002 keeps its place in the sorted list, without a NUMA node (nothing is known of it now).
  EXPECT_EQ(ListDevices(setup, t, held), (std::vector<Device>{{"0002:01:00.0", false, {}},
                                                              {"0003:01:00.0", true, {0}},
                                                              {"000a:01:00.0", true, {1}}}));
}

TEST(ListDevicesTest, CpusExcludeReservedMarkDraHeldUnhealthySortNumerically) {
  const Topology& t = Load(k32);
  const ResourceSetup setup = CpuSetup(Cpus("0,16"));
  state::State held = Holding({DraClaim("uid-1", "cpu-claim", Cpus("8,24"))});
  Allocated(setup, t, {"9", "25"}, &held);  // device-plugin held: stays healthy
  std::vector<Device> want;
  for (int cpu : Cpus("1-15,17-31")) {
    const bool node0 = cpu <= 7 || (cpu >= 16 && cpu <= 23);
    want.push_back(Device{std::to_string(cpu), cpu != 8 && cpu != 24, {node0 ? 0 : 1}});
  }
  const std::vector<Device> got = ListDevices(setup, t, held);
  EXPECT_EQ(got, want);
  ASSERT_EQ(got.size(), 30u);
  // Numeric, not lexicographic: "2" before "10", "9" before "10".
  EXPECT_EQ(got[0].id, "1");
  EXPECT_EQ(got[1].id, "2");
  EXPECT_EQ(got[8].id, "9");
  EXPECT_EQ(got[9].id, "10");
  EXPECT_EQ(got[15].id, "17");
}

TEST(ListDevicesTest, OfflineCpusAreListedUnhealthy) {
  const Topology& t = Load(kOfflines);
  const std::vector<Device> got = ListDevices(CpuSetup(), t, state::State());
  std::vector<Device> want;
  want.reserve(16);
  const CpuSet online = Cpus("0-1,3-4,6,12,15");
  // An offline CPU has no core in the model, so no NUMA node is known for it.
  for (int cpu = 0; cpu < 16; ++cpu) {
    want.push_back(online.Contains(cpu) ? Device{std::to_string(cpu), true, {0}}
                                        : Device{std::to_string(cpu), false, {}});
  }
  EXPECT_EQ(got, want);
}

TEST(ListDevicesTest, LargeMachineNumaNodes) {
  const Topology& t = Load(k192);
  const std::vector<Device> got = ListDevices(CpuSetup(), t, state::State());
  ASSERT_EQ(got.size(), 384u);
  // Node n holds 8n..8n+7 and 192+8n..192+8n+7.
  EXPECT_EQ(got[10], (Device{"10", true, {1}}));
  EXPECT_EQ(got[191], (Device{"191", true, {23}}));
  EXPECT_EQ(got[200], (Device{"200", true, {1}}));
  EXPECT_EQ(got[383], (Device{"383", true, {23}}));
}

// ---------------------------------------------------------------------------------------------
// PreferredAllocation

const CpuSet kNoReserved;
const Held kFree;
const Ids kListed;  // as `available`: every id ListDevices reports
const Ids kNoMust;

Held DraGpus(const Ids& gpus) {
  return {DraClaim("uid-1", "gpu-claim", {}, std::set<std::string>(gpus.begin(), gpus.end()))};
}
Held DraCpus(const char* cpus) { return {DraClaim("uid-1", "cpu-claim", Cpus(cpus))}; }

struct PreferCase {
  const char* name;
  const char* fixture;
  ResourceKind kind;
  CpuSet reserved;
  Held held;
  Ids available;
  Ids must_include;
  int size;
  Ids want;
};

ResourceSetup SetupFor(ResourceKind kind, const CpuSet& reserved, const Topology& t) {
  return kind == kGpu ? GpuSetup(t) : CpuSetup(reserved);
}

Ids Listed(const ResourceSetup& setup, const Topology& t) {
  Ids ids;
  for (const Device& d : ListDevices(setup, t, state::State())) ids.push_back(d.id);
  return ids;
}

const std::vector<PreferCase>& PreferCases() {
  static const std::vector<PreferCase> kCases = {
      // One switch pair, the lowest.
      {"dgx_2", kDgx, kGpu, kNoReserved, kFree, kListed, kNoMust, 2, Dgx({"34", "36"})},
      // One host bridge.
      {"dgx_4", kDgx, kGpu, kNoReserved, kFree, kListed, kNoMust, 4, Dgx({"34", "36", "39", "3b"})},
      // One NUMA node, the lower of two equal ones.
      {"dgx_8", kDgx, kGpu, kNoReserved, kFree, kListed, kNoMust, 8,
       Dgx({"34", "36", "39", "3b", "57", "59", "5c", "5e"})},
      // must_include pulls the answer to its switch mate, then to its host bridge.
      {"dgx_2_must_b9", kDgx, kGpu, kNoReserved, kFree, kListed, Dgx({"b9"}), 2, Dgx({"b7", "b9"})},
      {"dgx_4_must_e5", kDgx, kGpu, kNoReserved, kFree, kListed, Dgx({"e5"}), 4,
       Dgx({"e0", "e2", "e5", "e7"})},
      // An offer spanning both nodes: NUMA 0 offers 34 39 57 (no two switch mates), NUMA 1
      // b7 b9 bc (b7 b9 switch mates, 4 apart): closeness beats lower ids.
      {"dgx_2_restricted_two_nodes", kDgx, kGpu, kNoReserved, kFree,
       Dgx({"e0", "57", "b9", "34", "bc", "39", "b7"}), kNoMust, 2, Dgx({"b7", "b9"})},
      // 3 of 34 57 | b7 b9 e0: only NUMA 1 has three.
      {"dgx_3_only_node_that_fits", kDgx, kGpu, kNoReserved, kFree,
       Dgx({"34", "57", "b7", "b9", "e0"}), kNoMust, 3, Dgx({"b7", "b9", "e0"})},
      // 34 and 36 held by a DRA claim: the next switch pair of NUMA 0.
      {"dgx_2_dra_held_skipped", kDgx, kGpu, kNoReserved, DraGpus(Dgx({"34", "36"})), kListed,
       kNoMust, 2, Dgx({"39", "3b"})},
      // The kubelet lists a DRA-held b7 anyway: without it b9 has no partner on NUMA 1, while
      // 34 and 57 share NUMA 0. (Were b7 offered, b7 b9 would win as switch mates.)
      {"dgx_2_dra_held_listed_anyway", kDgx, kGpu, kNoReserved, DraGpus(Dgx({"b7"})),
       Dgx({"b7", "b9", "34", "57"}), kNoMust, 2, Dgx({"34", "57"})},
      // Unknown and malformed ids in available are someone else's: ignored.
      {"dgx_unknown_ignored",
       kDgx,
       kGpu,
       kNoReserved,
       kFree,
       {"0000:99:00.0", "junk", DgxId("be"), DgxId("bc"), DgxId("34")},
       kNoMust,
       2,
       Dgx({"bc", "be"})},
      {"power8_2_one_node", kP8, kGpu, kNoReserved, kFree, kListed, kNoMust, 2,
       P8({"0002", "0003"})},
      {"power8_2_must_000b", kP8, kGpu, kNoReserved, kFree, kListed, P8({"000b"}), 2,
       P8({"000a", "000b"})},

      // The two hyperthreads of the lowest core.
      {"192_2_one_core", k192, kCpu, kNoReserved, kFree, kListed, kNoMust, 2, CpuIds("0,192")},
      // One NUMA node's 8 whole cores, sorted numerically.
      {"192_16_one_node", k192, kCpu, kNoReserved, kFree, kListed, kNoMust, 16,
       CpuIds("0-7,192-199")},
      // 200 is the sibling of 8 (node 1).
      {"192_2_must_200", k192, kCpu, kNoReserved, kFree, kListed, {"200"}, 2, CpuIds("8,200")},
      {"192_16_must_9", k192, kCpu, kNoReserved, kFree, kListed, {"9"}, 16, CpuIds("8-15,200-207")},
      // Core 0 reserved: node 0 has 14 free against 16 elsewhere, the tightest fit; its lowest
      // free core is core 1 (1, 193).
      {"192_2_reserved_core0", k192, kCpu, Cpus("0,192"), kFree, kListed, kNoMust, 2,
       CpuIds("1,193")},
      // Node 0 held by a DRA claim (and listed anyway): node 1 is the lowest whole node.
      {"192_16_dra_holds_node0", k192, kCpu, kNoReserved, DraCpus("0-7,192-199"), kListed, kNoMust,
       16, CpuIds("8-15,200-207")},
      // Malformed ids are ignored, not read as CPU 1 ("01", "+1") or 4 (" 4").
      {"192_malformed_ignored",
       k192,
       kCpu,
       kNoReserved,
       kFree,
       {"abc", "01", "-1", " 4", "+1", "3", "195", ""},
       kNoMust,
       2,
       CpuIds("3,195")},
      {"32_4_two_cores", k32, kCpu, kNoReserved, kFree, kListed, kNoMust, 4, CpuIds("0-1,16-17")},
      // Node 0 without core 0 is the tighter node; core 1 is its lowest.
      {"32_2_reserved", k32, kCpu, Cpus("0,16"), kFree, kListed, kNoMust, 2, CpuIds("1,17")},
      {"32_4_dra_holds_node0", k32, kCpu, kNoReserved, DraCpus("0-7,16-23"), kListed, kNoMust, 4,
       CpuIds("8-9,24-25")},
      // Every listed CPU offered, offline ones too: only the 7 online are handed out.
      {"offline_all_online", kOfflines, kCpu, kNoReserved, kFree, kListed, kNoMust, 7,
       CpuIds("0-1,3-4,6,12,15")},
  };
  return kCases;
}

void PrintTo(const PreferCase& c, std::ostream* os) { *os << c.name; }

class PreferredAllocationTest : public ::testing::TestWithParam<PreferCase> {};

TEST_P(PreferredAllocationTest, HandWorkedAnswerDeterministicInAnyOrder) {
  const PreferCase& c = GetParam();
  const Topology& t = Load(c.fixture);
  const ResourceSetup setup = SetupFor(c.kind, c.reserved, t);
  const state::State held = Holding(c.held);
  Ids available = c.available.empty() ? Listed(setup, t) : c.available;
  absl::StatusOr<Ids> got = PreferredAllocation(setup, t, held, available, c.must_include, c.size);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, c.want);
  std::mt19937 rng(11);
  for (int round = 0; round < 5; ++round) {
    std::shuffle(available.begin(), available.end(), rng);
    got = PreferredAllocation(setup, t, held, available, c.must_include, c.size);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c.want) << "available " << absl::StrJoin(available, ",");
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PreferredAllocationTest, ::testing::ValuesIn(PreferCases()),
                         [](const ::testing::TestParamInfo<PreferCase>& info) {
                           return std::string(info.param.name);
                         });

struct PreferErrorCase {
  const char* name;
  const char* fixture;
  ResourceKind kind;
  CpuSet reserved;
  Held held;
  Ids available;
  Ids must_include;
  int size;
  absl::StatusCode code;
  std::string mention;
};

TEST(PreferredAllocationTest, ErrorsNameTheValues) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const auto kExhausted = absl::StatusCode::kResourceExhausted;
  const auto kPrecondition = absl::StatusCode::kFailedPrecondition;
  const std::vector<PreferErrorCase> cases = {
      {"gpu_size_0", kDgx, kGpu, kNoReserved, kFree, kListed, kNoMust, 0, kInvalid,
       "allocation_size 0 must be at least 1"},
      {"gpu_size_negative", kDgx, kGpu, kNoReserved, kFree, kListed, kNoMust, -2, kInvalid,
       "allocation_size -2 must be at least 1"},
      {"gpu_must_unknown",
       kDgx,
       kGpu,
       kNoReserved,
       kFree,
       kListed,
       {"0000:ff:00.0"},
       2,
       kInvalid,
       "unknown GPU \"0000:ff:00.0\""},
      {"gpu_must_dra_held", kDgx, kGpu, kNoReserved, DraGpus(Dgx({"34"})), kListed, Dgx({"34"}), 2,
       kPrecondition,
       "must-include device \"0000:34:00.0\" is held by claim default/gpu-claim (uid uid-1)"},
      {"gpu_must_not_offered", kDgx, kGpu, kNoReserved, kFree, Dgx({"34", "36"}), Dgx({"b7"}), 2,
       kInvalid, "\"0000:b7:00.0\" is not in available"},
      {"gpu_too_many", kDgx, kGpu, kNoReserved, kFree, kListed, kNoMust, 17, kExhausted,
       "only 16 known GPUs available, 17 requested"},
      // DRA-held GPUs listed by the kubelet do not count.
      {"gpu_too_many_dra_held", kDgx, kGpu, kNoReserved, DraGpus(Dgx({"34", "36"})), kListed,
       kNoMust, 15, kExhausted, "only 14 known GPUs available, 15 requested"},
      {"cpu_size_0", k192, kCpu, kNoReserved, kFree, kListed, kNoMust, 0, kInvalid,
       "allocation_size 0 must be at least 1"},
      {"cpu_must_leading_zero",
       k192,
       kCpu,
       kNoReserved,
       kFree,
       kListed,
       {"01"},
       2,
       kInvalid,
       "device id \"01\" is not a CPU id"},
      {"cpu_must_negative",
       k192,
       kCpu,
       kNoReserved,
       kFree,
       kListed,
       {"-1"},
       2,
       kInvalid,
       "device id \"-1\" is not a CPU id"},
      {"cpu_must_word",
       k192,
       kCpu,
       kNoReserved,
       kFree,
       kListed,
       {"abc"},
       2,
       kInvalid,
       "device id \"abc\" is not a CPU id"},
      {"cpu_must_absent",
       k192,
       kCpu,
       kNoReserved,
       kFree,
       kListed,
       {"384"},
       2,
       kInvalid,
       "CPU 384 does not exist on this node (CPUs 0-383)"},
      {"cpu_must_reserved",
       k192,
       kCpu,
       Cpus("0,192"),
       kFree,
       kListed,
       {"192"},
       2,
       kInvalid,
       "CPU 192 is reserved (--reserved-cpus 0,192)"},
      {"cpu_must_dra_held",
       k192,
       kCpu,
       kNoReserved,
       DraCpus("8,200"),
       kListed,
       {"200"},
       2,
       kPrecondition,
       "must-include device \"200\" is held by claim default/cpu-claim (uid uid-1)"},
      // Of "01", "-1", "abc" and "3" only CPU 3 is an id.
      {"cpu_malformed_do_not_count",
       k192,
       kCpu,
       kNoReserved,
       kFree,
       {"01", "-1", "abc", "3"},
       kNoMust,
       2,
       kExhausted,
       "cannot take 2 CPUs, only 1"},
      {"cpu_must_offline",
       kOfflines,
       kCpu,
       kNoReserved,
       kFree,
       kListed,
       {"2"},
       2,
       kInvalid,
       "must_include CPUs \"2\""},
      {"cpu_offline_do_not_count", kOfflines, kCpu, kNoReserved, kFree, kListed, kNoMust, 8,
       kExhausted, "cannot take 8 CPUs, only 7"},
  };
  for (const PreferErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Topology& t = Load(c.fixture);
    const ResourceSetup setup = SetupFor(c.kind, c.reserved, t);
    const Ids available = c.available.empty() ? Listed(setup, t) : c.available;
    absl::StatusOr<Ids> got =
        PreferredAllocation(setup, t, Holding(c.held), available, c.must_include, c.size);
    ASSERT_FALSE(got.ok()) << absl::StrJoin(*got, ",");
    EXPECT_EQ(got.status().code(), c.code) << got.status();
    const std::string message(got.status().message());
    EXPECT_THAT(message, StartsWith(setup.resource + ": "));
    EXPECT_THAT(message, HasSubstr(c.mention));
  }
}

// ---------------------------------------------------------------------------------------------
// PlanAllocate

TEST(PlanAllocateTest, GpuGrant) {
  const Topology& t = Load(kDgx);
  ResourceSetup setup = GpuSetup(t);
  // b7 (GPU 8) gets a second node, mapped from another host path, read-only.
  cdi::DeviceNode render;
  render.path = "/dev/dri/renderD128";
  render.host_path = "/dev/dri/renderD136";
  render.permissions = "r";
  setup.gpus[DgxId("b7")].device_nodes.push_back(render);

  absl::StatusOr<AllocatePlan> plan =
      PlanAllocate(setup, t, state::State(), {DgxId("b7"), DgxId("34")});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const state::Allocation& a = plan->allocation;
  // FNV-1a of "topodra.io/gpu\n0000:34:00.0\n0000:b7:00.0", computed outside this code base: the
  // owner is persisted, so it must not change between releases.
  EXPECT_EQ(a.owner, "topodra.io/gpu/a0eed47fb756e001");
  EXPECT_EQ(a.owner, AllocationOwner(kGpuResource, {DgxId("b7"), DgxId("34")}));
  EXPECT_EQ(a.owner, AllocationOwner(kGpuResource, {DgxId("34"), DgxId("b7")}));
  EXPECT_EQ(a.kind, state::AllocationKind::kDevicePlugin);
  EXPECT_EQ(a.phase, state::Phase::kPrepared);
  EXPECT_EQ(a.gpus, (std::set<std::string>{DgxId("34"), DgxId("b7")}));
  EXPECT_TRUE(a.cpus.Empty());
  EXPECT_FALSE(plan->replay);
  EXPECT_TRUE(plan->shrunk.empty());

  const ContainerGrant want{{{"TOPODRA_GPUS", "0000:34:00.0,0000:b7:00.0"}},
                            {{"/dev/nvidia0", "/dev/nvidia0", "rw"},
                             {"/dev/nvidia8", "/dev/nvidia8", "rw"},
                             {"/dev/dri/renderD128", "/dev/dri/renderD136", "r"}},
                            {"topodra.io/gpu=a0eed47fb756e001"}};
  EXPECT_EQ(plan->grant, want);

  EXPECT_EQ(plan->cdi_file, "topodra.io_gpu-dp_a0eed47fb756e001.json");
  EXPECT_EQ(plan->cdi_spec.kind, kGpuResource);
  EXPECT_TRUE(cdi::Validate(plan->cdi_spec).ok()) << cdi::Validate(plan->cdi_spec);
  ASSERT_EQ(plan->cdi_spec.devices.size(), 1u);
  const cdi::Device& d = plan->cdi_spec.devices[0];
  EXPECT_EQ(d.name, "a0eed47fb756e001");
  EXPECT_THAT(d.container_edits.env, ElementsAre("TOPODRA_GPUS=0000:34:00.0,0000:b7:00.0"));
  EXPECT_EQ(d.container_edits.device_nodes,
            (std::vector<cdi::DeviceNode>{FakeNode(0), FakeNode(8), render}));

  EXPECT_EQ(a.answer, GrantToJson(want));
  EXPECT_EQ(a.cdi, (json{{"file", plan->cdi_file}, {"spec", cdi::ToJson(plan->cdi_spec)}}));
  EXPECT_TRUE(IsAllocationOf(kGpuResource, a));
  EXPECT_EQ(DeviceIds(setup, a), Dgx({"34", "b7"}));
  // It fits the node state as it is.
  state::State held;
  EXPECT_TRUE(held.Add(a).ok());
}

TEST(PlanAllocateTest, OwnerDependsOnResourceAndIds) {
  const std::string owner = AllocationOwner(kGpuResource, Dgx({"34", "b7"}));
  EXPECT_THAT(owner, MatchesRegex("topodra\\.io/gpu/[0-9a-f]{16}"));
  EXPECT_NE(owner, AllocationOwner(kGpuResource, Dgx({"34"})));
  EXPECT_NE(owner, AllocationOwner(kGpuResource, Dgx({"34", "b9"})));
  EXPECT_NE(owner, AllocationOwner("example.com/gpu", Dgx({"34", "b7"})));
}

TEST(PlanAllocateTest, CpuGrant) {
  const Topology& t = Load(k32);
  const ResourceSetup setup = CpuSetup(Cpus("16"));
  absl::StatusOr<AllocatePlan> plan =
      PlanAllocate(setup, t, state::State(), {"8", "3", "0", "2", "1"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // FNV-1a of "topodra.io/cpu\n0\n1\n2\n3\n8", computed outside this code base.
  EXPECT_EQ(plan->allocation.owner, "topodra.io/cpu/c4406f96a32bee79");
  EXPECT_EQ(plan->allocation.cpus, Cpus("0-3,8"));
  EXPECT_TRUE(plan->allocation.gpus.empty());
  EXPECT_EQ(
      plan->grant,
      (ContainerGrant{{{"TOPODRA_CPUSET", "0-3,8"}}, {}, {"topodra.io/cpu=c4406f96a32bee79"}}));
  EXPECT_EQ(plan->cdi_file, "topodra.io_cpu-dp_c4406f96a32bee79.json");
  EXPECT_EQ(plan->cdi_spec.kind, kCpuResource);
  EXPECT_TRUE(cdi::Validate(plan->cdi_spec).ok()) << cdi::Validate(plan->cdi_spec);
  ASSERT_EQ(plan->cdi_spec.devices.size(), 1u);
  EXPECT_THAT(plan->cdi_spec.devices[0].container_edits.env, ElementsAre("TOPODRA_CPUSET=0-3,8"));
  EXPECT_EQ(DeviceIds(setup, plan->allocation),
            (std::vector<std::string>{"0", "1", "2", "3", "8"}));
}

// --enforce=cgroup on 32 CPUs with 0 and 16 reserved: the 30 others can all be allocated, the
// reserved CPUs staying the shared pool, unless --strict-cpu-reservation keeps them out of it.
TEST(PlanAllocateTest, EveryUnreservedCpuUnlessTheReservationIsStrict) {
  const Topology& t = Load(k32);
  const std::vector<std::string> ids = CpuIds("1-15,17-31");
  ResourceSetup setup = CpuSetup(Cpus("0,16"));
  setup.cpuset_hook = prepare::CpusetHook{"/hook", "/records", "/sys/fs/cgroup"};
  absl::StatusOr<AllocatePlan> plan = PlanAllocate(setup, t, state::State(), ids);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->allocation.cpus, Cpus("1-15,17-31"));

  setup.cpuset_hook->strict_cpu_reservation = true;
  plan = PlanAllocate(setup, t, state::State(), ids);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(plan.status().message(),
            "topodra.io/cpu: taking CPUs 1-15,17-31 would leave no CPU for the containers "
            "without a CPU claim (online 0-31, held by other claims none, reserved 0,16, kept out "
            "of it by --strict-cpu-reservation); the shared pool must keep at least one CPU");
  // One CPU fewer is fine in strict mode too.
  plan = PlanAllocate(setup, t, state::State(), CpuIds("1-15,17-30"));
  ASSERT_TRUE(plan.ok()) << plan.status();
}

struct PlanErrorCase {
  const char* name;
  const char* fixture;
  ResourceKind kind;
  Ids ids;
  absl::StatusCode code;
  std::string mention;
};

TEST(PlanAllocateTest, ErrorsNameTheIdAndHolder) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const auto kPrecondition = absl::StatusCode::kFailedPrecondition;
  // Held throughout: b7 by claim default/gpu-claim, CPU 21 by default/cpu-claim. On k32 CPUs 0
  // and 16 are reserved. 0000:f0:00.0 is served but not on the bus.
  const std::vector<PlanErrorCase> cases = {
      {"gpu_empty", kDgx, kGpu, {}, kInvalid, "Allocate without device ids"},
      {"gpu_twice", kDgx, kGpu, Dgx({"34", "36", "34"}), kInvalid,
       "device \"0000:34:00.0\" is listed twice"},
      {"gpu_unknown",
       kDgx,
       kGpu,
       {DgxId("34"), "0000:ff:00.0"},
       kInvalid,
       "unknown GPU \"0000:ff:00.0\""},
      {"gpu_gone",
       kDgx,
       kGpu,
       {"0000:f0:00.0"},
       kPrecondition,
       "GPU \"0000:f0:00.0\" is gone from the node"},
      {"gpu_dra_held", kDgx, kGpu, Dgx({"34", "b7"}), kPrecondition,
       "device \"0000:b7:00.0\" is held by claim default/gpu-claim (uid uid-1)"},
      {"cpu_empty", k32, kCpu, {}, kInvalid, "Allocate without device ids"},
      {"cpu_twice", k32, kCpu, {"1", "2", "1"}, kInvalid, "device \"1\" is listed twice"},
      {"cpu_unknown",
       k32,
       kCpu,
       {"1", "32"},
       kInvalid,
       "CPU 32 does not exist on this node (CPUs 0-31)"},
      {"cpu_malformed", k32, kCpu, {"01"}, kInvalid, "device id \"01\" is not a CPU id"},
      {"cpu_reserved", k32, kCpu, {"1", "0"}, kInvalid, "CPU 0 is reserved (--reserved-cpus 0,16)"},
      {"cpu_dra_held",
       k32,
       kCpu,
       {"5", "21"},
       kPrecondition,
       "device \"21\" is held by claim default/cpu-claim (uid uid-2)"},
      {"cpu_offline", kOfflines, kCpu, {"1", "2"}, kPrecondition, "CPU 2 is offline"},
  };
  for (const PlanErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Topology& t = Load(c.fixture);
    ResourceSetup setup =
        SetupFor(c.kind, std::string(c.fixture) == k32 ? Cpus("0,16") : CpuSet(), t);
    if (c.kind == kGpu) setup.gpus["0000:f0:00.0"] = prepare::GpuDevice{"0000:f0:00.0", {}};
    const state::State held = Holding({DraClaim("uid-1", "gpu-claim", {}, {DgxId("b7")}),
                                       DraClaim("uid-2", "cpu-claim", Cpus("21"))});
    absl::StatusOr<AllocatePlan> got = PlanAllocate(setup, t, held, c.ids);
    ASSERT_FALSE(got.ok()) << got->allocation.owner;
    EXPECT_EQ(got.status().code(), c.code) << got.status();
    const std::string message(got.status().message());
    EXPECT_THAT(message, StartsWith(setup.resource + ": "));
    EXPECT_THAT(message, HasSubstr(c.mention));
  }
}

TEST(PlanAllocateTest, RepeatedAllocateReplays) {
  const Topology& t = Load(kDgx);
  const ResourceSetup setup = GpuSetup(t);
  state::State held;
  absl::StatusOr<AllocatePlan> first = PlanAllocate(setup, t, held, Dgx({"36", "34"}));
  ASSERT_TRUE(first.ok()) << first.status();
  Apply(*first, &held);
  const state::State before = held;
  // Same devices, other order.
  absl::StatusOr<AllocatePlan> again = PlanAllocate(setup, t, held, Dgx({"34", "36"}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->replay);
  EXPECT_EQ(again->grant, first->grant);
  EXPECT_EQ(again->allocation, first->allocation);
  EXPECT_TRUE(again->shrunk.empty());
  EXPECT_EQ(held, before);

  // CPUs likewise.
  const Topology& em = Load(k32);
  const ResourceSetup cpus = CpuSetup();
  absl::StatusOr<AllocatePlan> c1 = PlanAllocate(cpus, em, held, {"10", "2"});
  ASSERT_TRUE(c1.ok()) << c1.status();
  Apply(*c1, &held);
  absl::StatusOr<AllocatePlan> c2 = PlanAllocate(cpus, em, held, {"2", "10"});
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_TRUE(c2->replay);
  EXPECT_EQ(c2->grant, c1->grant);
  EXPECT_EQ(c2->grant.envs.at("TOPODRA_CPUSET"), "2,10");
}

TEST(PlanAllocateTest, HandedOnDevicesShrinkEarlierAllocation) {
  const Topology& t = Load(kDgx);
  const ResourceSetup setup = GpuSetup(t);
  const std::string a = DgxId("34"), b = DgxId("36"), c = DgxId("39");
  state::State held;
  const state::Allocation ab = Allocated(setup, t, {a, b}, &held);
  ASSERT_EQ(ab.gpus.size(), 2u);

  {
    // {B, C}: the earlier {A, B} gives up B and keeps everything else (owner, answer, CDI).
    absl::StatusOr<AllocatePlan> plan = PlanAllocate(setup, t, held, {b, c});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_FALSE(plan->replay);
    state::Allocation want = ab;
    want.gpus = {a};
    EXPECT_EQ(plan->shrunk, std::vector<state::Allocation>{want});
    state::State after = held;
    Apply(*plan, &after);
    EXPECT_EQ(after.HolderOfGpu(a), ab.owner);
    EXPECT_EQ(after.HolderOfGpu(b), plan->allocation.owner);
    EXPECT_EQ(after.HolderOfGpu(c), plan->allocation.owner);
    EXPECT_EQ(after.Size(), 2);
    // Once the kubelet reports only B and C, the shrunk allocation is unused.
    EXPECT_EQ(UnusedAllocations(after, kGpuResource, {b, c}), std::vector<std::string>{ab.owner});
  }
  {
    // {A, B, C}: nothing of {A, B} is left; it is to be removed.
    absl::StatusOr<AllocatePlan> plan = PlanAllocate(setup, t, held, {a, b, c});
    ASSERT_TRUE(plan.ok()) << plan.status();
    state::Allocation want = ab;
    want.gpus.clear();
    EXPECT_EQ(plan->shrunk, std::vector<state::Allocation>{want});
    state::State after = held;
    Apply(*plan, &after);
    EXPECT_EQ(after.Size(), 1);
    EXPECT_EQ(after.Find(ab.owner), nullptr);
    EXPECT_EQ(after.HolderOfGpu(a), plan->allocation.owner);
  }
}

TEST(PlanAllocateTest, HandOnFromSeveralAllocationsInOwnerOrder) {
  const Topology& t = Load(k32);
  const ResourceSetup setup = CpuSetup();
  state::State held;
  const state::Allocation x = Allocated(setup, t, {"0", "16"}, &held);
  const state::Allocation y = Allocated(setup, t, {"1", "17"}, &held);
  const state::Allocation z = Allocated(setup, t, {"2"}, &held);
  // A DRA claim elsewhere is untouched.
  ASSERT_TRUE(held.Add(DraClaim("uid-1", "cpu-claim", Cpus("8"))).ok());
  absl::StatusOr<AllocatePlan> plan = PlanAllocate(setup, t, held, {"17", "16", "3"});
  ASSERT_TRUE(plan.ok()) << plan.status();
  state::Allocation x2 = x, y2 = y;
  x2.cpus = Cpus("0");
  y2.cpus = Cpus("1");
  std::vector<state::Allocation> want = {x2, y2};
  std::sort(want.begin(), want.end(),
            [](const auto& l, const auto& r) { return l.owner < r.owner; });
  EXPECT_EQ(plan->shrunk, want);
  state::State after = held;
  Apply(*plan, &after);
  EXPECT_EQ(after.Size(), 5);
  EXPECT_EQ(after.Find(z.owner)->cpus, Cpus("2"));
  EXPECT_EQ(after.Find(plan->allocation.owner)->cpus, Cpus("3,16-17"));
}

TEST(PlanAllocateTest, ReallocatingAShrunkAllocationsDevicesReplacesIt) {
  // {A, B, C} shrinks to {A, C} when B is handed on; an Allocate of {A, B, C} again has the
  // same owner as the shrunk allocation. That one is listed as shrunk to nothing (it must go
  // before the new allocation of the same owner can be added), B's holder too.
  const Topology& t = Load(kP8);
  const ResourceSetup setup = GpuSetup(t);
  const std::vector<std::string> abc = P8({"0002", "0003", "000a"});
  state::State held;
  const state::Allocation first = Allocated(setup, t, abc, &held);
  absl::StatusOr<AllocatePlan> handed = PlanAllocate(setup, t, held, {abc[1]});
  ASSERT_TRUE(handed.ok()) << handed.status();
  Apply(*handed, &held);
  ASSERT_EQ(held.Find(first.owner)->gpus, (std::set<std::string>{abc[0], abc[2]}));

  absl::StatusOr<AllocatePlan> plan = PlanAllocate(setup, t, held, abc);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->replay);
  EXPECT_EQ(plan->allocation.owner, first.owner);
  ASSERT_EQ(plan->shrunk.size(), 2u);
  for (const state::Allocation& s : plan->shrunk) EXPECT_TRUE(s.gpus.empty()) << s.owner;
  Apply(*plan, &held);
  EXPECT_EQ(held.Size(), 1);
  EXPECT_EQ(*held.Find(first.owner), plan->allocation);
}

// ---------------------------------------------------------------------------------------------
// Grants as stored JSON

TEST(GrantJsonTest, RoundTrip) {
  const ContainerGrant grant{{{"TOPODRA_GPUS", "0000:34:00.0"}, {"OTHER", "x y"}},
                             {{"/dev/nvidia0", "/dev/nvidia0", "rw"}, {"/dev/a", "/dev/b", "r"}},
                             {"topodra.io/gpu=0123456789abcdef"}};
  const json j = GrantToJson(grant);
  EXPECT_EQ(j, json::parse(R"({
    "envs": {"OTHER": "x y", "TOPODRA_GPUS": "0000:34:00.0"},
    "devices": [{"containerPath": "/dev/nvidia0", "hostPath": "/dev/nvidia0", "permissions": "rw"},
                {"containerPath": "/dev/a", "hostPath": "/dev/b", "permissions": "r"}],
    "cdiDevices": ["topodra.io/gpu=0123456789abcdef"]})"));
  absl::StatusOr<ContainerGrant> back = GrantFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, grant);
  // Through the state's text form, as a restart reads it.
  back = GrantFromJson(state::JsonText(j).Parse());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, grant);

  const ContainerGrant empty;
  back = GrantFromJson(GrantToJson(empty));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, empty);
}

TEST(GrantJsonTest, MalformedIsDataLossNeverThrows) {
  const std::vector<json> bad = {
      json(),
      json(42),
      json("text"),
      json::array(),
      json::object(),
      json::parse(R"({"devices": [], "cdiDevices": []})"),
      json::parse(R"({"envs": {"A": 1}, "devices": [], "cdiDevices": []})"),
      json::parse(R"({"envs": [1, 2], "devices": [], "cdiDevices": []})"),
      json::parse(R"({"envs": {}, "devices": [5], "cdiDevices": []})"),
      json::parse(R"({"envs": {}, "devices": "abc", "cdiDevices": []})"),
      json::parse(R"({"envs": {}, "devices": [{"containerPath": "/dev/x", "hostPath": "/dev/x"}],
                      "cdiDevices": []})"),
      json::parse(R"({"envs": {}, "devices": [{"containerPath": "/dev/x", "hostPath": 1,
                      "permissions": "rw"}], "cdiDevices": []})"),
      json::parse(R"({"envs": {}, "devices": []})"),
      json::parse(R"({"envs": {}, "devices": [], "cdiDevices": "x"})"),
      json::parse(R"({"envs": {}, "devices": [], "cdiDevices": [1]})"),
  };
  for (const json& j : bad) {
    SCOPED_TRACE(j.dump());
    absl::StatusOr<ContainerGrant> got;
    EXPECT_NO_THROW(got = GrantFromJson(j));
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
    EXPECT_THAT(std::string(got.status().message()), StartsWith("stored device-plugin answer: "));
  }
}

// ---------------------------------------------------------------------------------------------
// UnusedAllocations

TEST(UnusedAllocationsTest, OnlyWhollyUnusedOfThisResource) {
  const Topology& dgx = Load(kDgx);
  const Topology& em = Load(k32);
  const ResourceSetup gpus = GpuSetup(dgx);
  const ResourceSetup cpus = CpuSetup();
  state::State held;
  const state::Allocation used = Allocated(gpus, dgx, Dgx({"34", "36"}), &held);
  const state::Allocation partly = Allocated(gpus, dgx, Dgx({"39", "3b"}), &held);
  const state::Allocation unused1 = Allocated(gpus, dgx, Dgx({"57"}), &held);
  const state::Allocation unused2 = Allocated(gpus, dgx, Dgx({"b7", "b9"}), &held);
  const state::Allocation other = Allocated(cpus, em, {"1", "17"}, &held);
  ASSERT_TRUE(held.Add(DraClaim("uid-1", "gpu-claim", {}, {DgxId("e0")})).ok());

  // The kubelet reports 34, 36 and 3b (and devices it has from nowhere we know).
  const std::set<std::string> assigned = {DgxId("34"), DgxId("36"), DgxId("3b"), DgxId("ff"), "17"};
  std::vector<std::string> want = {unused1.owner, unused2.owner};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(UnusedAllocations(held, kGpuResource, assigned), want);
  // Nothing reported: every GPU allocation, neither the CPU one nor the claim.
  want = {used.owner, partly.owner, unused1.owner, unused2.owner};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(UnusedAllocations(held, kGpuResource, {}), want);
  // The CPU resource sees only its own.
  EXPECT_EQ(UnusedAllocations(held, kCpuResource, assigned), std::vector<std::string>{});
  EXPECT_EQ(UnusedAllocations(held, kCpuResource, {"1"}), std::vector<std::string>{});
  EXPECT_EQ(UnusedAllocations(held, kCpuResource, {DgxId("34")}),
            std::vector<std::string>{other.owner});
}

// ---------------------------------------------------------------------------------------------
// Names

TEST(NamesTest, CdiFileNames) {
  EXPECT_EQ(DpCdiFileName(kGpuResource, "topodra.io/gpu/0123456789abcdef"),
            "topodra.io_gpu-dp_0123456789abcdef.json");
  EXPECT_TRUE(IsDpCdiFileOf(kGpuResource, "topodra.io_gpu-dp_0123456789abcdef.json"));
  EXPECT_TRUE(IsDpCdiFileOf(kGpuResource, "topodra.io_gpu-dp_x.json"));
  EXPECT_FALSE(IsDpCdiFileOf(kGpuResource, "topodra.io_gpu-dp_.json"));
  EXPECT_FALSE(IsDpCdiFileOf(kGpuResource, "topodra.io_gpu-dp_0123456789abcdef.yaml"));
  EXPECT_FALSE(IsDpCdiFileOf(kGpuResource, "topodra.io_cpu-dp_0123456789abcdef.json"));
  EXPECT_FALSE(IsDpCdiFileOf(kCpuResource, "topodra.io_gpu-dp_0123456789abcdef.json"));
  // The DRA path's per-claim files are not ours.
  EXPECT_FALSE(IsDpCdiFileOf(kGpuResource, "gpu.topodra.io-claim_1234.json"));
  EXPECT_FALSE(IsDpCdiFileOf(kGpuResource, "topodra.io-gpu_0123456789abcdef.json"));
  // With this instance's marker (prepare::CdiInstanceMarker).
  const std::string marked =
      DpCdiFileName(kGpuResource, "topodra.io/gpu/0123456789abcdef", "00112233445566ff");
  EXPECT_EQ(marked, "topodra.io_gpu-dp_0123456789abcdef_i00112233445566ff.json");
  EXPECT_TRUE(IsDpCdiFileOf(kGpuResource, marked));
  EXPECT_EQ(prepare::CdiMarkerOf(marked), "00112233445566ff");
  EXPECT_EQ(prepare::CdiMarkerOf("topodra.io_gpu-dp_0123456789abcdef.json"), "");
}

TEST(NamesTest, IsAllocationOf) {
  state::Allocation dp;
  dp.kind = state::AllocationKind::kDevicePlugin;
  dp.owner = "topodra.io/gpu/0123456789abcdef";
  EXPECT_TRUE(IsAllocationOf(kGpuResource, dp));
  EXPECT_FALSE(IsAllocationOf(kCpuResource, dp));
  EXPECT_FALSE(IsAllocationOf("topodra.io", dp));     // the owner's rest holds a '/'
  EXPECT_FALSE(IsAllocationOf("topodra.io/gp", dp));  // a prefix of the resource
  state::Allocation claim = dp;
  claim.kind = state::AllocationKind::kDraClaim;
  EXPECT_FALSE(IsAllocationOf(kGpuResource, claim));
}

TEST(NamesTest, DeviceIdsSortedLikeTheList) {
  state::Allocation a;
  a.kind = state::AllocationKind::kDevicePlugin;
  a.cpus = CpuSet{2, 10, 1, 100};
  EXPECT_EQ(DeviceIds(CpuSetup(), a), (std::vector<std::string>{"1", "2", "10", "100"}));
  state::Allocation g;
  g.gpus = {DgxId("b7"), "000a:01:00.0", DgxId("34")};
  EXPECT_EQ(DeviceIds(GpuSetup(Load(kDgx)), g),
            (std::vector<std::string>{"0000:34:00.0", "0000:b7:00.0", "000a:01:00.0"}));
}

}  // namespace
}  // namespace topodra::deviceplugin

namespace topodra::deviceplugin {
namespace {

state::Reservation ReservationOn(const std::string& name, CpuSet cpus,
                                 std::set<std::string> gpus = {}) {
  state::Reservation r;
  r.uid = "uid-" + name;
  r.name = name;
  r.cpus = std::move(cpus);
  r.gpus = std::move(gpus);
  r.spec = nlohmann::json{{"owners", {{{"namespace", "a"}}}}};
  return r;
}

// Reservations are for their owners' DRA claims: device-plugin pods never get their devices.
TEST(ReservationTest, ReservedDevicesAreUnhealthyNeverPreferredAndRefused) {
  const Topology& t = Load(k32);
  const ResourceSetup cpu = CpuSetup();
  state::State held;
  ASSERT_TRUE(held.PutReservation(ReservationOn("r1", Cpus("8-9"))).ok());
  for (const Device& d : ListDevices(cpu, t, held)) {
    EXPECT_EQ(d.healthy, d.id != "8" && d.id != "9") << d.id;
  }
  absl::StatusOr<std::vector<std::string>> pref =
      PreferredAllocation(cpu, t, held, CpuIds("8-11"), {}, 2);
  ASSERT_TRUE(pref.ok()) << pref.status();
  EXPECT_THAT(*pref, ::testing::ElementsAre("10", "11"));
  pref = PreferredAllocation(cpu, t, held, CpuIds("8-11"), {"8"}, 2);
  ASSERT_FALSE(pref.ok());
  EXPECT_EQ(std::string(pref.status().message()),
            "topodra.io/cpu: must-include device \"8\" is held by Reservation \"r1\" for the DRA "
            "claims of its owners");
  absl::StatusOr<AllocatePlan> plan = PlanAllocate(cpu, t, held, {"9"});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(std::string(plan.status().message()),
            "topodra.io/cpu: device \"9\" is held by Reservation \"r1\" for the DRA claims of its "
            "owners");

  const Topology& dgx = Load(kDgx);
  const ResourceSetup gpu = GpuSetup(dgx);
  state::State g;
  ASSERT_TRUE(g.PutReservation(ReservationOn("g", {}, {"0000:34:00.0"})).ok());
  for (const Device& d : ListDevices(gpu, dgx, g)) {
    EXPECT_EQ(d.healthy, d.id != "0000:34:00.0") << d.id;
  }
  EXPECT_FALSE(PlanAllocate(gpu, dgx, g, {"0000:34:00.0"}).ok());
  EXPECT_TRUE(PlanAllocate(gpu, dgx, g, {"0000:36:00.0"}).ok());
}

}  // namespace
}  // namespace topodra::deviceplugin

namespace topodra::deviceplugin {
namespace {

// ---------------------------------------------------------------------------------------------
// Device health (driver/health): an unhealthy GPU is listed Unhealthy, never offered or
// allocated, and never fails a request for the other GPUs. The NVIDIA device plugin's failure
// this guards against: one GPU off the bus made GetPreferredAllocation fail for every pod,
// because the kubelet still listed it as available.

TEST(HealthTest, UnhealthyGpuListedUnhealthy) {
  const Topology& t = Load(kP8);
  ResourceSetup setup = GpuSetup(t);
  setup.unhealthy = {{"000a:01:00.0", "aer-fatal"}};
  EXPECT_EQ(ListDevices(setup, t, {}), (std::vector<Device>{{"0002:01:00.0", true, {0}},
                                                            {"0003:01:00.0", true, {0}},
                                                            {"000a:01:00.0", false, {1}},
                                                            {"000b:01:00.0", true, {1}}}));
}

TEST(HealthTest, OneBadGpuNeverFailsPreferredAllocationForTheOthers) {
  const Topology& t = Load(kDgx);
  ResourceSetup setup = GpuSetup(t);
  // 34 is faulty (still on the bus, tainted); ff was never ours (a GPU that fell off the bus
  // before the kubelet noticed: unknown to the node now). The kubelet lists both as available.
  setup.unhealthy = {{DgxId("34"), "link-down"}};
  const std::vector<std::string> available = Dgx({"34", "36", "39", "3b", "ff"});
  for (int size = 1; size <= 3; ++size) {
    SCOPED_TRACE(size);
    absl::StatusOr<std::vector<std::string>> got =
        PreferredAllocation(setup, t, {}, available, {}, size);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->size(), static_cast<size_t>(size));
    EXPECT_THAT(*got, ::testing::Not(::testing::Contains(DgxId("34"))));
    EXPECT_THAT(*got, ::testing::Not(::testing::Contains(DgxId("ff"))));
  }
  // The switch mate of 34 is taken with the next pair, as if 34 were held.
  EXPECT_EQ(PreferredAllocation(setup, t, {}, available, {}, 2).value(), Dgx({"39", "3b"}));
  // Only a request that insists on the bad GPU fails, and says why.
  absl::StatusOr<std::vector<std::string>> insist =
      PreferredAllocation(setup, t, {}, available, {DgxId("34")}, 2);
  ASSERT_FALSE(insist.ok());
  EXPECT_EQ(insist.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(insist.status().message()),
            "topodra.io/gpu: must-include GPU \"0000:34:00.0\" is unhealthy (link-down)");
  // Too few healthy ones left: ResourceExhausted, as for any shortage.
  EXPECT_EQ(PreferredAllocation(setup, t, {}, Dgx({"34", "36"}), {}, 2).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(HealthTest, AllocateRefusesOnlyTheBadGpu) {
  const Topology& t = Load(kDgx);
  ResourceSetup setup = GpuSetup(t);
  setup.unhealthy = {{DgxId("34"), "aer-fatal"}};
  state::State held;
  absl::StatusOr<AllocatePlan> bad = PlanAllocate(setup, t, held, Dgx({"34", "36"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(bad.status().message()),
            "topodra.io/gpu: GPU \"0000:34:00.0\" is unhealthy (aer-fatal)");
  // The others allocate as if nothing were wrong.
  EXPECT_EQ(Allocated(setup, t, Dgx({"36", "39"}), &held).gpus,
            (std::set<std::string>{DgxId("36"), DgxId("39")}));
  // Recovered: allocatable again.
  setup.unhealthy.clear();
  EXPECT_TRUE(PlanAllocate(setup, t, held, Dgx({"34"})).ok());
}

}  // namespace
}  // namespace topodra::deviceplugin
