#include "driver/cgroup/pinning.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "test/testing/fixtures.h"

namespace topodra::cgroup {
namespace {

CpuSet Cpus(const std::string& text) { return *CpuSet::Parse(text); }

state::State Held() {
  state::State s;
  state::Allocation claim;
  claim.owner = state::DraOwner("dra.cpu", "uid-1");
  claim.driver = "dra.cpu";
  claim.claim_namespace = "ns";
  claim.claim_name = "c";
  claim.cpus = Cpus("4-7");
  claim.phase = state::Phase::kPrepared;
  EXPECT_TRUE(s.Add(claim).ok());
  state::Allocation dp;
  dp.kind = state::AllocationKind::kDevicePlugin;
  dp.owner = "topodra.io/cpu/0123456789abcdef";
  dp.cpus = Cpus("10-11");
  dp.phase = state::Phase::kPrepared;
  EXPECT_TRUE(s.Add(dp).ok());
  return s;
}

// The kubelet's static CPU manager: reserved CPUs are never exclusive but stay shared.
TEST(PinningTest, SharedPoolIsOnlineMinusEveryAllocationAndKeepsTheReservedCpus) {
  const Target t = BuildTarget(Cpus("0-15"), Cpus("0"), false, Held(), {}, nullptr);
  EXPECT_EQ(t.online, Cpus("0-15"));
  EXPECT_EQ(t.shared, Cpus("0-3,8-9,12-15"));
  EXPECT_TRUE(t.exclusive.empty());
}

TEST(PinningTest, StrictReservationKeepsTheReservedCpusOutOfTheSharedPool) {
  const Target t = BuildTarget(Cpus("0-15"), Cpus("0"), true, Held(), {}, nullptr);
  EXPECT_EQ(t.online, Cpus("0-15"));
  EXPECT_EQ(t.shared, Cpus("1-3,8-9,12-15"));
}

// Every unreserved CPU held: the reserved ones are the whole shared pool (empty when strict).
TEST(PinningTest, WhenClaimsHoldEveryUnreservedCpuTheReservedOnesAreTheSharedPool) {
  state::State s = Held();
  state::Allocation rest;
  rest.owner = state::DraOwner("dra.cpu", "uid-2");
  rest.driver = "dra.cpu";
  rest.claim_namespace = "ns";
  rest.claim_name = "rest";
  rest.cpus = Cpus("1-3,8-9,12-15");
  rest.phase = state::Phase::kPrepared;
  ASSERT_TRUE(s.Add(rest).ok());
  EXPECT_EQ(BuildTarget(Cpus("0-15"), Cpus("0"), false, s, {}, nullptr).shared, Cpus("0"));
  EXPECT_EQ(BuildTarget(Cpus("0-15"), Cpus("0"), true, s, {}, nullptr).shared, CpuSet{});
}

TEST(PinningTest, RecordsOfLiveClaimsPinTheirContainersAndStaleOnesAreReported) {
  const std::vector<HookRecord> records = {
      {"c1_uid-1.json", "c1", "uid-1", Cpus("4-7")},
      {"c2_0123456789abcdef.json", "c2", "0123456789abcdef", Cpus("10-11")},
      // A container with two claims gets both.
      {"c2_uid-1.json", "c2", "uid-1", Cpus("4-7")},
      {"c3_uid-gone.json", "c3", "uid-gone", Cpus("1")},
  };
  std::vector<std::string> stale;
  const Target t = BuildTarget(Cpus("0-15"), {}, false, Held(), records, &stale);
  EXPECT_EQ(t.exclusive.at("c1"), Cpus("4-7"));
  EXPECT_EQ(t.exclusive.at("c2"), Cpus("4-7,10-11"));
  EXPECT_FALSE(t.exclusive.contains("c3"));
  EXPECT_EQ(stale, std::vector<std::string>{"c3_uid-gone.json"});
}

TEST(PinningTest, ReadRecordsSkipsWhatIsNotARecord) {
  const std::string dir = ::testing::TempDir() + "/records-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/c1_u1.json")
      << R"({"container":"c1","claim":"u1","cpus":"2-3","cgroup":"k/p/c1"})";
  std::ofstream(dir + "/bad.json") << "{not json";
  std::ofstream(dir + "/nocpus.json") << R"({"container":"c","claim":"u","cpus":"x"})";
  std::ofstream(dir + "/.c9_u9.json.tmp") << R"({"container":"c9","claim":"u9","cpus":"1"})";
  std::ofstream(dir + "/notes.txt") << "hello";
  const absl::Time written = absl::FromUnixSeconds(1700000000);
  const timespec times[2] = {absl::ToTimespec(written), absl::ToTimespec(written)};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir + "/c1_u1.json").c_str(), times, 0), 0);
  const std::vector<HookRecord> got = ReadRecords(dir);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], (HookRecord{"c1_u1.json", "c1", "u1", Cpus("2-3"), "k/p/c1", written}));
  EXPECT_TRUE(ReadRecords(dir + "/missing").empty());
  std::filesystem::remove_all(dir);
}

