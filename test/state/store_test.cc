#include "driver/state/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace topodra::state {
namespace {

Allocation Claim(const std::string& uid, const std::string& cpus) {
  Allocation a;
  a.kind = AllocationKind::kDraClaim;
  a.driver = "dra.cpu";
  a.owner = DraOwner("dra.cpu", uid);
  a.claim_namespace = "default";
  a.claim_name = "claim-" + uid;
  a.cpus = *CpuSet::Parse(cpus);
  a.answer = nlohmann::json{{"devices", nlohmann::json::array()}};
  a.cdi = nlohmann::json{{"file", "x.json"}, {"spec", {{"kind", "dra.cpu/claim"}}}};
  a.phase = Phase::kPrepared;
  return a;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/topodra-store-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/state/checkpoint.json";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  StateStore::Opened OpenOk() {
    absl::StatusOr<StateStore::Opened> opened = StateStore::Open(path_);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return *std::move(opened);
  }

  std::string dir_;
  std::string path_;
};

TEST_F(StoreTest, EmptyWhenNothingOnDisk) {
  StateStore::Opened o = OpenOk();
  EXPECT_TRUE(o.loaded.Empty());
  EXPECT_EQ(o.replayed, 0);
  EXPECT_FALSE(o.dropped_torn);
}

TEST_F(StoreTest, PutAndRemoveSurviveReopen) {
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Put(Claim("a", "0-3")).ok());
    ASSERT_TRUE(o.store->Put(Claim("b", "4-5")).ok());
    ASSERT_TRUE(o.store->Remove(DraOwner("dra.cpu", "a")).ok());
    ASSERT_TRUE(o.store->Put(Claim("c", "0-1")).ok());
  }
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.replayed, 4);
  ASSERT_EQ(o.loaded.Size(), 2);
  EXPECT_EQ(*o.loaded.Find(DraOwner("dra.cpu", "b")), Claim("b", "4-5"));
  EXPECT_EQ(o.loaded.HeldCpus().ToString(), "0-1,4-5");
}

TEST_F(StoreTest, PutIsAnUpsert) {
  {
    StateStore::Opened o = OpenOk();
    Allocation a = Claim("a", "0-3");
    a.phase = Phase::kPreparing;
    ASSERT_TRUE(o.store->Put(a).ok());
    ASSERT_TRUE(o.store->Put(Claim("a", "0-3")).ok());
  }
  StateStore::Opened o = OpenOk();
  ASSERT_EQ(o.loaded.Size(), 1);
  EXPECT_EQ(o.loaded.Find(DraOwner("dra.cpu", "a"))->phase, Phase::kPrepared);
}

TEST_F(StoreTest, TornLastRecordIsDroppedAndLaterAppendsWork) {
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Put(Claim("a", "0")).ok());
    ASSERT_TRUE(o.store->Put(Claim("b", "1")).ok());
  }
  const std::string journal = path_ + ".journal";
  std::string text = ReadFile(journal);
  // A crash in the middle of the second append.
  WriteFile(journal, text.substr(0, text.size() - 7));
  {
    StateStore::Opened o = OpenOk();
    EXPECT_TRUE(o.dropped_torn);
    EXPECT_EQ(o.loaded.Size(), 1);
    ASSERT_TRUE(o.store->Put(Claim("c", "2")).ok());
  }
  StateStore::Opened o = OpenOk();
  EXPECT_FALSE(o.dropped_torn);
  EXPECT_EQ(o.loaded.HeldCpus().ToString(), "0,2");
}

TEST_F(StoreTest, CorruptRecordInTheMiddleStopsWithTheFileNamed) {
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Put(Claim("a", "0")).ok());
    ASSERT_TRUE(o.store->Put(Claim("b", "1")).ok());
  }
  const std::string journal = path_ + ".journal";
  std::string text = ReadFile(journal);
  text[20] = text[20] == 'x' ? 'y' : 'x';
  WriteFile(journal, text);
  absl::StatusOr<StateStore::Opened> o = StateStore::Open(path_);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(o.status().message().find(journal), std::string::npos) << o.status();
  EXPECT_NE(o.status().message().find("record 1"), std::string::npos) << o.status();
  EXPECT_NE(o.status().message().find("move it aside"), std::string::npos) << o.status();
}

