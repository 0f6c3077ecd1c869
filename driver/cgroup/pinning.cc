#include "driver/cgroup/pinning.h"

#include <algorithm>
#include <map>

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
    HookRecord r{name, str("container"), str("claim"), cpus.ok() ? *cpus : CpuSet{}};
    if (r.container.empty() || r.claim.empty() || !cpus.ok()) continue;
    out.push_back(std::move(r));
  }
  return out;
}

Target BuildTarget(const CpuSet& online, const CpuSet& reserved, const state::State& held,
                   const std::vector<HookRecord>& records, std::vector<std::string>* stale) {
  Target t;
  t.online = online;
  t.shared = online - reserved - held.HeldCpus();
  // Claim id -> the CPUs it holds now.
  std::map<std::string, CpuSet> claims;
  for (const auto& [owner, a] : held.allocations()) {
    if (a.cpus.Empty()) continue;
    const std::string id = a.kind == state::AllocationKind::kDraClaim
                               ? state::ClaimUid(a)
                               : owner.substr(owner.rfind('/') + 1);
    claims[id] |= a.cpus;
  }
  for (const HookRecord& r : records) {
    auto it = claims.find(r.claim);
    if (it == claims.end()) {
      if (stale != nullptr) stale->push_back(r.file);
      continue;
    }
    t.exclusive[r.container] |= it->second;
  }
  return t;
}

}  // namespace topodra::cgroup
