// The CPU pinning hook: its pure pieces, and the real binary on this machine's cgroup v1 cpuset
// hierarchy (root only; skipped with the reason elsewhere).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "driver/cgroup/hook_core.h"

namespace topodra::cgroup::hook {
namespace {

namespace fs = std::filesystem;

TEST(HookCoreTest, ListsParseAndPrintInTheLinuxFormat) {
  EXPECT_EQ(ParseList("0-3,8\n"), (std::set<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(ParseList(""), std::set<int>{});
  EXPECT_EQ(FormatList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatList({}), "");
  for (const char* bad : {"3-1", "a", "1,,2", "-1", "1-", "65536", "1 2"}) {
    EXPECT_FALSE(ParseList(bad).has_value()) << bad;
  }
}

TEST(HookCoreTest, FindsTheCpusetCgroupInProcCgroup) {
  const std::string v1 =
      "12:pids:/kubepods/burstable/pod1/abc\n"
      "5:cpu,cpuset:/kubepods/burstable/pod1/abc\n"
      "1:name=systemd:/kubepods/burstable/pod1/abc\n";
  EXPECT_EQ(CpusetCgroupOf(v1, false), "kubepods/burstable/pod1/abc");
  EXPECT_EQ(CpusetCgroupOf(v1, true), std::nullopt);
  const std::string v2 = "0::/kubepods.slice/kubepods-pod1_2.slice/cri-containerd-abc.scope\n";
  EXPECT_EQ(CpusetCgroupOf(v2, true),
            "kubepods.slice/kubepods-pod1_2.slice/cri-containerd-abc.scope");
  EXPECT_EQ(CpusetCgroupOf("0::/\n", true), std::nullopt);  // the root is never a container's
  EXPECT_EQ(CpusetCgroupOf("3:cpuset:/a/../b\n", false), std::nullopt);
  EXPECT_EQ(CpusetCgroupOf("garbage", false), std::nullopt);
}

TEST(HookCoreTest, ChainGoesFromTheTopDown) {
  EXPECT_THAT(Chain("kubepods/burstable/pod1/abc"),
              ::testing::ElementsAre("kubepods", "kubepods/burstable", "kubepods/burstable/pod1",
                                     "kubepods/burstable/pod1/abc"));
  EXPECT_THAT(Chain("a"), ::testing::ElementsAre("a"));
}

TEST(HookCoreTest, RecordIsJsonWithTheValuesEscaped) {
  EXPECT_EQ(RecordJson("c1", "u\"1", "0-1", "k/p"),
            "{\"container\":\"c1\",\"claim\":\"u\\\"1\",\"cpus\":\"0-1\",\"cgroup\":\"k/p\"}\n");
  // "mems" only when there are some.
  EXPECT_EQ(RecordJson("c1", "u1", "0-1", "k/p", "0,2"),
            "{\"container\":\"c1\",\"claim\":\"u1\",\"cpus\":\"0-1\",\"cgroup\":\"k/p\","
            "\"mems\":\"0,2\"}\n");
  EXPECT_EQ(RecordJson("c1", "u1", "0-1", "k/p", ""), RecordJson("c1", "u1", "0-1", "k/p"));
}

// A container's memory nodes are the union over its claims' records, or nothing when one of
// them does not name its nodes (a claim prepared with --numa-memory=none).
TEST(HookCoreTest, UnionMemsOverTheContainersClaims) {
  using Mems = std::optional<std::set<int>>;
  EXPECT_EQ(UnionMems({Mems({0})}), Mems({0}));
  EXPECT_EQ(UnionMems({Mems({0}), Mems({1, 4})}), Mems({0, 1, 4}));
  EXPECT_EQ(UnionMems({Mems({0}), std::nullopt}), std::nullopt);
  EXPECT_EQ(UnionMems({Mems({0}), Mems(std::set<int>{})}), std::nullopt);
  EXPECT_EQ(UnionMems({}), std::nullopt);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool Put(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value << std::flush;
  return static_cast<bool>(out);
}

// The hook binary against the real cpuset controller: a process in a pod-like cgroup whose
// parent lacks the claim's CPU ends up on exactly the claim's CPUs, the parent widened first.
TEST(HookBinaryRealHostTest, PinsARealProcessAndWidensItsParents) {
  const std::string root = "/sys/fs/cgroup/cpuset";
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to write cgroups";
  if (!fs::exists(root + "/cpuset.cpus"))
    GTEST_SKIP() << "no cgroup v1 cpuset hierarchy at " << root;
  const std::string all = Slurp(root + "/cpuset.effective_cpus").empty()
                              ? Slurp(root + "/cpuset.cpus")
                              : Slurp(root + "/cpuset.effective_cpus");
  const std::optional<std::set<int>> cpus = ParseList(all);
  if (!cpus || cpus->size() < 2) GTEST_SKIP() << "needs two CPUs in the cpuset hierarchy";
  const int first = *cpus->begin();
  const int second = *std::next(cpus->begin());
  const std::string mems = Slurp(root + "/cpuset.mems");

  const std::string top = "topodra-hook-test-" + std::to_string(::getpid());
  const std::string pod = top + "/pod";
  const std::string ctr = pod + "/ctr";
  const std::string records = ::testing::TempDir() + "/hook-records-" + std::to_string(getpid());
  // Whatever assertion ends the test, the host is left as it was: the child killed, the cgroups
  // removed bottom-up (rmdir of one that was never made fails harmlessly), the records removed.
  struct Cleanup {
    std::string root, records;
    std::vector<std::string> dirs;
    pid_t child = -1;
    ~Cleanup() {
      if (child > 0) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
      }
      for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) ::rmdir((root + "/" + *it).c_str());
      fs::remove_all(records);
    }
  } cleanup{root, records, {top, pod, ctr}};
  for (const std::string& dir : {top, pod, ctr}) {
    if (::mkdir((root + "/" + dir).c_str(), 0755) != 0) {
      GTEST_SKIP() << "cannot create cgroups under " << root << ": " << std::strerror(errno);
    }
    ASSERT_TRUE(Put(root + "/" + dir + "/cpuset.mems", mems));
    // The pod and the container start on the first CPU only: the claim wants the second.
    ASSERT_TRUE(Put(root + "/" + dir + "/cpuset.cpus",
                    dir == top ? FormatList(*cpus) : std::to_string(first)));
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    char c;
    (void)!::read(ready[0], &c, 1);
    ::pause();
    _exit(0);
  }
  cleanup.child = child;
  ASSERT_TRUE(Put(root + "/" + ctr + "/cgroup.procs", std::to_string(child)));

  const std::string state =
      "{\"ociVersion\":\"1.0.2\",\"id\":\"abc123\",\"status\":\"created\","
      "\"pid\":" +
      std::to_string(child) + ",\"bundle\":\"/b\"}";
  const std::string cmd = std::string(TOPODRA_HOOK_BINARY) + " --cpus " + std::to_string(second) +
                          " --claim uid-1 --records " + records + " --cgroup-root /sys/fs/cgroup";
  FILE* p = ::popen(cmd.c_str(), "w");
  ASSERT_NE(p, nullptr);
  std::fputs(state.c_str(), p);
  const int status = ::pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 0) << cmd;

  EXPECT_EQ(ParseList(Slurp(root + "/" + ctr + "/cpuset.cpus")), (std::set<int>{second}));
  EXPECT_EQ(ParseList(Slurp(root + "/" + pod + "/cpuset.cpus")), (std::set<int>{first, second}));
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(::sched_getaffinity(child, sizeof(mask), &mask), 0);
  EXPECT_EQ(CPU_COUNT(&mask), 1);
  EXPECT_TRUE(CPU_ISSET(second, &mask));
  EXPECT_THAT(Slurp(records + "/abc123_uid-1.json"),
              ::testing::HasSubstr("\"cpus\":\"" + std::to_string(second) + "\""));

  // A link in place of the record's temporary file: the hook (root) must not write through it.
  const std::string victim = records + "/victim";
  std::ofstream(victim) << "a root-owned file\n";
  ASSERT_EQ(::symlink(victim.c_str(), (records + "/.abc123_uid-2.json.tmp").c_str()), 0);
  const std::string linked = std::string(TOPODRA_HOOK_BINARY) + " --cpus " +
                             std::to_string(second) + " --claim uid-2 --records " + records +
                             " --cgroup-root /sys/fs/cgroup 2>" + records + "/stderr";
  p = ::popen(linked.c_str(), "w");
  ASSERT_NE(p, nullptr);
  std::fputs(state.c_str(), p);
  EXPECT_EQ(WEXITSTATUS(::pclose(p)), 1) << linked;
  EXPECT_EQ(Slurp(victim), "a root-owned file\n");
  EXPECT_THAT(Slurp(records + "/stderr"),
              ::testing::HasSubstr("open " + records +
                                   "/.abc123_uid-2.json.tmp: Too many levels "
                                   "of symbolic links"));
  EXPECT_FALSE(fs::exists(records + "/abc123_uid-2.json"));
}

// --mems on the real v1 hierarchy: the container's cpuset.mems becomes the claim's node and the
// kernel applies it to the process (Mems_allowed_list), the record names it, and a node the root
// lacks fails the hook before anything is written.
std::pair<int, std::string> RunHook(const std::string& args, long pid);

TEST(HookBinaryRealHostTest, SetsTheContainersMemoryNodes) {
  const std::string root = "/sys/fs/cgroup/cpuset";
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to write cgroups";
  if (!fs::exists(root + "/cpuset.mems")) {
    GTEST_SKIP() << "no cgroup v1 cpuset hierarchy at " << root;
  }
  const std::optional<std::set<int>> cpus = ParseList(Slurp(root + "/cpuset.cpus"));
  const std::optional<std::set<int>> mems = ParseList(Slurp(root + "/cpuset.mems"));
  if (!cpus || cpus->empty() || !mems || mems->empty()) GTEST_SKIP() << "empty root cpuset";
  const int cpu = *cpus->begin();
  const int node = *mems->rbegin();  // the last node: on a NUMA machine, a narrowing
  const int missing = *mems->rbegin() + 1;

  const std::string top = "topodra-hook-mems-test-" + std::to_string(::getpid());
  const std::string pod = top + "/pod";
  const std::string ctr = pod + "/ctr";
  const std::string records =
      ::testing::TempDir() + "/hook-mems-records-" + std::to_string(getpid());
  struct Cleanup {
    std::string root, records;
    std::vector<std::string> dirs;
    pid_t child = -1;
    ~Cleanup() {
      if (child > 0) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
      }
      for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) ::rmdir((root + "/" + *it).c_str());
      fs::remove_all(records);
    }
  } cleanup{root, records, {top, pod, ctr}};
  for (const std::string& dir : {top, pod, ctr}) {
    if (::mkdir((root + "/" + dir).c_str(), 0755) != 0) {
      GTEST_SKIP() << "cannot create cgroups under " << root << ": " << std::strerror(errno);
    }
    // v1 refuses tasks until both lists are set: mems first, as the kubelet's runtimes do.
    ASSERT_TRUE(Put(root + "/" + dir + "/cpuset.mems", FormatList(*mems)));
    ASSERT_TRUE(Put(root + "/" + dir + "/cpuset.cpus", FormatList(*cpus)));
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    _exit(0);
  }
  cleanup.child = child;
  ASSERT_TRUE(Put(root + "/" + ctr + "/cgroup.procs", std::to_string(child)));