TEST_F(StoreTest, CompactionKeepsStateAndEmptiesJournal) {
  State state;
  {
    StateStore::Opened o = OpenOk();
    for (int i = 0; i < 50; ++i) {
      Allocation a = Claim(absl::StrCat("u", i), absl::StrCat(i));
      ASSERT_TRUE(o.store->Put(a).ok());
      ASSERT_TRUE(state.Add(a).ok());
    }
    for (int i = 0; i < 50; i += 2) {
      ASSERT_TRUE(o.store->Remove(DraOwner("dra.cpu", absl::StrCat("u", i))).ok());
      ASSERT_TRUE(state.Remove(DraOwner("dra.cpu", absl::StrCat("u", i))).ok());
    }
    Allocation preparing = Claim("in-flight", "100");
    preparing.phase = Phase::kPreparing;
    State with_in_flight = state;
    ASSERT_TRUE(with_in_flight.Add(preparing).ok());
    ASSERT_TRUE(o.store->Compact(with_in_flight).ok());
    EXPECT_EQ(o.store->records(), 0);
    EXPECT_EQ(ReadFile(path_ + ".journal"), "");
    ASSERT_TRUE(o.store->Put(Claim("after", "200")).ok());
    ASSERT_TRUE(state.Add(Claim("after", "200")).ok());
  }
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.replayed, 1);
  EXPECT_EQ(o.loaded, state);  // the in-flight allocation was not written
}

TEST_F(StoreTest, CrashBetweenSnapshotAndJournalTruncationReplaysNothingTwice) {
  std::string journal_before;
  {
    StateStore::Opened o = OpenOk();
    State state;
    ASSERT_TRUE(o.store->Put(Claim("a", "0")).ok());
    ASSERT_TRUE(state.Add(Claim("a", "0")).ok());
    ASSERT_TRUE(o.store->Remove(DraOwner("dra.cpu", "a")).ok());
    ASSERT_TRUE(state.Remove(DraOwner("dra.cpu", "a")).ok());
    journal_before = ReadFile(path_ + ".journal");
    ASSERT_TRUE(o.store->Compact(state).ok());
  }
  // The journal as it was before compaction truncated it: its records are all covered.
  WriteFile(path_ + ".journal", journal_before);
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.replayed, 0);
  EXPECT_TRUE(o.loaded.Empty());
}

TEST_F(StoreTest, ShouldCompactAfterManyRecords) {
  StateStore::Opened o = OpenOk();
  for (int i = 0; i < kMinCompactRecords; ++i) {
    ASSERT_TRUE(o.store->Put(Claim("a", "0")).ok());
  }
  EXPECT_TRUE(o.store->ShouldCompact(1));
  EXPECT_FALSE(o.store->ShouldCompact(kMinCompactRecords));
}

TEST_F(StoreTest, ConcurrentAppendsAllLand) {
  constexpr int kThreads = 8;
  constexpr int kEach = 40;
  {
    StateStore::Opened o = OpenOk();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&o, t] {
        for (int i = 0; i < kEach; ++i) {
          const int cpu = t * kEach + i;
          EXPECT_TRUE(o.store->Put(Claim(absl::StrCat("u", cpu), absl::StrCat(cpu))).ok());
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.loaded.Size(), kThreads * kEach);
  EXPECT_EQ(o.loaded.HeldCpus().Size(), kThreads * kEach);
}

TEST(JournalLineTest, RoundTripAndRejects) {
  const nlohmann::json body = {{"seq", 3}, {"remove", "dra.cpu/u"}};
  std::string line = EncodeJournalLine(body);
  ASSERT_EQ(line.back(), '\n');
  line.pop_back();
  absl::StatusOr<nlohmann::json> back = DecodeJournalLine(line);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, body);
  for (const std::string& bad :
       {std::string(""), std::string("zzzzzzzz {}"), line.substr(0, line.size() - 1),
        EncodeJournalLine({{"seq", 1}}), EncodeJournalLine({{"seq", -1}, {"remove", "x"}}),
        EncodeJournalLine({{"seq", 1}, {"remove", 5}})}) {
    std::string l = bad;
    if (!l.empty() && l.back() == '\n') l.pop_back();
    EXPECT_FALSE(DecodeJournalLine(l).ok()) << l;
  }
}

}  // namespace
}  // namespace topodra::state
