// The reservation controller against the in-memory API server (test/testing/fake_rest_client.h),
// with a real state store in a temporary directory and an injected clock: the requests it makes,
// placement, expiry, deletion, a spec change, 410 and a missing CRD, the log lines, with no
// Python server and no sleeps (waits are on the fake's and the node's change signals; backoffs
// are recorded). test/reservation/controller_test.cc runs it over HTTP against the Python server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/names.h"
#include "driver/reservation/controller.h"
#include "test/testing/fake_rest_client.h"
#include "test/testing/fixtures.h"
#include "test/testing/log_capture.h"

namespace topodra::reservation {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using topodra::testing::FakeRestClient;

constexpr char kPath[] = "/apis/topodra.io/v1alpha1/reservations";
const std::string kList = absl::StrCat("GET ", kPath, "?fieldSelector=spec.nodeName%3Dnode-a");

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
  absl::Time now_ = absl::FromUnixSeconds(1767225600);  // 2026-01-01
};

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

class ControllerUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/topodra-resv-unit-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fake_.Serve(kPath, "Reservation", /*status_subresource=*/true);
    fake_.SetClock([this] { return clock_.Now(); });
    absl::StatusOr<state::StateStore::Opened> opened =
        state::StateStore::Open(dir_ + "/checkpoint.json");
    ASSERT_TRUE(opened.ok()) << opened.status();
    ledger_ = std::make_unique<state::Ledger>(std::move(opened->store), std::move(opened->loaded));
  }
  void TearDown() override {
    if (controller_ != nullptr) controller_->Stop();  // joins: watches and waits must wake
    controller_.reset();
    std::filesystem::remove_all(dir_);
  }

  Controller& Make() {
    ControllerOptions o;
    o.node_name = "node-a";
    o.watch_timeout_seconds = 9;
    o.backoff_wait = [this](std::unique_lock<std::mutex>&, std::condition_variable&,
                            std::chrono::milliseconds d, const std::function<bool()>&) {
      waits_.push_back(d.count());
      if (on_wait_) on_wait_(waits_.size());
    };
    controller_ = std::make_unique<Controller>(
        &fake_, o, ledger_.get(), &clock_,
        [this] {
          NodeContext ctx;
          ctx.topo = K32();
          std::lock_guard<std::mutex> lock(published_mu_);
          ctx.devices = devices_;
          return ctx;
        },
        [this](const std::vector<Held>& held) {
          {
            // What the controller reports must already be on disk (it is what gets published).
            absl::StatusOr<state::State> disk = state::StateStore::Peek(dir_ + "/checkpoint.json");
            std::lock_guard<std::mutex> lock(published_mu_);
            told_.push_back(held);
            durable_when_told_.push_back(disk.ok() && HeldDevices(*disk) == held);
          }
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
        });
    return *controller_;
  }
  Controller& Start() {
    Make().Start();
    return *controller_;
  }

  json Create(const json& obj) {
    absl::StatusOr<kube::Response> r = fake_.Post(kPath, obj);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->body : json();
  }
  std::string Phase(const std::string& name) {
    std::optional<json> o = fake_.Object(kPath, name);
    if (!o || !o->contains("status")) return "";
    return (*o)["status"].value("phase", "");
  }
  // Waits (on the fake's change signal) until the object's phase is `phase`.
  bool AwaitPhase(const std::string& name, const std::string& phase) {
    return fake_.Await([&] { return Phase(name) == phase; });
  }
  // Waits (on the node's change signal) until `condition` holds of the node's state.
  bool AwaitState(const std::function<bool(const state::State&)>& condition) {
    const absl::Time end = absl::Now() + absl::Seconds(20);  // a hang guard
    while (true) {
      const uint64_t seen = ledger_->changes().generation();
      if (ledger_->Read([&](const state::State& st) { return condition(st); })) return true;
      if (absl::Now() > end) return false;
      ledger_->changes().WaitChange(seen, end - absl::Now());
    }
  }
  std::vector<std::string> Reads() {
    std::vector<std::string> out;
    for (const std::string& l : fake_.RequestLines()) {
      if (l.rfind("GET ", 0) == 0 || l.rfind("WATCH ", 0) == 0) out.push_back(l);
    }
    return out;
  }
  std::string Watch(const std::string& rv) {
    return absl::StrCat("WATCH ", kPath,
                        "?watch=true&allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dnode-a"
                        "&resourceVersion=",
                        rv, "&timeoutSeconds=9 200");
  }

  std::string dir_;
  FakeRestClient fake_;
  std::unique_ptr<state::Ledger> ledger_;
  FakeClock clock_;
  std::unique_ptr<Controller> controller_;
  std::mutex published_mu_;
  std::map<std::string, std::vector<DeviceRef>> devices_;
  std::vector<std::vector<Held>> told_;  // each held_changed call's devices
  std::vector<bool> durable_when_told_;  // and whether the state on disk held just those
  std::vector<int64_t> waits_;
  std::function<void(size_t)> on_wait_;
};

