// Arbitrary bytes as a ResourceClaim: parsing, config resolution and the cpuset checks must return
// a status, never crash, and every accepted assignment must satisfy the rules it was checked for.
// The same bytes as opaque parameters and as a numaMemory value: accepted ones are well formed,
// and a plan's memory nodes are nodes of the machine.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "driver/claims/allocation_result.h"
#include "driver/claims/cpu_config.h"
#include "driver/prepare/planner.h"
#include "nlohmann/json.hpp"
#include "topology/topology.h"

namespace {

using topodra::CpuSet;
namespace claims = topodra::claims;
namespace prepare = topodra::prepare;
namespace state = topodra::state;
namespace cdi = topodra::cdi;

// 8 online CPUs on one core each, 8-9 offline: enough to reach every rule.
const topodra::topology::Topology& Machine() {
  static const topodra::topology::Topology topo = [] {
    topodra::topology::Topology t;
    topodra::topology::Package package{0, CpuSet::Range(0, 7)};
    t.packages.push_back(package);
    for (int cpu = 0; cpu < 8; ++cpu) {
      topodra::topology::Core core;
      core.id = cpu;
      core.os_id = cpu;
      core.package = 0;
      core.cpus = CpuSet{cpu};
      t.cores.push_back(core);
      t.cpus.push_back({cpu, cpu});
    }
    t.online = CpuSet::Range(0, 7);
    t.offline = CpuSet{8, 9};
    // Two nodes with CPUs and a CPU-less one (HBM), for numaMemory.
    for (int n = 0; n < 3; ++n) {
      topodra::topology::NumaNode node;
      node.id = n;
      node.cpus = n < 2 ? CpuSet::Range(4 * n, 4 * n + 3) : CpuSet{};
      node.memory_bytes = 1 << 30;
      t.numa_nodes.push_back(node);
    }
    t.source = "synthetic:fuzz";
    t.Finalize();
    return t;
  }();
  return topo;
}

// Devices of every kind, so the fuzzer reaches each rule: "d" is a group of 0-3, "m" the
// machine, "c5" the individual CPU 5.
const claims::CpuPool& Pool() {
  static const claims::CpuPool pool = [] {
    claims::CpuPool p;
    p.name = "p";
    p.devices["d"] = {claims::CpuDeviceKind::kGroup, CpuSet::Range(0, 3)};
    p.devices["m"] = {claims::CpuDeviceKind::kMachine, CpuSet::Range(0, 7)};
    p.devices["c5"] = {claims::CpuDeviceKind::kIndividual, CpuSet{5}};
    return p;
  }();
  return pool;
}

const prepare::DriverSetup& CpuDriver() {
  static const prepare::DriverSetup setup = [] {
    prepare::DriverSetup s;
    s.driver = "dra.cpu";
    s.kind = prepare::DriverKind::kCpu;
    s.cpu_pool = Pool();
    s.reserved = CpuSet{0};
    // --enforce=cgroup with --numa-memory=claim: plans choose memory nodes.
    s.cpuset_hook = prepare::CpusetHook{"/hook", "/records", "/cg", false, true};
    return s;
  }();
  return setup;
}

const prepare::DriverSetup& GpuDriver() {
  static const prepare::DriverSetup setup = [] {
    prepare::DriverSetup s;
    s.driver = "d";
    s.kind = prepare::DriverKind::kGpu;
    s.gpu_pool = "p";
    s.gpus["g0"] = {"0000:01:00.0", {}};
    s.gpus["g1"] = {"0000:02:00.0", {{.path = "/dev/dri/card1"}}};
    return s;
  }();
  return setup;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  (void)claims::ParseCpuConfig(j);
  if (absl::StatusOr<claims::CpuConfig> c = claims::ParseCpuConfigParameters(j); c.ok()) {
    if (!c->cpuset && !c->numa_memory) std::abort();
    if (c->cpuset && c->cpuset->Empty()) std::abort();
  }
  if (absl::StatusOr<claims::NumaMemory> m = claims::ParseNumaMemory(j); m.ok()) {
    // "all" stands alone; otherwise something is named; no node above the kernel's limit.
    if (m->all && (m->local || !m->nodes.Empty())) std::abort();
    if (!m->all && !m->local && m->nodes.Empty()) std::abort();
    if (!m->nodes.Empty() && *m->nodes.Last() > claims::kMaxNumaNodeId) std::abort();
    absl::StatusOr<CpuSet> nodes = claims::MemoryNodes(*m, CpuSet{4}, Machine());
    if (nodes.ok() && !nodes->IsSubsetOf(CpuSet::Range(0, 2))) std::abort();
  }
  absl::StatusOr<claims::Claim> claim = claims::ParseClaim(j);
  if (!claim.ok()) return 0;
  for (const claims::DeviceResult& r : claim->results) {
    (void)claims::BaseRequest(r.request);
    for (const claims::DeviceConfig* c : claims::ConfigsFor(*claim, r, r.driver)) {
      if (c->driver != r.driver) std::abort();
    }
  }
  claims::NodeCpuState node;
  node.reserved = CpuSet{0};
  node.held_by_others = CpuSet{1, 2};
  node.holder = [](int cpu) -> std::optional<std::string> {
    if (cpu == 1) return "claim other/c2 (uid u2)";
    return std::nullopt;
  };
  for (const std::string& driver : {std::string("dra.cpu"), std::string("d")}) {
    absl::StatusOr<std::vector<claims::CpuAssignment>> got =
        claims::ResolveCpuAssignments(*claim, driver, Machine(), node, Pool());
    if (!got.ok()) continue;
    CpuSet used;
    for (const claims::CpuAssignment& a : *got) {
      if (a.count <= 0) std::abort();
      if (claim->results[a.result_index].driver != driver) std::abort();
      if (!a.explicit_cpus.has_value()) continue;
      const CpuSet& cpus = *a.explicit_cpus;
      if (cpus.Size() != a.count || !cpus.IsSubsetOf(Machine().online) ||
          cpus.Intersects(node.reserved) || cpus.Intersects(node.held_by_others) ||
          cpus.Intersects(used)) {
        std::abort();
      }
      used |= cpus;
    }
  }
  // The whole plan (CPU picks, GPU results, CDI spec) against a node where CPU 1 is held:
  // never a crash; a plan holds only free CPUs and a valid CDI spec.
  state::State held;
  state::Allocation other;
  other.kind = state::AllocationKind::kDraClaim;
  other.driver = "dra.cpu";
  other.owner = state::DraOwner("dra.cpu", "other-uid");
  other.claim_namespace = "other";
  other.claim_name = "c2";
  other.cpus = CpuSet{1};
  other.gpus = {"0000:01:00.0"};
  other.phase = state::Phase::kPrepared;
  (void)held.Add(other);
  for (const prepare::DriverSetup* setup : {&CpuDriver(), &GpuDriver()}) {
    absl::StatusOr<prepare::Plan> plan = prepare::PlanClaim(*claim, *setup, Machine(), held);
    if (!plan.ok()) continue;
    if (plan->allocation.cpus.Intersects(CpuSet{0, 1}) ||
        !plan->allocation.cpus.IsSubsetOf(Machine().online) ||
        plan->allocation.gpus.contains("0000:01:00.0") ||
        !plan->allocation.mems.IsSubsetOf(CpuSet::Range(0, 2))) {
      std::abort();
    }
    if (!plan->cdi_spec.devices.empty() && !cdi::Validate(plan->cdi_spec).ok()) std::abort();
  }
  return 0;
}
