#include "driver/state/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "test/state/reservation_testing.h"

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

using state_testing::Resv;

Allocation Owned(const std::string& uid, const std::string& cpus, const std::string& reservation) {
  Allocation a = Claim(uid, cpus);
  a.reservation = reservation;
  return a;
}

// Every file in `dir` and its bytes.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files[entry.path().filename().string()] = ReadFile(entry.path().string());
  }
  return files;
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

// Journal records carry no version: Open rewrites an older snapshot (or a missing one) as this
// version's before anything is appended, so an older topodra refuses the state rather than load
// records it cannot read. Claims still being prepared are kept; a current snapshot is left alone.
// A new state's snapshot waits for its first record (a first start syncs no file).
TEST_F(StoreTest, OpenRewritesAnOlderOrMissingSnapshotAsThisVersion) {
  const std::string tail = absl::StrCat(",\"version\":", kCheckpointVersion, "}\n");
  Allocation preparing = Claim("b", "4-5");
  preparing.phase = Phase::kPreparing;
  {
    StateStore::Opened o = OpenOk();  // a new node
    EXPECT_FALSE(std::filesystem::exists(path_));
    ASSERT_TRUE(o.store->Put(Claim("a", "0-3")).ok());
    ASSERT_TRUE(absl::EndsWith(ReadFile(path_), tail));
    EXPECT_THAT(ReadFile(path_ + ".journal"), testing::HasSubstr("\"seq\":1}"));
    ASSERT_TRUE(o.store->Put(preparing).ok());
  }
  std::string snapshot = ReadFile(path_);
  ASSERT_TRUE(absl::EndsWith(snapshot, tail));
  snapshot.replace(snapshot.size() - 3, 1, std::to_string(kCheckpointVersion - 1));
  WriteFile(path_, snapshot);  // the checksum covers the payload only
  {
    StateStore::Opened o = OpenOk();
    EXPECT_EQ(o.replayed, 2);
    EXPECT_TRUE(absl::EndsWith(ReadFile(path_), tail));
    EXPECT_EQ(ReadFile(path_ + ".journal"), "");
    ASSERT_TRUE(o.store->Put(Claim("c", "8")).ok());
  }
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.replayed, 1);  // the current snapshot stayed, with its journal
  ASSERT_EQ(o.loaded.Size(), 3);
  EXPECT_EQ(*o.loaded.Find(DraOwner("dra.cpu", "b")), preparing);
  EXPECT_EQ(*o.loaded.Find(DraOwner("dra.cpu", "a")), Claim("a", "0-3"));
}

// A new state stays without a snapshot across starts that record nothing; its first record, or a
// compaction before it, writes it once.
TEST_F(StoreTest, ANewStatesSnapshotIsWrittenOnceBeforeItsFirstRecord) {
  { OpenOk(); }
  {
    StateStore::Opened o = OpenOk();  // the journal is there, still empty
    EXPECT_FALSE(std::filesystem::exists(path_));
    ASSERT_TRUE(o.store->Put(Claim("a", "0-3")).ok());
  }
  struct stat first;
  ASSERT_EQ(::stat(path_.c_str(), &first), 0);
  {
    StateStore::Opened o = OpenOk();
    EXPECT_EQ(o.replayed, 1);
    ASSERT_EQ(o.loaded.Size(), 1);
    ASSERT_TRUE(o.store->Put(Claim("b", "4")).ok());
  }
  struct stat after;
  ASSERT_EQ(::stat(path_.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, first.st_ino) << "written once";
  EXPECT_EQ(OpenOk().replayed, 2);

  std::filesystem::remove(path_);
  std::filesystem::remove(path_ + ".journal");
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Compact(State{}).ok());
    ASSERT_TRUE(std::filesystem::exists(path_));
    ASSERT_EQ(::stat(path_.c_str(), &first), 0);
    ASSERT_TRUE(o.store->Put(Claim("c", "5")).ok());
  }
  ASSERT_EQ(::stat(path_.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, first.st_ino) << "the compaction's snapshot is this version's";
  EXPECT_EQ(OpenOk().replayed, 1);
}

