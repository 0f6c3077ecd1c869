// Decide and UsableBy on fixture machines with hand-built states, and Place on its own: placement,
// Pending/Failed, preAllocation Waiting -> Available, expiry with an injected time, allocateOnce,
// deletion, restarts (tombstones), and what happens while the objects are unknown.
#include "driver/reservation/lifecycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "test/testing/fixtures.h"

namespace topodra::reservation {
namespace {

using json = nlohmann::json;

// 32 CPUs, 2 NUMA nodes/packages: node 0 is 0-7,16-23, node 1 is 8-15,24-31; siblings N, N+16.
const topology::Topology& K32() {
  static const topology::Topology* t =
      new topology::Topology(topodra::testing::LoadTopology("32em64t-2n8c2t-pci-normalio.xml"));
  return *t;
}
// 16 NVIDIA GPUs, 8 per NUMA node, 4 per PCIe root.
const topology::Topology& Dgx() {
  static const topology::Topology* t =
      new topology::Topology(topodra::testing::LoadTopology("nvidiaDGX2.xml"));
  return *t;
}

const absl::Time kCreated = absl::FromUnixSeconds(1795000000);

Object MakeObject(const std::string& name, const json& spec, json status = json::object(),
                  int64_t generation = 1) {
  json obj = {{"metadata",
               {{"name", name},
                {"uid", "uid-" + name},
                {"resourceVersion", "1"},
                {"generation", generation},
                {"creationTimestamp", Rfc3339(kCreated)}}},
              {"spec", spec},
              {"status", status}};
  absl::StatusOr<Object> o = ParseObject(obj);
  EXPECT_TRUE(o.ok()) << o.status();
  return *o;
}

json CpuSpec(const json& cpus, json extra = json::object()) {
  json spec = {{"nodeName", "n1"}, {"cpus", cpus}, {"owners", {{{"namespace", "team-a"}}}}};
  for (const auto& [k, v] : extra.items()) spec[k] = v;
  return spec;
}

state::Allocation Claim(const std::string& name, const std::string& cpus,
                        const std::string& reservation = "", const std::string& ns = "team-a") {
  state::Allocation a;
  a.kind = state::AllocationKind::kDraClaim;
  a.driver = "dra.cpu";
  a.owner = state::DraOwner("dra.cpu", "c-" + name);
  a.claim_namespace = ns;
  a.claim_name = name;
  a.cpus = *CpuSet::Parse(cpus);
  a.reservation = reservation;
  a.phase = state::Phase::kPrepared;
  return a;
}

struct World {
  state::State st;
  std::map<std::string, Object> objects;
  Inputs in;
  explicit World(const topology::Topology& topo) {
    in.topo = &topo;
    in.now = kCreated + absl::Minutes(1);
  }
  Outcome Run(bool known = true) {
    in.state = &st;
    if (known) {
      in.objects = objects;
    } else {
      in.objects.reset();
    }
    Outcome o = Decide(in);
    // As the controller applies them: what is forgotten first, its devices may be placed anew.
    for (const std::string& uid : o.remove) EXPECT_TRUE(st.RemoveReservation(uid).ok());
    for (const state::Reservation& r : o.put) EXPECT_TRUE(st.PutReservation(r).ok());
    return o;
  }
  void Add(const Object& o) { objects[o.uid] = o; }
};

TEST(DecideTest, PlacesTopologyAwareAndReportsAvailable) {
  World w(K32());
  w.Add(MakeObject("r1", CpuSpec({{"count", 4}, {"numaNode", 1}})));
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  // Two whole cores of NUMA node 1, lowest ids first.
  EXPECT_EQ(o.put[0].cpus.ToString(), "8-9,24-25");
  EXPECT_EQ(o.put[0].name, "r1");
  EXPECT_EQ(o.put[0].placed_at, Rfc3339(w.in.now));
  EXPECT_EQ(o.put[0].expires_at, "");
  json s = o.status.at("uid-r1");
  EXPECT_EQ(s["phase"], "Available");
  EXPECT_EQ(s["cpus"], "8-9,24-25");
  EXPECT_EQ(s["heldCpus"], "8-9,24-25");
  EXPECT_EQ(s["used"]["cpus"], "");
  EXPECT_EQ(s["conditions"][0]["type"], "Ready");
  EXPECT_EQ(s["conditions"][0]["status"], "True");
  EXPECT_EQ(s["observedGeneration"], 1);
  EXPECT_FALSE(o.next.has_value());

  // A second reservation never takes the first one's CPUs, and a stable world decides nothing.
  w.Add(MakeObject("r2", CpuSpec({{"count", 4}, {"numaNode", 1}})));
  o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].cpus.ToString(), "10-11,26-27");
  o = w.Run();
  EXPECT_TRUE(o.put.empty());
  EXPECT_TRUE(o.remove.empty());
}

