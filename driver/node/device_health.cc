#include "driver/node/device_health.h"

#include <spdlog/spdlog.h>

#include <vector>

namespace topodra::node {

DeviceHealth::DeviceHealth(const NodeConfig& config)
    : cpu_driver_(config.publish.cpu_driver),
      gpu_driver_(config.publish.gpu_driver),
      node_(config.publish.node_name),
      individual_cpus_(config.publish.cpu_mode == publish::CpuDeviceMode::kIndividual),
      real_root_(config.host_root.find_first_not_of('/') == std::string::npos),
      pci_(std::make_unique<health::PciSysfs>(config.host_root)) {
  boards_[cpu_driver_];
  boards_[gpu_driver_];
}

std::map<std::string, health::Verdict> DeviceHealth::Assess(const topology::Topology& topo) {
  std::vector<std::string> ids;
  for (const topology::Gpu& g : topo.gpus) {
    if (!publish::IsBmcDisplay(g)) ids.push_back(g.pci_bus_id);
  }
  std::map<std::string, health::Verdict> out;
  if (ids.empty()) return out;
  std::optional<std::map<std::string, health::GpuFacts>> facts;
  if (topo.source == "live" || !real_root_) facts = pci_->Read(ids);
  for (const std::string& id : ids) {
    std::optional<health::GpuFacts> f;
    if (facts) f = facts->at(id);
    out[id] = health::AssessGpu(id, f);
  }
  return out;
}

std::map<std::string, std::string> DeviceHealth::Unhealthy(
    const std::map<std::string, health::Verdict>& verdicts) {
  std::map<std::string, std::string> out;
  for (const auto& [id, v] : verdicts) {
    if (!v.healthy) out[id] = health::GpuProblemName(v.problem);
  }
  return out;
}

void DeviceHealth::Publish(const Inventory& inv,
                           const std::map<std::string, health::Verdict>& verdicts) {
  health::Tracker::Input in;
  in.pool = node_;
  in.cpu_devices = inv.CpuDevices();
  in.individual_cpus = individual_cpus_;
  in.offline = inv.topology().offline;
  for (const auto& [name, gpu] : inv.PublishedGpus()) in.gpus[name] = gpu.pci_bus_id;
  in.gpu_verdicts = verdicts;
  health::Tracker::Output out = tracker_.Update(in);
  // State changes are worth a line each; the periodic re-reads that change nothing are not.
  for (const auto& [driver, list] : {std::pair{cpu_driver_, &out.cpus}, {gpu_driver_, &out.gpus}}) {
    std::map<std::string, bool>& last = last_[driver];
    for (const health::DeviceStatus& d : *list) {
      auto it = last.lower_bound(d.device);
      const bool seen = it != last.end() && it->first == d.device;
      if (seen && it->second == d.healthy) continue;
      if (!d.healthy) {
        spdlog::warn("driver {}: device {} is unhealthy: {}", driver, d.device, d.message);
      } else if (seen) {
        spdlog::info("driver {}: device {} is healthy again: {}", driver, d.device, d.message);
      }
      if (seen) {
        it->second = d.healthy;
      } else {
        last.emplace_hint(it, d.device, d.healthy);
      }
    }
  }
  boards_[cpu_driver_].Set(std::move(out.cpus));
  boards_[gpu_driver_].Set(std::move(out.gpus));
}

}  // namespace topodra::node