// A crash between the upgrade's rewrite and the emptying of the journal leaves the version's
// snapshot at seq S beside the old journal, whose records it covers: the next start replays none,
// does not rewrite again, and numbers the next record S+1.
TEST_F(StoreTest, AJournalLeftBehindTheUpgradesRewriteIsCoveredBySnapshot) {
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Put(Claim("a", "0-3")).ok());
    ASSERT_TRUE(o.store->Put(Claim("b", "4-5")).ok());
  }
  std::string older = ReadFile(path_);
  older.replace(older.size() - 3, 1, std::to_string(kCheckpointVersion - 1));
  WriteFile(path_, older);
  const std::string journal = ReadFile(path_ + ".journal");
  ASSERT_FALSE(journal.empty());
  { ASSERT_EQ(OpenOk().replayed, 2); }  // the upgrade's rewrite
  const std::string snapshot = ReadFile(path_);
  const uint64_t s = nlohmann::json::parse(snapshot)["payload"]["seq"].get<uint64_t>();
  EXPECT_EQ(s, 2u);
  WriteFile(path_ + ".journal", journal);  // as if the crash came before the journal was emptied
  struct stat before;
  ASSERT_EQ(::stat(path_.c_str(), &before), 0);
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.replayed, 0);
  EXPECT_EQ(o.loaded.Size(), 2);
  struct stat after;
  ASSERT_EQ(::stat(path_.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);  // Save renames a new file over it: not rewritten
  EXPECT_EQ(ReadFile(path_), snapshot);
  ASSERT_TRUE(o.store->Put(Claim("c", "8")).ok());
  const std::string now = ReadFile(path_ + ".journal");
  const std::string last = now.substr(now.rfind('\n', now.size() - 2) + 1);
  EXPECT_THAT(last, testing::HasSubstr(absl::StrCat("\"seq\":", s + 1, "}")));
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

// Put prints the allocation's answer and CDI texts into its record as they are (no parse and
// print again): the record is byte for byte the one the JSON value gives, reservation, mems,
// GPUs, nulls and escapes included.
TEST_F(StoreTest, PutRecordIsTheBytesOfItsJsonValue) {
  Allocation a = Claim("a", "0-3");
  a.reservation = "resv \"1\"";
  a.mems = *CpuSet::Parse("0");
  a.gpus = {"gpu-0", "gpu-1"};
  a.cdi = nlohmann::json{{"file", "x\u00e9.json"},
                         {"metadata", nlohmann::json::array({{{"content", "{\"a\": 1}\n"}}})},
                         {"spec", {{"kind", "dra.cpu/claim"}}}};
  Allocation bare = Claim("b", "4");
  bare.answer = JsonText();
  bare.cdi = JsonText();
  // Strings that need escapes or are not ASCII, a phase still being prepared, a device-plugin
  // allocation (no claim names) holding only GPUs.
  Allocation odd = Claim("c", "5,7");
  odd.claim_namespace = "ns\t\"\\\x01";
  odd.claim_name = "caf\u00e9 \xff";
  odd.phase = Phase::kPreparing;
  Allocation plugin;
  plugin.kind = AllocationKind::kDevicePlugin;
  plugin.owner = "topodra.io/gpu/3f9a";
  plugin.gpus = {"0000:3b:00.0"};
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Put(a).ok());
    ASSERT_TRUE(o.store->Put(bare).ok());
    ASSERT_TRUE(o.store->Put(odd).ok());
    ASSERT_TRUE(o.store->Put(plugin).ok());
  }
  EXPECT_EQ(ReadFile(dir_ + "/state/checkpoint.json.journal"),
            EncodeJournalLine({{"put", AllocationToJson(a)}, {"seq", 1}}) +
                EncodeJournalLine({{"put", AllocationToJson(bare)}, {"seq", 2}}) +
                EncodeJournalLine({{"put", AllocationToJson(odd)}, {"seq", 3}}) +
                EncodeJournalLine({{"put", AllocationToJson(plugin)}, {"seq", 4}}));
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(*o.loaded.Find(a.owner), a);
  EXPECT_EQ(*o.loaded.Find(bare.owner), bare);
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
  EXPECT_NE(o.status().message().find("line 1 (byte 0)"), std::string::npos) << o.status();
  EXPECT_NE(
      o.status().message().find("move both checkpoint.json and checkpoint.json.journal aside"),
      std::string::npos)
      << o.status();
}

// Only a last line cut short (no end of line) is a torn append; a complete line that does not
// check out is damage, wherever it is, and stops the start with the file, the line and what to do.
TEST_F(StoreTest, OnlyAnIncompleteLastLineIsATornWrite) {
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Put(Claim("a", "0")).ok());
    ASSERT_TRUE(o.store->Put(Claim("b", "1")).ok());
  }
  const std::string journal = path_ + ".journal";
  const std::string good = ReadFile(journal);
  const size_t second = good.find('\n') + 1;
  const std::string line1 = good.substr(0, second);
  const std::string line2 = good.substr(second);
  auto flip = [](std::string line, size_t at) {
    line[at] = line[at] == '7' ? '8' : '7';
    return line;
  };
  struct Case {
    std::string name;
    std::string content;
    std::string error;  // "" when the start succeeds
    int loaded = 0;
    bool dropped_torn = false;
  };
  const std::vector<Case> cases = {
      {"cut mid-record", line1 + line2.substr(0, line2.size() / 2), "", 1, true},
      {"whole record but no end of line", line1 + line2.substr(0, line2.size() - 1), "", 1, true},
      {"damaged record, cut", line1 + flip(line2, 30).substr(0, 40), "", 1, true},
      {"complete last line, bad checksum", line1 + flip(line2, 30),
       "line 2 (byte " + std::to_string(line1.size()) + "): record checksum mismatch"},
      {"complete last line, bad checksum digits", line1 + flip(line2, 2),
       "line 2 (byte " + std::to_string(line1.size()) + "): record checksum mismatch"},
      {"complete last line, not a record", line1 + "garbage\n", "line 2 (byte "},
      {"unsynced append lost in a power cut, a later one kept",
       line1 + std::string(20, '\0') + line2.substr(20), "", 1, true},
      {"NUL bytes in the middle",
       line1.substr(0, 5) + std::string(20, '\0') + line1.substr(25) + line2, "line 1 (byte 0)"},
      {"complete last line, empty", line1 + "\n", "line 2 (byte "},
      {"bad record in the middle", flip(line1, 30) + line2, "line 1 (byte 0)"},
      {"bad record in the middle, torn end", flip(line1, 30) + line2.substr(0, 9),
       "line 1 (byte 0)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WriteFile(journal, c.content);
    absl::StatusOr<StateStore::Opened> o = StateStore::Open(path_);
    if (c.error.empty()) {
      ASSERT_TRUE(o.ok()) << o.status();
      EXPECT_EQ(o->loaded.Size(), c.loaded);
      EXPECT_EQ(o->dropped_torn, c.dropped_torn);
      EXPECT_EQ(ReadFile(journal), line1) << "the torn bytes are cut off";
      continue;
    }
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss);
    const std::string message(o.status().message());
    EXPECT_THAT(message, testing::HasSubstr(absl::StrCat("journal \"", journal, "\": ", c.error)));
    EXPECT_THAT(message, testing::HasSubstr("restore a good copy"));
    EXPECT_EQ(ReadFile(journal), c.content) << "a damaged journal is left as it is";
    absl::StatusOr<State> peeked = StateStore::Peek(path_);
    ASSERT_FALSE(peeked.ok());
    EXPECT_EQ(peeked.status(), o.status());
  }
}

