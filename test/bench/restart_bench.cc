// Restart figure of issue 19: `topodra run` killed with SIGKILL while it holds 10,000 prepared
// claims, started again on the same state: time until the kubelet (simulator) sees its
// registration socket. 10,000 claims held at once need 10,000 CPUs, so the machine has 12,800
// (pack:4 numa:4 core:400 pu:2), grouped by NUMA node.
//
// The machine is given two ways, each measured: as the hwloc XML export a node's machine would be
// read from (`--topology-file`, written by this benchmark before anything is timed): the figure;
// and as `--topology-synthetic`, which hwloc builds in time quadratic in the CPUs (seconds at
// 12,800), a cost of the test machine only, printed for comparison with earlier runs.
//
// Printed beside floors measured in the same run:
//   - the same start, killed and restarted the same way, with an empty state (what starting a
//     12,800-CPU machine costs whatever the claims; the difference is the per-claim cost);
//   - both starts again with --topology-cache=off: the machine discovered by hwloc at every
//     start instead of read from the model the daemon stored in its state directory;
//   - discovering the machine in this process (hwloc alone, both ways);
//   - reading and parsing the state files alone (StateStore::Peek in this process);
//   - reading the CDI spec files the claims left (listing the directory and reading every file);
// and, from the daemon's own log lines, where a start's time goes, phase by phase.
//
// usage: restart_bench [RESTARTS] [CLAIMS]
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "driver/state/store.h"
#include "nlohmann/json.hpp"
#include "test/bench/cpu_claims.h"
#include "test/bench/latency.h"
#include "test/bench/machine_xml.h"
#include "test/bench/restart_log.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/kubelet_sim/kubelet_sim.h"
#include "topology/discoverer.h"
#include "topology/topology_format.h"

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using namespace topodra;
using bench::EpochMs;
using bench::Median;
using bench::Ms;
using testing::Daemon;
using testing::DaemonDirs;
using testing::FakeApiServer;
using testing::KubeletSimulator;
using testing::PrepareClaim;

constexpr char kNode[] = "bench-node";
constexpr char kDriver[] = "dra.cpu";
constexpr double kTargetMs = 150;
constexpr char kSynthetic[] = "pack:4 numa:4 core:400 pu:2";
constexpr int kNumaDevices = 16;

struct Node {
  std::unique_ptr<FakeApiServer> server;
  DaemonDirs dirs;
  std::string cdi_dir;
  std::string kubeconfig;
  Daemon daemon;
  std::unique_ptr<KubeletSimulator> sim;
  // The 10,000 claims' state (42 MB) and their 20,000 CDI files in /dev/shm go with the bench.
  ~Node() {
    sim.reset();
    if (daemon.Running()) daemon.Terminate();
    std::error_code ec;
    if (cdi_dir != dirs.cdi) std::filesystem::remove_all(cdi_dir, ec);
    if (dirs.root.starts_with("/tmp/")) std::filesystem::remove_all(dirs.root, ec);
  }
};

bool MakeNode(Node& n) {
  testing::FakeApiServerOptions o;
  o.nodes = {{kNode, "uid-bench-node"}};
  auto server = FakeApiServer::Start(o);
  if (!server.ok()) {
    std::printf("fake API server: %s\n", std::string(server.status().message()).c_str());
    return false;
  }
  n.server = *std::move(server);
  n.dirs = DaemonDirs::Make();
  n.kubeconfig = n.server->WriteKubeconfig(n.dirs.root + "/kubeconfig.yaml");
  n.cdi_dir = n.dirs.cdi;
  // As on a node: CDI specs on tmpfs (/var/run/cdi), the state on disk.
  if (std::filesystem::is_directory("/dev/shm")) {
    n.cdi_dir = std::string(n.dirs.root).replace(0, 4, "/dev/shm") + "-cdi";
  }
  return true;
}

// Where one start's time went, from the daemon's log lines (millisecond timestamps) and the
// benchmark's clock: exec -> first log line (process and library load, discovery, flags), ->
// state loaded (directories, locks, snapshot + journal), -> the inventory built and the file
// check started, -> sockets served (gRPC servers), -> the kubelet sees the registration socket;
// and when the background check (begun before the sockets are served) of the claims' CDI and
// metadata files ended ("CDI files checked"), counted from the registration.
constexpr int kPhases = 5;
const char* const kPhaseNames[kPhases] = {"exec->first log", "state load", "inventory",
                                          "gRPC start", "->registered"};
struct Phases {
  double ms[kPhases] = {};
  double checked_after_ms = 0;  // the file check's end, after registration (negative: before)
  bool ok = false;
};
constexpr const char* kChecked = bench::kFilesChecked;