TEST_F(ControllerUnitTest, SyncOnceListsPlacesRecordsAndWritesTheStatus) {
  const json created = Create(Reservation("r1", {{"count", 4}, {"numaNode", 1}}));
  Make();
  fake_.ClearRequests();
  ASSERT_TRUE(controller_->SyncOnce().ok());
  EXPECT_EQ(Phase("r1"), "Available");
  const json obj = *fake_.Object(kPath, "r1");
  EXPECT_EQ(obj["status"]["cpus"], "8-9,24-25");
  EXPECT_EQ(obj["status"]["devices"],
            json::parse(R"([{"driver": "dra.cpu", "pool": "node-a", "device": "cpudevresv-r1"}])"));
  EXPECT_EQ(obj["status"]["observedGeneration"], 1);
  EXPECT_THAT(fake_.RequestLines(),
              ElementsAre(kList + " 200", absl::StrCat("PUT ", kPath, "/r1/status 200")));
  // On disk before anyone could see it.
  absl::StatusOr<state::State> peek = state::StateStore::Peek(dir_ + "/checkpoint.json");
  ASSERT_TRUE(peek.ok()) << peek.status();
  const state::Reservation* r = peek->FindReservation(created["metadata"]["uid"]);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->cpus.ToString(), "8-9,24-25");
}

// The daemon publishes the devices the controller reports, so they must be durable by then.
TEST_F(ControllerUnitTest, HeldDevicesAreReportedOnceDurable) {
  Create(Reservation("r1", {{"count", 4}, {"numaNode", 1}}));
  Make();
  ASSERT_TRUE(controller_->SyncOnce().ok());
  ASSERT_TRUE(fake_.Delete(absl::StrCat(kPath, "/r1"), {}).ok());
  ASSERT_TRUE(controller_->SyncOnce().ok());
  std::lock_guard<std::mutex> lock(published_mu_);
  ASSERT_EQ(told_.size(), 2u);
  ASSERT_EQ(told_[0].size(), 1u);
  EXPECT_EQ(told_[0][0].name, "r1");
  EXPECT_EQ(told_[0][0].cpus.ToString(), "8-9,24-25");
  EXPECT_TRUE(told_[1].empty());
  EXPECT_THAT(durable_when_told_, ElementsAre(true, true));
}

TEST_F(ControllerUnitTest, WatchedCreationUpdateAndDeletion) {
  Start();
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  const json created = Create(Reservation("r", {{"cpuset", "6-7"}}));
  ASSERT_TRUE(AwaitPhase("r", "Available"));
  const std::string uid = created["metadata"]["uid"];
  // The owners change after placement: the state follows.
  json obj = *fake_.Object(kPath, "r");
  obj["spec"]["owners"] = {{{"namespace", "team-b"}}};
  ASSERT_TRUE(fake_.Put(absl::StrCat(kPath, "/r"), obj).ok());
  ASSERT_TRUE(AwaitState([&](const state::State& s) {
    const state::Reservation* r = s.FindReservation(uid);
    return r != nullptr && r->spec.Parse()["owners"][0]["namespace"] == "team-b";
  }));
  // Deleted: released.
  ASSERT_TRUE(fake_.Delete(absl::StrCat(kPath, "/r"), {}).ok());
  ASSERT_TRUE(AwaitState([&](const state::State& s) { return s.FindReservation(uid) == nullptr; }));
  EXPECT_TRUE(ledger_->Copy().ReservedCpus().Empty());
  // One list: every change came through the watch. (A status write racing the deletion may
  // read the object again: GET .../r.)
  const std::vector<std::string> reads = Reads();
  EXPECT_EQ(std::count(reads.begin(), reads.end(), kList + " 200"), 1);
  EXPECT_EQ(reads[0], kList + " 200");
  EXPECT_EQ(reads[1], Watch("1"));
  EXPECT_TRUE(waits_.empty());
}