TEST_F(StoreTest, NewOnlyWhenNeitherSnapshotNorJournalIsThere) {
  int asked = 0;
  auto refuse = [&]() {
    ++asked;
    return absl::FailedPreconditionError("leftovers");
  };
  absl::StatusOr<StateStore::Opened> refused = StateStore::Open(path_, refuse);
  EXPECT_EQ(refused.status(), absl::FailedPreconditionError("leftovers"));
  EXPECT_FALSE(std::filesystem::exists(path_ + ".journal")) << "a refusal leaves nothing behind";
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(OpenOk().is_new) << "a new node";
  EXPECT_FALSE(OpenOk().is_new) << "the journal Open created: a crash before the first record";
  absl::StatusOr<StateStore::Opened> again = StateStore::Open(path_, refuse);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(asked, 1) << "not asked once a journal is there";
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Put(Claim("a", "0")).ok());
    ASSERT_TRUE(o.store->Remove(DraOwner("dra.cpu", "a")).ok());
  }
  EXPECT_FALSE(OpenOk().is_new) << "records, even of an empty state";
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Compact(State{}).ok());
  }
  StateStore::Opened o = OpenOk();
  EXPECT_FALSE(o.is_new) << "a snapshot, even of an empty state";
  EXPECT_TRUE(o.loaded.Empty());
}

// A snapshot or journal removed by hand is not an empty state: whatever it held would be lost
// without a word.
TEST_F(StoreTest, LostSnapshotOrJournalIsCorruption) {
  State two;
  ASSERT_TRUE(two.Add(Claim("a", "0")).ok());
  ASSERT_TRUE(two.Add(Claim("b", "1")).ok());
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->Put(Claim("a", "0")).ok());
    ASSERT_TRUE(o.store->Put(Claim("b", "1")).ok());
    ASSERT_TRUE(o.store->Compact(two).ok());
    ASSERT_TRUE(o.store->Put(Claim("c", "2")).ok());
  }
  const std::string journal = path_ + ".journal";
  const std::string snapshot = ReadFile(path_);
  const std::string records = ReadFile(journal);

  std::filesystem::remove(path_);
  absl::StatusOr<StateStore::Opened> o = StateStore::Open(path_);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(o.status().message()),
              testing::HasSubstr(absl::StrCat("journal \"", journal,
                                              "\": line 1 (byte 0): sequence number 3 but the "
                                              "snapshot \"",
                                              path_, "\" is missing or empty")));
  EXPECT_EQ(StateStore::Peek(path_).status(), o.status());

  // An older snapshot is as bad as none.
  State one;
  ASSERT_TRUE(one.Add(Claim("a", "0")).ok());
  ASSERT_TRUE(Checkpoint(path_).Save(one, 1, true).ok());
  o = StateStore::Open(path_);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()),
              testing::HasSubstr("sequence number 3 but the snapshot \"" + path_ +
                                 "\" ends at sequence number 1"));

  WriteFile(path_, snapshot);
  std::filesystem::remove(journal);
  o = StateStore::Open(path_);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(o.status().message()),
              testing::HasSubstr(absl::StrCat("journal \"", journal,
                                              "\" is missing, but the "
                                              "snapshot \"",
                                              path_, "\" says one existed")));
  EXPECT_THAT(std::string(o.status().message()), testing::HasSubstr("restore a good copy"));
  EXPECT_FALSE(std::filesystem::exists(journal)) << "nothing created on the way out";

  WriteFile(journal, records);
  StateStore::Opened back = OpenOk();
  EXPECT_EQ(back.loaded.HeldCpus().ToString(), "0-2");
  EXPECT_FALSE(back.is_new);
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

