#include "driver/deviceplugin/device_plugin_service.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace topodra::deviceplugin {
namespace {

using json = nlohmann::json;

std::string CdiFileOf(const state::Allocation& a) {
  const json cdi = a.cdi.Parse();
  if (!cdi.is_object() || !cdi.contains("file") || !cdi["file"].is_string()) return "";
  return cdi["file"].get<std::string>();
}

std::string Held(const state::Allocation& a) {
  return a.cpus.Empty() ? absl::StrJoin(a.gpus, ",") : a.cpus.ToString();
}

}  // namespace

DevicePluginService::DevicePluginService(ResourceSetup setup, topology::Topology topo,
                                         prepare::NodeAllocations* node, const cdi::SpecStore* cdi)
    : resource_(setup.resource),
      node_(node),
      cdi_(cdi),
      setup_(std::move(setup)),
      topo_(std::move(topo)) {}

absl::StatusOr<cdi::ReconciledCdi> DevicePluginService::ReconcileCdi() {
  std::map<std::string, json> wanted;
  std::string marker;
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    marker = setup_.cdi_marker;
    for (const auto& [owner, a] : node_->state.allocations()) {
      if (!IsAllocationOf(resource_, a)) continue;
      const json cdi = a.cdi.Parse();
      if (!cdi.is_object() || !cdi.contains("spec")) continue;
      if (std::string file = CdiFileOf(a); !file.empty()) wanted[file] = cdi["spec"];
    }
  }
  return cdi::ReconcileCdiFiles(
      *cdi_, wanted,
      [&](const std::string& file) {
        return prepare::ClassifyCdiFile(IsDpCdiFileOf(resource_, file), file, marker);
      },
      absl::StrCat("device plugin ", resource_));
}

std::vector<Device> DevicePluginService::Devices() const {
  std::lock_guard<std::mutex> lock(node_->mu);
  return ListDevices(setup_, topo_, node_->state);
}

absl::StatusOr<std::vector<std::string>> DevicePluginService::Preferred(
    const std::vector<std::string>& available, const std::vector<std::string>& must_include,
    int size) const {
  std::lock_guard<std::mutex> lock(node_->mu);
  return PreferredAllocation(setup_, topo_, node_->state, available, must_include, size);
}

absl::StatusOr<DevicePluginService::Allocated> DevicePluginService::Allocate(
    const std::vector<std::string>& ids) {
  absl::StatusOr<Allocated> a = AllocateOne(ids);
  if (observer_ != nullptr) observer_->OnDevicePluginAllocate(resource_, a.ok());
  return a;
}

