// ResolveCpuAssignments and ParseCpuConfig: every acceptance and rejection rule of the opaque
// cpuset config, on inline claims and the shared machine exports.
#include "driver/claims/cpu_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "test/testing/fixtures.h"

namespace topodra::claims {
namespace {

using json = nlohmann::json;

constexpr char kDriver[] = "dra.cpu";
// 16 CPUs, all online.
constexpr char kFull[] = "16em64t-4s2c2t.xml";
// Online 0-1,3-4,6,12,15; the rest of 0-15 present but offline.
constexpr char kOfflines[] = "16em64t-4s2c2t-offlines.xml";

const topology::Topology& Load(const std::string& name) {
  static std::map<std::string, topology::Topology> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, testing::LoadTopology(name)).first;
  return it->second;
}

// Reserved 0-1; CPU 3 prepared for other/c2, CPU 13 for a claim the checkpoint cannot name.
NodeCpuState TestNode() {
  NodeCpuState node;
  node.reserved = CpuSet{0, 1};
  node.held_by_others = CpuSet{3, 13};
  node.holder = [](int cpu) -> std::optional<std::string> {
    if (cpu == 3) return "claim other/c2 (uid u2)";
    return std::nullopt;
  };
  return node;
}

std::string Result(const std::string& request, const std::string& capacity,
                   const std::string& driver = kDriver) {
  const std::string cap =
      capacity.empty() ? "" : R"(, "consumedCapacity": {"dra.cpu/cpu": ")" + capacity + "\"}";
  return R"({"request": ")" + request + R"(", "driver": ")" + driver +
         R"(", "pool": "node1", "device": "cpus-)" + request + "\"" + cap + "}";
}

std::string Config(const std::string& source, const std::string& requests,
                   const std::string& parameters, const std::string& driver = kDriver) {
  return R"({"source": ")" + source + R"(", "requests": )" + requests +
         R"(, "opaque": {"driver": ")" + driver + R"(", "parameters": )" + parameters + "}}";
}

std::string Cpuset(const std::string& cpus) {
  return R"({"apiVersion": "v1alpha1", "cpuConfig": {"cpuset": ")" + cpus + "\"}}";
}

std::string ClaimJson(const std::vector<std::string>& results,
                      const std::vector<std::string>& configs) {
  auto join = [](const std::vector<std::string>& items) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + items[i];
    return out + "]";
  };
  return R"({"metadata": {"uid": "u1", "namespace": "default", "name": "c1"},
             "status": {"allocation": {"devices": {"results": )" +
         join(results) + R"(, "config": )" + join(configs) + "}}}}";
}

// Every device the cases name is a group of the whole machine, so only the config rules decide.
CpuPool TestPool(const topology::Topology& topo) {
  CpuPool pool;
  pool.name = "node1";
  for (const char* request : {"a", "b", "b/x", "cpus", "cpus/big", "gpu"}) {
    pool.devices[std::string("cpus-") + request] = CpuDevice{CpuDeviceKind::kGroup, topo.online};
  }
  return pool;
}

// What one assignment should be: request, count and the explicit cpuset ("" when none).
struct Want {
  std::string request;
  int count;
  std::string cpus;
};

struct Case {
  std::string name;
  std::string topology;
  std::string claim;
  std::vector<Want> want;  // when error is empty
  std::string error;       // the whole message
};

class ResolveTest : public ::testing::TestWithParam<Case> {};

TEST_P(ResolveTest, Resolves) {
  const Case& c = GetParam();
  absl::StatusOr<Claim> claim = ParseClaim(json::parse(c.claim));
  ASSERT_TRUE(claim.ok()) << claim.status();
  absl::StatusOr<std::vector<CpuAssignment>> got = ResolveCpuAssignments(
      *claim, kDriver, Load(c.topology), TestNode(), TestPool(Load(c.topology)));
  if (!c.error.empty()) {
    ASSERT_FALSE(got.ok()) << "accepted";
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(), c.error);
    return;
  }
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), c.want.size());
  for (size_t i = 0; i < got->size(); ++i) {
    const CpuAssignment& a = (*got)[i];
    const DeviceResult& r = claim->results[a.result_index];
    EXPECT_EQ(a.request, c.want[i].request) << i;
    EXPECT_EQ(a.request, r.request) << i;
    EXPECT_EQ(a.base_request, BaseRequest(r.request)) << i;
    EXPECT_EQ(a.pool, "node1") << i;
    EXPECT_EQ(a.device, r.device) << i;
    EXPECT_EQ(a.count, c.want[i].count) << i;
    if (c.want[i].cpus.empty()) {
      EXPECT_FALSE(a.explicit_cpus.has_value()) << i << ": " << *a.explicit_cpus;
    } else {
      ASSERT_TRUE(a.explicit_cpus.has_value()) << i;
      EXPECT_EQ(a.explicit_cpus->ToString(), c.want[i].cpus) << i;
    }
  }
}