TEST_F(StoreTest, ShouldCompactALargeJournalWhateverItsRecordCount) {
  StateStore::Opened o = OpenOk();
  Allocation big = Claim("a", "0");
  big.cdi = nlohmann::json{{"file", "x.json"}, {"metadata", std::string(1 << 20, 'm')}};
  // Records of a little over 1 MiB each: the 16th passes 16 MiB. Far fewer records than
  // kMinCompactRecords, and no more than the state holds.
  int records = 0;
  while (records < 20 && !o.store->ShouldCompact(kMinCompactRecords)) {
    ASSERT_TRUE(o.store->Put(big).ok());
    ++records;
  }
  EXPECT_EQ(records, static_cast<int>(kCompactJournalBytes >> 20));
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
  for (const nlohmann::json& good :
       {nlohmann::json{{"seq", 4}, {"putReservation", ReservationToJson(Resv("r", "1"))}},
        nlohmann::json{{"seq", 5}, {"removeReservation", "uid-r"}},
        nlohmann::json{{"seq", 6}, {"put", AllocationToJson(Claim("a", "0"))}}}) {
    std::string l = EncodeJournalLine(good);
    l.pop_back();
    absl::StatusOr<nlohmann::json> decoded = DecodeJournalLine(l);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, good);
  }
  for (const std::string& bad :
       {std::string(""), std::string("zzzzzzzz {}"), line.substr(0, line.size() - 1),
        EncodeJournalLine({{"seq", 1}}), EncodeJournalLine({{"seq", -1}, {"remove", "x"}}),
        EncodeJournalLine({{"seq", 1}, {"remove", 5}}),
        EncodeJournalLine({{"seq", 1}, {"put", "x"}}),
        EncodeJournalLine({{"seq", 1}, {"putReservation", "x"}}),
        EncodeJournalLine({{"seq", 1}, {"removeReservation", 5}}),
        EncodeJournalLine({{"seq", 1}, {"removeReservation", "x"}, {"remove", "y"}}),
        EncodeJournalLine({{"seq", 1}, {"reserve", "x"}})}) {
    std::string l = bad;
    if (!l.empty() && l.back() == '\n') l.pop_back();
    absl::StatusOr<nlohmann::json> decoded = DecodeJournalLine(l);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << l;
  }
}

TEST_F(StoreTest, ReservationRecordsSurviveReopen) {
  Reservation ended = Resv("r1", "0-1");
  ended.ended = true;
  ended.end_reason = "Succeeded";
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->PutReservation(Resv("r1", "0-3", {"0000:3b:00.0"})).ok());
    ASSERT_TRUE(o.store->PutReservation(Resv("r2", "4-5")).ok());
    ASSERT_TRUE(o.store->Put(Owned("a", "0-1", "uid-r1")).ok());
    ASSERT_TRUE(o.store->RemoveReservation("uid-r2").ok());
    ASSERT_TRUE(o.store->PutReservation(ended).ok());
    // r2's CPUs are free again: a new reservation may take them.
    ASSERT_TRUE(o.store->PutReservation(Resv("r3", "4-7")).ok());
    ASSERT_TRUE(o.store->RemoveReservation("never-there").ok());
    EXPECT_EQ(o.store->records(), 7);
  }
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.replayed, 7);
  State want;
  ASSERT_TRUE(want.PutReservation(ended).ok());
  ASSERT_TRUE(want.PutReservation(Resv("r3", "4-7")).ok());
  ASSERT_TRUE(want.Add(Owned("a", "0-1", "uid-r1")).ok());
  EXPECT_EQ(o.loaded, want);
  EXPECT_EQ(o.loaded.ReservedCpus().ToString(), "0-1,4-7");
  EXPECT_EQ(o.loaded.ReservedGpus(), std::set<std::string>{});
  ASSERT_EQ(o.loaded.AllocationsOf("uid-r1").size(), 1u);
  EXPECT_EQ(o.loaded.AllocationsOf("uid-r1")[0]->owner, DraOwner("dra.cpu", "a"));
}

TEST_F(StoreTest, ReplayKeepsAnAllocationRecordedAfterAReservationCoveredIt) {
  // Prepare adds the claim to the State, then a reservation is placed over its CPUs (allowed:
  // it waits for them), then the claim's record lands. Replay must accept that order.
  Allocation preparing = Claim("a", "0-3");
  preparing.phase = Phase::kPreparing;
  State live;
  ASSERT_TRUE(live.Add(preparing).ok());
  ASSERT_TRUE(live.PutReservation(Resv("r1", "2-5")).ok());
  ASSERT_TRUE(live.SetPhase(preparing.owner, Phase::kPrepared).ok());
  // A fresh Add of the same claim would be refused now.
  State probe = live;
  ASSERT_TRUE(probe.Remove(preparing.owner).ok());
  ASSERT_EQ(probe.Add(Claim("a", "0-3")).code(), absl::StatusCode::kFailedPrecondition);
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->PutReservation(Resv("r1", "2-5")).ok());
    ASSERT_TRUE(o.store->Put(Claim("a", "0-3")).ok());
  }
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.loaded, live);
  EXPECT_EQ(o.loaded.HolderOfCpu(2), std::optional<std::string>(DraOwner("dra.cpu", "a")));
  EXPECT_EQ(o.loaded.ReservationOfCpu(2), std::optional<std::string>("uid-r1"));
}

TEST_F(StoreTest, OverlappingReservationRecordIsCorruption) {
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->PutReservation(Resv("r1", "0-3")).ok());
    ASSERT_TRUE(o.store->PutReservation(Resv("r2", "3")).ok());
  }
  absl::StatusOr<StateStore::Opened> o = StateStore::Open(path_);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(o.status().message()),
              testing::AllOf(testing::HasSubstr(
                                 absl::StrCat("journal \"", path_, ".journal\": line 2 (byte ")),
                             testing::HasSubstr("): Reservation \"r2\": CPU 3 is already "
                                                "reserved by Reservation \"r1\"")));
}