TEST(DecideTest, OlderReservationsArePlacedFirst) {
  World w(K32());
  Object late = MakeObject("a-late", CpuSpec({{"count", 16}, {"numaNode", 0}}));
  late.created = kCreated + absl::Seconds(5);
  w.Add(late);
  w.Add(MakeObject("z-early", CpuSpec({{"count", 2}, {"numaNode", 0}})));
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].name, "z-early");
  EXPECT_EQ(o.status.at("uid-a-late")["phase"], "Pending");
  EXPECT_EQ(o.status.at("uid-a-late")["conditions"][0]["reason"], "Insufficient");
}

// Claims come and go all day; a Pending reservation's status must not follow them, or every
// prepare would rewrite it on the API server with nothing new for anyone (issue 19, churn).
TEST(DecideTest, APendingStatusStaysTheSameWhileClaimsComeAndGo) {
  auto pending = [](const std::vector<std::string>& claim_cpus, bool pre_allocation) {
    World w(K32());
    for (size_t i = 0; i < claim_cpus.size(); ++i) {
      EXPECT_TRUE(w.st.Add(Claim(absl::StrCat("c", i), claim_cpus[i])).ok());
    }
    w.Add(MakeObject("held", CpuSpec({{"cpuset", "16-19"}})));
    json spec = CpuSpec({{"count", 14}, {"numaNode", 0}});
    if (pre_allocation) spec["preAllocation"] = true;
    Object late = MakeObject("waiting", spec);
    late.created = kCreated + absl::Seconds(5);
    w.Add(late);
    Outcome o = w.Run();
    json s = o.status.at("uid-waiting");
    EXPECT_EQ(s["phase"], "Pending");
    return s["conditions"][0]["message"].get<std::string>();
  };
  const std::string one = pending({"0"}, false);
  EXPECT_EQ(one, pending({"0-5"}, false));
  EXPECT_EQ(one, pending({"1", "2-3"}, false));
  EXPECT_THAT(one, ::testing::HasSubstr("other reservations hold 4 (16-19)"));
  EXPECT_THAT(one, ::testing::Not(::testing::HasSubstr("only")));
  // With preAllocation only the other reservations keep it waiting; claims do not matter at all.
  const std::string pre = pending({}, true);
  EXPECT_EQ(pre, pending({"4-11"}, true));
  EXPECT_EQ(pre,
            "spec.cpus.count: 14 CPUs wanted in NUMA node 0, where 16 can be reserved and other "
            "reservations hold 4 (16-19); placed when enough are released");
}

