// The OCI hook that puts a container holding a CPU claim on the claim's CPUs: what it computes,
// as pure functions with nothing but the standard library, because the hook binary runs on the
// host (runc/crun call it from the CDI spec) where none of the daemon's libraries may exist.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace topodra::cgroup::hook {

// "0-3,8" -> {0,1,2,3,8}; nullopt for anything that is not a Linux CPU list (empty is empty).
std::optional<std::set<int>> ParseList(std::string_view text);
std::string FormatList(const std::set<int>& cpus);

// The container's cgroup, relative to the cpuset hierarchy, from /proc/<pid>/cgroup: the v2 line
// "0::/path" when `v2`, else the v1 line whose controllers include "cpuset". No leading '/'.
std::optional<std::string> CpusetCgroupOf(std::string_view proc_cgroup, bool v2);

// The directories from the hierarchy root down to `relative` that must also hold the claim's
// CPUs before the container's own cpuset can: every ancestor below the root, parents first
// ("kubepods.slice", "kubepods.slice/kubepods-pod...slice"), the container itself last.
std::vector<std::string> Chain(const std::string& relative);

// The record the daemon reads to keep the container on its CPUs (one JSON object per file);
// "mems" (the claim's memory nodes) only when not empty.
std::string RecordJson(const std::string& container_id, const std::string& claim_uid,
                       const std::string& cpus, const std::string& cgroup,
                       const std::string& mems = "");

// The memory nodes a container gets from the records of its claims: the union of their
// "mems", or nullopt when any record has none (a claim prepared without --numa-memory=claim, or
// by an older daemon): then the container's cpuset.mems is left as it is.
std::optional<std::set<int>> UnionMems(const std::vector<std::optional<std::set<int>>>& records);

}  // namespace topodra::cgroup::hook
