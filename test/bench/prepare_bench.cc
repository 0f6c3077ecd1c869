// Kubelet-plugin figures for issue 4, from the real `topodra run` binary driven by the kubelet
// simulator over Unix sockets against the fake API server:
//   - start -> registered with the kubelet, daemon RSS idle;
//   - prepare and unprepare latency (p50/p99) and throughput of one-claim calls at concurrency 1
//     and 16, next to a floor measured in the same run: an empty gRPC call over the same kind of
//     socket (the daemon's GetInfo), one claim GET from the fake API server, and one journal
//     append + fdatasync in the state directory (the one sync the design needs per call);
//   - the daemon's CPU time (user+sys of the whole process, /proc/<pid>/stat) per
//     prepare+unprepare cycle at concurrency 1 and 16;
//   - daemon RSS after 10,000 prepared claims;
//   - one call of 16 claims whose GETs the fake API server holds 50 ms each (concurrent fetch).
//
// usage: [TOPODRA_BENCH_DAEMON_ARGS="--flag value ..."] [TOPODRA_BENCH_VERBOSE=1]
//        [TOPODRA_BENCH_METADATA_ON_DISK=1] prepare_bench [TOPOLOGIES_DIR] [ITERATIONS]
//        [--latency-only]
// TOPODRA_BENCH_VERBOSE runs the daemon with -v and saves its log (each prepare's and unprepare's
// phases in microseconds) to /tmp/prepare_bench_daemon.log. The device metadata host files are on
// tmpfs (--device-metadata-dir), as the chart has them; TOPODRA_BENCH_METADATA_ON_DISK leaves
// them in the kubelet's plugin directory on disk (the daemon's default, the chart's before).
// At concurrency 1 the latency floors are sampled alternately with the cycles (one floor sample,
// one prepare, one unprepare) and the ratios are to those; a second concurrency-1 load with nothing
// in between gives the daemon's CPU per cycle.
// --latency-only stops after the concurrency-1 and 16 loads: with the daemon under callgrind
// (docs/dev/benchmarks.md), two runs with different ITERATIONS give its instructions per cycle.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/kube/rest_client.h"
#include "nlohmann/json.hpp"
#include "proto/pluginregistration/api.grpc.pb.h"
#include "test/bench/cpu_claims.h"
#include "test/bench/latency.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/kubelet_sim/kubelet_sim.h"

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using namespace topodra;
using testing::Daemon;
using testing::DaemonDirs;
using testing::FakeApiServer;
using testing::KubeletSimulator;
using testing::PrepareClaim;

constexpr char kNode[] = "bench-node";
constexpr char kDriver[] = "dra.cpu";

using topodra::bench::Ms;

using topodra::bench::Of;
using topodra::bench::Stats;

// Issue 19's targets.
constexpr double kPrepareTarget = 1.3;    // prepare p50 / its floor, concurrency 1
constexpr double kUnprepareTarget = 1.2;  // unprepare p50 / its floor, concurrency 1
constexpr double kCpuTargetUs = 100;      // daemon CPU per prepare+unprepare cycle

// utime + stime of the whole process (every thread, the exited ones too) from /proc/<pid>/stat,
// in microseconds; -1 when it cannot be read. Its resolution is one clock tick (10 ms). With
// `sys`, the stime part goes there.
// CPU time of the calling thread (user+sys, the scheduler's exact count), in microseconds.
double ThreadCpuUs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// The CPU floor of one prepare+unprepare cycle (set in main before the loads): two empty gRPC
// calls as the daemon spends them, one claim GET as our HTTP client spends it, two journal
// appends with their fdatasync. 0 when it could not be measured.
double g_cpu_floor_us = 0;

double ProcessCpuUs(pid_t pid, double* sys = nullptr) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return -1;
  std::istringstream fields(text.substr(paren + 1));
  std::string field;
  long utime = -1, stime = -1;
  // After the name: state is field 3, utime field 14, stime field 15.
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::atol(field.c_str());
    if (i == 15) stime = std::atol(field.c_str());
  }
  if (utime < 0 || stime < 0) return -1;
  if (sys != nullptr)
    *sys = static_cast<double>(stime) * 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return static_cast<double>(utime + stime) * 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::string Verdict(bool meets, const std::string& target) {
  return meets ? absl::StrCat("meets target ", target) : absl::StrCat("MISSES target ", target);
}

