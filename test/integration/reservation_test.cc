// Reservations on a whole node: the fake API server serving the real CRD, the real daemon and the
// kubelet simulator. A Reservation becomes Available and its CPUs a tainted device of their own;
// its owner's claim is prepared on them and accounted; anyone else's claim gets an error naming
// the reservation; allocateOnce hands the rest back; deletion, restart, servers without device
// taints, and `topodra reservations`.
#include <stdio.h>

#include "test/integration/node_fixture.h"

namespace topodra::testing {
namespace {

constexpr char kCrd[] = TOPODRA_SOURCE_DIR "/charts/topodra/crds/reservations.topodra.io.yaml";
constexpr char kResv[] = "/apis/topodra.io/v1alpha1/reservations";

class ReservationNodeTest : public NodeTest {
 protected:
  void SetUp() override { Serve(true); }

  void Serve(bool taints) {
    FakeApiServerOptions o;
    o.nodes = {{kNode, "uid-node-a"}};
    o.crds = {kCrd};
    o.device_taints = taints;
    auto server = FakeApiServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    dirs_ = DaemonDirs::Make();
    kubeconfig_ = server_->WriteKubeconfig(dirs_.root + "/kubeconfig.yaml");
    ASSERT_FALSE(kubeconfig_.empty());
  }

  void Start(std::vector<std::string> extra = {}) {
    extra.push_back("--reservations");
    extra.push_back("on");
    StartNode(extra);
  }

  json Create(const std::string& name, const json& cpus, json extra = json::object()) {
    json spec = {{"nodeName", kNode}, {"cpus", cpus}, {"owners", {{{"claimName", "owner"}}}}};
    for (const auto& [k, v] : extra.items()) spec[k] = v;
    json obj = {{"apiVersion", "topodra.io/v1alpha1"},
                {"kind", "Reservation"},
                {"metadata", {{"name", name}}},
                {"spec", spec}};
    auto r = server_->Api("POST", kResv, &obj);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : json();
  }

  json Get(const std::string& name) {
    auto r = server_->Api("GET", std::string(kResv) + "/" + name);
    return r.ok() ? *r : json();
  }

