#include "topology/topology_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace topodra::topology {
namespace {

using nlohmann::json;

json IdOrNull(int id) { return id == kNone ? json(nullptr) : json(id); }

std::string Hex16(uint16_t v) { return absl::StrFormat("0x%04x", v); }

std::string CpusOrNone(const CpuSet& s) { return s.Empty() ? "none" : s.ToString(); }

}  // namespace

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0 || v == static_cast<double>(static_cast<uint64_t>(v))) {
    return absl::StrFormat("%d %s", static_cast<uint64_t>(v), kUnits[u]);
  }
  return absl::StrFormat("%.1f %s", v, kUnits[u]);
}

json TopologySummaryJson(const Topology& topo) {
  return json{{"packages", topo.packages.size()},
              {"numaNodes", topo.numa_nodes.size()},
              {"cores", topo.cores.size()},
              {"cpus", topo.cpus.size()},
              {"onlineCpus", topo.online.ToString()},
              {"offlineCpus", topo.offline.ToString()},
              {"gpus", topo.gpus.size()}};
}

json TopologyToJson(const Topology& topo) {
  json out;
  out["summary"] = TopologySummaryJson(topo);
  out["source"] = topo.source;
  out["threadsPerCore"] = topo.MaxThreadsPerCore();

  json packages = json::array();
  for (const Package& p : topo.packages) {
    packages.push_back({{"id", p.id}, {"cpus", p.cpus.ToString()}});
  }
  out["packages"] = std::move(packages);

  json numa = json::array();
  for (size_t i = 0; i < topo.numa_nodes.size(); ++i) {
    const NumaNode& n = topo.numa_nodes[i];
    json j{{"id", n.id},
           {"cpus", n.cpus.ToString()},
           {"localCpus", n.local_cpus.ToString()},
           {"memoryBytes", n.memory_bytes},
           {"subtype", n.subtype}};
    if (i < topo.numa_distances.size()) {
      json d = json::object();
      for (size_t k = 0; k < topo.numa_nodes.size(); ++k) {
        d[std::to_string(topo.numa_nodes[k].id)] = topo.numa_distances[i][k];
      }
      j["distances"] = std::move(d);
    }
    numa.push_back(std::move(j));
  }
  out["numaNodes"] = std::move(numa);

  json caches = json::object();
  for (const auto& [name, list] : {std::pair{"l3", &topo.l3}, std::pair{"l2", &topo.l2}}) {
    json arr = json::array();
    for (const Cache& c : *list) {
      arr.push_back({{"id", c.id}, {"sizeBytes", c.size_bytes}, {"cpus", c.cpus.ToString()}});
    }
    caches[name] = std::move(arr);
  }
  out["caches"] = std::move(caches);

  json cores = json::array();
  for (const Core& c : topo.cores) {
    cores.push_back({{"id", c.id},
                     {"osId", c.os_id},
                     {"package", IdOrNull(c.package)},
                     {"numaNode", IdOrNull(c.numa)},
                     {"l3", IdOrNull(c.l3)},
                     {"l2", IdOrNull(c.l2)},
                     {"type", CoreTypeName(c.type)},
                     {"cpus", c.cpus.ToString()}});
  }
  out["cores"] = std::move(cores);

  json kinds = json::array();
  for (const CpuKind& k : topo.cpu_kinds) {
    kinds.push_back({{"efficiency", IdOrNull(k.efficiency)},
                     {"type", CoreTypeName(k.type)},
                     {"cpus", k.cpus.ToString()},
                     {"infos", k.infos}});
  }
  out["cpuKinds"] = std::move(kinds);

  json gpus = json::array();
  for (const Gpu& g : topo.gpus) {
    json os = json::array();
    for (const OsDevice& d : g.os_devices) {
      os.push_back({{"name", d.name}, {"kind", d.kind}, {"subtype", d.subtype}});
    }
    gpus.push_back({{"pciBusID", g.pci_bus_id},
                    {"vendorID", Hex16(g.vendor_id)},
                    {"deviceID", Hex16(g.device_id)},
                    {"classID", Hex16(g.class_id)},
                    {"vendor", g.vendor_name},
                    {"device", g.device_name},
                    {"model", g.model},
                    {"uuid", g.uuid},
                    {"numaNode", IdOrNull(g.numa)},
                    {"localCpus", g.local_cpus.ToString()},
                    {"pcieRoot", g.pcie_root},
                    {"memoryBytes", g.memory_bytes},
                    {"osDevices", std::move(os)}});
  }
  out["gpus"] = std::move(gpus);

  json roots = json::array();
  for (const PcieRoot& r : topo.pcie_roots) {
    roots.push_back(
        {{"name", r.name}, {"localCpus", r.local_cpus.ToString()}, {"numaNode", IdOrNull(r.numa)}});
  }
  out["pcieRoots"] = std::move(roots);
  return out;
}

