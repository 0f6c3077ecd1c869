#include "driver/publish/device_builder.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "driver/publish/names.h"
#include "driver/publish/slice_features.h"

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

// Only whole CPUs, at least one: the consumed capacity is the CPU count of the claim. The API
// server wants min + step <= value of a range (k8s-api-cdi.md §1.6), so a group of one CPU says
// the same with the one value it allows.
RequestPolicy WholeCpus(int cpus) {
  if (cpus <= 1) return RequestPolicy{"1", {"1"}, std::nullopt};
  return RequestPolicy{"1", {}, ValidRange{"1", std::nullopt, "1"}};
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
  d.capacity[kCpuCapacity] = Capacity{std::to_string(cpus.Size()), WholeCpus(cpus.Size())};
  return d;
}

// Strict RFC 3339 ("2025-03-01T09:00:00Z", "2025-03-01T10:00:00.5+01:00") in the canonical
// form the API server stores a metav1.Time in: UTC, whole seconds, "Z". nullopt when malformed.
std::optional<std::string> CanonicalTime(std::string_view s) {
  using namespace std::chrono;
  size_t pos = 0;
  auto digits = [&](size_t n, int* out) {
    if (pos + n > s.size()) return false;
    int v = 0;
    for (size_t i = 0; i < n; ++i) {
      const char c = s[pos + i];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    pos += n;
    *out = v;
    return true;
  };
  auto literal = [&](std::string_view options) {
    if (pos >= s.size() || options.find(s[pos]) == std::string_view::npos) return false;
    ++pos;
    return true;
  };
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  if (!digits(4, &y) || !literal("-") || !digits(2, &mo) || !literal("-") || !digits(2, &d) ||
      !literal("Tt") || !digits(2, &h) || !literal(":") || !digits(2, &mi) || !literal(":") ||
      !digits(2, &sec)) {
    return std::nullopt;
  }
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    const size_t first = pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
    if (pos == first) return std::nullopt;  // fractions are dropped, as the server does
  }
  int offset_minutes = 0;
  if (literal("Zz")) {
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    const int sign = s[pos++] == '-' ? -1 : 1;
    int oh = 0, om = 0;
    if (!digits(2, &oh) || !literal(":") || !digits(2, &om) || oh > 23 || om > 59) {
      return std::nullopt;
    }
    offset_minutes = sign * (oh * 60 + om);
  } else {
    return std::nullopt;
  }
  const year_month_day date{year{y}, month{static_cast<unsigned>(mo)},
                            day{static_cast<unsigned>(d)}};
  if (pos != s.size() || !date.ok() || h > 23 || mi > 59 || sec > 59) return std::nullopt;
  const sys_seconds t =
      sys_days{date} + hours{h} + minutes{mi} + seconds{sec} - minutes{offset_minutes};
  const sys_days day_part = floor<days>(t);
  const year_month_day utc{day_part};
  const hh_mm_ss<seconds> clock{t - day_part};
  if (utc.year() < year{0} || utc.year() > year{9999}) return std::nullopt;
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02dZ", static_cast<int>(utc.year()),
                         static_cast<unsigned>(utc.month()), static_cast<unsigned>(utc.day()),
                         clock.hours().count(), clock.minutes().count(), clock.seconds().count());
}

// A reservation as BuildPools applies it: the CPUs and GPUs it really gets (a CPU or GPU two
// reservations name goes to the first in device-name order; ValidateOptions rejects that).
struct Held {
  const ReservedDevices* reservation = nullptr;
  std::string device;          // its grouped-mode CPU device
  bool own_cpu_device = true;  // false when an earlier reservation has the same device name
  CpuSet cpus;                 // online, not --reserved-cpus
  std::set<std::string> gpus;
  nlohmann::json taints;  // null when reservation_taints is off
};

