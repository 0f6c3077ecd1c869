// Two (or more) builds of the daemon restarted in turn on copies of one state of prepared claims:
// restart_bench's figure and phases, interleaved start by start so the load of this shared
// machine falls on every build alike. Each build has its own copy of the state directory (and
// so its own stored machine model: the model's key names the executable).
//
// The phases are restart_bench's, with the parent's fork split off the first (the benchmark
// process holding 10,000 claims' simulator state forks the daemon). One kubelet simulator sees
// every start, as in restart_bench.
//
// usage: restart_pairs CLAIMS ROUNDS BINARY...   (CLAIMS may be 0: the empty-state start)
// The first BINARY prepares the claims, so the state is in its format: give the build of the
// oldest state version first (a newer state makes an older build refuse to start).
//   e.g. restart_pairs 10000 6 /work/main/build/bench/cmd/topodra build/bench/cmd/topodra
// env RESTART_PAIRS_ARGS: more daemon flags, space-separated (e.g. "-v");
//     RESTART_PAIRS_LOG=1: print each build's last log with times from the fork;
//     RESTART_PAIRS_PERF=<prefix>: `perf sched record -a` around each timed start (as root);
//     RESTART_PAIRS_NEW_SIM=1: a new simulator at every start (restart_bench before session 15).
#include <signal.h>
#include <sys/wait.h>
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
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "test/bench/cpu_claims.h"
#include "test/bench/latency.h"
#include "test/bench/machine_xml.h"
#include "test/bench/restart_log.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/kubelet_sim/kubelet_sim.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace topodra;
using bench::EpochMs;
using bench::LogLineTimeMs;
using bench::Median;
using bench::Ms;
using testing::Daemon;
using testing::DaemonDirs;
using testing::FakeApiServer;
using testing::KubeletSimulator;
using testing::PrepareClaim;

constexpr char kNode[] = "bench-node";
constexpr char kDriver[] = "dra.cpu";
constexpr const char* kChecked = bench::kFilesChecked;
constexpr int kPhases = 6;
const char* const kPhaseNames[kPhases] = {"fork",      "exec->first log", "state load",
                                          "inventory", "gRPC start",      "->registered"};

struct Build {
  std::string binary;
  DaemonDirs dirs;
  std::vector<double> total, checked, phase[kPhases];
  std::string last_log;
  double last_exec_ms = 0;
};

struct Node {
  std::unique_ptr<FakeApiServer> server;
  DaemonDirs dirs;
  std::string kubeconfig, xml;
  Daemon daemon;
  std::unique_ptr<KubeletSimulator> sim;
  ~Node() {
    sim.reset();
    if (daemon.Running()) daemon.Kill();
  }
};

// RESTART_PAIRS_PERF=<prefix>: `perf sched record -a` around each recorded start, into
// <prefix>.<n>; its pid (0: none).
pid_t StartPerf() {
  static int count = 0;
  const char* prefix = std::getenv("RESTART_PAIRS_PERF");
  if (prefix == nullptr || *prefix == 0) return 0;
  const std::string out = absl::StrFormat("%s.%d", prefix, count++);
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stderr);
    execlp("perf", "perf", "sched", "record", "-a", "-o", out.c_str(), nullptr);
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return pid;
}

void StopPerf(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGINT);
  waitpid(pid, nullptr, 0);
}

