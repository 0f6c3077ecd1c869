#include "driver/cgroup/layout.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace topodra::cgroup {
namespace {

// Well above anything the kubelet produces (a systemd container scope under a burstable pod is
// about 200 bytes), and PATH_MAX for the whole relative path.
constexpr std::size_t kMaxIdLength = 128;
constexpr std::size_t kMaxPathLength = 4096;

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool IsAlnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// The API server gives pods RFC 4122 UUIDs (8-4-4-4-12 hex); the kubelet gives a static pod
// whose manifest has no uid the hex MD5 of its source (32 hex, no dashes). A static pod's
// manifest could name any uid, but nothing else is accepted: a directory that merely starts
// with "pod" is not taken for a pod.
bool IsPodUid(std::string_view uid) {
  if (uid.size() == 32) return std::all_of(uid.begin(), uid.end(), IsHex);
  if (uid.size() != 36) return false;
  for (std::size_t i = 0; i < uid.size(); ++i) {
    const bool dash_here = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_here ? uid[i] != '-' : !IsHex(uid[i])) return false;
  }
  return true;
}

// containerd, CRI-O and Docker all use 64 hex digits. Anything alphanumeric is accepted so that
// test rigs with short ids work, but never '-' (or '.'), which keeps "crio-<id>" and
// "crio-conmon-<id>" unambiguous on the cgroupfs driver, where a containerd or Docker container
// is its bare id.
bool IsContainerId(std::string_view id) {
  return !id.empty() && id.size() <= kMaxIdLength && std::all_of(id.begin(), id.end(), IsAlnum);
}

// `text` = prefix + middle + suffix: middle, or nullopt.
std::optional<std::string_view> Between(std::string_view text, std::string_view prefix,
                                        std::string_view suffix) {
  if (text.size() < prefix.size() + suffix.size()) return std::nullopt;
  if (!text.starts_with(prefix) || !text.ends_with(suffix)) return std::nullopt;
  return text.substr(prefix.size(), text.size() - prefix.size() - suffix.size());
}

// The systemd driver escapes the uid's '-' as '_' because '-' is systemd's slice separator.
std::optional<std::string> SystemdPodUid(std::string_view escaped) {
  std::string uid(escaped);
  for (char& c : uid) {
    if (c == '-') return std::nullopt;  // would be a deeper slice, not a uid
    if (c == '_') c = '-';
  }
  if (!IsPodUid(uid)) return std::nullopt;
  return uid;
}

// A container cgroup's name below a systemd pod slice: its container id, or nullopt.
// CRI-O's conmon (with conmon_cgroup = "pod", the default) gets a scope of its own in the pod
// slice. It is the container's monitor, not the container, so it is given the id
// "conmon-<id>", which never holds a claim: conmon runs on the shared CPUs even when its
// container is exclusive, instead of competing with the workload on the claimed ones.
// Podman names the same pair "libpod-<id>.scope" and "libpod-conmon-<id>.scope".
std::optional<std::string> SystemdContainerId(std::string_view name) {
  for (std::string_view conmon : {"crio-conmon-", "libpod-conmon-"}) {
    if (auto id = Between(name, conmon, ".scope"); id && IsContainerId(*id)) {
      return "conmon-" + std::string(*id);
    }
  }
  for (std::string_view prefix : {"cri-containerd-", "crio-", "docker-", "libpod-"}) {
    if (auto id = Between(name, prefix, ".scope"); id && IsContainerId(*id)) {
      return std::string(*id);
    }
  }
  return std::nullopt;
}

// The same below a cgroupfs pod directory: CRI-O names it "crio-<id>" (and conmon's
// "crio-conmon-<id>"), containerd and Docker use the bare id, podman "libpod-<id>" (its conmon
// goes to a "conmon" directory beside it, which is a container id no claim has).
std::optional<std::string> CgroupfsContainerId(std::string_view name) {
  if (auto id = Between(name, "crio-conmon-", ""); id && IsContainerId(*id)) {
    return "conmon-" + std::string(*id);
  }
  for (std::string_view prefix : {"crio-", "libpod-"}) {
    if (auto id = Between(name, prefix, ""); id && IsContainerId(*id)) return std::string(*id);
  }
  if (IsContainerId(name)) return std::string(name);
  return std::nullopt;
}

// Splits on '/'; nullopt if any component is empty ("a//b").
std::optional<std::vector<std::string_view>> Components(std::string_view path) {
  std::vector<std::string_view> out;
  while (true) {
    const std::size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    if (part.empty()) return std::nullopt;
    out.push_back(part);
    if (slash == std::string_view::npos) return out;
    path.remove_prefix(slash + 1);
  }
}