struct Node {
  std::unique_ptr<FakeApiServer> server;
  DaemonDirs dirs;
  std::string kubeconfig;
  Daemon daemon;
  std::unique_ptr<KubeletSimulator> sim;
  double start_to_registered_ms = 0;
};

// The daemon's CDI directory: on tmpfs when the machine has /dev/shm, as /var/run/cdi on a node.
std::string CdiDir(const Node& n) {
  if (!std::filesystem::is_directory("/dev/shm") || !n.dirs.root.starts_with("/tmp/")) {
    return n.dirs.cdi;
  }
  return std::string(n.dirs.root).replace(0, 4, "/dev/shm") + "-cdi";
}

// The daemon's --device-metadata-dir: on tmpfs, as the chart's /var/run/topodra/device-metadata;
// "" (none given: the kubelet's plugin directory, on disk) with TOPODRA_BENCH_METADATA_ON_DISK or
// without /dev/shm.
std::string MetadataDir(const Node& n) {
  if (std::getenv("TOPODRA_BENCH_METADATA_ON_DISK") != nullptr ||
      !std::filesystem::is_directory("/dev/shm") || !n.dirs.root.starts_with("/tmp/")) {
    return "";
  }
  return std::string(n.dirs.root).replace(0, 4, "/dev/shm") + "-metadata";
}

// Removes what the bench made outside the daemon's temporary directory.
struct ShmCleanup {
  const Node& n;
  ~ShmCleanup() {
    std::error_code ec;
    if (CdiDir(n) != n.dirs.cdi) std::filesystem::remove_all(CdiDir(n), ec);
    if (!MetadataDir(n).empty()) std::filesystem::remove_all(MetadataDir(n), ec);
  }
};

bool StartNode(Node& n, const std::vector<std::string>& machine) {
  if (n.server == nullptr) {
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
  }
  testing::KubeletSimOptions so;
  so.root_dir = n.dirs.kubelet_root;
  n.sim.reset();
  auto sim = KubeletSimulator::Start(so);
  if (!sim.ok()) return false;
  n.sim = *std::move(sim);
  std::vector<std::string> args = {"--kubeconfig", n.kubeconfig, "--node-name", kNode};
  // As on a node with the chart: CDI specs and device metadata host files on tmpfs
  // (/var/run/cdi, /var/run/topodra/device-metadata), the state on disk.
  if (CdiDir(n) != n.dirs.cdi) {
    args.push_back("--cdi-dir");
    args.push_back(CdiDir(n));
  }
  if (!MetadataDir(n).empty()) {
    args.push_back("--device-metadata-dir");
    args.push_back(MetadataDir(n));
  }
  args.insert(args.end(), machine.begin(), machine.end());
  // More daemon flags, space-separated, for looking into the figures (e.g. "--device-metadata
  // off": what the metadata files cost).
  if (const char* extra = std::getenv("TOPODRA_BENCH_DAEMON_ARGS"); extra != nullptr) {
    std::istringstream words(extra);
    for (std::string w; words >> w;) args.push_back(w);
  }
  // Per-phase timings of each prepare in the daemon log, for looking into the figures.
  if (std::getenv("TOPODRA_BENCH_VERBOSE") != nullptr) args.push_back("-v");
  const auto t0 = Clock::now();
  n.daemon.Start(n.dirs, args);
  auto reg = n.sim->WaitForRegistration(kDriver, 1, absl::Seconds(30));
  n.start_to_registered_ms = Ms(Clock::now() - t0);
  if (!reg.ok()) {
    std::printf("not registered: %s\n%s\n", std::string(reg.status().message()).c_str(),
                n.daemon.Log().c_str());
    return false;
  }
  return true;
}

// With TOPODRA_BENCH_VERBOSE, the daemon's log (per-phase times of each prepare and unprepare)
// goes to /tmp/prepare_bench_daemon.log.
void SaveVerboseLog(Node& n) {
  if (std::getenv("TOPODRA_BENCH_VERBOSE") == nullptr) return;
  std::FILE* f = std::fopen("/tmp/prepare_bench_daemon.log", "w");
  if (f == nullptr) return;
  const std::string log = n.daemon.Log();
  std::fwrite(log.data(), 1, log.size(), f);
  std::fclose(f);
  std::printf("daemon log: /tmp/prepare_bench_daemon.log\n");
}

void StopNode(Node& n) {
  n.sim.reset();
  n.daemon.Terminate();
}

