#include "driver/state/ledger.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "test/state/reservation_testing.h"

namespace topodra::state {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Allocation Claim(const std::string& uid, const std::string& cpus) {
  Allocation a;
  a.kind = AllocationKind::kDraClaim;
  a.driver = "dra.cpu";
  a.owner = DraOwner("dra.cpu", uid);
  a.claim_namespace = "default";
  a.claim_name = "claim-" + uid;
  a.cpus = *CpuSet::Parse(cpus);
  a.answer = nlohmann::json{{"devices", nlohmann::json::array()}};
  a.phase = Phase::kPreparing;  // as the planner makes them
  return a;
}

std::string Owner(const std::string& uid) { return DraOwner("dra.cpu", uid); }

// Records what it is told, as lines ("put dra.cpu/a 0-3", "remove dra.cpu/a", ...); fails the
// calls whose line starts with `fail_prefix`; blocks in Put while `block` is set.
class FakeJournal : public Journal {
 public:
  absl::Status Put(const Allocation& a) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (block_) {
        in_put_ = true;
        cv_.notify_all();
        cv_.wait(lock, [&] { return !block_; });
      }
    }
    return Line(absl::StrCat("put ", a.owner, " ", a.cpus.ToString(), " ", PhaseName(a.phase)));
  }
  absl::Status Remove(const std::string& owner) override {
    return Line(absl::StrCat("remove ", owner));
  }
  absl::Status PutReservation(const Reservation& r) override {
    return Line(absl::StrCat("putReservation ", r.uid));
  }
  absl::Status RemoveReservation(const std::string& uid) override {
    return Line(absl::StrCat("removeReservation ", uid));
  }
  bool ShouldCompact(int) const override { return false; }
  absl::Status Compact(const State&) override { return absl::OkStatus(); }

  void FailFrom(std::string prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_prefix_ = std::move(prefix);
  }
  void Block() {
    std::lock_guard<std::mutex> lock(mu_);
    block_ = true;
  }
  void WaitInPut() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return in_put_; });
  }
  void Unblock() {
    std::lock_guard<std::mutex> lock(mu_);
    block_ = false;
    cv_.notify_all();
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  absl::Status Line(std::string line) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fail_prefix_.empty() && line.rfind(fail_prefix_, 0) == 0) {
      return absl::InternalError("append to journal: disk full");
    }
    lines_.push_back(std::move(line));
    return absl::OkStatus();
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  std::string fail_prefix_;
  bool block_ = false;
  bool in_put_ = false;
};

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto journal = std::make_unique<FakeJournal>();
    journal_ = journal.get();
    ledger_ = std::make_unique<Ledger>(std::move(journal), State{});
  }

  // Reserve + Commit of a new claim.
  void AddOk(const Allocation& a) {
    absl::StatusOr<Ledger::Txn> txn = ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(a); });
    ASSERT_TRUE(txn.ok()) << txn.status();
    ASSERT_TRUE(ledger_->Commit(*txn).ok());
  }
  Phase PhaseOf(const std::string& uid) {
    return ledger_->Read([&](const State& s) { return s.Find(Owner(uid))->phase; });
  }
  bool Has(const std::string& uid) {
    return ledger_->Read([&](const State& s) { return s.Find(Owner(uid)) != nullptr; });
  }
  bool InFlight(const std::string& uid) {
    return ledger_->ReadWithInFlight([&](const State&, const std::set<std::string>& in_flight) {
      return in_flight.contains(Owner(uid));
    });
  }

  FakeJournal* journal_ = nullptr;
  std::unique_ptr<Ledger> ledger_;
};

TEST_F(LedgerTest, ReserveHoldsInMemoryCommitRecordsAndMakesItFinal) {
  absl::StatusOr<Ledger::Txn> txn =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("a", "0-3")); });
  ASSERT_TRUE(txn.ok()) << txn.status();
  EXPECT_EQ(PhaseOf("a"), Phase::kPreparing);
  EXPECT_TRUE(InFlight("a"));
  EXPECT_TRUE(journal_->lines().empty());
  // Held: nobody else gets its CPUs meanwhile.
  absl::StatusOr<Ledger::Txn> other =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("b", "3")); });
  EXPECT_THAT(other.status().message(), HasSubstr("CPU 3"));

  ASSERT_TRUE(ledger_->Commit(*txn).ok());
  EXPECT_FALSE(txn->open());
  EXPECT_EQ(PhaseOf("a"), Phase::kPrepared);
  EXPECT_FALSE(InFlight("a"));
  EXPECT_THAT(journal_->lines(), ElementsAre("put dra.cpu/a 0-3 Prepared"));
}

