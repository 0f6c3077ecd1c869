#include "driver/state/state.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace topodra::state {
namespace {

using testing::HasSubstr;

Allocation Claim(const std::string& uid, const std::string& cpus, std::set<std::string> gpus = {}) {
  Allocation a;
  a.kind = AllocationKind::kDraClaim;
  a.owner = uid;
  a.claim_namespace = "default";
  a.claim_name = "claim-" + uid;
  a.cpus = *CpuSet::Parse(cpus);
  a.gpus = std::move(gpus);
  return a;
}

Allocation Plugin(const std::string& owner, const std::string& cpus) {
  Allocation a;
  a.kind = AllocationKind::kDevicePlugin;
  a.owner = owner;
  a.cpus = *CpuSet::Parse(cpus);
  return a;
}

TEST(StateTest, AddRecordsAndQueriesAnswer) {
  State state;
  ASSERT_TRUE(state.Add(Claim("u1", "0-3", {"0000:3b:00.0"})).ok());
  ASSERT_TRUE(state.Add(Plugin("pod1/ctr/topodra.io/cpu", "8,10")).ok());
  EXPECT_EQ(state.Size(), 2);
  EXPECT_EQ(state.HeldCpus().ToString(), "0-3,8,10");
  EXPECT_EQ(state.HeldGpus(), (std::set<std::string>{"0000:3b:00.0"}));
  EXPECT_EQ(state.HolderOfCpu(2), std::optional<std::string>("u1"));
  EXPECT_EQ(state.HolderOfCpu(10), std::optional<std::string>("pod1/ctr/topodra.io/cpu"));
  EXPECT_EQ(state.HolderOfCpu(4), std::nullopt);
  EXPECT_EQ(state.HolderOfGpu("0000:3b:00.0"), std::optional<std::string>("u1"));
  EXPECT_EQ(state.HolderOfGpu("0000:af:00.0"), std::nullopt);
  ASSERT_NE(state.Find("u1"), nullptr);
  EXPECT_EQ(*state.Find("u1"), Claim("u1", "0-3", {"0000:3b:00.0"}));
  EXPECT_EQ(state.Find("nobody"), nullptr);
}

TEST(StateTest, IterationIsSortedByOwner) {
  State state;
  for (const char* uid : {"c", "a", "b"}) ASSERT_TRUE(state.Add(Claim(uid, "")).ok());
  std::vector<std::string> owners;
  for (const auto& [owner, allocation] : state.allocations()) owners.push_back(owner);
  EXPECT_EQ(owners, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(StateTest, IdenticalReAddIsIdempotent) {
  State state;
  ASSERT_TRUE(state.Add(Claim("u1", "0-3", {"g1"})).ok());
  const State before = state;
  EXPECT_TRUE(state.Add(Claim("u1", "0-3", {"g1"})).ok());
  EXPECT_EQ(state, before);
  EXPECT_EQ(state.Size(), 1);
}

TEST(StateTest, DifferentReAddForSameOwnerIsRefused) {
  State state;
  ASSERT_TRUE(state.Add(Claim("u1", "0-3")).ok());
  const absl::Status st = state.Add(Claim("u1", "4-5"));
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(st.message(), HasSubstr("u1"));
  EXPECT_EQ(state.Find("u1")->cpus.ToString(), "0-3");
}

struct ConflictCase {
  std::string name;
  Allocation first;
  Allocation second;
  std::string want;
};

TEST(StateTest, ConflictsNameTheResourceAndHolder) {
  const std::vector<ConflictCase> cases = {
      {"cpu", Claim("u1", "0-3"), Claim("u2", "3-5"),
       "claim default/claim-u2 (uid u2): CPU 3 is already held by claim default/claim-u1 (uid u1)"},
      {"gpu", Claim("u1", "0", {"0000:3b:00.0"}), Claim("u2", "1", {"0000:3b:00.0"}),
       "claim default/claim-u2 (uid u2): GPU \"0000:3b:00.0\" is already held by claim "
       "default/claim-u1 (uid u1)"},
      {"plugin vs claim", Plugin("p/c/r", "7"), Claim("u2", "6-7"),
       "CPU 7 is already held by device-plugin allocation p/c/r"},
  };
  for (const ConflictCase& c : cases) {
    SCOPED_TRACE(c.name);
    State state;
    ASSERT_TRUE(state.Add(c.first).ok());
    const State before = state;
    const absl::Status st = state.Add(c.second);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(st.message(), HasSubstr(c.want));
    EXPECT_EQ(state, before) << "a refused Add must change nothing";
    for (int cpu : c.second.cpus - c.first.cpus) EXPECT_EQ(state.HolderOfCpu(cpu), std::nullopt);
    EXPECT_EQ(state.Find(c.second.owner), nullptr);
  }
}

TEST(StateTest, MalformedAllocationsAreRefused) {
  Allocation no_owner = Claim("", "0");
  Allocation no_name = Claim("u1", "0");
  no_name.claim_name.clear();
  Allocation bad_plugin = Plugin("pod/ctr", "0");
  Allocation empty_gpu = Claim("u1", "0", {""});
  for (const Allocation& a : {no_owner, no_name, bad_plugin, empty_gpu}) {
    State state;
    EXPECT_EQ(state.Add(a).code(), absl::StatusCode::kInvalidArgument) << a.owner;
    EXPECT_TRUE(state.Empty());
  }
}

TEST(StateTest, RemoveFreesResourcesAndUnknownOwnerIsOk) {
  State state;
  ASSERT_TRUE(state.Add(Claim("u1", "0-3", {"g1"})).ok());
  ASSERT_TRUE(state.Add(Claim("u2", "4-5", {"g2"})).ok());
  EXPECT_TRUE(state.Remove("u1").ok());
  EXPECT_TRUE(state.Remove("u1").ok());
  EXPECT_TRUE(state.Remove("never-there").ok());
  EXPECT_EQ(state.HeldCpus().ToString(), "4-5");
  EXPECT_EQ(state.HeldGpus(), (std::set<std::string>{"g2"}));
  EXPECT_EQ(state.HolderOfCpu(0), std::nullopt);
  // What u1 held is free again.
  EXPECT_TRUE(state.Add(Claim("u3", "0-3", {"g1"})).ok());
  EXPECT_EQ(state.HolderOfGpu("g1"), std::optional<std::string>("u3"));
}

TEST(StateTest, MarkPreparedRecordsAnswer) {
  State state;
  ASSERT_TRUE(state.Add(Claim("u1", "0")).ok());
  EXPECT_EQ(state.Find("u1")->phase, Phase::kPreparing);
  ASSERT_TRUE(state.MarkPrepared("u1", {{"cdi", {"k8s.topodra.io/cpu=claim-u1"}}}).ok());
  EXPECT_EQ(state.Find("u1")->phase, Phase::kPrepared);
  EXPECT_EQ(state.Find("u1")->answer.Parse()["cdi"][0], "k8s.topodra.io/cpu=claim-u1");
  EXPECT_EQ(state.MarkPrepared("u9", nullptr).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace topodra::state
