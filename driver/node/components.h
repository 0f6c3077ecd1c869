// The node daemon's components (component.h), in the order node.cc starts them. Each owns its
// threads and servers; what it shares with the others comes in through its constructor.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "cdi/reconcile.h"
#include "cdi/spec_store.h"
#include "common/uevent.h"
#include "driver/cgroup/reconciler.h"
#include "driver/deviceplugin/device_plugin_service.h"
#include "driver/metrics/metrics.h"
#include "driver/metrics/metrics_server.h"
#include "driver/node/component.h"
#include "driver/node/config.h"
#include "driver/node/extended_resource_check.h"
#include "driver/node/startup.h"
#include "driver/plugin/device_plugin_server.h"
#include "driver/plugin/kubelet_plugin.h"
#include "driver/prepare/claim_service.h"
#include "driver/publish/slice_publisher.h"
#include "driver/reservation/controller.h"
#include "driver/state/ledger.h"

namespace topodra::node {

// --enforce=cgroup: the shared pool follows every change of the allocations (prepare, unprepare,
// device plugin) and of the hook's records; the reconciler also fixes every new pod cgroup as it
// appears. Start fixes the containers created while the daemon was down, before anything serves.
class Pinning : public Component {
 public:
  // `numa_nodes`: the machine's NUMA nodes, for the memory nodes local to a claim's CPUs
  // (--numa-memory=claim).
  Pinning(PinningSetup setup, const NodeConfig& config, state::Ledger* ledger,
          std::function<CpuSet()> online, std::vector<topology::NumaNode> numa_nodes = {});
  const char* name() const override { return "pinning"; }
  absl::Status Start() override;
  void Stop() override;

 private:
  cgroup::Target TargetNow();
  void FollowAllocations();
  void WatchRecords();

  const PinningSetup setup_;
  const CpuSet reserved_;
  const bool strict_;
  state::Ledger* const ledger_;
  const std::function<CpuSet()> online_;
  const bool numa_memory_;
  const std::vector<topology::NumaNode> numa_nodes_;
  std::atomic<bool> root_mems_warned_{false};
  std::unique_ptr<cgroup::Reconciler> reconciler_;
  std::atomic<bool> stop_{false};
  std::thread follow_, records_;
};

// One DRA kubelet plugin per driver: the CPU driver always, the GPU driver when the node
// publishes GPUs at start. Start rewrites and removes CDI files to match the state first.
class DraDrivers : public Component {
 public:
  struct Driver {
    prepare::DriverKind kind;
    std::unique_ptr<prepare::ClaimService> service;
    std::function<absl::Status()> keep_lock;  // PluginOptions::keep_lock
    health::Board* health_board = nullptr;    // PluginOptions::health_board
    std::unique_ptr<plugin::KubeletPlugin> plugin;
  };
  // `checked` is called once per driver when its claims' file check ends, whatever its outcome.
  DraDrivers(std::vector<Driver> drivers, const NodeConfig& config,
             std::function<void()> checked = nullptr);
  const char* name() const override { return "dra-drivers"; }
  absl::Status Start() override;
  void Stop() override;
  void OnInventory(const Inventory& now) override;
  // Readiness: drivers not registered with the kubelet, and socket problems.
  std::vector<std::string> Problems() const;

 private:
  std::vector<Driver> drivers_;
  const std::string kubelet_root_, cdi_dir_;
  const bool health_;
  const std::function<void()> checked_;
};

// The legacy device-plugin API on the same node allocations, and the reclaimer that releases
// what no container uses any more. A plugin whose resource a DeviceClass maps is not served, and
// stops being served when one comes to map it (--extended-resource-check); its allocations stay
// until their pods are gone.
class DevicePlugins : public Component {
 public:
  struct Plugin {
    deviceplugin::ResourceKind kind;
    std::unique_ptr<deviceplugin::DevicePluginService> service;
  };
  DevicePlugins(std::vector<Plugin> plugins, const NodeConfig& config,
                std::unique_ptr<ExtendedResourceCheck> check);
  const char* name() const override { return "device-plugins"; }
  absl::Status Start() override;
  void Stop() override;
  void OnInventory(const Inventory& now) override;
  std::vector<std::string> Problems() const;

 private:
  absl::Status Serve(size_t i);  // with mu_ held
  void Follow(const ExtendedResourceCheck::Refused& refused);

