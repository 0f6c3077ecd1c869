// From the node's allocations and the hook's records to the reconciler's Target: which CPUs the
// shared pool has and which container holds which claim's CPUs.
#pragma once

#include <string>
#include <vector>

#include "driver/cgroup/layout.h"
#include "driver/state/state.h"
#include "topology/cpuset.h"

namespace topodra::cgroup {

// One file the hook wrote: container `container` holds claim `claim` (a claim UID, or a
// device-plugin allocation id) with `cpus`.
struct HookRecord {
  std::string file;  // name in the records directory
  std::string container, claim;
  CpuSet cpus;
  bool operator==(const HookRecord&) const = default;
};

// Every well-formed record in `dir` (files "<container>_<claim>.json"); others are skipped.
// A missing directory has none.
std::vector<HookRecord> ReadRecords(const std::string& dir);

// Pure. shared = online - reserved - every allocation's CPUs. A record counts while its claim
// holds CPUs (a prepared DRA claim with that UID, or a device-plugin allocation with that id),
// with the CPUs the claim holds now; the files of the others are returned in `stale` (their
// claim was unprepared: the container is gone or about to be).
Target BuildTarget(const CpuSet& online, const CpuSet& reserved, const state::State& held,
                   const std::vector<HookRecord>& records, std::vector<std::string>* stale);

}  // namespace topodra::cgroup