// One kill -9 and start of `b`: true when it registered.
bool StartOnce(Node& n, Build& b, const std::vector<std::string>& extra, bool record) {
  // As a node's kubelet outlives the daemon's crash, one simulator sees every start, unless
  // RESTART_PAIRS_NEW_SIM=1 (a new one each time, as restart_bench did before).
  const char* new_sim = std::getenv("RESTART_PAIRS_NEW_SIM");
  if (new_sim != nullptr && *new_sim == '1') n.sim.reset();
  n.daemon.Kill();
  const pid_t perf = record ? StartPerf() : 0;
  if (n.sim == nullptr) {
    testing::KubeletSimOptions so;
    so.root_dir = n.dirs.kubelet_root;
    auto sim = KubeletSimulator::Start(so);
    if (!sim.ok()) return false;
    n.sim = *std::move(sim);
  }
  const std::optional<testing::Registration> last = n.sim->Find(kDriver);
  const int generation = last ? last->generation + 1 : 1;
  std::vector<std::string> args = {"--kubeconfig", n.kubeconfig,      "--node-name",
                                   kNode,          "--topology-file", n.xml};
  args.insert(args.end(), extra.begin(), extra.end());
  n.daemon.SetBinary(b.binary);
  const auto wall0 = std::chrono::system_clock::now();
  const auto t0 = Clock::now();
  n.daemon.Start(b.dirs, args);
  const auto forked = Clock::now();
  auto reg = n.sim->WaitForRegistration(kDriver, generation, absl::Seconds(60));
  const auto t1 = Clock::now();
  if (!reg.ok()) {
    StopPerf(perf);
    std::printf("%s: not registered: %s\n%s\n", b.binary.c_str(),
                std::string(reg.status().message()).c_str(), n.daemon.Log().c_str());
    return false;
  }
  for (int i = 0; i < 6000 && n.daemon.Log().find(kChecked) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  StopPerf(perf);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (!record) return true;
  const std::string log = n.daemon.Log();
  const double exec_ms = EpochMs(wall0) + Ms(forked - t0);
  const double registered_ms = EpochMs(wall0) + Ms(t1 - t0);
  const std::array<double, bench::kRestartMarks> at = bench::RestartMarkTimes(log);
  b.total.push_back(Ms(t1 - t0));
  b.phase[0].push_back(Ms(forked - t0));
  double before = exec_ms;
  for (int i = 0; i < 4; ++i) {
    b.phase[i + 1].push_back(at[i] < 0 ? -1 : at[i] - before);
    if (at[i] >= 0) before = at[i];
  }
  b.phase[5].push_back(registered_ms - before);
  // A start whose check had not ended within the wait has no figure: a -1 would skew the median.
  if (at[4] < 0) {
    std::printf("note: %s logged no \"CDI files checked\" line; left out of \"checked\"\n",
                b.binary.c_str());
  } else {
    b.checked.push_back(at[4] - registered_ms);
  }
  b.last_log = log;
  b.last_exec_ms = exec_ms;
  return true;
}

void PrintLog(const Build& b) {
  std::printf("--- %s, last start (ms after the fork returned)\n", b.binary.c_str());
  std::istringstream in(b.last_log);
  for (std::string line; std::getline(in, line);) {
    const double t = LogLineTimeMs(line);
    std::printf("%7.0f %s\n", t < 0 ? -1 : t - b.last_exec_ms,
                line.substr(std::min<size_t>(line.size(), 25)).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: restart_pairs CLAIMS ROUNDS BINARY...\n");
    return 2;
  }
  const int many = std::atoi(argv[1]);
  const int rounds = std::max(1, std::atoi(argv[2]));
  std::vector<std::string> extra;
  if (const char* e = std::getenv("RESTART_PAIRS_ARGS"); e != nullptr && *e) {
    extra = absl::StrSplit(e, ' ', absl::SkipEmpty());
  }
  setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_opencl,hwloc_gl,hwloc_pci,hwloc_xml_libxml", 0);

  Node n;
  testing::FakeApiServerOptions o;
  o.nodes = {{kNode, "uid-bench-node"}};
  auto server = FakeApiServer::Start(o);
  if (!server.ok()) return 1;
  n.server = *std::move(server);
  n.dirs = DaemonDirs::Make();
  n.kubeconfig = n.server->WriteKubeconfig(n.dirs.root + "/kubeconfig.yaml");
  if (std::filesystem::is_directory("/dev/shm")) {
    n.dirs.cdi = std::string(n.dirs.root).replace(0, 4, "/dev/shm") + "-cdi";
  }
  n.xml = n.dirs.root + "/machine.xml";
  { std::ofstream(n.xml) << bench::MachineXml(4, 4, 400, 2); }

  std::vector<Build> builds;
  for (int i = 3; i < argc; ++i) {
    Build b;
    b.binary = argv[i];
    b.dirs = n.dirs;
    b.dirs.state = absl::StrFormat("%s/state-%d", n.dirs.root, i - 3);
    builds.push_back(std::move(b));
  }
  Build first = builds[0];
  first.dirs = n.dirs;
  if (!StartOnce(n, first, extra, false)) return 1;
  if (many > 0) {
    std::vector<PrepareClaim> claims = bench::MakeCpuClaims(*n.server, kNode, "many-", many, 16);
    std::atomic<int> next{0}, failed{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 16; ++t) {
      pool.emplace_back([&] {
        for (int i = next++; i < many; i = next++) {
          auto p = n.sim->Prepare(kDriver, {claims[i]});
          if (!p.ok() || !(*p)[claims[i].uid].error.empty()) ++failed;
        }
      });
    }
    for (std::thread& t : pool) t.join();
    std::printf("%d claims prepared, %d failed\n", many, failed.load());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  n.daemon.Kill();
  for (Build& b : builds) {
    std::filesystem::copy(n.dirs.state, b.dirs.state, std::filesystem::copy_options::recursive);
    // Its own model stored, as after an earlier start of this build.
    if (!StartOnce(n, b, extra, false)) return 1;
  }
  for (int r = 0; r < rounds; ++r) {
    for (Build& b : builds) {
      if (!StartOnce(n, b, extra, true)) return 1;
    }
  }
  n.sim.reset();
  n.daemon.Kill();
  std::printf("%d claims, %d rounds (medians, ms; log timestamps have 1 ms resolution)\n", many,
              rounds);
  for (const Build& b : builds) {
    std::string line = absl::StrFormat("%s\n  total %.1f:", b.binary, Median(b.total));
    for (int p = 0; p < kPhases; ++p) {
      absl::StrAppendFormat(&line, " %s %.1f,", kPhaseNames[p], Median(b.phase[p]));
    }
    absl::StrAppendFormat(&line, " checked +%.0f (%zu starts)\n  totals:", Median(b.checked),
                          b.checked.size());
    for (double t : b.total) absl::StrAppendFormat(&line, " %.1f", t);
    absl::StrAppend(&line, "\n  ->registered:");
    for (double t : b.phase[5]) absl::StrAppendFormat(&line, " %.0f", t);
    absl::StrAppend(&line, "\n  exec->first log:");
    for (double t : b.phase[1]) absl::StrAppendFormat(&line, " %.0f", t);
    std::printf("%s\n", line.c_str());
  }
  if (const char* l = std::getenv("RESTART_PAIRS_LOG"); l != nullptr && *l == '1') {
    for (const Build& b : builds) PrintLog(b);
  }
  std::error_code ec;
  std::filesystem::remove_all(n.dirs.cdi, ec);
  if (n.dirs.root.starts_with("/tmp/")) std::filesystem::remove_all(n.dirs.root, ec);
  return 0;
}
