// Device health as a pure function of machine facts: what sysfs says of each GPU (present,
// bound to a driver, its PCIe link, its fatal AER counters) and which CPUs are offline, in;
// per published device Healthy or Unhealthy with a message naming the cause, out. The parsers
// of the sysfs files are here too, so they are table-tested and fuzzed without a sysfs tree.
// Reading the files is pci_sysfs.h; handing the result to the kubelet's health streams is
// board.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "topology/cpuset.h"

namespace topodra::health {

// The kubelet cuts longer messages (ResourceHealthMessageMaxLength); ours never reach it.
inline constexpr size_t kMaxMessage = 1024;

// ---- sysfs parsers (outside input: strict, bounded, never throw)

// current_link_speed / max_link_speed: "16.0 GT/s PCIe", "8 GT/s", "2.5 GT/s" -> GT/s;
// "Unknown" (and "Unknown speed") -> 0, what the kernel writes for a link that is down.
absl::StatusOr<double> ParseLinkSpeed(const std::string& text);
// current_link_width / max_link_width: a decimal lane count, 0 for a link that is down.
absl::StatusOr<int> ParseLinkWidth(const std::string& text);

// aer_dev_fatal: one "<error name> <count>" line per error kind, then "TOTAL_ERR_FATAL <n>".
struct AerFatal {
  int64_t total = 0;
  std::vector<std::pair<std::string, int64_t>> nonzero;  // error kinds with a count, file order
  bool operator==(const AerFatal&) const = default;
};
absl::StatusOr<AerFatal> ParseAerFatal(const std::string& text);

// ---- facts

struct PciLink {
  double speed = 0;      // GT/s; 0: down or unknown
  int width = 0;         // lanes; 0: down
  double max_speed = 0;  // GT/s
  int max_width = 0;
  bool operator==(const PciLink&) const = default;
};

// What sysfs says of one GPU (/sys/bus/pci/devices/<bus id>).
struct GpuFacts {
  // The device directory exists. A GPU that leaves the bus leaves the topology too (the machine
  // watch rediscovers it), so a missing directory alone says nothing: health unknown.
  bool present = false;
  std::optional<std::string> driver;  // the bound driver's name; nullopt: none
  std::optional<PciLink> link;        // nullopt: no link attributes (not PCIe, or unreadable)
  std::optional<AerFatal> aer_fatal;  // nullopt: not AER capable
  // Files that exist but could not be read or parsed: named in the message, not a verdict.
  std::vector<std::string> unreadable;
  bool operator==(const GpuFacts&) const = default;
};

// ---- verdicts

// Why a GPU is unhealthy, as a label value: the value of its gpu.topodra.io/unhealthy taint.
enum class GpuProblem { kNone, kUnbound, kLinkDown, kLinkDegraded, kAerFatal };
const char* GpuProblemName(GpuProblem p);  // "", "unbound", "link-down", "link-degraded", ...

struct Verdict {
  bool healthy = true;
  GpuProblem problem = GpuProblem::kNone;
  std::string message;  // always set, at most kMaxMessage characters
  bool operator==(const Verdict&) const = default;
};

// One GPU. `facts` nullopt: this host shows no PCI devices in sysfs at all (a container without
// /sys, a test), so nothing is known and the GPU is taken as healthy; so is one whose directory
// is missing. The order of the checks is the order of severity: no driver, fatal AER errors,
// link down, fewer lanes than the link can train to. A link running below its maximum speed is
// healthy: GPUs lower the speed when idle to save power, so that alone says nothing.
Verdict AssessGpu(const std::string& bus_id, const std::optional<GpuFacts>& facts);

// One device as the health stream reports it.
struct DeviceStatus {
  std::string pool;
  std::string device;
  bool healthy = true;
  std::string message;
  bool operator==(const DeviceStatus&) const = default;
};

// The node's devices over time. Devices that leave the pool because their hardware went away
// (a CPU taken offline, a GPU removed from the bus) are still reported, Unhealthy, so the pods
// whose claims hold them see why; they are forgotten once the hardware is back.
//
// CPU devices: `cpu_devices` are the published devices and their CPUs now. A device is
// Unhealthy while any CPU it has ever been published with is offline: an individual device's
// one CPU, or (after the names shifted, since individual devices are numbered over the online
// CPUs) a CPU it had. A group whose CPUs went offline stays Healthy, its capacity shrunk, and
// says so in its message.
class Tracker {
 public:
  struct Input {
    std::string pool;                             // the node name (both pools)
    std::map<std::string, CpuSet> cpu_devices;    // published CPU devices -> their CPUs
    bool individual_cpus = false;                 // one CPU per device
    CpuSet offline;                               // present but offline CPUs
    std::map<std::string, std::string> gpus;      // published GPU devices -> PCI bus id
    std::map<std::string, Verdict> gpu_verdicts;  // by PCI bus id; missing: healthy
  };
  struct Output {
    std::vector<DeviceStatus> cpus;  // sorted by device name
    std::vector<DeviceStatus> gpus;
  };
  Output Update(const Input& in);

 private:
  std::map<std::string, CpuSet> cpus_seen_;       // device -> every CPU it was published with
  std::map<std::string, std::string> gpus_seen_;  // device -> PCI bus id
};

}  // namespace topodra::health
