// PlanClaim on the shared machine exports: which CPUs and GPUs a claim gets, what the kubelet is
// told and the CDI spec that goes with it. Claims are inline JSON, one table per driver kind.
#include "driver/prepare/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test/prepare/prepare_testing.h"

namespace topodra::prepare {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace topodra::prepare::testing;  // NOLINT: test helpers

// Starts with a digit, has dashes: a real Kubernetes UID.
constexpr char kUid[] = "0f9c2b7e-1a2b-4c3d-8e9f-0123456789ab";

json C(const std::vector<json>& results, const std::vector<json>& configs = {}) {
  return ClaimJson(kUid, "default", "c1", results, configs);
}

json Shared(json result, const std::string& share_id) {
  result["shareID"] = share_id;
  return result;
}

json Admin(json result) {
  result["adminAccess"] = true;
  return result;
}

state::State StateOf(const std::vector<state::Allocation>& held) {
  state::State s;
  for (const state::Allocation& a : held) {
    absl::Status st = s.Add(a);
    EXPECT_TRUE(st.ok()) << st;
  }
  return s;
}

// `name`=`value` and, when `name` has a '-', the same with '_' for '-' (what a shell keeps).
std::vector<std::string> CpusetEnv(const std::string& name, const std::string& value) {
  std::vector<std::string> out = {name + "=" + value};
  std::string safe = name;
  std::replace(safe.begin(), safe.end(), '-', '_');
  if (safe != name) out.push_back(safe + "=" + value);
  return out;
}

// The checks every successful plan must pass, whatever the driver: the allocation, the answer and
// the CDI spec agree with each other.
void CheckCommon(const Plan& plan, const claims::Claim& claim, const DriverSetup& setup) {
  const state::Allocation& a = plan.allocation;
  EXPECT_EQ(a.kind, state::AllocationKind::kDraClaim);
  EXPECT_EQ(a.owner, state::DraOwner(setup.driver, claim.uid));
  EXPECT_EQ(a.driver, setup.driver);
  EXPECT_EQ(a.claim_namespace, claim.namespace_name);
  EXPECT_EQ(a.claim_name, claim.name);
  EXPECT_EQ(a.phase, state::Phase::kPreparing);
  EXPECT_EQ(a.answer, DevicesToJson(plan.devices));
  absl::StatusOr<std::vector<PreparedDevice>> back = DevicesFromJson(a.answer);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, plan.devices);
  if (plan.devices.empty()) {
    EXPECT_EQ(plan.cdi_file, "");
    EXPECT_TRUE(plan.cdi_spec.devices.empty());
    EXPECT_TRUE(a.cdi.is_null()) << a.cdi.dump();
    return;
  }
  EXPECT_EQ(plan.cdi_file, setup.driver + "-claim_" + claim.uid + ".json");
  EXPECT_EQ(plan.cdi_file, CdiFileName(setup.driver, claim.uid));
  EXPECT_TRUE(IsCdiFileOf(setup.driver, plan.cdi_file));
  EXPECT_EQ(plan.cdi_spec.kind, setup.driver + "/claim");
  EXPECT_EQ(plan.cdi_spec.cdi_version, cdi::MinimumVersion(plan.cdi_spec));
  EXPECT_TRUE(cdi::Validate(plan.cdi_spec).ok()) << cdi::Validate(plan.cdi_spec);
  EXPECT_EQ(a.cdi, (json{{"file", plan.cdi_file}, {"spec", cdi::ToJson(plan.cdi_spec)}}));
  ASSERT_EQ(plan.cdi_spec.devices.size(), plan.devices.size());
  std::set<std::string> names;
  for (size_t i = 0; i < plan.devices.size(); ++i) {
    const cdi::Device& d = plan.cdi_spec.devices[i];
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate CDI device " << d.name;
    EXPECT_THAT(d.name, StartsWith(claim.uid + "-" + plan.devices[i].device)) << i;
    EXPECT_EQ(plan.devices[i].cdi_device_ids,
              std::vector<std::string>{setup.driver + "/claim=" + d.name})
        << i;
    EXPECT_EQ(plan.devices[i].pool, kNode) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// CPU claims.

// One device of the answer, in claim order.
struct WantDevice {
  std::string request;  // the base request the kubelet is told
  std::string device;
  int count = 0;
  std::string cpus;  // the CPUs a config or the device names; "" when the driver picks them
  std::string share_id;
};

struct CpuCase {
  std::string name;
  std::string topology;
  Mode mode = Mode::kNuma;
  std::string reserved;
  std::vector<state::Allocation> held;
  json claim;
  std::vector<WantDevice> want;
  std::string want_cpus;  // allocation.cpus exactly, when the choice is forced
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string error;  // a substring of the message
  bool whole_cores = true;
};

void PrintTo(const CpuCase& c, std::ostream* os) { *os << c.name; }

class PlanCpuTest : public ::testing::TestWithParam<CpuCase> {};

TEST_P(PlanCpuTest, Plans) {
  const CpuCase& c = GetParam();
  const topology::Topology& topo = Load(c.topology);
  const CpuSet reserved = Cpus(c.reserved);
  const DriverSetup setup = CpuSetup(topo, c.mode, reserved);
  const claims::Claim claim = Parse(c.claim);
  const state::State held = StateOf(c.held);
  absl::StatusOr<Plan> plan = PlanClaim(claim, setup, topo, held);
  if (c.code != absl::StatusCode::kOk) {
    ASSERT_FALSE(plan.ok()) << "accepted: " << plan->allocation.cpus.ToString();
    EXPECT_EQ(plan.status().code(), c.code) << plan.status();
    EXPECT_THAT(std::string(plan.status().message()), StartsWith("claim default/c1"));
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr(c.error));
    return;
  }
  ASSERT_TRUE(plan.ok()) << plan.status();
  CheckCommon(*plan, claim, setup);
  ASSERT_EQ(plan->devices.size(), c.want.size());
  if (c.want.empty()) {
    EXPECT_TRUE(plan->allocation.cpus.Empty()) << plan->allocation.cpus.ToString();
    return;
  }
  EXPECT_EQ(plan->cdi_spec.container_edits.env,
            CpusetEnv("DRA_CPUSET_" + claim.uid, plan->allocation.cpus.ToString()));

  std::map<std::string, std::vector<size_t>> by_request;
  for (size_t i = 0; i < c.want.size(); ++i) {
    const WantDevice& w = c.want[i];
    const PreparedDevice& d = plan->devices[i];
    EXPECT_EQ(d.request_names, std::vector<std::string>{w.request}) << i;
    EXPECT_EQ(d.device, w.device) << i;
    if (w.share_id.empty()) {
      EXPECT_FALSE(d.share_id.has_value()) << i;
    } else {
      EXPECT_EQ(d.share_id, w.share_id) << i;
    }
    EXPECT_EQ(plan->cdi_spec.devices[i].container_edits.env.size(),
              CpusetEnv("DRA_CPUSET_" + claim.uid + "_" + w.request, "").size())
        << i;
    by_request[w.request].push_back(i);
  }

  CpuSet all;
  CpuSet not_free = reserved;
  for (const state::Allocation& h : c.held) {
    if (h.owner != plan->allocation.owner) not_free |= h.cpus;
  }
  for (const auto& [request, indexes] : by_request) {
    const std::string var = "DRA_CPUSET_" + claim.uid + "_" + request;
    const CpuSet got = Cpus(EnvValue(plan->cdi_spec.devices[indexes[0]].container_edits.env, var));
    int count = 0;
    CpuSet devices;
    CpuSet named;
    bool all_named = true;
    for (size_t i : indexes) {
      const WantDevice& w = c.want[i];
      // Every device of a request carries the request's CPUs.
      EXPECT_EQ(EnvValue(plan->cdi_spec.devices[i].container_edits.env, var), got.ToString()) << i;
      count += w.count;
      ASSERT_TRUE(setup.cpu_pool.devices.contains(w.device)) << w.device;
      const CpuSet device_cpus = setup.cpu_pool.devices.at(w.device).cpus;
      devices |= device_cpus;
      EXPECT_GE((got & device_cpus).Size(), w.count) << i << ": " << got.ToString();
      if (w.cpus.empty()) {
        all_named = false;
      } else {
        named |= Cpus(w.cpus);
      }
    }
    EXPECT_EQ(got.Size(), count) << request << ": " << got.ToString();
    EXPECT_TRUE(got.IsSubsetOf(devices)) << request << ": " << got.ToString();
    EXPECT_TRUE(named.IsSubsetOf(got)) << request << ": " << got.ToString();
    if (all_named) {
      EXPECT_EQ(got.ToString(), named.ToString()) << request;
    }
    const CpuSet picked = got - named;
    EXPECT_FALSE(picked.Intersects(not_free)) << request << ": " << picked.ToString();
    if (c.whole_cores && picked.Size() % 2 == 0) {
      for (int cpu : picked) {
        EXPECT_TRUE(topo.SmtSiblings(cpu).IsSubsetOf(picked))
            << request << ": CPU " << cpu << " without its sibling in " << picked.ToString();
      }
    }
    EXPECT_FALSE(all.Intersects(got)) << request << " overlaps another request: " << got.ToString();
    all |= got;
  }
  EXPECT_EQ(plan->allocation.cpus, all) << plan->allocation.cpus.ToString();
  if (!c.want_cpus.empty()) {
    EXPECT_EQ(plan->allocation.cpus.ToString(), c.want_cpus);
  }
  EXPECT_TRUE(plan->allocation.gpus.empty());

  // Pure: the same input plans the same way.
  absl::StatusOr<Plan> again = PlanClaim(claim, setup, topo, held);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->allocation, plan->allocation);
  EXPECT_EQ(again->cdi_spec, plan->cdi_spec);
}

