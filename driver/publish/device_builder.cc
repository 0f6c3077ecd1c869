#include "driver/publish/device_builder.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "driver/publish/names.h"

namespace topodra::publish {
namespace {

using topology::Core;
using topology::CoreType;
using topology::kNone;
using topology::Topology;

// Attribute keys of kubernetes-sigs/dra-driver-cpu (spec §4.3). They are always qualified with
// "dra.cpu" so claims written for that driver keep matching even under another driver name.
constexpr char kNumaNode[] = "resource.kubernetes.io/numaNode";
constexpr char kNumaNodeId[] = "dra.cpu/numaNodeID";
constexpr char kNetNumaNode[] = "dra.net/numaNode";
constexpr char kSocketId[] = "dra.cpu/socketID";
constexpr char kSmtEnabled[] = "dra.cpu/smtEnabled";
constexpr char kCacheL3Id[] = "dra.cpu/cacheL3ID";
constexpr char kCoreType[] = "dra.cpu/coreType";
constexpr char kCoreId[] = "dra.cpu/coreID";
constexpr char kCpuId[] = "dra.cpu/cpuID";
constexpr char kNumCpus[] = "dra.cpu/numCPUs";
constexpr char kCpuCapacity[] = "dra.cpu/cpu";

constexpr char kPciBusId[] = "resource.kubernetes.io/pciBusID";
constexpr char kPcieRoot[] = "resource.kubernetes.io/pcieRoot";

// dra-driver-cpu's spelling of core types.
std::string CoreTypeValue(CoreType t) {
  switch (t) {
    case CoreType::kPerformance:
      return "p-core";
    case CoreType::kEfficiency:
      return "e-core";
    case CoreType::kUnknown:
      break;
  }
  return "standard";
}

// String attributes are capped at 64 bytes by the API; PCI names can be longer.
std::string Truncate(std::string s, size_t max = 64) {
  if (s.size() > max) s.resize(max);
  return s;
}

void SetNuma(Attributes& a, int numa) {
  a[kNumaNode] = int64_t{numa};
  a[kNumaNodeId] = int64_t{numa};
  a[kNetNumaNode] = int64_t{numa};
}

// The single value of f over the CPUs of a group, or kNone when they disagree.
template <typename F>
int Common(const Topology& topo, const CpuSet& cpus, F f) {
  int value = kNone;
  for (int cpu : cpus) {
    const int v = f(topo, cpu);
    if (value == kNone) {
      value = v;
    } else if (v != value) {
      return kNone;
    }
  }
  return value;
}

Device GroupDevice(const Topology& topo, std::string name, const CpuSet& cpus, bool smt) {
  Device d;
  d.name = std::move(name);
  d.allow_multiple_allocations = true;
  const int numa = Common(topo, cpus, [](const Topology& t, int c) { return t.NumaOf(c); });
  if (numa != kNone) SetNuma(d.attributes, numa);
  const int socket = Common(topo, cpus, [](const Topology& t, int c) { return t.PackageOf(c); });
  if (socket != kNone) d.attributes[kSocketId] = int64_t{socket};
  d.attributes[kNumCpus] = int64_t{cpus.Size()};
  d.attributes[kSmtEnabled] = smt;
  // Only whole CPUs, at least one: the consumed capacity is the CPU count of the claim.
  d.capacity[kCpuCapacity] = Capacity{std::to_string(cpus.Size()),
                                      RequestPolicy{"1", {}, ValidRange{"1", std::nullopt, "1"}}};
  return d;
}

std::vector<Device> IndividualCpuDevices(const Topology& topo, const PublishOptions& opts,
                                         bool smt) {
  std::vector<Device> out;
  int index = 0;
  for (const Core& core : topo.cores) {
    for (int cpu : core.cpus) {
      const int n = index++;
      if (opts.reserved_cpus.Contains(cpu)) continue;
      Device d;
      d.name = absl::StrFormat("cpudev%03d", n);
      if (core.numa != kNone) SetNuma(d.attributes, core.numa);
      if (core.package != kNone) d.attributes[kSocketId] = int64_t{core.package};
      d.attributes[kSmtEnabled] = smt;
      if (core.l3 != kNone) d.attributes[kCacheL3Id] = int64_t{core.l3};
      d.attributes[kCoreType] = CoreTypeValue(core.type);
      d.attributes[kCoreId] = int64_t{core.os_id};  // sysfs core_id: unique per socket
      d.attributes[kCpuId] = int64_t{cpu};
      out.push_back(std::move(d));
    }
  }
  return out;
}

std::vector<Device> GroupedCpuDevices(const Topology& topo, const PublishOptions& opts, bool smt) {
  std::vector<Device> out;
  switch (opts.group_by) {
    case GroupBy::kNuma:
      for (const topology::NumaNode& n : topo.numa_nodes) {
        const CpuSet usable = n.cpus - opts.reserved_cpus;
        if (usable.Empty()) continue;
        out.push_back(GroupDevice(topo, absl::StrFormat("cpudevnuma%03d", n.id), usable, smt));
      }
      break;
    case GroupBy::kSocket:
      for (const topology::Package& p : topo.packages) {
        const CpuSet usable = p.cpus - opts.reserved_cpus;
        if (usable.Empty()) continue;
        out.push_back(GroupDevice(topo, absl::StrFormat("cpudevsocket%03d", p.id), usable, smt));
      }
      break;
    case GroupBy::kMachine: {
      const CpuSet usable = topo.online - opts.reserved_cpus;
      if (!usable.Empty()) out.push_back(GroupDevice(topo, "cpudevmachine", usable, smt));
      break;
    }
  }
  return out;
}

}  // namespace

std::map<std::string, CpuSet> CpuDeviceCpus(const Topology& topo, const PublishOptions& opts) {
  std::map<std::string, CpuSet> out;
  if (opts.cpu_mode == CpuDeviceMode::kIndividual) {
    int index = 0;
    for (const Core& core : topo.cores) {
      for (int cpu : core.cpus) {
        const int n = index++;
        if (!opts.reserved_cpus.Contains(cpu)) out[absl::StrFormat("cpudev%03d", n)] = CpuSet{cpu};
      }
    }
    return out;
  }
  switch (opts.group_by) {
    case GroupBy::kNuma:
      for (const topology::NumaNode& n : topo.numa_nodes) {
        const CpuSet usable = n.cpus - opts.reserved_cpus;
        if (!usable.Empty()) out[absl::StrFormat("cpudevnuma%03d", n.id)] = usable;
      }
      break;
    case GroupBy::kSocket:
      for (const topology::Package& p : topo.packages) {
        const CpuSet usable = p.cpus - opts.reserved_cpus;
        if (!usable.Empty()) out[absl::StrFormat("cpudevsocket%03d", p.id)] = usable;
      }
      break;
    case GroupBy::kMachine:
      if (const CpuSet usable = topo.online - opts.reserved_cpus; !usable.Empty()) {
        out["cpudevmachine"] = usable;
      }
      break;
  }
  return out;
}

namespace {

Device GpuDevice(const topology::Gpu& g) {
  Device d;
  d.name = GpuDeviceName(g);
  d.attributes["type"] = std::string("gpu");
  d.attributes[kPciBusId] = g.pci_bus_id;
  if (!g.pcie_root.empty()) d.attributes[kPcieRoot] = g.pcie_root;
  if (g.numa != kNone) d.attributes[kNumaNode] = int64_t{g.numa};
  d.attributes["vendorID"] = absl::StrFormat("0x%04x", g.vendor_id);
  d.attributes["deviceID"] = absl::StrFormat("0x%04x", g.device_id);
  if (!g.vendor_name.empty()) d.attributes["vendor"] = Truncate(g.vendor_name);
  const std::string product = !g.model.empty() ? g.model : g.device_name;
  if (!product.empty()) d.attributes["productName"] = Truncate(product);
  if (!g.uuid.empty()) d.attributes["uuid"] = Truncate(g.uuid);
  if (g.memory_bytes > 0) d.capacity["memory"] = Capacity{std::to_string(g.memory_bytes), {}};
  return d;
}

}  // namespace

absl::StatusOr<CpuDeviceMode> ParseCpuDeviceMode(const std::string& s) {
  if (s == "grouped") return CpuDeviceMode::kGrouped;
  if (s == "individual") return CpuDeviceMode::kIndividual;
  return absl::InvalidArgumentError(
      absl::StrCat("invalid CPU device mode \"", s, "\" (want grouped or individual)"));
}

absl::StatusOr<GroupBy> ParseGroupBy(const std::string& s) {
  if (s == "numa" || s == "numanode") return GroupBy::kNuma;
  if (s == "socket") return GroupBy::kSocket;
  if (s == "machine") return GroupBy::kMachine;
  return absl::InvalidArgumentError(
      absl::StrCat("invalid group-by \"", s, "\" (want numa, socket or machine)"));
}

const char* CpuDeviceModeName(CpuDeviceMode m) {
  return m == CpuDeviceMode::kGrouped ? "grouped" : "individual";
}

const char* GroupByName(GroupBy g) {
  switch (g) {
    case GroupBy::kSocket:
      return "socket";
    case GroupBy::kMachine:
      return "machine";
    case GroupBy::kNuma:
      break;
  }
  return "numa";
}

absl::Status ValidateOptions(const PublishOptions& opts, const topology::Topology& topo) {
  if (!IsDnsSubdomain(opts.node_name)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid node name \"", opts.node_name,
                                                   "\": must be a DNS subdomain (lower case)"));
  }
  for (const std::string* driver : {&opts.cpu_driver, &opts.gpu_driver}) {
    if (!IsDriverName(*driver)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid driver name \"", *driver,
                       "\": must be a lower-case DNS subdomain of at most 63 "
                       "characters"));
    }
  }
  if (opts.cpu_driver == opts.gpu_driver) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU and GPU driver names must differ, both are \"", opts.cpu_driver, "\""));
  }
  const CpuSet unknown = opts.reserved_cpus - topo.online - topo.offline;
  if (!unknown.Empty()) {
    return absl::InvalidArgumentError(absl::StrCat("reserved CPUs ", unknown.ToString(),
                                                   " do not exist on this node (CPUs ",
                                                   (topo.online | topo.offline).ToString(), ")"));
  }
  return absl::OkStatus();
}