  std::vector<Plugin> plugins_;
  mutable std::mutex mu_;
  // One per plugin, null while it is not served.
  std::vector<std::unique_ptr<plugin::DevicePluginServer>> servers_;  // guarded by mu_
  std::unique_ptr<plugin::DevicePluginReclaimer> reclaimer_;
  const NodeConfig& config_;
  std::unique_ptr<ExtendedResourceCheck> check_;
};

// One ResourceSlice publisher per driver. A driver without a pool (no GPUs, --gpus=none) still
// runs one: it removes stale slices.
class Publishing : public Component {
 public:
  Publishing(kube::RestClient* client, const NodeConfig& config, const Inventory& first);
  ~Publishing() override;  // Stop(): Prepare may have started the publishers
  const char* name() const override { return "publishing"; }
  // Runs the publishers with their writes held: the list, the probes (dry runs) and building the
  // slices overlap the start of the components before this one; Start() lets the writes go, so
  // slices still go out only once claims on them can be prepared.
  void Prepare();
  absl::Status Start() override;
  void Stop() override;
  void OnInventory(const Inventory& now) override;
  // Waits until every driver's pool of the last OnInventory is stored on the API server; false
  // when `timeout` (for all of them together) or Stop() comes first.
  bool WaitPublished(std::chrono::milliseconds timeout);
  // driver -> its publisher's status.
  std::vector<std::pair<std::string, publish::PublisherStatus>> Statuses() const;

 private:
  struct Publisher {
    std::string driver;
    std::unique_ptr<publish::SlicePublisher> publisher;
    std::thread thread;
  };
  std::vector<Publisher> publishers_;
};

// Reservations (topodra.io/v1alpha1): placed in the state, published marked, statuses written.
class Reservations : public Component {
 public:
  explicit Reservations(std::unique_ptr<reservation::Controller> controller)
      : controller_(std::move(controller)) {}
  const char* name() const override { return "reservations"; }
  absl::Status Start() override {
    controller_->Start();
    return absl::OkStatus();
  }
  void Stop() override { controller_->Stop(); }
  // Reserved devices may have left the machine.
  void Kick() { controller_->Kick(); }

 private:
  std::unique_ptr<reservation::Controller> controller_;
};

// CPUs going offline, GPUs disappearing: the kernel says so at once (uevents), so the device
// lists follow within milliseconds; the rediscovery every --topology-refresh stays as the
// fallback. Calls `changed` (Node::OnMachineChanged) on its own thread, which beats on every turn.
// `first`, when set, runs once on that thread before the first wait (the node confirms or
// stores the machine model it started from: topology_cache.h); the refresh timer starts after it.
class MachineWatch : public Component {
 public:
  MachineWatch(absl::Duration refresh, bool uevents, std::function<void()> changed,
               std::function<void()> first = nullptr);
  const char* name() const override { return "machine-watch"; }
  absl::Status Start() override;
  void Stop() override;
  // Rediscover now (SIGUSR1 from outside).
  void Request();
  // When the loop last ran.
  absl::Time last_beat() const { return absl::FromUnixNanos(beat_.load()); }
  // Stop has begun: a turn that took long (a discovery) drops its result rather than keep Stop
  // waiting for republishing and storing it.
  bool Stopping();

 private:
  void Run();
  bool WaitForChange(absl::Time until);  // true: rediscover now

  // The uevents of one change (a CPU going offline sends several) come together: a rediscovery
  // waits for a quiet gap of kBurstGap after them, kBurstMax at most.
  static constexpr absl::Duration kBurstGap = absl::Milliseconds(2);
  static constexpr absl::Duration kBurstMax = absl::Milliseconds(10);

  const absl::Duration refresh_;
  const bool uevents_;
  const std::function<void()> changed_;
  const std::function<void()> first_;
  // null: no uevents. Set before the loop starts, reset after it ends; Request and Stop wake it
  // under mu_.
  std::unique_ptr<uevent::Listener> listener_;
  std::atomic<int64_t> beat_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;       // guarded by mu_
  bool requested_ = false;  // guarded by mu_
  std::thread thread_;
};

// /metrics, /healthz and /readyz (--metrics-address), and /healthz and /readyz alone
// (--health-address).
class HealthServers : public Component {
 public:
  HealthServers(const NodeConfig& config, metrics::Endpoints endpoints);
  const char* name() const override { return "health-metrics"; }
  absl::Status Start() override;
  void Stop() override;

 private:
  const NodeConfig& config_;
  const metrics::Endpoints endpoints_;
  std::unique_ptr<metrics::MetricsServer> metrics_, health_;
};

}  // namespace topodra::node