const std::string kPrefix = "claim default/c1 request \"cpus\": ";
const std::string kConfig0 = kPrefix + "config[0] (FromClaim): ";

std::vector<Case> Cases() {
  const std::string one = Result("cpus", "4");
  return {
      // Accepted.
      {"NoConfigCountFromCapacity", kFull, ClaimJson({one}, {}), {{"cpus", 4, ""}}, ""},
      {"MilliCapacity", kFull, ClaimJson({Result("cpus", "4000m")}, {}), {{"cpus", 4, ""}}, ""},
      {"ExplicitCpuset",
       kFull,
       ClaimJson({one}, {Config("FromClaim", R"(["cpus"])", Cpuset("8-11"))}),
       {{"cpus", 4, "8-11"}},
       ""},
      {"EmptyRequestsApply",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]", Cpuset("4-5,8-9"))}),
       {{"cpus", 4, "4-5,8-9"}},
       ""},
      {"BaseRequestCoversSubrequest",
       kFull,
       ClaimJson({Result("cpus/big", "2")}, {Config("FromClaim", R"(["cpus"])", Cpuset("14-15"))}),
       {{"cpus/big", 2, "14-15"}},
       ""},
      {"ExactSubrequest",
       kFull,
       ClaimJson({Result("cpus/big", "2")},
                 {Config("FromClaim", R"(["cpus/big"])", Cpuset("14-15"))}),
       {{"cpus/big", 2, "14-15"}},
       ""},
      {"OtherSubrequestDoesNotApply",
       kFull,
       ClaimJson({Result("cpus/big", "2")},
                 {Config("FromClaim", R"(["cpus/small"])", Cpuset("14"))}),
       {{"cpus/big", 2, ""}},
       ""},
      {"OtherRequestDoesNotApply",
       kFull,
       ClaimJson({one}, {Config("FromClaim", R"(["memory", "cpu"])", Cpuset("2"))}),
       {{"cpus", 4, ""}},
       ""},
      {"OtherDriversIgnored",
       kFull,
       ClaimJson({one, Result("gpu", "", "gpu.example.com")},
                 {Config("FromClaim", "[]", R"({"anything": ["goes"]})", "gpu.example.com")}),
       {{"cpus", 4, ""}},
       ""},
      {"ClaimConfigOverridesClass",
       kFull,
       ClaimJson({one}, {Config("FromClass", "[]", Cpuset("2,4-6")),
                         Config("FromClaim", R"(["cpus"])", Cpuset("8-11"))}),
       {{"cpus", 4, "8-11"}},
       ""},
      {"ClaimConfigOverridesLaterListedClass",
       kFull,
       ClaimJson({one}, {Config("FromClaim", R"(["cpus"])", Cpuset("8-11")),
                         Config("FromClass", "[]", Cpuset("2,4-6"))}),
       {{"cpus", 4, "8-11"}},
       ""},
      {"ClassConfigAlone",
       kFull,
       ClaimJson({one}, {Config("FromClass", "[]", Cpuset("2,4-6"))}),
       {{"cpus", 4, "2,4-6"}},
       ""},
      {"TwoResultsDisjoint",
       kFull,
       ClaimJson({Result("a", "2"), Result("b", "3")},
                 {Config("FromClaim", R"(["a"])", Cpuset("8-9")),
                  Config("FromClaim", R"(["b"])", Cpuset("10-12"))}),
       {{"a", 2, "8-9"}, {"b", 3, "10-12"}},
       ""},
      {"OnlineCpusOfHoleyMachine",
       kOfflines,
       ClaimJson({Result("cpus", "3")}, {Config("FromClaim", "[]", Cpuset("6,12,15"))}),
       {{"cpus", 3, "6,12,15"}},
       ""},
      {"NoResultsOfThisDriver",
       kFull,
       ClaimJson({Result("gpu", "", "gpu.example.com")}, {}),
       {},
       ""},

      // Rejected: the consumed capacity.
      {"CapacityMissing",
       kFull,
       ClaimJson({Result("cpus", "")}, {}),
       {},
       kPrefix + "consumedCapacity dra.cpu/cpu is missing"},
      {"CapacityZero",
       kFull,
       ClaimJson({Result("cpus", "0")}, {}),
       {},
       kPrefix + "consumedCapacity dra.cpu/cpu is 0 (\"0\")"},
      {"CapacityFractional",
       kFull,
       ClaimJson({Result("cpus", "1500m")}, {}),
       {},
       kPrefix + "consumedCapacity dra.cpu/cpu is fractional (\"1500m\")"},
      {"CapacityNegative",
       kFull,
       ClaimJson({Result("cpus", "-2")}, {}),
       {},
       kPrefix + "consumedCapacity dra.cpu/cpu is negative (\"-2\")"},
      {"CapacityNotQuantity",
       kFull,
       ClaimJson({Result("cpus", "four")}, {}),
       {},
       kPrefix + "consumedCapacity dra.cpu/cpu is not a quantity (\"four\")"},
      {"CapacityHuge",
       kFull,
       ClaimJson({Result("cpus", "1M")}, {}),
       {},
       kPrefix + "consumedCapacity dra.cpu/cpu is more CPUs than any node has (\"1M\")"},

      // Rejected: the config JSON.
      {"UnknownTopField",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]",
                                R"({"apiVersion": "v1alpha1", "kind": "CpuConfig",
                                    "cpuConfig": {"cpuset": "8-11"}})")}),
       {},
       kConfig0 + "unknown field \"kind\""},
      {"UnknownNestedField",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]",
                                R"({"apiVersion": "v1alpha1",
                                    "cpuConfig": {"cpuset": "8-11", "exclusive": true}})")}),
       {},
       kConfig0 + "unknown field \"cpuConfig.exclusive\""},
      {"UnsupportedApiVersion",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]",
                                R"({"apiVersion": "v1", "cpuConfig": {"cpuset": "8-11"}})")}),
       {},
       kConfig0 + "unsupported apiVersion \"v1\" (expected \"v1alpha1\")"},
      {"MissingApiVersion",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]", R"({"cpuConfig": {"cpuset": "8-11"}})")}),
       {},
       kConfig0 + "apiVersion is missing (expected \"v1alpha1\")"},
      {"ApiVersionNumber",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]", R"({"apiVersion": 1})")}),
       {},
       kConfig0 + "apiVersion: expected a string, got number"},
      {"MissingCpuConfig",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]", R"({"apiVersion": "v1alpha1"})")}),
       {},
       kConfig0 + "cpuConfig is missing"},
      {"CpuConfigString",
       kFull,
       ClaimJson({one},
                 {Config("FromClaim", "[]", R"({"apiVersion": "v1alpha1", "cpuConfig": "8-11"})")}),
       {},
       kConfig0 + "cpuConfig: expected an object, got string"},
      {"MissingCpuset",
       kFull,
       ClaimJson({one},
                 {Config("FromClaim", "[]", R"({"apiVersion": "v1alpha1", "cpuConfig": {}})")}),
       {},
       kConfig0 + "cpuConfig.cpuset is missing"},
      {"CpusetNumber",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]",
                                R"({"apiVersion": "v1alpha1", "cpuConfig": {"cpuset": 8}})")}),
       {},
       kConfig0 + "cpuConfig.cpuset: expected a string, got number"},
      {"EmptyCpuset",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]", Cpuset(""))}),
       {},
       kConfig0 + "cpuConfig.cpuset is empty"},
      {"ReversedCpuset",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]", Cpuset("5-2"))}),
       {},
       kConfig0 + "cpuConfig.cpuset: " + std::string(CpuSet::Parse("5-2").status().message())},
      {"GarbageCpuset",
       kFull,
       ClaimJson({one}, {Config("FromClaim", "[]", Cpuset("all"))}),
       {},
       kConfig0 + "cpuConfig.cpuset: " + std::string(CpuSet::Parse("all").status().message())},
      {"ClassConfigNamedInError",
       kFull,
       ClaimJson({one}, {Config("FromClass", "[]", Cpuset("x"))}),
       {},
       kPrefix + "config[0] (FromClass): cpuConfig.cpuset: " +
           std::string(CpuSet::Parse("x").status().message())},

      // Rejected: the cpuset against the request and the node.
      {"SizeDiffers",
       kFull,
       ClaimJson({Result("cpus", "6")}, {Config("FromClaim", "[]", Cpuset("2-5"))}),
       {},
       kPrefix + "cpuset \"2-5\" has 4 CPUs but the request consumes 6 dra.cpu/cpu"},
      {"Offline",
       kOfflines,
       ClaimJson({Result("cpus", "2")}, {Config("FromClaim", "[]", Cpuset("6-7"))}),
       {},
       kPrefix + "cpuset \"6-7\": CPU 7 is offline"},
      {"OfflineSeveral",
       kOfflines,
       ClaimJson({Result("cpus", "3")}, {Config("FromClaim", "[]", Cpuset("8-9,12"))}),
       {},
       kPrefix + "cpuset \"8-9,12\": CPUs 8-9 are offline"},
      {"NotOnNode",
       kFull,
       ClaimJson({Result("cpus", "2")}, {Config("FromClaim", "[]", Cpuset("15-16"))}),
       {},
       kPrefix + "cpuset \"15-16\": CPU 16 is not on this node"},
      {"Reserved",
       kFull,
       ClaimJson({Result("cpus", "3")}, {Config("FromClaim", "[]", Cpuset("0-2"))}),
       {},
       kPrefix + "cpuset \"0-2\": CPUs 0-1 are reserved (--reserved-cpus)"},
      {"HeldByNamedClaim",
       kFull,
       ClaimJson({Result("cpus", "2")}, {Config("FromClaim", "[]", Cpuset("2-3"))}),
       {},
       kPrefix + "cpuset \"2-3\": CPU 3 is already prepared for claim other/c2 (uid u2)"},
      {"HeldByTwoClaims",
       kFull,
       ClaimJson({Result("cpus", "3")}, {Config("FromClaim", "[]", Cpuset("3,12-13"))}),
       {},
       kPrefix +
           "cpuset \"3,12-13\": CPU 3 is already prepared for claim other/c2 (uid u2); CPU 13 is "
           "already prepared for another claim"},
      {"UsedTwice",
       kFull,
       ClaimJson({Result("a", "2"), Result("b", "2")},
                 {Config("FromClaim", R"(["a"])", Cpuset("8-9")),
                  Config("FromClaim", R"(["b"])", Cpuset("9-10"))}),
       {},
       "claim default/c1: CPU 9 is used by two results (requests \"a\" and \"b\")"},
      {"EmptyRequestsConfigOnTwoResults",
       kFull,
       ClaimJson({Result("a", "2"), Result("b/x", "2")},
                 {Config("FromClaim", "[]", Cpuset("8-9"))}),
       {},
       "claim default/c1: CPUs 8-9 are used by two results (requests \"a\" and \"b/x\")"},
      {"TwoClaimConfigsSameRequest",
       kFull,
       ClaimJson({one}, {Config("FromClaim", R"(["cpus"])", Cpuset("8-11")),
                         Config("FromClass", "[]", Cpuset("2-5")),
                         Config("FromClaim", "[]", Cpuset("8-11"))}),
       {},
       kPrefix + "2 configs target request \"cpus\" (FromClaim config[0], config[2])"},
      {"TwoClassConfigsSameRequest",
       kFull,
       ClaimJson({Result("cpus/big", "4")}, {Config("FromClass", R"(["cpus/big"])", Cpuset("8-11")),
                                             Config("FromClass", R"(["cpus"])", Cpuset("8-11"))}),
       {},
       "claim default/c1 request \"cpus/big\": 2 configs target request \"cpus/big\" (FromClass "
       "config[0], config[1])"},
      {"NotAllocated",
       kFull,
       R"({"metadata": {"uid": "u1", "namespace": "default", "name": "c1"}})",
       {},
       "claim default/c1 is not allocated"},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, ResolveTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