TEST_F(ControllerUnitTest, ExpiresWhenTheInjectedClockSaysSo) {
  Start();
  Create(Reservation("short", {{"count", 2}}, {{"ttl", "10m"}}));
  ASSERT_TRUE(AwaitPhase("short", "Available"));
  clock_.Advance(absl::Minutes(10) + absl::Seconds(1));
  controller_->Kick();
  ASSERT_TRUE(AwaitPhase("short", "Failed"));
  EXPECT_EQ((*fake_.Object(kPath, "short"))["status"]["conditions"][0]["reason"], "Expired");
  EXPECT_TRUE(ledger_->Copy().ReservedCpus().Empty());
}

TEST_F(ControllerUnitTest, GoneRelistsAndLosesNothing) {
  Start();
  Create(Reservation("keep", {{"cpuset", "2-3"}}));
  ASSERT_TRUE(AwaitPhase("keep", "Available"));
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  const size_t before = Reads().size();
  fake_.Compact();
  fake_.ExpireWatches();
  ASSERT_TRUE(fake_.Await([&] { return Reads().size() == before + 2 && fake_.WatchesIdle(1); }));
  const std::vector<std::string> reads = Reads();
  EXPECT_EQ(reads[before], kList + " 200");
  EXPECT_EQ(reads[before + 1], Watch(std::to_string(fake_.resource_version())));
  EXPECT_EQ(ledger_->Copy().ReservedCpus().ToString(), "2-3");
  EXPECT_TRUE(waits_.empty());
}

TEST_F(ControllerUnitTest, WaitsForTheCrdWithoutFailingAndLogsOnce) {
  testing::LogCapture log;
  fake_.Unserve(kPath);
  on_wait_ = [this](size_t n) {
    if (n == 5) fake_.Serve(kPath, "Reservation", true);
  };
  Start();
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  EXPECT_THAT(waits_, ElementsAre(200, 400, 800, 1600, 3200));
  EXPECT_EQ(controller_->status().errors, 5);
  EXPECT_FALSE(controller_->status().crd_missing);
  EXPECT_THAT(log.Lines("not installed"),
              ElementsAre("reservations node=node-a: the Reservation CRD (reservations.topodra.io) "
                          "is not installed; reservations are off until it is"));
  EXPECT_THAT(log.Lines("is installed"),
              ElementsAre("reservations node=node-a: the Reservation CRD is installed; "
                          "reservations are on"));
  EXPECT_THAT(log.Lines("retrying"), IsEmpty());
  EXPECT_THAT(log.Lines("working again"), IsEmpty());
}

TEST_F(ControllerUnitTest, ARealRecoveryIsLoggedOnce) {
  testing::LogCapture log;
  fake_.FailNext(4, 503);
  Start();
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  EXPECT_EQ(controller_->status().errors, 4);
  EXPECT_THAT(waits_, ElementsAre(200, 400, 800, 1600));
  Create(Reservation("r1", {{"count", 2}}));
  ASSERT_TRUE(AwaitPhase("r1", "Available"));
  // The watch ending, and the list after a 410, are no recoveries to announce again.
  fake_.EndWatches();
  fake_.ExpireWatches();
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  controller_->Stop();
  EXPECT_THAT(log.Lines("retrying with backoff"), SizeIs(1));
  EXPECT_THAT(log.Lines("working again"), ElementsAre("reservations node=node-a: working again"));
  EXPECT_EQ(controller_->status().last_error, "");
}

TEST_F(ControllerUnitTest, AStatusWriteThatConflictsIsReadAgain) {
  Create(Reservation("r", {{"cpuset", "6-7"}}));
  Make();
  // Someone changes the object between the controller's list and its status write.
  fake_.SetBeforeRequest([&](const std::string& verb, const std::string&) {
    if (verb != "PUT") return;
    fake_.SetBeforeRequest(nullptr);
    json obj = *fake_.Object(kPath, "r");
    obj["metadata"]["labels"] = {{"touched", "yes"}};
    ASSERT_TRUE(fake_.Put(absl::StrCat(kPath, "/r"), obj).ok());
  });
  const absl::Status st = controller_->SyncOnce();
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);  // 409 Conflict
  EXPECT_THAT(std::string(st.message()), ::testing::StartsWith("status of reservation r: "));
  // The fresh object was read; the next pass writes over it.
  ASSERT_TRUE(controller_->SyncOnce(/*relist=*/false).ok());
  EXPECT_EQ(Phase("r"), "Available");
  EXPECT_EQ((*fake_.Object(kPath, "r"))["metadata"]["labels"]["touched"], "yes");
}

}  // namespace
}  // namespace topodra::reservation