TEST_F(LedgerTest, AbortUndoesTheMemoryAndRecordsNothing) {
  AddOk(Claim("a", "0-1"));
  absl::StatusOr<Ledger::Txn> txn = ledger_->Reserve([&](Ledger::Edit& e) {
    if (absl::Status st = e.Add(Claim("b", "2-3")); !st.ok()) return st;
    return e.Release(Owner("a"));
  });
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(PhaseOf("a"), Phase::kUnpreparing);
  ledger_->Abort(*txn);
  EXPECT_FALSE(Has("b"));
  EXPECT_EQ(PhaseOf("a"), Phase::kPrepared);
  EXPECT_FALSE(InFlight("a"));
  EXPECT_THAT(journal_->lines(), ElementsAre("put dra.cpu/a 0-1 Prepared"));
}

TEST_F(LedgerTest, ATxnDestroyedOpenAborts) {
  {
    absl::StatusOr<Ledger::Txn> txn =
        ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("a", "0")); });
    ASSERT_TRUE(txn.ok());
  }
  EXPECT_FALSE(Has("a"));
  EXPECT_FALSE(InFlight("a"));
}

TEST_F(LedgerTest, PlanErrorUndoesWhatThePlanChanged) {
  absl::StatusOr<Ledger::Txn> txn = ledger_->Reserve([&](Ledger::Edit& e) {
    if (absl::Status st = e.Add(Claim("a", "0")); !st.ok()) return st;
    return absl::FailedPreconditionError("no");
  });
  EXPECT_EQ(txn.status(), absl::FailedPreconditionError("no"));
  EXPECT_FALSE(Has("a"));
  EXPECT_FALSE(InFlight("a"));
}

TEST_F(LedgerTest, ReleaseKeepsTheDevicesUntilItIsRecorded) {
  AddOk(Claim("a", "0-3"));
  absl::StatusOr<Ledger::Txn> release =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Release(Owner("a")); });
  ASSERT_TRUE(release.ok());
  absl::StatusOr<Ledger::Txn> take =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("b", "0")); });
  EXPECT_FALSE(take.ok());
  // Nobody else changes it meanwhile.
  absl::StatusOr<Ledger::Txn> again =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Release(Owner("a")); });
  EXPECT_TRUE(absl::IsUnavailable(again.status())) << again.status();
  ASSERT_TRUE(ledger_->Commit(*release).ok());
  EXPECT_FALSE(Has("a"));
  AddOk(Claim("b", "0"));
  EXPECT_THAT(journal_->lines(), ElementsAre("put dra.cpu/a 0-3 Prepared", "remove dra.cpu/a",
                                             "put dra.cpu/b 0 Prepared"));
}

TEST_F(LedgerTest, HoldKeepsOthersFromChangingAnOwner) {
  AddOk(Claim("a", "0"));
  absl::StatusOr<Ledger::Txn> hold = ledger_->Reserve([&](Ledger::Edit& e) {
    e.Hold(Owner("a"));
    e.Hold(Owner("new"));
    return absl::OkStatus();
  });
  ASSERT_TRUE(hold.ok());
  EXPECT_TRUE(hold->open());
  EXPECT_FALSE(InFlight("a"));  // held, not changed
  EXPECT_TRUE(absl::IsUnavailable(
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Release(Owner("a")); }).status()));
  EXPECT_TRUE(absl::IsUnavailable(
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("new", "1")); }).status()));
  ASSERT_TRUE(ledger_->Commit(*hold).ok());  // nothing to record
  AddOk(Claim("new", "1"));
  EXPECT_THAT(journal_->lines(),
              ElementsAre("put dra.cpu/a 0 Prepared", "put dra.cpu/new 1 Prepared"));
}

