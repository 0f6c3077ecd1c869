// The node daemon as one object. Create does the start-up I/O (directories, instance locks, the
// allocation state, the pinning hook) and builds the components; Start runs them in order, Stop
// in the reverse order. What the node publishes is an Inventory, rebuilt in one place
// (Republish) when the machine or the reservations change, and handed to every component.
//
// Start order (stop is the reverse):
//   pinning         containers created while the daemon was down are fixed before anything serves
//   dra-drivers     CDI files reconciled with the state, then the kubelet plugins
//   device-plugins  the same for the legacy API, and its reclaimer
//   publishing      slices are published once the kubelet can prepare what they offer
//   reservations    places reservations in the state; republishes through the node
//   machine-watch   uevents and the periodic rediscovery: Node::OnMachineChanged
//   health-metrics  /metrics, /healthz, /readyz: first to stop, as they read all the others
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cdi/spec_store.h"
#include "driver/deviceclass/mapping_source.h"
#include "driver/metrics/metrics.h"
#include "driver/metrics/metrics_server.h"
#include "driver/node/component.h"
#include "driver/node/config.h"
#include "driver/node/device_health.h"
#include "driver/node/inventory.h"
#include "driver/node/start_latch.h"
#include "driver/node/topology_cache.h"
#include "driver/plugin/instance_lock.h"
#include "driver/prepare/claim_service.h"
#include "driver/state/ledger.h"
#include "driver/state/store.h"
#include "topology/topology.h"

namespace topodra::kube {
class RestClient;
}

namespace topodra::node {

class DraDrivers;
class DevicePlugins;
class ExtendedResourceCheck;
class Publishing;
class Reservations;
class MachineWatch;
struct PinningSetup;

// What the node talks to, so tests can give it stand-ins.
struct NodeDeps {
  kube::RestClient* client = nullptr;  // not owned; outlives the Node
  // The machine now (topology::Discover of the configured source).
  std::function<absl::StatusOr<topology::Topology>()> discover;
  // Listen to the kernel's uevents (a netlink socket); off, only the periodic rediscovery runs.
  bool watch_uevents = true;
  // The DeviceClasses the device plugins' check reads (--extended-resource-check); null: the
  // API server's, through `client`.
  std::function<std::unique_ptr<deviceclass::MappingSource>()> device_classes;
  // --topology-cache=on: where the machine model is kept (null: off), and how the topology given
  // to Create was found (FindTopologyAtStart; `topology` unused). From the file, the machine
  // watch's first turn discovers the machine and republishes on a difference; discovered, it
  // stores the model with the key read before the discovery.
  std::shared_ptr<const TopologyCache> topology_cache;
  StartTopology topology_start;
  // Tests only: runs on a DRA driver's file-check thread as its check of the claims' files ends,
  // before the node counts that check as ended (a test holds it there to see what waits for it).
  std::function<void()> file_check_ending;
};

class Node {
 public:
  // `topo` is the machine `config` was validated against (Validate is called again). The error
  // is the daemon's last log line.
  static absl::StatusOr<std::unique_ptr<Node>> Create(NodeConfig config, topology::Topology topo,
                                                      NodeDeps deps);
  ~Node();  // Stop()
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Starts the components in order; on failure those started are stopped again.
  absl::Status Start();
  // Stops them in reverse order. Idempotent.
  void Stop();

  // The machine may have changed: rediscovers it and, when what is published differs,
  // republishes and updates every component. Returns true when something changed.
  bool OnMachineChanged() { return Rediscover(false); }
  // Asks the machine watch to rediscover soon (SIGUSR1 from outside), without blocking.
  void RequestRediscovery();
  // What /readyz answers: every driver registered with the kubelet and its slices published.
  bool IsReady() { return Ready().ok; }

  // In start order.
  std::vector<std::string> ComponentNames() const { return components_.Names(); }
  Inventory inventory() const;

 private:
  Node(NodeConfig config, NodeDeps deps);
  absl::Status LoadState();
  absl::Status ReleaseReservationsWhenOff();
  void Assemble(topology::Topology topo, std::optional<PinningSetup> pinning);
  void AddKubeletComponents();
  std::unique_ptr<ExtendedResourceCheck> NewExtendedResourceCheck() const;
  void AddReservations();
  void AddHealth();
  // With publish_mu_ held: rebuilds the inventory from `now` and held_; when it differs, every
  // component gets it. True when it changed.
  // `machine_changed`: the model differs from the one in use in details the pools may not show;
  // every component gets it all the same.
  bool Republish(const topology::Topology& now, bool machine_changed = false);
  // OnMachineChanged; `confirming`: the first turn after a start from the stored model.
  bool Rediscover(bool confirming);
  // On the machine watch's thread before its first wait (topology_cache.h).
  void SettleStoredTopology();
  // Stores the model found with `key` (read before its discovery) unless the file already holds
  // both.
  void KeepTopology(const MachineKey& key, const topology::Topology& topo, bool machine_changed);
  metrics::NodeSnapshot Snapshot();
  metrics::Probe Ready();
  CpuSet Online() const;

  const NodeConfig config_;
  const NodeDeps deps_;
  std::vector<std::unique_ptr<plugin::InstanceLock>> locks_;
  // The node's allocations, shared by every driver, the device plugin and the reservations;
  // owns the state store. Set by LoadState.
  std::unique_ptr<state::Ledger> ledger_;
  const cdi::SpecStore cdi_store_;
  prepare::ApiClaimSource claim_source_;
  std::string cdi_marker_;
  std::unique_ptr<metrics::Metrics> metrics_;  // outlives every component reporting to it

  InventoryOptions inventory_options_;
  mutable std::mutex publish_mu_;
  Inventory inventory_;  // guarded by publish_mu_
  // The reservations' devices to publish (guarded by publish_mu_): the loaded state's at start,
  // then what the reservation controller reports once its change is durable. Never read from
  // the ledger later: its memory holds open transactions, and a placement must be durable
  // before anything outside hears of it, a republish for a machine change included.
  std::vector<publish::ReservedDevices> held_;
  // GPU health as last read (guarded by publish_mu_); boards read by the health streams.
  std::unique_ptr<DeviceHealth> device_health_;
  std::map<std::string, health::Verdict> gpu_verdicts_;
  // What the topology cache file holds (stored or loaded at start); guarded by cache_mu_.
  std::mutex cache_mu_;
  std::optional<MachineKey> stored_key_;
  bool store_failed_ = false;  // the last Store failed (its warning was logged)
  mutable std::mutex online_mu_;
  CpuSet online_;  // guarded by online_mu_
  // The DRA drivers' file checks: the confirmation of a stored machine model waits for them
  // (SettleStoredTopology).
  StartLatch file_checks_;

  // Owned by components_.
  DraDrivers* dra_ = nullptr;
  DevicePlugins* device_plugins_ = nullptr;
  Publishing* publishing_ = nullptr;
  Reservations* reservations_ = nullptr;
  MachineWatch* watch_ = nullptr;
  ComponentList components_;  // last: stopped and destroyed before what they use
};

}  // namespace topodra::node
