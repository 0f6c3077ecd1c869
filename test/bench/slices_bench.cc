// ResourceSlice figures for issue 3: slices and JSON bytes (flat vs mixins), time to build all
// slices, and time from `topodra run` start to every slice stored on the fake API server, next to
// floors measured in the same run.
//
// usage: slices_bench [TOPOLOGIES_DIR] [ITERATIONS]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/json_text.h"
#include "driver/kube/rest_client.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_json.h"
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
};

size_t Bytes(const std::vector<publish::Slice>& slices) {
  return DumpJson(publish::SliceListToJson(slices)).size();
}

void BuildFigures(const Machine& m, int iterations) {
  absl::StatusOr<topology::Topology> topo = topology::Discover(m.source);
  if (!topo.ok()) {
    std::printf("%s: %s\n", m.label.c_str(), std::string(topo.status().message()).c_str());
    return;
  }
  publish::PublishOptions o;
  o.node_name = "bench-node";
  o.cpu_mode = publish::CpuDeviceMode::kIndividual;
  const publish::Pool pool = publish::BuildPools(*topo, o)[0];
  std::vector<double> build_mixins, build_flat, serialize;
  std::vector<publish::Slice> mixed, flat;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    const publish::Pool p = publish::BuildPools(*topo, o)[0];
    mixed = *publish::BuildSlices(p, publish::SliceForm::kMixins);
    auto t1 = Clock::now();
    flat = *publish::BuildSlices(p, publish::SliceForm::kFlat);
    auto t2 = Clock::now();
    const size_t n = Bytes(mixed);
    auto t3 = Clock::now();
    build_mixins.push_back(Ms(t1 - t0));
    build_flat.push_back(Ms(t2 - t1));
    serialize.push_back(Ms(t3 - t2));
    if (n == 0) std::printf("?");
  }
  const size_t fb = Bytes(flat), mb = Bytes(mixed);
  std::printf("%-28s %5zu devices  %2zu slices  flat %7zu B  mixins %7zu B  (%.2fx smaller)\n",
              m.label.c_str(), pool.devices.size(), mixed.size(), fb, mb,
              static_cast<double>(fb) / static_cast<double>(mb));
  std::printf(
      "%-28s build all slices: mixin form %.2f ms, flat %.2f ms; floor (JSON dump of "
      "the result) %.2f ms  [median of %d]\n",
      "", Median(build_mixins), Median(build_flat), Median(serialize), iterations);
}

// Runs `topodra run` against the fake server until every slice is stored; returns ms or -1.
double RunToPublished(const std::string& kubeconfig, const Machine& m, size_t want_slices,
                      kube::RestClient& client) {
  // Every directory the daemon writes is the benchmark's own, never the host's defaults.
  char tmpl[] = "/tmp/topodra-slices-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return -1;
  const std::string dir = tmpl;
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
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
  double result = -1;
  while (Ms(Clock::now() - start) < 20000) {
    absl::StatusOr<kube::Response> r =
        client.Get("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Ddra.cpu");
    if (r.ok() && r->body["items"].size() == want_slices) {
      result = Ms(Clock::now() - start);
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::filesystem::remove_all(dir);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "test/fixtures/topologies";
  const int iterations = argc > 2 ? std::max(1, std::atoi(argv[2])) : 20;
  const std::string synth = "pack:4 numa:2 l3:4 core:16 pu:2";
  const std::vector<Machine> machines = {
      {"192em64t-24n8c2t.xml (384)",
       topology::TopologySource::XmlFile(dir + "/192em64t-24n8c2t.xml"),
       {"--topology-file", dir + "/192em64t-24n8c2t.xml"}},
      {"synthetic 1024 PUs",
       topology::TopologySource::Synthetic(synth),
       {"--topology-synthetic", synth}},
  };
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
  auto client = *kube::NewCurlRestClient(c);
  std::vector<double> floor_get;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = Clock::now();
    (void)client->Get("/apis/resource.k8s.io/v1/resourceslices");
    floor_get.push_back(Ms(Clock::now() - t0));
  }
  std::printf("floor: one GET of the slice list from the fake API server: %.2f ms\n",
              Median(floor_get));
  for (const Machine& m : machines) {
    absl::StatusOr<topology::Topology> topo = topology::Discover(m.source);
    publish::PublishOptions o;
    o.node_name = "bench-node";
    o.cpu_mode = publish::CpuDeviceMode::kIndividual;
    const size_t want =
        publish::BuildSlices(publish::BuildPools(*topo, o)[0], publish::SliceForm::kFlat)->size();
    std::vector<double> runs;
    for (int i = 0; i < 5; ++i) {
      // An empty server each time, so the daemon has to publish everything.
      if (!(*server)->Restart().ok()) break;
      const double ms = RunToPublished(kubeconfig, m, want, *client);
      if (ms >= 0) runs.push_back(ms);
    }
    if (runs.empty()) {
      std::printf("%-28s topodra run: slices never appeared\n", m.label.c_str());
    } else {
      std::printf(
          "%-28s topodra run start -> %zu slices stored: median %.1f ms, min %.1f ms (%zu runs)\n",
          m.label.c_str(), want, Median(runs), *std::min_element(runs.begin(), runs.end()),
          runs.size());
    }
  }
  return 0;
}