TEST(ResolveCpuAssignmentsTest, FixturesAreWhatTheCasesAssume) {
  EXPECT_EQ(Load(kFull).online.ToString(), "0-15");
  EXPECT_EQ(Load(kOfflines).online.ToString(), "0-1,3-4,6,12,15");
  EXPECT_TRUE(Load(kOfflines).offline.Contains(7));
  EXPECT_TRUE(Load(kOfflines).offline.Contains(8));
  EXPECT_TRUE(Load(kOfflines).offline.Contains(9));
}

TEST(ResolveCpuAssignmentsTest, CapacityNameIsAParameter) {
  absl::StatusOr<Claim> claim = ParseClaim(json::parse(
      ClaimJson({R"({"request": "cpus", "driver": "dra.cpu", "pool": "node1", "device": "cpus-cpus",
           "consumedCapacity": {"example.com/cores": "2"}})"},
                {Config("FromClaim", "[]", Cpuset("4-5"))})));
  ASSERT_TRUE(claim.ok()) << claim.status();
  absl::StatusOr<std::vector<CpuAssignment>> got = ResolveCpuAssignments(
      *claim, kDriver, Load(kFull), TestNode(), TestPool(Load(kFull)), "example.com/cores");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].explicit_cpus, (CpuSet{4, 5}));
  EXPECT_EQ(ResolveCpuAssignments(*claim, kDriver, Load(kFull), TestNode(), TestPool(Load(kFull)))
                .status()
                .message(),
            kPrefix + "consumedCapacity dra.cpu/cpu is missing");
}