std::string TopologyToText(const Topology& topo) {
  std::string out = absl::StrFormat(
      "Machine (%s): %d packages, %d NUMA nodes, %d cores, %d CPUs online (%s), offline: %s, "
      "up to %d threads per core, %d GPUs\n",
      topo.source, topo.packages.size(), topo.numa_nodes.size(), topo.cores.size(),
      topo.cpus.size(), CpusOrNone(topo.online), CpusOrNone(topo.offline), topo.MaxThreadsPerCore(),
      topo.gpus.size());

  // Cores come in topology order, so a header is printed whenever an enclosing object changes;
  // a NUMA node spanning several packages is then shown under each of them.
  const Core* prev = nullptr;
  for (const Core& c : topo.cores) {
    const bool new_pkg = prev == nullptr || prev->package != c.package;
    const bool new_numa = new_pkg || prev->numa != c.numa;
    const bool new_l3 = new_numa || prev->l3 != c.l3;
    const bool new_l2 = new_l3 || prev->l2 != c.l2;
    if (new_pkg) {
      if (c.package == kNone) {
        absl::StrAppend(&out, "  (no package)\n");
      } else {
        absl::StrAppend(&out, "  Package ", c.package, " (CPUs ",
                        CpusOrNone(topo.CpusOfPackage(c.package)), ")\n");
      }
    }
    if (new_numa && c.numa != kNone) {
      const NumaNode* n = topo.FindNuma(c.numa);
      absl::StrAppend(&out, "    NUMA ", c.numa, " (CPUs ", CpusOrNone(n->cpus), ", ",
                      HumanBytes(n->memory_bytes), ")\n");
    }
    if (new_l3 && c.l3 != kNone) {
      const Cache& l3 = topo.l3[static_cast<size_t>(c.l3)];
      absl::StrAppend(&out, "      L3 #", l3.id, " (", HumanBytes(l3.size_bytes), ", CPUs ",
                      CpusOrNone(l3.cpus), ")\n");
    }
    if (new_l2 && c.l2 != kNone) {
      const Cache& l2 = topo.l2[static_cast<size_t>(c.l2)];
      absl::StrAppend(&out, "        L2 #", l2.id, " (", HumanBytes(l2.size_bytes), ")\n");
    }
    absl::StrAppend(&out, "          Core ", c.id, " (os ", c.os_id, "): CPUs ", c.cpus.ToString());
    if (c.type != CoreType::kUnknown) absl::StrAppend(&out, " [", CoreTypeName(c.type), "]");
    absl::StrAppend(&out, "\n");
    prev = &c;
  }

  for (const NumaNode& n : topo.numa_nodes) {
    if (!n.cpus.Empty()) continue;
    absl::StrAppend(&out, "  Memory-only NUMA ", n.id,
                    n.subtype.empty() ? "" : " (" + n.subtype + ")", ": ",
                    HumanBytes(n.memory_bytes), ", near CPUs ", CpusOrNone(n.local_cpus), "\n");
  }
  if (!topo.numa_distances.empty()) {
    absl::StrAppend(&out, "  NUMA distances:\n");
    for (size_t i = 0; i < topo.numa_nodes.size(); ++i) {
      absl::StrAppend(&out, "    ", topo.numa_nodes[i].id, ":",
                      absl::StrJoin(topo.numa_distances[i], " "), "\n");
    }
  }
  for (const CpuKind& k : topo.cpu_kinds) {
    absl::StrAppend(&out, "  CPU kind ", CoreTypeName(k.type), " (efficiency ", k.efficiency,
                    "): CPUs ", k.cpus.ToString(), "\n");
  }
  for (const Gpu& g : topo.gpus) {
    std::vector<std::string> names;
    for (const OsDevice& d : g.os_devices) names.push_back(d.name);
    absl::StrAppend(&out, "  GPU ", g.pci_bus_id, " [",
                    absl::StrFormat("%04x:%04x", g.vendor_id, g.device_id), "] ",
                    g.vendor_name.empty() ? "unknown vendor" : g.vendor_name, " ",
                    !g.model.empty() ? g.model : g.device_name, ", NUMA ",
                    g.numa == kNone ? std::string("unknown") : std::to_string(g.numa), ", root ",
                    g.pcie_root.empty() ? "unknown" : g.pcie_root,
                    g.memory_bytes ? ", " + HumanBytes(g.memory_bytes) : std::string(),
                    names.empty() ? std::string() : ", devices " + absl::StrJoin(names, ","), "\n");
  }
  for (const PcieRoot& r : topo.pcie_roots) {
    absl::StrAppend(&out, "  PCIe root ", r.name, ": CPUs ", CpusOrNone(r.local_cpus), ", NUMA ",
                    r.numa == kNone ? std::string("unknown") : std::to_string(r.numa), "\n");
  }
  return out;
}

}  // namespace topodra::topology
