// CPU pinning end to end: the real daemon with --enforce=cgroup on a fake cgroup v2 tree (systemd
// layout) in a temporary directory. Claims shrink the shared pool of every other container at
// once and widen it again on unprepare, the hook's records keep a claim's container on its CPUs,
// new containers are fixed as they appear, the reserved CPUs stay in the shared pool (unless
// --strict-cpu-reservation), and the last CPUs of the shared pool cannot be taken.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
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
    // v2 starts every cgroup's mems empty: "the parent's".
    std::ofstream(cgroups_ + "/" + rel + "/cpuset.mems") << "\n";
  }

  std::string Mems(const std::string& rel) {
    std::string s = ReadFile(cgroups_ + "/" + rel + "/cpuset.mems");
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  bool WaitMems(const std::string& rel, const std::string& want) {
    for (int i = 0; i < 200; ++i) {
      if (Mems(rel) == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  }

  // What the hook records for container `id` of pod A holding `claim`.
  void Record(const std::string& id, const std::string& claim_uid, const std::string& cpus,
              const std::string& mems) {
    std::ofstream(absl::StrCat(dirs_.state, "/containers/", id, "_", claim_uid, ".json"))
        << "{\"container\":\"" << id << "\",\"claim\":\"" << claim_uid << "\",\"cpus\":\"" << cpus
        << "\",\"cgroup\":\"" << Container(kPodA, id) << "\",\"mems\":\"" << mems << "\"}\n";
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
  EXPECT_THAT(hooks[0]["args"].get<std::vector<std::string>>(),
              ::testing::ElementsAre("topodra-cpuset-hook", "--cpus", "4-7", "--mems", "0",
                                     "--claim", claim.uid, "--records", dirs_.state + "/containers",
                                     "--cgroup-root", cgroups_));

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

// A container of a prepared claim crash-loops: each restart is a new container (cgroup and hook
// record) and the previous cgroup goes. Twenty restarts, 10 s apart, ending now (the records'
// mtimes say when the hook wrote them): the daemon removes the records of the gone containers
// older than 30 s and keeps the last three, the running container still pinned.
TEST_F(PinningTest, RecordsOfGoneContainersAreRemovedSoACrashLoopKeepsFewRecords) {
  StartPinnedNode();
  PrepareClaim claim = CpuClaim("looping", "cpudevnuma000", "4", Cpuset("4-7"));
  ASSERT_EQ(PrepareOne(claim).error, "");
  const std::string records = dirs_.state + "/containers";
  const absl::Time now = absl::Now();
  auto file_of = [&](int k) { return absl::StrCat("loop", k, "_", claim.uid, ".json"); };
  for (int k = 0; k < 20; ++k) {
    const std::string id = absl::StrCat("loop", k);
    const std::string cgroup = Container(kPodA, id);
    MakeCgroup(cgroup, "");
    if (k > 0) fs::remove_all(cgroups_ + "/" + Container(kPodA, absl::StrCat("loop", k - 1)));
    // Written aside, dated, then renamed in: the daemon sees each as the hook would leave it.
    const std::string tmp = dirs_.root + "/" + file_of(k);
    std::ofstream(tmp) << "{\"container\":\"" << id << "\",\"claim\":\"" << claim.uid
                       << "\",\"cpus\":\"4-7\",\"cgroup\":\"" << cgroup << "\"}\n";
    const absl::Time at = now - absl::Seconds(10 * (19 - k));
    const timespec times[2] = {absl::ToTimespec(at), absl::ToTimespec(at)};
    ASSERT_EQ(::utimensat(AT_FDCWD, tmp.c_str(), times, 0), 0);
    fs::rename(tmp, records + "/" + file_of(k));
  }
  auto files = [&] {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(records)) out.insert(e.path().filename());
    return out;
  };
  const std::set<std::string> want = {file_of(17), file_of(18), file_of(19)};
  for (int i = 0; i < 200 && files() != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(files(), want) << daemon_.Log();
  EXPECT_TRUE(WaitCpus(Container(kPodA, "loop19"), "4-7")) << Cpus(Container(kPodA, "loop19"));
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

// The kubelet's static CPU manager: reserved CPUs are never exclusive but stay shared. With
// CPU 0 reserved, all 31 others can be claimed and every other container runs on CPU 0.
TEST_F(PinningTest, ReservedCpusStayInTheSharedPoolSoEveryOtherCpuCanBeClaimed) {
  StartPinnedNode({"--reserved-cpus", "0"});
  const std::string b1 = Container(kPodB, "bbbb1");
  ASSERT_TRUE(WaitCpus(b1, "0-31")) << Cpus(b1) << "\n" << daemon_.Log();
  EXPECT_THAT(daemon_.Log(), HasSubstr("reserved CPUs in the shared pool"));
  PrepareClaim node0 = CpuClaim("node0", "cpudevnuma000", "15");
  ASSERT_EQ(PrepareOne(node0).error, "");
  PrepareClaim node1 = CpuClaim("node1", "cpudevnuma001", "16");
  ASSERT_EQ(PrepareOne(node1).error, "");
  EXPECT_TRUE(WaitCpus(b1, "0")) << Cpus(b1);
  // Still never an empty pool: nothing is left to claim, CPU 0 is not published.
  ASSERT_EQ(UnprepareOne(node1), "");
  EXPECT_TRUE(WaitCpus(b1, "0,8-15,24-31")) << Cpus(b1);
}

TEST_F(PinningTest, WithoutReservedCpusTheLastCpuCannotBeTaken) {
  StartPinnedNode();
  PrepareClaim node0 = CpuClaim("node0", "cpudevnuma000", "16");
  ASSERT_EQ(PrepareOne(node0).error, "");
  PrepareClaim most = CpuClaim("most", "cpudevnuma001", "15");
  ASSERT_EQ(PrepareOne(most).error, "");
  PrepareClaim last = CpuClaim("last", "cpudevnuma001", "1");
  const std::string error = PrepareOne(last).error;
  EXPECT_THAT(error, HasSubstr("claim default/last: taking CPUs "));
  EXPECT_THAT(error, HasSubstr("would leave no CPU for the containers without a CPU claim"));
  EXPECT_THAT(error, HasSubstr("reserved none online: the reserved CPUs (--reserved-cpus) stay"));
}

TEST_F(PinningTest, StrictReservationKeepsReservedCpusOutAndTheLastCpusCannotBeTaken) {
  // The kubelet's static CPU manager would fight the pinning: the daemon says so.
  fs::create_directories(dirs_.kubelet_root);
  std::ofstream(dirs_.kubelet_root + "/cpu_manager_state")
      << R"({"policyName":"static","defaultCpuSet":"0-31","checksum":1})";
  // NUMA node 1 reserved and kept out: NUMA node 0 (0-7,16-23) is the whole shared pool.
  StartPinnedNode({"--reserved-cpus", "8-15,24-31", "--strict-cpu-reservation"});
  EXPECT_THAT(daemon_.Log(), HasSubstr("the kubelet's CPU manager policy is \"static\""));
  EXPECT_THAT(daemon_.Log(),
              HasSubstr("reserved CPUs kept out of (--strict-cpu-reservation) the shared pool"));
  const std::string b1 = Container(kPodB, "bbbb1");
  EXPECT_TRUE(WaitCpus(b1, "0-7,16-23")) << Cpus(b1);
  PrepareClaim most = CpuClaim("most", "cpudevnuma000", "15");
  ASSERT_EQ(PrepareOne(most).error, "");
  PrepareClaim last = CpuClaim("last", "cpudevnuma000", "1");
  const std::string error = PrepareOne(last).error;
  EXPECT_THAT(error, HasSubstr("claim default/last: taking CPUs "));
  EXPECT_THAT(error, HasSubstr("would leave no CPU for the containers without a CPU claim"));
  EXPECT_THAT(error, HasSubstr("reserved 8-15,24-31, kept out of it by --strict-cpu-reservation"));
  // Once the big claim is given back, the same claim is fine.
  ASSERT_EQ(UnprepareOne(most), "");
  EXPECT_EQ(PrepareOne(last).error, "");
}

// --numa-memory=claim (the default) on a two-node machine whose root cpuset gives nodes 0-1:
// a claim's container allocates on its CPUs' node (or what its numaMemory config adds), every
// other cgroup keeps both nodes, and unprepare gives the container both back.
TEST_F(PinningTest, NumaMemoryFollowsTheClaimsCpus) {
  std::ofstream(cgroups_ + "/cpuset.mems.effective") << "0-1\n";
  StartPinnedNode();
  const std::string a1 = Container(kPodA, "aaaa1");
  const std::string a2 = Container(kPodA, "aaaa2");
  ASSERT_TRUE(WaitMems(a1, "0-1")) << Mems(a1) << "\n" << daemon_.Log();
  EXPECT_EQ(Mems("kubepods.slice"), "0-1");
  EXPECT_THAT(daemon_.Log(), HasSubstr("memory on the claims' NUMA nodes (--numa-memory=claim)"));

  // CPUs 8-9 are on node 1.
  PrepareClaim local = CpuClaim("local", "cpudevnuma001", "2", Cpuset("8-9"));
  ASSERT_EQ(PrepareOne(local).error, "");
  const json spec = json::parse(ReadFile(CdiPath(local.uid)), nullptr, false);
  const std::vector<std::string> args = spec["containerEdits"]["hooks"][0]["args"];
  ASSERT_GE(args.size(), 5u);
  EXPECT_EQ(args[3], "--mems");
  EXPECT_EQ(args[4], "1");
  Record("aaaa1", local.uid, "8-9", "1");
  EXPECT_TRUE(WaitMems(a1, "1")) << Mems(a1);
  EXPECT_TRUE(WaitCpus(a1, "8-9")) << Cpus(a1);
  EXPECT_EQ(Mems(PodSlice(kPodA)), "0-1");
  EXPECT_EQ(Mems(a2), "0-1");

  // A second claim of the same container whose config adds node 0 (as a CPU-less tier would be
  // added): the container gets the union.
  const json hbm = {{"apiVersion", "v1alpha1"},
                    {"cpuConfig", {{"cpuset", "10"}, {"numaMemory", {"local", "0"}}}}};
  PrepareClaim second = CpuClaim("second", "cpudevnuma001", "1", hbm);
  ASSERT_EQ(PrepareOne(second).error, "");
  const json spec2 = json::parse(ReadFile(CdiPath(second.uid)), nullptr, false);
  EXPECT_EQ(spec2["containerEdits"]["hooks"][0]["args"][4], "0-1");
  Record("aaaa1", second.uid, "10", "0-1");
  EXPECT_TRUE(WaitCpus(a1, "8-10")) << Cpus(a1);
  EXPECT_TRUE(WaitMems(a1, "0-1")) << Mems(a1);
  ASSERT_EQ(UnprepareOne(second), "");
  EXPECT_TRUE(WaitMems(a1, "1")) << Mems(a1);

  // The state keeps the choice across a restart.
  sim_.reset();
  daemon_.Kill();
  std::ofstream(cgroups_ + "/" + a1 + "/cpuset.mems") << "0-1\n";
  StartPinnedNode();
  EXPECT_TRUE(WaitMems(a1, "1")) << Mems(a1) << "\n" << daemon_.Log();

  // A node the machine lacks is refused at prepare, named.
  const json bad = {{"apiVersion", "v1alpha1"}, {"cpuConfig", {{"numaMemory", {"local", "5"}}}}};
  const std::string error = PrepareOne(CpuClaim("bad", "cpudevnuma000", "1", bad)).error;
  EXPECT_THAT(error,
              HasSubstr("numaMemory: NUMA node 5 is not on this node (its NUMA nodes: 0-1)"));

  ASSERT_EQ(UnprepareOne(local), "");
  EXPECT_TRUE(WaitMems(a1, "0-1")) << Mems(a1);
}

// --numa-memory=none: no --mems for the hook, and cpuset.mems is never written.
TEST_F(PinningTest, NumaMemoryNoneLeavesMemsAlone) {
  std::ofstream(cgroups_ + "/cpuset.mems.effective") << "0-1\n";
  StartPinnedNode({"--numa-memory", "none"});
  PrepareClaim claim = CpuClaim("plain", "cpudevnuma001", "2", Cpuset("8-9"));
  ASSERT_EQ(PrepareOne(claim).error, "");
  const json spec = json::parse(ReadFile(CdiPath(claim.uid)), nullptr, false);
  EXPECT_THAT(spec["containerEdits"]["hooks"][0]["args"].get<std::vector<std::string>>(),
              ::testing::Not(::testing::Contains("--mems")));
  const std::string a1 = Container(kPodA, "aaaa1");
  Record("aaaa1", claim.uid, "8-9", "1");
  EXPECT_TRUE(WaitCpus(a1, "8-9")) << Cpus(a1);
  EXPECT_EQ(Mems(a1), "");
  EXPECT_EQ(Mems("kubepods.slice"), "");
  EXPECT_THAT(daemon_.Log(), HasSubstr("memory left alone (--numa-memory=none)"));
}

TEST_F(PinningTest, WithoutACpusetControllerTheDaemonRefusesToStart) {
  StartDaemon({"--enforce", "cgroup", "--cgroup-root", dirs_.root + "/nothing-here", "--hook-dir",
               dirs_.root + "/hook"});
  EXPECT_NE(daemon_.WaitExit(), 0);
  EXPECT_THAT(daemon_.Log(), HasSubstr("use --enforce=none to run without CPU pinning"));
}

}  // namespace
}  // namespace topodra::testing
