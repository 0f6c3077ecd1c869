// The reservation controller against the fake API server serving the real CRD, with a real
// state store on disk and an injected clock: created -> Available with the state recorded first,
// expiry when the clock says so, preAllocation Waiting -> Available when a claim is released,
// deletion, a restart that loses nothing, a missing CRD.
#include "driver/reservation/controller.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "driver/publish/device_builder.h"
#include "driver/publish/names.h"
#include "test/integration/fake_apiserver.h"
#include "test/testing/fixtures.h"
#include "test/testing/log_capture.h"

namespace topodra::reservation {
namespace {

using json = nlohmann::json;
using topodra::testing::FakeApiServer;
using topodra::testing::FakeApiServerOptions;

constexpr char kCrd[] = TOPODRA_SOURCE_DIR "/charts/topodra/crds/reservations.topodra.io.yaml";
constexpr char kPath[] = "/apis/topodra.io/v1alpha1/reservations";

class FakeClock : public Clock {
 public:
  absl::Time Now() override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }

 private:
  std::mutex mu_;
  absl::Time now_ = absl::Now();
};

using topodra::testing::LogCapture;

const topology::Topology& K32() {
  static const topology::Topology* t =
      new topology::Topology(topodra::testing::LoadTopology("32em64t-2n8c2t-pci-normalio.xml"));
  return *t;
}

json Reservation(const std::string& name, const json& cpus, json extra = json::object()) {
  json spec = {{"nodeName", "node-a"}, {"cpus", cpus}, {"owners", {{{"namespace", "team-a"}}}}};
  for (const auto& [k, v] : extra.items()) spec[k] = v;
  return {{"apiVersion", "topodra.io/v1alpha1"},
          {"kind", "Reservation"},
          {"metadata", {{"name", name}}},
          {"spec", spec}};
}

state::Allocation ClaimHolding(const std::string& name, const std::string& cpus) {
  state::Allocation a;
  a.kind = state::AllocationKind::kDraClaim;
  a.driver = "dra.cpu";
  a.owner = state::DraOwner("dra.cpu", "c-" + name);
  a.claim_namespace = "other";
  a.claim_name = name;
  a.cpus = *CpuSet::Parse(cpus);
  a.phase = state::Phase::kPrepared;
  return a;
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/topodra-resv-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    FakeApiServerOptions o;
    o.crds = {kCrd};
    absl::StatusOr<std::unique_ptr<FakeApiServer>> s = FakeApiServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    kube::ClusterConfig c;
    c.server = server_->url();
    c.timeout = std::chrono::milliseconds(3000);
    client_ = *kube::NewHttpRestClient(c);
    OpenState();
  }
  void TearDown() override {
    if (controller_ != nullptr) controller_->Stop();
    controller_.reset();
    std::filesystem::remove_all(dir_);
  }

  void OpenState() {
    absl::StatusOr<state::StateStore::Opened> opened =
        state::StateStore::Open(dir_ + "/checkpoint.json");
    ASSERT_TRUE(opened.ok()) << opened.status();
    ledger_ = std::make_unique<state::Ledger>(std::move(opened->store), std::move(opened->loaded));
  }

  // Reserve + Commit, as the DRA path does.
  void Commit(const std::function<absl::Status(state::Ledger::Edit&)>& plan) {
    absl::StatusOr<state::Ledger::Txn> txn = ledger_->Reserve(plan);
    ASSERT_TRUE(txn.ok()) << txn.status();
    ASSERT_TRUE(ledger_->Commit(*txn).ok());
  }

  void StartController() {
    ControllerOptions o;
    o.node_name = "node-a";
    o.initial_backoff = absl::Milliseconds(20);
    o.max_backoff = absl::Milliseconds(200);
    o.watch_timeout_seconds = 5;
    controller_ = std::make_unique<Controller>(
        client_.get(), o, ledger_.get(), &clock_,
        [this] {
          NodeContext ctx;
          ctx.topo = K32();
          std::lock_guard<std::mutex> lock(published_mu_);
          ctx.devices = devices_;
          return ctx;
        },
        [this](const std::vector<Held>&) {
          // What the daemon does: publish the held devices, then learn their names.
          publish::PublishOptions po;
          po.node_name = "node-a";
          for (const Held& h :
               ledger_->Read([](const state::State& st) { return HeldDevices(st); })) {
            po.reservations.push_back({h.name, h.cpus, h.gpus, h.since});
          }
          std::map<std::string, std::vector<DeviceRef>> devices;
          for (const publish::Pool& p : publish::BuildPools(K32(), po)) {
            for (const publish::Device& d : p.devices) {
              auto it = d.attributes.find(publish::kReservationAttribute);
              if (it != d.attributes.end()) {
                devices[std::get<std::string>(it->second)].push_back({p.driver, p.name, d.name});
              }
            }
          }
          std::lock_guard<std::mutex> lock(published_mu_);
          devices_ = devices;
          ++held_changes_;
        });
    controller_->Start();
  }

