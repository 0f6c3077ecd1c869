// The only file that includes hwloc: it turns an hwloc topology into our plain model.
#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "topology/discoverer.h"

namespace topodra::topology {
namespace {

class HwlocHandle {
 public:
  HwlocHandle() { ok_ = hwloc_topology_init(&topo_) == 0; }
  ~HwlocHandle() {
    if (ok_) hwloc_topology_destroy(topo_);
  }
  HwlocHandle(const HwlocHandle&) = delete;
  HwlocHandle& operator=(const HwlocHandle&) = delete;
  bool ok() const { return ok_; }
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_{};
  bool ok_ = false;
};

CpuSet ToCpuSet(hwloc_const_bitmap_t bitmap) {
  CpuSet out;
  if (bitmap == nullptr) return out;
  // An infinite bitmap (possible in hand-written XML) would never end; cap it at the largest id we
  // can represent.
  for (int i = hwloc_bitmap_first(bitmap); i >= 0 && i <= CpuSet::kMaxCpuId;
       i = hwloc_bitmap_next(bitmap, i)) {
    out.Add(i);
  }
  return out;
}

// strerror is not thread-safe and discovery may run beside the daemon's other threads.
std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

int IdOf(hwloc_obj_t obj) {
  return obj->os_index == HWLOC_UNKNOWN_INDEX ? static_cast<int>(obj->logical_index)
                                              : static_cast<int>(obj->os_index);
}

std::string Info(hwloc_obj_t obj, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(obj, name);
  return v == nullptr ? std::string() : std::string(v);
}

// Used when hwloc had no PCI name database (Debian's live discovery without libpciaccess names).
std::string FallbackVendorName(uint16_t vendor) {
  switch (vendor) {
    case 0x10de:
      return "NVIDIA Corporation";
    case 0x1002:
      return "Advanced Micro Devices, Inc. [AMD/ATI]";
    case 0x8086:
      return "Intel Corporation";
    case 0x102b:
      return "Matrox Electronics Systems Ltd.";
    case 0x1a03:
      return "ASPEED Technology, Inc.";
    default:
      return "";
  }
}

const char* OsDeviceKind(hwloc_obj_osdev_type_t t) {
  switch (t) {
    case HWLOC_OBJ_OSDEV_BLOCK:
      return "block";
    case HWLOC_OBJ_OSDEV_GPU:
      return "gpu";
    case HWLOC_OBJ_OSDEV_NETWORK:
      return "network";
    case HWLOC_OBJ_OSDEV_OPENFABRICS:
      return "openfabrics";
    case HWLOC_OBJ_OSDEV_DMA:
      return "dma";
    case HWLOC_OBJ_OSDEV_COPROC:
      return "coproc";
    default:
      return "other";
  }
}

class HwlocDiscoverer final : public Discoverer {
 public:
  explicit HwlocDiscoverer(TopologySource source) : source_(std::move(source)) {}
  absl::StatusOr<Topology> Discover() override;

 private:
  absl::Status Load(hwloc_topology_t t) const;
  TopologySource source_;
};

absl::Status HwlocDiscoverer::Load(hwloc_topology_t t) const {
  // Disallowed CPUs still belong to the node: the daemon's own container cpuset must not hide the
  // machine from the scheduler.
  unsigned long flags = HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED;
  if (source_.kind != TopologySource::Kind::kLive) {
    // Imported topologies describe another machine; binding support of this one is irrelevant.
    flags |= HWLOC_TOPOLOGY_FLAG_IMPORT_SUPPORT;
  }
  hwloc_topology_set_flags(t, flags);
  // Linux sysfs already gives every PCI device and its locality. The libpciaccess plugin adds only
  // names, leaks on every load, and OpenCL/GL would initialise GPU runtimes or contact an X
  // server from a node daemon.
  for (const char* component : {"pci", "opencl", "gl"}) {
    hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
  }
  // GPUs are PCI devices: keep the PCI tree (for the host bridge) and every OS device (DRM, CUDA,
  // NVML names) that hwloc finds below them. Must be set before the source and the load.
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);

