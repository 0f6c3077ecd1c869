#include "driver/state/state.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace topodra::state {
namespace {

absl::Status Validate(const Allocation& a) {
  if (a.owner.empty()) return absl::InvalidArgumentError("allocation without an owner");
  const std::string q = absl::StrCat("\"", a.owner, "\"");
  if (a.kind == AllocationKind::kDraClaim) {
    if (a.claim_namespace.empty() || a.claim_name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("claim ", q, ": namespace and name must not be empty"));
    }
  } else {
    // "<resource>/<allocation id>"; the resource name has a '/' of its own ("topodra.io/cpu").
    const std::vector<absl::string_view> parts = absl::StrSplit(a.owner, absl::MaxSplits('/', 2));
    bool ok = parts.size() == 3;
    for (absl::string_view part : parts) ok = ok && !part.empty();
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("device-plugin owner ", q, ": want <resource>/<allocation id>"));
    }
  }
  for (const std::string& gpu : a.gpus) {
    if (gpu.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(Describe(a), ": empty GPU id"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

JsonText::JsonText(const nlohmann::json& value) {
  if (!value.is_null())
    text_ = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json JsonText::Parse() const {
  if (text_.empty()) return nullptr;
  nlohmann::json j = nlohmann::json::parse(text_, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json() : j;
}

const char* KindName(AllocationKind kind) {
  return kind == AllocationKind::kDraClaim ? "DraClaim" : "DevicePlugin";
}

const char* PhaseName(Phase phase) { return phase == Phase::kPreparing ? "Preparing" : "Prepared"; }

bool Allocation::operator==(const Allocation& other) const {
  return kind == other.kind && owner == other.owner && claim_namespace == other.claim_namespace &&
         claim_name == other.claim_name && cpus == other.cpus && gpus == other.gpus &&
         driver == other.driver && answer == other.answer && cdi == other.cdi &&
         phase == other.phase;
}

std::string DraOwner(const std::string& driver, const std::string& claim_uid) {
  return absl::StrCat(driver, "/", claim_uid);
}

std::string ClaimUid(const Allocation& a) {
  if (!a.driver.empty() && absl::StartsWith(a.owner, a.driver + "/")) {
    return a.owner.substr(a.driver.size() + 1);
  }
  return a.owner;
}

std::string Describe(const Allocation& a) {
  if (a.kind == AllocationKind::kDraClaim) {
    return absl::StrCat("claim ", a.claim_namespace, "/", a.claim_name, " (uid ", ClaimUid(a), ")");
  }
  return absl::StrCat("device-plugin allocation ", a.owner);
}

absl::Status State::Add(Allocation allocation) {
  if (absl::Status st = Validate(allocation); !st.ok()) return st;
  if (const Allocation* existing = Find(allocation.owner); existing != nullptr) {
    if (*existing == allocation) return absl::OkStatus();
    return absl::AlreadyExistsError(absl::StrCat(
        Describe(allocation), ": owner already holds a different allocation (cpus \"",
        existing->cpus.ToString(), "\", ", existing->gpus.size(), " GPUs); remove it first"));
  }
  for (int cpu : allocation.cpus) {
    if (auto it = cpu_holders_.find(cpu); it != cpu_holders_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(Describe(allocation), ": CPU ", cpu,
                                                        " is already held by ",
                                                        Describe(allocations_.at(*it->second))));
    }
  }
  for (const std::string& gpu : allocation.gpus) {
    if (auto it = gpu_holders_.find(gpu); it != gpu_holders_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(Describe(allocation), ": GPU \"", gpu,
                                                        "\" is already held by ",
                                                        Describe(allocations_.at(*it->second))));
    }
  }
  std::string owner = allocation.owner;
  auto [it, inserted] = allocations_.emplace(std::move(owner), std::move(allocation));
  const std::string* key = &it->first;
  for (int cpu : it->second.cpus) cpu_holders_.emplace(cpu, key);
  for (const std::string& gpu : it->second.gpus) gpu_holders_.emplace(gpu, key);
  held_cpus_ |= it->second.cpus;
  return absl::OkStatus();
}

absl::Status State::MarkPrepared(const std::string& owner, nlohmann::json answer) {
  auto it = allocations_.find(owner);
  if (it == allocations_.end()) {
    return absl::NotFoundError(absl::StrCat("no allocation for owner \"", owner, "\""));
  }
  it->second.answer = std::move(answer);
  it->second.phase = Phase::kPrepared;
  return absl::OkStatus();
}

absl::Status State::SetPhase(const std::string& owner, Phase phase) {
  auto it = allocations_.find(owner);
  if (it == allocations_.end()) {
    return absl::NotFoundError(absl::StrCat("no allocation for owner \"", owner, "\""));
  }
  it->second.phase = phase;
  return absl::OkStatus();
}

absl::Status State::Remove(const std::string& owner) {
  auto it = allocations_.find(owner);
  if (it == allocations_.end()) return absl::OkStatus();
  for (int cpu : it->second.cpus) cpu_holders_.erase(cpu);
  for (const std::string& gpu : it->second.gpus) gpu_holders_.erase(gpu);
  held_cpus_ -= it->second.cpus;
  allocations_.erase(it);
  return absl::OkStatus();
}

const Allocation* State::Find(const std::string& owner) const {
  auto it = allocations_.find(owner);
  return it == allocations_.end() ? nullptr : &it->second;
}

CpuSet State::HeldCpus() const { return held_cpus_; }

void State::Reindex() {
  cpu_holders_.clear();
  gpu_holders_.clear();
  held_cpus_ = CpuSet();
  for (const auto& [owner, a] : allocations_) {
    for (int cpu : a.cpus) cpu_holders_.emplace(cpu, &owner);
    for (const std::string& gpu : a.gpus) gpu_holders_.emplace(gpu, &owner);
    held_cpus_ |= a.cpus;
  }
}

std::set<std::string> State::HeldGpus() const {
  std::set<std::string> held;
  for (const auto& [gpu, owner] : gpu_holders_) held.insert(gpu);
  return held;
}

std::optional<std::string> State::HolderOfCpu(int cpu) const {
  auto it = cpu_holders_.find(cpu);
  if (it == cpu_holders_.end()) return std::nullopt;
  return *it->second;
}

std::optional<std::string> State::HolderOfGpu(const std::string& gpu) const {
  auto it = gpu_holders_.find(gpu);
  if (it == gpu_holders_.end()) return std::nullopt;
  return *it->second;
}

}  // namespace topodra::state