TEST(ResolveCpuAssignmentsTest, HolderLookupIsOptional) {
  absl::StatusOr<Claim> claim = ParseClaim(
      json::parse(ClaimJson({Result("cpus", "1")}, {Config("FromClaim", "[]", Cpuset("3"))})));
  ASSERT_TRUE(claim.ok()) << claim.status();
  NodeCpuState node;
  node.held_by_others = CpuSet{3};
  EXPECT_EQ(ResolveCpuAssignments(*claim, kDriver, Load(kFull), node, TestPool(Load(kFull)))
                .status()
                .message(),
            kPrefix + "cpuset \"3\": CPU 3 is already prepared for another claim");
}

TEST(ParseCpuConfigTest, AcceptsTheDraDriverCpuForm) {
  absl::StatusOr<CpuSet> cpus =
      ParseCpuConfig(json::parse(R"({"apiVersion":"v1alpha1","cpuConfig":{"cpuset":"2-11"}})"));
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_EQ(*cpus, CpuSet::Range(2, 11));
  EXPECT_EQ(ParseCpuConfig(json::array()).status().message(),
            "parameters: expected an object, got array");
}

}  // namespace
}  // namespace topodra::claims

namespace topodra::claims {
namespace {

// The device kinds of a published pool: 16em64t-4s2c2t has 4 sockets of 4 CPUs.
class PoolRulesTest : public ::testing::Test {
 protected:
  PoolRulesTest() {
    pool_.name = "node1";
    pool_.devices["cpudevsocket001"] = {CpuDeviceKind::kGroup, CpuSet::Range(4, 7)};
    pool_.devices["cpudevmachine"] = {CpuDeviceKind::kMachine, CpuSet::Range(2, 15)};
    pool_.devices["cpudev009"] = {CpuDeviceKind::kIndividual, CpuSet{9}};
    pool_.devices["cpudev003"] = {CpuDeviceKind::kIndividual, CpuSet{3}};
  }
  absl::StatusOr<std::vector<CpuAssignment>> Resolve(const std::string& result,
                                                     const std::vector<std::string>& configs) {
    absl::StatusOr<Claim> claim = ParseClaim(json::parse(ClaimJson({result}, configs)));
    EXPECT_TRUE(claim.ok()) << claim.status();
    claim_ = *claim;
    return ResolveCpuAssignments(claim_, kDriver, Load(kFull), TestNode(), pool_);
  }
  static std::string R(const std::string& pool, const std::string& device,
                       const std::string& capacity) {
    return R"({"request": "cpus", "driver": "dra.cpu", "pool": ")" + pool + R"(", "device": ")" +
           device + "\"" +
           (capacity.empty() ? ""
                             : R"(, "consumedCapacity": {"dra.cpu/cpu": ")" + capacity + "\"}") +
           "}";
  }
  CpuPool pool_;
  Claim claim_;
};