TEST_F(LedgerTest, ShrinkHandsDevicesOnInOneTransaction) {
  AddOk(Claim("a", "0-3"));
  Allocation smaller = Claim("a", "0-1");
  smaller.phase = Phase::kPrepared;
  Allocation emptied = Claim("a", "0");
  emptied.cpus = CpuSet{};
  // a gives 2-3 to b; then a gives its last ones up, and aborts.
  absl::StatusOr<Ledger::Txn> txn = ledger_->Reserve([&](Ledger::Edit& e) {
    if (absl::Status st = e.Shrink(smaller); !st.ok()) return st;
    return e.Add(Claim("b", "2-3"));
  });
  ASSERT_TRUE(txn.ok()) << txn.status();
  ASSERT_TRUE(ledger_->Commit(*txn).ok());
  EXPECT_EQ(ledger_->Read([](const State& s) { return s.HeldCpus().ToString(); }), "0-3");
  txn = ledger_->Reserve([&](Ledger::Edit& e) {
    if (absl::Status st = e.Shrink(emptied); !st.ok()) return st;
    return e.Add(Claim("c", "0-1"));
  });
  ASSERT_TRUE(txn.ok()) << txn.status();
  EXPECT_FALSE(Has("a"));
  ledger_->Abort(*txn);
  EXPECT_EQ(ledger_->Read([](const State& s) { return s.Find(Owner("a"))->cpus.ToString(); }),
            "0-1");
  EXPECT_FALSE(Has("c"));
  EXPECT_THAT(journal_->lines(),
              ElementsAre("put dra.cpu/a 0-3 Prepared", "put dra.cpu/a 0-1 Prepared",
                          "put dra.cpu/b 2-3 Prepared"));
}

TEST_F(LedgerTest, FailedCommitStaysOpenUntilAbortThenRecordsTheFormerValues) {
  AddOk(Claim("a", "0-3"));
  journal_->FailFrom("remove");
  absl::StatusOr<Ledger::Txn> txn =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Release(Owner("a")); });
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(ledger_->Commit(*txn).message(), "append to journal: disk full");
  EXPECT_TRUE(txn->open());
  EXPECT_TRUE(InFlight("a"));  // the caller puts its side effects back first
  ledger_->Abort(*txn);
  EXPECT_EQ(PhaseOf("a"), Phase::kPrepared);
  EXPECT_FALSE(InFlight("a"));
  // The failed remove may have reached the disk: a is recorded again.
  EXPECT_THAT(journal_->lines(),
              ElementsAre("put dra.cpu/a 0-3 Prepared", "put dra.cpu/a 0-3 Prepared"));
}

TEST_F(LedgerTest, ReservationChangesCarryTheirLabelIntoErrors) {
  journal_->FailFrom("putReservation");
  absl::StatusOr<Ledger::Txn> txn = ledger_->Reserve([&](Ledger::Edit& e) {
    return e.PutReservation(state_testing::Resv("r1", "0-1"), "recording reservation r1");
  });
  ASSERT_TRUE(txn.ok());
  EXPECT_EQ(ledger_->Commit(*txn).message(),
            "recording reservation r1: append to journal: disk full");
  ledger_->Abort(*txn);
  EXPECT_TRUE(ledger_->Read([](const State& s) { return s.reservations().empty(); }));
}

TEST_F(LedgerTest, ReleaseAllReservationsForgetsEveryOne) {
  absl::StatusOr<Ledger::Txn> txn = ledger_->Reserve([&](Ledger::Edit& e) {
    if (absl::Status st = e.PutReservation(state_testing::Resv("r1", "0-1")); !st.ok()) return st;
    return e.PutReservation(state_testing::Resv("r2", "2"));
  });
  ASSERT_TRUE(txn.ok());
  ASSERT_TRUE(ledger_->Commit(*txn).ok());
  EXPECT_EQ(ReleaseAllReservations(*ledger_).value(), 2);
  EXPECT_TRUE(ledger_->Read([](const State& s) { return s.reservations().empty(); }));
  EXPECT_EQ(ReleaseAllReservations(*ledger_).value(), 0);
  EXPECT_THAT(journal_->lines(),
              ElementsAre("putReservation uid-r1", "putReservation uid-r2",
                          "removeReservation uid-r1", "removeReservation uid-r2"));
}

TEST_F(LedgerTest, TellsReadersWhenDevicesAreTakenAndWhenTheyAreFree) {
  const uint64_t g0 = ledger_->changes().generation();
  AddOk(Claim("a", "0"));  // taken at Reserve; no reservation, so no second change
  const uint64_t g1 = ledger_->changes().generation();
  EXPECT_EQ(g1, g0 + 1);
  absl::StatusOr<Ledger::Txn> txn =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Release(Owner("a")); });
  EXPECT_EQ(ledger_->changes().generation(), g1);  // still held
  ASSERT_TRUE(ledger_->Commit(*txn).ok());
  EXPECT_EQ(ledger_->changes().generation(), g1 + 1);  // free now
}

