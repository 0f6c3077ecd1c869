#include "driver/cgroup/pinning.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>

#include <fstream>

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

TEST(PinningTest, SharedPoolIsOnlineMinusReservedMinusEveryAllocation) {
  const Target t = BuildTarget(Cpus("0-15"), Cpus("0"), Held(), {}, nullptr);
  EXPECT_EQ(t.online, Cpus("0-15"));
  EXPECT_EQ(t.shared, Cpus("1-3,8-9,12-15"));
  EXPECT_TRUE(t.exclusive.empty());
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
  const Target t = BuildTarget(Cpus("0-15"), {}, Held(), records, &stale);
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
  const std::vector<HookRecord> got = ReadRecords(dir);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], (HookRecord{"c1_u1.json", "c1", "u1", Cpus("2-3")}));
  EXPECT_TRUE(ReadRecords(dir + "/missing").empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace topodra::cgroup
