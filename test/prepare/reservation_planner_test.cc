// Prepare on reserved devices: owners get them (and the allocation names the reservation),
// everyone else gets a per-claim error naming the reservation, in every publishing mode.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "driver/prepare/planner.h"
#include "test/prepare/prepare_testing.h"

namespace topodra::prepare {
namespace {

using namespace topodra::prepare::testing;  // NOLINT: the shared fixtures of these tests
using ::testing::HasSubstr;

// 384 CPUs; NUMA node 1 is 8-15 and 200-207 (siblings N and N+192).
state::Reservation Placed(const std::string& name, const std::string& cpus,
                          std::set<std::string> gpus = {}, json owners = json(),
                          bool allocate_once = true) {
  state::Reservation r;
  r.uid = "uid-" + name;
  r.name = name;
  r.cpus = Cpus(cpus);
  r.gpus = std::move(gpus);
  r.placed_at = "2026-11-22T10:00:00Z";
  if (owners.is_null()) owners = json::array({{{"namespace", "team-a"}}});
  r.spec = json{{"nodeName", kNode},
                {"cpus", {{"cpuset", cpus.empty() ? "0" : cpus}}},
                {"owners", owners},
                {"allocateOnce", allocate_once}};
  return r;
}

// The CPU driver's setup when `held` is published as the daemon does.
DriverSetup CpuSetupWith(const topology::Topology& topo, Mode mode, const state::State& held) {
  return CpuSetup(topo, mode, CpuSet{}, &held);
}

json ClaimIn(const std::string& ns, const std::string& name, const std::vector<json>& results,
             const std::vector<json>& configs = {}) {
  return ClaimJson("c-" + name, ns, name, results, configs);
}

class ReservationPlanTest : public ::testing::Test {
 protected:
  const topology::Topology& topo = Load(k192);
  state::State held;
};

TEST_F(ReservationPlanTest, OwnerTakesTheReservationDeviceAndIsAccounted) {
  ASSERT_TRUE(held.PutReservation(Placed("r1", "8-11,200-203")).ok());
  const DriverSetup setup = CpuSetupWith(topo, Mode::kNuma, held);
  ASSERT_TRUE(setup.cpu_pool.devices.contains("cpudevresv-r1"));
  EXPECT_EQ(setup.cpu_pool.devices.at("cpudevresv-r1").cpus.ToString(), "8-11,200-203");
  EXPECT_EQ(setup.cpu_pool.devices.at("cpudevnuma001").cpus.ToString(), "12-15,204-207");

  absl::StatusOr<Plan> plan = PlanClaim(
      Parse(ClaimIn("team-a", "owner", {Result("cpus", "cpudevresv-r1", "4")})), setup, topo, held);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->allocation.cpus.ToString(), "8-9,200-201");
  EXPECT_EQ(plan->allocation.reservation, "uid-r1");
  ASSERT_TRUE(held.Add(plan->allocation).ok());
}

TEST_F(ReservationPlanTest, NonOwnerOnTheReservationDeviceIsToldWhose) {
  ASSERT_TRUE(held.PutReservation(Placed("r1", "8-11,200-203")).ok());
  const DriverSetup setup = CpuSetupWith(topo, Mode::kNuma, held);
  absl::StatusOr<Plan> plan = PlanClaim(
      Parse(ClaimIn("team-b", "thief", {Result("cpus", "cpudevresv-r1", "2")})), setup, topo, held);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(plan.status().message()),
            "claim team-b/thief request \"cpus\": 2 CPUs wanted from device \"cpudevresv-r1\" "
            "but CPUs 8-11,200-203 there are held by Reservation \"r1\", and the claim is not one "
            "of its owners (0 free otherwise)");
  // The NUMA node's own device never hands out reserved CPUs, even to fill a large request.
  plan = PlanClaim(Parse(ClaimIn("team-b", "big", {Result("cpus", "cpudevnuma001", "8")})), setup,
                   topo, held);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->allocation.cpus.ToString(), "12-15,204-207");
  EXPECT_EQ(plan->allocation.reservation, "");
}

TEST_F(ReservationPlanTest, NamedCpusOfAReservationAreRefusedToOthers) {
  ASSERT_TRUE(held.PutReservation(Placed("r1", "8-9")).ok());
  // Individual mode: the device names the CPU.
  DriverSetup setup = CpuSetupWith(topo, Mode::kIndividual, held);
  std::string device;
  for (const auto& [name, d] : setup.cpu_pool.devices) {
    if (d.cpus.ToString() == "8") device = name;
  }
  ASSERT_FALSE(device.empty());
  absl::StatusOr<Plan> plan =
      PlanClaim(Parse(ClaimIn("team-b", "x", {Result("cpu", device)})), setup, topo, held);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("CPU 8 is held by Reservation \"r1\", and the claim is not one of its "
                        "owners"));
  plan = PlanClaim(Parse(ClaimIn("team-a", "x", {Result("cpu", device)})), setup, topo, held);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->allocation.reservation, "uid-r1");

  // Machine mode: an external scheduler's cpuset naming reserved CPUs.
  setup = CpuSetupWith(topo, Mode::kMachine, held);
  plan = PlanClaim(Parse(ClaimIn("team-b", "y", {Result("cpus", "cpudevmachine", "4")},
                                 {Config({"cpus"}, Cpuset("7-10"))})),
                   setup, topo, held);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("CPUs 8-9 are held by Reservation \"r1\", and the claim is not one of "
                        "its owners"));
}

