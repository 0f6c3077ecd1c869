#include "driver/node/inventory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "driver/publish/names.h"
#include "driver/publish/slice_json.h"

namespace topodra::node {

Inventory Inventory::Build(const InventoryOptions& options, topology::Topology topo,
                           std::vector<publish::ReservedDevices> held) {
  Inventory inv;
  inv.options_ = options;
  inv.options_.publish.reservations = std::move(held);
  inv.topo_ = std::move(topo);
  inv.pools_ = std::make_shared<const std::vector<publish::Pool>>(
      publish::BuildPools(inv.topo_, inv.options_.publish));
  inv.cpu_devices_ = std::make_shared<const std::map<std::string, CpuSet>>(
      publish::CpuDeviceCpus(inv.topo_, inv.options_.publish));
  return inv;
}

const publish::Pool* Inventory::FindPool(const std::string& driver) const {
  for (const publish::Pool& p : *pools_) {
    if (p.driver == driver) return &p;
  }
  return nullptr;
}

std::shared_ptr<const publish::Pool> Inventory::SharedPool(const std::string& driver) const {
  const publish::Pool* p = FindPool(driver);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<const publish::Pool>(pools_, p);  // owns the pools, points at this one
}

std::optional<publish::Pool> Inventory::PoolOf(const std::string& driver) const {
  if (const publish::Pool* p = FindPool(driver)) return *p;
  return std::nullopt;
}

bool Inventory::ServesGpus() const {
  if (!options_.publish.gpus) return false;
  const publish::Pool* pool = FindPool(options_.publish.gpu_driver);
  return pool != nullptr && !pool->devices.empty();
}

std::map<std::string, topology::Gpu> Inventory::PublishedGpus() const {
  std::set<std::string> published;
  if (const publish::Pool* pool = FindPool(options_.publish.gpu_driver)) {
    for (const publish::Device& d : pool->devices) published.insert(d.name);
  }
  std::map<std::string, topology::Gpu> out;
  for (const topology::Gpu& gpu : topo_.gpus) {
    std::string name = publish::GpuDeviceName(gpu);
    if (published.contains(name)) out.emplace(std::move(name), gpu);
  }
  return out;
}

void Inventory::AddMetadataSetup(prepare::DriverSetup* setup) const {
  auto root_in = [&](const std::string& dir) {
    // "/" as the directory: no "//" the file check would not recognise as the same root.
    return absl::StrCat(absl::StripSuffix(dir, "/"), "/", setup->driver, "/",
                        prepare::kMetadataDirName);
  };
  const std::string& dir =
      options_.metadata_dir.empty() ? options_.plugins_dir : options_.metadata_dir;
  if (!dir.empty()) setup->metadata_root = root_in(dir);
  // The driver's own plugin directory is where an earlier run without --device-metadata-dir (the
  // default, and the chart's before it set one) wrote: whatever is there is ours to clean up.
  if (!options_.plugins_dir.empty() && dir != options_.plugins_dir) {
    setup->metadata_former_roots.push_back(root_in(options_.plugins_dir));
  }
  setup->device_metadata = options_.device_metadata;
  if (!setup->device_metadata) return;
  if (const publish::Pool* pool = FindPool(setup->driver)) {
    auto& out = setup->device_attributes;
    // Mostly in name order (individual CPUs up to cpudev999; grouped pools append reservation
    // devices): a hint that misses only costs a search.
    for (const publish::Device& d : pool->devices) {
      out.insert_or_assign(out.end(), d.name, publish::AttributesToJson(d.attributes));
    }
  }
}

prepare::DriverSetup Inventory::CpuSetup() const {
  const publish::PublishOptions& opts = options_.publish;
  prepare::DriverSetup setup;
  setup.cdi_marker = options_.cdi_marker;
  setup.driver = opts.cpu_driver;
  setup.kind = prepare::DriverKind::kCpu;
  setup.reserved = opts.reserved_cpus;
  setup.cpuset_hook = options_.cpuset_hook;
  setup.cpu_pool.name = opts.node_name;
  const claims::CpuDeviceKind kind =
      opts.cpu_mode == publish::CpuDeviceMode::kIndividual ? claims::CpuDeviceKind::kIndividual
      : opts.group_by == publish::GroupBy::kMachine        ? claims::CpuDeviceKind::kMachine
                                                           : claims::CpuDeviceKind::kGroup;
  std::set<std::string> reservation_devices;
  for (const publish::ReservedDevices& r : opts.reservations) {
    reservation_devices.insert(publish::ReservationCpuDeviceName(r.name));
  }
  for (const auto& [name, cpus] : CpuDevices()) {
    // A reservation's device is a group of its own in every grouped mode: topodra picks its
    // owners' CPUs inside it (or takes their opaque cpuset).
    const claims::CpuDeviceKind k =
        reservation_devices.contains(name) ? claims::CpuDeviceKind::kGroup : kind;
    setup.cpu_pool.devices.emplace_hint(setup.cpu_pool.devices.end(), name,
                                        claims::CpuDevice{k, cpus});
  }
  AddMetadataSetup(&setup);
  return setup;
}

prepare::DriverSetup Inventory::GpuSetup() const {
  prepare::DriverSetup setup;
  setup.cdi_marker = options_.cdi_marker;
  setup.driver = options_.publish.gpu_driver;
  setup.kind = prepare::DriverKind::kGpu;
  setup.gpu_pool = options_.publish.node_name;
  for (const auto& [name, gpu] : PublishedGpus()) {
    setup.gpus[name] =
        prepare::GpuDevice{gpu.pci_bus_id, options_.gpu_nodes ? options_.gpu_nodes(gpu)
                                                              : std::vector<cdi::DeviceNode>{}};
  }
  AddMetadataSetup(&setup);
  return setup;
}

deviceplugin::ResourceSetup Inventory::DevicePluginSetup(deviceplugin::ResourceKind kind,
                                                         const std::string& resource) const {
  const bool gpu = kind == deviceplugin::ResourceKind::kGpu;
  deviceplugin::ResourceSetup setup;
  setup.kind = kind;
  setup.resource = resource;
  setup.cdi_marker = options_.cdi_marker;
  if (!gpu) {
    // What CpuSetup says, without building it: its device metadata is most of a node's start.
    setup.reserved = options_.publish.reserved_cpus;
    setup.cpuset_hook = options_.cpuset_hook;
    return setup;
  }
  const prepare::DriverSetup dra = GpuSetup();
  for (const auto& [name, device] : dra.gpus) {
    setup.gpus[device.pci_bus_id] = device;
    if (auto u = options_.publish.unhealthy_gpus.find(device.pci_bus_id);
        u != options_.publish.unhealthy_gpus.end()) {
      setup.unhealthy.emplace(u->first, u->second);
    }
  }
  return setup;
}

std::map<std::string, std::vector<reservation::DeviceRef>> Inventory::ReservedDevices() const {
  std::map<std::string, std::vector<reservation::DeviceRef>> out;
  for (const publish::Pool& p : *pools_) {
    for (const publish::Device& d : p.devices) {
      auto it = d.attributes.find(publish::kReservationAttribute);
      if (it == d.attributes.end()) continue;
      if (const std::string* name = std::get_if<std::string>(&it->second)) {
        out[*name].push_back({p.driver, p.name, d.name});
      }
    }
  }
  return out;
}

reservation::NodeContext Inventory::ReservationContext() const {
  reservation::NodeContext ctx;
  ctx.topo = topo_;
  ctx.reserved_cpus = options_.publish.reserved_cpus;
  for (const auto& [name, gpu] : PublishedGpus()) ctx.gpus[name] = gpu.pci_bus_id;
  ctx.devices = ReservedDevices();
  return ctx;
}

std::vector<publish::ReservedDevices> ToPublish(const std::vector<reservation::Held>& held) {
  std::vector<publish::ReservedDevices> out;
  for (const reservation::Held& h : held) out.push_back({h.name, h.cpus, h.gpus, h.since});
  return out;
}

}  // namespace topodra::node
