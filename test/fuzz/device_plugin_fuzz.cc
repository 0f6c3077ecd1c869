// Arbitrary device ids from the kubelet (GetPreferredAllocation, Allocate): the device-plugin core
// must return a status, never crash, and every accepted answer must keep its promises: exactly
// the size asked for, only offered ids, every must-include id, nothing a DRA claim holds, and an
// Allocate plan that fits the node's state.
//
// Input: byte 0 picks the resource (even: CPUs, odd: GPUs), byte 1 the size; the rest is one id
// per line, "!" in front marking a must-include id.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "driver/deviceplugin/device_plugin_core.h"
#include "topology/topology.h"

namespace {

using topodra::CpuSet;
namespace dp = topodra::deviceplugin;
namespace state = topodra::state;
namespace topology = topodra::topology;

// 8 online CPUs (one per core) on 2 NUMA nodes, 8-9 offline, and 3 GPUs: two behind one host
// bridge on node 0, one on node 1.
const topology::Topology& Machine() {
  static const topology::Topology topo = [] {
    topology::Topology t;
    t.packages.push_back({0, CpuSet::Range(0, 7)});
    for (int node = 0; node < 2; ++node) {
      topology::NumaNode n;
      n.id = node;
      n.cpus = CpuSet::Range(node * 4, node * 4 + 3);
      t.numa_nodes.push_back(n);
    }
    for (int cpu = 0; cpu < 8; ++cpu) {
      topology::Core core;
      core.id = cpu;
      core.os_id = cpu;
      core.package = 0;
      core.numa = cpu / 4;
      core.cpus = CpuSet{cpu};
      t.cores.push_back(core);
      t.cpus.push_back({cpu, cpu});
    }
    t.online = CpuSet::Range(0, 7);
    t.offline = CpuSet{8, 9};
    for (const char* id : {"0000:01:00.0", "0000:02:00.0", "0000:81:00.0"}) {
      topology::Gpu g;
      g.pci_bus_id = id;
      g.numa = id[5] == '8' ? 1 : 0;
      g.pcie_root = id[5] == '8' ? "pci0000:80" : "pci0000:00";
      t.gpus.push_back(g);
    }
    t.source = "synthetic:fuzz";
    t.Finalize();
    return t;
  }();
  return topo;
}

dp::ResourceSetup Setup(bool gpu) {
  dp::ResourceSetup s;
  s.kind = gpu ? dp::ResourceKind::kGpu : dp::ResourceKind::kCpu;
  s.resource = gpu ? "topodra.io/gpu" : "topodra.io/cpu";
  s.reserved = CpuSet{0};
  for (const topology::Gpu& g : Machine().gpus) {
    topodra::cdi::DeviceNode node;
    node.path = "/dev/dri/card" + g.pci_bus_id.substr(5, 2);
    s.gpus[g.pci_bus_id] = {g.pci_bus_id, {node}};
  }
  return s;
}

// A DRA claim holds CPU 1 and the GPU 0000:02:00.0; a device-plugin allocation CPUs 5-6 and the
// GPU 0000:81:00.0.
const state::State& Held() {
  static const state::State held = [] {
    state::State s;
    state::Allocation claim;
    claim.owner = state::DraOwner("dra.cpu", "u1");
    claim.driver = "dra.cpu";
    claim.claim_namespace = "ns";
    claim.claim_name = "c";
    claim.cpus = CpuSet{1};
    claim.gpus = {"0000:02:00.0"};
    claim.phase = state::Phase::kPrepared;
    (void)s.Add(claim);
    for (bool gpu : {false, true}) {
      state::Allocation a;
      a.kind = state::AllocationKind::kDevicePlugin;
      a.owner = dp::AllocationOwner(Setup(gpu).resource, {"x"});
      if (gpu) {
        a.gpus = {"0000:81:00.0"};
      } else {
        a.cpus = CpuSet{5, 6};
      }
      a.phase = state::Phase::kPrepared;
      (void)s.Add(a);
    }
    return s;
  }();
  return held;
}

bool DraHeld(const std::string& id) { return id == "1" || id == "0000:02:00.0"; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool gpu = (data[0] & 1) != 0;
  const int count = static_cast<int>(static_cast<int8_t>(data[1]));
  std::vector<std::string> available, must;
  std::string line;
  for (size_t i = 2; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      if (!line.empty() && line[0] == '!') {
        must.push_back(line.substr(1));
      } else {
        available.push_back(line);
      }
      line.clear();
    } else {
      line.push_back(static_cast<char>(data[i]));
    }
  }
  const dp::ResourceSetup setup = Setup(gpu);
  const topology::Topology& topo = Machine();

  std::vector<std::string> offered = available;
  offered.insert(offered.end(), must.begin(), must.end());
  auto preferred = dp::PreferredAllocation(setup, topo, Held(), offered, must, count);
  if (preferred.ok()) {
    if (static_cast<int>(preferred->size()) != count) std::abort();
    const std::set<std::string> chosen(preferred->begin(), preferred->end());
    if (chosen.size() != preferred->size()) std::abort();
    const std::set<std::string> pool(offered.begin(), offered.end());
    for (const std::string& id : chosen) {
      if (!pool.contains(id) || DraHeld(id)) std::abort();
    }
    for (const std::string& id : must) {
      if (!chosen.contains(id)) std::abort();
    }
  }

  auto plan = dp::PlanAllocate(setup, topo, Held(), offered);
  if (plan.ok()) {
    for (const std::string& id : offered) {
      if (DraHeld(id)) std::abort();
    }
    auto grant = dp::GrantFromJson(dp::GrantToJson(plan->grant));
    if (!grant.ok() || !(*grant == plan->grant)) std::abort();
    if (!plan->replay) {
      state::State after = Held();
      for (const state::Allocation& s : plan->shrunk) {
        (void)after.Remove(s.owner);
        if ((!s.cpus.Empty() || !s.gpus.empty()) && !after.Add(s).ok()) std::abort();
      }
      if (!after.Add(plan->allocation).ok()) std::abort();
    }
  }
  (void)dp::ListDevices(setup, topo, Held());
  return 0;
}