  switch (source_.kind) {
    case TopologySource::Kind::kLive:
      break;
    case TopologySource::Kind::kXmlFile: {
      // hwloc reports only "Invalid argument" for both a missing and a malformed file; look first
      // so the operator learns which one it is.
      std::ifstream probe(source_.value);
      if (!probe) {
        return absl::NotFoundError(
            absl::StrCat("cannot read topology file \"", source_.value, "\": ", ErrnoText(errno)));
      }
      if (hwloc_topology_set_xml(t, source_.value.c_str()) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("topology file \"", source_.value, "\" is not valid hwloc XML"));
      }
      break;
    }
    case TopologySource::Kind::kSynthetic:
      if (source_.value.empty() || hwloc_topology_set_synthetic(t, source_.value.c_str()) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid synthetic topology \"", source_.value,
                         "\" (expected hwloc synthetic syntax, e.g. \"pack:2 core:8 pu:2\")"));
      }
      break;
  }
  if (hwloc_topology_load(t) != 0) {
    // Without the libxml2 plugin (the daemon blacklists it) hwloc parses XML only here.
    if (source_.kind == TopologySource::Kind::kXmlFile) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology file \"", source_.value, "\" is not valid hwloc XML"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load topology from ", source_.Describe(), ": ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

struct Builder {
  hwloc_topology_t t;
  Topology topo;

  void Packages() {
    for (hwloc_obj_t o = nullptr;
         (o = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PACKAGE, o)) != nullptr;) {
      topo.packages.push_back(Package{IdOf(o), ToCpuSet(o->cpuset)});
    }
  }

  void NumaNodes() {
    for (hwloc_obj_t o = nullptr;
         (o = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, o)) != nullptr;) {
      NumaNode n;
      n.id = IdOf(o);
      n.local_cpus = ToCpuSet(o->cpuset);
      n.subtype = o->subtype == nullptr ? "" : o->subtype;
      n.memory_bytes = o->attr == nullptr ? 0 : o->attr->numanode.local_memory;
      topo.numa_nodes.push_back(std::move(n));
    }
    // hwloc lists memory-only nodes after the DRAM ones; JSON readers expect id order.
    std::sort(topo.numa_nodes.begin(), topo.numa_nodes.end(),
              [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  }

  static void Caches(hwloc_topology_t t, hwloc_obj_type_t type, int level,
                     std::vector<Cache>& out) {
    for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(t, type, o)) != nullptr;) {
      out.push_back(Cache{level, static_cast<int>(o->logical_index), o->attr->cache.size,
                          ToCpuSet(o->cpuset)});
    }
  }

  // Linux gives every CPU one home node. hwloc also attaches memory-only nodes (MCDRAM, HBM, CXL)
  // with a CPU locality, so prefer ordinary DRAM, then the most local node, then the lowest id.
  int HomeNuma(hwloc_obj_t pu) const {
    int best = kNone;
    std::tuple<bool, int, int> best_key{true, 0, 0};
    for (int id = hwloc_bitmap_first(pu->nodeset); id >= 0;
         id = hwloc_bitmap_next(pu->nodeset, id)) {
      const NumaNode* n = topo.FindNuma(id);
      if (n == nullptr) continue;
      std::tuple<bool, int, int> key{!n->subtype.empty(), n->local_cpus.Size(), id};
      if (best == kNone || key < best_key) {
        best = id;
        best_key = key;
      }
    }
    return best;
  }

  std::map<int, CoreType> CpuKinds() {
    std::map<int, CoreType> type_of_cpu;
    const int nr = hwloc_cpukinds_get_nr(t, 0);
    if (nr <= 0) return type_of_cpu;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int max_eff = kNone;
    for (int i = 0; i < nr; ++i) {
      int eff = -1;
      unsigned nr_infos = 0;
      hwloc_info_s* infos = nullptr;
      if (hwloc_cpukinds_get_info(t, static_cast<unsigned>(i), set, &eff, &nr_infos, &infos, 0) !=
          0) {
        continue;
      }
      CpuKind k;
      k.efficiency = eff;
      k.cpus = ToCpuSet(set);
      for (unsigned j = 0; j < nr_infos; ++j) k.infos[infos[j].name] = infos[j].value;
      max_eff = std::max(max_eff, eff);
      topo.cpu_kinds.push_back(std::move(k));
    }
    hwloc_bitmap_free(set);
    // One kind means a homogeneous machine: nothing to call efficient. With several, the kinds
    // below the top efficiency are the efficiency cores; Intel's own CoreType names win if given.
    for (CpuKind& k : topo.cpu_kinds) {
      const std::string core_type = k.infos.count("CoreType") ? k.infos["CoreType"] : "";
      if (core_type == "IntelAtom") {
        k.type = CoreType::kEfficiency;
      } else if (core_type == "IntelCore" && topo.cpu_kinds.size() > 1) {
        k.type = CoreType::kPerformance;
      } else if (topo.cpu_kinds.size() > 1 && max_eff >= 0 && k.efficiency >= 0) {
        k.type = k.efficiency == max_eff ? CoreType::kPerformance : CoreType::kEfficiency;
      }
      for (int cpu : k.cpus) type_of_cpu[cpu] = k.type;
    }
    return type_of_cpu;
  }

  void CoresAndCpus() {
    const std::map<int, CoreType> kinds = CpuKinds();
    std::map<hwloc_obj_t, int> core_index;
    for (hwloc_obj_t pu = nullptr;
         (pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, pu)) != nullptr;) {
      const int cpu = static_cast<int>(pu->os_index);
      if (pu->os_index == HWLOC_UNKNOWN_INDEX || cpu > CpuSet::kMaxCpuId) continue;
      // A topology without a Core level (e.g. synthetic "pack:2 pu:4") makes each PU its own core.
      hwloc_obj_t core_obj = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu);
      hwloc_obj_t key = core_obj != nullptr ? core_obj : pu;
      auto [it, inserted] = core_index.emplace(key, static_cast<int>(topo.cores.size()));
      if (inserted) {
        Core c;
        c.id = it->second;
        c.os_id = core_obj != nullptr ? IdOf(core_obj) : cpu;
        if (hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, pu)) {
          c.package = IdOf(p);
        }
        if (hwloc_obj_t l3 = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_L3CACHE, pu)) {
          c.l3 = static_cast<int>(l3->logical_index);
        }
        if (hwloc_obj_t l2 = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_L2CACHE, pu)) {
          c.l2 = static_cast<int>(l2->logical_index);
        }
        c.numa = HomeNuma(pu);
        auto k = kinds.find(cpu);
        c.type = k == kinds.end() ? CoreType::kUnknown : k->second;
        topo.cores.push_back(std::move(c));
      }
      Core& core = topo.cores[static_cast<size_t>(it->second)];
      core.cpus.Add(cpu);
      topo.cpus.push_back(Cpu{cpu, core.id});
    }
    for (NumaNode& n : topo.numa_nodes) {
      for (const Core& c : topo.cores) {
        if (c.numa == n.id) n.cpus |= c.cpus;
      }
    }
  }

  static std::string PcieRoot(hwloc_obj_t dev) {
    // The host bridge is the topmost I/O ancestor; its downstream side names the root bus the
    // way sysfs does (/sys/devices/pci0000:00).
    hwloc_obj_t host = nullptr;
    for (hwloc_obj_t o = dev->parent; o != nullptr && o->type == HWLOC_OBJ_BRIDGE; o = o->parent) {
      host = o;
    }
    if (host == nullptr || host->attr == nullptr ||
        host->attr->bridge.downstream_type != HWLOC_OBJ_BRIDGE_PCI) {
      return "";
    }
    return absl::StrFormat("pci%04x:%02x", host->attr->bridge.downstream.pci.domain,
                           host->attr->bridge.downstream.pci.secondary_bus);
  }

  // The bridges above a PCI device, topmost first; see Gpu::pci_path.
  static std::vector<std::string> PciPath(hwloc_obj_t dev) {
    std::vector<std::string> path;
    for (hwloc_obj_t o = dev->parent; o != nullptr && o->type == HWLOC_OBJ_BRIDGE; o = o->parent) {
      const hwloc_obj_attr_u::hwloc_bridge_attr_s* b =
          o->attr == nullptr ? nullptr : &o->attr->bridge;
      if (b != nullptr && b->upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
        const hwloc_obj_attr_u::hwloc_pcidev_attr_s& up = b->upstream.pci;
        path.push_back(absl::StrFormat("%04x:%02x:%02x.%01x", up.domain, up.bus, up.dev, up.func));
      } else if (b != nullptr && b->downstream_type == HWLOC_OBJ_BRIDGE_PCI) {
        path.push_back(absl::StrFormat("pci%04x:%02x", b->downstream.pci.domain,
                                       b->downstream.pci.secondary_bus));
      } else {
        // A host bridge hwloc could not name: still distinct from every other bridge.
        path.push_back(absl::StrCat("bridge#", o->gp_index));
      }
    }
    std::reverse(path.begin(), path.end());
    return path;
  }

  void Gpus() {
    for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_pcidev(t, o)) != nullptr;) {
      const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci = o->attr->pcidev;
      if ((pci.class_id >> 8) != 0x03) continue;
      Gpu g;
      g.pci_bus_id = absl::StrFormat("%04x:%02x:%02x.%01x", pci.domain, pci.bus, pci.dev, pci.func);
      g.vendor_id = pci.vendor_id;
      g.device_id = pci.device_id;
      g.class_id = pci.class_id;
      g.vendor_name = Info(o, "PCIVendor");
      if (g.vendor_name.empty()) g.vendor_name = FallbackVendorName(pci.vendor_id);
      g.device_name = Info(o, "PCIDevice");
      g.pcie_root = PcieRoot(o);
      g.pci_path = PciPath(o);
      if (hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, o)) {
        g.local_cpus = ToCpuSet(anc->cpuset);
        if (anc->nodeset != nullptr && hwloc_bitmap_weight(anc->nodeset) == 1) {
          g.numa = hwloc_bitmap_first(anc->nodeset);
        }
      }
      for (hwloc_obj_t c = o->io_first_child; c != nullptr; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE) continue;
        g.os_devices.push_back(OsDevice{c->name == nullptr ? "" : c->name,
                                        OsDeviceKind(c->attr->osdev.type),
                                        c->subtype == nullptr ? "" : c->subtype});
        if (g.model.empty()) g.model = Info(c, "GPUModel");
        if (g.uuid.empty()) g.uuid = Info(c, "NVIDIAUUID");
        if (g.memory_bytes == 0) {
          // hwloc reports CUDA global memory in KiB.
          const std::string kib = Info(c, "CUDAGlobalMemorySize");
          if (!kib.empty()) g.memory_bytes = std::strtoull(kib.c_str(), nullptr, 10) * 1024;
        }
      }
      topo.gpus.push_back(std::move(g));
    }
  }

  // Every host bridge hwloc kept, with the locality of the object it hangs from. hwloc may split
  // one root bus over several host-bridge objects (or a bus over several domains is named
  // twice); same-named roots are merged.
  void HostBridges() {
    std::map<std::string, topology::PcieRoot> by_name;
    for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_bridge(t, o)) != nullptr;) {
      if (o->attr == nullptr || o->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_HOST ||
          o->attr->bridge.downstream_type != HWLOC_OBJ_BRIDGE_PCI) {
        continue;
      }
      const std::string name =
          absl::StrFormat("pci%04x:%02x", o->attr->bridge.downstream.pci.domain,
                          o->attr->bridge.downstream.pci.secondary_bus);
      const bool seen = by_name.count(name) > 0;
      topology::PcieRoot& r = by_name[name];
      hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, o);
      const int numa =
          anc != nullptr && anc->nodeset != nullptr && hwloc_bitmap_weight(anc->nodeset) == 1
              ? hwloc_bitmap_first(anc->nodeset)
              : kNone;
      if (anc != nullptr) r.local_cpus |= ToCpuSet(anc->cpuset);
      // A root named twice below two NUMA nodes belongs to neither alone.
      r.numa = !seen || r.numa == numa ? numa : kNone;
    }
    for (auto& [name, r] : by_name) {
      r.name = name;
      topo.pcie_roots.push_back(std::move(r));
    }
  }

  void Distances() {
    unsigned nr = 1;
    hwloc_distances_s* d = nullptr;
    if (hwloc_distances_get_by_type(t, HWLOC_OBJ_NUMANODE, &nr, &d,
                                    HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0 ||
        nr == 0 || d == nullptr) {
      return;
    }
    const size_t n = topo.numa_nodes.size();
    std::vector<std::vector<uint64_t>> m(n, std::vector<uint64_t>(n, 0));
    std::vector<int> pos(d->nbobjs, -1);
    for (unsigned i = 0; i < d->nbobjs; ++i) {
      for (size_t k = 0; k < n; ++k) {
        if (topo.numa_nodes[k].id == IdOf(d->objs[i])) pos[i] = static_cast<int>(k);
      }
    }
    bool complete = d->nbobjs == n;
    for (unsigned i = 0; i < d->nbobjs && complete; ++i) {
      for (unsigned j = 0; j < d->nbobjs; ++j) {
        if (pos[i] < 0 || pos[j] < 0) {
          complete = false;
          break;
        }
        m[static_cast<size_t>(pos[i])][static_cast<size_t>(pos[j])] = d->values[i * d->nbobjs + j];
      }
    }
    hwloc_distances_release(t, d);
    if (complete) topo.numa_distances = std::move(m);
  }
};

}  // namespace

