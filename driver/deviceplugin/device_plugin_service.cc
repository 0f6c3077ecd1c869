#include "driver/deviceplugin/device_plugin_service.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <optional>
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
                                         state::Ledger* ledger, const cdi::SpecStore* cdi)
    : resource_(setup.resource),
      ledger_(ledger),
      cdi_(cdi),
      view_(std::make_shared<const View>(View{std::move(setup), std::move(topo)})) {}

std::shared_ptr<const DevicePluginService::View> DevicePluginService::view() const {
  absl::MutexLock lock(&view_mu_);
  return view_;
}

absl::StatusOr<cdi::ReconciledCdi> DevicePluginService::ReconcileCdi() {
  const std::string marker = view()->setup.cdi_marker;
  const std::map<std::string, json> wanted = ledger_->Read([&](const state::State& st) {
    std::map<std::string, json> out;
    for (const auto& [owner, a] : st.allocations()) {
      if (!IsAllocationOf(resource_, a)) continue;
      const json cdi = a.cdi.Parse();
      if (!cdi.is_object() || !cdi.contains("spec")) continue;
      if (std::string file = CdiFileOf(a); !file.empty()) out[file] = cdi["spec"];
    }
    return out;
  });
  return cdi::ReconcileCdiFiles(
      *cdi_, wanted,
      [&](const std::string& file) {
        return prepare::ClassifyCdiFile(IsDpCdiFileOf(resource_, file), file, marker);
      },
      absl::StrCat("device plugin ", resource_));
}

std::vector<Device> DevicePluginService::Devices() const {
  const std::shared_ptr<const View> v = view();
  return ledger_->Read([&](const state::State& st) { return ListDevices(v->setup, v->topo, st); });
}

absl::StatusOr<std::vector<std::string>> DevicePluginService::Preferred(
    const std::vector<std::string>& available, const std::vector<std::string>& must_include,
    int size) const {
  const std::shared_ptr<const View> v = view();
  return ledger_->Read([&](const state::State& st) {
    return PreferredAllocation(v->setup, v->topo, st, available, must_include, size);
  });
}

absl::StatusOr<DevicePluginService::Allocated> DevicePluginService::Allocate(
    const std::vector<std::string>& ids) {
  absl::StatusOr<Allocated> a = AllocateOne(ids);
  if (observer_ != nullptr) observer_->OnDevicePluginAllocate(resource_, a.ok());
  return a;
}

absl::Status DevicePluginService::PlanOne(state::Ledger::Edit& edit, const View& view,
                                          const std::vector<std::string>& ids, AllocatePlan* plan) {
  absl::StatusOr<AllocatePlan> planned = PlanAllocate(view.setup, view.topo, edit.state(), ids);
  if (!planned.ok()) return planned.status();
  *plan = *std::move(planned);
  if (plan->replay && edit.InFlight(plan->allocation.owner)) {
    return absl::UnavailableError(absl::StrCat(
        resource_, ": a concurrent Allocate of the same devices is being recorded; retry"));
  }
  if (plan->replay) return absl::OkStatus();
  // Earlier device-plugin allocations of these devices hand them on.
  for (const state::Allocation& s : plan->shrunk) {
    absl::Status st = edit.Shrink(s);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(resource_, ": ", Message(st)));
  }
  return edit.Add(plan->allocation);
}

