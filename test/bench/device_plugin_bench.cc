// Device-plugin figures for issue 5, from the real `topodra run --device-plugin=gpu,cpu`:
//   - GetPreferredAllocation latency (p50/p99) for 16 GPUs (nvidiaDGX2.xml) and 384 CPUs
//     (192em64t-24n8c2t.xml), over the daemon's Unix socket, next to a floor measured in the
//     same run (an empty call, GetDevicePluginOptions, on the same socket); and the same choice
//     computed in process (the pure function, no gRPC);
//   - time from a device change to the ListAndWatch message: a CPU taken by a DRA prepare (and
//     given back by the unprepare) until an open ListAndWatch stream reports it Unhealthy
//     (Healthy), measured from the moment the kubelet's prepare call returns and from the moment
//     it was sent; and a GPU disappearing from the machine (and coming back) until the stream
//     reports it, woken by the kernel's uevent (needs root).
//
// usage: device_plugin_bench [TOPOLOGIES_DIR] [CALLS]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/deviceplugin/device_plugin_core.h"
#include "nlohmann/json.hpp"
#include "proto/deviceplugin/v1beta1/api.grpc.pb.h"
#include "test/bench/latency.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/kubelet_sim/kubelet_sim.h"
#include "test/testing/private_net.h"
#include "topology/discoverer.h"

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using namespace topodra;
namespace dp = ::v1beta1;

constexpr char kNode[] = "bench-node";

using topodra::bench::Ms;

using topodra::bench::Of;
using topodra::bench::Stats;

struct Request {
  std::vector<std::string> available, must;
  int size = 0;
};

// A mix like a busy node's: every size from 1 to a quarter of the devices and the whole set,
// offered everything or a random 3/4 of it (what is left after other pods), sometimes with a
// device that must be included.
std::vector<Request> Mix(const std::vector<std::string>& ids, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Request> out;
  const int n = static_cast<int>(ids.size());
  for (int i = 0; i < count; ++i) {
    Request r;
    r.available = ids;
    if (i % 2 == 1) {
      std::shuffle(r.available.begin(), r.available.end(), rng);
      r.available.resize(n * 3 / 4);
    }
    const int limit = static_cast<int>(r.available.size());
    r.size = i % 17 == 0 ? limit : 1 + static_cast<int>(rng() % std::max(1, limit / 4));
    if (i % 3 == 2) r.must.push_back(r.available[rng() % r.available.size()]);
    out.push_back(std::move(r));
  }
  return out;
}

struct Node {
  std::unique_ptr<testing::FakeApiServer> server;
  testing::DaemonDirs dirs;
  testing::Daemon daemon;
  std::unique_ptr<testing::KubeletSimulator> sim;
};

