// ResourceSlice figures for issues 3 and 19: slices and JSON bytes (flat vs mixins), time to build
// all slices, and time from `topodra run` start (and from the publisher in process) to every slice
// stored on the fake API server, next to floors measured in the same run: the JSON dump of the
// slices, one GET of the slice list, and the same creates sent back to back by the benchmark.
//
// usage: slices_bench [TOPOLOGIES_DIR] [ITERATIONS]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/json_text.h"
#include "driver/kube/rest_client.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_features.h"
#include "driver/publish/slice_json.h"
#include "driver/publish/slice_publisher.h"
#include "test/bench/latency.h"
#include "test/integration/fake_apiserver.h"
#include "topology/discoverer.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace topodra;

using topodra::bench::Ms;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Machine {
  std::string label;
  topology::TopologySource source;
  std::vector<std::string> args;  // the same source as topodra flags
  double build_target_ms = 0;     // build all slices (0: none set)
  double start_target_ms = 0;     // `topodra run` start -> all slices stored (0: none set)
};

// "meets target <= 50 ms" or "MISSES target <= 50 ms"; "" without a target.
std::string Verdict(double ms, double target_ms) {
  if (target_ms <= 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s target <= %.0f ms", ms <= target_ms ? "meets" : "MISSES",
                target_ms);
  return buf;
}

publish::PublishOptions BenchOptions() {
  publish::PublishOptions o;
  o.node_name = "bench-node";
  o.cpu_mode = publish::CpuDeviceMode::kIndividual;
  return o;
}

// The objects the daemon creates on the fake API server, which has neither mixins nor list
// attributes: flat slices without list attributes, generation 1.
std::vector<nlohmann::json> ObjectsAsPublished(const topology::Topology& topo) {
  publish::Pool pool = publish::WithoutListAttributes(publish::BuildPools(topo, BenchOptions())[0]);
  std::vector<nlohmann::json> out;
  absl::StatusOr<std::vector<publish::Slice>> slices =
      publish::BuildSlices(pool, publish::SliceForm::kFlat);
  if (!slices.ok()) return out;
  for (publish::Slice& s : *slices) {
    s.generation = 1;
    out.push_back(publish::SliceToJson(s));
  }
  return out;
}

size_t Bytes(const std::vector<publish::Slice>& slices) {
  return DumpJson(publish::SliceListToJson(slices)).size();
}

void BuildFigures(const Machine& m, int iterations) {
  absl::StatusOr<topology::Topology> topo = topology::Discover(m.source);
  if (!topo.ok()) {
    std::printf("%s: %s\n", m.label.c_str(), std::string(topo.status().message()).c_str());
    return;
  }
  const publish::PublishOptions o = BenchOptions();
  const publish::Pool pool = publish::BuildPools(*topo, o)[0];
  std::vector<double> build_pool, build_mixins, build_flat, build_probe, serialize;
  std::vector<publish::Slice> mixed, flat;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    const publish::Pool p = publish::BuildPools(*topo, o)[0];
    auto t1 = Clock::now();
    mixed = *publish::BuildSlices(p, publish::SliceForm::kMixins);
    auto t2 = Clock::now();
    flat = *publish::BuildSlices(p, publish::SliceForm::kFlat);
    auto t3 = Clock::now();
    const size_t n = Bytes(mixed);
    auto t4 = Clock::now();
    // The publisher's mixin probe on a server it knows nothing of yet: the first 64 devices.
    publish::Pool head = p;
    head.devices.resize(std::min<size_t>(head.devices.size(), 64));
    const size_t probe = publish::BuildSlices(head, publish::SliceForm::kMixins)->size();
    auto t5 = Clock::now();
    build_pool.push_back(Ms(t1 - t0));
    build_mixins.push_back(Ms(t2 - t1));
    build_flat.push_back(Ms(t3 - t2));
    serialize.push_back(Ms(t4 - t3));
    build_probe.push_back(Ms(t5 - t4));
    if (n == 0 || probe == 0) std::printf("?");
  }
  const size_t fb = Bytes(flat), mb = Bytes(mixed);
  std::printf("%-28s %5zu devices  %2zu slices  flat %7zu B  mixins %7zu B  (%.2fx smaller)\n",
              m.label.c_str(), pool.devices.size(), mixed.size(), fb, mb,
              static_cast<double>(fb) / static_cast<double>(mb));
  std::printf(
      "%-28s build: devices %.2f ms, all slices in mixin form %.2f ms, flat %.2f ms; floor (JSON "
      "dump of the mixin form) %.2f ms  [median of %d]\n",
      "", Median(build_pool), Median(build_mixins), Median(build_flat), Median(serialize),
      iterations);
  if (m.build_target_ms > 0) {
    // What the publisher builds at start: on a server without mixins (every released one) the
    // devices, the probe's slice in mixin form and all slices flat; with mixins, all in mixin form.
    const double without = Median(build_pool) + Median(build_probe) + Median(build_flat);
    const double with = Median(build_pool) + Median(build_mixins);
    std::printf("%-28s build all slices, server without mixins: %.2f ms; %s\n", "", without,
                Verdict(without, m.build_target_ms).c_str());
    std::printf("%-28s build all slices, server with mixins:    %.2f ms; %s\n", "", with,
                Verdict(with, m.build_target_ms).c_str());
  }
}