const std::string kNuma3 = "cpudevnuma003";  // k192: CPUs 24-31,216-223

state::Allocation Other(const std::string& cpus) {
  return HeldBy(kCpuDriver, "u2", "other", "c2", Cpus(cpus));
}

state::Allocation DevicePlugin(const std::string& cpus) {
  state::Allocation a;
  a.kind = state::AllocationKind::kDevicePlugin;
  a.owner = "topodra.io/cpu/0123456789abcdef";
  a.cpus = Cpus(cpus);
  a.phase = state::Phase::kPrepared;
  return a;
}

std::vector<CpuCase> CpuCases() {
  using S = absl::StatusCode;
  return {
      // Grouped: the driver picks inside the named device.
      {.name = "NumaPicksWholeCoresInsideTheDevice",
       .topology = k192,
       .claim = C({Result("cpus", kNuma3, "4")}),
       .want = {{"cpus", kNuma3, 4}}},
      {.name = "NumaAvoidsCpusHeldByOthers",
       .topology = k192,
       .held = {Other("24-29,216-221")},
       .claim = C({Result("cpus", kNuma3, "4")}),
       .want = {{"cpus", kNuma3, 4}},
       .want_cpus = "30-31,222-223"},
      {.name = "NumaTakesTheLeftoverSiblingOfAHeldCore",
       .topology = k192,
       .held = {Other("24")},
       .claim = C({Result("cpus", kNuma3, "1")}),
       .want = {{"cpus", kNuma3, 1}},
       .want_cpus = "216"},
      {.name = "NumaMilliCapacity",
       .topology = k192,
       .claim = C({Result("cpus", kNuma3, "2000m")}),
       .want = {{"cpus", kNuma3, 2}}},
      {.name = "NumaExhausted",
       .topology = k192,
       .held = {Other("24-31,216-221")},
       .claim = C({Result("cpus", kNuma3, "4")}),
       .code = S::kResourceExhausted,
       .error = "claim default/c1 request \"cpus\": 4 CPUs wanted from device \"cpudevnuma003\" "
                "but only 2 are free there (222-223)"},
      {.name = "NumaNothingFree",
       .topology = k192,
       .held = {Other("24-31,216-223")},
       .claim = C({Result("cpus", kNuma3, "1")}),
       .code = S::kResourceExhausted,
       .error = "1 CPUs wanted from device \"cpudevnuma003\" but only 0 are free there (none)"},
      {.name = "ReservedCpusAreNotPicked",
       .topology = k192,
       .reserved = "24-25,216-217",
       .claim = C({Result("cpus", kNuma3, "12")}),
       .want = {{"cpus", kNuma3, 12}},
       .want_cpus = "26-31,218-223"},
      {.name = "ReservedCpusDoNotCountAsFree",
       .topology = k192,
       .reserved = "24-25,216-217",
       .claim = C({Result("cpus", kNuma3, "13")}),
       .code = S::kResourceExhausted,
       .error = "13 CPUs wanted from device \"cpudevnuma003\" but only 12 are free there "
                "(26-31,218-223)"},
      {.name = "NumaExplicitCpusetInsideTheDevice",
       .topology = k192,
       .claim = C({Result("cpus", kNuma3, "2")}, {Config({"cpus"}, Cpuset("26-27"))}),
       .want = {{"cpus", kNuma3, 2, "26-27"}},
       .want_cpus = "26-27"},
      {.name = "NumaExplicitCpusetOutsideTheDevice",
       .topology = k192,
       .claim = C({Result("cpus", kNuma3, "2")}, {Config({"cpus"}, Cpuset("32-33"))}),
       .code = S::kInvalidArgument,
       .error = "CPUs 32-33 are not in the allocated device \"cpudevnuma003\""},
      {.name = "SocketPicksAWholeCore",
       .topology = k16,
       .mode = Mode::kSocket,
       .claim = C({Result("cpus", "cpudevsocket001", "2")}),  // CPUs 1,5,9,13
       .want = {{"cpus", "cpudevsocket001", 2}}},
      {.name = "SocketWholeSocket",
       .topology = k16,
       .mode = Mode::kSocket,
       .claim = C({Result("cpus", "cpudevsocket002", "4")}),
       .want = {{"cpus", "cpudevsocket002", 4}},
       .want_cpus = "2,6,10,14"},

      // Individual: the device is the CPU.
      {.name = "IndividualNamedCpus",
       .topology = k16,
       .mode = Mode::kIndividual,
       // Devices are numbered with SMT siblings adjacent: cpudev001 is CPU 8, cpudev002 CPU 4.
       .claim = C({Result("a", "cpudev001"), Result("b", "cpudev002")}),
       .want = {{"a", "cpudev001", 1, "8"}, {"b", "cpudev002", 1, "4"}},
       .want_cpus = "4,8"},
      {.name = "IndividualHeldByAnotherClaim",
       .topology = k16,
       .mode = Mode::kIndividual,
       .held = {Other("8")},
       .claim = C({Result("a", "cpudev001")}),
       .code = S::kInvalidArgument,
       .error = "device \"cpudev001\": CPU 8 is already prepared for claim other/c2 (uid u2)"},
      {.name = "IndividualReservedCpuIsNotADevice",
       .topology = k16,
       .mode = Mode::kIndividual,
       .reserved = "0,8",
       .claim = C({Result("a", "cpudev001")}),
       .code = S::kInvalidArgument,
       .error = "device \"cpudev001\" is not a CPU device of this node"},

      // Machine: the claim must name its CPUs.
      {.name = "MachineWithoutCpusetRejected",
       .topology = k16,
       .mode = Mode::kMachine,
       .claim = C({Result("cpus", "cpudevmachine", "2")}),
       .code = S::kInvalidArgument,
       .error = "device \"cpudevmachine\" spans the whole machine"},
      {.name = "MachineCpusetExactly",
       .topology = k16,
       .mode = Mode::kMachine,
       .claim = C({Result("cpus", "cpudevmachine", "3")}, {Config({"cpus"}, Cpuset("3,5-6"))}),
       .want = {{"cpus", "cpudevmachine", 3, "3,5-6"}},
       .want_cpus = "3,5-6"},
      {.name = "MachineCpusetHeldByAnotherClaim",
       .topology = k16,
       .mode = Mode::kMachine,
       .held = {Other("5-6")},
       .claim = C({Result("cpus", "cpudevmachine", "3")}, {Config({"cpus"}, Cpuset("3,5-6"))}),
       .code = S::kInvalidArgument,
       .error = "cpuset \"3,5-6\": CPUs 5-6 are already prepared for claim other/c2 (uid u2)"},
      {.name = "MachineCpusetReserved",
       .topology = k16,
       .mode = Mode::kMachine,
       .reserved = "0-1",
       .claim = C({Result("cpus", "cpudevmachine", "2")}, {Config({}, Cpuset("0-1"))}),
       .code = S::kInvalidArgument,
       .error = "CPUs 0-1 are reserved (--reserved-cpus)"},

      // Several results in one claim.
      {.name = "TwoRequestsOneGroupDisjoint",
       .topology = k192,
       .claim = C({Result("a", kNuma3, "4"), Result("b", kNuma3, "6")}),
       .want = {{"a", kNuma3, 4}, {"b", kNuma3, 6}}},
      {.name = "TwoRequestsFillTheGroup",
       .topology = k192,
       .claim = C({Result("a", kNuma3, "6"), Result("b", kNuma3, "10")}),
       .want = {{"a", kNuma3, 6}, {"b", kNuma3, 10}},
       .want_cpus = "24-31,216-223"},
      {.name = "TwoRequestsOverfillTheGroup",
       .topology = k192,
       .claim = C({Result("a", kNuma3, "10"), Result("b", kNuma3, "8")}),
       .code = S::kResourceExhausted,
       .error = "request \"b\": 8 CPUs wanted from device \"cpudevnuma003\" but only 6 are free"},
      {.name = "PickedAvoidsALaterExplicitCpuset",
       .topology = k192,
       // Without b, a would get the lowest core, 24+216.
       .claim = C({Result("a", kNuma3, "2"), Result("b", kNuma3, "2")},
                  {Config({"b"}, Cpuset("24,216"))}),
       .want = {{"a", kNuma3, 2}, {"b", kNuma3, 2, "24,216"}}},
      {.name = "PickedExhaustedByTheClaimsOwnExplicitCpus",
       .topology = k192,
       .claim = C({Result("a", kNuma3, "4"), Result("b", kNuma3, "14")},
                  {Config({"b"}, Cpuset("24-31,216-221"))}),
       .code = S::kResourceExhausted,
       .error = "request \"a\": 4 CPUs wanted from device \"cpudevnuma003\" but only 2 are free "
                "there (222-223)"},
      {.name = "TwoGroups",
       .topology = k192,
       .claim = C({Result("a", kNuma3, "2"), Result("b", "cpudevnuma017", "2")}),
       .want = {{"a", kNuma3, 2}, {"b", "cpudevnuma017", 2}}},
      {.name = "OneRequestTwoResultsShareTheVariable",
       .topology = k192,
       .claim = C({Result("a", kNuma3, "2"), Result("a", "cpudevnuma004", "2")}),
       .want = {{"a", kNuma3, 2}, {"a", "cpudevnuma004", 2}}},
      {.name = "TwoSharesOfOneDevice",
       .topology = k192,
       .claim = C({Shared(Result("a", kNuma3, "2"), "s1"), Shared(Result("b", kNuma3, "2"), "s2")}),
       .want = {{"a", kNuma3, 2, "", "s1"}, {"b", kNuma3, 2, "", "s2"}}},
      {.name = "PrioritizedListUsesTheBaseRequest",
       .topology = k192,
       .claim = C({Result("big/large", kNuma3, "2")}, {Config({"big"}, Cpuset("30,222"))}),
       .want = {{"big", kNuma3, 2, "30,222"}},
       .want_cpus = "30,222"},

      // Other drivers, other owners.
      {.name = "OtherDriversResultsAndConfigsIgnored",
       .topology = k192,
       .claim =
           C({Result("gpu", "gpu-0000-34-00-0", "", kGpuDriver), Result("cpus", kNuma3, "2"),
              Result("nic", "eth0", "", "net.example.com", "elsewhere")},
             {Config({}, json{{"anything", {"goes"}}}, kGpuDriver),
              Config({"cpus"}, json{{"kind", "NotACpuConfig"}}, "other.example.com", "FromClass")}),
       .want = {{"cpus", kNuma3, 2}}},
      {.name = "OnlyOtherDriversResults",
       .topology = k192,
       .claim = C({Result("gpu", "gpu-0000-34-00-0", "", kGpuDriver)}),
       .want = {}},
      {.name = "NoResultsAtAll", .topology = k192, .claim = C({}), .want = {}},
      {.name = "NotAllocated",
       .topology = k192,
       .claim = PendingClaimJson(kUid, "default", "c1"),
       .code = S::kInvalidArgument,
       .error = "claim default/c1 is not allocated"},
      {.name = "PoolOfAnotherNode",
       .topology = k192,
       .claim = C({Result("cpus", kNuma3, "2", kCpuDriver, "node2")}),
       .code = S::kInvalidArgument,
       .error = "pool \"node2\" is not this node's pool \"node1\""},
      {.name = "OwnEarlierAllocationIsNotHeldByOthers",
       .topology = k192,
       .held = {HeldBy(kCpuDriver, kUid, "default", "c1", Cpus("24-25,216-217"))},
       .claim = C({Result("cpus", kNuma3, "2")}, {Config({}, Cpuset("24,216"))}),
       .want = {{"cpus", kNuma3, 2, "24,216"}},
       .want_cpus = "24,216"},
      {.name = "DevicePluginCpusAreNotPicked",
       .topology = k192,
       .held = {DevicePlugin("24-31,216-219")},
       .claim = C({Result("cpus", kNuma3, "4")}),
       .want = {{"cpus", kNuma3, 4}},
       .want_cpus = "220-223",
       .whole_cores = false},  // their siblings are the plugin's
      {.name = "DevicePluginCpusNameTheAllocation",
       .topology = k192,
       .held = {DevicePlugin("24-25")},
       .claim = C({Result("cpus", kNuma3, "2")}, {Config({}, Cpuset("25-26"))}),
       .code = S::kInvalidArgument,
       .error = "cpuset \"25-26\": CPU 25 is already prepared for device-plugin allocation "
                "topodra.io/cpu/0123456789abcdef"},
      {.name = "SameClaimOfAnotherDriverIsAnotherOwner",
       .topology = k192,
       .held = {HeldBy(kGpuDriver, kUid, "default", "c1", Cpus("24"))},
       .claim = C({Result("cpus", kNuma3, "2")}, {Config({}, Cpuset("24,216"))}),
       .code = S::kInvalidArgument,
       .error = std::string("CPU 24 is already prepared for claim default/c1 (uid ") + kUid + ")"},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, PlanCpuTest, ::testing::ValuesIn(CpuCases()),
                         [](const ::testing::TestParamInfo<CpuCase>& info) {
                           return info.param.name;
                         });

TEST(PlanClaimTest, FixturesAreWhatTheCasesAssume) {
  EXPECT_EQ(Load(k16).online.ToString(), "0-15");
  EXPECT_EQ(Load(k16).SmtSiblings(1).ToString(), "1,9");
  const DriverSetup individual = CpuSetup(Load(k16), Mode::kIndividual);
  EXPECT_EQ(individual.cpu_pool.devices.at("cpudev001").cpus.ToString(), "8");
  EXPECT_EQ(individual.cpu_pool.devices.at("cpudev002").cpus.ToString(), "4");
  EXPECT_EQ(individual.cpu_pool.devices.at("cpudev001").kind, claims::CpuDeviceKind::kIndividual);
  const DriverSetup socket = CpuSetup(Load(k16), Mode::kSocket);
  EXPECT_EQ(socket.cpu_pool.devices.at("cpudevsocket001").cpus.ToString(), "1,5,9,13");
  EXPECT_EQ(socket.cpu_pool.devices.at("cpudevsocket001").kind, claims::CpuDeviceKind::kGroup);
  const DriverSetup machine = CpuSetup(Load(k16), Mode::kMachine);
  EXPECT_EQ(machine.cpu_pool.devices.at("cpudevmachine").cpus.ToString(), "0-15");
  EXPECT_EQ(machine.cpu_pool.devices.at("cpudevmachine").kind, claims::CpuDeviceKind::kMachine);
  const DriverSetup numa = CpuSetup(Load(k192), Mode::kNuma);
  EXPECT_EQ(numa.cpu_pool.devices.size(), 24u);
  EXPECT_EQ(numa.cpu_pool.devices.at(kNuma3).cpus.ToString(), "24-31,216-223");
  EXPECT_EQ(numa.cpu_pool.devices.at("cpudevnuma017").cpus.ToString(), "136-143,328-335");
  EXPECT_TRUE(Load(k16).gpus.empty());
  EXPECT_EQ(GpuSetup(Load(kDgx)).gpus.size(), 16u);
  EXPECT_TRUE(GpuSetup(Load(k192)).gpus.empty());  // its one display controller is a BMC's
}

TEST(PlanClaimTest, SecondClaimOnTheSameDeviceGetsOtherCpus) {
  const topology::Topology& topo = Load(k192);
  const DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  state::State held;
  CpuSet taken;
  for (const char* uid : {"uid-1", "uid-2", "uid-3"}) {
    SCOPED_TRACE(uid);
    const claims::Claim claim =
        Parse(ClaimJson(uid, "default", std::string("c-") + uid, {Result("cpus", kNuma3, "4")}));
    absl::StatusOr<Plan> plan = PlanClaim(claim, setup, topo, held);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->allocation.cpus.Size(), 4);
    EXPECT_TRUE(plan->allocation.cpus.IsSubsetOf(setup.cpu_pool.devices.at(kNuma3).cpus));
    EXPECT_FALSE(plan->allocation.cpus.Intersects(taken))
        << plan->allocation.cpus.ToString() << " vs " << taken.ToString();
    for (int cpu : plan->allocation.cpus) {
      EXPECT_TRUE(topo.SmtSiblings(cpu).IsSubsetOf(plan->allocation.cpus)) << cpu;
    }
    taken |= plan->allocation.cpus;
    ASSERT_TRUE(held.Add(plan->allocation).ok());
  }
  // 4 of 16 left: a claim for 5 is refused, with both counts and what is free.
  const CpuSet free = setup.cpu_pool.devices.at(kNuma3).cpus - taken;
  const claims::Claim big = Parse(ClaimJson("uid-4", "team", "big", {Result("cpus", kNuma3, "5")}));
  absl::StatusOr<Plan> plan = PlanClaim(big, setup, topo, held);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(plan.status().message(),
            "claim team/big request \"cpus\": 5 CPUs wanted from device \"cpudevnuma003\" but "
            "only 4 are free there (" +
                free.ToString() + ")");
  // Another NUMA node is untouched.
  const claims::Claim elsewhere =
      Parse(ClaimJson("uid-5", "team", "elsewhere", {Result("cpus", "cpudevnuma004", "16")}));
  plan = PlanClaim(elsewhere, setup, topo, held);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->allocation.cpus.ToString(), "32-39,224-231");
}

