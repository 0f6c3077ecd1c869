// cgroupfs I/O for the cpuset controller: find the hierarchy, list the kubelet's pod cgroups,
// read and write cpuset.cpus and cpuset.mems. Plain file I/O (no libcgroup needed for this little),
// behind an interface so the reconciler is tested on fake trees in temporary directories.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/cgroup/layout.h"
#include "topology/cpuset.h"

namespace topodra::cgroup {

// Where the cpuset controller lives under `cgroup_root` (default /sys/fs/cgroup):
//   v2: cgroup_root itself when it has cgroup.controllers listing "cpuset";
//   v1: cgroup_root/cpuset (or a mount whose name lists cpuset, e.g. cpuset,cpu).
// NotFound naming what was looked at otherwise.
struct Hierarchy {
  Version version = Version::kV2;
  std::string root;  // absolute directory of the hierarchy
};
absl::StatusOr<Hierarchy> FindHierarchy(const std::string& cgroup_root);

// The memory nodes the hierarchy's root cpuset gives its children: v1 the root's cpuset.mems,
// v2 cpuset.mems.effective (the root cgroup has no cpuset.mems). The error names the file.
absl::StatusOr<CpuSet> RootMems(const Hierarchy& hierarchy);

class CgroupFs {
 public:
  virtual ~CgroupFs() = default;
  // Every cgroup of the pod hierarchy (Classify accepts) with its cpuset.cpus, parents first;
  // with `mems`, also each one's cpuset.mems (Observed::mems, nullopt where it cannot be read).
  virtual absl::StatusOr<std::vector<Observed>> Scan(bool mems) = 0;
  absl::StatusOr<std::vector<Observed>> Scan() { return Scan(false); }
  // Writes `file` of `relative_path`; the error names the path and the ids.
  virtual absl::Status Write(const std::string& relative_path, CpusetFile file,
                             const CpuSet& ids) = 0;
  absl::Status WriteCpus(const std::string& relative_path, const CpuSet& cpus) {
    return Write(relative_path, CpusetFile::kCpus, cpus);
  }
  absl::Status WriteMems(const std::string& relative_path, const CpuSet& nodes) {
    return Write(relative_path, CpusetFile::kMems, nodes);
  }
};

// Whether Scan (and the reconciler's inotify watches) look inside the directory at
// `relative_path`: only paths under a kubepods root ("kubepods.slice", "kubepods"), a container
// (for crun's "container" subgroup) but not its children (what a container nests inside its
// cgroup is not the kubelet's), at most 8 deep.
bool DescendsInto(std::string_view relative_path);

// The real thing on `hierarchy`. On v2, a cgroup whose cpuset controller is not enabled
// (no cpuset.cpus file) is skipped by Scan.
std::unique_ptr<CgroupFs> NewCgroupFs(Hierarchy hierarchy);

}  // namespace topodra::cgroup