bool Start(Node& n, const std::string& fixture, std::vector<std::string> extra = {}) {
  testing::FakeApiServerOptions o;
  o.nodes = {{kNode, "uid-bench-node"}};
  auto server = testing::FakeApiServer::Start(o);
  if (!server.ok()) return false;
  n.server = *std::move(server);
  n.dirs = testing::DaemonDirs::Make();
  const std::string kubeconfig = n.server->WriteKubeconfig(n.dirs.root + "/kubeconfig.yaml");
  testing::KubeletSimOptions so;
  so.root_dir = n.dirs.kubelet_root;
  auto sim = testing::KubeletSimulator::Start(so);
  if (!sim.ok()) return false;
  n.sim = *std::move(sim);
  std::vector<std::string> args = {"--kubeconfig",    kubeconfig, "--node-name",     kNode,
                                   "--topology-file", fixture,    "--device-plugin", "gpu,cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  n.daemon.Start(n.dirs, args);
  if (!n.sim->WaitForRegistration("dra.cpu", 1, absl::Seconds(30)).ok()) {
    std::printf("daemon did not come up:\n%s\n", n.daemon.Log().c_str());
    return false;
  }
  return true;
}

void Stop(Node& n) {
  n.sim.reset();
  n.daemon.Terminate();
  std::error_code ec;
  std::filesystem::remove_all(n.dirs.root, ec);
}

std::unique_ptr<dp::DevicePlugin::Stub> Stub(const Node& n, const std::string& resource_file) {
  return dp::DevicePlugin::NewStub(
      grpc::CreateChannel("unix:" + n.dirs.kubelet_root + "/device-plugins/" + resource_file,
                          grpc::InsecureChannelCredentials()));
}

std::vector<std::string> ListOnce(dp::DevicePlugin::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = stub->ListAndWatch(&ctx, dp::Empty());
  dp::ListAndWatchResponse r;
  std::vector<std::string> ids;
  if (reader->Read(&r)) {
    for (const auto& d : r.devices()) ids.push_back(d.id());
  }
  ctx.TryCancel();
  return ids;
}

void PreferredFigures(const Node& n, const std::string& fixture, const std::string& resource,
                      const std::string& file, const char* label, int calls) {
  auto stub = Stub(n, file);
  const std::vector<std::string> ids = ListOnce(stub.get());
  if (ids.empty()) {
    std::printf("%s: no devices listed\n", label);
    return;
  }
  const std::vector<Request> mix = Mix(ids, calls, 42);
  std::vector<double> floor, rpc;
  int errors = 0;
  for (int round = 0; round < 2; ++round) {  // round 0 warms up connections and caches
    floor.clear();
    rpc.clear();
    for (const Request& r : mix) {
      {
        grpc::ClientContext ctx;
        dp::DevicePluginOptions out;
        const auto t0 = Clock::now();
        (void)stub->GetDevicePluginOptions(&ctx, dp::Empty(), &out);
        floor.push_back(Ms(Clock::now() - t0));
      }
      dp::PreferredAllocationRequest req;
      auto* c = req.add_container_requests();
      for (const std::string& id : r.available) c->add_available_deviceids(id);
      for (const std::string& id : r.must) c->add_must_include_deviceids(id);
      c->set_allocation_size(r.size);
      grpc::ClientContext ctx;
      dp::PreferredAllocationResponse out;
      const auto t0 = Clock::now();
      grpc::Status st = stub->GetPreferredAllocation(&ctx, req, &out);
      rpc.push_back(Ms(Clock::now() - t0));
      if (round == 1 && (!st.ok() || out.container_responses(0).deviceids_size() != r.size)) {
        ++errors;
      }
    }
  }
  // The same choices in process: what the daemon itself spends.
  absl::StatusOr<topology::Topology> topo =
      topology::Discover(topology::TopologySource::XmlFile(fixture));
  std::vector<double> pure;
  if (topo.ok()) {
    deviceplugin::ResourceSetup setup;
    setup.resource = resource;
    setup.kind = resource == "topodra.io/gpu" ? deviceplugin::ResourceKind::kGpu
                                              : deviceplugin::ResourceKind::kCpu;
    for (const topology::Gpu& g : topo->gpus) setup.gpus[g.pci_bus_id] = {g.pci_bus_id, {}};
    const state::State empty;
    for (int round = 0; round < 2; ++round) {
      pure.clear();
      for (const Request& r : mix) {
        const auto t0 = Clock::now();
        auto got =
            deviceplugin::PreferredAllocation(setup, *topo, empty, r.available, r.must, r.size);
        pure.push_back(Ms(Clock::now() - t0));
        if (!got.ok()) ++errors;
      }
    }
  }
  const Stats f = Of(floor), g = Of(rpc), p = Of(pure);
  std::printf(
      "%s (%zu devices, %d requests of 1..all devices)\n"
      "  floor (GetDevicePluginOptions, same socket) p50 %.3f ms p99 %.3f ms\n"
      "  GetPreferredAllocation over gRPC          p50 %.3f ms p99 %.3f ms max %.3f ms"
      "  (target p99 < 1 ms)\n"
      "  the choice alone, in process              p50 %.3f ms p99 %.3f ms max %.3f ms\n"
      "  errors: %d\n",
      label, ids.size(), calls, f.p50, f.p99, g.p50, g.p99, g.max, p.p50, p.p99, p.max, errors);
}

void ChangeFigures(Node& n, int rounds) {
  auto stub = Stub(n, "topodra.io-cpu.sock");
  grpc::ClientContext ctx;
  // A change that never shows must end the run, not hang it.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub->ListAndWatch(&ctx, dp::Empty());
  dp::ListAndWatchResponse msg;
  if (!reader->Read(&msg)) {
    std::printf("ListAndWatch: no first message\n");
    return;
  }
  std::vector<double> from_return, from_send;
  int errors = 0;
  for (int i = 0; i < rounds; ++i) {
    const std::string name = absl::StrCat("watched-", i);
    const int cpu = 8 + i % 8;  // NUMA node 1 of the 384-PU machine: CPUs 8-15,200-207
    json claim = {
        {"metadata", {{"name", name}, {"namespace", "bench"}}},
        {"spec",
         {{"devices",
           {{"requests",
             json::array({{{"name", "cpus"}, {"exactly", {{"deviceClassName", "dra.cpu"}}}}})}}}}}};
    auto created = n.server->CreateClaim(claim);
    if (!created.ok()) {
      if (errors++ == 0) std::printf("  first error: %s\n", created.status().ToString().c_str());
      continue;
    }
    json allocation = {
        {"devices",
         {{"results", json::array({{{"request", "cpus"},
                                    {"driver", "dra.cpu"},
                                    {"pool", kNode},
                                    {"device", "cpudevnuma001"},
                                    {"consumedCapacity", {{"dra.cpu/cpu", "1"}}}}})},
          // The claim's opaque config, as the scheduler copies it.
          {"config", json::array({{{"source", "FromClaim"},
                                   {"requests", json::array()},
                                   {"opaque",
                                    {{"driver", "dra.cpu"},
                                     {"parameters",
                                      {{"apiVersion", "v1alpha1"},
                                       {"cpuConfig", {{"cpuset", std::to_string(cpu)}}}}}}}}})}}}};
    if (auto st = n.server->AllocateClaim("bench", name, allocation); !st.ok()) {
      if (errors++ == 0) std::printf("  first error: %s\n", st.status().ToString().c_str());
      continue;
    }
    const testing::PrepareClaim ref{"bench", (*created)["metadata"]["uid"].get<std::string>(),
                                    name};
    for (int step = 0; step < 2; ++step) {
      const bool taking = step == 0;
      const auto sent = Clock::now();
      std::string error;
      if (taking) {
        auto r = n.sim->Prepare("dra.cpu", {ref});
        error = !r.ok() ? std::string(r.status().message()) : (*r)[ref.uid].error;
      } else {
        auto r = n.sim->Unprepare("dra.cpu", {ref});
        error = !r.ok() ? std::string(r.status().message()) : (*r)[ref.uid];
      }
      const auto returned = Clock::now();
      if (!error.empty()) {
        if (errors++ == 0) std::printf("  first error: %s\n", error.c_str());
        break;
      }
      // Read until the CPU shows the new health.
      bool seen = false;
      while (!seen && reader->Read(&msg)) {
        for (const auto& d : msg.devices()) {
          if (d.id() == std::to_string(cpu)) seen = (d.health() == "Unhealthy") == taking;
        }
      }
      const auto arrived = Clock::now();
      if (!seen) {
        if (errors++ == 0) std::printf("  first error: the stream ended\n");
        break;
      }
      from_return.push_back(Ms(arrived - returned));
      from_send.push_back(Ms(arrived - sent));
    }
  }
  ctx.TryCancel();
  const Stats a = Of(from_return), b = Of(from_send);
  std::printf(
      "device change -> ListAndWatch message (%zu changes: a CPU taken by a DRA prepare, given "
      "back by its unprepare)\n"
      "  after the kubelet's call returned  p50 %.3f ms p99 %.3f ms max %.3f ms (target < 100 ms)\n"
      "  after the kubelet's call was sent  p50 %.3f ms p99 %.3f ms max %.3f ms\n"
      "  errors: %d\n",
      from_return.size(), a.p50, a.p99, a.max, b.p50, b.p99, b.max, errors);
}

// `text` without the hwloc object whose attributes contain `attr` (and its children).
std::string RemoveObject(std::string text, const std::string& attr) {
  const size_t at = text.find(attr);
  if (at == std::string::npos) return text;
  const size_t begin = text.rfind("<object", at);
  size_t pos = text.find('>', at);
  int depth = text[pos - 1] == '/' ? 0 : 1;
  while (depth > 0 && pos != std::string::npos) {
    const size_t open = text.find("<object", pos);
    const size_t close = text.find("</object>", pos);
    if (open < close) {
      const size_t end = text.find('>', open);
      if (text[end - 1] != '/') ++depth;
      pos = end;
    } else {
      --depth;
      pos = close + std::string("</object>").size();
    }
  }
  text.erase(begin, pos - begin);
  return text;
}

// A GPU disappearing from the machine: the topology file the daemon reads loses it, and the
// kernel-format uevent arrives (sent in a private network namespace), as a real removal sends.
void TopologyChangeFigures(const std::string& dir, int rounds) {
  const std::string original = dir + "/nvidiaDGX2.xml";
  std::ifstream in(original);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string with = buf.str();
  const std::string without = RemoveObject(with, "pci_busid=\"0000:34:00.0\"");
  const std::string path = absl::StrCat("/tmp/dpbench-", getpid(), ".xml");
  std::ofstream(path) << with;
  // The uevents are sent in a network namespace of this benchmark's (the fake API server and the
  // daemon start in it), never by writing the host's /sys.
  if (const std::string e = topodra::testing::EnterPrivateNetwork(); !e.empty()) {
    std::printf("uevent figures skipped: %s\n", e.c_str());
    return;
  }
  Node n;
  if (!Start(n, path, {"--topology-refresh", "3600"})) return;
  auto stub = Stub(n, "topodra.io-gpu.sock");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub->ListAndWatch(&ctx, dp::Empty());
  dp::ListAndWatchResponse msg;
  std::vector<double> times;
  bool skipped = !reader->Read(&msg);
  for (int i = 0; i < rounds && !skipped; ++i) {
    const bool removing = i % 2 == 0;
    std::ofstream(path + ".new") << (removing ? without : with);
    std::filesystem::rename(path + ".new", path);
    const auto t0 = Clock::now();
    using namespace std::string_literals;
    if (!topodra::testing::SendUevent(
             absl::StrCat(removing ? "remove" : "add",
                          "@/devices/pci0000:00/0000:34:00.0\0SUBSYSTEM=pci\0"s))
             .empty()) {
      skipped = true;
      break;
    }
    bool seen = false;
    while (!seen && reader->Read(&msg)) {
      bool listed = false;
      for (const auto& d : msg.devices()) listed = listed || d.id() == "0000:34:00.0";
      seen = listed != removing;
    }
    if (!seen) {
      skipped = true;
      break;
    }
    times.push_back(Ms(Clock::now() - t0));
  }
  ctx.TryCancel();
  Stop(n);
  std::filesystem::remove(path);
  if (skipped) {
    std::printf(
        "GPU gone/back -> ListAndWatch message: skipped (needs root and the host's "
        "kernel uevents)\n");
    return;
  }
  const Stats t = Of(times);
  std::printf(
      "GPU gone/back (nvidiaDGX2.xml, kernel uevent) -> ListAndWatch message, %zu changes\n"
      "  p50 %.3f ms p99 %.3f ms max %.3f ms (target < 100 ms; includes rediscovering the "
      "machine)\n",
      times.size(), t.p50, t.p99, t.max);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string dir = argc > 1 ? argv[1] : "test/fixtures/topologies";
  const int calls = argc > 2 ? std::atoi(argv[2]) : 2000;
  {
    Node n;
    const std::string fixture = dir + "/nvidiaDGX2.xml";
    if (!Start(n, fixture)) return 1;
    PreferredFigures(n, fixture, "topodra.io/gpu", "topodra.io-gpu.sock", "nvidiaDGX2.xml GPUs",
                     calls);
    Stop(n);
  }
  {
    Node n;
    const std::string fixture = dir + "/192em64t-24n8c2t.xml";
    if (!Start(n, fixture)) return 1;
    PreferredFigures(n, fixture, "topodra.io/cpu", "topodra.io-cpu.sock",
                     "192em64t-24n8c2t.xml CPUs", calls);
    ChangeFigures(n, 100);
    Stop(n);
  }
  TopologyChangeFigures(dir, 40);
  return 0;
}