// One sample of each latency floor per call of Sample(): an empty gRPC call on the daemon's
// socket, one claim GET from the fake API server, one 300-byte append + fdatasync in the
// daemon's state directory. At concurrency 1 the load calls it before each cycle, so the floors
// and the figures are sampled alternately and machine noise (other processes' disk syncs above
// all) hits both alike.
class FloorSampler {
 public:
  FloorSampler(Node& n, const std::vector<PrepareClaim>& claims)
      : claims_(claims), path_(n.dirs.state + "/floor-interleaved.journal") {
    auto channel = grpc::CreateChannel("unix:" + n.sim->Find(kDriver)->socket_path,
                                       grpc::InsecureChannelCredentials());
    stub_ = pluginregistration::Registration::NewStub(channel);
    if (auto config = kube::KubeconfigConfig(n.kubeconfig); config.ok()) {
      if (auto client = kube::NewHttpRestClient(*config); client.ok()) client_ = *std::move(client);
    }
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  }
  ~FloorSampler() {
    if (fd_ >= 0) ::close(fd_);
    std::filesystem::remove(path_);
  }
  bool ok() const { return client_ != nullptr && fd_ >= 0; }

  void Sample() {
    {
      grpc::ClientContext ctx;
      pluginregistration::InfoRequest req;
      pluginregistration::PluginInfo info;
      const auto a = Clock::now();
      if (stub_->GetInfo(&ctx, req, &info).ok()) grpc_.push_back(Ms(Clock::now() - a));
    }
    {
      const PrepareClaim& c = claims_[next_++ % claims_.size()];
      const auto a = Clock::now();
      auto got = client_->Get(
          absl::StrCat("/apis/resource.k8s.io/v1/namespaces/bench/resourceclaims/", c.name));
      if (got.ok()) get_.push_back(Ms(Clock::now() - a));
    }
    {
      const std::string line(300, 'x');
      const auto a = Clock::now();
      if (::write(fd_, line.data(), line.size()) >= 0 && ::fdatasync(fd_) == 0) {
        sync_.push_back(Ms(Clock::now() - a));
      }
    }
  }
  double grpc() const { return Of(grpc_).p50; }
  double get() const { return Of(get_).p50; }
  double sync() const { return Of(sync_).p50; }
  double prepare() const { return grpc() + get() + sync(); }
  double unprepare() const { return grpc() + sync(); }

 private:
  const std::vector<PrepareClaim>& claims_;
  const std::string path_;
  std::unique_ptr<pluginregistration::Registration::Stub> stub_;
  std::unique_ptr<kube::RestClient> client_;
  int fd_ = -1;
  size_t next_ = 0;
  std::vector<double> grpc_, get_, sync_;
};

// `path` with its symbolic links followed, as far as it exists.
std::string Resolved(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : p.string();
}

// The file systems the daemon writes to, as the bench laid them out: a node with the chart has
// /var/run/cdi and the device metadata host files on tmpfs and the state on disk.
std::string FsType(const std::string& path) {
  std::ifstream mounts("/proc/self/mounts");
  std::string best_dir, best_type;
  std::string dev, dir, type, rest;
  while (mounts >> dev >> dir >> type && std::getline(mounts, rest)) {
    if ((path == dir || path.starts_with(dir == "/" ? dir : dir + "/")) &&
        dir.size() >= best_dir.size()) {
      best_dir = dir;
      best_type = type;
    }
  }
  return best_type.empty() ? "?" : best_type;
}

