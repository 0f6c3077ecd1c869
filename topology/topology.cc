#include "topology/topology.h"

#include <algorithm>

namespace topodra::topology {

const char* CoreTypeName(CoreType t) {
  switch (t) {
    case CoreType::kPerformance:
      return "performance";
    case CoreType::kEfficiency:
      return "efficiency";
    case CoreType::kUnknown:
      break;
  }
  return "unknown";
}

void Topology::Finalize() {
  std::sort(cpus.begin(), cpus.end(), [](const Cpu& a, const Cpu& b) { return a.id < b.id; });
  std::sort(gpus.begin(), gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.pci_bus_id < b.pci_bus_id; });
  std::sort(pcie_roots.begin(), pcie_roots.end(),
            [](const PcieRoot& a, const PcieRoot& b) { return a.name < b.name; });
  online = CpuSet();
  for (const Cpu& c : cpus) online.Add(c.id);
  offline = offline - online;
  cpu_index_.assign(cpus.empty() ? 0 : static_cast<size_t>(cpus.back().id) + 1, -1);
  for (size_t i = 0; i < cpus.size(); ++i) cpu_index_[static_cast<size_t>(cpus[i].id)] = int(i);
}

std::vector<std::string> Topology::PcieRootsNear(const CpuSet& set) const {
  std::vector<std::string> out;
  for (const PcieRoot& r : pcie_roots) {
    if (!(r.local_cpus & set).Empty()) out.push_back(r.name);
  }
  return out;
}

const Cpu* Topology::FindCpu(int cpu) const {
  if (cpu < 0 || static_cast<size_t>(cpu) >= cpu_index_.size()) return nullptr;
  const int i = cpu_index_[static_cast<size_t>(cpu)];
  return i < 0 ? nullptr : &cpus[static_cast<size_t>(i)];
}

const Core* Topology::CoreOf(int cpu) const {
  const Cpu* c = FindCpu(cpu);
  if (c == nullptr || c->core < 0 || static_cast<size_t>(c->core) >= cores.size()) return nullptr;
  return &cores[static_cast<size_t>(c->core)];
}

int Topology::NumaOf(int cpu) const {
  const Core* core = CoreOf(cpu);
  return core == nullptr ? kNone : core->numa;
}

int Topology::PackageOf(int cpu) const {
  const Core* core = CoreOf(cpu);
  return core == nullptr ? kNone : core->package;
}

int Topology::L3Of(int cpu) const {
  const Core* core = CoreOf(cpu);
  return core == nullptr ? kNone : core->l3;
}

CpuSet Topology::SmtSiblings(int cpu) const {
  const Core* core = CoreOf(cpu);
  return core == nullptr ? CpuSet() : core->cpus;
}

const NumaNode* Topology::FindNuma(int numa_id) const {
  for (const NumaNode& n : numa_nodes) {
    if (n.id == numa_id) return &n;
  }
  return nullptr;
}

const Package* Topology::FindPackage(int package_id) const {
  for (const Package& p : packages) {
    if (p.id == package_id) return &p;
  }
  return nullptr;
}

CpuSet Topology::CpusOfNuma(int numa_id) const {
  const NumaNode* n = FindNuma(numa_id);
  return n == nullptr ? CpuSet() : n->cpus;
}

CpuSet Topology::CpusOfPackage(int package_id) const {
  const Package* p = FindPackage(package_id);
  return p == nullptr ? CpuSet() : p->cpus;
}

CpuSet Topology::CpusOfL3(int l3_index) const {
  if (l3_index < 0 || static_cast<size_t>(l3_index) >= l3.size()) return CpuSet();
  return l3[static_cast<size_t>(l3_index)].cpus;
}

std::optional<uint64_t> Topology::NumaDistance(int from_id, int to_id) const {
  if (numa_distances.size() != numa_nodes.size()) return std::nullopt;
  size_t from = numa_nodes.size();
  size_t to = numa_nodes.size();
  for (size_t i = 0; i < numa_nodes.size(); ++i) {
    if (numa_nodes[i].id == from_id) from = i;
    if (numa_nodes[i].id == to_id) to = i;
  }
  if (from == numa_nodes.size() || to == numa_nodes.size()) return std::nullopt;
  if (numa_distances[from].size() != numa_nodes.size()) return std::nullopt;
  return numa_distances[from][to];
}

int Topology::MaxThreadsPerCore() const {
  int max = 0;
  for (const Core& c : cores) max = std::max(max, c.cpus.Size());
  return max;
}

}  // namespace topodra::topology
