// CPU pinning end to end: the real daemon with --enforce=cgroup on a fake cgroup v2 tree (systemd
// layout) in a temporary directory. Claims shrink the shared pool of every other container at
// once and widen it again on unprepare, the hook's records keep a claim's container on its CPUs,
// new containers are fixed as they appear, and the last CPUs of the shared pool cannot be taken.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "test/integration/node_fixture.h"

namespace topodra::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kBurstable[] = "kubepods.slice/kubepods-burstable.slice";
// Two pods' UIDs (the kubelet's cgroup names must carry real ones).
constexpr char kPodA[] = "aaaaaaaa-0000-4000-8000-000000000001";
constexpr char kPodB[] = "bbbbbbbb-0000-4000-8000-000000000002";

std::string PodSlice(const std::string& uid) {
  std::string u = uid;
  std::replace(u.begin(), u.end(), '-', '_');
  return absl::StrCat(kBurstable, "/kubepods-burstable-pod", u, ".slice");
}

class PinningTest : public NodeTest {
 protected:
  void SetUp() override {
    NodeTest::SetUp();
    cgroups_ = dirs_.root + "/cg";
    fs::create_directories(cgroups_);
    std::ofstream(cgroups_ + "/cgroup.controllers") << "cpuset cpu io memory pids\n";
    MakeCgroup("kubepods.slice", "0-31");
    MakeCgroup(kBurstable, "0-31");
    for (const std::string pod : {kPodA, kPodB}) {
      MakeCgroup(PodSlice(pod), "0-31");
      for (const std::string c : {"1", "2"}) MakeCgroup(Container(pod, pod.substr(0, 4) + c), "");
    }
  }

  std::string Container(const std::string& pod, const std::string& id) {
    return absl::StrCat(PodSlice(pod), "/cri-containerd-", id, ".scope");
  }

  void MakeCgroup(const std::string& rel, const std::string& cpus) {
    fs::create_directories(cgroups_ + "/" + rel);
    std::ofstream(cgroups_ + "/" + rel + "/cpuset.cpus") << cpus << "\n";
  }

