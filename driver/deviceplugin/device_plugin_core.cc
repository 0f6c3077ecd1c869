#include "driver/deviceplugin/device_plugin_core.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status.h"
#include "driver/allocation/cpu_allocator.h"
#include "driver/allocation/gpu_allocator.h"
#include "driver/prepare/identifiers.h"

namespace topodra::deviceplugin {
namespace {

using json = nlohmann::json;

// Device ids come from the kubelet: a message quotes at most a bounded prefix of one.
std::string Quote(const std::string& s) { return prepare::ShowValue(s); }

// A CPU id as the device plugin spells it: decimal, no sign, no leading zeros, in range.
std::optional<int> ParseCpuId(const std::string& id) {
  if (id.empty() || id.size() > 5 || (id.size() > 1 && id[0] == '0')) return std::nullopt;
  int v = 0;
  const auto [p, ec] = std::from_chars(id.data(), id.data() + id.size(), v);
  if (ec != std::errc() || p != id.data() + id.size() || v < 0 || v > CpuSet::kMaxCpuId) {
    return std::nullopt;
  }
  return v;
}

// The DRA claim holding `id` (a CPU id or PCI bus id), if any.
const state::Allocation* DraHolder(const ResourceSetup& setup, const state::State& held,
                                   const std::string& id) {
  std::optional<std::string> owner;
  if (setup.kind == ResourceKind::kCpu) {
    if (std::optional<int> cpu = ParseCpuId(id)) owner = held.HolderOfCpu(*cpu);
  } else {
    owner = held.HolderOfGpu(id);
  }
  if (!owner) return nullptr;
  const state::Allocation* a = held.Find(*owner);
  return a != nullptr && a->kind == state::AllocationKind::kDraClaim ? a : nullptr;
}

// The Reservation holding `id` for its owners' DRA claims, if any: device-plugin pods are never
// owners. A device that a device-plugin pod already holds (a preAllocation waits for it) stays
// that pod's until released.
const state::Reservation* ReservationOf(const ResourceSetup& setup, const state::State& held,
                                        const std::string& id) {
  std::optional<std::string> uid, owner;
  if (setup.kind == ResourceKind::kCpu) {
    std::optional<int> cpu = ParseCpuId(id);
    if (!cpu) return nullptr;
    uid = held.ReservationOfCpu(*cpu);
    owner = held.HolderOfCpu(*cpu);
  } else {
    uid = held.ReservationOfGpu(id);
    owner = held.HolderOfGpu(id);
  }
  if (!uid) return nullptr;
  if (owner) {
    const state::Allocation* a = held.Find(*owner);
    if (a != nullptr && a->kind == state::AllocationKind::kDevicePlugin) return nullptr;
  }
  return held.FindReservation(*uid);
}

std::string ReservedMessage(const state::Reservation& r) {
  return absl::StrCat("is held by Reservation \"", r.name, "\" for the DRA claims of its owners");
}

bool CpuLess(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

void SortIds(const ResourceSetup& setup, std::vector<std::string>* ids) {
  if (setup.kind == ResourceKind::kCpu) {
    std::sort(ids->begin(), ids->end(), CpuLess);
  } else {
    std::sort(ids->begin(), ids->end());
  }
}

// Known = listed by ListDevices; healthy = listed Healthy. Unknown and malformed ids get an
// InvalidArgument naming the id.
absl::Status CheckKnown(const ResourceSetup& setup, const topology::Topology& topo,
                        const std::string& id) {
  if (setup.kind == ResourceKind::kCpu) {
    std::optional<int> cpu = ParseCpuId(id);
    if (!cpu) {
      return absl::InvalidArgumentError(absl::StrCat(setup.resource, ": device id ", Quote(id),
                                                     " is not a CPU id (want a decimal number)"));
    }
    if (setup.reserved.Contains(*cpu)) {
      return absl::InvalidArgumentError(absl::StrCat(setup.resource, ": CPU ", id,
                                                     " is reserved (--reserved-cpus ",
                                                     setup.reserved.ToString(), ")"));
    }
    if (!topo.online.Contains(*cpu) && !topo.offline.Contains(*cpu)) {
      return absl::InvalidArgumentError(absl::StrCat(setup.resource, ": CPU ", id,
                                                     " does not exist on this node (CPUs ",
                                                     (topo.online | topo.offline).ToString(), ")"));
    }
    return absl::OkStatus();
  }
  if (!setup.gpus.contains(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        setup.resource, ": unknown GPU ", Quote(id), " (this node serves ",
        setup.gpus.empty()
            ? std::string("none")
            : absl::StrJoin(setup.gpus, ", ",
                            [](std::string* out, const auto& kv) { out->append(kv.first); }),
        ")"));
  }
  return absl::OkStatus();
}

std::string HexDigest(const std::string& text) {
  // FNV-1a: stable across builds and platforms, which std::hash is not.
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[i] = kHex[h & 0xf];
  return out;
}

std::string AllocationId(const std::string& owner) { return owner.substr(owner.rfind('/') + 1); }

std::string EnvName(const std::string& resource) {
  // "topodra.io/gpu" -> "TOPODRA_GPU": the name part only, so a renamed domain keeps the name.
  std::string name = resource.substr(resource.rfind('/') + 1);
  std::string out = "TOPODRA_";
  for (char c : name) {
    out.push_back(std::isalnum(static_cast<unsigned char>(c))
                      ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
                      : '_');
  }
  return out;
}

}  // namespace

std::string AllocationOwner(const std::string& resource, std::vector<std::string> ids) {
  std::sort(ids.begin(), ids.end());
  return absl::StrCat(resource, "/",
                      HexDigest(absl::StrCat(resource, "\n", absl::StrJoin(ids, "\n"))));
}

bool IsAllocationOf(const std::string& resource, const state::Allocation& a) {
  return a.kind == state::AllocationKind::kDevicePlugin &&
         absl::StartsWith(a.owner, resource + "/") &&
         a.owner.find('/', resource.size() + 1) == std::string::npos;
}

std::vector<std::string> DeviceIds(const ResourceSetup& setup, const state::Allocation& a) {
  std::vector<std::string> ids;
  if (setup.kind == ResourceKind::kCpu) {
    for (int cpu : a.cpus) ids.push_back(std::to_string(cpu));
  } else {
    ids.assign(a.gpus.begin(), a.gpus.end());
  }
  SortIds(setup, &ids);
  return ids;
}

std::string DpCdiFileName(const std::string& resource, const std::string& owner,
                          const std::string& marker) {
  return absl::StrCat(absl::StrReplaceAll(resource, {{"/", "_"}}), "-dp_", AllocationId(owner),
                      marker.empty() ? "" : absl::StrCat("_i", marker), ".json");
}

bool IsDpCdiFileOf(const std::string& resource, const std::string& file_name) {
  const std::string prefix = absl::StrCat(absl::StrReplaceAll(resource, {{"/", "_"}}), "-dp_");
  return absl::StartsWith(file_name, prefix) && absl::EndsWith(file_name, ".json") &&
         file_name.size() > prefix.size() + 5;
}

std::vector<Device> ListDevices(const ResourceSetup& setup, const topology::Topology& topo,
                                const state::State& held) {
  std::vector<Device> out;
  auto numa = [](int node) {
    return node == topology::kNone ? std::vector<int>{} : std::vector<int>{node};
  };
  if (setup.kind == ResourceKind::kCpu) {
    const CpuSet dra_held = [&] {
      CpuSet s;
      for (const auto& [owner, a] : held.allocations()) {
        if (a.kind == state::AllocationKind::kDraClaim) s |= a.cpus;
      }
      return s;
    }();
    for (int cpu : (topo.online | topo.offline) - setup.reserved) {
      Device d;
      d.id = std::to_string(cpu);
      d.healthy = topo.online.Contains(cpu) && !dra_held.Contains(cpu) &&
                  ReservationOf(setup, held, d.id) == nullptr;
      d.numa_nodes = numa(topo.NumaOf(cpu));
      out.push_back(std::move(d));
    }
    return out;
  }
  std::set<std::string> listed;
  for (const topology::Gpu& gpu : topo.gpus) {
    if (!setup.gpus.contains(gpu.pci_bus_id)) continue;
    Device d;
    d.id = gpu.pci_bus_id;
    d.healthy = !setup.unhealthy.contains(gpu.pci_bus_id) &&
                DraHolder(setup, held, gpu.pci_bus_id) == nullptr &&
                ReservationOf(setup, held, gpu.pci_bus_id) == nullptr;
    d.numa_nodes = numa(gpu.numa);
    listed.insert(d.id);
    out.push_back(std::move(d));
  }
  // A GPU gone from the machine while a pod holds it: still listed, as unhealthy, so the kubelet
  // reports it on the pod instead of silently dropping it.
  for (const auto& [owner, a] : held.allocations()) {
    if (!IsAllocationOf(setup.resource, a)) continue;
    for (const std::string& gpu : a.gpus) {
      if (listed.insert(gpu).second) out.push_back(Device{gpu, false, {}});
    }
  }
  std::sort(out.begin(), out.end(), [](const Device& a, const Device& b) { return a.id < b.id; });
  return out;
}

absl::StatusOr<std::vector<std::string>> PreferredAllocation(
    const ResourceSetup& setup, const topology::Topology& topo, const state::State& held,
    const std::vector<std::string>& available, const std::vector<std::string>& must_include,
    int size) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(setup.resource, ": allocation_size ", size, " must be at least 1"));
  }
  for (const std::string& id : must_include) {
    if (absl::Status st = CheckKnown(setup, topo, id); !st.ok()) return st;
    if (const state::Allocation* a = DraHolder(setup, held, id)) {
      return absl::FailedPreconditionError(absl::StrCat(setup.resource, ": must-include device ",
                                                        Quote(id), " is held by ",
                                                        state::Describe(*a)));
    }
    if (const state::Reservation* r = ReservationOf(setup, held, id)) {
      return absl::FailedPreconditionError(absl::StrCat(setup.resource, ": must-include device ",
                                                        Quote(id), " ", ReservedMessage(*r)));
    }
    if (auto u = setup.unhealthy.find(id); u != setup.unhealthy.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          setup.resource, ": must-include GPU ", Quote(id), " is unhealthy (", u->second, ")"));
    }
  }
  std::vector<std::string> offered;
  for (const std::string& id : available) {
    if (!CheckKnown(setup, topo, id).ok()) continue;  // someone else's device: not ours to pick
    if (DraHolder(setup, held, id) != nullptr) continue;
    if (ReservationOf(setup, held, id) != nullptr) continue;
    if (setup.unhealthy.contains(id)) continue;
    offered.push_back(id);
  }
  std::vector<std::string> out;
  if (setup.kind == ResourceKind::kGpu) {
    allocation::GpuRequest req;
    req.count = size;
    req.available = offered;
    req.must_include = must_include;
    absl::StatusOr<std::vector<std::string>> gpus = allocation::PreferGpus(topo, req);
    if (!gpus.ok()) {
      return absl::Status(gpus.status().code(),
                          absl::StrCat(setup.resource, ": ", Message(gpus.status())));
    }
    out = *std::move(gpus);
  } else {
    allocation::CpuRequest req;
    req.count = size;
    for (const std::string& id : offered) req.available.Add(*ParseCpuId(id));
    for (const std::string& id : must_include) req.must_include.Add(*ParseCpuId(id));
    absl::StatusOr<CpuSet> cpus = allocation::AllocateCpus(topo, req);
    if (!cpus.ok()) {
      return absl::Status(cpus.status().code(),
                          absl::StrCat(setup.resource, ": ", Message(cpus.status())));
    }
    for (int cpu : *cpus) out.push_back(std::to_string(cpu));
  }
  SortIds(setup, &out);
  return out;
}

