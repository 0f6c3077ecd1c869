#include "driver/cgroup/pinning.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "common/file_io.h"
#include "nlohmann/json.hpp"

namespace topodra::cgroup {

std::vector<HookRecord> ReadRecords(const std::string& dir) {
  std::vector<HookRecord> out;
  absl::StatusOr<std::vector<files::DirEntry>> entries = files::ListDirectory(dir);
  if (!entries.ok()) return out;
  std::vector<std::string> names;
  for (const files::DirEntry& e : *entries) {
    if (!e.regular || e.name[0] == '.' || !absl::EndsWith(e.name, ".json")) continue;
    names.push_back(e.name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    // A record is one short line; anything much larger was not written by the hook.
    absl::StatusOr<std::string> text = files::ReadFileBounded(dir + "/" + name, 64 << 10);
    if (!text.ok() || text->size() > (64 << 10)) continue;
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_object()) continue;
    auto str = [&](const char* key) {
      return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
    };
    absl::StatusOr<CpuSet> cpus = CpuSet::Parse(str("cpus"));
    HookRecord r{name, str("container"), str("claim"), cpus.ok() ? *cpus : CpuSet{}, str("cgroup")};
    if (r.container.empty() || r.claim.empty() || !cpus.ok()) continue;
    struct stat st {};
    if (::stat((dir + "/" + name).c_str(), &st) == 0)
      r.written = absl::TimeFromTimespec(st.st_mtim);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::string> GoneContainerRecords(
    const std::vector<HookRecord>& records,
    const std::function<bool(const std::string& cgroup)>& cgroup_exists, absl::Time now,
    absl::Duration grace) {
  std::vector<std::string> gone;
  for (const HookRecord& r : records) {
    if (r.cgroup.empty() || r.cgroup.front() == '/' || absl::StrContains(r.cgroup, "..")) continue;
    if (now - r.written < grace) continue;
    if (!cgroup_exists(r.cgroup)) gone.push_back(r.file);
  }
  return gone;
}

namespace {

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::vector<HookRecord> ReadLiveRecords(const std::string& dir, const std::string& hierarchy_root,
                                        absl::Time now) {
  std::vector<HookRecord> records = ReadRecords(dir);
  if (!IsDirectory(hierarchy_root)) return records;
  const std::vector<std::string> gone = GoneContainerRecords(
      records,
      [&](const std::string& cgroup) {
        // Gone only when its parent (the pod's cgroup) is there to say so: a tree without the
        // parent is not the one the hook saw (wrong mount, a cgroup namespace's view), and a
        // record lost there cannot be recovered. Records of whole pods that are gone leave with
        // their claims instead.
        const std::string::size_type slash = cgroup.rfind('/');
        const std::string parent = slash == std::string::npos ? "" : cgroup.substr(0, slash);
        if (!IsDirectory(hierarchy_root + "/" + parent)) return true;
        return IsDirectory(hierarchy_root + "/" + cgroup);
      },
      now);
  if (gone.empty()) return records;
  for (const std::string& file : gone) ::unlink((dir + "/" + file).c_str());
  std::erase_if(records, [&](const HookRecord& r) {
    return std::find(gone.begin(), gone.end(), r.file) != gone.end();
  });
  return records;
}

CpuSet ClaimMems(const CpuSet& cpus, const CpuSet& recorded, const NumaMemory& memory) {
  const CpuSet want = recorded.Empty() ? NumaNodesOf(memory.nodes, cpus) : recorded;
  return want & memory.all;
}

Target BuildTarget(const CpuSet& online, const CpuSet& reserved, bool strict_reservation,
                   const state::State& held, const std::vector<HookRecord>& records,
                   std::vector<std::string>* stale, const NumaMemory* memory) {
  Target t;
  t.online = online;
  t.shared = online - held.HeldCpus();
  if (strict_reservation) t.shared -= reserved;
  if (memory != nullptr) t.all_mems = memory->all;
  // Claim id -> the CPUs it holds now, and its memory nodes.
  std::map<std::string, CpuSet> claims;
  std::map<std::string, std::vector<const state::Allocation*>> allocations;
  for (const auto& [owner, a] : held.allocations()) {
    if (a.cpus.Empty()) continue;
    const std::string id = a.kind == state::AllocationKind::kDraClaim
                               ? state::ClaimUid(a)
                               : owner.substr(owner.rfind('/') + 1);
    claims[id] |= a.cpus;
    allocations[id].push_back(&a);
  }
  std::set<std::string> unbounded;  // containers with a claim whose memory nodes are unknown
  for (const HookRecord& r : records) {
    auto it = claims.find(r.claim);
    if (it == claims.end()) {
      if (stale != nullptr) stale->push_back(r.file);
      continue;
    }
    t.exclusive[r.container] |= it->second;
    if (memory == nullptr || t.all_mems.Empty()) continue;
    for (const state::Allocation* a : allocations[r.claim]) {
      const CpuSet mems = ClaimMems(a->cpus, a->mems, *memory);
      if (mems.Empty()) {
        unbounded.insert(r.container);
      } else {
        t.exclusive_mems[r.container] |= mems;
      }
    }
  }
  for (const std::string& container : unbounded) t.exclusive_mems.erase(container);
  return t;
}

}  // namespace topodra::cgroup