// One-claim prepare+unprepare calls from `threads` threads; each thread cycles through its own
// claims so no two calls contend for the same claim. Prints the latencies beside their floors,
// the throughput, and the daemon's CPU time per cycle; with `targets`, whether the latency
// ratios meet issue 19's targets (they are set for concurrency 1).
// With `interleave` (concurrency 1 only), a floor sample is taken before each cycle and the
// ratios are to those floors; the daemon's CPU is then not printed (the GetInfo calls would be in
// it). With `cpu_only`, only the CPU line is printed.
int RunLoad(Node& n, const std::vector<PrepareClaim>& claims, int threads, int iterations,
            const char* label, double floor_prepare, double floor_unprepare, bool targets,
            FloorSampler* interleave = nullptr, bool cpu_only = false) {
  std::vector<std::vector<double>> prep(threads), unprep(threads);
  std::atomic<int> errors{0};
  double sys0 = 0, sys1 = 0;
  const double cpu0 = ProcessCpuUs(n.daemon.pid(), &sys0);
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < iterations / threads; ++i) {
        const PrepareClaim& c = claims[(t + i * threads) % claims.size()];
        if (interleave != nullptr) interleave->Sample();
        auto a = Clock::now();
        auto p = n.sim->Prepare(kDriver, {c});
        auto b = Clock::now();
        auto u = n.sim->Unprepare(kDriver, {c});
        auto e = Clock::now();
        if (!p.ok() || !(*p)[c.uid].error.empty() || !u.ok() || !(*u)[c.uid].empty()) {
          if (errors++ == 0 && p.ok()) std::printf("  error: %s\n", (*p)[c.uid].error.c_str());
        }
        prep[t].push_back(Ms(b - a));
        unprep[t].push_back(Ms(e - b));
      }
    });
  }
  for (std::thread& t : pool) t.join();
  const double seconds = Ms(Clock::now() - t0) / 1000.0;
  const double cpu1 = ProcessCpuUs(n.daemon.pid(), &sys1);
  std::vector<double> all_p, all_u;
  for (int t = 0; t < threads; ++t) {
    all_p.insert(all_p.end(), prep[t].begin(), prep[t].end());
    all_u.insert(all_u.end(), unprep[t].begin(), unprep[t].end());
  }
  const Stats p = Of(all_p), u = Of(all_u);
  const int cycles = static_cast<int>(all_p.size());
  if (interleave != nullptr) {
    floor_prepare = interleave->prepare();
    floor_unprepare = interleave->unprepare();
    std::printf(
        "%-15s floors sampled alternately with the cycles: gRPC %.3f + GET %.3f + sync %.3f ms: "
        "prepare %.3f ms, unprepare %.3f ms\n",
        label, interleave->grpc(), interleave->get(), interleave->sync(), floor_prepare,
        floor_unprepare);
  }
  const double claims_per_s = static_cast<double>(cycles) / seconds;
  const double rp = p.p50 / floor_prepare, ru = u.p50 / floor_unprepare;
  if (!cpu_only)
    std::printf(
        "%-15s prepare p50 %6.3f ms p99 %6.3f ms (%.2fx floor%s) | unprepare p50 %6.3f ms p99 "
        "%6.3f ms (%.2fx floor%s) | %7.0f claims/s prepared+unprepared%s\n",
        label, p.p50, p.p99, rp,
        targets ? absl::StrCat("; ", Verdict(rp <= kPrepareTarget, "<= 1.3x")).c_str() : "", u.p50,
        u.p99, ru,
        targets ? absl::StrCat("; ", Verdict(ru <= kUnprepareTarget, "<= 1.2x")).c_str() : "",
        claims_per_s, errors > 0 ? absl::StrCat(" (", errors.load(), " errors)").c_str() : "");
  if (interleave == nullptr && cpu0 >= 0 && cpu1 >= 0 && cycles > 0) {
    const double per_cycle = (cpu1 - cpu0) / cycles;
    const double tick_us = 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
    std::printf(
        "%-15s daemon CPU (user+sys) per prepare+unprepare cycle: %.0f us (sys %.0f us; %.0f ms "
        "over %d cycles, +-%.0f us; %.1fx the CPU floor; %s)\n",
        label, per_cycle, (sys1 - sys0) / cycles, (cpu1 - cpu0) / 1000.0, cycles, tick_us / cycles,
        g_cpu_floor_us > 0 ? per_cycle / g_cpu_floor_us : 0.0,
        Verdict(per_cycle <= kCpuTargetUs, "<= 100 us").c_str());
  }
  return cycles;
}

}  // namespace