TEST(DecideTest, PendingWhenBusyFailedWhenImpossibleOrInvalid) {
  World w(K32());
  ASSERT_TRUE(w.st.Add(Claim("busy", "0-7")).ok());
  w.Add(MakeObject("too-many", CpuSpec({{"count", 17}, {"numaNode", 0}})));
  w.Add(MakeObject("busy-now", CpuSpec({{"count", 10}, {"numaNode", 0}})));
  w.Add(MakeObject("offline", CpuSpec({{"cpuset", "40"}})));
  w.Add(MakeObject("no-node", CpuSpec({{"count", 1}, {"numaNode", 7}})));
  json bad = CpuSpec({{"count", 1}});
  bad.erase("owners");
  w.Add(MakeObject("invalid", bad));
  w.in.reserved_cpus = *CpuSet::Parse("31");
  w.Add(MakeObject("reserved", CpuSpec({{"cpuset", "31"}})));
  Outcome o = w.Run();
  EXPECT_TRUE(o.put.empty());
  auto reason = [&](const std::string& name) {
    json s = o.status.at("uid-" + name);
    return s["phase"].get<std::string>() + "/" + s["conditions"][0]["reason"].get<std::string>() +
           ": " + s["conditions"][0]["message"].get<std::string>();
  };
  EXPECT_EQ(reason("too-many"),
            "Failed/Impossible: spec.cpus.count: 17 CPUs wanted but NUMA node 0 has only 16 that "
            "can be reserved (0-7,16-23)");
  EXPECT_EQ(
      reason("busy-now"),
      "Pending/Insufficient: spec.cpus.count: 10 CPUs wanted in NUMA node 0 and not that many "
      "are free: 16 can be reserved there, other reservations hold 0 (none) and claims use "
      "some of the rest; placed as soon as enough are free (set preAllocation to hold CPUs "
      "in use as they are released)");
  EXPECT_EQ(reason("offline"),
            "Failed/Impossible: spec.cpus.cpuset: CPUs 40 are not online on this node (online "
            "0-31)");
  EXPECT_EQ(reason("no-node"), "Failed/Impossible: spec.cpus.numaNode: NUMA node 7 does not exist");
  EXPECT_EQ(reason("invalid"), "Failed/Invalid: spec.owners: missing");
  EXPECT_EQ(reason("reserved"),
            "Failed/Impossible: spec.cpus.cpuset: CPUs 31 are --reserved-cpus (31)");

  // Released CPUs let the pending one in at the next decision.
  ASSERT_TRUE(w.st.Remove(state::DraOwner("dra.cpu", "c-busy")).ok());
  for (const auto& [uid, s] : o.status) w.objects[uid].status = s;
  o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].name, "busy-now");
  EXPECT_EQ(o.put[0].cpus.Size(), 10);
  // Failed ones stay failed: their status says so for this generation.
  EXPECT_EQ(o.status.at("uid-too-many"), w.objects["uid-too-many"].status);
}

TEST(DecideTest, PreAllocationWaitsForBusyCpusThenIsAvailable) {
  World w(K32());
  ASSERT_TRUE(w.st.Add(Claim("holder", "8-9", "", "other")).ok());
  w.Add(MakeObject("pre", CpuSpec({{"cpuset", "8-11"}}, {{"preAllocation", true}})));
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].cpus.ToString(), "8-11");
  json s = o.status.at("uid-pre");
  EXPECT_EQ(s["phase"], "Waiting");
  EXPECT_EQ(s["heldCpus"], "10-11");
  EXPECT_EQ(s["conditions"][0]["reason"], "WaitingForRelease");
  EXPECT_THAT(s["conditions"][0]["message"].get<std::string>(),
              ::testing::HasSubstr("CPUs 8-9 are still used by claim other/holder"));

  // A new claim of someone else cannot take the freed CPUs: they are the reservation's now.
  ASSERT_TRUE(w.st.Remove(state::DraOwner("dra.cpu", "c-holder")).ok());
  EXPECT_FALSE(w.st.Add(Claim("thief", "8", "", "other")).ok());
  o = w.Run();
  EXPECT_TRUE(o.put.empty());
  s = o.status.at("uid-pre");
  EXPECT_EQ(s["phase"], "Available");
  EXPECT_EQ(s["heldCpus"], "8-11");

  // preAllocation by count takes busy CPUs only when the free ones are not enough.
  World c(K32());
  ASSERT_TRUE(c.st.Add(Claim("holder", "8-15,24-31", "", "other")).ok());
  c.Add(MakeObject("pre", CpuSpec({{"count", 2}, {"numaNode", 1}}, {{"preAllocation", true}})));
  o = c.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].cpus.ToString(), "8,24");
  EXPECT_EQ(o.status.at("uid-pre")["phase"], "Waiting");
}