// Where the time of one `topodra run` start goes, in ms from the fork: read from the daemon's
// log (its timestamps have millisecond resolution) and from the benchmark's watch.
struct Timeline {
  double first_log = -1;    // "starting on node": process start, run module loaded, discovery
  double serving = -1;      // the DRA socket served (the publisher starts after it)
  double mixins = -1;       // the mixin probe answered (the first request of the publisher's own)
  double first_added = -1;  // the watch sees the first slice
  double stored = -1;       // the watch sees the last slice
};

// Milliseconds since the epoch of a log line's "2026-11-27T17:33:18.679Z" prefix, or -1.
double LogLineMs(const std::string& line) {
  struct tm tm = {};
  int ms = 0;
  if (std::sscanf(line.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7) {
    return -1;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) * 1000.0 + ms;
}

void ReadLogTimes(const std::string& path, double fork_epoch_ms, Timeline& t) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const double at = LogLineMs(line) - fork_epoch_ms;
    if (at < -1000) continue;  // not a timestamped line
    if (t.first_log < 0) t.first_log = at;
    if (t.serving < 0 && line.find(": serving DRA") != std::string::npos) t.serving = at;
    if (t.mixins < 0 && line.find("ResourceSlice mixins") != std::string::npos) t.mixins = at;
  }
}

// Runs `topodra run` against the fake server until every slice is stored (t.stored stays -1
// when that never happens).
Timeline RunToPublished(const std::string& kubeconfig, const Machine& m, size_t want_slices,
                        kube::RestClient& client) {
  Timeline t;
  // Every directory the daemon writes is the benchmark's own, never the host's defaults.
  char tmpl[] = "/tmp/topodra-slices-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return t;
  const std::string dir = tmpl;
  const std::string log = dir + "/daemon.log";
  std::vector<std::string> args = {
      TOPODRA_BINARY,     "run",        "--kubeconfig",      kubeconfig,
      "--node-name",      "bench-node", "--cpu-device-mode", "individual",
      "--enforce",        "none",       "--metrics-address", "none",
      "--health-address", "none"};
  for (const char* flag :
       {"--kubelet-root-dir", "--cdi-dir", "--state-dir", "--cgroup-root", "--hook-dir"}) {
    args.push_back(flag);
    args.push_back(dir + "/" + (flag + 2));
  }
  args.insert(args.end(), m.args.begin(), m.args.end());
  // BENCH_TRACE=1: the daemon logs at debug level and each start's log is kept (its path printed).
  const bool trace = std::getenv("BENCH_TRACE") != nullptr;
  if (trace) args.push_back("-v");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The slices are seen through a watch from resourceVersion 0 (the stored ones first, then
  // each create): polling with list requests would load the server the daemon is writing to.
  std::atomic<bool> stop{false};
  std::atomic<double> first{-1}, result{-1};
  std::fflush(stdout);  // the child must not print what the parent has buffered
  const double fork_epoch_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(log.c_str(), "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::thread watcher([&] {
    size_t seen = 0;
    while (!stop && Ms(Clock::now() - start) < 20000 && result < 0) {
      (void)client.Watch(
          "/apis/resource.k8s.io/v1/resourceslices?watch=true&resourceVersion=0&"
          "fieldSelector=spec.driver%3Ddra.cpu",
          [&](const nlohmann::json& event) {
            if (event.value("type", "") != "ADDED") return true;
            if (++seen == 1 && first < 0) first = Ms(Clock::now() - start);
            if (seen == want_slices) {
              result = Ms(Clock::now() - start);
              return false;
            }
            return true;
          },
          &stop);
      seen = 0;  // a broken watch starts again from the stored slices
    }
  });
  while (result < 0 && Ms(Clock::now() - start) < 20000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  watcher.join();
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  t.first_added = first.load();
  t.stored = result.load();
  ReadLogTimes(log, fork_epoch_ms, t);
  if (trace) {
    static int kept = 0;
    const std::string copy = "/tmp/topodra-slices-bench-log-" + std::to_string(++kept) + ".txt";
    std::error_code ec;
    std::filesystem::copy_file(log, copy, std::filesystem::copy_options::overwrite_existing, ec);
    std::printf("  (daemon log, fork at epoch ms %.0f: %s)\n", fork_epoch_ms, copy.c_str());
  }
  std::filesystem::remove_all(dir);
  return t;
}

// `topodra version` from fork to exit: process start without the run module or discovery.
double VersionProcessMs() {
  std::fflush(stdout);
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout)) _exit(127);
    execl(TOPODRA_BINARY, TOPODRA_BINARY, "version", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return Ms(Clock::now() - start);
}