  const std::string base = "--cpus " + std::to_string(cpu) + " --claim uid-m --records " + records +
                           " --cgroup-root /sys/fs/cgroup";
  auto [rc, out] = RunHook(base + " --mems " + std::to_string(missing), child);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("NUMA node " + std::to_string(missing) +
                                        " is not in the root cpuset"));
  EXPECT_FALSE(fs::exists(records + "/abc123_uid-m.json"));
  EXPECT_EQ(ParseList(Slurp(root + "/" + ctr + "/cpuset.mems")), mems);

  std::tie(rc, out) = RunHook(base + " --mems " + std::to_string(node), child);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(ParseList(Slurp(root + "/" + ctr + "/cpuset.mems")), (std::set<int>{node}));
  EXPECT_EQ(ParseList(Slurp(root + "/" + ctr + "/cpuset.cpus")), (std::set<int>{cpu}));
  EXPECT_EQ(ParseList(Slurp(root + "/" + pod + "/cpuset.mems")), mems);  // parents keep all
  EXPECT_THAT(Slurp("/proc/" + std::to_string(child) + "/status"),
              ::testing::HasSubstr("Mems_allowed_list:\t" + std::to_string(node) + "\n"));
  EXPECT_THAT(Slurp(records + "/abc123_uid-m.json"),
              ::testing::HasSubstr("\"mems\":\"" + std::to_string(node) + "\""));
}