std::vector<Held> HeldDevices(const Topology& topo, const PublishOptions& opts) {
  std::vector<Held> out;
  for (const ReservedDevices& r : opts.reservations) {
    Held h;
    h.reservation = &r;
    h.device = ReservationCpuDeviceName(r.name);
    if (opts.reservation_taints) {
      nlohmann::json taint{
          {"key", kReservationTaintKey}, {"value", r.name}, {"effect", "NoSchedule"}};
      // The server fills in timeAdded when absent; sending the reservation's own time keeps
      // it stable across restarts and what the server stores equal to what was sent.
      if (std::optional<std::string> t = CanonicalTime(r.since)) taint["timeAdded"] = *t;
      h.taints = nlohmann::json::array({std::move(taint)});
    }
    out.push_back(std::move(h));
  }
  std::stable_sort(out.begin(), out.end(), [](const Held& a, const Held& b) {
    return std::tie(a.device, a.reservation->name) < std::tie(b.device, b.reservation->name);
  });
  CpuSet taken;
  std::set<std::string> taken_gpus;
  for (size_t i = 0; i < out.size(); ++i) {
    Held& h = out[i];
    h.own_cpu_device = i == 0 || out[i - 1].device != h.device;
    h.cpus = (h.reservation->cpus & topo.online) - opts.reserved_cpus - taken;
    taken |= h.cpus;
    for (const std::string& gpu : h.reservation->gpus) {
      if (taken_gpus.insert(gpu).second) h.gpus.insert(gpu);
    }
  }
  return out;
}

// Every CPU any reservation names: they leave the group devices even when another reservation
// got them first or they are offline.
CpuSet AllHeldCpus(const PublishOptions& opts) {
  CpuSet all;
  for (const ReservedDevices& r : opts.reservations) all |= r.cpus;
  return all;
}

void MarkHeld(Device& d, const Held& h) {
  d.attributes[kReservationAttribute] = h.reservation->name;
  if (!h.taints.is_null()) d.extra["taints"] = h.taints;
}

// What a CPU device adds behind alpha gates, after its other attributes: the PCIe roots near its
// CPUs as a list (cut to the values left of the device's budget, at least one kept), and the
// mapping to the node's `cpu` allocatable (addendum §4.2, §4.3: the shape dra-driver-cpu uses).
void AddCpuGatedFields(Device& d, const Topology& topo, const CpuSet& cpus,
                       const PublishOptions& opts, bool grouped) {
  if (opts.pcie_root_lists) {
    std::vector<std::string> roots = topo.PcieRootsNear(cpus);
    std::erase_if(roots, [](const std::string& r) { return r.size() > 64; });
    int used = 0;
    for (const auto& [k, v] : d.attributes) used += ValueCount(v);
    const int room = SliceLimits{}.max_attribute_values_per_device - used;
    if (room > 0 && static_cast<int>(roots.size()) > room) roots.resize(static_cast<size_t>(room));
    if (room > 0 && !roots.empty()) d.attributes[kPcieRoot] = StringList{std::move(roots)};
  }
  if (opts.node_allocatable) {
    nlohmann::json mapping =
        grouped ? nlohmann::json{{"capacityKey", kCpuCapacity}, {"capacityMultiplier", "1"}}
                : nlohmann::json{{"deviceMultiplier", "1"}};
    d.extra[kNodeAllocatableResources] = {{"cpu", {{"mapping", std::move(mapping)}}}};
  }
}

// One grouped-mode CPU device before it becomes a Device: its name, its CPUs and, for a
// reservation's device, the reservation.
struct CpuGroup {
  std::string name;
  CpuSet cpus;
  const Held* held = nullptr;
};

std::vector<CpuGroup> CpuGroups(const Topology& topo, const PublishOptions& opts,
                                const std::vector<Held>& held) {
  std::vector<CpuGroup> out;
  const CpuSet unusable = opts.reserved_cpus | AllHeldCpus(opts);
  switch (opts.group_by) {
    case GroupBy::kNuma:
      for (const topology::NumaNode& n : topo.numa_nodes) {
        out.push_back({absl::StrFormat("cpudevnuma%03d", n.id), n.cpus - unusable});
      }
      break;
    case GroupBy::kSocket:
      for (const topology::Package& p : topo.packages) {
        out.push_back({absl::StrFormat("cpudevsocket%03d", p.id), p.cpus - unusable});
      }
      break;
    case GroupBy::kMachine:
      out.push_back({"cpudevmachine", topo.online - unusable});
      break;
  }
  for (const Held& h : held) {
    if (h.own_cpu_device) out.push_back({h.device, h.cpus, &h});
  }
  // A group (or reservation) with no usable CPU publishes nothing.
  std::erase_if(out, [](const CpuGroup& g) { return g.cpus.Empty(); });
  return out;
}

