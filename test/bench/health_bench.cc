// Device health figures for issue 18: the real `topodra run` on a fake sysfs tree (--host-root),
// the kubelet simulator's v1 health stream and the fake API server. Each round writes a fault
// into the tree (a fatal AER error on one GPU; the next round repairs it) and signals the daemon:
// a kernel "change" uevent for the GPU (what the kernel sends on AER recovery and driver
// bind/unbind), sent in a private network namespace of this program's, or SIGUSR1 (what an
// operator or the refresh timer does). The daemon re-reads sysfs, rediscovers the machine and
// republishes. Timed from the signal:
//   signal -> health message   the changed device's state seen on the health stream
//   signal -> slice stored     the GPU slice with (or without) the device's taint stored by the
//                              fake API server, seen by polling it every 2 ms
// Floors, measured in the same run: an in-process health board change -> message on a stream
// over the same kind of socket (the gRPC part alone); and this program's own GET + PUT of the
// same slice seen by the same poll (one write through the same server).
// Targets: p99 < 100 ms to the health message, p99 < 1 s to the stored slice.
//
// usage: health_bench [TOPOLOGIES_DIR] [ROUNDS]
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/health/board.h"
#include "driver/plugin/kubelet_plugin.h"
#include "driver/prepare/claim_service.h"
#include "nlohmann/json.hpp"
#include "test/bench/latency.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/kubelet_sim/health_sim.h"
#include "test/kubelet_sim/kubelet_sim.h"
#include "test/testing/fake_pci_sysfs.h"
#include "test/testing/private_net.h"

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using namespace topodra;
using topodra::bench::Ms;
using topodra::bench::Of;

constexpr char kNode[] = "bench-node";
constexpr char kGpuDriver[] = "gpu.topodra.io";
constexpr char kMachine[] = "32em64t-2n8c2t-pci-normalio.xml";
constexpr char kBad[] = "0000:83:00.0";
constexpr char kBadDevice[] = "gpu-0000-83-00-0";
constexpr char kBadKey[] = "bench-node/gpu-0000-83-00-0";
constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";

void Print(const char* label, const std::vector<double>& v) {
  const bench::Stats s = Of(v);
  std::printf("%-52s p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms  (%zu runs)\n", label, s.p50, s.p99,
              s.max, v.size());
}

bool Tainted(const json& d) {
  if (!d.contains("taints")) return false;
  for (const json& t : d["taints"]) {
    if (t["key"] == "gpu.topodra.io/unhealthy") return true;
  }
  return false;
}

// The stored GPU slice holding the device, or null.
json GpuSlice(const testing::FakeApiServer& server) {
  auto list = server.Api("GET", kSlices);
  if (!list.ok()) return nullptr;
  for (const json& s : (*list)["items"]) {
    if (s["spec"]["driver"] != kGpuDriver) continue;
    for (const json& d : s["spec"]["devices"]) {
      if (d["name"] == kBadDevice) return s;
    }
  }
  return nullptr;
}

bool SliceTainted(const json& slice) {
  for (const json& d : slice["spec"]["devices"]) {
    if (d["name"] == kBadDevice) return Tainted(d);
  }
  return false;
}