int main(int argc, char** argv) {
  // --latency-only may come anywhere; the other arguments keep their order.
  std::vector<std::string> args;
  bool latency_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--latency-only") {
      latency_only = true;
    } else {
      args.emplace_back(argv[i]);
    }
  }
  const std::string dir = !args.empty() ? args[0] : "test/fixtures/topologies";
  const int iterations = args.size() > 1 ? std::atoi(args[1].c_str()) : 2000;
  if (iterations < 1) {
    std::fprintf(stderr, "ITERATIONS must be a positive number, not \"%s\"\n", args[1].c_str());
    return 2;
  }
  const std::vector<std::string> fixture = {"--topology-file", dir + "/192em64t-24n8c2t.xml"};

  // Start -> registered and idle RSS, 5 fresh starts on the 384-PU fixture.
  std::vector<double> starts;
  long idle_rss = 0;
  Node n;
  const ShmCleanup cleanup{n};
  for (int i = 0; i < 5; ++i) {
    if (!StartNode(n, fixture)) return 1;
    starts.push_back(n.start_to_registered_ms);
    if (i < 4) StopNode(n);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  idle_rss = n.daemon.RssKib();
  std::sort(starts.begin(), starts.end());
  std::printf("384-PU fixture (192em64t-24n8c2t.xml), grouped by NUMA node\n");
  std::printf(
      "start -> registered with the kubelet: median %.1f ms, min %.1f ms (5 starts; target < 100 "
      "ms)\n",
      starts[2], starts[0]);
  std::printf("daemon RSS idle: %.1f MB (target < 15 MB)\n", idle_rss / 1024.0);
  {
    // What a node has with the chart: the CDI specs and metadata host files on tmpfs, the state
    // on disk.
    const std::string metadata =
        MetadataDir(n).empty() ? n.dirs.kubelet_root + "/plugins" : MetadataDir(n);
    std::printf(
        "file systems (a node with the chart: /var/run/cdi and /var/run/topodra tmpfs, state on "
        "disk): CDI specs %s, state %s, device metadata host files %s (%s)\n",
        FsType(CdiDir(n)).c_str(), FsType(n.dirs.state).c_str(), FsType(Resolved(metadata)).c_str(),
        MetadataDir(n).empty() ? "the kubelet's plugin directory" : "--device-metadata-dir");
  }

  // Floors.
  std::vector<double> grpc_floor, get_floor, sync_floor;
  double grpc_cpu_us = -1, get_cpu_us = -1, sync_cpu_us = -1;  // per call
  {
    const double daemon0 = ProcessCpuUs(n.daemon.pid());
    int calls = 0;
    auto channel = grpc::CreateChannel("unix:" + n.sim->Find(kDriver)->socket_path,
                                       grpc::InsecureChannelCredentials());
    auto stub = pluginregistration::Registration::NewStub(channel);
    for (int i = 0; i < 1000; ++i) {
      grpc::ClientContext ctx;
      pluginregistration::InfoRequest req;
      pluginregistration::PluginInfo info;
      auto a = Clock::now();
      grpc::Status st = stub->GetInfo(&ctx, req, &info);
      if (i >= 50) grpc_floor.push_back(Ms(Clock::now() - a));
      if (!st.ok()) break;
      ++calls;
    }
    // Includes the idle daemon's own CPU over the same time (about 5 ms per second).
    const double daemon1 = ProcessCpuUs(n.daemon.pid());
    if (calls > 0 && daemon0 >= 0) grpc_cpu_us = (daemon1 - daemon0) / calls;
  }
  std::vector<PrepareClaim> claims = bench::MakeCpuClaims(*n.server, kNode, "load-", 64, 24);
  {
    auto config = kube::KubeconfigConfig(n.kubeconfig);
    auto client = kube::NewHttpRestClient(*config);
    double cpu = 0;
    int gets = 0;
    for (int i = 0; i < 500; ++i) {
      const double c0 = ThreadCpuUs();
      const PrepareClaim& c = claims[i % claims.size()];
      auto a = Clock::now();
      auto got = (*client)->Get(
          absl::StrCat("/apis/resource.k8s.io/v1/namespaces/bench/resourceclaims/", c.name));
      if (i >= 20) get_floor.push_back(Ms(Clock::now() - a));
      if (!got.ok()) break;
      if (i >= 20) {
        cpu += ThreadCpuUs() - c0;
        ++gets;
      }
    }
    if (gets > 0) get_cpu_us = cpu / gets;
  }
  {
    const std::string path = n.dirs.state + "/floor.journal";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    const std::string line(300, 'x');
    double cpu = 0;
    int syncs = 0;
    for (int i = 0; i < 300; ++i) {
      auto a = Clock::now();
      const double c0 = ThreadCpuUs();
      if (::write(fd, line.data(), line.size()) < 0 || ::fdatasync(fd) != 0) break;
      if (i >= 20) {
        cpu += ThreadCpuUs() - c0;
        ++syncs;
        sync_floor.push_back(Ms(Clock::now() - a));
      }
    }
    if (syncs > 0) sync_cpu_us = cpu / syncs;
    ::close(fd);
    std::filesystem::remove(path);
  }
  const double g = Of(grpc_floor).p50, h = Of(get_floor).p50, s = Of(sync_floor).p50;
  std::printf(
      "floor: empty gRPC call (GetInfo, Unix socket) p50 %.3f ms; claim GET from the fake "
      "API server p50 %.3f ms; journal append+fdatasync p50 %.3f ms\n",
      g, h, s);
  std::printf("floor: prepare = gRPC + GET + sync = %.3f ms; unprepare = gRPC + sync = %.3f ms\n",
              g + h + s, g + s);
  if (grpc_cpu_us > 0 && get_cpu_us > 0 && sync_cpu_us > 0) {
    g_cpu_floor_us = 2 * grpc_cpu_us + get_cpu_us + 2 * sync_cpu_us;
    std::printf(
        "CPU floor per cycle: 2 empty gRPC calls %.0f us each (the daemon's, +-%.0f us) + claim "
        "GET "
        "%.0f us (our HTTP client's thread) + 2 journal appends+fdatasync %.0f us each (the "
        "calling thread's) = %.0f us\n",
        grpc_cpu_us, 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK)) / 950, get_cpu_us,
        sync_cpu_us, g_cpu_floor_us);
  }
  {
    // What the daemon burns with nothing to do (watches, timers), to read the per-cycle CPU by.
    const double idle0 = ProcessCpuUs(n.daemon.pid());
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double idle1 = ProcessCpuUs(n.daemon.pid());
    std::printf("daemon CPU idle: %.1f ms per second (over 2 s)\n", (idle1 - idle0) / 2000.0);
  }
  int prepared = 0;
  {
    FloorSampler floors(n, claims);
    if (floors.ok()) {
      prepared += RunLoad(n, claims, 1, iterations / 2, "concurrency 1", g + h + s, g + s,
                          /*targets=*/true, &floors);
      // The CPU figure from cycles with nothing in between.
      prepared += RunLoad(n, claims, 1, iterations / 2, "concurrency 1", g + h + s, g + s,
                          /*targets=*/false, nullptr, /*cpu_only=*/true);
    } else {
      prepared += RunLoad(n, claims, 1, iterations / 2, "concurrency 1", g + h + s, g + s,
                          /*targets=*/true);
    }
  }
  prepared += RunLoad(n, claims, 16, iterations, "concurrency 16", g + h + s, g + s, false);
  std::printf(
      "targets (issue 19): at concurrency 1 prepare p50 <= 1.3x and unprepare p50 <= 1.2x their "
      "floors; daemon CPU <= 100 us per cycle; >= 1000 claims/s at concurrency 16\n");
  if (latency_only) {
    SaveVerboseLog(n);
    StopNode(n);
    return 0;
  }
  if (prepared < 10000) {
    std::printf("(more cycles, to 10,000 claims prepared and unprepared in all)\n");
    prepared += RunLoad(n, claims, 16, 10000 - prepared, "concurrency 16", g + h + s, g + s, false);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::printf("daemon RSS after %d claims prepared and unprepared: %.1f MB (target < 40 MB)\n",
              prepared, n.daemon.RssKib() / 1024.0);

  // Issue 15 item 11: the claims of one call are fetched concurrently. Each claim GET held
  // 50 ms by the fake API server; one call of 16 claims.
  {
    constexpr int kCallClaims = 16;
    constexpr double kHoldMs = 50;
    const std::vector<PrepareClaim> call(claims.begin(), claims.begin() + kCallClaims);
    (void)n.server->Control("POST",
                            "/__control/hang?method=GET&seconds=0.05&path=/namespaces/bench/"
                            "resourceclaims/");
    std::vector<double> took;
    int errors = 0;
    for (int i = 0; i < 5; ++i) {
      const auto a = Clock::now();
      auto p = n.sim->Prepare(kDriver, call);
      took.push_back(Ms(Clock::now() - a));
      for (const PrepareClaim& c : call) {
        if (!p.ok() || !(*p)[c.uid].error.empty()) ++errors;
      }
      (void)n.sim->Unprepare(kDriver, call);
    }
    (void)n.server->Control("DELETE", "/__control/hang");
    std::sort(took.begin(), took.end());
    std::printf(
        "one call of %d claims, each GET held %.0f ms: median %.1f ms, min %.1f ms (5 calls%s); "
        "floor one GET after another %.0f ms, 8 at a time %.0f ms\n",
        kCallClaims, kHoldMs, took[2], took[0],
        errors > 0 ? absl::StrCat(", ", errors, " errors").c_str() : "", kCallClaims * kHoldMs,
        (kCallClaims + 7) / 8 * kHoldMs);
  }
  SaveVerboseLog(n);
  StopNode(n);
  return 0;
}