std::string TopologySource::Describe() const {
  switch (kind) {
    case Kind::kXmlFile:
      return "xml:" + value;
    case Kind::kSynthetic:
      return "synthetic:" + value;
    case Kind::kLive:
      break;
  }
  return "live";
}

absl::StatusOr<Topology> HwlocDiscoverer::Discover() {
  HwlocHandle h;
  if (!h.ok()) return absl::InternalError("hwloc_topology_init failed");
  if (absl::Status s = Load(h.get()); !s.ok()) return s;

  Builder b{h.get(), {}};
  b.topo.source = source_.Describe();
  b.NumaNodes();
  b.Packages();
  Builder::Caches(h.get(), HWLOC_OBJ_L3CACHE, 3, b.topo.l3);
  Builder::Caches(h.get(), HWLOC_OBJ_L2CACHE, 2, b.topo.l2);
  b.CoresAndCpus();
  b.Gpus();
  b.HostBridges();
  b.Distances();
  b.topo.offline = ToCpuSet(hwloc_topology_get_complete_cpuset(h.get()));
  b.topo.Finalize();
  if (b.topo.cpus.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology from ", source_.Describe(), " has no online CPUs"));
  }
  return std::move(b.topo);
}

std::string DiscovererVersion() {
  const unsigned v = hwloc_get_api_version();
  return absl::StrFormat("hwloc API %u.%u.%u", v >> 16, (v >> 8) & 0xff, v & 0xff);
}

std::unique_ptr<Discoverer> NewHwlocDiscoverer(TopologySource source) {
  return std::make_unique<HwlocDiscoverer>(std::move(source));
}

absl::StatusOr<Topology> Discover(const TopologySource& source) {
  return HwlocDiscoverer(source).Discover();
}

}  // namespace topodra::topology
