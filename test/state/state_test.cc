#include "driver/state/state.h"

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/state/reservation_testing.h"

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

Allocation Owned(const std::string& uid, const std::string& cpus, const std::string& reservation,
                 std::set<std::string> gpus = {}) {
  Allocation a = Claim(uid, cpus, std::move(gpus));
  a.reservation = reservation;
  return a;
}

using state_testing::Resv;

std::vector<std::string> OwnersOf(const std::vector<const Allocation*>& allocations) {
  std::vector<std::string> owners;
  for (const Allocation* a : allocations) owners.push_back(a->owner);
  return owners;
}

TEST(StateTest, AllocationEqualityComparesReservation) {
  EXPECT_EQ(Owned("u1", "0", "r"), Owned("u1", "0", "r"));
  EXPECT_FALSE(Owned("u1", "0", "r") == Owned("u1", "0", "s"));
  EXPECT_FALSE(Owned("u1", "0", "r") == Claim("u1", "0"));
}

TEST(StateReservationTest, PutFindAndIndexes) {
  State state;
  ASSERT_TRUE(state.PutReservation(Resv("r1", "4-7", {"0000:3b:00.0"})).ok());
  ASSERT_TRUE(state.PutReservation(Resv("r2", "8,10", {"0000:af:00.0"})).ok());
  EXPECT_TRUE(state.Empty()) << "Empty counts allocations only";
  EXPECT_EQ(state.Size(), 0);
  ASSERT_NE(state.FindReservation("uid-r1"), nullptr);
  EXPECT_EQ(*state.FindReservation("uid-r1"), Resv("r1", "4-7", {"0000:3b:00.0"}));
  EXPECT_EQ(state.FindReservation("r1"), nullptr) << "keyed by uid, not name";
  std::vector<std::string> uids;
  for (const auto& [uid, r] : state.reservations()) uids.push_back(uid);
  EXPECT_EQ(uids, (std::vector<std::string>{"uid-r1", "uid-r2"}));
  EXPECT_EQ(state.ReservationOfCpu(5), std::optional<std::string>("uid-r1"));
  EXPECT_EQ(state.ReservationOfCpu(10), std::optional<std::string>("uid-r2"));
  EXPECT_EQ(state.ReservationOfCpu(9), std::nullopt);
  EXPECT_EQ(state.ReservationOfGpu("0000:af:00.0"), std::optional<std::string>("uid-r2"));
  EXPECT_EQ(state.ReservationOfGpu("0000:00:00.0"), std::nullopt);
  EXPECT_EQ(state.ReservedCpus().ToString(), "4-8,10");
  EXPECT_EQ(state.ReservedGpus(), (std::set<std::string>{"0000:3b:00.0", "0000:af:00.0"}));
  EXPECT_EQ(state.HeldCpus().ToString(), "") << "reserved is not held";

  // Upsert: r1 shrinks and ends; what it gave up is free.
  Reservation ended = Resv("r1", "4-5");
  ended.ended = true;
  ended.end_reason = "Expired";
  ASSERT_TRUE(state.PutReservation(ended).ok());
  EXPECT_EQ(state.reservations().size(), 2u);
  EXPECT_EQ(*state.FindReservation("uid-r1"), ended);
  EXPECT_EQ(state.ReservationOfCpu(6), std::nullopt);
  EXPECT_EQ(state.ReservationOfGpu("0000:3b:00.0"), std::nullopt);
  EXPECT_EQ(state.ReservedCpus().ToString(), "4-5,8,10");
  EXPECT_EQ(state.ReservedGpus(), (std::set<std::string>{"0000:af:00.0"}));
  // ... so another reservation may take it.
  EXPECT_TRUE(state.PutReservation(Resv("r3", "6-7", {"0000:3b:00.0"})).ok());

  ASSERT_TRUE(state.RemoveReservation("uid-r2").ok());
  EXPECT_TRUE(state.RemoveReservation("uid-r2").ok());
  EXPECT_TRUE(state.RemoveReservation("never-there").ok());
  EXPECT_EQ(state.FindReservation("uid-r2"), nullptr);
  EXPECT_EQ(state.ReservationOfCpu(8), std::nullopt);
  EXPECT_EQ(state.ReservationOfGpu("0000:af:00.0"), std::nullopt);
  EXPECT_EQ(state.ReservedCpus().ToString(), "4-7");
  EXPECT_EQ(state.ReservedGpus(), (std::set<std::string>{"0000:3b:00.0"}));
}

