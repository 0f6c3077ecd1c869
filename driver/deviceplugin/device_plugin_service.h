// One extended resource served through the device-plugin API, without gRPC: the device list,
// preferred allocations and Allocate against the node's shared State (the same lock, State and
// journal as the DRA drivers), plus the reclaiming of allocations whose pods are gone.
//
// Allocate order of side effects, like a DRA prepare: Ledger::Reserve (hold the devices in
// memory) -> write the CDI spec (atomic) -> Ledger::Commit (journal the allocation, durable) ->
// answer. A crash before the journal record leaves an orphan CDI file, removed at start.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cdi/reconcile.h"
#include "cdi/spec_store.h"
#include "driver/deviceplugin/device_plugin_core.h"
#include "driver/metrics/observer.h"
#include "driver/prepare/claim_service.h"
#include "driver/state/ledger.h"
#include "topology/topology.h"

namespace topodra::deviceplugin {

class DevicePluginService {
 public:
  DevicePluginService(ResourceSetup setup, topology::Topology topo, state::Ledger* ledger,
                      const cdi::SpecStore* cdi);

  const std::string& resource() const { return resource_; }
  state::Ledger* ledger() const { return ledger_; }
  // Told of every Allocate; nullptr (the default) for none. Set before use; not owned.
  void SetObserver(metrics::Observer* observer) { observer_ = observer; }

  // Restores lost CDI files of this resource's allocations and removes stale ones (start-up).
  absl::StatusOr<cdi::ReconciledCdi> ReconcileCdi();

  std::vector<Device> Devices() const;
  absl::StatusOr<std::vector<std::string>> Preferred(const std::vector<std::string>& available,
                                                     const std::vector<std::string>& must_include,
                                                     int size) const;
  struct Allocated {
    ContainerGrant grant;
    std::string owner;
    bool created = false;  // false: an identical allocation existed (a repeated Allocate)
  };
  absl::StatusOr<Allocated> Allocate(const std::vector<std::string>& ids);
  // Gives up one allocation of this resource (CDI file and journal). Unknown owners are OK.
  absl::Status Release(const std::string& owner);

  // `assigned`: every device id the kubelet reports (PodResources List) for this resource, at
  // `now`. An allocation none of whose devices is reported, in listings spanning at least
  // `grace`, is released. Returns the owners released.
  std::vector<std::string> Reclaim(const std::set<std::string>& assigned, absl::Time now,
                                   absl::Duration grace);

  // The machine changed: the device list and later allocations use the new view.
  void Update(ResourceSetup setup, topology::Topology topo);

 private:
  absl::StatusOr<Allocated> AllocateOne(const std::vector<std::string>& ids);
  // What the resource and machine are now (Update replaces them whole).
  struct View {
    ResourceSetup setup;
    topology::Topology topo;
  };
  std::shared_ptr<const View> view() const;
  // AllocateOne's plan, under the ledger's lock: a replay, or the devices held (and handed on by
  // earlier allocations).
  absl::Status PlanOne(state::Ledger::Edit& edit, const View& view,
                       const std::vector<std::string>& ids, AllocatePlan* plan);

  const std::string resource_;
  state::Ledger* ledger_;
  metrics::Observer* observer_ = nullptr;
  const cdi::SpecStore* cdi_;
  mutable absl::Mutex view_mu_;
  std::shared_ptr<const View> view_ ABSL_GUARDED_BY(view_mu_);
  // Owner -> when a listing first did not show it (Reclaim only; one caller thread).
  std::map<std::string, absl::Time> missing_since_;
};

}  // namespace topodra::deviceplugin