TEST(DecideTest, ExpiresAtTheInjectedTime) {
  World w(K32());
  w.Add(MakeObject("short", CpuSpec({{"count", 2}}, {{"ttl", "10m"}})));
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].expires_at, Rfc3339(kCreated + absl::Minutes(10)));
  ASSERT_TRUE(o.next.has_value());
  EXPECT_EQ(*o.next, kCreated + absl::Minutes(10));
  EXPECT_EQ(o.status.at("uid-short")["expiresAt"], Rfc3339(kCreated + absl::Minutes(10)));

  w.in.now = kCreated + absl::Minutes(10) - absl::Seconds(1);
  o = w.Run();
  EXPECT_TRUE(o.put.empty());

  w.in.now = kCreated + absl::Minutes(10);
  o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_TRUE(o.put[0].ended);
  EXPECT_EQ(o.put[0].end_reason, "Expired");
  EXPECT_TRUE(o.put[0].cpus.Empty());  // nobody used it: everything goes back
  json s = o.status.at("uid-short");
  EXPECT_EQ(s["phase"], "Failed");
  EXPECT_EQ(s["conditions"][0]["reason"], "Expired");
  EXPECT_TRUE(w.st.ReservedCpus().Empty());
  // The tombstone stays while the object exists, so the reservation is never placed again.
  o = w.Run();
  EXPECT_TRUE(o.put.empty());
  EXPECT_TRUE(o.remove.empty());
  // Extending the ttl of an expired reservation does not bring it back either.
  w.objects["uid-short"] = MakeObject("short", CpuSpec({{"count", 2}}, {{"ttl", "1h"}}), s, 2);
  o = w.Run();
  EXPECT_TRUE(o.put.empty());
}

TEST(DecideTest, ExpiredBeforePlacementIsNeverPlaced) {
  World w(K32());
  w.Add(MakeObject("late", CpuSpec({{"count", 2}}, {{"expires", Rfc3339(kCreated)}})));
  Outcome o = w.Run();
  EXPECT_TRUE(o.put.empty());
  EXPECT_EQ(o.status.at("uid-late")["phase"], "Failed");
  EXPECT_EQ(o.status.at("uid-late")["conditions"][0]["reason"], "Expired");
}

TEST(DecideTest, AllocateOnceEndsAfterTheFirstOwnerAndKeepsWhatItUses) {
  World w(K32());
  w.Add(MakeObject("once", CpuSpec({{"cpuset", "8-11"}})));
  ASSERT_EQ(w.Run().put.size(), 1u);
  ASSERT_TRUE(w.st.Add(Claim("owner", "8-9", "uid-once")).ok());
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_TRUE(o.put[0].ended);
  EXPECT_EQ(o.put[0].end_reason, "Succeeded");
  json s = o.status.at("uid-once");
  EXPECT_EQ(s["phase"], "Succeeded");
  EXPECT_EQ(s["used"]["cpus"], "8-9");
  EXPECT_EQ(s["used"]["claims"][0]["name"], "owner");
  // After the grace for the claim's other driver, 10-11 go back to the shared pool.
  w.in.now += kSucceededGrace;
  o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].cpus.ToString(), "8-9");
  // The owner releases: nothing is held, the tombstone stays while the object exists.
  ASSERT_TRUE(w.st.Remove(state::DraOwner("dra.cpu", "c-owner")).ok());
  o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_TRUE(o.put[0].cpus.Empty());
  // Deleted: forgotten.
  w.objects.clear();
  o = w.Run();
  EXPECT_THAT(o.remove, ::testing::ElementsAre("uid-once"));
  EXPECT_TRUE(w.st.reservations().empty());
}

TEST(DecideTest, AllocateOnceWaitsForThePrepareToFinishAndKeepsTheRestForTheSameClaim) {
  World w(K32());
  w.Add(MakeObject("once", CpuSpec({{"cpuset", "8-11"}})));
  ASSERT_EQ(w.Run().put.size(), 1u);
  // The owner's CPU prepare is still being recorded: not a use yet (it may be undone).
  state::Allocation cpu_part = Claim("owner", "8", "uid-once");
  ASSERT_TRUE(w.st.Add(cpu_part).ok());
  w.in.in_flight = {cpu_part.owner};
  EXPECT_TRUE(w.Run().put.empty());
  cpu_part.phase = state::Phase::kPreparing;
  ASSERT_TRUE(w.st.Remove(cpu_part.owner).ok());
  ASSERT_TRUE(w.st.Add(cpu_part).ok());
  w.in.in_flight.clear();
  EXPECT_TRUE(w.Run().put.empty());  // Preparing is not a use either
  ASSERT_TRUE(w.st.SetPhase(cpu_part.owner, state::Phase::kPrepared).ok());
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].end_reason, "Succeeded");
  // The rest stays for kSucceededGrace: the same claim's other driver may still come.
  EXPECT_EQ(o.put[0].cpus.ToString(), "8-11");
  ASSERT_TRUE(o.next.has_value());
  EXPECT_EQ(*o.next, w.in.now + kSucceededGrace);
  claims::Claim same;
  same.uid = "c-owner";
  same.namespace_name = "team-a";
  same.name = "owner";
  claims::Claim other = same;
  other.uid = "c-other";
  other.name = "other";
  EXPECT_THAT(UsableBy(w.st, same), ::testing::ElementsAre("uid-once"));
  EXPECT_TRUE(UsableBy(w.st, other).empty());
  w.in.now += kSucceededGrace;
  o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].cpus.ToString(), "8");  // then only what the claim uses
}

