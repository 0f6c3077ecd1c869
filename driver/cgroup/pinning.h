// From the node's allocations and the hook's records to the reconciler's Target: which CPUs the
// shared pool has and which container holds which claim's CPUs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

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
  // The container's cgroup relative to the cpuset hierarchy, as the hook found it in
  // /proc/<pid>/cgroup; empty if the record has none.
  std::string cgroup;
  absl::Time written = absl::InfinitePast();  // the file's modification time
  bool operator==(const HookRecord&) const = default;
};

// Every well-formed record in `dir` (files "<container>_<claim>.json"); others are skipped.
// A missing directory has none.
std::vector<HookRecord> ReadRecords(const std::string& dir);

// How long a record whose container cgroup is not there is kept. The hook writes the record
// while the runtime is still creating the container (the hook may take up to its 10 s timeout,
// and the daemon may look at the tree in the middle of it), so a young record without its cgroup
// may be a container about to run: 3x the hook's timeout covers that. It is also well under the
// kubelet's crash-loop back-off (10 s, doubling up to 5 min), so a container that keeps
// restarting leaves at most 3 records of gone containers (those of the last 30 s) instead of one
// more per restart for as long as its claim lives.
inline constexpr absl::Duration kGoneContainerGrace = absl::Seconds(30);

// Pure. The files of the records whose container is gone: the record names its cgroup,
// `cgroup_exists(cgroup)` is false, and it was written at least `grace` before `now`. Records
// without a cgroup (or with one that is not a plain relative path) are never reported: nothing
// says their container is gone.
std::vector<std::string> GoneContainerRecords(
    const std::vector<HookRecord>& records,
    const std::function<bool(const std::string& cgroup)>& cgroup_exists, absl::Time now,
    absl::Duration grace = kGoneContainerGrace);

// ReadRecords(dir) without the records of containers that are gone (GoneContainerRecords, with
// the cgroups looked up under `hierarchy_root`, the cpuset hierarchy's absolute directory), whose
// files are deleted. With no directory at `hierarchy_root` nothing is deleted: a cgroup mount
// that went away says nothing about the containers.
std::vector<HookRecord> ReadLiveRecords(const std::string& dir, const std::string& hierarchy_root,
                                        absl::Time now);

// --numa-memory=claim: what BuildTarget needs to give the containers of claims their NUMA nodes.
struct NumaMemory {
  CpuSet all;                             // the machine's memory nodes (RootMems)
  std::vector<topology::NumaNode> nodes;  // which CPUs are local to which node
};

// Pure. The memory nodes of the containers of a claim holding `cpus`: `recorded`
// (Allocation::mems, what prepare chose) when set, else the nodes local to `cpus`; always within
// memory.all (a node the root cpuset does not give would fail every write up the tree). Empty:
// nothing known, the containers are not narrowed.
CpuSet ClaimMems(const CpuSet& cpus, const CpuSet& recorded, const NumaMemory& memory);

// Pure. shared = online - every allocation's CPUs, and - reserved only when `strict_reservation`
// (--strict-cpu-reservation; as prepare::SharedPool, which the fail-closed check uses: the
// kubelet's static CPU manager keeps reserved CPUs shared). A record counts while its claim
// holds CPUs (a prepared DRA claim with that UID, or a device-plugin allocation with that id),
// with the CPUs the claim holds now; the files of the others are returned in `stale` (their
// claim was unprepared: the container is gone or about to be).
// With `memory` (--numa-memory=claim): all_mems = memory->all, and each container holding
// claims gets the union of its claims' ClaimMems, unless one of them has none (then it keeps
// every node: memory the kernel may place anywhere is the safe side of an unknown).
Target BuildTarget(const CpuSet& online, const CpuSet& reserved, bool strict_reservation,
                   const state::State& held, const std::vector<HookRecord>& records,
                   std::vector<std::string>* stale, const NumaMemory* memory = nullptr);

}  // namespace topodra::cgroup