HookRecord Record(const std::string& container, const std::string& cgroup, absl::Time written) {
  return {container + "_uid-1.json", container, "uid-1", Cpus("4-7"), cgroup, written};
}

TEST(GoneContainerRecordsTest, OnlyOldRecordsWhoseCgroupIsGone) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  const std::set<std::string> present = {"k/p/live"};
  const std::vector<HookRecord> records = {
      Record("live", "k/p/live", now - absl::Hours(1)),       // its cgroup is there
      Record("dead", "k/p/dead", now - absl::Hours(1)),       // gone for long
      Record("young", "k/p/young", now - absl::Seconds(29)),  // may still be being created
      Record("edge", "k/p/edge", now - kGoneContainerGrace),  // exactly the grace: gone
      Record("nocgroup", "", now - absl::Hours(1)),  // an older hook's record: nothing says
      Record("absolute", "/k/p/x", now - absl::Hours(1)),
      Record("dots", "k/../x", now - absl::Hours(1)),
      Record("future", "k/p/future", now + absl::Hours(1)),  // the clock went back
  };
  EXPECT_EQ(GoneContainerRecords(
                records, [&](const std::string& cg) { return present.contains(cg); }, now),
            (std::vector<std::string>{"dead_uid-1.json", "edge_uid-1.json"}));
  EXPECT_EQ(kGoneContainerGrace, absl::Seconds(30));
}