  json WaitPhase(const std::string& name, const std::string& phase) {
    json obj;
    for (int i = 0; i < 1000; ++i) {
      obj = Get(name);
      if (obj.contains("status") && obj["status"].value("phase", "") == phase) return obj;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << name << " never reached " << phase << ": " << obj.dump();
    return obj;
  }

  // The CPU driver's published devices by name (empty until published).
  std::map<std::string, json> CpuDevices() {
    std::map<std::string, json> out;
    auto slices = server_->Api(
        "GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Ddra.cpu");
    if (!slices.ok()) return out;
    for (const json& s : (*slices)["items"]) {
      for (const json& d : s["spec"]["devices"]) out[d["name"]] = d;
    }
    return out;
  }

  // Waits until `pred` holds for the published CPU devices; returns them.
  std::map<std::string, json> WaitDevices(
      const std::function<bool(const std::map<std::string, json>&)>& pred, const char* what) {
    std::map<std::string, json> d;
    for (int i = 0; i < 1000; ++i) {
      d = CpuDevices();
      if (pred(d)) return d;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "slices never showed: " << what;
    return d;
  }

  static std::string Capacity(const std::map<std::string, json>& d, const std::string& name) {
    auto it = d.find(name);
    if (it == d.end()) return "<absent>";
    return it->second["capacity"]["dra.cpu/cpu"]["value"];
  }
};

TEST_F(ReservationNodeTest, OwnerGetsTheReservedCpusOthersAreToldWhose) {
  Start({"--slice-mixins", "off"});
  Create("r1", {{"count", 4}, {"numaNode", 1}});
  json obj = WaitPhase("r1", "Available");
  EXPECT_EQ(obj["status"]["cpus"], "8-9,24-25");
  EXPECT_EQ(obj["status"]["devices"][0]["device"], "cpudevresv-r1");
  // The status is written once the slices carry the device it names: no wait for them here.
  auto d = CpuDevices();
  ASSERT_TRUE(d.contains("cpudevresv-r1")) << "Available before the device was published";
  const json& dev = d["cpudevresv-r1"];
  EXPECT_EQ(Capacity(d, "cpudevresv-r1"), "4");
  EXPECT_EQ(Capacity(d, "cpudevnuma001"), "12");
  EXPECT_EQ(dev["attributes"]["topodra.io/reservation"]["string"], "r1");
  ASSERT_EQ(dev["taints"].size(), 1u);
  EXPECT_EQ(dev["taints"][0]["key"], "topodra.io/reservation");
  EXPECT_EQ(dev["taints"][0]["value"], "r1");
  EXPECT_EQ(dev["taints"][0]["effect"], "NoSchedule");

  // Someone else's claim on the reservation's device: a per-claim error naming it.
  const PrepareClaim thief = CpuClaim("thief", "cpudevresv-r1", "2");
  ClaimResult got = PrepareOne(thief);
  EXPECT_THAT(got.error, HasSubstr("held by Reservation \"r1\", and the claim is not one of its "
                                   "owners"));
  // The owner's claim: prepared inside the reservation and accounted in its status.
  const PrepareClaim owner = CpuClaim("owner", "cpudevresv-r1", "2");
  got = PrepareOne(owner);
  ASSERT_EQ(got.error, "");
  EXPECT_EQ(CdiCpus(owner.uid).ToString(), "8,24");
  // allocateOnce (the default): used once, what the owner does not use goes back at once.
  obj = WaitPhase("r1", "Succeeded");
  EXPECT_EQ(obj["status"]["used"]["cpus"], "8,24");
  EXPECT_EQ(obj["status"]["used"]["claims"][0]["name"], "owner");
  // The rest waits kSucceededGrace (30 s) for the claim's other driver, then goes back; the
  // lifecycle tests cover that. Unpreparing the claim ends the wait at once.
  auto d2 = CpuDevices();
  EXPECT_EQ(Capacity(d2, "cpudevresv-r1"), "4");
  ASSERT_EQ(UnprepareOne(owner), "");
  d = WaitDevices([](const auto& d) { return !d.contains("cpudevresv-r1"); }, "resv device gone");
  EXPECT_EQ(Capacity(d, "cpudevnuma001"), "16");
}

TEST_F(ReservationNodeTest, DeletionAndRestartAndTheCli) {
  Start({"--slice-mixins", "off"});
  const json keep = Create("keep", {{"cpuset", "2-3"}}, {{"allocateOnce", false}, {"ttl", "1h"}});
  Create("gone", {{"cpuset", "4-5"}});
  WaitPhase("keep", "Available");
  WaitPhase("gone", "Available");
  auto d = WaitDevices(
      [](const auto& d) { return d.contains("cpudevresv-gone") && d.contains("cpudevresv-keep"); },
      "both reservations published");
  EXPECT_EQ(Capacity(d, "cpudevnuma000"), "12");
  ASSERT_TRUE(server_->Api("DELETE", std::string(kResv) + "/gone").ok());
  d = WaitDevices([](const auto& d) { return !d.contains("cpudevresv-gone"); },
                  "deleted reservation unpublished");
  EXPECT_EQ(Capacity(d, "cpudevnuma000"), "14");  // 16 minus keep's two

  // An owner holds part of "keep" across a restart of the daemon.
  const PrepareClaim owner = CpuClaim("owner", "cpudevresv-keep", "1");
  ASSERT_EQ(PrepareOne(owner).error, "");
  EXPECT_EQ(daemon_.Terminate(), 0);
  sim_.reset();

  FILE* p = ::popen(
      (std::string(TOPODRA_BINARY) + " reservations --state-dir " + dirs_.state).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0);
  EXPECT_THAT(out, HasSubstr("NAME"));
  EXPECT_THAT(out, ::testing::ContainsRegex("keep +Available +2-3 +2-3 +- +default/owner"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("gone")));

  const json before = Get("keep");
  Start({"--slice-mixins", "off"});
  d = WaitDevices([](const auto& d) { return d.contains("cpudevresv-keep"); }, "after restart");
  const json after = WaitPhase("keep", "Available");
  EXPECT_EQ(after["status"]["cpus"], "2-3");
  EXPECT_EQ(after["status"]["used"]["claims"][0]["name"], "owner");
  EXPECT_EQ(after["status"]["expiresAt"], before["status"]["expiresAt"]);
  EXPECT_EQ(after["metadata"]["uid"], keep["metadata"]["uid"]);
  // The owner's claim is still prepared: a repeat is answered from the state.
  EXPECT_EQ(PrepareOne(owner).error, "");

  // Turned off: nobody would expire or release them, so they are released at start.
  EXPECT_EQ(daemon_.Terminate(), 0);
  sim_.reset();
  StartNode({"--slice-mixins", "off", "--reservations", "off"});
  d = WaitDevices([](const auto& d) { return !d.contains("cpudevresv-keep") && !d.empty(); },
                  "reservations released with --reservations=off");
  // All 16 are the NUMA node's device again; the owner's claim keeps its CPU (the state still
  // holds it, so nothing hands it out twice).
  EXPECT_EQ(Capacity(d, "cpudevnuma000"), "16");
  EXPECT_THAT(daemon_.Log(), HasSubstr("--reservations=off: released the 1 reservations"));
}

TEST_F(ReservationNodeTest, PreAllocationWaitsForABusyCpuThenTakesIt) {
  Start({"--slice-mixins", "off", "--cpu-device-mode", "individual"});
  // cpudev002 is CPU 1 in topology order (0, 16, 1, 17, ...).
  const PrepareClaim busy =
      MakeClaim("busy", json::array({Request("cpu")}), json::array({Result("cpu", "cpudev002")}));
  ASSERT_EQ(PrepareOne(busy).error, "");
  EXPECT_EQ(CdiCpus(busy.uid).ToString(), "1");
  Create("pre", {{"cpuset", "1,17"}}, {{"preAllocation", true}});
  json obj = WaitPhase("pre", "Waiting");
  EXPECT_EQ(obj["status"]["heldCpus"], "17");
  auto d = WaitDevices(
      [](const auto& d) {
        auto it = d.find("cpudev003");
        return it != d.end() && it->second.contains("taints");
      },
      "CPU 17 tainted");
  EXPECT_FALSE(d["cpudev002"].contains("taints"));  // still the busy claim's
  ASSERT_EQ(UnprepareOne(busy), "");
  obj = WaitPhase("pre", "Available");
  EXPECT_EQ(obj["status"]["heldCpus"], "1,17");
  WaitDevices(
      [](const auto& d) {
        auto it = d.find("cpudev002");
        return it != d.end() && it->second.contains("taints");
      },
      "CPU 1 tainted once released");
  // Someone else's claim of the freed CPU is refused now.
  const PrepareClaim late =
      MakeClaim("late", json::array({Request("cpu")}), json::array({Result("cpu", "cpudev002")}));
  EXPECT_THAT(PrepareOne(late).error, HasSubstr("CPU 1 is held by Reservation \"pre\""));
}

TEST_F(ReservationNodeTest, GpuHeldForItsOwnerOnly) {
  Start({"--slice-mixins", "off"});
  // Start waits for the CPU driver only. Under load the GPU driver was seen registering as little
  // as 30 ms before the first GPU prepare below; sent first, that prepare fails with "DRA driver
  // gpu.topodra.io is not registered" (the likely cause of a CI failure here). A kubelet never
  // calls a driver it has not registered.
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(20)).ok()) << daemon_.Log();
  WaitFilesChecked(kGpu);
  json spec = {
      {"nodeName", kNode}, {"gpus", {{"count", 1}}}, {"owners", {{{"claimName", "owner"}}}}};
  json obj = {{"apiVersion", "topodra.io/v1alpha1"},
              {"kind", "Reservation"},
              {"metadata", {{"name", "g1"}}},
              {"spec", spec}};
  ASSERT_TRUE(server_->Api("POST", kResv, &obj).ok());
  obj = WaitPhase("g1", "Available");
  ASSERT_EQ(obj["status"]["gpus"].size(), 1u);
  const std::string gpu = obj["status"]["gpus"][0];
  EXPECT_EQ(obj["status"]["devices"][0]["driver"], kGpu);
  EXPECT_EQ(obj["status"]["devices"][0]["device"], gpu);
  // The GPU's own device carries the attribute and the taint.
  json dev;
  for (int i = 0; i < 1000 && !dev.contains("taints"); ++i) {
    auto slices = server_->Api(
        "GET",
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dgpu.topodra.io");
    if (slices.ok()) {
      for (const json& sl : (*slices)["items"]) {
        for (const json& d : sl["spec"]["devices"]) {
          if (d["name"] == gpu) dev = d;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(dev["attributes"]["topodra.io/reservation"]["string"], "g1");
  ASSERT_TRUE(dev.contains("taints")) << dev.dump();
  EXPECT_EQ(dev["taints"][0]["value"], "g1");

  const PrepareClaim thief = MakeClaim("thief", json::array({Request("gpu", "gpu.topodra.io")}),
                                       json::array({Result("gpu", gpu, "", kGpu)}));
  EXPECT_THAT(PrepareOne(thief, kGpu).error,
              HasSubstr("is held by Reservation \"g1\", and the claim is not one of its owners"));
  const PrepareClaim owner = MakeClaim("owner", json::array({Request("gpu", "gpu.topodra.io")}),
                                       json::array({Result("gpu", gpu, "", kGpu)}));
  EXPECT_EQ(PrepareOne(owner, kGpu).error, "");
  obj = WaitPhase("g1", "Succeeded");
  EXPECT_EQ(obj["status"]["used"]["claims"][0]["name"], "owner");
}

class ReservationNoTaintsTest : public ReservationNodeTest {
 protected:
  void SetUp() override { Serve(false); }
};

TEST_F(ReservationNoTaintsTest, AttributeOnlyWhenTheServerDropsTaints) {
  Start({"--slice-mixins", "off"});
  Create("r1", {{"count", 2}, {"numaNode", 0}});
  WaitPhase("r1", "Available");
  auto d = WaitDevices([](const auto& d) { return d.contains("cpudevresv-r1"); }, "resv device");
  EXPECT_EQ(d["cpudevresv-r1"]["attributes"]["topodra.io/reservation"]["string"], "r1");
  EXPECT_FALSE(d["cpudevresv-r1"].contains("taints"));
  // Prepare still refuses everyone but the owners: the attribute-only mode's safety net.
  EXPECT_THAT(PrepareOne(CpuClaim("thief", "cpudevresv-r1", "1")).error,
              HasSubstr("Reservation \"r1\""));
  EXPECT_EQ(PrepareOne(CpuClaim("owner", "cpudevresv-r1", "1")).error, "");
}

}  // namespace
}  // namespace topodra::testing
