#include "driver/reservation/placement.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "driver/allocation/cpu_allocator.h"
#include "driver/allocation/gpu_allocator.h"

namespace topodra::reservation {
namespace {

std::string Text(const CpuSet& s) { return s.Empty() ? std::string("none") : s.ToString(); }

absl::StatusOr<CpuSet> PlaceCpus(const CpuWant& want, bool pre_allocation,
                                 const topology::Topology& topo, const NodeView& node) {
  CpuSet scope = topo.online;
  std::string where = "the node";
  if (want.numa_node) {
    if (topo.FindNuma(*want.numa_node) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("spec.cpus.numaNode: NUMA node ", *want.numa_node, " does not exist"));
    }
    scope &= topo.CpusOfNuma(*want.numa_node);
    where = absl::StrCat("NUMA node ", *want.numa_node);
  }
  if (want.socket) {
    if (topo.FindPackage(*want.socket) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("spec.cpus.socket: socket ", *want.socket, " does not exist"));
    }
    scope &= topo.CpusOfPackage(*want.socket);
    where = want.numa_node ? absl::StrCat(where, " of socket ", *want.socket)
                           : absl::StrCat("socket ", *want.socket);
  }
  if (want.cpuset) {
    const CpuSet& named = *want.cpuset;
    if (const CpuSet missing = named - topo.online; !missing.Empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("spec.cpus.cpuset: CPUs ", missing.ToString(),
                       " are not online on this node (online ", Text(topo.online), ")"));
    }
    if (const CpuSet outside = named - scope; !outside.Empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("spec.cpus.cpuset: CPUs ", outside.ToString(), " are not in ", where));
    }
    if (const CpuSet r = named & node.reserved_cpus; !r.Empty()) {
      return absl::FailedPreconditionError(absl::StrCat("spec.cpus.cpuset: CPUs ", r.ToString(),
                                                        " are --reserved-cpus (",
                                                        node.reserved_cpus.ToString(), ")"));
    }
    if (const CpuSet r = named & node.other_reservations; !r.Empty()) {
      return absl::ResourceExhaustedError(absl::StrCat("spec.cpus.cpuset: CPUs ", r.ToString(),
                                                       " are held by another reservation"));
    }
    if (!(named & node.busy_cpus).Empty() && !pre_allocation) {
      return absl::ResourceExhaustedError(
          // Which of them are in use changes with every claim, so they are not named (below).
          "spec.cpus.cpuset: claims use some of these CPUs (set preAllocation to hold them as "
          "they are released)");
    }
    return named;
  }
  const CpuSet usable = scope - node.reserved_cpus;
  if (usable.Size() < want.count) {
    return absl::FailedPreconditionError(
        absl::StrCat("spec.cpus.count: ", want.count, " CPUs wanted but ", where, " has only ",
                     usable.Size(), " that can be reserved (", Text(usable), ")"));
  }
  const CpuSet free = usable - node.other_reservations - node.busy_cpus;
  allocation::CpuRequest req;
  req.count = want.count;
  req.available = free;
  // Built once for both picks below.
  const allocation::CpuLayout layout(topo);
  absl::StatusOr<CpuSet> cpus = allocation::AllocateCpus(layout, req);
  if (cpus.ok() || cpus.status().code() != absl::StatusCode::kResourceExhausted) return cpus;
  if (pre_allocation) {
    req.available = usable - node.other_reservations;
    cpus = allocation::AllocateCpus(layout, req);
    if (cpus.ok() || cpus.status().code() != absl::StatusCode::kResourceExhausted) return cpus;
  }
  // The message names only what changes with reservations, never the free count: claims come
  // and go all day, and a Pending status rewritten for each would be churn on the API server
  // with no news for anyone (the phase and reason say the same).
  const CpuSet held = usable & node.other_reservations;
  if (pre_allocation) {
    return absl::ResourceExhaustedError(
        absl::StrCat("spec.cpus.count: ", want.count, " CPUs wanted in ", where, ", where ",
                     usable.Size(), " can be reserved and other reservations hold ", held.Size(),
                     " (", Text(held), "); placed when enough are released"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "spec.cpus.count: ", want.count, " CPUs wanted in ", where,
      " and not that many are free: ", usable.Size(),
      " can be reserved there, other reservations hold ", held.Size(), " (", Text(held),
      ") and claims use some of the rest; placed as soon as enough are free (set "
      "preAllocation to hold CPUs in use as they are released)"));
}