// Runs the hook binary with an OCI state naming `pid`; its exit code and stderr.
std::pair<int, std::string> RunHook(const std::string& args, long pid) {
  const std::string cmd = "echo '{\"id\": \"abc123\", \"pid\": " + std::to_string(pid) + "}' | " +
                          std::string(TOPODRA_HOOK_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[512];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  return {WEXITSTATUS(::pclose(p)), out};
}

// The machine's present CPUs, as the hook reports them.
std::string PresentCpus() {
  const auto present = ParseList(Slurp("/sys/devices/system/cpu/present"));
  return present ? FormatList(*present) : "?";
}

// Fake trees: CPU 0 is present on every machine, CPU 9000 on none (the kernel's NR_CPUS is at
// most 8192), so a root cpuset of "9000" makes CPU 0 present but not usable (offline or
// isolated) and CPU 9000 absent, on any host.
class HookRootCpusetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hook-root-cpuset-" + std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/cgroup");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Args(const std::string& cpus) const {
    return "--cpus " + cpus + " --claim u --records " + dir_ + "/records --cgroup-root " + dir_ +
           "/cgroup";
  }
  std::string dir_;
};

// v1: a CPU not in the cpuset hierarchy's root fails with the CPU named (runc reports the hook's
// stderr: this is what an operator reads), before the record or any cgroup is written.
TEST_F(HookRootCpusetTest, V1CpuNotPresentAndCpuNotInTheRootAreNamed) {
  fs::create_directories(dir_ + "/cgroup/cpuset");
  std::ofstream(dir_ + "/cgroup/cpuset/cpuset.cpus") << "9000\n";
  const auto [rc, out] = RunHook(Args("0,9000-9001"), 1);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr(
                       "topodra-cpuset-hook: --cpus \"0,9000-9001\": CPU 9001 is not present on "
                       "this machine (/sys/devices/system/cpu/present has " +
                       PresentCpus() + "); CPU 0 is not in the root cpuset (" + dir_ +
                       "/cgroup/cpuset/cpuset.cpus has 9000): offline or excluded\n"));
  EXPECT_FALSE(fs::exists(dir_ + "/records"));
  EXPECT_EQ(Slurp(dir_ + "/cgroup/cpuset/cpuset.cpus"), "9000\n");
}