struct BadReservationCase {
  std::string name;
  Reservation reservation;
  absl::StatusCode code;
  std::string want;
};

TEST(StateReservationTest, BadAndOverlappingReservationsAreRefused) {
  Reservation no_uid = Resv("r9", "20");
  no_uid.uid.clear();
  Reservation no_name = Resv("r9", "20");
  no_name.name.clear();
  const std::vector<BadReservationCase> cases = {
      {"empty uid", no_uid, absl::StatusCode::kInvalidArgument, "Reservation \"r9\": empty uid"},
      {"empty name", no_name, absl::StatusCode::kInvalidArgument,
       "Reservation with uid \"uid-r9\": empty name"},
      {"empty gpu", Resv("r9", "20", {""}), absl::StatusCode::kInvalidArgument,
       "Reservation \"r9\": empty GPU id"},
      {"cpu overlap", Resv("r9", "0,5-6"), absl::StatusCode::kFailedPrecondition,
       "Reservation \"r9\": CPU 5 is already reserved by Reservation \"r1\""},
      {"gpu overlap", Resv("r9", "20", {"g0", "g2"}), absl::StatusCode::kFailedPrecondition,
       "Reservation \"r9\": GPU \"g2\" is already reserved by Reservation \"r2\""},
      {"upsert onto another", Resv("r1", "4-8"), absl::StatusCode::kFailedPrecondition,
       "Reservation \"r1\": CPU 8 is already reserved by Reservation \"r2\""},
  };
  for (const BadReservationCase& c : cases) {
    SCOPED_TRACE(c.name);
    State state;
    ASSERT_TRUE(state.PutReservation(Resv("r1", "4-7", {"g1"})).ok());
    ASSERT_TRUE(state.PutReservation(Resv("r2", "8-9", {"g2"})).ok());
    const State before = state;
    const absl::Status st = state.PutReservation(c.reservation);
    EXPECT_EQ(st.code(), c.code) << st;
    EXPECT_EQ(st.message(), c.want);
    EXPECT_EQ(state, before) << "a refused PutReservation must change nothing";
    EXPECT_EQ(state.ReservedCpus().ToString(), "4-9");
    EXPECT_EQ(state.ReservationOfCpu(20), std::nullopt);
  }
}

