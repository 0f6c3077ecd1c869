// Churn figures for issue 19: the writes a node sends to the API server when nothing an operator
// or scheduler could act on has changed. Every such write is load on the API server (and on every
// watcher of ResourceSlices and Reservations) of a large cluster, so the target is 0.
//   idle      the real `topodra run` (384 CPUs, grouped by NUMA node) with one Available and one
//             Pending reservation and one prepared claim, left alone for REFRESHES rediscoveries
//             (--topology-refresh 1, so a run of 60 stands for 30 minutes at the default 30 s),
//             its watches ended once half-way (as the API server's watch timeout does) and its
//             reservation controller's own 30 s resync passes included; scaled to one hour.
//   busy      one claim in the Pending reservation's NUMA node prepared and unprepared again and
//             again: the free CPUs there change, and nothing else does. The Pending
//             reservation stays Pending for the same reason, so its status has no news.
// The floor is 0 writes: the node's published devices and the reservations' phases and reasons
// are the same at the end as at the start, which the bench checks.
//
// usage: churn_bench [TOPOLOGIES_DIR] [REFRESHES] [CYCLES]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/kubelet_sim/kubelet_sim.h"

namespace {

using json = nlohmann::json;
using namespace topodra;

constexpr char kNode[] = "bench-node";
constexpr char kDriver[] = "dra.cpu";
constexpr char kResv[] = "/apis/topodra.io/v1alpha1/reservations";

json Reservation(const std::string& name, const json& want) {
  json spec = want;
  spec["nodeName"] = kNode;
  spec["owners"] = {{{"namespace", "bench"}}};
  return {{"apiVersion", "topodra.io/v1alpha1"},
          {"kind", "Reservation"},
          {"metadata", {{"name", name}}},
          {"spec", spec}};
}

struct Claim {
  std::string driver, device;
  bool cpu_share = false;
};

// A machine, how the daemon publishes it, what it holds, and the claim the busy run cycles.
struct Scenario {
  std::string label, fixture;
  std::vector<std::string> args;
  std::vector<json> reservations;  // created in order; the last one stays Pending
  Claim kept, cycled;
};

// An allocated claim of one device (`driver`/`device`); one CPU of it when `cpu_share`.
absl::StatusOr<testing::PrepareClaim> MakeClaim(testing::FakeApiServer& server,
                                                const std::string& name, const std::string& driver,
                                                const std::string& device, bool cpu_share) {
  json claim = {
      {"metadata", {{"name", name}, {"namespace", "bench"}}},
      {"spec",
       {{"devices",
         {{"requests",
           json::array({{{"name", "devs"}, {"exactly", {{"deviceClassName", driver}}}}})}}}}}};
  absl::StatusOr<json> created = server.CreateClaim(claim);
  if (!created.ok()) return created.status();
  json result = {{"request", "devs"}, {"driver", driver}, {"pool", kNode}, {"device", device}};
  if (cpu_share) result["consumedCapacity"] = {{"dra.cpu/cpu", "1"}};
  json allocation = {{"devices", {{"results", json::array({result})}}}};
  if (absl::StatusOr<json> a = server.AllocateClaim("bench", name, allocation); !a.ok()) {
    return a.status();
  }
  return testing::PrepareClaim{"bench", (*created)["metadata"]["uid"].get<std::string>(), name};
}

// phase/reason of each reservation, and the names of the published devices: what a scheduler
// or an operator sees.
std::string Visible(testing::FakeApiServer& server) {
  std::string out;
  absl::StatusOr<json> r = server.Api("GET", kResv);
  if (r.ok()) {
    for (const json& o : (*r)["items"]) {
      const json st = o.value("status", json::object());
      std::string reason;
      for (const json& c : st.value("conditions", json::array())) reason = c.value("reason", "");
      absl::StrAppend(&out, o["metadata"].value("name", ""), "=", st.value("phase", ""), "/",
                      reason, " ");
    }
  }
  absl::StatusOr<json> s = server.Api("GET", "/apis/resource.k8s.io/v1/resourceslices");
  if (s.ok()) {
    size_t devices = 0;
    for (const json& o : (*s)["items"]) devices += o["spec"].value("devices", json::array()).size();
    absl::StrAppend(&out, (*s)["items"].size(), " slices, ", devices, " devices");
  }
  return out;
}

// The writes among the requests logged since the last ClearRequests, counted by "VERB path".
std::map<std::string, int> Writes(testing::FakeApiServer& server) {
  std::map<std::string, int> out;
  absl::StatusOr<json> reqs = server.Requests();
  if (!reqs.ok()) return out;
  for (const json& r : *reqs) {
    const std::string m = r.value("method", "");
    if (m == "GET") continue;
    // A dry run stores nothing and tells no watcher.
    if (r.value("query", "").find("dryRun") != std::string::npos) continue;
    ++out[absl::StrCat(m, " ", r.value("path", ""))];
  }
  return out;
}

int Total(const std::map<std::string, int>& w) {
  int n = 0;
  for (const auto& [what, count] : w) n += count;
  return n;
}

void PrintWrites(const std::map<std::string, int>& w) {
  for (const auto& [what, count] : w) std::printf("    %4d x %s\n", count, what.c_str());
}

// Prepare through the kubelet simulator, every claim without an error.
bool Prepared(testing::KubeletSimulator& sim, const std::string& driver,
              const testing::PrepareClaim& claim) {
  auto r = sim.Prepare(driver, {claim});
  if (!r.ok()) return false;
  for (const auto& [uid, result] : *r) {
    if (!result.error.empty()) {
      std::printf("prepare %s: %s\n", claim.name.c_str(), result.error.c_str());
      return false;
    }
  }
  return true;
}

bool WaitFor(const std::function<bool()>& pred, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Runs one scenario; false when it could not be set up.
bool Run(const Scenario& sc, const std::string& dir, int refreshes, int cycles) {
  testing::FakeApiServerOptions o;
  o.nodes = {{kNode, "uid-bench-node"}};
  o.crds = {TOPODRA_SOURCE_DIR "/charts/topodra/crds/reservations.topodra.io.yaml"};
  auto server = testing::FakeApiServer::Start(o);
  if (!server.ok()) {
    std::printf("fake API server: %s\n", std::string(server.status().message()).c_str());
    return false;
  }
  testing::FakeApiServer& api = **server;
  testing::DaemonDirs dirs = testing::DaemonDirs::Make();
  const std::string kubeconfig = api.WriteKubeconfig(dirs.root + "/kubeconfig.yaml");
  testing::KubeletSimOptions so;
  so.root_dir = dirs.kubelet_root;
  auto sim = testing::KubeletSimulator::Start(so);
  if (!sim.ok()) return false;
  testing::Daemon daemon;
  std::vector<std::string> args = {"--kubeconfig",       kubeconfig,
                                   "--node-name",        kNode,
                                   "--topology-file",    dir + "/" + sc.fixture,
                                   "--reservations",     "on",
                                   "--topology-refresh", "1"};
  args.insert(args.end(), sc.args.begin(), sc.args.end());
  if (std::getenv("BENCH_VERBOSE") != nullptr) args.push_back("-v");
  daemon.Start(dirs, args);
  if (!(*sim)->WaitForRegistration(kDriver, 1, absl::Seconds(30)).ok()) {
    std::printf("daemon did not come up:\n%s\n", daemon.Log().c_str());
    return false;
  }
  for (const json& r : sc.reservations) {
    if (absl::StatusOr<json> c = api.Api("POST", kResv, &r); !c.ok()) {
      std::printf("create: %s\n", std::string(c.status().message()).c_str());
      return false;
    }
    // Creation order decides who is placed first.
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }
  absl::StatusOr<testing::PrepareClaim> kept =
      MakeClaim(api, "kept", sc.kept.driver, sc.kept.device, sc.kept.cpu_share);
  absl::StatusOr<testing::PrepareClaim> cycled =
      MakeClaim(api, "cycled", sc.cycled.driver, sc.cycled.device, sc.cycled.cpu_share);
  if (!kept.ok() || !cycled.ok() || !Prepared(**sim, sc.kept.driver, *kept)) {
    std::printf("claims could not be made or prepared\n");
    return false;
  }
  const std::string pending =
      absl::StrCat(sc.reservations.back()["metadata"]["name"].get<std::string>(), "=Pending/");
  const bool settled = WaitFor(
      [&] {
        const std::string v = Visible(api);
        return v.find("=Available/") != std::string::npos && v.find(pending) != std::string::npos;
      },
      20);
  if (!settled) {
    std::printf("reservations never settled: %s\n%s\n", Visible(api).c_str(), daemon.Log().c_str());
    return false;
  }
  // Let the start-up writes (slices, first statuses) finish before counting.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const std::string before = Visible(api);
  (void)api.ClearRequests();

  for (int i = 0; i < refreshes; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (i == refreshes / 2) (void)api.CloseWatches();
  }
  const std::map<std::string, int> idle = Writes(api);
  const std::string after_idle = Visible(api);
  const double per_hour = Total(idle) * (3600.0 / 30.0) / std::max(1, refreshes);
  std::printf("%s; visible state: %s\n", sc.label.c_str(), before.c_str());
  std::printf(
      "  idle: %d refreshes (1 s apart, standing for %.0f min at 30 s) + 1 watch closure: %d "
      "writes -> %.0f per hour (floor 0, target 0)%s\n",
      refreshes, refreshes * 0.5, Total(idle), per_hour,
      Total(idle) == 0 ? "" : "  MISSES target 0");
  PrintWrites(idle);
  if (after_idle != before) std::printf("  (visible state changed: %s)\n", after_idle.c_str());

  (void)api.ClearRequests();
  int failed = 0;
  for (int i = 0; i < cycles; ++i) {
    if (!Prepared(**sim, sc.cycled.driver, *cycled)) ++failed;
    // Give the reservation controller a pass over each state.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    if (!(*sim)->Unprepare(sc.cycled.driver, {*cycled}).ok()) ++failed;
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::map<std::string, int> busy = Writes(api);
  const std::string after_busy = Visible(api);
  std::printf(
      "  busy: %d prepare+unprepare cycles of a claim of %s %s: %d writes (floor 0, target "
      "0)%s%s\n",
      cycles, sc.cycled.driver.c_str(), sc.cycled.device.c_str(), Total(busy),
      Total(busy) == 0 ? "" : "  MISSES target 0",
      failed > 0 ? absl::StrCat(" (", failed, " calls failed)").c_str() : "");
  PrintWrites(busy);
  if (after_busy != before) std::printf("  (visible state changed: %s)\n", after_busy.c_str());

  sim->reset();
  daemon.Terminate();
  std::error_code ec;
  std::filesystem::remove_all(dirs.root, ec);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : TOPODRA_TOPOLOGIES_DIR;
  const int refreshes = argc > 2 ? std::atoi(argv[2]) : 60;
  const int cycles = argc > 3 ? std::atoi(argv[3]) : 20;
  // NUMA node 0 has 16 CPUs: "held" takes 8 of them, "waiting" wants all 16 and stays Pending.
  const Scenario grouped{
      "192em64t-24n8c2t.xml (384 CPUs, grouped by NUMA node), one Available and one Pending CPU "
      "reservation, one prepared claim",
      "192em64t-24n8c2t.xml",
      {},
      {Reservation("held", {{"cpus", {{"count", 8}, {"numaNode", 0}}}}),
       Reservation("waiting", {{"cpus", {{"count", 16}, {"numaNode", 0}}}})},
      {kDriver, "cpudevnuma001", true},
      {kDriver, "cpudevnuma000", true}};
  // 16 GPUs: "gpu-held" takes one, "gpu-waiting" wants all 16 and stays Pending.
  const Scenario individual{
      "nvidiaDGX2.xml (4 CPUs one device each, 16 GPUs), one Available and one Pending GPU "
      "reservation, one prepared CPU claim",
      "nvidiaDGX2.xml",
      {"--cpu-device-mode", "individual"},
      {Reservation("gpu-held", {{"gpus", {{"count", 1}}}}),
       Reservation("gpu-waiting", {{"gpus", {{"count", 16}}}})},
      {kDriver, "cpudev001", false},
      {"gpu.topodra.io", "gpu-0000-e7-00-0", false}};
  std::printf("Churn: API writes by a node with nothing new to say\n");
  for (const Scenario* sc : {&grouped, &individual}) {
    if (!Run(*sc, dir, refreshes, cycles)) return 1;
  }
  return 0;
}