json GrantToJson(const ContainerGrant& grant) {
  json devices = json::array();
  for (const DeviceNodeGrant& d : grant.devices) {
    devices.push_back({{"containerPath", d.container_path},
                       {"hostPath", d.host_path},
                       {"permissions", d.permissions}});
  }
  return {{"envs", grant.envs}, {"devices", devices}, {"cdiDevices", grant.cdi_devices}};
}

absl::StatusOr<ContainerGrant> GrantFromJson(const json& j) {
  ContainerGrant g;
  try {
    g.envs = j.at("envs").get<std::map<std::string, std::string>>();
    for (const json& d : j.at("devices")) {
      g.devices.push_back({d.at("containerPath").get<std::string>(),
                           d.at("hostPath").get<std::string>(),
                           d.at("permissions").get<std::string>()});
    }
    g.cdi_devices = j.at("cdiDevices").get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat("stored device-plugin answer: ", e.what()));
  }
  return g;
}

absl::StatusOr<AllocatePlan> PlanAllocate(const ResourceSetup& setup,
                                          const topology::Topology& topo, const state::State& held,
                                          const std::vector<std::string>& ids) {
  if (ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(setup.resource, ": Allocate without device ids"));
  }
  std::set<std::string> seen;
  for (const std::string& id : ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(setup.resource, ": device ", Quote(id), " is listed twice"));
    }
    if (absl::Status st = CheckKnown(setup, topo, id); !st.ok()) return st;
    if (setup.kind == ResourceKind::kCpu && !topo.online.Contains(*ParseCpuId(id))) {
      return absl::FailedPreconditionError(
          absl::StrCat(setup.resource, ": CPU ", id, " is offline (unhealthy)"));
    }
    if (setup.kind == ResourceKind::kGpu &&
        std::none_of(topo.gpus.begin(), topo.gpus.end(),
                     [&](const topology::Gpu& g) { return g.pci_bus_id == id; })) {
      return absl::FailedPreconditionError(
          absl::StrCat(setup.resource, ": GPU ", Quote(id), " is gone from the node (unhealthy)"));
    }
    if (auto u = setup.unhealthy.find(id); u != setup.unhealthy.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(setup.resource, ": GPU ", Quote(id), " is unhealthy (", u->second, ")"));
    }
    if (const state::Allocation* a = DraHolder(setup, held, id)) {
      return absl::FailedPreconditionError(absl::StrCat(setup.resource, ": device ", Quote(id),
                                                        " is held by ", state::Describe(*a),
                                                        " (prepared through DRA)"));
    }
    if (const state::Reservation* r = ReservationOf(setup, held, id)) {
      return absl::FailedPreconditionError(
          absl::StrCat(setup.resource, ": device ", Quote(id), " ", ReservedMessage(*r)));
    }
  }
  std::vector<std::string> sorted = ids;
  SortIds(setup, &sorted);

  AllocatePlan plan;
  state::Allocation& a = plan.allocation;
  a.kind = state::AllocationKind::kDevicePlugin;
  a.owner = AllocationOwner(setup.resource, sorted);
  a.phase = state::Phase::kPrepared;
  if (setup.kind == ResourceKind::kCpu) {
    for (const std::string& id : sorted) a.cpus.Add(*ParseCpuId(id));
  } else {
    a.gpus.insert(sorted.begin(), sorted.end());
  }

  if (const state::Allocation* existing = held.Find(a.owner);
      existing != nullptr && existing->cpus == a.cpus && existing->gpus == a.gpus) {
    absl::StatusOr<ContainerGrant> grant = GrantFromJson(existing->answer.Parse());
    if (!grant.ok()) return grant.status();
    plan.allocation = *existing;
    plan.grant = *std::move(grant);
    plan.replay = true;
    return plan;
  }

  // Earlier device-plugin allocations of these devices give them up.
  std::map<std::string, state::Allocation> shrunk;
  for (const std::string& id : sorted) {
    std::optional<std::string> owner =
        setup.kind == ResourceKind::kCpu ? held.HolderOfCpu(*ParseCpuId(id)) : held.HolderOfGpu(id);
    if (!owner) continue;
    auto it = shrunk.find(*owner);
    if (it == shrunk.end()) it = shrunk.emplace(*owner, *held.Find(*owner)).first;
    if (setup.kind == ResourceKind::kCpu) {
      it->second.cpus.Remove(*ParseCpuId(id));
    } else {
      it->second.gpus.erase(id);
    }
  }
  for (auto& [owner, s] : shrunk) plan.shrunk.push_back(std::move(s));

  const std::string alloc_id = AllocationId(a.owner);
  const std::string env = EnvName(setup.resource);
  cdi::Device device;
  device.name = alloc_id;
  if (setup.kind == ResourceKind::kCpu) {
    const std::string cpus = a.cpus.ToString();
    plan.grant.envs[absl::StrCat(env, "SET")] = cpus;  // TOPODRA_CPUSET
    device.container_edits.env.push_back(absl::StrCat(env, "SET=", cpus));
    if (setup.cpuset_hook) {
      if (absl::Status st = prepare::KeepSharedPool(setup.resource, topo, setup.reserved,
                                                    setup.cpuset_hook->strict_cpu_reservation,
                                                    held.HeldCpus() - a.cpus, a.cpus);
          !st.ok()) {
        return st;
      }
      device.container_edits.hooks.push_back(
          prepare::CpusetHookFor(*setup.cpuset_hook, alloc_id, a.cpus));
    }
  } else {
    const std::string list = absl::StrJoin(sorted, ",");
    plan.grant.envs[env + "S"] = list;  // TOPODRA_GPUS
    device.container_edits.env.push_back(absl::StrCat(env, "S=", list));
    for (const std::string& id : sorted) {
      for (const cdi::DeviceNode& n : setup.gpus.at(id).device_nodes) {
        device.container_edits.device_nodes.push_back(n);
        plan.grant.devices.push_back({n.path, n.host_path.empty() ? n.path : n.host_path,
                                      n.permissions.empty() ? "rw" : n.permissions});
      }
    }
  }
  plan.cdi_spec.kind = setup.resource;
  plan.cdi_spec.devices.push_back(std::move(device));
  plan.cdi_spec.cdi_version = cdi::MinimumVersion(plan.cdi_spec);
  if (absl::Status st = cdi::Validate(plan.cdi_spec); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(setup.resource, ": cannot describe the devices in CDI: ", Message(st)));
  }
  absl::StatusOr<std::string> qualified = cdi::QualifiedName(setup.resource, alloc_id);
  if (!qualified.ok()) return qualified.status();
  plan.grant.cdi_devices.push_back(*qualified);
  plan.cdi_file = DpCdiFileName(setup.resource, a.owner, setup.cdi_marker);
  a.answer = GrantToJson(plan.grant);
  a.cdi = json{{"file", plan.cdi_file}, {"spec", cdi::ToJson(plan.cdi_spec)}};
  return plan;
}

std::vector<std::string> UnusedAllocations(const state::State& held, const std::string& resource,
                                           const std::set<std::string>& assigned) {
  std::vector<std::string> out;
  for (const auto& [owner, a] : held.allocations()) {
    if (!IsAllocationOf(resource, a)) continue;
    bool used = false;
    for (int cpu : a.cpus) used = used || assigned.contains(std::to_string(cpu));
    for (const std::string& gpu : a.gpus) used = used || assigned.contains(gpu);
    if (!used) out.push_back(owner);
  }
  return out;
}

}  // namespace topodra::deviceplugin