// The same creates the daemon sends, one after another from the benchmark: the floor of
// publishing. Milliseconds, or -1 when one fails.
double CreatesBackToBack(kube::RestClient& client, const std::vector<nlohmann::json>& objects) {
  const auto t0 = Clock::now();
  for (const nlohmann::json& obj : objects) {
    if (!client
             .Post("/apis/resource.k8s.io/v1/resourceslices?fieldManager=topodra&"
                   "fieldValidation=Strict",
                   obj)
             .ok()) {
      return -1;
    }
  }
  return Ms(Clock::now() - t0);
}

// The publisher alone, in process: SetDesired + one SyncOnce (list, probes, creates) on an empty
// server, with the daemon's default options. Milliseconds, or -1 when it fails.
double PublisherSync(kube::RestClient& client, const publish::Pool& pool) {
  publish::PublisherOptions po;
  po.driver = pool.driver;
  po.node_name = pool.node_name;
  po.write_concurrency = 4;  // as the daemon has it
  publish::SlicePublisher publisher(&client, po);
  const auto t0 = Clock::now();
  publisher.SetDesired(pool);
  if (!publisher.SyncOnce().ok()) return -1;
  return Ms(Clock::now() - t0);
}

// Runs `measure` `runs` times, each on a freshly restarted (empty) server; the successful times.
template <typename F>
std::vector<double> OnEmptyServer(testing::FakeApiServer& server, int runs, F measure) {
  std::vector<double> out;
  for (int i = 0; i < runs; ++i) {
    if (!server.Restart().ok()) break;
    const double ms = measure();
    if (ms >= 0) out.push_back(ms);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "test/fixtures/topologies";
  const int iterations = argc > 2 ? std::max(1, std::atoi(argv[2])) : 20;
  spdlog::set_level(spdlog::level::warn);  // the in-process publisher's info lines
  const std::string synth = "pack:4 numa:2 l3:4 core:16 pu:2";
  const std::string synth4k = "pack:8 numa:2 l3:4 core:32 pu:2";
  std::vector<Machine> machines = {
      {"192em64t-24n8c2t.xml (384)",
       topology::TopologySource::XmlFile(dir + "/192em64t-24n8c2t.xml"),
       {"--topology-file", dir + "/192em64t-24n8c2t.xml"},
       0,
       50},
      {"synthetic 1024 PUs",
       topology::TopologySource::Synthetic(synth),
       {"--topology-synthetic", synth},
       0,
       80},
      {"synthetic 4096 PUs",
       topology::TopologySource::Synthetic(synth4k),
       {"--topology-synthetic", synth4k},
       40,
       300},
  };
  // BENCH_ONLY=4096: only the machines whose label holds that text.
  if (const char* only = std::getenv("BENCH_ONLY")) {
    std::erase_if(machines,
                  [&](const Machine& m) { return m.label.find(only) == std::string::npos; });
  }
  std::printf("individual mode; JSON sizes are compact (as sent)\n");
  for (const Machine& m : machines) BuildFigures(m, iterations);
  std::printf("target: mixin form >= 3x smaller; build < 20 ms for 1024 PUs\n\n");

  absl::StatusOr<std::unique_ptr<testing::FakeApiServer>> server =
      testing::FakeApiServer::Start({});
  if (!server.ok()) {
    std::printf("fake API server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  const std::string kubeconfig =
      (*server)->WriteKubeconfig((*server)->temp_dir() + "/kubeconfig.yaml");
  kube::ClusterConfig c;
  c.server = (*server)->url();
  c.token = (*server)->token();
  auto client = *kube::NewHttpRestClient(c);
  std::vector<double> floor_get;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = Clock::now();
    (void)client->Get("/apis/resource.k8s.io/v1/resourceslices");
    floor_get.push_back(Ms(Clock::now() - t0));
  }
  std::printf("floor: one GET of the slice list from the fake API server: %.2f ms\n",
              Median(floor_get));
  const int runs = 5;
  for (const Machine& m : machines) {
    absl::StatusOr<topology::Topology> topo = topology::Discover(m.source);
    if (!topo.ok()) continue;
    const std::vector<nlohmann::json> objects = ObjectsAsPublished(*topo);
    const size_t want = objects.size();
    size_t bytes = 0;
    std::vector<double> dump;
    for (int i = 0; i < iterations; ++i) {
      const auto t0 = Clock::now();
      bytes = 0;
      for (const nlohmann::json& obj : objects) bytes += DumpJson(obj).size();
      dump.push_back(Ms(Clock::now() - t0));
    }
    // An empty server each time, so everything has to be published.
    std::vector<Timeline> timelines;
    const std::vector<double> start_runs = OnEmptyServer(**server, runs, [&] {
      timelines.push_back(RunToPublished(kubeconfig, m, want, *client));
      return timelines.back().stored;
    });
    std::vector<double> discover;
    for (int i = 0; i < runs; ++i) {
      const auto t0 = Clock::now();
      (void)topology::Discover(m.source);
      discover.push_back(Ms(Clock::now() - t0));
    }
    const std::vector<double> creates =
        OnEmptyServer(**server, runs, [&] { return CreatesBackToBack(*client, objects); });
    const publish::Pool pool = publish::BuildPools(*topo, BenchOptions())[0];
    const std::vector<double> in_process =
        OnEmptyServer(**server, runs, [&] { return PublisherSync(*client, pool); });
    if (start_runs.empty()) {
      std::printf("%-28s topodra run: slices never appeared\n", m.label.c_str());
      continue;
    }
    std::printf(
        "%-28s topodra run start -> %zu slices stored: median %.1f ms, min %.1f ms (%zu runs); "
        "%s\n",
        m.label.c_str(), want, Median(start_runs),
        *std::min_element(start_runs.begin(), start_runs.end()), start_runs.size(),
        Verdict(Median(start_runs), m.start_target_ms).c_str());
    // Each step's median over the runs that stored every slice, in ms from the fork.
    auto step = [&](double Timeline::*field) {
      std::vector<double> v;
      for (const Timeline& t : timelines) {
        if (t.stored >= 0 && t.*field >= 0) v.push_back(t.*field);
      }
      return v.empty() ? -1.0 : Median(v);
    };
    std::printf(
        "%-28s timeline (median ms from exec): first log line %.0f, DRA socket served %.0f, "
        "mixin probe answered %.0f, first slice stored %.1f, last %.1f\n",
        "", step(&Timeline::first_log), step(&Timeline::serving), step(&Timeline::mixins),
        step(&Timeline::first_added), step(&Timeline::stored));
    std::printf(
        "%-28s before the first log line: process start (topodra version, no run module) %.1f "
        "ms, discovery in process %.1f ms\n",
        "", VersionProcessMs(), Median(discover));
    std::printf("%-28s publisher in process (list, probes, creates): median %.1f ms\n", "",
                in_process.empty() ? -1.0 : Median(in_process));
    std::printf(
        "%-28s floors: %zu creates back to back from the bench %.1f ms; JSON dump of the "
        "%zu B sent %.2f ms\n",
        "", want, creates.empty() ? -1.0 : Median(creates), bytes, Median(dump));
  }
  return 0;
}