TEST_F(ReservationPlanTest, AllocateOnceServesOneClaimOnly) {
  ASSERT_TRUE(held.PutReservation(Placed("once", "8-11,200-203")).ok());
  const DriverSetup setup = CpuSetupWith(topo, Mode::kNuma, held);
  absl::StatusOr<Plan> first =
      PlanClaim(Parse(ClaimIn("team-a", "first", {Result("cpus", "cpudevresv-once", "2")})), setup,
                topo, held);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(held.Add(first->allocation).ok());
  absl::StatusOr<Plan> second =
      PlanClaim(Parse(ClaimIn("team-a", "second", {Result("cpus", "cpudevresv-once", "2")})), setup,
                topo, held);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("Reservation \"once\""));

  // A reusable reservation serves both.
  state::State h2;
  ASSERT_TRUE(h2.PutReservation(Placed("many", "8-11,200-203", {}, json(), false)).ok());
  const DriverSetup s2 = CpuSetupWith(topo, Mode::kNuma, h2);
  for (const char* name : {"first", "second"}) {
    absl::StatusOr<Plan> p = PlanClaim(
        Parse(ClaimIn("team-a", name, {Result("cpus", "cpudevresv-many", "2")})), s2, topo, h2);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    ASSERT_TRUE(h2.Add(p->allocation).ok());
  }
}

TEST_F(ReservationPlanTest, OwnersByLabelAndControllerAreOred) {
  ASSERT_TRUE(held.PutReservation(
                      Placed("r1", "8-11,200-203", {},
                             json::array({{{"claimSelector", {{"matchLabels", {{"app", "x"}}}}}},
                                          {{"controller", {{"kind", "Job"}, {"name", "j"}}}}}),
                             false))
                  .ok());
  const DriverSetup setup = CpuSetupWith(topo, Mode::kNuma, held);
  json labelled = ClaimIn("any", "labelled", {Result("cpus", "cpudevresv-r1", "1")});
  labelled["metadata"]["labels"] = {{"app", "x"}};
  json controlled = ClaimIn("any", "controlled", {Result("cpus", "cpudevresv-r1", "1")});
  controlled["metadata"]["ownerReferences"] = {{{"apiVersion", "batch/v1"},
                                                {"kind", "Job"},
                                                {"name", "j"},
                                                {"uid", "u"},
                                                {"controller", true}}};
  json neither = ClaimIn("any", "neither", {Result("cpus", "cpudevresv-r1", "1")});
  neither["metadata"]["labels"] = {{"app", "y"}};
  EXPECT_TRUE(PlanClaim(Parse(labelled), setup, topo, held).ok());
  EXPECT_TRUE(PlanClaim(Parse(controlled), setup, topo, held).ok());
  EXPECT_FALSE(PlanClaim(Parse(neither), setup, topo, held).ok());
}

TEST(ReservationGpuPlanTest, ReservedGpuForOwnersOnly) {
  const topology::Topology& dgx = Load(kDgx);
  state::State held;
  ASSERT_TRUE(held.PutReservation(Placed("g", "", {"0000:34:00.0"})).ok());
  const DriverSetup setup = GpuSetup(dgx);
  const json result = Result("gpu", "gpu-0000-34-00-0", "", kGpuDriver);
  absl::StatusOr<Plan> plan = PlanClaim(Parse(ClaimIn("team-b", "x", {result})), setup, dgx, held);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(std::string(plan.status().message()),
            "claim team-b/x request \"gpu\": GPU \"gpu-0000-34-00-0\" (0000:34:00.0) is held by "
            "Reservation \"g\", and the claim is not one of its owners");
  plan = PlanClaim(Parse(ClaimIn("team-a", "x", {result})), setup, dgx, held);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->allocation.reservation, "uid-g");
}

TEST_F(ReservationPlanTest, OneClaimCannotDrawOnTwoReservations) {
  ASSERT_TRUE(held.PutReservation(Placed("a", "8-9", {}, json(), false)).ok());
  ASSERT_TRUE(held.PutReservation(Placed("b", "10-11", {}, json(), false)).ok());
  const DriverSetup setup = CpuSetupWith(topo, Mode::kNuma, held);
  absl::StatusOr<Plan> plan = PlanClaim(
      Parse(ClaimIn("team-a", "greedy",
                    {Result("x", "cpudevresv-a", "2"), Result("y", "cpudevresv-b", "2")})),
      setup, topo, held);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(std::string(plan.status().message()),
            "claim team-a/greedy takes devices of several reservations (Reservation \"a\", "
            "Reservation \"b\"); a claim may use one reservation");
}

}  // namespace
}  // namespace topodra::prepare