// v2 (the unified hierarchy: cgroup.controllers at the root, no cpuset/ directory): the root's
// cpuset.cpus.effective is what the kernel can give. An offline CPU fails the container instead
// of the kernel quietly running it on fewer CPUs than claimed.
TEST_F(HookRootCpusetTest, V2OfflineCpuFailsTheContainer) {
  std::ofstream(dir_ + "/cgroup/cgroup.controllers") << "cpuset cpu io memory pids\n";
  std::ofstream(dir_ + "/cgroup/cpuset.cpus.effective") << "9000\n";
  auto [rc, out] = RunHook(Args("0"), 1);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("--cpus \"0\": CPU 0 is not in the root cpuset (" + dir_ +
                                        "/cgroup/cpuset.cpus.effective has 9000): offline or in "
                                        "a cpuset partition\n"));
  std::tie(rc, out) = RunHook(Args("9000-9001"), 1);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("--cpus \"9000-9001\": CPU 9001 is not present on this "
                                        "machine (/sys/devices/system/cpu/present has " +
                                        PresentCpus() + ")\n"));
  EXPECT_FALSE(fs::exists(dir_ + "/records"));
}

// v2 without the root's cpuset.cpus.effective (cpuset not enabled there, an unusual mount): no
// check, the hook goes on as before this check existed (record, then the container's cgroup).
TEST_F(HookRootCpusetTest, V2WithoutTheRootFileWritesAsBefore) {
  std::ofstream(dir_ + "/cgroup/cgroup.controllers") << "cpu io memory pids\n";
  const std::optional<std::string> mine = CpusetCgroupOf(Slurp("/proc/self/cgroup"), true);
  if (!mine) {
    // In the v2 root cgroup (as here, on a hybrid host): the hook passes the check and stops at
    // the next step, which refuses the root cgroup.
    const auto [rc, out] = RunHook(Args("9000"), ::getpid());
    EXPECT_EQ(rc, 1) << out;
    EXPECT_THAT(out,
                ::testing::HasSubstr("no cpuset cgroup for pid " + std::to_string(::getpid())));
    EXPECT_FALSE(fs::exists(dir_ + "/records"));
    return;
  }
  fs::create_directories(dir_ + "/cgroup/" + *mine);
  std::ofstream(dir_ + "/cgroup/" + *mine + "/cpuset.cpus") << "";
  const auto [rc, out] = RunHook(Args("9000"), ::getpid());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(Slurp(dir_ + "/cgroup/" + *mine + "/cpuset.cpus"), "9000");
  EXPECT_THAT(Slurp(dir_ + "/records/abc123_u.json"), ::testing::HasSubstr("\"cpus\":\"9000\""));
}