TEST_F(PoolRulesTest, GroupPicksLaterOrTakesACpusetInside) {
  absl::StatusOr<std::vector<CpuAssignment>> got = Resolve(R("node1", "cpudevsocket001", "2"), {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].count, 2);
  EXPECT_FALSE((*got)[0].explicit_cpus.has_value());
  EXPECT_EQ((*got)[0].device_cpus.ToString(), "4-7");
  got = Resolve(R("node1", "cpudevsocket001", "2"), {Config("FromClaim", "[]", Cpuset("5-6"))});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].explicit_cpus->ToString(), "5-6");
  EXPECT_EQ(Resolve(R("node1", "cpudevsocket001", "2"), {Config("FromClaim", "[]", Cpuset("7-8"))})
                .status()
                .message(),
            kConfig0.substr(0, kPrefix.size()) +
                "cpuset \"7-8\": CPU 8 is not in the allocated device \"cpudevsocket001\" (CPUs "
                "4-7)");
}

TEST_F(PoolRulesTest, MachineNeedsACpuset) {
  EXPECT_EQ(Resolve(R("node1", "cpudevmachine", "2"), {}).status().message(),
            kPrefix +
                "device \"cpudevmachine\" spans the whole machine: an opaque config "
                "{\"apiVersion\":\"v1alpha1\",\"cpuConfig\":{\"cpuset\":\"...\"}} naming the CPUs "
                "is required");
  absl::StatusOr<std::vector<CpuAssignment>> got =
      Resolve(R("node1", "cpudevmachine", "2"), {Config("FromClaim", "[]", Cpuset("10-11"))});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].explicit_cpus->ToString(), "10-11");
}