TEST_F(StoreTest, CompactionKeepsReservations) {
  State state;
  ASSERT_TRUE(state.PutReservation(Resv("r1", "0-3", {"g1"})).ok());
  ASSERT_TRUE(state.PutReservation(Resv("r2", "8")).ok());
  ASSERT_TRUE(state.Add(Owned("a", "0", "uid-r1")).ok());
  ASSERT_TRUE(state.Add(Claim("b", "10")).ok());
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->PutReservation(Resv("r1", "0-3", {"g1"})).ok());
    ASSERT_TRUE(o.store->PutReservation(Resv("r2", "8")).ok());
    ASSERT_TRUE(o.store->Put(Owned("a", "0", "uid-r1")).ok());
    ASSERT_TRUE(o.store->Put(Claim("b", "10")).ok());
    ASSERT_TRUE(o.store->Compact(state).ok());
    EXPECT_EQ(ReadFile(path_ + ".journal"), "");
    ASSERT_TRUE(o.store->RemoveReservation("uid-r2").ok());
    ASSERT_TRUE(state.RemoveReservation("uid-r2").ok());
    ASSERT_TRUE(o.store->PutReservation(Resv("r4", "20")).ok());
    ASSERT_TRUE(state.PutReservation(Resv("r4", "20")).ok());
  }
  // The snapshot alone holds r1 and r2.
  absl::StatusOr<State> snapshot = Checkpoint(path_).Load();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->reservations().size(), 2u);
  EXPECT_NE(snapshot->FindReservation("uid-r2"), nullptr);
  EXPECT_EQ(*snapshot->FindReservation("uid-r1"), Resv("r1", "0-3", {"g1"}));
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.replayed, 2);
  EXPECT_EQ(o.loaded, state);
}

TEST_F(StoreTest, PeekSeesWhatALiveStoreWroteAndChangesNothing) {
  StateStore::Opened o = OpenOk();
  State want;
  ASSERT_TRUE(o.store->PutReservation(Resv("r1", "0-3", {"g1"})).ok());
  ASSERT_TRUE(want.PutReservation(Resv("r1", "0-3", {"g1"})).ok());
  ASSERT_TRUE(o.store->Put(Owned("a", "0-1", "uid-r1")).ok());
  ASSERT_TRUE(want.Add(Owned("a", "0-1", "uid-r1")).ok());
  ASSERT_TRUE(o.store->Compact(want).ok());
  ASSERT_TRUE(o.store->Put(Claim("b", "8")).ok());
  ASSERT_TRUE(want.Add(Claim("b", "8")).ok());
  ASSERT_TRUE(o.store->PutReservation(Resv("r2", "9-10")).ok());
  ASSERT_TRUE(want.PutReservation(Resv("r2", "9-10")).ok());
  ASSERT_TRUE(o.store->Put(Claim("c", "12")).ok());
  // An append in progress: the start of a record that would remove r1.
  const std::string journal = path_ + ".journal";
  const std::string torn = EncodeJournalLine({{"seq", 99}, {"removeReservation", "uid-r1"}});
  { std::ofstream(journal, std::ios::binary | std::ios::app) << torn.substr(0, torn.size() / 2); }
  ASSERT_TRUE(want.Add(Claim("c", "12")).ok());
  // Leftovers of a crashed Save that only Open may remove.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  WriteFile(dir + "/.checkpoint.json.1-0.tmp", "partial");
  const std::map<std::string, std::string> before = Snapshot(dir);
  ASSERT_EQ(before.size(), 3u);

  absl::StatusOr<State> peeked = StateStore::Peek(path_);
  ASSERT_TRUE(peeked.ok()) << peeked.status();
  EXPECT_EQ(*peeked, want);
  EXPECT_NE(peeked->FindReservation("uid-r1"), nullptr) << "the torn record is not applied";
  EXPECT_EQ(Snapshot(dir), before);

  // The live store goes on appending after the torn bytes are gone (as after a restart).
  WriteFile(journal, before.at("checkpoint.json.journal")
                         .substr(0, before.at("checkpoint.json.journal").size() - torn.size() / 2));
  ASSERT_TRUE(o.store->RemoveReservation("uid-r2").ok());
  ASSERT_TRUE(want.RemoveReservation("uid-r2").ok());
  peeked = StateStore::Peek(path_);
  ASSERT_TRUE(peeked.ok()) << peeked.status();
  EXPECT_EQ(*peeked, want);
}

TEST_F(StoreTest, PeekOfNothingIsEmptyAndCreatesNothing) {
  absl::StatusOr<State> peeked = StateStore::Peek(path_);
  ASSERT_TRUE(peeked.ok()) << peeked.status();
  EXPECT_TRUE(peeked->Empty());
  EXPECT_TRUE(peeked->reservations().empty());
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(path_).parent_path()));
}

TEST_F(StoreTest, PeekReportsCorruptionLikeOpen) {
  {
    StateStore::Opened o = OpenOk();
    ASSERT_TRUE(o.store->PutReservation(Resv("r1", "0")).ok());
    ASSERT_TRUE(o.store->Put(Claim("b", "1")).ok());
  }
  const std::string journal = path_ + ".journal";
  std::string text = ReadFile(journal);
  text[20] = text[20] == 'x' ? 'y' : 'x';
  WriteFile(journal, text);
  absl::StatusOr<State> peeked = StateStore::Peek(path_);
  ASSERT_FALSE(peeked.ok());
  EXPECT_EQ(peeked.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(peeked.status().message()),
              testing::HasSubstr(absl::StrCat("journal \"", journal, "\": line 1 (byte 0)")));
  EXPECT_EQ(ReadFile(journal), text);
}

}  // namespace
}  // namespace topodra::state