  json Create(const json& obj) {
    absl::StatusOr<json> r = server_->Api("POST", kPath, &obj);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : json();
  }
  json Get(const std::string& name) {
    absl::StatusOr<json> r = server_->Api("GET", std::string(kPath) + "/" + name);
    return r.ok() ? *r : json();
  }
  // Waits until the object's status.phase is `phase` (5 s at most); returns the object.
  json WaitPhase(const std::string& name, const std::string& phase) {
    json obj;
    for (int i = 0; i < 500; ++i) {
      obj = Get(name);
      if (obj.is_object() && obj.contains("status") && obj["status"].value("phase", "") == phase) {
        return obj;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << name << " never reached phase " << phase << ": " << obj.dump();
    return obj;
  }

  std::string dir_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<kube::RestClient> client_;
  std::unique_ptr<state::Ledger> ledger_;
  FakeClock clock_;
  std::unique_ptr<Controller> controller_;
  std::mutex published_mu_;
  std::map<std::string, std::vector<DeviceRef>> devices_;
  int held_changes_ = 0;
};

TEST_F(ControllerTest, CreatedBecomesAvailableAndIsRecordedDurably) {
  StartController();
  const json created = Create(Reservation("r1", {{"count", 4}, {"numaNode", 1}}));
  const json obj = WaitPhase("r1", "Available");
  EXPECT_EQ(obj["status"]["cpus"], "8-9,24-25");
  EXPECT_EQ(obj["status"]["devices"],
            json::parse(R"([{"driver": "dra.cpu", "pool": "node-a", "device": "cpudevresv-r1"}])"));
  EXPECT_EQ(obj["status"]["observedGeneration"], 1);
  // On disk before anyone could see it: a second reader of the files sees the placement.
  absl::StatusOr<state::State> peek = state::StateStore::Peek(dir_ + "/checkpoint.json");
  ASSERT_TRUE(peek.ok()) << peek.status();
  const state::Reservation* r = peek->FindReservation(created["metadata"]["uid"]);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->cpus.ToString(), "8-9,24-25");
  EXPECT_FALSE(r->ended);
  std::lock_guard<std::mutex> lock(published_mu_);
  EXPECT_GE(held_changes_, 1);
}

TEST_F(ControllerTest, ExpiresWhenTheInjectedClockSaysSo) {
  StartController();
  Create(Reservation("short", {{"count", 2}}, {{"ttl", "10m"}}));
  WaitPhase("short", "Available");
  clock_.Advance(absl::Minutes(9));
  controller_->Kick();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(Get("short")["status"]["phase"], "Available");
  clock_.Advance(absl::Minutes(1) + absl::Seconds(1));
  const json obj = WaitPhase("short", "Failed");  // at most 500 ms: the loop re-reads the clock
  EXPECT_EQ(obj["status"]["conditions"][0]["reason"], "Expired");
  EXPECT_TRUE(ledger_->Copy().ReservedCpus().Empty());
}

TEST_F(ControllerTest, PreAllocationWaitsThenHoldsWhatIsReleased) {
  Commit([](state::Ledger::Edit& edit) { return edit.Add(ClaimHolding("busy", "8-9")); });
  StartController();
  Create(Reservation("pre", {{"cpuset", "8-11"}}, {{"preAllocation", true}}));
  json obj = WaitPhase("pre", "Waiting");
  EXPECT_EQ(obj["status"]["heldCpus"], "10-11");
  // The claim is unprepared: the reservation takes its CPUs at once.
  Commit(
      [](state::Ledger::Edit& edit) { return edit.Release(state::DraOwner("dra.cpu", "c-busy")); });
  obj = WaitPhase("pre", "Available");
  EXPECT_EQ(obj["status"]["heldCpus"], "8-11");
}

TEST_F(ControllerTest, DeletionReleasesAndRestartLosesNothing) {
  StartController();
  const json a = Create(Reservation("keep", {{"cpuset", "2-3"}}));
  const json b = Create(Reservation("gone", {{"cpuset", "4-5"}}));
  WaitPhase("keep", "Available");
  WaitPhase("gone", "Available");
  controller_->Stop();
  controller_.reset();
  // While the daemon is down, one is deleted; a restart must keep the other exactly.
  ASSERT_TRUE(server_->Api("DELETE", std::string(kPath) + "/gone").ok());
  ledger_.reset();
  OpenState();
  {
    ASSERT_NE(ledger_->Copy().FindReservation(a["metadata"]["uid"]), nullptr);
    EXPECT_EQ(ledger_->Copy().ReservedCpus().ToString(), "2-5");
  }
  StartController();
  for (int i = 0; i < 500; ++i) {
    {
      if (ledger_->Copy().FindReservation(b["metadata"]["uid"]) == nullptr) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ledger_->Copy().FindReservation(b["metadata"]["uid"]), nullptr);
  ASSERT_NE(ledger_->Copy().FindReservation(a["metadata"]["uid"]), nullptr);
  EXPECT_EQ(ledger_->Copy().ReservedCpus().ToString(), "2-3");
  EXPECT_EQ(Get("keep")["status"]["cpus"], "2-3");
}

TEST_F(ControllerTest, OwnersCanChangeAfterPlacementAndTheStatusFollowsConflicts) {
  StartController();
  Create(Reservation("r", {{"cpuset", "6-7"}}));
  json obj = WaitPhase("r", "Available");
  obj["spec"]["owners"] = {{{"namespace", "team-b"}}};
  ASSERT_TRUE(server_->Api("PUT", std::string(kPath) + "/r", &obj).ok());
  for (int i = 0; i < 500; ++i) {
    {
      const state::State st = ledger_->Copy();
      const state::Reservation* r = st.FindReservation(obj["metadata"]["uid"]);
      if (r != nullptr && r->spec.Parse()["owners"][0]["namespace"] == "team-b") break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ledger_->Copy()
                .FindReservation(obj["metadata"]["uid"])
                ->spec.Parse()["owners"][0]["namespace"],
            "team-b");
}

TEST_F(ControllerTest, ReservationsOfADeletedCrdAreReleased) {
  StartController();
  Create(Reservation("r", {{"cpuset", "6-7"}}));
  WaitPhase("r", "Available");
  controller_->Stop();
  controller_.reset();
  // The CRD is gone (and with it every Reservation): a server that does not serve it.
  ASSERT_TRUE(server_->Stop().ok());
  absl::StatusOr<std::unique_ptr<FakeApiServer>> s = FakeApiServer::Start({});
  ASSERT_TRUE(s.ok()) << s.status();
  server_ = *std::move(s);
  kube::ClusterConfig c;
  c.server = server_->url();
  client_ = *kube::NewHttpRestClient(c);
  StartController();
  for (int i = 0; i < 500; ++i) {
    {
      if (ledger_->Copy().reservations().empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(ledger_->Copy().reservations().empty());
}

TEST(ControllerNoCrdTest, WaitsForTheCrdWithoutFailing) {
  LogCapture log;
  absl::StatusOr<std::unique_ptr<FakeApiServer>> s = FakeApiServer::Start({});
  ASSERT_TRUE(s.ok()) << s.status();
  kube::ClusterConfig c;
  c.server = (*s)->url();
  std::unique_ptr<kube::RestClient> client = *kube::NewHttpRestClient(c);
  state::Ledger ledger(nullptr, state::State{});
  ControllerOptions o;
  o.node_name = "node-a";
  o.initial_backoff = absl::Milliseconds(20);
  o.max_backoff = absl::Milliseconds(100);
  Controller controller(
      client.get(), o, &ledger, RealClock(),
      [] {
        NodeContext ctx;
        ctx.topo = K32();
        return ctx;
      },
      [](const std::vector<Held>&) {});
  controller.Start();
  for (int i = 0; i < 200 && !controller.status().crd_missing; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(controller.status().crd_missing);
  // No CRD, no Reservation objects: the objects are known to be none.
  EXPECT_TRUE(controller.status().listed);
  // Several retries (20, 40, 80, 100 ms...), one line: nothing changed after the first.
  for (int i = 0; i < 300 && controller.status().errors < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  controller.Stop();
  EXPECT_GE(controller.status().errors, 5);
  EXPECT_THAT(log.Lines("not installed"),
              ::testing::ElementsAre(
                  "reservations node=node-a: the Reservation CRD (reservations.topodra.io) is not "
                  "installed; reservations are off until it is"));
  EXPECT_THAT(log.Lines("working again"), ::testing::IsEmpty());
  EXPECT_THAT(log.Lines("retrying"), ::testing::IsEmpty());
}

// An API server that fails for a while, then answers: one warning, one recovery.
TEST_F(ControllerTest, ARealRecoveryIsLoggedOnce) {
  LogCapture log;
  ASSERT_TRUE(server_->FailNext(4, 503).ok());
  StartController();
  for (int i = 0; i < 500 && !controller_->status().listed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(controller_->status().listed);
  EXPECT_EQ(controller_->status().errors, 4);
  // A pass after the list, and its status writes, must not announce anything again.
  Create(Reservation("r1", {{"count", 2}}));
  WaitPhase("r1", "Available");
  controller_->Stop();
  EXPECT_THAT(log.Lines("retrying with backoff"), ::testing::SizeIs(1));
  EXPECT_THAT(log.Lines("working again"),
              ::testing::ElementsAre("reservations node=node-a: working again"));
  EXPECT_EQ(controller_->status().last_error, "");
}

}  // namespace
}  // namespace topodra::reservation