// --mems: a memory node the root cpuset lacks fails the hook with the node named, before the
// record or any cgroup is written, on v1 (the root's cpuset.mems) and v2 (cpuset.mems.effective).
TEST_F(HookRootCpusetTest, MemsNotInTheRootAreNamed) {
  fs::create_directories(dir_ + "/cgroup/cpuset");
  std::ofstream(dir_ + "/cgroup/cpuset/cpuset.cpus") << PresentCpus() << "\n";
  std::ofstream(dir_ + "/cgroup/cpuset/cpuset.mems") << "0-1\n";
  auto [rc, out] = RunHook(Args("0") + " --mems 1-3", 1);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("topodra-cpuset-hook: --mems \"1-3\": NUMA node 2-3 is not "
                                        "in the root cpuset (" +
                                        dir_ +
                                        "/cgroup/cpuset/cpuset.mems has 0-1): no memory "
                                        "there, or offline\n"));
  EXPECT_FALSE(fs::exists(dir_ + "/records"));
  EXPECT_EQ(Slurp(dir_ + "/cgroup/cpuset/cpuset.mems"), "0-1\n");

  fs::remove_all(dir_ + "/cgroup/cpuset");
  std::ofstream(dir_ + "/cgroup/cgroup.controllers") << "cpuset cpu io memory pids\n";
  std::ofstream(dir_ + "/cgroup/cpuset.cpus.effective") << PresentCpus() << "\n";
  std::ofstream(dir_ + "/cgroup/cpuset.mems.effective") << "0\n";
  std::tie(rc, out) = RunHook(Args("0") + " --mems 4", 1);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("--mems \"4\": NUMA node 4 is not in the root cpuset (" +
                                        dir_ + "/cgroup/cpuset.mems.effective has 0)"));
  EXPECT_FALSE(fs::exists(dir_ + "/records"));
}

TEST_F(HookRootCpusetTest, BadMemsFailWithAMessage) {
  for (const std::string mems : {"x", "3-1", "\"\""}) {
    const auto [rc, out] = RunHook(Args("0") + " --mems " + mems, 1);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_THAT(out, ::testing::HasSubstr("is not a list of NUMA nodes")) << mems;
  }
}

TEST(HookBinaryTest, BadInputFailsWithAMessage) {
  const std::string cmd =
      std::string(TOPODRA_HOOK_BINARY) + " --cpus 1-0 --claim u --records /tmp/x 2>&1 </dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[512] = {0};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, p);
  const int status = ::pclose(p);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_THAT(std::string(buf, n), ::testing::HasSubstr("--cpus \"1-0\" is not a CPU list"));
}

}  // namespace
}  // namespace topodra::cgroup::hook