absl::StatusOr<DevicePluginService::Allocated> DevicePluginService::AllocateOne(
    const std::vector<std::string>& ids) {
  AllocatePlan plan;
  // The allocations the plan shrinks, as they were, to put back if a later step fails.
  std::vector<state::Allocation> before;
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    absl::StatusOr<AllocatePlan> planned = PlanAllocate(setup_, topo_, node_->state, ids);
    if (!planned.ok()) return planned.status();
    plan = *std::move(planned);
    if (plan.replay) {
      if (node_->in_flight.contains(plan.allocation.owner)) {
        return absl::UnavailableError(absl::StrCat(
            resource_, ": a concurrent Allocate of the same devices is being recorded; retry"));
      }
      spdlog::debug("device plugin {}: allocation {} repeated, same answer", resource_,
                    plan.allocation.owner);
      return Allocated{plan.grant, plan.allocation.owner, false};
    }
    for (const state::Allocation& s : plan.shrunk) {
      before.push_back(*node_->state.Find(s.owner));
      (void)node_->state.Remove(s.owner);
      if (!s.cpus.Empty() || !s.gpus.empty()) (void)node_->state.Restore(s);
    }
    if (absl::Status st = node_->state.Add(plan.allocation); !st.ok()) {
      for (const state::Allocation& b : before) {
        (void)node_->state.Remove(b.owner);
        (void)node_->state.Restore(b);
      }
      return st;
    }
    node_->in_flight.insert(plan.allocation.owner);
    node_->changes.Notify();
  }
  const std::string& owner = plan.allocation.owner;
  auto undo = [&]() {
    (void)cdi_->Remove(plan.cdi_file, /*synced=*/false);
    std::lock_guard<std::mutex> lock(node_->mu);
    node_->in_flight.erase(owner);
    (void)node_->state.Remove(owner);
    for (const state::Allocation& b : before) {
      (void)node_->state.Remove(b.owner);
      (void)node_->state.Restore(b);
    }
    node_->changes.Notify();
  };
  if (absl::StatusOr<cdi::Spec> w = cdi_->Write(plan.cdi_file, plan.cdi_spec, /*synced=*/false);
      !w.ok()) {
    undo();
    return absl::Status(w.status().code(), absl::StrCat(resource_, ": ", Message(w.status())));
  }
  absl::Status recorded = absl::OkStatus();
  for (const state::Allocation& s : plan.shrunk) {
    if (!recorded.ok()) break;
    recorded =
        s.cpus.Empty() && s.gpus.empty() ? node_->store->Remove(s.owner) : node_->store->Put(s);
  }
  if (recorded.ok()) recorded = node_->store->Put(plan.allocation);
  if (!recorded.ok()) {
    undo();
    // Records of shrunk allocations that did land are superseded by these.
    for (const state::Allocation& b : before) (void)node_->store->Put(b);
    return absl::Status(recorded.code(),
                        absl::StrCat(resource_, ": record the allocation: ", Message(recorded)));
  }
  for (const state::Allocation& s : plan.shrunk) {
    // An emptied allocation with the new one's owner (the same devices again) shares its file.
    if (!s.cpus.Empty() || !s.gpus.empty() || s.owner == owner) continue;
    // All its devices were handed on: the kubelet no longer uses its CDI device.
    if (std::string file = CdiFileOf(s); !file.empty()) (void)cdi_->Remove(file, false);
  }
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    node_->in_flight.erase(owner);
    prepare::CompactIfDue(node_);
  }
  for (const state::Allocation& s : plan.shrunk) {
    spdlog::info(
        "device plugin {}: allocation {} handed devices on to {} (the kubelet reused them)",
        resource_, s.owner, owner);
  }
  spdlog::info("device plugin {}: allocated {} as {}", resource_, Held(plan.allocation), owner);
  return Allocated{plan.grant, owner, true};
}

absl::Status DevicePluginService::Release(const std::string& owner) {
  state::Allocation held;
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    const state::Allocation* a = node_->state.Find(owner);
    if (a == nullptr || !IsAllocationOf(resource_, *a)) return absl::OkStatus();
    if (node_->in_flight.contains(owner)) {
      return absl::UnavailableError(
          absl::StrCat(resource_, ": allocation ", owner, " is still being recorded"));
    }
    held = *a;
  }
  if (absl::Status st = node_->store->Remove(owner); !st.ok()) {
    return absl::Status(
        st.code(), absl::StrCat(resource_, ": record the release of ", owner, ": ", Message(st)));
  }
  if (std::string file = CdiFileOf(held); !file.empty()) (void)cdi_->Remove(file, false);
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    (void)node_->state.Remove(owner);
    node_->changes.Notify();
    prepare::CompactIfDue(node_);
  }
  spdlog::info("device plugin {}: released {} ({})", resource_, owner, Held(held));
  return absl::OkStatus();
}

std::vector<std::string> DevicePluginService::Reclaim(const std::set<std::string>& assigned,
                                                      absl::Time now, absl::Duration grace) {
  std::vector<std::string> due;
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    std::map<std::string, absl::Time> missing;
    for (const std::string& owner : UnusedAllocations(node_->state, resource_, assigned)) {
      if (node_->in_flight.contains(owner)) continue;
      auto it = missing_since_.find(owner);
      const absl::Time since = it == missing_since_.end() ? now : it->second;
      missing[owner] = since;
      if (now - since >= grace) due.push_back(owner);
    }
    missing_since_ = std::move(missing);
  }
  std::vector<std::string> released;
  for (const std::string& owner : due) {
    if (absl::Status st = Release(owner); !st.ok()) {
      spdlog::warn("device plugin {}: cannot release {} whose pod is gone: {}", resource_, owner,
                   Message(st));
      continue;
    }
    released.push_back(owner);
  }
  return released;
}

void DevicePluginService::Update(ResourceSetup setup, topology::Topology topo) {
  std::lock_guard<std::mutex> lock(node_->mu);
  setup_ = std::move(setup);
  topo_ = std::move(topo);
  node_->changes.Notify();
}

}  // namespace topodra::deviceplugin