TEST(PlanClaimTest, ResultsArePickedInClaimOrder) {
  const topology::Topology& topo = Load(k192);
  const DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  absl::StatusOr<Plan> alone =
      PlanClaim(Parse(C({Result("a", kNuma3, "4")})), setup, topo, state::State{});
  ASSERT_TRUE(alone.ok()) << alone.status();
  const claims::Claim both = Parse(C({Result("a", kNuma3, "4"), Result("b", kNuma3, "4")}));
  absl::StatusOr<Plan> plan = PlanClaim(both, setup, topo, state::State{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->cdi_spec.devices.size(), 2u);
  const CpuSet a = Cpus(EnvValue(plan->cdi_spec.devices[0].container_edits.env,
                                 std::string("DRA_CPUSET_") + kUid + "_a"));
  const CpuSet b = Cpus(EnvValue(plan->cdi_spec.devices[1].container_edits.env,
                                 std::string("DRA_CPUSET_") + kUid + "_b"));
  // The first result gets what it would get alone; the second what is left.
  EXPECT_EQ(a, alone->allocation.cpus);
  EXPECT_EQ(b.Size(), 4);
  EXPECT_FALSE(a.Intersects(b));
  state::State held;
  ASSERT_TRUE(held.Add(HeldBy(kCpuDriver, "x", "default", "x", a)).ok());
  absl::StatusOr<Plan> second = PlanClaim(Parse(C({Result("b", kNuma3, "4")})), setup, topo, held);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(b, second->allocation.cpus);
}

// The whole CDI spec and answer of a two-request claim, spelled out.
TEST(PlanClaimTest, CdiSpecAndAnswerExactly) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kMachine);
  const std::string uid = "8d4e5c1a-aaaa-bbbb-cccc-000000000001";
  const claims::Claim claim =
      Parse(ClaimJson(uid, "ns1", "web",
                      {Result("main", "cpudevmachine", "2"),
                       Shared(Result("side/small", "cpudevmachine", "1"), "share-7")},
                      {Config({"main"}, Cpuset("2,10")), Config({"side"}, Cpuset("7"))}));
  absl::StatusOr<Plan> plan = PlanClaim(claim, setup, topo, state::State{});
  ASSERT_TRUE(plan.ok()) << plan.status();

  cdi::Spec want;
  want.cdi_version = "0.5.0";  // the device names start with a digit
  want.kind = "dra.cpu/claim";
  // dra-driver-cpu's names, then the same without the UID's dashes (which dash drops).
  want.container_edits.env = {"DRA_CPUSET_8d4e5c1a-aaaa-bbbb-cccc-000000000001=2,7,10",
                              "DRA_CPUSET_8d4e5c1a_aaaa_bbbb_cccc_000000000001=2,7,10"};
  cdi::Device main;
  main.name = uid + "-cpudevmachine";
  main.container_edits.env = {"DRA_CPUSET_8d4e5c1a-aaaa-bbbb-cccc-000000000001_main=2,10",
                              "DRA_CPUSET_8d4e5c1a_aaaa_bbbb_cccc_000000000001_main=2,10"};
  cdi::Device side;
  side.name = uid + "-cpudevmachine-2";
  side.container_edits.env = {"DRA_CPUSET_8d4e5c1a-aaaa-bbbb-cccc-000000000001_side=7",
                              "DRA_CPUSET_8d4e5c1a_aaaa_bbbb_cccc_000000000001_side=7"};
  want.devices = {main, side};
  EXPECT_EQ(plan->cdi_spec, want) << cdi::ToJsonText(plan->cdi_spec);
  EXPECT_EQ(cdi::MinimumVersion(plan->cdi_spec), "0.5.0");
  EXPECT_TRUE(cdi::Validate(plan->cdi_spec).ok()) << cdi::Validate(plan->cdi_spec);
  EXPECT_EQ(plan->cdi_file, "dra.cpu-claim_" + uid + ".json");

  const std::vector<PreparedDevice> devices = {
      {{"main"}, "node1", "cpudevmachine", {"dra.cpu/claim=" + uid + "-cpudevmachine"}, {}},
      {{"side"},
       "node1",
       "cpudevmachine",
       {"dra.cpu/claim=" + uid + "-cpudevmachine-2"},
       "share-7"},
  };
  EXPECT_EQ(plan->devices, devices);

  const state::Allocation& a = plan->allocation;
  EXPECT_EQ(a.owner, state::DraOwner("dra.cpu", uid));
  EXPECT_EQ(a.owner, "dra.cpu/" + uid);
  EXPECT_EQ(a.kind, state::AllocationKind::kDraClaim);
  EXPECT_EQ(a.phase, state::Phase::kPreparing);
  EXPECT_EQ(a.claim_namespace, "ns1");
  EXPECT_EQ(a.claim_name, "web");
  EXPECT_EQ(a.driver, "dra.cpu");
  EXPECT_EQ(a.cpus.ToString(), "2,7,10");
  EXPECT_TRUE(a.gpus.empty());
  EXPECT_EQ(a.answer, json::parse(R"({"devices": [
      {"requestNames": ["main"], "pool": "node1", "device": "cpudevmachine",
       "cdiDeviceIds": ["dra.cpu/claim=)" +
                                  uid + R"(-cpudevmachine"]},
      {"requestNames": ["side"], "pool": "node1", "device": "cpudevmachine",
       "cdiDeviceIds": ["dra.cpu/claim=)" +
                                  uid + R"(-cpudevmachine-2"], "shareId": "share-7"}]})"));
  EXPECT_EQ(a.cdi, (json{{"file", "dra.cpu-claim_" + uid + ".json"}, {"spec", cdi::ToJson(want)}}));
}