TEST(DecideTest, StatusOfUnexpectedTypesIsNotTrusted) {
  World w(K32());
  w.Add(MakeObject(
      "odd", CpuSpec({{"count", 2}}),
      {{"phase", 7},
       {"observedGeneration", "one"},
       {"conditions",
        {{{"type", "Ready"}, {"status", true}, {"reason", 3}, {"lastTransitionTime", 5}}}}}));
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.status.at("uid-odd")["phase"], "Available");
  json too_long = CpuSpec({{"count", 2}});
  w.Add(MakeObject(std::string(64, 'a'), too_long));
  o = w.Run();
  EXPECT_EQ(o.status.at("uid-" + std::string(64, 'a'))["conditions"][0]["reason"], "Invalid");
}

TEST(DecideTest, ReusableReservationKeepsItsCpusWhileOwnersComeAndGo) {
  World w(K32());
  w.Add(MakeObject("pool", CpuSpec({{"cpuset", "8-11"}}, {{"allocateOnce", false}})));
  ASSERT_EQ(w.Run().put.size(), 1u);
  ASSERT_TRUE(w.st.Add(Claim("a", "8-9", "uid-pool")).ok());
  Outcome o = w.Run();
  EXPECT_TRUE(o.put.empty());
  EXPECT_EQ(o.status.at("uid-pool")["phase"], "Available");
  EXPECT_EQ(o.status.at("uid-pool")["used"]["cpus"], "8-9");
  ASSERT_TRUE(w.st.Remove(state::DraOwner("dra.cpu", "c-a")).ok());
  EXPECT_EQ(w.st.ReservedCpus().ToString(), "8-11");
}

TEST(DecideTest, DeletionReleasesAfterOwnersAreDone) {
  World w(K32());
  w.Add(MakeObject("del", CpuSpec({{"cpuset", "8-11"}}, {{"allocateOnce", false}})));
  ASSERT_EQ(w.Run().put.size(), 1u);
  ASSERT_TRUE(w.st.Add(Claim("a", "8", "uid-del")).ok());
  w.objects.clear();
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_TRUE(o.put[0].ended);
  EXPECT_EQ(o.put[0].end_reason, "Deleted");
  EXPECT_EQ(o.put[0].cpus.ToString(), "8");  // still used by its owner
  EXPECT_TRUE(o.remove.empty());
  ASSERT_TRUE(w.st.Remove(state::DraOwner("dra.cpu", "c-a")).ok());
  o = w.Run();
  EXPECT_THAT(o.remove, ::testing::ElementsAre("uid-del"));
}

TEST(DecideTest, UnknownObjectsPlaceNothingAndForgetNothing) {
  World w(K32());
  w.Add(MakeObject("r", CpuSpec({{"count", 2}}, {{"ttl", "10m"}})));
  ASSERT_EQ(w.Run().put.size(), 1u);
  // A restart before the API server answers: the record stays, expiry still applies.
  w.objects.clear();
  Outcome o = w.Run(/*known=*/false);
  EXPECT_TRUE(o.put.empty());
  EXPECT_TRUE(o.remove.empty());
  EXPECT_TRUE(o.status.empty());
  w.in.now = kCreated + absl::Hours(1);
  o = w.Run(/*known=*/false);
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].end_reason, "Expired");
}

TEST(DecideTest, TerminalObjectsWithoutRecordAreNotPlacedAgain) {
  World w(K32());
  json status = {{"phase", "Succeeded"}, {"observedGeneration", 1}};
  w.Add(MakeObject("done", CpuSpec({{"count", 2}}), status));
  Outcome o = w.Run();
  EXPECT_TRUE(o.put.empty());
  EXPECT_EQ(o.status.at("uid-done"), status);
}