TEST_F(PoolRulesTest, IndividualIsTheNamedCpu) {
  absl::StatusOr<std::vector<CpuAssignment>> got = Resolve(R("node1", "cpudev009", ""), {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].count, 1);
  EXPECT_EQ((*got)[0].explicit_cpus->ToString(), "9");
  EXPECT_EQ(
      Resolve(R("node1", "cpudev003", ""), {}).status().message(),
      kPrefix + "device \"cpudev003\": CPU 3 is already prepared for claim other/c2 (uid u2)");
  EXPECT_EQ(Resolve(R("node1", "cpudev009", ""), {Config("FromClaim", "[]", Cpuset("9"))})
                .status()
                .message(),
            kPrefix +
                "config[0]: device \"cpudev009\" is one CPU (individual mode); a cpuset config is "
                "not accepted for it");
}

TEST_F(PoolRulesTest, ResultsMustNameThisNodesDevices) {
  EXPECT_EQ(Resolve(R("node2", "cpudev009", ""), {}).status().message(),
            kPrefix + "pool \"node2\" is not this node's pool \"node1\"");
  EXPECT_EQ(Resolve(R("node1", "cpudev999", ""), {}).status().message(),
            kPrefix + "device \"cpudev999\" is not a CPU device of this node");
}

}  // namespace
}  // namespace topodra::claims

// ---- numaMemory: the memory nodes of a claim's containers (--numa-memory=claim)

namespace topodra::claims {
namespace {

// 4 nodes with CPUs (0-3) and 4 CPU-less MCDRAM nodes (4-7), 1 GiB each.
constexpr char kKnl[] = "64intel64-fakeKNL-SNC4-hybrid.xml";

struct NumaCase {
  std::string name;
  std::string json;   // the numaMemory value
  std::string error;  // the whole message; empty: accepted
  NumaMemory want{};  // when accepted
};

void PrintTo(const NumaCase& c, std::ostream* os) { *os << c.name << ": " << c.json; }

class NumaMemoryParseTest : public ::testing::TestWithParam<NumaCase> {};

TEST_P(NumaMemoryParseTest, Parses) {
  const NumaCase& c = GetParam();
  absl::StatusOr<NumaMemory> got = ParseNumaMemory(json::parse(c.json));
  if (!c.error.empty()) {
    ASSERT_FALSE(got.ok()) << "accepted";
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(), c.error);
    return;
  }
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->local, c.want.local);
  EXPECT_EQ(got->all, c.want.all);
  EXPECT_EQ(got->nodes, c.want.nodes);
}

const std::string kBadNodes =
    " is not \"local\", \"all\" or a list of NUMA node ids such as \"2\" or \"2-3\"";

INSTANTIATE_TEST_SUITE_P(
    Cases, NumaMemoryParseTest,
    ::testing::ValuesIn(std::vector<NumaCase>{
        {"LocalString", R"("local")", "", {.local = true, .all = false, .nodes = {}}},
        {"LocalList", R"(["local"])", "", {.local = true, .all = false, .nodes = {}}},
        {"LocalAndHbm", R"(["local", "4-5"])", "", {.local = true, .all = false, .nodes = {4, 5}}},
        {"HbmOnly", R"(["4", "6-7"])", "", {.local = false, .all = false, .nodes = {4, 6, 7}}},
        {"NodeListString", R"("0,2")", "", {.local = false, .all = false, .nodes = {0, 2}}},
        {"All", R"("all")", "", {.local = false, .all = true, .nodes = {}}},
        {"AllList", R"(["all"])", "", {.local = false, .all = true, .nodes = {}}},
        {"LargestNode", R"("1023")", "", {.local = false, .all = false, .nodes = {1023}}},
        {"EmptyList", "[]", "cpuConfig.numaMemory is empty", {}},
        {"EmptyString", R"("")", "cpuConfig.numaMemory is empty", {}},
        {"EmptyEntry", R"(["local", ""])", "cpuConfig.numaMemory[1] is empty", {}},
        {"NumberEntry",
         R"(["local", 2])",
         "cpuConfig.numaMemory[1]: expected a string, got number",
         {}},
        {"ListInList", R"([["2"]])", "cpuConfig.numaMemory[0]: expected a string, got array", {}},
        {"UnknownWord", R"("remote")", "cpuConfig.numaMemory: \"remote\"" + kBadNodes, {}},
        {"UnknownWordInList",
         R"(["local", "Local"])",
         "cpuConfig.numaMemory[1]: \"Local\"" + kBadNodes,
         {}},
        {"Spaces", R"(["2, 3"])", "cpuConfig.numaMemory[0]: \"2, 3\"" + kBadNodes, {}},
        {"Negative", R"(["-1"])", "cpuConfig.numaMemory[0]: \"-1\"" + kBadNodes, {}},
        {"Backwards", R"(["3-2"])", "cpuConfig.numaMemory[0]: \"3-2\"" + kBadNodes, {}},
        {"Newline", R"(["2\n"])", "cpuConfig.numaMemory[0]: \"2\n\"" + kBadNodes, {}},
        {"TooLarge",
         R"(["1000-1024"])",
         "cpuConfig.numaMemory[0]: NUMA node 1024 in \"1000-1024\" is above 1023, the largest "
         "Linux has",
         {}},
        {"LocalTwice",
         R"(["local", "2", "local"])",
         "cpuConfig.numaMemory[2]: \"local\" is named twice",
         {}},
        {"NodeTwice",
         R"(["2-4", "4"])",
         "cpuConfig.numaMemory[1]: NUMA node 4 in \"4\" is named twice",
         {}},
        {"AllTwice", R"(["all", "all"])", "cpuConfig.numaMemory[1]: \"all\" is named twice", {}},
        {"AllWithLocal",
         R"(["all", "local"])",
         "cpuConfig.numaMemory: \"all\" cannot be combined with other entries "
         "(\"[\"all\",\"local\"]\")",
         {}},
        {"AllWithNodes",
         R"(["4", "all"])",
         "cpuConfig.numaMemory: \"all\" cannot be combined with other entries "
         "(\"[\"4\",\"all\"]\")",
         {}},
    }),
    [](const ::testing::TestParamInfo<NumaCase>& info) { return info.param.name; });

