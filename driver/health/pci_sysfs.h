// Reads the health facts of PCI devices from sysfs under a host root (the daemon's --host-root;
// a fake tree in tests): /sys/bus/pci/devices/<bus id>/{driver, current_link_speed,
// current_link_width, max_link_speed, max_link_width, aer_dev_fatal}. The one production
// implementation of PciFactsSource; tests build fake trees and point a PciSysfs at them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "driver/health/health.h"

namespace topodra::health {

class PciFactsSource {
 public:
  virtual ~PciFactsSource() = default;
  // Facts per bus id; nullopt when the host shows no PCI devices at all (no such directory):
  // then nothing is known of any device.
  virtual std::optional<std::map<std::string, GpuFacts>> Read(
      const std::vector<std::string>& bus_ids) = 0;
};

class PciSysfs final : public PciFactsSource {
 public:
  explicit PciSysfs(std::string host_root) : host_root_(std::move(host_root)) {}
  std::optional<std::map<std::string, GpuFacts>> Read(
      const std::vector<std::string>& bus_ids) override;

  // One device, for tests and the fuzz-free callers.
  GpuFacts ReadDevice(const std::string& devices_dir, const std::string& bus_id) const;

 private:
  std::string host_root_;
};

}  // namespace topodra::health