  std::string Cpus(const std::string& rel) {
    std::string s = ReadFile(cgroups_ + "/" + rel + "/cpuset.cpus");
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  bool WaitCpus(const std::string& rel, const std::string& want) {
    for (int i = 0; i < 200; ++i) {
      if (Cpus(rel) == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  }

  void StartPinnedNode(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--enforce", "cgroup",     "--cgroup-root",
                                     cgroups_,    "--hook-dir", dirs_.root + "/hook"};
    args.insert(args.end(), extra.begin(), extra.end());
    StartNode(args);
  }

  std::string cgroups_;
};

TEST_F(PinningTest, SharedPoolFollowsClaimsAndHookRecordsKeepContainersOnTheirCpus) {
  StartPinnedNode();
  const std::string a1 = Container(kPodA, "aaaa1");
  const std::string b2 = Container(kPodB, "bbbb2");
  // Containers created before the daemon (empty cpuset) get the whole shared pool at start.
  ASSERT_TRUE(WaitCpus(a1, "0-31")) << Cpus(a1) << "\n" << daemon_.Log();
  const std::string hook = dirs_.root + "/hook/topodra-cpuset-hook";
  struct stat st {};
  ASSERT_EQ(::stat(hook.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);

  PrepareClaim claim = CpuClaim("pinned", "cpudevnuma000", "4", Cpuset("4-7"));
  ASSERT_EQ(PrepareOne(claim).error, "");
  // Every other container leaves the claim's CPUs at once.
  EXPECT_TRUE(WaitCpus(a1, "0-3,8-31")) << Cpus(a1);
  EXPECT_TRUE(WaitCpus(b2, "0-3,8-31")) << Cpus(b2);

  // The claim's CDI spec runs the installed hook with the claim's CPUs.
  const json spec = json::parse(ReadFile(CdiPath(claim.uid)), nullptr, false);
  ASSERT_TRUE(spec.is_object());
  const json hooks = spec["containerEdits"]["hooks"];
  ASSERT_EQ(hooks.size(), 1u) << spec.dump();
  EXPECT_EQ(hooks[0]["hookName"], "createRuntime");
  EXPECT_EQ(hooks[0]["path"], hook);
  EXPECT_THAT(
      hooks[0]["args"].get<std::vector<std::string>>(),
      ::testing::ElementsAre("topodra-cpuset-hook", "--cpus", "4-7", "--claim", claim.uid,
                             "--records", dirs_.state + "/containers", "--cgroup-root", cgroups_));

  // What the hook records when the runtime creates the claim's container (aaaa1): the daemon
  // keeps it on the claim's CPUs and its pod on the shared pool plus those.
  std::ofstream(absl::StrCat(dirs_.state, "/containers/aaaa1_", claim.uid, ".json"))
      << "{\"container\":\"aaaa1\",\"claim\":\"" << claim.uid << "\",\"cpus\":\"4-7\","
      << "\"cgroup\":\"" << a1 << "\"}\n";
  EXPECT_TRUE(WaitCpus(a1, "4-7")) << Cpus(a1);
  EXPECT_EQ(Cpus(PodSlice(kPodA)), "0-31");
  EXPECT_TRUE(WaitCpus(Container(kPodA, "aaaa2"), "0-3,8-31"));

  // A container that appears later gets the shared pool without any other change.
  const std::string late = Container(kPodB, "bbbb3");
  MakeCgroup(late, "0-31");
  EXPECT_TRUE(WaitCpus(late, "0-3,8-31")) << Cpus(late);

  // Unprepared: the shared pool widens at once, the stale record goes.
  ASSERT_EQ(UnprepareOne(claim), "");
  EXPECT_TRUE(WaitCpus(b2, "0-31")) << Cpus(b2);
  EXPECT_TRUE(WaitCpus(a1, "0-31")) << Cpus(a1);
  for (int i = 0;
       i < 100 && fs::exists(absl::StrCat(dirs_.state, "/containers/aaaa1_", claim.uid, ".json"));
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(fs::exists(absl::StrCat(dirs_.state, "/containers/aaaa1_", claim.uid, ".json")));
}

TEST_F(PinningTest, ContainersCreatedWhileTheDaemonWasDownAreFixedAtStart) {
  StartPinnedNode();
  PrepareClaim claim = CpuClaim("held", "cpudevnuma000", "2", Cpuset("2-3"));
  ASSERT_EQ(PrepareOne(claim).error, "");
  const std::string b1 = Container(kPodB, "bbbb1");
  ASSERT_TRUE(WaitCpus(b1, "0-1,4-31"));
  sim_.reset();
  daemon_.Kill();
  const std::string created = Container(kPodA, "aaaa9");
  MakeCgroup(created, "0-31");
  StartPinnedNode();
  EXPECT_TRUE(WaitCpus(created, "0-1,4-31")) << Cpus(created) << "\n" << daemon_.Log();
}

TEST_F(PinningTest, TheLastCpusOfTheSharedPoolCannotBeTaken) {
  // The kubelet's static CPU manager would fight the pinning: the daemon says so.
  fs::create_directories(dirs_.kubelet_root);
  std::ofstream(dirs_.kubelet_root + "/cpu_manager_state")
      << R"({"policyName":"static","defaultCpuSet":"0-31","checksum":1})";
  // NUMA node 1 reserved: NUMA node 0 (0-7,16-23) is the whole shared pool.
  StartPinnedNode({"--reserved-cpus", "8-15,24-31"});
  EXPECT_THAT(daemon_.Log(), HasSubstr("the kubelet's CPU manager policy is \"static\""));
  PrepareClaim most = CpuClaim("most", "cpudevnuma000", "15");
  ASSERT_EQ(PrepareOne(most).error, "");
  PrepareClaim last = CpuClaim("last", "cpudevnuma000", "1");
  const std::string error = PrepareOne(last).error;
  EXPECT_THAT(error, HasSubstr("claim default/last: taking CPUs "));
  EXPECT_THAT(error, HasSubstr("would leave no CPU for the containers without a CPU claim"));
  // Once the big claim is given back, the same claim is fine.
  ASSERT_EQ(UnprepareOne(most), "");
  EXPECT_EQ(PrepareOne(last).error, "");
}

TEST_F(PinningTest, WithoutACpusetControllerTheDaemonRefusesToStart) {
  StartDaemon({"--enforce", "cgroup", "--cgroup-root", dirs_.root + "/nothing-here", "--hook-dir",
               dirs_.root + "/hook"});
  EXPECT_NE(daemon_.WaitExit(), 0);
  EXPECT_THAT(daemon_.Log(), HasSubstr("use --enforce=none to run without CPU pinning"));
}

}  // namespace
}  // namespace topodra::testing
