// What this node publishes: the devices of each driver's pool, as a pure function of the topology
// and the publishing options. Names and attributes follow kubernetes-sigs/dra-driver-cpu (spec
// §4.3) so DeviceClasses and claims written for it work unchanged.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/publish/names.h"  // kReservationAttribute, kReservationTaintKey
#include "driver/publish/slice_model.h"
#include "topology/topology.h"

namespace topodra::publish {

enum class CpuDeviceMode { kGrouped, kIndividual };
enum class GroupBy { kNuma, kSocket, kMachine };

// CPUs and GPUs held for a Reservation: they leave the shared devices and are published marked
// with the reservation's name, so only its owners' claims select them.
struct ReservedDevices {
  std::string name;            // the Reservation's name (a DNS subdomain of at most 63 characters)
  CpuSet cpus;                 // held CPUs
  std::set<std::string> gpus;  // held GPUs, PCI bus ids
  std::string since;           // RFC 3339: the taints' timeAdded, stable across restarts
  bool operator==(const ReservedDevices&) const = default;
};

struct PublishOptions {
  std::string node_name;
  std::string cpu_driver = "dra.cpu";
  std::string gpu_driver = "gpu.topodra.io";
  CpuDeviceMode cpu_mode = CpuDeviceMode::kGrouped;
  GroupBy group_by = GroupBy::kNuma;
  CpuSet reserved_cpus;
  bool gpus = true;  // --gpus=auto (true) | none
  // GPUs currently unhealthy, PCI bus id -> cause (a label value, health::GpuProblemName):
  // published with a NoSchedule taint kUnhealthyTaintKey = cause until they recover.
  std::map<std::string, std::string> unhealthy_gpus;
  // Grouped mode: each reservation with a usable CPU gets one device of its own
  // (ReservationCpuDeviceName) and its CPUs leave the group devices. Individual mode and GPUs:
  // the held devices keep their names. Either way they carry kReservationAttribute = name and,
  // when reservation_taints, a NoSchedule taint kReservationTaintKey = name. Offline CPUs and
  // --reserved-cpus are never published, held or not.
  std::vector<ReservedDevices> reservations;
  bool reservation_taints = true;  // also taint reserved devices (NoSchedule)
  // CPU devices carry resource.kubernetes.io/pcieRoot as a `strings` list: the PCIe roots local
  // to the device's CPUs (DRAListTypeAttributes; the publisher strips lists for servers without
  // them). The list is cut to the 48-values budget of a device; GPUs keep the scalar string.
  bool pcie_root_lists = false;
  // CPU devices map to the node's `cpu` allocatable (DRANodeAllocatableResources), in the 1.37
  // field nodeAllocatableResources: grouped devices by their consumed dra.cpu/cpu capacity,
  // individual devices one CPU each. The publisher converts to the 1.36 shape or strips it.
  bool node_allocatable = false;
};

// Parsers for flag values; errors name the bad value and the accepted ones.
absl::StatusOr<CpuDeviceMode> ParseCpuDeviceMode(const std::string& s);
absl::StatusOr<GroupBy> ParseGroupBy(const std::string& s);  // numa | numanode | socket | machine
const char* CpuDeviceModeName(CpuDeviceMode m);
const char* GroupByName(GroupBy g);

// Checks the options against the API's name rules (driver names, node name) and the topology
// (reserved CPUs must exist); a bad flag is reported before anything is published. Reservations:
// names must be DNS subdomains of at most 63 characters and distinct (also as CPU device
// names), since empty or RFC 3339, CPUs must exist on the node, and no CPU or GPU may be held
// by two reservations. BuildPools copes with options that fail here (a CPU or GPU held twice
// goes to the reservation whose device name sorts first) but the result is not meaningful.
absl::Status ValidateOptions(const PublishOptions& opts, const topology::Topology& topo);

// The CPU pool (always) and the GPU pool (when GPUs are enabled and the node has any).
// A pool may have no devices (everything reserved): it is still published, empty, so stale
// slices are replaced.
std::vector<Pool> BuildPools(const topology::Topology& topo, const PublishOptions& opts);

// The CPUs behind each CPU device BuildPools publishes, by device name: one CPU per individual
// device, the group's usable (online, unreserved, not held) CPUs per grouped device, and a
// reservation's usable CPUs per reservation device.
std::map<std::string, CpuSet> CpuDeviceCpus(const topology::Topology& topo,
                                            const PublishOptions& opts);

// Device names are stable for a machine: CPU devices are numbered over every online CPU (SMT
// siblings adjacent), GPUs are named from their PCI bus id.
std::string GpuDeviceName(const topology::Gpu& gpu);

// True for display controllers that are not compute GPUs (server BMC framebuffers).
bool IsBmcDisplay(const topology::Gpu& gpu);

}  // namespace topodra::publish