TEST(StateReservationTest, ReservationMayBePlacedOnHeldCpusAndTheHolderStays) {
  State state;
  ASSERT_TRUE(state.Add(Claim("u1", "0-3", {"g1"})).ok());
  ASSERT_TRUE(state.PutReservation(Resv("r1", "2-5", {"g1"})).ok());
  EXPECT_EQ(state.HolderOfCpu(2), std::optional<std::string>("u1"));
  EXPECT_EQ(state.ReservationOfCpu(2), std::optional<std::string>("uid-r1"));
  EXPECT_EQ(state.HolderOfGpu("g1"), std::optional<std::string>("u1"));
  // The holder is not an owner, but it was there first: adding it again changes nothing.
  EXPECT_TRUE(state.Add(Claim("u1", "0-3", {"g1"})).ok());
  EXPECT_EQ(state.Size(), 1);
  const State copy = state;
  EXPECT_EQ(copy.HolderOfCpu(3), std::optional<std::string>("u1"));
  EXPECT_EQ(copy.ReservationOfCpu(3), std::optional<std::string>("uid-r1"));
  // Once released, the CPUs are the reservation's only.
  ASSERT_TRUE(state.Remove("u1").ok());
  EXPECT_EQ(state.Add(Claim("u1", "0-3", {"g1"})).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(state.Add(Owned("u1", "0-3", "uid-r1", {"g1"})).ok());
}

struct ReservedAddCase {
  std::string name;
  Allocation allocation;
  std::string want;  // "" for accepted
};

TEST(StateReservationTest, ReservedCpusAndGpusGoOnlyToOwners) {
  Allocation plugin = Plugin("p/c/r", "1,6");
  const std::vector<ReservedAddCase> cases = {
      {"non-owner cpu", Claim("u2", "3-6"),
       "claim default/claim-u2 (uid u2): CPU 5 is reserved by Reservation \"r1\""},
      {"non-owner gpu", Claim("u2", "0", {"g0", "g1"}),
       "claim default/claim-u2 (uid u2): GPU \"g1\" is reserved by Reservation \"r1\""},
      {"owner of another reservation", Owned("u2", "8-9,5", "uid-r2"),
       "claim default/claim-u2 (uid u2): CPU 5 is reserved by Reservation \"r1\""},
      {"owner of an unknown reservation", Owned("u2", "7", "uid-gone"),
       "CPU 7 is reserved by Reservation \"r1\""},
      {"device plugin", plugin,
       "device-plugin allocation p/c/r: CPU 6 is reserved by Reservation \"r1\""},
      {"owner", Owned("u2", "5-6", "uid-r1", {"g1"}), ""},
      {"owner with cpus outside", Owned("u2", "0-1,5", "uid-r1", {"g0"}), ""},
      {"owner of r2", Owned("u2", "8", "uid-r2", {"g2"}), ""},
      {"outside every reservation", Claim("u2", "0-3,10", {"g0"}), ""},
  };
  for (const ReservedAddCase& c : cases) {
    SCOPED_TRACE(c.name);
    State state;
    ASSERT_TRUE(state.PutReservation(Resv("r1", "5-7", {"g1"})).ok());
    ASSERT_TRUE(state.PutReservation(Resv("r2", "8-9", {"g2"})).ok());
    const State before = state;
    const absl::Status st = state.Add(c.allocation);
    if (c.want.empty()) {
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_NE(state.Find(c.allocation.owner), nullptr);
      EXPECT_EQ(*state.Find(c.allocation.owner), c.allocation);
      EXPECT_EQ(state.HeldCpus(), c.allocation.cpus);
      // Adding it again is the identical allocation: still fine.
      EXPECT_TRUE(state.Add(c.allocation).ok());
      EXPECT_EQ(state.Size(), 1);
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
      EXPECT_THAT(st.message(), HasSubstr(c.want));
      EXPECT_EQ(state, before) << "a refused Add must change nothing";
      EXPECT_EQ(state.HeldCpus().ToString(), "");
    }
  }
}

TEST(StateReservationTest, HolderConflictIsReportedBeforeTheReservation) {
  State state;
  ASSERT_TRUE(state.Add(Claim("u1", "5")).ok());
  ASSERT_TRUE(state.PutReservation(Resv("r1", "5-6")).ok());
  const absl::Status st = state.Add(Claim("u2", "5-6"));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("CPU 5 is already held by claim default/claim-u1"));
}