TEST(DecideTest, DevicesLeavingTheMachineFailTheReservation) {
  World w(K32());
  w.Add(MakeObject("r", CpuSpec({{"cpuset", "30-31"}})));
  ASSERT_EQ(w.Run().put.size(), 1u);
  topology::Topology smaller = K32();
  smaller.online.Remove(31);
  smaller.offline.Add(31);
  w.in.topo = &smaller;
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].end_reason, "DevicesGone");
  EXPECT_EQ(o.status.at("uid-r")["phase"], "Failed");
}

TEST(DecideTest, KeepsTheTransitionTimeWhileTheConditionHolds) {
  World w(K32());
  w.Add(MakeObject("r", CpuSpec({{"count", 2}})));
  Outcome o = w.Run();
  json s = o.status.at("uid-r");
  w.objects["uid-r"].status = s;
  w.in.now += absl::Hours(1);
  o = w.Run();
  EXPECT_EQ(o.status.at("uid-r")["conditions"][0]["lastTransitionTime"],
            s["conditions"][0]["lastTransitionTime"]);
  EXPECT_TRUE(SameStatus(o.status.at("uid-r"), s));
}

TEST(DecideTest, NamesThePublishedDevicesOfTheReservation) {
  World w(K32());
  w.in.devices["r"] = {{"dra.cpu", "n1", "cpudevresv-r"}};
  w.Add(MakeObject("r", CpuSpec({{"count", 2}})));
  Outcome o = w.Run();
  EXPECT_EQ(o.status.at("uid-r")["devices"],
            json::parse(R"([{"driver": "dra.cpu", "pool": "n1", "device": "cpudevresv-r"}])"));
}

TEST(DecideTest, GpusClosestInThePciTreeAndNamedByDevice) {
  World w(Dgx());
  for (const topology::Gpu& g : Dgx().gpus) {
    std::string name = "gpu-" + g.pci_bus_id;
    for (char& c : name) {
      if (c == ':' || c == '.') c = '-';
    }
    w.in.gpus[name] = g.pci_bus_id;
  }
  json spec = {{"nodeName", "n1"}, {"gpus", {{"count", 2}}}, {"owners", {{{"namespace", "a"}}}}};
  w.Add(MakeObject("g", spec));
  Outcome o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_THAT(o.put[0].gpus, ::testing::ElementsAre("0000:34:00.0", "0000:36:00.0"));
  EXPECT_EQ(o.status.at("uid-g")["gpus"],
            json::parse(R"(["gpu-0000-34-00-0", "gpu-0000-36-00-0"])"));

  json named = {{"nodeName", "n1"},
                {"gpus", {{"devices", {"gpu-0000-e7-00-0", "0000:e5:00.0"}}}},
                {"owners", {{{"namespace", "a"}}}}};
  w.Add(MakeObject("named", named));
  o = w.Run();
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_THAT(o.put[0].gpus, ::testing::ElementsAre("0000:e5:00.0", "0000:e7:00.0"));
  json unknown = named;
  unknown["gpus"]["devices"] = {"gpu-0000-ff-00-0"};
  w.Add(MakeObject("unknown", unknown));
  o = w.Run();
  EXPECT_EQ(o.status.at("uid-unknown")["conditions"][0]["message"],
            "spec.gpus.devices[0]: \"gpu-0000-ff-00-0\" is not a GPU this node publishes");
}

TEST(DecideTest, NamesThatWouldShareADeviceWait) {
  World w(K32());
  w.Add(MakeObject("a.b", CpuSpec({{"count", 2}})));
  ASSERT_EQ(w.Run().put.size(), 1u);
  Object twin = MakeObject("a-b", CpuSpec({{"count", 2}}));
  twin.created += absl::Seconds(1);
  w.Add(twin);
  Outcome o = w.Run();
  EXPECT_TRUE(o.put.empty());
  EXPECT_EQ(o.status.at("uid-a-b")["phase"], "Pending");
  EXPECT_EQ(o.status.at("uid-a-b")["conditions"][0]["reason"], "NameInUse");
  w.objects.erase("uid-a.b");
  o = w.Run();  // the first is deleted (nothing in use): forgotten, the second placed
  EXPECT_THAT(o.remove, ::testing::ElementsAre("uid-a.b"));
  ASSERT_EQ(o.put.size(), 1u);
  EXPECT_EQ(o.put[0].name, "a-b");
  EXPECT_EQ(o.put[0].cpus.ToString(), "0,16");  // the devices the first one gave back
}