// Waits (polling every 2 ms, up to 10 s) for `pred` on the GPU slice; ms since `t0`, or -1.
template <typename Pred>
double WaitSlice(const testing::FakeApiServer& server, Clock::time_point t0, Pred pred) {
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    const json s = GpuSlice(server);
    if (!s.is_null() && pred(s)) return Ms(Clock::now() - t0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return -1;
}

// The gRPC floor: an in-process plugin whose board changes; time to the message on a stream.
std::vector<double> BoardFloor(int rounds) {
  std::vector<double> out;
  char tmpl[] = "/tmp/topodra-hb-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return out;
  const std::string dir = tmpl;
  {
    state::Ledger ledger(nullptr, state::State{});
    prepare::DriverSetup setup;
    setup.driver = kGpuDriver;
    prepare::ClaimService service(setup, topology::Topology{}, &ledger, nullptr, nullptr);
    health::Board board;
    board.Set({{kNode, kBadDevice, true, "ok"}});
    plugin::PluginOptions po;
    po.driver = kGpuDriver;
    po.kubelet_root = dir;
    po.health_board = &board;
    absl::StatusOr<std::unique_ptr<plugin::KubeletPlugin>> p =
        plugin::KubeletPlugin::Start(po, &service);
    if (!p.ok()) return out;
    auto w = testing::HealthWatcher::Start((*p)->dra_socket(), testing::kHealthV1);
    if (w.ok() && (*w)->WaitForMessages(1, absl::Seconds(5)).ok()) {
      for (int i = 0; i < rounds; ++i) {
        const bool healthy = i % 2 == 1;
        const auto t0 = Clock::now();
        board.Set({{kNode, kBadDevice, healthy, healthy ? "ok" : "bad"}});
        const std::string want = healthy ? "Healthy" : "Unhealthy";
        auto got = (*w)->WaitFor(
            [&](const testing::HealthCache& c) {
              auto it = c.find(absl::StrCat(kNode, "/", kBadDevice));
              return it != c.end() && it->second.health == want;
            },
            absl::Seconds(5));
        if (got.ok()) out.push_back(Ms(Clock::now() - t0));
      }
    }
    w = absl::UnknownError("done");
    (*p)->Stop();
  }
  std::filesystem::remove_all(dir);
  return out;
}

// The API floor: this program's own GET + PUT of the slice, seen by the same poll.
std::vector<double> PutFloor(const testing::FakeApiServer& server, int rounds) {
  std::vector<double> out;
  for (int i = 0; i < rounds; ++i) {
    json s = GpuSlice(server);
    if (s.is_null()) break;
    const std::string mark = absl::StrCat("floor-", i);
    const auto t0 = Clock::now();
    s = GpuSlice(server);
    s["metadata"]["labels"]["bench"] = mark;
    const std::string path = absl::StrCat(kSlices, "/", s["metadata"]["name"].get<std::string>());
    if (!server.Api("PUT", path, &s).ok()) break;
    const double ms = WaitSlice(server, t0, [&](const json& got) {
      return got["metadata"].contains("labels") && got["metadata"]["labels"]["bench"] == mark;
    });
    if (ms >= 0) out.push_back(ms);
  }
  return out;
}

}  // namespace

struct Figures {
  std::vector<double> to_message, to_slice;
};

// `rounds` faults set and cleared, each announced by `signal`.
Figures Measure(const testing::FakeApiServer& server, testing::FakePciSysfs& sysfs,
                testing::HealthWatcher& w, int rounds, const std::function<void()>& signal) {
  Figures f;
  for (int i = 0; i < rounds; ++i) {
    const bool fault = i % 2 == 0;
    sysfs.SetAerFatal(kBad, fault ? 1 : 0);
    const auto t0 = Clock::now();
    signal();
    const std::string want = fault ? "Unhealthy" : "Healthy";
    auto got = w.WaitFor(
        [&](const testing::HealthCache& c) {
          auto it = c.find(kBadKey);
          return it != c.end() && it->second.health == want;
        },
        absl::Seconds(10));
    if (!got.ok()) {
      std::printf("round %d: %s\n", i, std::string(got.status().message()).c_str());
      break;
    }
    f.to_message.push_back(Ms(Clock::now() - t0));
    const double ms =
        WaitSlice(server, t0, [&](const json& s) { return SliceTainted(s) == fault; });
    if (ms < 0) {
      std::printf("round %d: slice never %s\n", i, fault ? "tainted" : "untainted");
      break;
    }
    f.to_slice.push_back(ms);
  }
  return f;
}