namespace topodra::state {
namespace {

// "<crc> <text>" for any text, canonical or not, with a right CRC.
std::string LineOf(const std::string& text) {
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", Crc32c(text));
  return absl::StrCat(hex, " ", text);
}

// A put record's text with `replace` applied to it (its CRC made right).
std::string PutLineWith(const Allocation& a,
                        const std::vector<std::pair<std::string, std::string>>& replace) {
  std::string text = CanonicalText(nlohmann::json{{"put", AllocationToJson(a)}, {"seq", 1}});
  for (const auto& [from, to] : replace) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  return LineOf(text);
}

// The journal's fast reader of "put" records: whenever it gives a record, it is the one the full
// parser gives (DecodeJournalLine, then AllocationFromJson): the same seq, the same allocation.
TEST(FastPutLineTest, GivesWhatTheFullParserGivesWheneverItGivesAnything) {
  Allocation all = Claim("a", "0-3");
  all.reservation = "resv-1";
  all.mems = *CpuSet::Parse("0");
  all.gpus = {"gpu-0", "gpu-1"};
  all.cdi = nlohmann::json{{"metadata", {{{"content", "{\n\t\"a\": \"\xc3\xbc\\\"\"}\x01"}}}}};
  Allocation plugin;
  plugin.kind = AllocationKind::kDevicePlugin;
  plugin.owner = "pod/c/topodra.io/cpu";
  plugin.cpus = *CpuSet::Parse("4");
  plugin.phase = Phase::kPreparing;
  const std::vector<std::pair<std::string, bool>> lines = {
      // {line, whether the fast reader must take it}
      {PutLineWith(all, {}), true},
      {PutLineWith(plugin, {}), true},
      {PutLineWith(Claim("b", "1"), {{"\"seq\":1", "\"seq\":123456789012345678"}}), true},
      {PutLineWith(Claim("b", "1"), {{"\"seq\":1", "\"seq\":0"}}), true},
      {PutLineWith(Claim("b", "1"), {{"\"seq\":1}", "\"seq\":1,\"x\":1}"}}), false},
      {PutLineWith(Claim("b", "1"), {{"\"seq\":1", "\"seq\":[1]"}}), false},
      {PutLineWith(Claim("b", "1"), {{"\"seq\":1", "\"seq\":-1"}}), false},
      {PutLineWith(Claim("b", "1"), {{"\"seq\":1", "\"seq\":1.0"}}), false},
      {PutLineWith(Claim("b", "1"), {{"\"seq\":1", "\"seq\":\"1\""}}), false},
      {PutLineWith(Claim("b", "1"), {{"\"seq\":1", "\"seq\":1234567890123456789"}}), false},
      {PutLineWith(Claim("b", "1"), {{",\"seq\":1", ""}}), false},
      {PutLineWith(Claim("b", "1"), {{"{\"put\":", "{\"put\": "}}), false},
      {PutLineWith(Claim("b", "1"), {{"\"kind\":\"DraClaim\"", "\"kind\":\"X\""}}), false},
      {PutLineWith(Claim("b", "1"), {{"\"phase\":\"Prepared\"", "\"phase\":\"Done\""}}), false},
      // Escapes: read through a tree of the small fields, still without one of the answer.
      {PutLineWith(Claim("b", "1"), {{"\"name\":\"claim-b\"", "\"name\":\"claim\\\"b\""}}), true},
      {PutLineWith(Claim("b", "1"), {{"\"gpus\":[]", "\"gpus\":[\"g\",\"g\"]"}}), false},
      {PutLineWith(Claim("b", "1"), {{"\"gpus\":[]", "\"gpus\":[\"g\\n\"]"}}), true},
      {PutLineWith(Claim("b", "1"), {{"\"cpus\":\"1\"", "\"cpus\":\"1-0\""}}), false},
      {PutLineWith(Claim("b", "1"),
                   {{"\"kind\":\"DraClaim\"", "\"junk\":1,\"kind\":\"DraClaim\""}}),
       false},
      {PutLineWith(Claim("b", "1"), {{"\"driver\":\"dra.cpu\",", ""}}), false},
      {PutLineWith(Claim("b", "1"), {{"\"cdi\":{", "\"cdi\":[{"}, {"}},\"cpus\"", "}}],\"cpus\""}}),
       false},
      {PutLineWith(Claim("b", "1"), {{"\"put\":{", "\"put\":{\"mems\":\"\","}}), false},
      {PutLineWith(all, {{"\"reservation\":\"resv-1\"", "\"reservation\":\"\""}}), false},
      {LineOf(R"({"put":[],"seq":1})"), false},
      {LineOf(R"({"remove":"x","seq":1})"), false},
      {"00000000 " +
           CanonicalText(nlohmann::json{{"put", AllocationToJson(Claim("b", "1"))}, {"seq", 1}}),
       false},
  };
  for (const auto& [line, fast_expected] : lines) {
    SCOPED_TRACE(line);
    std::optional<internal::FastPut> fast = internal::FastPutLine(line);
    EXPECT_EQ(fast.has_value(), fast_expected);
    if (!fast) continue;
    absl::StatusOr<nlohmann::json> body = DecodeJournalLine(line);
    ASSERT_TRUE(body.ok()) << body.status();
    ASSERT_TRUE(body->contains("put"));
    EXPECT_EQ((*body)["seq"].get<uint64_t>(), fast->seq);
    absl::StatusOr<Allocation> slow = AllocationFromJson((*body)["put"]);
    ASSERT_TRUE(slow.ok()) << slow.status();
    EXPECT_EQ(fast->allocation, *slow);
  }
}

// Records with a right CRC that the fast reader passes over are still refused by the full parser
// with its message, at their line.
TEST_F(StoreTest, PutRecordsTheFastReaderPassesOverAreRefusedAsBefore) {
  const struct {
    std::string name;
    std::string line;
    std::string error;
  } cases[] = {
      {"an extra member", PutLineWith(Claim("b", "1"), {{"\"seq\":1}", "\"seq\":1,\"x\":1}"}}),
       "line 1 (byte 0): record is not {\"seq\", \"put\""},
      {"seq not a number", PutLineWith(Claim("b", "1"), {{"\"seq\":1", "\"seq\":[1]"}}),
       "line 1 (byte 0): record is not {\"seq\", \"put\""},
      {"unknown kind", PutLineWith(Claim("b", "1"), {{"\"kind\":\"DraClaim\"", "\"kind\":\"X\""}}),
       "line 1 (byte 0): allocation field \"kind\": unknown kind \"X\""},
  };
  std::filesystem::create_directories(dir_ + "/state");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    WriteFile(path_ + ".journal", c.line + "\n");
    absl::StatusOr<StateStore::Opened> o = StateStore::Open(path_);
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(o.status().message()), testing::HasSubstr(c.error));
  }
  // The same line without the change opens.
  WriteFile(path_ + ".journal", PutLineWith(Claim("b", "1"), {}) + "\n");
  absl::StatusOr<StateStore::Opened> o = StateStore::Open(path_);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o->loaded.Find(Claim("b", "1").owner), Claim("b", "1"));
}