// Individual mode: every online CPU numbered in topology order (SMT siblings adjacent), so names
// stay stable when --reserved-cpus or reservations change.
template <typename F>
void ForEachIndividualCpu(const Topology& topo, const PublishOptions& opts, F f) {
  int index = 0;
  for (const Core& core : topo.cores) {
    for (int cpu : core.cpus) {
      const int n = index++;
      if (!opts.reserved_cpus.Contains(cpu)) f(IndividualCpuDeviceName(n), core, cpu);
    }
  }
}

// Individual mode's attribute keys in the order the map sorts them: a device gets each one
// copied (no strlen) and put at the map's end (no search). At 1024 CPUs, inserting them as
// C strings one by one was most of building the pool.
struct IndividualKeys {
  const std::string cache_l3 = kCacheL3Id, core_id = kCoreId, core_type = kCoreType,
                    cpu_id = kCpuId, numa_id = kNumaNodeId, smt = kSmtEnabled, socket = kSocketId,
                    net_numa = kNetNumaNode, numa = kNumaNode;
};

Attributes IndividualAttributes(const IndividualKeys& k, const Core& core, int cpu, bool smt) {
  Attributes a;
  auto add = [&a](const std::string& key, AttributeValue v) {
    a.emplace_hint(a.end(), key, std::move(v));
  };
  if (core.l3 != kNone) add(k.cache_l3, int64_t{core.l3});
  add(k.core_id, int64_t{core.os_id});  // sysfs core_id: unique per socket
  add(k.core_type, CoreTypeValue(core.type));
  add(k.cpu_id, int64_t{cpu});
  if (core.numa != kNone) add(k.numa_id, int64_t{core.numa});
  add(k.smt, smt);
  if (core.package != kNone) add(k.socket, int64_t{core.package});
  if (core.numa != kNone) {
    add(k.net_numa, int64_t{core.numa});
    add(k.numa, int64_t{core.numa});
  }
  return a;
}

std::vector<Device> IndividualCpuDevices(const Topology& topo, const PublishOptions& opts,
                                         const std::vector<Held>& held, bool smt) {
  std::map<int, const Held*> holder;
  for (const Held& h : held) {
    for (int cpu : h.cpus) holder.emplace(cpu, &h);
  }
  const IndividualKeys keys;
  const bool gated = opts.pcie_root_lists || opts.node_allocatable;
  std::vector<Device> out;
  out.reserve(static_cast<size_t>(topo.online.Size()));
  ForEachIndividualCpu(topo, opts, [&](std::string name, const Core& core, int cpu) {
    Device& d = out.emplace_back();
    d.name = std::move(name);
    d.attributes = IndividualAttributes(keys, core, cpu, smt);
    if (auto it = holder.find(cpu); it != holder.end()) MarkHeld(d, *it->second);
    if (gated) AddCpuGatedFields(d, topo, CpuSet{cpu}, opts, /*grouped=*/false);
  });
  return out;
}