// A container of a claim that lives on crash-loops: every restart is a new container id, a new
// cgroup and a new hook record, and the old cgroup goes. The records of the gone containers are
// removed once they are older than the grace, so the count stays at what the last 30 s wrote
// (restarts every 10 s, the kubelet's shortest back-off) plus the container that never restarts,
// instead of one more per restart. The clock is the `now` given, the records' mtimes set to it.
TEST(GoneContainerRecordsTest, CrashLoopingContainerKeepsTheRecordCountBounded) {
  const std::string base = ::testing::TempDir() + "/crashloop-" + std::to_string(::getpid());
  const std::string records = base + "/records", root = base + "/cgroup";
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(records);
  const std::string pod = "kubepods.slice/kubepods-pod1.slice";
  const absl::Time start = absl::FromUnixSeconds(1700000000);
  auto write = [&](const std::string& id, absl::Time at) {
    std::filesystem::create_directories(root + "/" + pod + "/cri-containerd-" + id + ".scope");
    const std::string file = records + "/" + id + "_uid-1.json";
    std::ofstream(file) << R"({"container":")" << id << R"(","claim":"uid-1","cpus":"4-7",)"
                        << R"("cgroup":")" << pod << "/cri-containerd-" << id << R"(.scope"})";
    const timespec times[2] = {absl::ToTimespec(at), absl::ToTimespec(at)};
    ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  };
  write("steady", start);
  for (int i = 0; i < 100; ++i) {
    const absl::Time now = start + absl::Seconds(10 * i);
    if (i > 0) {
      std::filesystem::remove(root + "/" + pod + "/cri-containerd-c" + std::to_string(i - 1) +
                              ".scope");
    }
    write("c" + std::to_string(i), now);
    const std::vector<HookRecord> live = ReadLiveRecords(records, root, now);
    std::set<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(records)) {
      files.insert(e.path().filename().string());
    }
    std::set<std::string> want = {"steady_uid-1.json"};
    for (int k = std::max(0, i - 2); k <= i; ++k) want.insert(absl::StrCat("c", k, "_uid-1.json"));
    ASSERT_EQ(files, want) << "restart " << i;
    ASSERT_EQ(live.size(), want.size()) << "restart " << i;
  }
  // A tree without the pod's cgroup (the wrong hierarchy mounted, a cgroup namespace's view):
  // the containers' state is unknown there, so nothing is removed.
  std::filesystem::remove_all(root + "/" + pod);
  std::filesystem::create_directories(root + "/kubepods.slice");
  EXPECT_EQ(ReadLiveRecords(records, root, start + absl::Hours(1)).size(), 4u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(records), {}), 4);
  // The cgroup mount gone: nothing is removed.
  std::filesystem::remove_all(root);
  EXPECT_EQ(ReadLiveRecords(records, root, start + absl::Hours(1)).size(), 4u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(records), {}), 4);
  std::filesystem::remove_all(base);
}

// ---- NUMA memory (--numa-memory=claim)

// Which nodes are local to which CPUs, over the fixture machines: one node, two nodes, and
// KNL's four nodes with CPUs plus four CPU-less MCDRAM nodes that are never local to a CPU.
TEST(NumaNodesOfTest, OverFixtureTopologies) {
  struct Case {
    std::string fixture, cpus, want;
  };
  for (const Case& c : std::vector<Case>{
           {"16em64t-4s2c2t.xml", "0-15", "0"},
           {"16em64t-4s2c2t.xml", "", ""},
           {"32em64t-2n8c2t-pci-normalio.xml", "0", "0"},
           {"32em64t-2n8c2t-pci-normalio.xml", "8", "1"},
           {"32em64t-2n8c2t-pci-normalio.xml", "7-8", "0-1"},
           {"32em64t-2n8c2t-pci-normalio.xml", "16-23", "0"},
           {"64intel64-fakeKNL-SNC4-hybrid.xml", "0-3", "0"},
           {"64intel64-fakeKNL-SNC4-hybrid.xml", "4,12", "1,3"},
           {"64intel64-fakeKNL-SNC4-hybrid.xml", "0-63", "0-3"},
           // A CPU the machine lacks is on no node.
           {"64intel64-fakeKNL-SNC4-hybrid.xml", "100", ""},
       }) {
    const topology::Topology topo = testing::LoadTopology(c.fixture);
    EXPECT_EQ(NumaNodesOf(topo.numa_nodes, Cpus(c.cpus)), Cpus(c.want))
        << c.fixture << " CPUs " << c.cpus;
  }
}

TEST(ClaimMemsTest, RecordedOrLocalWithinTheRoot) {
  const topology::Topology knl = testing::LoadTopology("64intel64-fakeKNL-SNC4-hybrid.xml");
  const NumaMemory m{Cpus("0-7"), knl.numa_nodes};
  EXPECT_EQ(ClaimMems(Cpus("4-5"), {}, m), Cpus("1"));             // local
  EXPECT_EQ(ClaimMems(Cpus("4-5"), Cpus("1,5"), m), Cpus("1,5"));  // prepare chose HBM too
  // Nodes the root cpuset does not have are dropped; nothing left is "not narrowed".
  const NumaMemory small{Cpus("0-1"), knl.numa_nodes};
  EXPECT_EQ(ClaimMems(Cpus("4-5"), Cpus("1,5"), small), Cpus("1"));
  EXPECT_EQ(ClaimMems(Cpus("12"), {}, small), CpuSet{});
  // No NUMA information: nothing known.
  EXPECT_EQ(ClaimMems(Cpus("4-5"), {}, NumaMemory{Cpus("0"), {}}), CpuSet{});
}