// A removed reservation's CPUs are free in memory at Reserve; until the removal is durable no
// other writer may plan, or an Abort would put the reservation back over someone's claim.
TEST_F(LedgerTest, AReservationRemovalKeepsOtherWritersWaitingUntilItEnds) {
  absl::StatusOr<Ledger::Txn> put = ledger_->Reserve(
      [&](Ledger::Edit& e) { return e.PutReservation(state_testing::Resv("r1", "0-1")); });
  ASSERT_TRUE(put.ok());
  ASSERT_TRUE(ledger_->Commit(*put).ok());
  absl::StatusOr<Ledger::Txn> removal =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.RemoveReservation("uid-r1"); });
  ASSERT_TRUE(removal.ok());
  auto other = std::async(std::launch::async, [&] {
    absl::StatusOr<Ledger::Txn> txn =
        ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("b", "0")); });
    return txn.status();
  });
  // Still waiting: with the removal open, CPU 0 is not anybody's to take.
  EXPECT_EQ(other.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  ledger_->Abort(*removal);  // as after a failed record: r1 holds CPUs 0-1 again
  const absl::Status planned = other.get();
  EXPECT_FALSE(planned.ok()) << "a claim took CPU 0 of reservation r1";
  EXPECT_TRUE(ledger_->Read([](const State& s) { return s.FindReservation("uid-r1") != nullptr; }));
  EXPECT_FALSE(Has("b"));
}

// The journal write (and its fdatasync) runs without the lock: readers and other writers go on
// while a commit waits for the disk.
TEST_F(LedgerTest, LockIsNotHeldDuringTheJournalWrite) {
  journal_->Block();
  std::thread writer([&] {
    absl::StatusOr<Ledger::Txn> txn =
        ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("a", "0")); });
    ASSERT_TRUE(txn.ok());
    EXPECT_TRUE(ledger_->Commit(*txn).ok());
  });
  journal_->WaitInPut();
  auto others = std::async(std::launch::async, [&] {
    const bool seen_in_flight = InFlight("a") && PhaseOf("a") == Phase::kPreparing;
    absl::StatusOr<Ledger::Txn> txn =
        ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("b", "1")); });
    return seen_in_flight && txn.ok();
  });
  const bool finished = others.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  journal_->Unblock();
  writer.join();
  ASSERT_TRUE(finished) << "a reader or writer waited for the journal write";
  EXPECT_TRUE(others.get());
  EXPECT_EQ(PhaseOf("a"), Phase::kPrepared);
  EXPECT_FALSE(Has("b"));  // aborted with its txn
}

// With the real StateStore on disk.
class LedgerStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/topodra-ledger-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/state/checkpoint.json";
  }
  void TearDown() override {
    ledger_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Opens the files (again) and makes a fresh Ledger; `compact_always` makes every commit
  // compact.
  void Open(bool compact_always = false) {
    ledger_.reset();
    absl::StatusOr<StateStore::Opened> opened = StateStore::Open(path_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    std::unique_ptr<Journal> journal = std::move(opened->store);
    if (compact_always) journal = std::make_unique<CompactAlways>(std::move(journal));
    ledger_ = std::make_unique<Ledger>(std::move(journal), std::move(opened->loaded));
  }

  // What a daemon starting now (after a crash) would load.
  State OnDisk() {
    absl::StatusOr<State> s = StateStore::Peek(path_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : State{};
  }

  class CompactAlways : public Journal {
   public:
    explicit CompactAlways(std::unique_ptr<Journal> inner) : inner_(std::move(inner)) {}
    absl::Status Put(const Allocation& a) override { return inner_->Put(a); }
    absl::Status Remove(const std::string& o) override { return inner_->Remove(o); }
    absl::Status PutReservation(const Reservation& r) override { return inner_->PutReservation(r); }
    absl::Status RemoveReservation(const std::string& u) override {
      return inner_->RemoveReservation(u);
    }
    bool ShouldCompact(int) const override { return true; }
    absl::Status Compact(const State& s) override { return inner_->Compact(s); }

   private:
    std::unique_ptr<Journal> inner_;
  };

  std::string dir_;
  std::string path_;
  std::unique_ptr<Ledger> ledger_;
};

Allocation Prepared(Allocation a) {
  a.phase = Phase::kPrepared;
  return a;
}

TEST_F(LedgerStoreTest, CrashBetweenReserveAndCommitLoadsTheCommittedState) {
  Open();
  State committed;
  for (const auto& [uid, cpus] : {std::pair{"a", "0-1"}, std::pair{"b", "2"}}) {
    absl::StatusOr<Ledger::Txn> txn =
        ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim(uid, cpus)); });
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE(ledger_->Commit(*txn).ok());
    ASSERT_TRUE(committed.Add(Prepared(Claim(uid, cpus))).ok());
  }
  // Open, not committed: a new claim and the release of a.
  absl::StatusOr<Ledger::Txn> add =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("c", "3")); });
  absl::StatusOr<Ledger::Txn> release =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Release(Owner("a")); });
  ASSERT_TRUE(add.ok() && release.ok());
  EXPECT_EQ(OnDisk(), committed);
}