// --enforce=cgroup on the 16-CPU machine with CPU 0 reserved. By default (the kubelet's static
// CPU manager) the reserved CPU stays in the shared pool, so the 15 unreserved CPUs can all be
// claimed; with --strict-cpu-reservation the pool would be empty and the claim is refused.
// Without any reserved CPU the last one is refused in both modes: the pool is never emptied.
TEST(PlanClaimTest, SharedPoolKeepsTheReservedCpusUnlessStrict) {
  const topology::Topology& topo = Load(k16);
  const claims::Claim all =
      Parse(ClaimJson("uid-all", "ns", "all", {Result("cpus", "cpudevmachine", "15")},
                      {Config({"cpus"}, Cpuset("1-15"))}));
  const CpusetHook hook{"/opt/topodra/bin/topodra-cpuset-hook", "/records", "/sys/fs/cgroup"};
  {
    DriverSetup setup = CpuSetup(topo, Mode::kMachine, Cpus("0"));
    setup.cpuset_hook = hook;
    absl::StatusOr<Plan> plan = PlanClaim(all, setup, topo, state::State{});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->allocation.cpus.ToString(), "1-15");
  }
  {
    DriverSetup setup = CpuSetup(topo, Mode::kMachine, Cpus("0"));
    setup.cpuset_hook = hook;
    setup.cpuset_hook->strict_cpu_reservation = true;
    absl::StatusOr<Plan> plan = PlanClaim(all, setup, topo, state::State{});
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(plan.status().message(),
              "claim ns/all: taking CPUs 1-15 would leave no CPU for the containers without a "
              "CPU claim (online 0-15, held by other claims none, reserved 0, kept out of it by "
              "--strict-cpu-reservation); the shared pool must keep at least one CPU");
  }
  for (const bool strict : {false, true}) {
    SCOPED_TRACE(strict);
    DriverSetup setup = CpuSetup(topo, Mode::kMachine);
    setup.cpuset_hook = hook;
    setup.cpuset_hook->strict_cpu_reservation = strict;
    state::State held;
    ASSERT_TRUE(held.Add(HeldBy(kCpuDriver, "other", "ns", "other", Cpus("0-13"))).ok());
    absl::StatusOr<Plan> plan =
        PlanClaim(Parse(ClaimJson("uid-1", "ns", "one", {Result("cpus", "cpudevmachine", "1")},
                                  {Config({"cpus"}, Cpuset("14"))})),
                  setup, topo, held);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(held.Add(plan->allocation).ok());
    plan = PlanClaim(Parse(ClaimJson("uid-2", "ns", "last", {Result("cpus", "cpudevmachine", "1")},
                                     {Config({"cpus"}, Cpuset("15"))})),
                     setup, topo, held);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(plan.status().message(),
              std::string("claim ns/last: taking CPUs 15 would leave no CPU for the containers "
                          "without a CPU claim (online 0-15, held by other claims 0-14, ") +
                  (strict ? "reserved none, kept out of it by --strict-cpu-reservation"
                          : "reserved none online: the reserved CPUs (--reserved-cpus) stay in "
                            "it") +
                  "); the shared pool must keep at least one CPU");
  }
}