// Two nodes: CPUs 0-7 on node 0, 8-15 on node 1; a CPU-less node 2 (CXL).
NumaMemory TwoNodesAndCxl() {
  NumaMemory m;
  m.all = Cpus("0-2");
  topology::NumaNode n0, n1, n2;
  n0.id = 0;
  n0.cpus = Cpus("0-7");
  n1.id = 1;
  n1.cpus = Cpus("8-15");
  n2.id = 2;
  m.nodes = {n0, n1, n2};
  return m;
}

TEST(PinningMemsTest, ContainersGetTheUnionOfTheirClaimsNodesEveryoneElseAll) {
  state::State s = Held();  // uid-1 on 4-7 (node 0), the device-plugin allocation on 10-11
  state::Allocation hbm;
  hbm.owner = state::DraOwner("dra.cpu", "uid-2");
  hbm.driver = "dra.cpu";
  hbm.claim_namespace = "ns";
  hbm.claim_name = "hbm";
  hbm.cpus = Cpus("12-13");
  hbm.mems = Cpus("1-2");  // recorded at prepare: local plus the CXL node
  hbm.phase = state::Phase::kPrepared;
  const absl::Status added = s.Add(hbm);
  ASSERT_TRUE(added.ok()) << added;
  const std::vector<HookRecord> records = {
      {"c1_uid-1.json", "c1", "uid-1", Cpus("4-7")},
      {"c2_0123456789abcdef.json", "c2", "0123456789abcdef", Cpus("10-11")},
      {"c3_uid-1.json", "c3", "uid-1", Cpus("4-7")},
      {"c3_uid-2.json", "c3", "uid-2", Cpus("12-13")},
  };
  const NumaMemory m = TwoNodesAndCxl();
  const Target t = BuildTarget(Cpus("0-15"), {}, false, s, records, nullptr, &m);
  EXPECT_EQ(t.all_mems, Cpus("0-2"));
  EXPECT_EQ(t.exclusive_mems.at("c1"), Cpus("0"));    // local, derived (nothing recorded)
  EXPECT_EQ(t.exclusive_mems.at("c2"), Cpus("1"));    // device plugin: local
  EXPECT_EQ(t.exclusive_mems.at("c3"), Cpus("0-2"));  // union of both claims
  EXPECT_EQ(t.exclusive_mems.size(), 3u);
  // Without memory: nothing about mems.
  const Target none = BuildTarget(Cpus("0-15"), {}, false, s, records, nullptr);
  EXPECT_TRUE(none.all_mems.Empty());
  EXPECT_TRUE(none.exclusive_mems.empty());
}

TEST(PinningMemsTest, AClaimWithUnknownNodesLeavesItsContainerOnAll) {
  state::State s = Held();
  NumaMemory m = TwoNodesAndCxl();
  m.nodes.pop_back();
  m.nodes.pop_back();  // node 1 unknown: CPUs 10-11 are on no known node
  const std::vector<HookRecord> records = {
      {"c2_0123456789abcdef.json", "c2", "0123456789abcdef", Cpus("10-11")},
      {"c2_uid-1.json", "c2", "uid-1", Cpus("4-7")},
      {"c1_uid-1.json", "c1", "uid-1", Cpus("4-7")},
  };
  const Target t = BuildTarget(Cpus("0-15"), {}, false, s, records, nullptr, &m);
  EXPECT_FALSE(t.exclusive_mems.contains("c2"));
  EXPECT_EQ(t.exclusive_mems.at("c1"), Cpus("0"));
}

}  // namespace
}  // namespace topodra::cgroup
