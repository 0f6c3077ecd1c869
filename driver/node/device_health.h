// The node's device health (driver/health) wired to the machine: reads the GPUs' sysfs facts
// under --host-root whenever the machine watch looks at the machine, tells the inventory which
// GPUs to taint, and hands each DRA driver's health board the devices' state for the kubelet's
// health streams (which send a change at once).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "driver/health/board.h"
#include "driver/health/health.h"
#include "driver/health/pci_sysfs.h"
#include "driver/node/config.h"
#include "driver/node/inventory.h"
#include "topology/topology.h"

namespace topodra::node {

class DeviceHealth {
 public:
  explicit DeviceHealth(const NodeConfig& config);

  // I/O (sysfs): the verdict on every GPU of `topo` that could be published. Call it outside
  // the node's lock. A simulated machine (--topology-file, --synthetic-topology) on the real
  // host root has no sysfs of its own: nothing is read, every GPU is healthy. With another
  // --host-root (a prepared tree, as in tests) the tree is read.
  std::map<std::string, health::Verdict> Assess(const topology::Topology& topo);
  // PCI bus id -> cause of the unhealthy ones, for PublishOptions::unhealthy_gpus.
  static std::map<std::string, std::string> Unhealthy(
      const std::map<std::string, health::Verdict>& verdicts);
  // The devices of `inv` with their health onto the boards; logs what changed. Called by one
  // thread at a time (under the node's publish lock).
  void Publish(const Inventory& inv, const std::map<std::string, health::Verdict>& verdicts);

  health::Board* board(const std::string& driver) { return &boards_[driver]; }

 private:
  const std::string cpu_driver_, gpu_driver_, node_;
  const bool individual_cpus_;
  const bool real_root_;
  std::unique_ptr<health::PciFactsSource> pci_;
  health::Tracker tracker_;
  std::map<std::string, health::Board> boards_;  // driver -> its devices' health
  // driver -> device -> healthy, for the log.
  std::map<std::string, std::map<std::string, bool>> last_;
};

}  // namespace topodra::node
