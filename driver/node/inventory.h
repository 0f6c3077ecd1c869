// What the node has to offer at one moment, as a pure function of the machine, the publishing
// options and the devices reservations hold: the pools it publishes and, derived from them, what
// each consumer is told (the DRA drivers' and device plugins' setups, the reservation
// controller's context). Only published devices are ever prepared, allocated or reserved: the
// filter is written once, here.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cdi/spec.h"
#include "driver/deviceplugin/device_plugin_core.h"
#include "driver/prepare/planner.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_model.h"
#include "driver/reservation/controller.h"
#include "driver/reservation/lifecycle.h"
#include "driver/state/state.h"
#include "topology/topology.h"

namespace topodra::node {

// What does not change while the daemon runs.
struct InventoryOptions {
  // Without reservations: Inventory::Build adds the held devices.
  publish::PublishOptions publish;
  std::string cdi_marker;  // DriverSetup::cdi_marker
  // <kubelet root>/plugins, where each DRA driver's data directory is ("" none), and
  // --device-metadata (DriverSetup::metadata_root, device_metadata).
  std::string plugins_dir;
  // --device-metadata-dir: where the metadata host files go instead of plugins_dir ("": there).
  std::string metadata_dir;
  bool device_metadata = false;
  std::optional<prepare::CpusetHook> cpuset_hook;  // the CPU driver's and CPU device plugin's
  // The device nodes a container of `gpu` gets (prepare::GpuDeviceNodes on a node, a fake in
  // tests). Called for the published GPUs only; null: none.
  std::function<std::vector<cdi::DeviceNode>(const topology::Gpu&)> gpu_nodes;
};

class Inventory {
 public:
  Inventory() = default;
  static Inventory Build(const InventoryOptions& options, topology::Topology topo,
                         std::vector<publish::ReservedDevices> held);

  const topology::Topology& topology() const { return topo_; }
  // The CPU pool always; the GPU pool when GPUs are on and the machine has any.
  const std::vector<publish::Pool>& pools() const { return *pools_; }
  std::optional<publish::Pool> PoolOf(const std::string& driver) const;
  // The pool itself, shared (null when none): the publishers keep it without copying it, which
  // at 1024 CPUs was a tenth of the node's assembly.
  std::shared_ptr<const publish::Pool> SharedPool(const std::string& driver) const;
  std::optional<publish::Pool> CpuPool() const { return PoolOf(options_.publish.cpu_driver); }
  std::optional<publish::Pool> GpuPool() const { return PoolOf(options_.publish.gpu_driver); }
  // A GPU driver is served when its pool has a device at start.
  bool ServesGpus() const;

  // The published GPUs, device name -> GPU.
  std::map<std::string, topology::Gpu> PublishedGpus() const;

  prepare::DriverSetup CpuSetup() const;
  // The CPUs of each published CPU device (publish::CpuDeviceCpus): CpuSetup's devices without
  // the rest of the setup, for the health board at every republish. Made once per inventory, as
  // both need it; the reference lives as long as this inventory (and not past a move from it).
  const std::map<std::string, CpuSet>& CpuDevices() const { return *cpu_devices_; }
  prepare::DriverSetup GpuSetup() const;
  deviceplugin::ResourceSetup DevicePluginSetup(deviceplugin::ResourceKind kind,
                                                const std::string& resource) const;
  // The devices each reservation's name marks in the pools (what owners' claims select).
  std::map<std::string, std::vector<reservation::DeviceRef>> ReservedDevices() const;
  // For the reservation controller (no device-node lookups: it asks at every pass).
  reservation::NodeContext ReservationContext() const;

  // Same pools: nothing a consumer sees differs.
  bool SamePools(const Inventory& other) const { return *pools_ == *other.pools_; }

 private:
  // DriverSetup::metadata_root, metadata_former_roots, device_metadata and device_attributes of
  // setup->driver.
  void AddMetadataSetup(prepare::DriverSetup* setup) const;
  // The pool itself, not a copy (PoolOf's): null when none. At 4096 CPUs a copy of the CPU pool
  // was a tenth of the node's assembly.
  const publish::Pool* FindPool(const std::string& driver) const;

  InventoryOptions options_;  // publish.reservations: the held devices
  topology::Topology topo_;
  // Shared, never changed once built: a copy of the inventory (Node::inventory) and the
  // publishers share them. A moved-from inventory holds null here: it must not be used.
  std::shared_ptr<const std::vector<publish::Pool>> pools_ =
      std::make_shared<const std::vector<publish::Pool>>();
  std::shared_ptr<const std::map<std::string, CpuSet>> cpu_devices_ =
      std::make_shared<const std::map<std::string, CpuSet>>();
};

// What reservations hold, as publishing marks it.
std::vector<publish::ReservedDevices> ToPublish(const std::vector<reservation::Held>& held);

}  // namespace topodra::node