// --numa-memory=claim on the 24-node machine: the claim records the NUMA nodes of its CPUs plus
// what its numaMemory config names, and the hook gets them as --mems; off, neither.
TEST(PlanClaimTest, NumaMemoryRecordsTheClaimsNodesAndPassesThemToTheHook) {
  const topology::Topology& topo = Load(k192);
  CpusetHook hook{"/opt/topodra/bin/topodra-cpuset-hook", "/records", "/sys/fs/cgroup"};
  hook.numa_memory = true;
  auto plan = [&](const json& parameters, bool numa_memory) {
    DriverSetup setup = CpuSetup(topo, Mode::kMachine);
    setup.cpuset_hook = hook;
    setup.cpuset_hook->numa_memory = numa_memory;
    return PlanClaim(Parse(ClaimJson("uid-m", "ns", "m", {Result("cpus", "cpudevmachine", "3")},
                                     {Config({"cpus"}, parameters)})),
                     setup, topo, state::State{});
  };
  auto with = [](const json& numa) {
    json p = Cpuset("8-9,16");  // CPUs of nodes 1 and 2
    p["cpuConfig"]["numaMemory"] = numa;
    return p;
  };
  auto args = [](const Plan& p) { return p.cdi_spec.container_edits.hooks.at(0).args; };

  absl::StatusOr<Plan> local = plan(Cpuset("8-9,16"), true);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->allocation.mems.ToString(), "1-2");
  EXPECT_THAT(args(*local), ::testing::ElementsAre("topodra-cpuset-hook", "--cpus", "8-9,16",
                                                   "--mems", "1-2", "--claim", "uid-m", "--records",
                                                   "/records", "--cgroup-root", "/sys/fs/cgroup"));
  absl::StatusOr<Plan> more = plan(with({"local", "5"}), true);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(more->allocation.mems.ToString(), "1-2,5");
  // The device metadata file tells the workload where its memory comes from.
  ASSERT_EQ(more->metadata_devices.size(), 1u);
  const auto& decided = more->metadata_devices[0].decided;
  auto memory = std::find_if(decided.begin(), decided.end(),
                             [](const auto& a) { return a.first == kMemoryNodesAttribute; });
  ASSERT_NE(memory, decided.end());
  EXPECT_EQ(memory->second, (json{{"ints", {1, 2, 5}}}));
  absl::StatusOr<Plan> only = plan(with("7"), true);
  ASSERT_TRUE(only.ok()) << only.status();
  EXPECT_EQ(only->allocation.mems.ToString(), "7");
  absl::StatusOr<Plan> all = plan(with("all"), true);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->allocation.mems.ToString(), "0-23");
  absl::StatusOr<Plan> missing = plan(with({"local", "24"}), true);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              ::testing::HasSubstr("numaMemory: NUMA node 24 is not on this node (its NUMA "
                                   "nodes: 0-23)"));

  absl::StatusOr<Plan> off = plan(with({"local", "5"}), false);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->allocation.mems.Empty());
  EXPECT_THAT(args(*off), ::testing::Not(::testing::Contains("--mems")));
}