// The fuzz seeds of journal lines (test/fuzz/corpus/checkpoint_fuzz/put_*.txt) carry right CRCs:
// the ones with every field reach the fast reader, the ones it must refuse are refused by both.
TEST(FastPutLineTest, FuzzSeedsReachTheFastReader) {
  const std::string dir = TOPODRA_SOURCE_DIR "/test/fuzz/corpus/checkpoint_fuzz/";
  for (const auto& [name, ok] : {std::pair<std::string, bool>{"put_all_fields.txt", true},
                                 {"put_device_plugin.txt", true},
                                 {"put_empty_reservation.txt", false}}) {
    SCOPED_TRACE(name);
    const std::string line = ReadFile(dir + name);
    ASSERT_FALSE(line.empty());
    absl::StatusOr<nlohmann::json> body = DecodeJournalLine(line);
    ASSERT_TRUE(body.ok()) << body.status();
    EXPECT_EQ(internal::FastPutLine(line).has_value(), ok);
    EXPECT_EQ(AllocationFromJson((*body)["put"]).ok(), ok);
  }
  // A right CRC over a record with a member too many: refused by both.
  const std::string extra = ReadFile(dir + "put_extra_member.txt");
  ASSERT_FALSE(extra.empty());
  EXPECT_FALSE(internal::FastPutLine(extra).has_value());
  EXPECT_EQ(DecodeJournalLine(extra).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(DecodeJournalLine(extra).status().message()),
              testing::HasSubstr("record is not"));
}

}  // namespace
}  // namespace topodra::state

namespace topodra::state {
namespace {

// Whether this process maps `path` (a line of /proc/self/maps names it).
bool Maps(const std::string& path) {
  const std::string name = std::filesystem::canonical(path).string();
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (absl::EndsWith(line, " " + name) || absl::EndsWith(line, " " + name + " (deleted)")) {
      return true;
    }
  }
  return false;
}

// Kernels before 5.14 refuse MADV_POPULATE_READ, and Map then reads the file.
bool KernelPopulates() {
  const long page = ::sysconf(_SC_PAGESIZE);
  void* p = ::mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
#ifndef MADV_POPULATE_READ
  constexpr int MADV_POPULATE_READ = 22;
#endif
  const bool ok = ::madvise(p, page, MADV_POPULATE_READ) == 0;
  ::munmap(p, page);
  return ok;
}

// The start maps the state files, Peek reads them: both give the file's bytes and the same
// errors, and a file the mapping cannot take (empty, oversized) is read.
TEST_F(StoreTest, StateFileTextMappedOrReadGivesTheSameBytes) {
  std::filesystem::create_directories(dir_ + "/state");
  const std::string file = dir_ + "/state/some.json";
  std::string text;
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&text, "line ", i, "\n");  // several pages
  WriteFile(file, text);

  absl::StatusOr<StateFileText> mapped = StateFileText::Map(file, kMaxCheckpointBytes);
  absl::StatusOr<StateFileText> read = StateFileText::Read(file, kMaxCheckpointBytes);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(mapped->mapped(), KernelPopulates());
  EXPECT_FALSE(read->mapped());
  EXPECT_EQ(mapped->view(), text);
  EXPECT_EQ(read->view(), text);
  EXPECT_EQ(Maps(file), mapped->mapped());