// A compaction while transactions are open writes the committed state, not the memory: a crash
// right after it loads exactly what was committed, and the open ones still commit correctly.
TEST_F(LedgerStoreTest, CompactionWithOpenTransactionsSnapshotsTheCommittedState) {
  Open(/*compact_always=*/true);
  for (const auto& [uid, cpus] : {std::pair{"a", "0-1"}, std::pair{"b", "2"}}) {
    absl::StatusOr<Ledger::Txn> txn =
        ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim(uid, cpus)); });
    ASSERT_TRUE(txn.ok());
    ASSERT_TRUE(ledger_->Commit(*txn).ok());
  }
  absl::StatusOr<Ledger::Txn> add =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("c", "3")); });
  absl::StatusOr<Ledger::Txn> release =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Release(Owner("a")); });
  ASSERT_TRUE(add.ok() && release.ok());
  // This commit compacts (CompactAlways) with `add` and `release` open.
  absl::StatusOr<Ledger::Txn> d =
      ledger_->Reserve([&](Ledger::Edit& e) { return e.Add(Claim("d", "4")); });
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(ledger_->Commit(*d).ok());
  State want;
  ASSERT_TRUE(want.Add(Prepared(Claim("a", "0-1"))).ok());
  ASSERT_TRUE(want.Add(Prepared(Claim("b", "2"))).ok());
  ASSERT_TRUE(want.Add(Prepared(Claim("d", "4"))).ok());
  EXPECT_EQ(OnDisk(), want);
  EXPECT_EQ(ledger_->Copy().Find(Owner("a"))->phase, Phase::kUnpreparing);

  ASSERT_TRUE(ledger_->Commit(*release).ok());
  ledger_->Abort(*add);
  ASSERT_TRUE(want.Remove(Owner("a")).ok());
  EXPECT_EQ(OnDisk(), want);
  EXPECT_EQ(ledger_->Copy(), want);
}

// Two writers at once, each taking the lowest free CPU and giving it back: no CPU is ever held
// twice, and what is on disk at the end is what is in memory.
TEST_F(LedgerStoreTest, ConcurrentWritersNeverShareACpuAndTheDiskFollows) {
  Open();
  std::atomic<int> failures{0};
  auto writer = [&](const std::string& name) {
    for (int i = 0; i < 60; ++i) {
      const std::string uid = absl::StrCat(name, "-", i);
      absl::StatusOr<Ledger::Txn> txn = ledger_->Reserve([&](Ledger::Edit& e) {
        const CpuSet held = e.state().HeldCpus();
        int cpu = 0;
        while (held.Contains(cpu)) ++cpu;
        return e.Add(Claim(uid, absl::StrCat(cpu)));
      });
      if (!txn.ok() || !ledger_->Commit(*txn).ok()) ++failures;
      if (i % 3 == 0) continue;  // keep some
      txn = ledger_->Reserve([&](Ledger::Edit& e) { return e.Release(Owner(uid)); });
      if (!txn.ok() || !ledger_->Commit(*txn).ok()) ++failures;
    }
  };
  std::thread t1(writer, "x");
  std::thread t2(writer, "y");
  t1.join();
  t2.join();
  EXPECT_EQ(failures.load(), 0);
  const State memory = ledger_->Copy();
  EXPECT_EQ(memory.Size(), 40);
  EXPECT_EQ(memory.HeldCpus().Size(), 40);  // one CPU each: none shared
  EXPECT_EQ(OnDisk(), memory);
  Open();
  EXPECT_EQ(ledger_->Copy(), memory);
}

}  // namespace
}  // namespace topodra::state