TEST(PlanClaimTest, CdiVersionFollowsTheUid) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  for (const auto& [uid, version] : std::vector<std::pair<std::string, std::string>>{
           {"0f9c2b7e-1a2b-4c3d-8e9f-0123456789ab", "0.5.0"},
           {"9", "0.5.0"},
           {"abc-def", "0.3.0"},
           {"f0e1d2c3-0000-4000-8000-000000000000", "0.3.0"}}) {
    SCOPED_TRACE(uid);
    absl::StatusOr<Plan> plan =
        PlanClaim(Parse(ClaimJson(uid, "default", "c", {Result("r", "cpudevnuma000", "2")})), setup,
                  topo, state::State{});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->cdi_spec.cdi_version, version);
    EXPECT_EQ(plan->cdi_spec.cdi_version, cdi::MinimumVersion(plan->cdi_spec));
    EXPECT_TRUE(cdi::Validate(plan->cdi_spec).ok()) << cdi::Validate(plan->cdi_spec);
    // The UID as it is, dashes and all, and (when it has dashes) the shell-safe name too.
    EXPECT_EQ(plan->cdi_spec.container_edits.env,
              CpusetEnv("DRA_CPUSET_" + uid, plan->allocation.cpus.ToString()));
    EXPECT_EQ(plan->cdi_spec.devices[0].container_edits.env,
              CpusetEnv("DRA_CPUSET_" + uid + "_r", plan->allocation.cpus.ToString()));
    EXPECT_EQ(plan->cdi_spec.container_edits.env.size(), uid == "9" ? 1u : 2u);
    EXPECT_EQ(plan->devices[0].cdi_device_ids,
              std::vector<std::string>{"dra.cpu/claim=" + uid + "-cpudevnuma000"});
  }
}

TEST(PlanClaimTest, UidThatCdiCannotNameIsTheClaimsError) {
  const topology::Topology& topo = Load(k16);
  const DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  absl::StatusOr<Plan> plan =
      PlanClaim(Parse(ClaimJson("bad uid!", "default", "c1", {Result("r", "cpudevnuma000", "2")})),
                setup, topo, state::State{});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()),
              StartsWith("claim default/c1: cannot describe the devices in CDI: "));
}

TEST(PlanClaimTest, CustomCapacityName) {
  const topology::Topology& topo = Load(k192);
  DriverSetup setup = CpuSetup(topo, Mode::kNuma);
  setup.cpu_capacity = "example.com/cores";
  json result = Result("cpus", kNuma3);
  result["consumedCapacity"] = {{"example.com/cores", "6"}};
  absl::StatusOr<Plan> plan = PlanClaim(Parse(C({result})), setup, topo, state::State{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->allocation.cpus.Size(), 6);
  plan = PlanClaim(Parse(C({Result("cpus", kNuma3, "6")})), setup, topo, state::State{});
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("consumedCapacity example.com/cores is missing"));
}

// ---------------------------------------------------------------------------------------------
// GPU claims.

const std::string kGpu0 = "gpu-0000-34-00-0";  // nvidiaDGX2: the first of 16
const std::string kGpu8 = "gpu-0000-b7-00-0";  // the ninth

json G(const std::vector<json>& results, const std::vector<json>& configs = {}) {
  return C(results, configs);
}

json GpuResult(const std::string& request, const std::string& device) {
  return Result(request, device, "", kGpuDriver);
}

struct GpuCase {
  std::string name;
  std::vector<state::Allocation> held;
  json claim;
  std::vector<std::string> want_devices;        // in answer order
  std::set<std::string> want_gpus;              // allocation.gpus
  std::map<std::string, std::string> want_env;  // request -> PCI ids
  std::string error;                            // InvalidArgument, a substring
};