  // Moved, the mapping goes with it (and is released once, when the owner is overwritten).
  StateFileText moved = *std::move(mapped);
  EXPECT_FALSE(mapped->mapped()) << "the moved-from text still holds the mapping";
  EXPECT_EQ(mapped->view(), "");
  EXPECT_EQ(moved.view(), text);
  EXPECT_EQ(moved.mapped(), KernelPopulates());
  moved = *std::move(read);
  EXPECT_EQ(moved.view(), text);
  EXPECT_FALSE(Maps(file));
  {
    absl::StatusOr<StateFileText> again = StateFileText::Map(file, kMaxCheckpointBytes);
    ASSERT_TRUE(again.ok()) << again.status();
    StateFileText owner = *std::move(again);
    EXPECT_EQ(Maps(file), owner.mapped());
  }
  EXPECT_FALSE(Maps(file)) << "destroyed, the text still maps the file";

  // Larger than the bound: read as files::ReadFileBounded does, past the bound (so the decoder
  // reports the file as oversized) but not necessarily whole.
  absl::StatusOr<StateFileText> capped = StateFileText::Map(file, 100);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_FALSE(capped->mapped());
  EXPECT_GT(capped->view().size(), 100u);
  EXPECT_EQ(capped->view(), StateFileText::Read(file, 100)->view());
  EXPECT_TRUE(absl::StartsWith(text, capped->view()));

  WriteFile(file, "");
  absl::StatusOr<StateFileText> empty = StateFileText::Map(file, kMaxCheckpointBytes);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->view(), "");

  EXPECT_TRUE(absl::IsNotFound(StateFileText::Map(file + ".missing", 100).status()));
  EXPECT_TRUE(absl::IsNotFound(StateFileText::Read(file + ".missing", 100).status()));
  // A link in the daemon's own directory is refused whichever way the file is read.
  const std::string link = dir_ + "/state/link.json";
  std::filesystem::create_symlink(file, link);
  EXPECT_EQ(StateFileText::Map(link, 100).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StateFileText::Read(link, 100).status().code(), absl::StatusCode::kFailedPrecondition);
}

// What Open maps and what Peek reads are the same state, the journal included.
TEST_F(StoreTest, OpenOfTheMappedFilesGivesWhatPeekReads) {
  {
    StateStore::Opened o = OpenOk();
    State recorded;
    for (int i = 0; i < 40; ++i) {
      const Allocation a = Claim(absl::StrCat("u", i), absl::StrCat(i));
      ASSERT_TRUE(o.store->Put(a).ok());
      ASSERT_TRUE(recorded.Add(a).ok());
      if (i == 19) {
        ASSERT_TRUE(o.store->Compact(recorded).ok());  // 20 in the snapshot
      }
    }
  }
  absl::StatusOr<State> peeked = StateStore::Peek(path_);
  ASSERT_TRUE(peeked.ok()) << peeked.status();
  StateStore::Opened o = OpenOk();
  EXPECT_EQ(o.loaded.Size(), 40);
  EXPECT_EQ(o.replayed, 20);
  EXPECT_EQ(o.loaded, *peeked);
}

// A file whose size is a whole number of pages has no zero byte after it: the text ends where
// the file does.
TEST_F(StoreTest, StateFileTextOfWholePagesIsTheFile) {
  std::filesystem::create_directories(dir_ + "/state");
  const std::string file = dir_ + "/state/pages.json";
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::string text(2 * page, 'x');
  for (std::size_t i = 0; i < text.size(); i += 97) text[i] = '\n';
  text.back() = 'z';
  WriteFile(file, text);
  absl::StatusOr<StateFileText> mapped = StateFileText::Map(file, kMaxCheckpointBytes);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(mapped->mapped(), KernelPopulates());
  ASSERT_EQ(mapped->view().size(), text.size());
  EXPECT_EQ(mapped->view(), text);
}

// A population the kernel refuses (as kernels before 5.14 refuse MADV_POPULATE_READ) is read
// instead: an unpopulated mapping would turn an I/O error into a SIGBUS.
TEST_F(StoreTest, StateFileTextReadsWhenThePopulationFails) {
  std::filesystem::create_directories(dir_ + "/state");
  const std::string file = dir_ + "/state/some.json";
  const std::string text(10000, 'y');
  WriteFile(file, text);
  absl::StatusOr<StateFileText> got =
      StateFileText::MapWithAdvice(file, kMaxCheckpointBytes, /*advice=*/-1);  // EINVAL
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->mapped());
  EXPECT_EQ(got->view(), text);
  EXPECT_FALSE(Maps(file)) << "the refused mapping is still there";
}

// Open releases the mappings of both files, the journal before it cuts a torn record off.
TEST_F(StoreTest, OpenLeavesNoStateFileMapped) {
  {
    StateStore::Opened o = OpenOk();
    State recorded;
    for (int i = 0; i < 6; ++i) {
      const Allocation a = Claim(absl::StrCat("u", i), absl::StrCat(i));
      ASSERT_TRUE(o.store->Put(a).ok());
      ASSERT_TRUE(recorded.Add(a).ok());
      if (i == 2) {
        ASSERT_TRUE(o.store->Compact(recorded).ok());
      }
    }
  }
  const std::string journal = path_ + ".journal";
  const std::string text = ReadFile(journal);
  WriteFile(journal, text.substr(0, text.size() - 7));  // a torn last record
  StateStore::Opened o = OpenOk();
  ASSERT_TRUE(o.dropped_torn);
  EXPECT_EQ(o.loaded.Size(), 5);
  EXPECT_FALSE(Maps(journal));
  EXPECT_FALSE(Maps(path_));
}

}  // namespace
}  // namespace topodra::state