std::optional<Node> ClassifySystemd(const std::vector<std::string_view>& parts, Node node) {
  node.driver = Driver::kSystemd;
  if (parts.size() == 1) {
    node.level = Level::kKubepods;
    return node;
  }
  std::size_t pod_index = 1;
  std::string_view pod_prefix = "kubepods-pod";
  if (parts[1] == "kubepods-burstable.slice" || parts[1] == "kubepods-besteffort.slice") {
    if (parts.size() == 2) {
      node.level = Level::kQos;
      return node;
    }
    pod_index = 2;
    pod_prefix = parts[1] == "kubepods-burstable.slice" ? "kubepods-burstable-pod"
                                                        : "kubepods-besteffort-pod";
  }
  auto escaped = Between(parts[pod_index], pod_prefix, ".slice");
  if (!escaped) return std::nullopt;
  auto uid = SystemdPodUid(*escaped);
  if (!uid) return std::nullopt;
  node.pod_uid = *uid;
  if (parts.size() == pod_index + 1) {
    node.level = Level::kPod;
    return node;
  }
  auto id = SystemdContainerId(parts[pod_index + 1]);
  if (!id) return std::nullopt;
  node.level = Level::kContainer;
  node.container_id = *id;
  if (parts.size() == pod_index + 2) return node;
  // crun (CRI-O's default runtime, and an option for containerd) asks systemd for the scope
  // and then, on cgroup v2, puts the container's processes in a "container" child of it
  // (systemd only delegates a scope's children; crun's run.oci.systemd.subgroup annotation,
  // default "container" on v2). That child is the same container and must get the same CPUs:
  // on v2 an explicit cpuset.cpus there would otherwise keep the old CPUs. conmon is not run
  // by crun and has no such child.
  if (parts.size() == pod_index + 3 && parts[pod_index + 2] == "container" &&
      !node.container_id.starts_with("conmon-")) {
    return node;
  }
  return std::nullopt;
}

std::optional<Node> ClassifyCgroupfs(const std::vector<std::string_view>& parts, Node node) {
  node.driver = Driver::kCgroupfs;
  if (parts.size() == 1) {
    node.level = Level::kKubepods;
    return node;
  }
  std::size_t pod_index = 1;
  if (parts[1] == "burstable" || parts[1] == "besteffort") {
    if (parts.size() == 2) {
      node.level = Level::kQos;
      return node;
    }
    pod_index = 2;
  }
  auto uid = Between(parts[pod_index], "pod", "");
  if (!uid || !IsPodUid(*uid)) return std::nullopt;
  node.pod_uid = std::string(*uid);
  if (parts.size() == pod_index + 1) {
    node.level = Level::kPod;
    return node;
  }
  if (parts.size() != pod_index + 2) return std::nullopt;
  auto id = CgroupfsContainerId(parts[pod_index + 1]);
  if (!id) return std::nullopt;
  node.level = Level::kContainer;
  node.container_id = *id;
  return node;
}

std::size_t Depth(std::string_view path) {
  return static_cast<std::size_t>(std::count(path.begin(), path.end(), '/'));
}

// What a cgroup is taken to: its Desired, or, when that is empty, what it has now (a cgroup is
// never emptied: an empty shared pool is a misconfiguration the daemon refuses to create, and
// emptying a v1 cpuset would strand its tasks), widened by what its observed descendants are
// taken to, so that cgroup v1's "a child within its parent" holds at the end. For a Target whose
// shared and exclusive CPUs are within `online`, and a non-empty shared pool, this is Desired.
struct Goal {
  std::size_t index;  // into the planner's entries
  std::size_t depth;
  CpuSet cpus;
};

}  // namespace

std::optional<Node> Classify(std::string_view relative_path) {
  if (relative_path.size() > kMaxPathLength) return std::nullopt;
  while (relative_path.starts_with('/')) relative_path.remove_prefix(1);
  while (relative_path.ends_with('/')) relative_path.remove_suffix(1);
  if (relative_path.empty()) return std::nullopt;
  auto parts = Components(relative_path);
  if (!parts) return std::nullopt;
  Node node;
  node.path = std::string(relative_path);
  if ((*parts)[0] == "kubepods.slice") return ClassifySystemd(*parts, std::move(node));
  if ((*parts)[0] == "kubepods") return ClassifyCgroupfs(*parts, std::move(node));
  return std::nullopt;
}

CpuSet Desired(const Node& node, const Target& target,
               const std::map<std::string, CpuSet>& exclusive_by_pod) {
  switch (node.level) {
    case Level::kKubepods:
    case Level::kQos:
      return target.online;
    case Level::kPod: {
      auto it = exclusive_by_pod.find(node.pod_uid);
      return it == exclusive_by_pod.end() ? target.shared : target.shared | it->second;
    }
    case Level::kContainer: {
      auto it = target.exclusive.find(node.container_id);
      return it == target.exclusive.end() ? target.shared : it->second;
    }
  }
  return target.shared;  // unreachable: every Level is handled above
}