absl::StatusOr<std::set<std::string>> PlaceGpus(const GpuWant& want, bool pre_allocation,
                                                const topology::Topology& topo,
                                                const NodeView& node) {
  std::set<std::string> known;
  for (const auto& [name, pci] : node.gpus) known.insert(pci);
  if (!want.devices.empty()) {
    std::set<std::string> out;
    for (size_t i = 0; i < want.devices.size(); ++i) {
      const std::string& d = want.devices[i];
      std::string pci;
      if (auto it = node.gpus.find(d); it != node.gpus.end()) {
        pci = it->second;
      } else if (known.contains(d)) {
        pci = d;
      } else {
        return absl::FailedPreconditionError(absl::StrCat("spec.gpus.devices[", i, "]: \"", d,
                                                          "\" is not a GPU this node publishes"));
      }
      if (node.reserved_gpus.contains(pci)) {
        return absl::ResourceExhaustedError(absl::StrCat("spec.gpus.devices[", i, "]: GPU \"", d,
                                                         "\" is held by another reservation"));
      }
      if (node.busy_gpus.contains(pci) && !pre_allocation) {
        return absl::ResourceExhaustedError(
            absl::StrCat("spec.gpus.devices[", i, "]: GPU \"", d,
                         "\" is in use (set preAllocation to hold it when it is released)"));
      }
      out.insert(pci);
    }
    return out;
  }
  if (static_cast<int>(known.size()) < want.count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "spec.gpus.count: ", want.count, " GPUs wanted but the node publishes ", known.size()));
  }
  std::vector<std::string> free, usable;
  for (const std::string& pci : known) {
    if (node.reserved_gpus.contains(pci)) continue;
    usable.push_back(pci);
    if (!node.busy_gpus.contains(pci)) free.push_back(pci);
  }
  allocation::GpuRequest req;
  req.count = want.count;
  req.available = free;
  absl::StatusOr<std::vector<std::string>> gpus = allocation::PreferGpus(topo, req);
  if (!gpus.ok() && gpus.status().code() == absl::StatusCode::kResourceExhausted &&
      pre_allocation) {
    req.available = usable;
    gpus = allocation::PreferGpus(topo, req);
  }
  if (!gpus.ok()) {
    if (gpus.status().code() != absl::StatusCode::kResourceExhausted) return gpus.status();
    const size_t held = known.size() - usable.size();
    if (pre_allocation) {
      return absl::ResourceExhaustedError(
          absl::StrCat("spec.gpus.count: ", want.count, " GPUs wanted and other reservations hold ",
                       held, " of the node's ", known.size(), "; placed when enough are released"));
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "spec.gpus.count: ", want.count,
        " GPUs wanted and not that many are free: other "
        "reservations hold ",
        held, " of the node's ", known.size(),
        " and claims use some of "
        "the rest; placed as soon as enough are free (set preAllocation to hold GPUs in use as "
        "they are released)"));
  }
  return std::set<std::string>(gpus->begin(), gpus->end());
}

}  // namespace

absl::StatusOr<Placement> Place(const Spec& spec, const topology::Topology& topo,
                                const NodeView& node) {
  Placement p;
  if (spec.cpus) {
    absl::StatusOr<CpuSet> cpus = PlaceCpus(*spec.cpus, spec.pre_allocation, topo, node);
    if (!cpus.ok()) return cpus.status();
    p.cpus = *cpus;
  }
  if (spec.gpus) {
    absl::StatusOr<std::set<std::string>> gpus =
        PlaceGpus(*spec.gpus, spec.pre_allocation, topo, node);
    if (!gpus.ok()) return gpus.status();
    p.gpus = *std::move(gpus);
  }
  return p;
}

}  // namespace topodra::reservation