claims::Claim ClaimIdentity(const std::string& ns, const std::string& name) {
  claims::Claim c;
  c.uid = "c-" + name;
  c.namespace_name = ns;
  c.name = name;
  return c;
}

TEST(UsableByTest, OwnersOnlyAndAllocateOnceForOneClaim) {
  World w(K32());
  w.Add(MakeObject("once", CpuSpec({{"cpuset", "8-9"}})));
  w.Add(MakeObject("many", CpuSpec({{"cpuset", "10-11"}}, {{"allocateOnce", false}})));
  ASSERT_EQ(w.Run().put.size(), 2u);
  EXPECT_THAT(UsableBy(w.st, ClaimIdentity("team-a", "x")),
              ::testing::ElementsAre("uid-many", "uid-once"));
  EXPECT_TRUE(UsableBy(w.st, ClaimIdentity("team-b", "x")).empty());
  ASSERT_TRUE(w.st.Add(Claim("x", "8", "uid-once")).ok());
  // The claim that used it may still (its other driver prepares later); nobody else may.
  EXPECT_THAT(UsableBy(w.st, ClaimIdentity("team-a", "x")),
              ::testing::ElementsAre("uid-many", "uid-once"));
  EXPECT_THAT(UsableBy(w.st, ClaimIdentity("team-a", "y")), ::testing::ElementsAre("uid-many"));
}

}  // namespace
}  // namespace topodra::reservation

namespace topodra::reservation {
namespace {

struct PlaceCase {
  std::string name;
  std::string fixture;
  json cpus;
  std::string want;  // the CPUs, or the error message
};

class PlaceTest : public ::testing::TestWithParam<PlaceCase> {};

// Hand-worked answers on the shared topologies: whole cores, one L3, the asked NUMA node or
// socket, tightest fit, lowest ids; and the messages of what cannot be placed.
TEST_P(PlaceTest, OnFixtures) {
  const topology::Topology topo = topodra::testing::LoadTopology(GetParam().fixture);
  Spec spec;
  spec.node_name = "n1";
  json s = {{"nodeName", "n1"}, {"cpus", GetParam().cpus}, {"owners", {{{"namespace", "a"}}}}};
  absl::StatusOr<Spec> parsed = ParseSpec(s);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<Placement> p = Place(*parsed, topo, NodeView{});
  EXPECT_EQ(p.ok() ? p->cpus.ToString() : std::string(p.status().message()), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, PlaceTest,
    ::testing::Values(
        // 4 packages of 2 cores x 2 threads; package 2 is 2,6,10,14 (cores 2,10 and 6,14).
        PlaceCase{"SocketWhole", "16em64t-4s2c2t.xml", {{"count", 4}, {"socket", 2}}, "2,6,10,14"},
        PlaceCase{"SocketOneCore", "16em64t-4s2c2t.xml", {{"count", 2}, {"socket", 1}}, "1,9"},
        PlaceCase{"NoSuchSocket",
                  "16em64t-4s2c2t.xml",
                  {{"count", 2}, {"socket", 9}},
                  "spec.cpus.socket: socket 9 does not exist"},
        // 24 NUMA nodes of 8 cores x 2 threads: node 5 is 40-47 and 232-239.
        PlaceCase{"WholeNumaNode",
                  "192em64t-24n8c2t.xml",
                  {{"count", 16}, {"numaNode", 5}},
                  "40-47,232-239"},
        // 4 NUMA nodes of 24 single-thread cores, 6 per L3: one whole L3 of node 0.
        PlaceCase{"OneL3",
                  "96em64t-4n4d3ca2co-pci.xml",
                  {{"count", 6}, {"numaNode", 0}},
                  "0,4,8,12,16,20"},
        PlaceCase{"OfflineCpu",
                  "16em64t-4s2c2t-offlines.xml",
                  {{"cpuset", "2"}},
                  "spec.cpus.cpuset: CPUs 2 are not online on this node (online "
                  "0-1,3-4,6,12,15)"},
        PlaceCase{"MoreThanTheMachine",
                  "16em64t-4s2c2t-offlines.xml",
                  {{"count", 8}},
                  "spec.cpus.count: 8 CPUs wanted but the node has only 7 that can be reserved "
                  "(0-1,3-4,6,12,15)"}),
    [](const ::testing::TestParamInfo<PlaceCase>& info) { return info.param.name; });

}  // namespace
}  // namespace topodra::reservation