std::string GpuDeviceName(const topology::Gpu& gpu) {
  std::string name = "gpu-" + gpu.pci_bus_id;
  std::replace_if(
      name.begin(), name.end(), [](char c) { return c == ':' || c == '.'; }, '-');
  return name;
}

bool IsBmcDisplay(const topology::Gpu& gpu) {
  // ASPEED and Matrox display controllers sit on server BMCs; nobody schedules work on them.
  return gpu.vendor_id == 0x1a03 || gpu.vendor_id == 0x102b;
}

std::vector<Pool> BuildPools(const Topology& topo, const PublishOptions& opts) {
  std::vector<Pool> pools;
  const bool smt = topo.MaxThreadsPerCore() > 1;
  Pool cpu{opts.cpu_driver, opts.node_name, opts.node_name, {}};
  cpu.devices = opts.cpu_mode == CpuDeviceMode::kIndividual ? IndividualCpuDevices(topo, opts, smt)
                                                            : GroupedCpuDevices(topo, opts, smt);
  pools.push_back(std::move(cpu));

  if (opts.gpus) {
    Pool gpu{opts.gpu_driver, opts.node_name, opts.node_name, {}};
    bool any = false;
    for (const topology::Gpu& g : topo.gpus) {
      if (IsBmcDisplay(g)) continue;
      any = true;
      if (opts.unhealthy_gpus.count(g.pci_bus_id)) continue;
      gpu.devices.push_back(GpuDevice(g));
    }
    if (any) pools.push_back(std::move(gpu));
  }
  return pools;
}

}  // namespace topodra::publish