// The non-string, non-list values: the message names the JSON type.
TEST(NumaMemoryParseTypesTest, NamesTheType) {
  for (const auto& [text, type] :
       std::vector<std::pair<std::string, std::string>>{{"2", "number"},
                                                        {R"({"local": true})", "object"},
                                                        {"null", "null"},
                                                        {"true", "boolean"}}) {
    EXPECT_EQ(ParseNumaMemory(json::parse(text)).status().message(),
              "cpuConfig.numaMemory: expected a string or a list of strings, got " + type)
        << text;
  }
  json many = json::array();
  for (int i = 0; i <= static_cast<int>(kMaxNumaMemoryEntries); ++i)
    many.push_back(std::to_string(i));
  EXPECT_EQ(ParseNumaMemory(many).status().message(),
            "cpuConfig.numaMemory has 65 entries (at most 64)");
}

TEST(ParseCpuConfigParametersTest, NumaMemoryBesideOrInsteadOfTheCpuset) {
  absl::StatusOr<CpuConfig> both = ParseCpuConfigParameters(json::parse(
      R"({"apiVersion":"v1alpha1","cpuConfig":{"cpuset":"4-7","numaMemory":["local","4"]}})"));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->cpuset, CpuSet::Range(4, 7));
  ASSERT_TRUE(both->numa_memory.has_value());
  EXPECT_EQ(both->numa_memory->nodes, CpuSet{4});
  absl::StatusOr<CpuConfig> alone = ParseCpuConfigParameters(
      json::parse(R"({"apiVersion":"v1alpha1","cpuConfig":{"numaMemory":"all"}})"));
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_FALSE(alone->cpuset.has_value());
  EXPECT_TRUE(alone->numa_memory->all);
  // A config that must name CPUs still needs its cpuset.
  EXPECT_EQ(
      ParseCpuConfig(json::parse(R"({"apiVersion":"v1alpha1","cpuConfig":{"numaMemory":"all"}})"))
          .status()
          .message(),
      "cpuConfig.cpuset is missing");
  // The field's errors come through, and its name is exact.
  EXPECT_EQ(ParseCpuConfigParameters(
                json::parse(R"({"apiVersion":"v1alpha1","cpuConfig":{"numaMemory":["near"]}})"))
                .status()
                .message(),
            "cpuConfig.numaMemory[0]: \"near\"" + kBadNodes);
  EXPECT_EQ(ParseCpuConfigParameters(
                json::parse(R"({"apiVersion":"v1alpha1","cpuConfig":{"numamemory":"local"}})"))
                .status()
                .message(),
            "unknown field \"cpuConfig.numamemory\"");
}