void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.name; }

class PlanGpuTest : public ::testing::TestWithParam<GpuCase> {};

TEST_P(PlanGpuTest, Plans) {
  const GpuCase& c = GetParam();
  const topology::Topology& topo = Load(kDgx);
  const DriverSetup setup = GpuSetup(topo);
  const claims::Claim claim = Parse(c.claim);
  absl::StatusOr<Plan> plan = PlanClaim(claim, setup, topo, StateOf(c.held));
  if (!c.error.empty()) {
    ASSERT_FALSE(plan.ok()) << "accepted";
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
    EXPECT_THAT(std::string(plan.status().message()), StartsWith("claim default/c1"));
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr(c.error));
    return;
  }
  ASSERT_TRUE(plan.ok()) << plan.status();
  CheckCommon(*plan, claim, setup);
  EXPECT_TRUE(plan->allocation.cpus.Empty());
  EXPECT_EQ(plan->allocation.gpus, c.want_gpus);
  ASSERT_EQ(plan->devices.size(), c.want_devices.size());
  for (size_t i = 0; i < plan->devices.size(); ++i) {
    const PreparedDevice& d = plan->devices[i];
    EXPECT_EQ(d.device, c.want_devices[i]) << i;
    const cdi::Device& cd = plan->cdi_spec.devices[i];
    // The GPU's device nodes as the setup resolved them.
    EXPECT_EQ(cd.container_edits.device_nodes, setup.gpus.at(d.device).device_nodes) << i;
    ASSERT_EQ(d.request_names.size(), 1u);
    ASSERT_TRUE(c.want_env.contains(d.request_names[0])) << d.request_names[0];
    std::string env_uid = claim.uid;
    for (char& ch : env_uid) {
      if (ch == '-') ch = '_';
    }
    EXPECT_EQ(cd.container_edits.env,
              std::vector<std::string>{"TOPODRA_GPU_" + env_uid + "_" + d.request_names[0] + "=" +
                                       c.want_env.at(d.request_names[0])})
        << i;
  }
  EXPECT_TRUE(plan->cdi_spec.container_edits.env.empty());
}

std::vector<GpuCase> GpuCases() {
  const state::Allocation other =
      HeldBy(kGpuDriver, "u2", "other", "c2", CpuSet{}, {"0000:34:00.0"});
  state::Allocation plugin;
  plugin.kind = state::AllocationKind::kDevicePlugin;
  plugin.owner = "topodra.io/gpu/0123456789abcdef";
  plugin.gpus = {"0000:34:00.0"};
  plugin.phase = state::Phase::kPrepared;
  return {
      {.name = "HoldsTheNamedGpus",
       .claim = G({GpuResult("gpus", kGpu0), GpuResult("gpus", kGpu8)}),
       .want_devices = {kGpu0, kGpu8},
       .want_gpus = {"0000:34:00.0", "0000:b7:00.0"},
       .want_env = {{"gpus", "0000:34:00.0,0000:b7:00.0"}}},
      {.name = "PrioritizedListUsesTheBaseRequest",
       .claim = G({GpuResult("train/a100", kGpu8)}),
       .want_devices = {kGpu8},
       .want_gpus = {"0000:b7:00.0"},
       .want_env = {{"train", "0000:b7:00.0"}}},
      {.name = "HeldByAnotherClaim",
       .held = {other},
       .claim = G({GpuResult("gpus", kGpu0)}),
       .error = "request \"gpus\": GPU \"gpu-0000-34-00-0\" (0000:34:00.0) is already prepared "
                "for claim other/c2 (uid u2)"},
      {.name = "HeldByTheDevicePlugin",
       .held = {plugin},
       .claim = G({GpuResult("gpus", kGpu0)}),
       .error = "is already prepared for device-plugin allocation topodra.io/gpu/0123456789abcdef"},
      {.name = "HeldByItself",
       .held = {HeldBy(kGpuDriver, kUid, "default", "c1", CpuSet{}, {"0000:34:00.0"})},
       .claim = G({GpuResult("gpus", kGpu0)}),
       .want_devices = {kGpu0},
       .want_gpus = {"0000:34:00.0"},
       .want_env = {{"gpus", "0000:34:00.0"}}},
      {.name = "OtherGpuOfAHolderIsFree",
       .held = {other},
       .claim = G({GpuResult("gpus", kGpu8)}),
       .want_devices = {kGpu8},
       .want_gpus = {"0000:b7:00.0"},
       .want_env = {{"gpus", "0000:b7:00.0"}}},
      {.name = "AdminAccessDoesNotHold",
       .held = {other},
       .claim = G({Admin(GpuResult("monitor", kGpu0))}),
       .want_devices = {kGpu0},
       .want_gpus = {},
       .want_env = {{"monitor", "0000:34:00.0"}}},
      {.name = "OpaqueConfigRejected",
       .claim = G({GpuResult("gpus", kGpu0)},
                  {Config({}, json{{"sharing", "timeSlicing"}}, kGpuDriver)}),
       .error = "request \"gpus\": config[0] (FromClaim): driver gpu.topodra.io takes no opaque "
                "configuration"},
      {.name = "ClassConfigRejectedToo",
       .claim = G({GpuResult("gpus", kGpu0)},
                  {Config({"cpus"}, Cpuset("1"), kCpuDriver),
                   Config({"gpus"}, json::object(), kGpuDriver, "FromClass")}),
       .error = "config[1] (FromClass): driver gpu.topodra.io takes no opaque configuration"},
      {.name = "ConfigOfAnotherRequestIgnored",
       .claim = G({GpuResult("gpus", kGpu0)}, {Config({"other"}, json::object(), kGpuDriver)}),
       .want_devices = {kGpu0},
       .want_gpus = {"0000:34:00.0"},
       .want_env = {{"gpus", "0000:34:00.0"}}},
      {.name = "CpuResultsAndConfigsIgnored",
       .claim = G({Result("cpus", "cpudevnuma000", "2"), GpuResult("gpus", kGpu0)},
                  {Config({}, Cpuset("0-1"), kCpuDriver)}),
       .want_devices = {kGpu0},
       .want_gpus = {"0000:34:00.0"},
       .want_env = {{"gpus", "0000:34:00.0"}}},
      {.name = "NoGpuResults",
       .claim = G({Result("cpus", "cpudevnuma000", "2")}),
       .want_devices = {},
       .want_gpus = {}},
      {.name = "SameGpuTwice",
       .claim = G({GpuResult("a", kGpu0), GpuResult("b", kGpu0)}),
       .error = "claim default/c1: GPU \"gpu-0000-34-00-0\" is allocated to two results"},
      {.name = "UnknownGpu",
       .claim = G({GpuResult("gpus", "gpu-0000-99-00-0")}),
       .error = "device \"gpu-0000-99-00-0\" is not a GPU of this node"},
      {.name = "PoolOfAnotherNode",
       .claim = G({Result("gpus", kGpu0, "", kGpuDriver, "node2")}),
       .error = "pool \"node2\" is not this node's pool \"node1\""},
      {.name = "NotAllocated",
       .claim = PendingClaimJson(kUid, "default", "c1"),
       .error = "claim default/c1 is not allocated"},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, PlanGpuTest, ::testing::ValuesIn(GpuCases()),
                         [](const ::testing::TestParamInfo<GpuCase>& info) {
                           return info.param.name;
                         });

// ---------------------------------------------------------------------------------------------
// The stored answer.

TEST(DevicesJsonTest, RoundTrips) {
  const std::vector<PreparedDevice> devices = {
      {{"a"}, "node1", "cpudevnuma000", {"dra.cpu/claim=u-cpudevnuma000"}, {}},
      {{"b", "c"}, "node1", "cpudevnuma001", {"dra.cpu/claim=u-x", "dra.cpu/claim=u-y"}, "s-1"},
      {{}, "", "", {}, ""},
  };
  const json j = DevicesToJson(devices);
  EXPECT_EQ(j["devices"][1]["shareId"], "s-1");
  EXPECT_FALSE(j["devices"][0].contains("shareId"));
  EXPECT_EQ(j["devices"][2]["shareId"], "");  // empty but present stays present
  absl::StatusOr<std::vector<PreparedDevice>> back = DevicesFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, devices);
  // Through text, as the journal stores it.
  back = DevicesFromJson(json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, devices);

  back = DevicesFromJson(DevicesToJson({}));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->empty());
  EXPECT_EQ(DevicesToJson({}), json::parse(R"({"devices": []})"));
}