namespace {

// One cgroup as the two-phase planner sees it, for one file.
struct Entry {
  std::string_view path;
  CpuSet now;
  CpuSet desired;  // empty: keep what it has (never written empty)
};

// The grow-then-shrink writes of one file (layout.h: Plan) for cgroups listed once each.
void PlanFile(const std::vector<Entry>& entries, CpusetFile file, std::vector<Write>* writes) {
  std::vector<Goal> goals;
  goals.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    goals.push_back(Goal{i, Depth(e.path), e.desired.Empty() ? e.now : e.desired});
  }
  // Children before parents (deepest first), then by path: the bottom-up order, and also the
  // order in which descendants' goals are folded into their ancestors'.
  std::sort(goals.begin(), goals.end(), [&](const Goal& a, const Goal& b) {
    if (a.depth != b.depth) return a.depth > b.depth;
    return entries[a.index].path < entries[b.index].path;
  });
  std::unordered_map<std::string_view, std::size_t> goal_of;  // path -> index into goals
  for (std::size_t g = 0; g < goals.size(); ++g) goal_of[entries[goals[g].index].path] = g;
  for (Goal& goal : goals) {
    // The nearest observed ancestor: a cgroup missing from the scan (removed meanwhile) must not
    // cut its descendants off from the ones above it.
    std::string_view path = entries[goal.index].path;
    while (true) {
      const std::size_t slash = path.rfind('/');
      if (slash == std::string_view::npos) break;
      path = path.substr(0, slash);
      auto it = goal_of.find(path);
      if (it != goal_of.end()) {
        goals[it->second].cpus |= goal.cpus;
        break;
      }
    }
  }

  std::vector<CpuSet> now(goals.size());
  for (std::size_t g = 0; g < goals.size(); ++g) now[g] = entries[goals[g].index].now;

  // Phase 1, top-down: grow. Every cgroup then holds at least its goal, and its parent was
  // grown first, so each write stays within the parent (v1) and never takes ids from a child.
  // An empty current value (v2: "the parent's") is not a superset of anything, so it is
  // written here.
  std::vector<std::size_t> top_down(goals.size());
  for (std::size_t g = 0; g < goals.size(); ++g) top_down[g] = g;
  std::sort(top_down.begin(), top_down.end(), [&](std::size_t a, std::size_t b) {
    if (goals[a].depth != goals[b].depth) return goals[a].depth < goals[b].depth;
    return entries[goals[a].index].path < entries[goals[b].index].path;
  });
  for (std::size_t g : top_down) {
    if (goals[g].cpus.IsSubsetOf(now[g])) continue;
    now[g] |= goals[g].cpus;
    writes->push_back(Write{std::string(entries[goals[g].index].path), now[g], file});
  }
  // Phase 2, bottom-up: shrink. Children are already at their goals, which lie within this
  // cgroup's goal, and the parent still holds at least its own goal.
  for (std::size_t g = 0; g < goals.size(); ++g) {
    if (now[g] == goals[g].cpus || goals[g].cpus.Empty()) continue;
    now[g] = goals[g].cpus;
    writes->push_back(Write{std::string(entries[goals[g].index].path), now[g], file});
  }
}

}  // namespace

const char* FileName(CpusetFile file) {
  return file == CpusetFile::kMems ? "cpuset.mems" : "cpuset.cpus";
}

CpuSet NumaNodesOf(const std::vector<topology::NumaNode>& nodes, const CpuSet& cpus) {
  CpuSet out;
  for (const topology::NumaNode& n : nodes) {
    if (n.id >= 0 && n.id <= CpuSet::kMaxCpuId && n.cpus.Intersects(cpus)) out.Add(n.id);
  }
  return out;
}

CpuSet DesiredMems(const Node& node, const Target& target) {
  if (node.level == Level::kContainer) {
    auto it = target.exclusive_mems.find(node.container_id);
    if (it != target.exclusive_mems.end()) return it->second;
  }
  return target.all_mems;
}

std::vector<Write> Plan(const std::vector<Observed>& tree, const Target& target) {
  // A path listed twice keeps its first entry, so the answer does not depend on which copy a
  // later step would have seen.
  std::unordered_map<std::string_view, std::size_t> by_path;
  std::vector<std::size_t> unique;
  for (std::size_t i = 0; i < tree.size(); ++i) {
    if (by_path.emplace(tree[i].node.path, i).second) unique.push_back(i);
  }

  std::map<std::string, CpuSet> exclusive_by_pod;
  for (std::size_t i : unique) {
    const Node& node = tree[i].node;
    if (node.level != Level::kContainer) continue;
    auto it = target.exclusive.find(node.container_id);
    if (it != target.exclusive.end()) exclusive_by_pod[node.pod_uid] |= it->second;
  }

  std::vector<Write> writes;
  std::vector<Entry> entries;
  entries.reserve(unique.size());
  for (std::size_t i : unique) {
    entries.push_back(
        Entry{tree[i].node.path, tree[i].cpus, Desired(tree[i].node, target, exclusive_by_pod)});
  }
  PlanFile(entries, CpusetFile::kCpus, &writes);
  if (target.all_mems.Empty()) return writes;
  entries.clear();
  for (std::size_t i : unique) {
    if (!tree[i].mems) continue;
    entries.push_back(Entry{tree[i].node.path, *tree[i].mems, DesiredMems(tree[i].node, target)});
  }
  PlanFile(entries, CpusetFile::kMems, &writes);
  return writes;
}

}  // namespace topodra::cgroup
