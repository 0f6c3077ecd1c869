// Which CPUs every cgroup of the kubelet's pod hierarchy must have, and in which order to write
// them: pure (paths and CPU sets in, writes out), for cgroup v1 (the cpuset controller's own
// hierarchy) and v2 (the unified one), with the kubelet's systemd and cgroupfs drivers.
//
// Layouts recognised (paths relative to the cpuset hierarchy's root, e.g. /sys/fs/cgroup on v2,
// /sys/fs/cgroup/cpuset on v1):
//   systemd:  kubepods.slice/[kubepods-{burstable,besteffort}.slice/]
//             kubepods[-{burstable,besteffort}]-pod<uid with _ for ->.slice/
//             {cri-containerd-<id>.scope | crio-<id>.scope | crio-conmon-<id>.scope |
//             docker-<id>.scope | libpod-<id>.scope | libpod-conmon-<id>.scope}
//             [/container]
//   cgroupfs: kubepods/[{burstable,besteffort}/]pod<uid>/{<id> | crio-<id> | crio-conmon-<id> |
//             libpod-<id>}
// Guaranteed pods sit right under kubepods; burstable and besteffort pods under their QoS
// cgroup. Anything else (system.slice, the QoS cgroups' other children, ...) is not ours, and
// neither is a non-default --cgroup-root (kind's kubelet.slice/kubelet-kubepods.slice/...).
//   - <uid>: an RFC 4122 UUID as the API server assigns, or the 32 hex digits the kubelet gives
//     a static pod whose manifest has none.
//   - <id>: letters and digits (the runtimes use 64 hex), at most 128.
//   - "<scope>/container": crun's sub-cgroup on cgroup v2 with the systemd driver (its
//     run.oci.systemd.subgroup default), where the container's processes are; the same
//     container as its scope.
//   - crio-conmon-<id>: CRI-O's container monitor (conmon_cgroup = "pod"), classified as a
//     container with id "conmon-<id>": no claim has that id, so conmon stays on the shared CPUs.
//     The same for podman's libpod-conmon-<id>.scope (systemd driver; with cgroupfs podman puts
//     conmon in "conmon" beside the containers, a container id no claim has either).
//   - libpod-<id>: a container podman runs with --cgroup-parent set to a pod cgroup, as the
//     runtime test does (the kubelet never creates these, but such a container holds claims
//     through CDI like the kubelet's).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/cpuset.h"
#include "topology/topology.h"

namespace topodra::cgroup {

enum class Version { kV1, kV2 };
enum class Driver { kSystemd, kCgroupfs };
enum class Level { kKubepods, kQos, kPod, kContainer };

struct Node {
  std::string path;  // relative, no leading or trailing '/'
  Level level = Level::kKubepods;
  Driver driver = Driver::kCgroupfs;
  std::string pod_uid;       // kPod, kContainer: with dashes ("1b2c-..."), as in the API
  std::string container_id;  // kContainer: the runtime's id (64 hex for containerd/CRI-O)
  bool operator==(const Node&) const = default;
};

// nullopt for a path outside the kubelet's pod hierarchy or not matching a layout above.
std::optional<Node> Classify(std::string_view relative_path);

// One cgroup as found on the machine.
struct Observed {
  Node node;
  CpuSet cpus;  // its cpuset.cpus now (v2: may be empty, meaning "the parent's")
  // Its cpuset.mems now (v2: may be empty, "the parent's"); nullopt when not read (no file, or
  // the scan was not asked for it): then Plan never writes its mems.
  std::optional<CpuSet> mems;
};

// The cpuset file a write goes to. Both are lists of ids (CPUs, NUMA nodes) under the same
// parent/child rules, so one CpuSet type carries either.
enum class CpusetFile { kCpus, kMems };
const char* FileName(CpusetFile file);  // "cpuset.cpus", "cpuset.mems"

struct Write {
  std::string path;  // relative
  CpuSet cpus;       // the ids written: CPUs for kCpus, NUMA nodes for kMems
  CpusetFile file = CpusetFile::kCpus;
  bool operator==(const Write&) const = default;
};

struct Target {
  CpuSet online;  // every online CPU: kubepods and the QoS cgroups get these
  // online - every prepared claim (- reserved with --strict-cpu-reservation): every other
  // container's CPUs
  CpuSet shared;
  // Containers that hold a claim, by container id: exactly these CPUs.
  std::map<std::string, CpuSet> exclusive;
  // --numa-memory=claim: the machine's memory nodes (the cpuset root's mems), which every
  // cgroup gets except the containers in exclusive_mems. Empty: cpuset.mems is not managed (no
  // mems writes at all, --numa-memory=none).
  CpuSet all_mems;
  // Containers whose claims name their NUMA nodes, by container id: exactly these nodes (the
  // union over the container's claims, within all_mems).
  std::map<std::string, CpuSet> exclusive_mems;
};

// Pure. The NUMA nodes whose CPUs include any of `cpus` (the nodes "local" to them); CPUs on no
// node (a topology without NUMA information) add nothing.
CpuSet NumaNodesOf(const std::vector<topology::NumaNode>& nodes, const CpuSet& cpus);

// The cpuset.mems each observed cgroup must have: a container in exclusive_mems its nodes,
// every other cgroup (kubepods, QoS, pods, containers without claims) all_mems.
CpuSet DesiredMems(const Node& node, const Target& target);

// The cpuset.cpus each observed cgroup must have:
//   kubepods, QoS:  online
//   pod:            shared | the exclusive CPUs of its containers
//   container:      its exclusive CPUs if it holds a claim, else shared
CpuSet Desired(const Node& node, const Target& target,
               const std::map<std::string, CpuSet>& exclusive_by_pod);

// The writes that take `tree` to the desired state, in an order every step of which cgroup v1
// accepts (a child's CPUs always within its parent's, given a tree that obeys it now): first,
// top-down (by depth, then path), each cgroup that must gain CPUs gets current | desired (an
// empty current, v2's "the parent's", always must); then, bottom-up (deepest first, then path),
// each cgroup not yet equal to desired gets desired. Cgroups already right are not written, and
// no write is empty: a cgroup whose Desired is empty (an empty shared pool, which the daemon
// never creates, or an empty claim) is left as it is, and its ancestors keep its CPUs. Pods'
// exclusive CPUs come from the containers in `tree`; claims of containers not in it are
// ignored. Paths listed twice count once (the first). Deterministic for a given set of
// cgroups, whatever their order in `tree`. Expects shared and exclusive CPUs within online.
//
// With target.all_mems set, the same two phases for cpuset.mems (DesiredMems) follow the
// cpus writes, over the cgroups whose mems were observed: v1 holds a child's mems within its
// parent's as it does CPUs, widening goes parent-first and narrowing child-first, and nothing
// is ever written empty, so no cgroup is left with neither CPUs nor memory nodes in between.
std::vector<Write> Plan(const std::vector<Observed>& tree, const Target& target);

}  // namespace topodra::cgroup