TEST(DevicesJsonTest, MalformedAnswersAreDataLoss) {
  const std::string ok_device =
      R"("requestNames": ["a"], "pool": "p", "device": "d", "cdiDeviceIds": ["k/c=d"])";
  for (const std::string& text : {
           std::string("null"),
           std::string("[]"),
           std::string(R"({})"),
           std::string(R"({"devices": {}})"),
           std::string(R"({"devices": null})"),
           std::string(R"({"devices": [1]})"),
           std::string(R"({"devices": [{"pool": "p", "device": "d", "cdiDeviceIds": []}]})"),
           std::string(R"({"devices": [{"requestNames": "a", "pool": "p", "device": "d",
                                        "cdiDeviceIds": []}]})"),
           std::string(R"({"devices": [{"requestNames": [1], "pool": "p", "device": "d",
                                        "cdiDeviceIds": []}]})"),
           std::string(R"({"devices": [{"requestNames": [], "pool": 1, "device": "d",
                                        "cdiDeviceIds": []}]})"),
           std::string(R"({"devices": [{"requestNames": [], "pool": "p",
                                        "cdiDeviceIds": []}]})"),
           std::string(R"({"devices": [{"requestNames": [], "pool": "p", "device": "d"}]})"),
           std::string(R"({"devices": [{"requestNames": [], "pool": "p", "device": "d",
                                        "cdiDeviceIds": [null]}]})"),
           "{\"devices\": [{" + ok_device + R"(, "shareId": 7}]})",
           "{\"devices\": [{" + ok_device + R"(, "shareId": null}]})",
           "{\"devices\": [{" + ok_device + "}, 3]}",
       }) {
    SCOPED_TRACE(text);
    absl::StatusOr<std::vector<PreparedDevice>> got = DevicesFromJson(json::parse(text));
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
    EXPECT_THAT(std::string(got.status().message()), StartsWith("stored answer: "));
  }
  // Unknown fields are tolerated (a newer version may add some).
  absl::StatusOr<std::vector<PreparedDevice>> got =
      DevicesFromJson(json::parse("{\"devices\": [{" + ok_device + R"(, "future": 1}]})"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u);
}

TEST(CdiFileNameTest, InstanceMarkers) {
  const std::string m = CdiInstanceMarker("node-a", "/var/lib/topodra");
  EXPECT_EQ(m, "7db96cb355a8172d");  // FNV-1a 64 of "node-a", a NUL byte, "/var/lib/topodra"
  EXPECT_EQ(CdiInstanceMarker("node-a", "/var/lib/topodra"), m) << "stable";
  EXPECT_NE(CdiInstanceMarker("node-b", "/var/lib/topodra"), m);
  EXPECT_NE(CdiInstanceMarker("node-a", "/var/lib/topodra2"), m);
  EXPECT_NE(CdiInstanceMarker("node-a/var", "/lib/topodra"),
            CdiInstanceMarker("node-a", "/var/lib/topodra"));
  EXPECT_EQ(CdiFileName("dra.cpu", "1234-ab", m), "dra.cpu-claim_1234-ab_i" + m + ".json");
  EXPECT_EQ(CdiFileName("dra.cpu", "1234-ab", ""), "dra.cpu-claim_1234-ab.json");
  EXPECT_TRUE(IsCdiFileOf("dra.cpu", CdiFileName("dra.cpu", "1234-ab", m)));
  EXPECT_EQ(CdiMarkerOf(CdiFileName("dra.cpu", "1234-ab", m)), m);
  EXPECT_EQ(CdiMarkerOf("topodra.io_gpu-dp_0123456789abcdef_i" + m + ".json"), m);
  EXPECT_EQ(CdiMarkerOf("dra.cpu-claim_1234-ab.json"), "");
  EXPECT_EQ(CdiMarkerOf("topodra.io_gpu-dp_0123456789abcdef.json"), "");
  EXPECT_EQ(CdiMarkerOf("dra.cpu-claim_x_i0123456789ABCDEF.json"), "") << "not ours: uppercase";
  EXPECT_EQ(CdiMarkerOf("dra.cpu-claim_x_i0123456789abcdef.yaml"), "");
  EXPECT_EQ(CdiMarkerOf("_i0123456789abcdef.json"), "");
}

TEST(CdiFileNameTest, NamesAndRecognises) {
  EXPECT_EQ(CdiKind("dra.cpu"), "dra.cpu/claim");
  EXPECT_EQ(CdiFileName("dra.cpu", "1234-ab"), "dra.cpu-claim_1234-ab.json");
  EXPECT_EQ(CdiFileName("gpu.topodra.io", "x"), "gpu.topodra.io-claim_x.json");
  EXPECT_TRUE(IsCdiFileOf("dra.cpu", "dra.cpu-claim_1234-ab.json"));
  EXPECT_TRUE(IsCdiFileOf("dra.cpu", "dra.cpu-claim_x.json"));
  EXPECT_FALSE(IsCdiFileOf("dra.cpu", "dra.cpu-claim_.json"));
  EXPECT_FALSE(IsCdiFileOf("dra.cpu", "gpu.topodra.io-claim_x.json"));
  EXPECT_FALSE(IsCdiFileOf("gpu.topodra.io", "dra.cpu-claim_x.json"));
  EXPECT_FALSE(IsCdiFileOf("dra.cpu", "dra.cpu-claim_x.yaml"));
  EXPECT_FALSE(IsCdiFileOf("dra.cpu", "dra.cpu.json"));
  EXPECT_FALSE(IsCdiFileOf("dra.cpu", "other-dra.cpu-claim_x.json"));
}

}  // namespace
}  // namespace topodra::prepare