TEST(MemoryNodesTest, LocalNamedAndAllOnFixtures) {
  const topology::Topology& knl = Load(kKnl);
  auto nodes = [&](NumaMemory m, CpuSet cpus) {
    absl::StatusOr<CpuSet> got = MemoryNodes(m, cpus, knl);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->ToString() : std::string("error");
  };
  const NumaMemory local;
  // CPUs 0-1 are on node 0, 4 on node 1, 12 on node 3.
  EXPECT_EQ(nodes(local, CpuSet{0, 1}), "0");
  EXPECT_EQ(nodes(local, CpuSet{0, 4, 12}), "0-1,3");
  EXPECT_EQ(nodes(local, CpuSet{}), "");
  EXPECT_EQ(nodes({.local = true, .all = false, .nodes = {5}}, CpuSet{4}), "1,5");
  EXPECT_EQ(nodes({.local = false, .all = false, .nodes = {4, 5}}, CpuSet{4}), "4-5");
  EXPECT_EQ(nodes({.local = false, .all = true, .nodes = {}}, CpuSet{4}), "0-7");
  // A node the machine lacks is named, with the machine's nodes.
  EXPECT_EQ(MemoryNodes({.local = true, .all = false, .nodes = {8, 9}}, CpuSet{4}, knl)
                .status()
                .message(),
            "numaMemory: NUMA nodes 8-9 are not on this node (its NUMA nodes: 0-7)");
  // One node, no memory size in the export: "all" is every node.
  EXPECT_EQ(
      MemoryNodes({.local = false, .all = true, .nodes = {}}, CpuSet{}, Load(kFull))->ToString(),
      "0");
  EXPECT_EQ(MemoryNodes({.local = false, .all = false, .nodes = {1}}, CpuSet{}, Load(kFull))
                .status()
                .message(),
            "numaMemory: NUMA node 1 is not on this node (its NUMA nodes: 0)");
}

TEST(MemoryNodesTest, ACpuNodeWithoutMemoryIsNeverNamed) {
  // Linux can have NUMA nodes with CPUs and no memory; they are never in the root cpuset's mems,
  // so naming one would make the hook refuse the container.
  topology::Topology t = Load(kKnl);
  for (topology::NumaNode& n : t.numa_nodes) {
    if (n.id == 1) n.memory_bytes = 0;
  }
  ASSERT_GT(t.numa_nodes[0].memory_bytes, 0u);
  EXPECT_EQ(MemoryNodes(NumaMemory{}, CpuSet{0, 4}, t)->ToString(), "0");
  EXPECT_EQ(MemoryNodes(NumaMemory{}, CpuSet{4}, t)->ToString(), "");
  EXPECT_EQ(MemoryNodes({.local = true, .all = false, .nodes = {5}}, CpuSet{4}, t)->ToString(),
            "5");
}

// numaMemory through ResolveCpuAssignments: accepted alone on groups and individual CPUs,
// checked against the topology, and never a substitute for the machine device's cpuset.
TEST_F(PoolRulesTest, NumaMemoryConfigs) {
  auto numa = [](const std::string& value) {
    return R"({"apiVersion": "v1alpha1", "cpuConfig": {"numaMemory": )" + value + "}}";
  };
  absl::StatusOr<std::vector<CpuAssignment>> got = Resolve(
      R("node1", "cpudevsocket001", "2"), {Config("FromClaim", "[]", numa(R"(["local", "0"])"))});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE((*got)[0].explicit_cpus.has_value());
  ASSERT_TRUE((*got)[0].numa_memory.has_value());
  EXPECT_TRUE((*got)[0].numa_memory->local);
  EXPECT_EQ((*got)[0].numa_memory->nodes, CpuSet{0});
  // Without a config: no policy (local).
  got = Resolve(R("node1", "cpudevsocket001", "2"), {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE((*got)[0].numa_memory.has_value());
  // An individual CPU takes a numaMemory config, not a cpuset.
  got = Resolve(R("node1", "cpudev009", ""), {Config("FromClaim", "[]", numa(R"("all")"))});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].explicit_cpus->ToString(), "9");
  EXPECT_TRUE((*got)[0].numa_memory->all);
  // The machine device still needs its CPUs named.
  EXPECT_THAT(
      Resolve(R("node1", "cpudevmachine", "2"), {Config("FromClaim", "[]", numa(R"("local")"))})
          .status()
          .message(),
      ::testing::HasSubstr("spans the whole machine"));
  // A node this machine lacks (16em64t-4s2c2t has node 0 only).
  EXPECT_EQ(Resolve(R("node1", "cpudevsocket001", "2"), {Config("FromClaim", "[]", numa(R"("3")"))})
                .status()
                .message(),
            kPrefix +
                "config[0] (FromClaim): numaMemory: NUMA node 3 is not on this node (its NUMA "
                "nodes: 0)");
  // Invalid values are quoted.
  EXPECT_EQ(Resolve(R("node1", "cpudevsocket001", "2"), {Config("FromClaim", "[]", numa(R"("x")"))})
                .status()
                .message(),
            kPrefix + "config[0] (FromClaim): cpuConfig.numaMemory: \"x\"" + kBadNodes);
}

}  // namespace
}  // namespace topodra::claims