Phases PhasesOf(const std::string& log, double exec_ms, double registered_ms) {
  const std::array<double, bench::kRestartMarks> at = bench::RestartMarkTimes(log);
  if (at[4] < 0) return {};
  Phases p;
  double before = exec_ms;
  for (int i = 0; i < 4; ++i) {
    if (at[i] < 0) return p;
    p.ms[i] = at[i] - before;
    before = at[i];
  }
  p.ms[4] = registered_ms - before;
  p.checked_after_ms = at[4] - registered_ms;
  p.ok = true;
  return p;
}

struct Start {
  double ms = -1;  // start -> registered
  Phases phases;
};

// Starts the daemon on `machine` and returns the time from the start to its registration
// (negative: it did not register). One kubelet simulator sees every start, as a node's kubelet
// outlives the daemon's crash: it had registered the killed daemon's socket, and registers the
// new one when the daemon replaces it. A simulator started anew with each daemon found the
// killed daemon's socket, dialled it, and noticed its replacement only at its next check of a
// dial in progress (every 50 ms): 0-50 ms of the simulator's own in each start's figure.
Start StartToRegistered(Node& n, const std::vector<std::string>& machine) {
  if (n.sim == nullptr) {
    testing::KubeletSimOptions so;
    so.root_dir = n.dirs.kubelet_root;
    auto sim = KubeletSimulator::Start(so);
    if (!sim.ok()) return {};
    n.sim = *std::move(sim);
  }
  const std::optional<testing::Registration> last = n.sim->Find(kDriver);
  const int generation = last ? last->generation + 1 : 1;
  std::vector<std::string> args = {"--kubeconfig", n.kubeconfig, "--node-name",
                                   kNode,          "--cdi-dir",  n.cdi_dir};
  args.insert(args.end(), machine.begin(), machine.end());
  const auto wall0 = std::chrono::system_clock::now();
  const auto t0 = Clock::now();
  n.daemon.Start(n.dirs, args);
  auto reg = n.sim->WaitForRegistration(kDriver, generation, absl::Seconds(60));
  const auto t1 = Clock::now();
  Start out;
  out.ms = Ms(t1 - t0);
  if (!reg.ok()) {
    std::printf("not registered: %s\n%s\n", std::string(reg.status().message()).c_str(),
                n.daemon.Log().c_str());
    out.ms = -1;
    return out;
  }
  // The file check goes on after registering: wait for its end (the next kill then finds the
  // daemon idle, and its end is one of the phases).
  for (int i = 0; i < 6000 && n.daemon.Log().find(kChecked) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  out.phases =
      PhasesOf(n.daemon.Log(), EpochMs(wall0),
               EpochMs(wall0) + std::chrono::duration<double, std::milli>(t1 - t0).count());
  return out;
}

struct Restarted {
  std::vector<double> ms;  // sorted
  Phases phases;           // each phase's median over the starts that logged every phase
  double median() const { return Median(ms); }
};

// kill -9 then start again, `times` times.
Restarted Restarts(Node& n, const std::vector<std::string>& machine, int times) {
  Restarted out;
  std::vector<double> phase[kPhases], checked;
  for (int i = 0; i < times; ++i) {
    n.daemon.Kill();
    const Start s = StartToRegistered(n, machine);
    if (s.ms < 0) return {};
    out.ms.push_back(s.ms);
    if (s.phases.ok) {
      for (int p = 0; p < kPhases; ++p) phase[p].push_back(s.phases.ms[p]);
      checked.push_back(s.phases.checked_after_ms);
    }
    // The daemon goes on after registering (publishing, compaction): let it settle so the next
    // kill finds it idle, as a node would be.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::sort(out.ms.begin(), out.ms.end());
  if (!phase[0].empty()) {
    for (int p = 0; p < kPhases; ++p) out.phases.ms[p] = Median(phase[p]);
    out.phases.checked_after_ms = Median(checked);
    out.phases.ok = true;
  }
  return out;
}

std::string PhaseLine(const Restarted& r) {
  if (!r.phases.ok) return "(phases not found in the daemon's log)";
  std::string out;
  for (int p = 0; p < kPhases; ++p) {
    absl::StrAppend(&out, p == 0 ? "" : ", ", kPhaseNames[p], " ",
                    absl::StrFormat("%.0f", r.phases.ms[p]));
  }
  return absl::StrCat(out, " ms; CDI/metadata files checked (in the background) ",
                      absl::StrFormat("%.0f", r.phases.checked_after_ms),
                      " ms after registration (medians; log timestamps have 1 ms resolution)");
}

// Reads and parses the state as the daemon's start does (snapshot + journal into a State).
double PeekMs(const std::string& state_dir, int* size, int times) {
  std::vector<double> took;
  for (int i = 0; i < times; ++i) {
    const auto a = Clock::now();
    absl::StatusOr<state::State> st = state::StateStore::Peek(state_dir + "/checkpoint.json");
    took.push_back(Ms(Clock::now() - a));
    if (!st.ok()) {
      std::printf("peek: %s\n", std::string(st.status().message()).c_str());
      return -1;
    }
    *size = st->Size();
  }
  return Median(took);
}

// Lists `dir` and reads every file in it: the I/O floor of looking at each claim's CDI spec.
double ReadDirMs(const std::string& dir, int* files, int times) {
  std::vector<double> took;
  std::string buf(1 << 16, '\0');
  for (int i = 0; i < times; ++i) {
    *files = 0;
    const auto a = Clock::now();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return -1;
    for (dirent* e = ::readdir(d); e != nullptr; e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const int fd = ::openat(::dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      while (::read(fd, buf.data(), buf.size()) > 0) {
      }
      ::close(fd);
      ++*files;
    }
    ::closedir(d);
    took.push_back(Ms(Clock::now() - a));
  }
  return Median(took);
}

// Discovers `source` in this process (hwloc and the model), the median of `times`; the JSON of
// the last one in `json_out` without its "source".
double DiscoverMs(const topology::TopologySource& source, int times, std::string* json_out) {
  std::vector<double> took;
  for (int i = 0; i < times; ++i) {
    const auto a = Clock::now();
    absl::StatusOr<topology::Topology> topo = topology::Discover(source);
    took.push_back(Ms(Clock::now() - a));
    if (!topo.ok()) {
      std::printf("discover %s: %s\n", source.Describe().c_str(),
                  std::string(topo.status().message()).c_str());
      return -1;
    }
    json j = topology::TopologyToJson(*topo);
    j.erase("source");
    *json_out = j.dump();
  }
  return Median(took);
}

std::string Verdict(double ms) {
  return ms <= kTargetMs
             ? std::string("met")
             : absl::StrCat("MISSES target by ", static_cast<int>(ms - kTargetMs), " ms");
}

}  // namespace

int main(int argc, char** argv) {
  const int restarts = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int many = argc > 2 ? std::max(1, std::atoi(argv[2])) : 10000;
  // As `topodra` does: hwloc parses XML with its own parser, not libxml2's plugin.
  setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_opencl,hwloc_gl,hwloc_pci,hwloc_xml_libxml", 0);

  Node n;
  if (!MakeNode(n)) return 1;
  // The machine as a node would export it once: written, and checked to be the synthetic one,
  // before anything is timed.
  const std::string xml_path = n.dirs.root + "/machine.xml";
  { std::ofstream(xml_path) << bench::MachineXml(4, 4, 400, 2); }
  std::string from_xml, from_synthetic;
  const double discover_xml = DiscoverMs(topology::TopologySource::XmlFile(xml_path), 3, &from_xml);
  const double discover_synthetic =
      DiscoverMs(topology::TopologySource::Synthetic(kSynthetic), 1, &from_synthetic);
  if (discover_xml < 0 || discover_synthetic < 0) return 1;
  if (from_xml != from_synthetic) {
    std::printf("the XML machine %s is not the synthetic one \"%s\"\n", xml_path.c_str(),
                kSynthetic);
    return 1;
  }
  const std::vector<std::string> xml = {"--topology-file", xml_path};
  const std::vector<std::string> synthetic = {"--topology-synthetic", kSynthetic};

  if (StartToRegistered(n, xml).ms < 0) return 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long rss_idle = n.daemon.RssKib();
  // Floor: the same kill -9 and start, nothing in the state.
  const Restarted empty = Restarts(n, xml, restarts);
  const Restarted empty_synthetic = Restarts(n, synthetic, restarts);
  std::vector<std::string> xml_discovered = xml;
  xml_discovered.insert(xml_discovered.end(), {"--topology-cache", "off"});
  const Restarted empty_discovered = Restarts(n, xml_discovered, restarts);
  if (empty.ms.empty() || empty_synthetic.ms.empty() || empty_discovered.ms.empty()) return 1;

  const auto c0 = Clock::now();
  std::vector<PrepareClaim> claims =
      bench::MakeCpuClaims(*n.server, kNode, "many-", many, kNumaDevices);
  const double create_s = Ms(Clock::now() - c0) / 1000.0;
  std::atomic<int> next{0}, failed{0};
  const auto p0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < 16; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < many; i = next++) {
        auto p = n.sim->Prepare(kDriver, {claims[i]});
        if (!p.ok() || !(*p)[claims[i].uid].error.empty()) {
          if (failed++ == 0 && p.ok()) {
            std::printf("  error: %s\n", (*p)[claims[i].uid].error.c_str());
          }
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  const double prep_s = Ms(Clock::now() - p0) / 1000.0;
  const int held = many - failed.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long rss_held = n.daemon.RssKib();

  const Restarted full_synthetic = Restarts(n, synthetic, restarts);
  const Restarted full_discovered = Restarts(n, xml_discovered, restarts);
  const Restarted full = Restarts(n, xml, restarts);
  if (full.ms.empty() || full_synthetic.ms.empty() || full_discovered.ms.empty()) return 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long rss_loaded = n.daemon.RssKib();
  // The floors that read files: the daemon is idle, its files are as it left them.
  int loaded = 0, cdi_files = 0;
  const double peek = PeekMs(n.dirs.state, &loaded, 5);
  const double cdi_read = ReadDirMs(n.cdi_dir, &cdi_files, 5);
  auto size_of = [](const std::string& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    return ec ? 0.0 : static_cast<double>(size);
  };
  const double state_bytes = size_of(n.dirs.state + "/checkpoint.json");
  const double journal_bytes = size_of(n.dirs.state + "/checkpoint.json.journal");
  n.sim.reset();
  n.daemon.Terminate();

  std::printf("12,800 CPUs (%s), grouped by NUMA node\n", kSynthetic);
  std::printf(
      "(%d claims created in %.1f s by the fake API server; prepared in %.1f s at concurrency "
      "16: %.0f claims/s; %d failed; daemon RSS idle %.1f MB, holding them %.1f MB, after a "
      "restart %.1f MB; state files %.1f MB + journal %.1f MB)\n",
      many, create_s, prep_s, many / prep_s, failed.load(), rss_idle / 1024.0, rss_held / 1024.0,
      rss_loaded / 1024.0, state_bytes / 1e6, journal_bytes / 1e6);
  std::printf(
      "floor: discover the machine in process: from its XML export %.1f ms, from the synthetic "
      "description %.1f ms (same topology)\n",
      discover_xml, discover_synthetic);
  std::printf(
      "floor: kill -9 with an empty state -> registered: machine from XML median %.1f ms, min "
      "%.1f ms; synthetic median %.1f ms, min %.1f ms\n",
      empty.median(), empty.ms.front(), empty_synthetic.median(), empty_synthetic.ms.front());
  std::printf("  phases, empty state, XML: %s\n", PhaseLine(empty).c_str());
  std::printf(
      "  the same with --topology-cache=off (hwloc at every start): median %.1f ms, min %.1f ms; "
      "phases: %s\n",
      empty_discovered.median(), empty_discovered.ms.front(), PhaseLine(empty_discovered).c_str());
  std::printf(
      "floor: read+parse the state files (%d allocations, StateStore::Peek): %.1f ms; list+read "
      "the %d CDI files: %.1f ms\n",
      loaded, peek, cdi_files, cdi_read);
  std::printf(
      "synthetic machine (not the figure: hwloc builds it in time quadratic in the CPUs): kill -9 "
      "with %d prepared claims -> registered: median %.1f ms, min %.1f ms; %.1f ms over its "
      "empty start = %.1f us per claim\n",
      held, full_synthetic.median(), full_synthetic.ms.front(),
      full_synthetic.median() - empty_synthetic.median(),
      (full_synthetic.median() - empty_synthetic.median()) * 1000.0 / std::max(held, 1));
  std::printf("  phases, %d claims, XML: %s\n", held, PhaseLine(full).c_str());
  std::printf(
      "  the same with --topology-cache=off (hwloc at every start): median %.1f ms, min %.1f ms; "
      "phases: %s\n",
      full_discovered.median(), full_discovered.ms.front(), PhaseLine(full_discovered).c_str());
  const double per_claim_us = (full.median() - empty.median()) * 1000.0 / std::max(held, 1);
  std::printf(
      "kill -9 with %d prepared claims -> the kubelet simulator sees the registration (the "
      "daemon's side; machine from its XML export, as a node reads it): median %.1f ms, min %.1f "
      "ms (%d restarts); %.1f ms over the empty start = %.1f "
      "us per claim; target <= %.0f ms: %s\n",
      held, full.median(), full.ms.front(), restarts, full.median() - empty.median(), per_claim_us,
      kTargetMs, Verdict(full.median()).c_str());
  return 0;
}