int main(int argc, char** argv) {
  const std::string topologies = argc > 1 ? argv[1] : "test/fixtures/topologies";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 100;
  // Before anything starts: the daemon inherits the namespace and hears our uevents only.
  const std::string netns = ::geteuid() == 0 ? testing::EnterPrivateNetwork() : "not root";
  testing::FakeApiServerOptions o;
  o.nodes = {{kNode, "uid-bench-node"}};
  auto server = testing::FakeApiServer::Start(o);
  if (!server.ok()) {
    std::printf("fake API server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  const testing::DaemonDirs dirs = testing::DaemonDirs::Make();
  const std::string kubeconfig = (*server)->WriteKubeconfig(dirs.root + "/kubeconfig.yaml");
  const std::string host = dirs.root + "/host";
  testing::FakePciSysfs sysfs(host);
  for (const char* id : {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0", "0000:84:00.1"}) {
    sysfs.AddGpu(id);
  }
  testing::KubeletSimOptions so;
  so.root_dir = dirs.kubelet_root;
  auto sim = testing::KubeletSimulator::Start(so);
  if (!sim.ok()) return 1;
  testing::Daemon daemon;
  daemon.Start(dirs,
               {"--kubeconfig", kubeconfig, "--node-name", kNode, "--topology-file",
                topologies + "/" + kMachine, "--host-root", host, "--topology-refresh", "3600"});
  auto reg = (*sim)->WaitForRegistration(kGpuDriver, 1, absl::Seconds(30));
  if (!reg.ok()) {
    std::printf("the GPU driver never registered: %s\n%s\n",
                std::string(reg.status().message()).c_str(), daemon.Log().c_str());
    return 1;
  }
  auto w = testing::HealthWatcher::Start(
      reg->endpoint,
      testing::PickHealthService(reg->supported_versions, testing::HealthKubelet::k137));
  if (!w.ok() || !(*w)->WaitForMessages(1, absl::Seconds(10)).ok() ||
      WaitSlice(**server, Clock::now(), [](const json&) { return true; }) < 0) {
    std::printf("no health stream or no GPU slice\n%s\n", daemon.Log().c_str());
    return 1;
  }

  std::optional<Figures> by_uevent;
  if (netns.empty()) {
    using namespace std::string_literals;
    const std::string event =
        "change@/devices/pci0000:80/0000:80:02.0/0000:83:00.0\0ACTION=change\0"
        "DEVPATH=/devices/pci0000:80/0000:80:02.0/0000:83:00.0\0SUBSYSTEM=pci\0"
        "ERROR_EVENT=FATAL\0"s;
    by_uevent = Measure(**server, sysfs, **w, rounds, [&] { testing::SendUevent(event); });
  }
  const pid_t pid = daemon.pid();
  const Figures by_signal = Measure(**server, sysfs, **w, rounds, [pid] { ::kill(pid, SIGUSR1); });
  const std::vector<double> board_floor = BoardFloor(rounds);
  const std::vector<double> put_floor = PutFloor(**server, rounds);
  std::printf("device health, %d rounds each (a fatal AER error set and cleared on one GPU)\n",
              rounds);
  if (by_uevent) {
    Print("uevent -> health message (v1 stream)", by_uevent->to_message);
    Print("uevent -> slice stored (taint added/removed)", by_uevent->to_slice);
  } else {
    std::printf("uevent rounds skipped (no private network namespace: %s)\n", netns.c_str());
  }
  Print("SIGUSR1 -> health message (v1 stream)", by_signal.to_message);
  Print("SIGUSR1 -> slice stored (taint added/removed)", by_signal.to_slice);
  Print("  floor: board change -> message, in process", board_floor);
  Print("  floor: GET + PUT of the slice, seen by the poll", put_floor);
  std::printf("targets: health message p99 < 100 ms, slice stored p99 < 1000 ms\n");
  w = absl::UnknownError("done");
  daemon.Terminate();
  std::filesystem::remove_all(dirs.root);
  return 0;
}
