// The machine as plain values: no hwloc types, no I/O. Everything above the discoverer
// (slice building, allocation, validation) works on this model, so it can be built by hand in
// tests or loaded from any hwloc source.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "topology/cpuset.h"

namespace topodra::topology {

inline constexpr int kNone = -1;

// How a core was classified from hwloc CPU kinds. Machines without kind information (most servers)
// report kUnknown for every CPU.
enum class CoreType { kUnknown, kPerformance, kEfficiency };
const char* CoreTypeName(CoreType t);

struct Package {
  int id = 0;  // OS index (physical package id)
  CpuSet cpus;
  bool operator==(const Package&) const = default;
};

struct NumaNode {
  int id = 0;  // OS index, as in /sys/devices/system/node/nodeN
  // CPUs whose home node this is (what Linux lists in nodeN/cpulist). Memory-only nodes such as
  // MCDRAM or CXL expanders have none even though hwloc gives them a locality.
  CpuSet cpus;
  CpuSet local_cpus;    // locality reported by hwloc; a superset of cpus
  std::string subtype;  // "MCDRAM", "HBM", "GPUMemory", ... ; empty for ordinary DRAM
  uint64_t memory_bytes = 0;
  bool operator==(const NumaNode&) const = default;
};

struct Cache {
  int level = 0;
  int id = 0;  // index among the caches of this level, in topology order
  uint64_t size_bytes = 0;
  CpuSet cpus;
  bool operator==(const Cache&) const = default;
};

struct Core {
  int id = 0;     // index in Topology::cores, in topology order (unique machine-wide)
  int os_id = 0;  // core id as the OS reports it; repeats across packages
  int package = kNone;
  int numa = kNone;  // NUMA node id of the core's CPUs
  int l3 = kNone;    // index into Topology::l3, kNone if the machine has no L3 above this core
  int l2 = kNone;
  CoreType type = CoreType::kUnknown;
  CpuSet cpus;  // online hardware threads
  bool operator==(const Core&) const = default;
};

struct CpuKind {
  int efficiency = kNone;  // hwloc ranking: higher is more performant; kNone when unknown
  CoreType type = CoreType::kUnknown;
  CpuSet cpus;
  std::map<std::string, std::string> infos;  // e.g. CoreType, FrequencyMaxMHz
  bool operator==(const CpuKind&) const = default;
};

struct OsDevice {
  std::string name;     // "card0", "renderD128", "nvml0", "cuda0", "opencl0d0"
  std::string kind;     // "gpu", "coproc", "dma", ... (hwloc OS device type)
  std::string subtype;  // "CUDA", "NVML", "OpenCL", ... when hwloc knows it
  bool operator==(const OsDevice&) const = default;
};

struct Gpu {
  std::string pci_bus_id;  // dddd:bb:dd.f
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t class_id = 0;  // 0x0300 VGA, 0x0302 3D, 0x0380 display
  std::string vendor_name;
  std::string device_name;
  std::string model;  // marketing name from an OS device (e.g. GPUModel), if any
  std::string uuid;
  int numa = kNone;  // kNone when the device is not attached below a single NUMA node
  CpuSet local_cpus;
  std::string pcie_root;  // "pci0000:00": domain and bus of the host bridge above it
  // The bridges above the GPU, from the host bridge down to the GPU's parent: first the host
  // bridge named like pcie_root ("pci0000:00"), then each PCI-to-PCI bridge by its own bus id
  // ("0000:17:00.0"), the switch ports included. Two GPUs behind the same PCIe switch share every
  // entry down to the switch's upstream port, so the length of the common prefix says how close
  // they are in the PCI tree. Empty when unknown (hand-built topologies); not part of the text or
  // JSON formats.
  std::vector<std::string> pci_path;
  uint64_t memory_bytes = 0;  // 0 when unknown
  std::vector<OsDevice> os_devices;
  bool operator==(const Gpu&) const = default;
};

// A PCI host bridge: the root of one PCIe hierarchy, named as sysfs names its directory
// (/sys/devices/pci0000:00) and as GPUs carry it in Gpu::pcie_root. Several host bridges may sit
// below one NUMA node or package; a bridge attached to the machine as a whole is local to every
// CPU.
struct PcieRoot {
  std::string name;   // "pci0000:00"
  CpuSet local_cpus;  // CPUs of the bridge's closest non-I/O ancestor (hwloc locality)
  int numa = kNone;   // when that locality is exactly one NUMA node
  bool operator==(const PcieRoot&) const = default;
};

struct Cpu {
  int id = 0;
  int core = kNone;  // index into Topology::cores
  bool operator==(const Cpu&) const = default;
};

struct Topology {
  std::vector<Package> packages;
  std::vector<NumaNode> numa_nodes;
  std::vector<Cache> l3;
  std::vector<Cache> l2;
  std::vector<Core> cores;
  std::vector<Cpu> cpus;  // online CPUs, sorted by id
  std::vector<CpuKind> cpu_kinds;
  std::vector<Gpu> gpus;  // sorted by PCI bus id
  // Host bridges with a device hwloc keeps (GPUs, NICs, storage, accelerators), sorted by name;
  // empty when the source has no PCI information.
  std::vector<PcieRoot> pcie_roots;
  CpuSet online;
  CpuSet offline;  // present but offline CPUs
  // NUMA latency matrix indexed by position in numa_nodes; empty when unknown.
  std::vector<std::vector<uint64_t>> numa_distances;
  std::string source;  // "live", "xml:<path>", "synthetic:<desc>"

  // Lookups. Unknown ids give kNone / empty sets rather than failing, so callers can pass values
  // from outside (claims, flags) without a separate existence check.
  const Cpu* FindCpu(int cpu) const;
  const Core* CoreOf(int cpu) const;
  int NumaOf(int cpu) const;
  int PackageOf(int cpu) const;
  int L3Of(int cpu) const;
  CpuSet SmtSiblings(int cpu) const;  // all threads of the CPU's core, the CPU included
  CpuSet CpusOfNuma(int numa_id) const;
  CpuSet CpusOfPackage(int package_id) const;
  CpuSet CpusOfL3(int l3_index) const;
  const NumaNode* FindNuma(int numa_id) const;
  const Package* FindPackage(int package_id) const;
  // Distance between two NUMA nodes by OS id, if the machine reported distances.
  std::optional<uint64_t> NumaDistance(int from_id, int to_id) const;
  // Names of the PCIe roots local to any of these CPUs, sorted.
  std::vector<std::string> PcieRootsNear(const CpuSet& cpus) const;
  // Largest number of hardware threads on any core.
  int MaxThreadsPerCore() const;

  // Rebuilds derived indexes after the vectors were filled; the discoverer and hand-built test
  // topologies both call it.
  void Finalize();

  // Every field, the derived index included (it follows from cpus once Finalize ran): a
  // rediscovery compares the machine it found with the one the daemon runs on.
  bool operator==(const Topology&) const = default;

 private:
  std::vector<int> cpu_index_;  // cpu id -> position in cpus, -1 where absent
};

}  // namespace topodra::topology