absl::StatusOr<DevicePluginService::Allocated> DevicePluginService::AllocateOne(
    const std::vector<std::string>& ids) {
  const std::shared_ptr<const View> v = view();
  AllocatePlan plan;
  absl::StatusOr<state::Ledger::Txn> txn =
      ledger_->Reserve([&](state::Ledger::Edit& edit) { return PlanOne(edit, *v, ids, &plan); });
  if (!txn.ok()) return txn.status();
  const std::string& owner = plan.allocation.owner;
  if (plan.replay) {
    spdlog::debug("device plugin {}: allocation {} repeated, same answer", resource_, owner);
    return Allocated{plan.grant, owner, false};
  }
  auto undo = [&] {
    (void)cdi_->Remove(plan.cdi_file, /*synced=*/false);
    ledger_->Abort(*txn);
  };
  if (absl::StatusOr<cdi::Spec> w = cdi_->Write(plan.cdi_file, plan.cdi_spec, /*synced=*/false);
      !w.ok()) {
    undo();
    return absl::Status(w.status().code(), absl::StrCat(resource_, ": ", Message(w.status())));
  }
  if (absl::Status st = ledger_->Commit(*txn); !st.ok()) {
    undo();
    return absl::Status(st.code(),
                        absl::StrCat(resource_, ": record the allocation: ", Message(st)));
  }
  for (const state::Allocation& s : plan.shrunk) {
    spdlog::info(
        "device plugin {}: allocation {} handed devices on to {} (the kubelet reused them)",
        resource_, s.owner, owner);
    // An emptied allocation with the new one's owner (the same devices again) shares its file.
    if (!s.cpus.Empty() || !s.gpus.empty() || s.owner == owner) continue;
    // All its devices were handed on: the kubelet no longer uses its CDI device.
    if (std::string file = CdiFileOf(s); !file.empty()) (void)cdi_->Remove(file, false);
  }
  spdlog::info("device plugin {}: allocated {} as {}", resource_, Held(plan.allocation), owner);
  return Allocated{plan.grant, owner, true};
}

absl::Status DevicePluginService::Release(const std::string& owner) {
  std::optional<state::Allocation> held;
  absl::StatusOr<state::Ledger::Txn> txn =
      ledger_->Reserve([&](state::Ledger::Edit& edit) -> absl::Status {
        const state::Allocation* a = edit.state().Find(owner);
        if (a == nullptr || !IsAllocationOf(resource_, *a)) return absl::OkStatus();
        if (edit.Busy(owner)) {
          return absl::UnavailableError(
              absl::StrCat(resource_, ": allocation ", owner, " is still being recorded"));
        }
        held = *a;
        return edit.Release(owner);
      });
  if (!txn.ok()) return txn.status();
  if (!held) return absl::OkStatus();
  // Removed before the record (its devices stay held until then, so no Allocate of the same
  // devices writes this file meanwhile); written again if the record fails.
  const std::string file = CdiFileOf(*held);
  if (!file.empty()) (void)cdi_->Remove(file, false);
  if (absl::Status st = ledger_->Commit(*txn); !st.ok()) {
    // Still allocated: its CDI file must be there.
    const json cdi = held->cdi.Parse();
    if (!file.empty() && cdi.contains("spec")) {
      absl::StatusOr<cdi::Spec> spec = cdi::FromJson(cdi["spec"].dump());
      if (spec.ok()) (void)cdi_->Write(file, *spec, false);
    }
    ledger_->Abort(*txn);
    return absl::Status(
        st.code(), absl::StrCat(resource_, ": record the release of ", owner, ": ", Message(st)));
  }
  spdlog::info("device plugin {}: released {} ({})", resource_, owner, Held(*held));
  return absl::OkStatus();
}

std::vector<std::string> DevicePluginService::Reclaim(const std::set<std::string>& assigned,
                                                      absl::Time now, absl::Duration grace) {
  std::vector<std::string> due;
  {
    std::map<std::string, absl::Time> missing;
    const std::vector<std::string> unused = ledger_->ReadWithInFlight(
        [&](const state::State& st, const std::set<std::string>& in_flight) {
          std::vector<std::string> out;
          for (const std::string& owner : UnusedAllocations(st, resource_, assigned)) {
            if (!in_flight.contains(owner)) out.push_back(owner);
          }
          return out;
        });
    for (const std::string& owner : unused) {
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
  {
    absl::MutexLock lock(&view_mu_);
    view_ = std::make_shared<const View>(View{std::move(setup), std::move(topo)});
  }
  ledger_->changes().Notify();
}

}  // namespace topodra::deviceplugin