std::vector<Device> GroupedCpuDevices(const Topology& topo, const PublishOptions& opts,
                                      const std::vector<Held>& held, bool smt) {
  std::vector<Device> out;
  for (CpuGroup& g : CpuGroups(topo, opts, held)) {
    Device d = GroupDevice(topo, std::move(g.name), g.cpus, smt);
    if (g.held != nullptr) MarkHeld(d, *g.held);
    AddCpuGatedFields(d, topo, g.cpus, opts, /*grouped=*/true);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

std::map<std::string, CpuSet> CpuDeviceCpus(const Topology& topo, const PublishOptions& opts) {
  std::map<std::string, CpuSet> out;
  if (opts.cpu_mode == CpuDeviceMode::kIndividual) {
    // In name order up to cpudev999: mostly no search.
    ForEachIndividualCpu(topo, opts, [&](std::string name, const Core&, int cpu) {
      out.emplace_hint(out.end(), std::move(name), CpuSet{cpu});
    });
    return out;
  }
  const std::vector<Held> held = HeldDevices(topo, opts);
  for (CpuGroup& g : CpuGroups(topo, opts, held)) out[std::move(g.name)] = std::move(g.cpus);
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

namespace {

absl::Status ValidateReservations(const PublishOptions& opts, const Topology& topo) {
  const CpuSet existing = topo.online | topo.offline;
  std::map<std::string, const ReservedDevices*> by_device;
  for (size_t i = 0; i < opts.reservations.size(); ++i) {
    const ReservedDevices& r = opts.reservations[i];
    // The name becomes a taint value (at most 63 characters) and a string attribute.
    if (r.name.size() > 63 || !IsDnsSubdomain(r.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid reservation name \"", r.name,
                       "\": must be a DNS subdomain of at most 63 characters"));
    }
    const std::string where = absl::StrCat("reservation \"", r.name, "\": ");
    if (!r.since.empty() && !CanonicalTime(r.since)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "invalid time \"", r.since, "\": want RFC 3339"));
    }
    if (const CpuSet unknown = r.cpus - existing; !unknown.Empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "CPUs ", unknown.ToString(),
                                                     " do not exist on this node (CPUs ",
                                                     existing.ToString(), ")"));
    }
    for (size_t j = 0; j < i; ++j) {
      const ReservedDevices& o = opts.reservations[j];
      if (o.name == r.name) {
        return absl::InvalidArgumentError(
            absl::StrCat("two reservations are named \"", r.name, "\""));
      }
      const std::string both =
          absl::StrCat("reservations \"", o.name, "\" and \"", r.name, "\" both hold ");
      if (const CpuSet shared = o.cpus & r.cpus; !shared.Empty()) {
        return absl::InvalidArgumentError(absl::StrCat(both, "CPUs ", shared.ToString()));
      }
      for (const std::string& gpu : r.gpus) {
        if (o.gpus.count(gpu))
          return absl::InvalidArgumentError(absl::StrCat(both, "GPU \"", gpu, "\""));
      }
    }
    if (opts.cpu_mode == CpuDeviceMode::kGrouped && !r.cpus.Empty()) {
      const std::string device = ReservationCpuDeviceName(r.name);
      auto [it, fresh] = by_device.emplace(device, &r);
      if (!fresh) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reservations \"", it->second->name, "\" and \"", r.name,
            "\" would publish the same CPU device \"", device, "\" ('.' becomes '-')"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

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
  return ValidateReservations(opts, topo);
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
  const std::vector<Held> held = HeldDevices(topo, opts);
  Pool cpu{opts.cpu_driver, opts.node_name, opts.node_name, {}};
  cpu.devices = opts.cpu_mode == CpuDeviceMode::kIndividual
                    ? IndividualCpuDevices(topo, opts, held, smt)
                    : GroupedCpuDevices(topo, opts, held, smt);
  pools.push_back(std::move(cpu));

  std::map<std::string, const Held*> gpu_holder;
  for (const Held& h : held) {
    for (const std::string& gpu : h.gpus) gpu_holder.emplace(gpu, &h);
  }

  if (opts.gpus) {
    Pool gpu{opts.gpu_driver, opts.node_name, opts.node_name, {}};
    bool any = false;
    for (const topology::Gpu& g : topo.gpus) {
      if (IsBmcDisplay(g)) continue;
      any = true;
      Device d = GpuDevice(g);
      if (auto it = gpu_holder.find(g.pci_bus_id); it != gpu_holder.end()) MarkHeld(d, *it->second);
      if (auto it = opts.unhealthy_gpus.find(g.pci_bus_id); it != opts.unhealthy_gpus.end()) {
        // No timeAdded: the server sets it once, and an unchanged cause is an unchanged taint.
        nlohmann::json taint{
            {"key", kUnhealthyTaintKey}, {"value", it->second}, {"effect", "NoSchedule"}};
        if (!d.extra.contains("taints")) d.extra["taints"] = nlohmann::json::array();
        d.extra["taints"].push_back(std::move(taint));
      }
      gpu.devices.push_back(std::move(d));
    }
    if (any) pools.push_back(std::move(gpu));
  }
  return pools;
}

}  // namespace topodra::publish
