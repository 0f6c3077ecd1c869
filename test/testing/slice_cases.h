// The machines, CPU device modes and reservation cases every pool topodra can publish is checked
// in: the fake API server's validation (test/integration/slice_validation_test.cc) and the
// upstream 1.36 schemas (test/schema/) walk the same list, so neither can miss a case the other
// covers.
#pragma once

#include <string>
#include <vector>

#include "driver/publish/device_builder.h"
#include "test/testing/fixture_files.h"

namespace topodra::testing {

// 1024 CPUs: 2 packages x 4 NUMA nodes x 64 cores x 2 threads.
inline constexpr char kSynthetic1024[] = "pack:2 numa:4 core:64 pu:2";

// The machines the cases are built for: every fixture file, then kSynthetic1024.
inline std::vector<std::string> SliceMachines() {
  std::vector<std::string> machines = FixtureFiles();
  machines.push_back(kSynthetic1024);
  return machines;
}

struct SliceMode {
  publish::CpuDeviceMode mode;
  publish::GroupBy by;
  std::string name;
};

inline const std::vector<SliceMode>& SliceModes() {
  static const std::vector<SliceMode> kModes = {
      {publish::CpuDeviceMode::kGrouped, publish::GroupBy::kNuma, "numa"},
      {publish::CpuDeviceMode::kGrouped, publish::GroupBy::kSocket, "socket"},
      {publish::CpuDeviceMode::kGrouped, publish::GroupBy::kMachine, "machine"},
      {publish::CpuDeviceMode::kIndividual, publish::GroupBy::kNuma, "individual"},
  };
  return kModes;
}

// The online CPUs of each group of the mode, in group order (one group in individual mode).
inline std::vector<CpuSet> CpuGroups(const topology::Topology& t, publish::GroupBy by) {
  std::vector<CpuSet> out;
  if (by == publish::GroupBy::kNuma) {
    for (const topology::NumaNode& n : t.numa_nodes) out.push_back(n.cpus & t.online);
  } else if (by == publish::GroupBy::kSocket) {
    for (const topology::Package& p : t.packages) out.push_back(p.cpus & t.online);
  }
  if (out.empty() || by == publish::GroupBy::kMachine) out = {t.online};
  std::erase_if(out, [](const CpuSet& c) { return c.Empty(); });
  return out;
}

inline CpuSet AllButFirst(const CpuSet& cpus) {
  CpuSet rest = cpus;
  if (!cpus.Empty()) rest -= CpuSet{*cpus.begin()};
  return rest;
}

struct SliceCase {
  std::string name;
  publish::PublishOptions opts;
};

// The reservation cases of one machine and mode: none; --reserved-cpus leaving one CPU in the
// first group and in the last; a Reservation of one CPU; a Reservation of all but one CPU of the
// last group (its group and the reservation's device both keep the rest).
inline std::vector<SliceCase> SliceCasesFor(const topology::Topology& t, const SliceMode& m) {
  publish::PublishOptions base;
  base.cpu_mode = m.mode;
  base.group_by = m.by;
  const std::vector<CpuSet> groups = CpuGroups(t, m.by);
  std::vector<SliceCase> out;
  out.push_back({"nothing reserved", base});
  if (groups.empty()) return out;
  SliceCase first{"reserved-cpus leave one CPU in the first group", base};
  first.opts.reserved_cpus = AllButFirst(groups.front());
  if (first.opts.reserved_cpus != t.online) out.push_back(first);
  SliceCase last{"reserved-cpus leave one CPU in the last group and the first", base};
  last.opts.reserved_cpus = AllButFirst(groups.back()) | AllButFirst(groups.front());
  if (last.opts.reserved_cpus != t.online) out.push_back(last);
  SliceCase one{"a Reservation of one CPU", base};
  one.opts.reservations = {{"one.cpu", CpuSet{*groups.front().begin()}, {}, ""}};
  out.push_back(one);
  SliceCase most{"a Reservation leaves one CPU in the last group", base};
  most.opts.reservations = {{"most", AllButFirst(groups.back()), {}, "2025-03-01T09:00:00Z"}};
  if (!most.opts.reservations[0].cpus.Empty()) out.push_back(most);
  if (!t.pcie_roots.empty()) {
    // DRAListTypeAttributes: resource.kubernetes.io/pcieRoot as a `strings` list on CPU devices
    // (64 devices per slice, 48 values per device).
    SliceCase lists{"PCIe roots as lists", base};
    lists.opts.pcie_root_lists = true;
    out.push_back(lists);
  }
  return out;
}

}  // namespace topodra::testing