TEST(StateReservationTest, AllocationsOfListsUsersByOwner) {
  State state;
  ASSERT_TRUE(state.PutReservation(Resv("r1", "0-7")).ok());
  ASSERT_TRUE(state.PutReservation(Resv("r2", "8-15")).ok());
  ASSERT_TRUE(state.Add(Owned("c", "0", "uid-r1")).ok());
  ASSERT_TRUE(state.Add(Owned("a", "1-2", "uid-r1")).ok());
  ASSERT_TRUE(state.Add(Owned("b", "8", "uid-r2")).ok());
  ASSERT_TRUE(state.Add(Claim("d", "20")).ok());
  EXPECT_EQ(OwnersOf(state.AllocationsOf("uid-r1")), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(OwnersOf(state.AllocationsOf("uid-r2")), (std::vector<std::string>{"b"}));
  EXPECT_TRUE(state.AllocationsOf("").empty());
  EXPECT_TRUE(state.AllocationsOf("uid-none").empty());
  ASSERT_EQ(state.AllocationsOf("uid-r1").size(), 2u);
  EXPECT_EQ(state.AllocationsOf("uid-r1")[0], state.Find("a"));

  ASSERT_TRUE(state.Remove("a").ok());
  EXPECT_EQ(OwnersOf(state.AllocationsOf("uid-r1")), (std::vector<std::string>{"c"}));
  ASSERT_TRUE(state.Remove("c").ok());
  EXPECT_TRUE(state.AllocationsOf("uid-r1").empty());
  // Allocations outlive their reservation (an ended one is removed while claims still use it).
  ASSERT_TRUE(state.RemoveReservation("uid-r2").ok());
  EXPECT_EQ(OwnersOf(state.AllocationsOf("uid-r2")), (std::vector<std::string>{"b"}));
}

State WithReservations() {
  State state;
  EXPECT_TRUE(state.PutReservation(Resv("r1", "0-7", {"g1"})).ok());
  EXPECT_TRUE(state.PutReservation(Resv("r2", "8-9")).ok());
  EXPECT_TRUE(state.Add(Owned("a", "0-1", "uid-r1", {"g1"})).ok());
  EXPECT_TRUE(state.Add(Owned("b", "2", "uid-r1")).ok());
  EXPECT_TRUE(state.Add(Claim("c", "20")).ok());
  return state;
}

void ExpectIndexesOf(const State& state) {
  EXPECT_EQ(state.ReservationOfCpu(3), std::optional<std::string>("uid-r1"));
  EXPECT_EQ(state.ReservationOfCpu(9), std::optional<std::string>("uid-r2"));
  EXPECT_EQ(state.ReservationOfGpu("g1"), std::optional<std::string>("uid-r1"));
  EXPECT_EQ(state.ReservedCpus().ToString(), "0-9");
  EXPECT_EQ(state.ReservedGpus(), (std::set<std::string>{"g1"}));
  const std::vector<const Allocation*> users = state.AllocationsOf("uid-r1");
  ASSERT_EQ(OwnersOf(users), (std::vector<std::string>{"a", "b"}));
  // Pointing into this state, not the one it was copied from.
  EXPECT_EQ(users[0], state.Find("a"));
  EXPECT_EQ(users[1], state.Find("b"));
  EXPECT_EQ(state.HolderOfCpu(20), std::optional<std::string>("c"));
  // The reservation rule still applies.
  State probe = state;
  EXPECT_EQ(probe.Add(Claim("x", "5")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(probe.PutReservation(Resv("r3", "9")).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StateReservationTest, CopyAssignAndMoveKeepIndexes) {
  auto original = std::make_unique<State>(WithReservations());
  State copied(*original);
  State assigned;
  ASSERT_TRUE(assigned.PutReservation(Resv("old", "30")).ok());
  assigned = *original;
  State moved_from(*original);
  State moved(std::move(moved_from));
  State move_assigned;
  move_assigned = State(*original);
  original.reset();  // the copies must not point into it
  for (const State* s : {&copied, &assigned, &moved, &move_assigned}) {
    SCOPED_TRACE(s == &copied ? "copied" : s == &assigned ? "assigned" : "moved");
    ExpectIndexesOf(*s);
    EXPECT_EQ(*s, WithReservations());
    EXPECT_EQ(s->FindReservation("uid-old"), nullptr);
  }
}

TEST(StateReservationTest, EqualityComparesReservations) {
  State a = WithReservations();
  State b = WithReservations();
  EXPECT_EQ(a, b);
  ASSERT_TRUE(b.RemoveReservation("uid-r2").ok());
  EXPECT_FALSE(a == b);
  Reservation r2 = Resv("r2", "8-9");
  r2.ended = true;
  ASSERT_TRUE(b.PutReservation(r2).ok());
  EXPECT_FALSE(a == b);
}

}  // namespace
}  // namespace topodra::state
