#include "driver/state/state.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "driver/state/compact_json.h"

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

std::string Quoted(const Reservation& r) { return absl::StrCat("Reservation \"", r.name, "\""); }

}  // namespace

JsonText::JsonText(const nlohmann::json& value) {
  // The same bytes as value.dump(-1, ' ', false, replace), printed faster.
  if (!value.is_null()) text_ = CompactJson(value);
}

JsonText JsonText::FromCanonicalText(absl::string_view text) {
  JsonText out;
  if (text != "null") out.text_ = std::string(text);
  return out;
}

nlohmann::json JsonText::Parse() const {
  if (text_.empty()) return nullptr;
  nlohmann::json j = nlohmann::json::parse(text_, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json() : j;
}

const char* KindName(AllocationKind kind) {
  return kind == AllocationKind::kDraClaim ? "DraClaim" : "DevicePlugin";
}

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kPreparing:
      return "Preparing";
    case Phase::kPrepared:
      return "Prepared";
    case Phase::kUnpreparing:
      return "Unpreparing";
  }
  return "Prepared";
}

bool Allocation::operator==(const Allocation& other) const {
  return kind == other.kind && owner == other.owner && claim_namespace == other.claim_namespace &&
         claim_name == other.claim_name && cpus == other.cpus && gpus == other.gpus &&
         driver == other.driver && answer == other.answer && cdi == other.cdi &&
         phase == other.phase && reservation == other.reservation && mems == other.mems;
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
  return Insert(std::move(allocation), /*check_reservations=*/true);
}

absl::Status State::Restore(Allocation allocation) {
  return Insert(std::move(allocation), /*check_reservations=*/false);
}

absl::Status State::Insert(Allocation allocation, bool check_reservations) {
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
  if (check_reservations) {
    if (allocation.cpus.Intersects(reserved_cpus_)) {
      for (int cpu : allocation.cpus& reserved_cpus_) {
        const std::string& uid = *cpu_reservations_.at(cpu);
        if (uid != allocation.reservation) {
          return absl::FailedPreconditionError(absl::StrCat(Describe(allocation), ": CPU ", cpu,
                                                            " is reserved by ",
                                                            Quoted(reservations_.at(uid))));
        }
      }
    }
    for (const std::string& gpu : allocation.gpus) {
      auto it = gpu_reservations_.find(gpu);
      if (it != gpu_reservations_.end() && *it->second != allocation.reservation) {
        return absl::FailedPreconditionError(absl::StrCat(Describe(allocation), ": GPU \"", gpu,
                                                          "\" is reserved by ",
                                                          Quoted(reservations_.at(*it->second))));
      }
    }
  }
  std::string owner = allocation.owner;
  auto [it, inserted] = allocations_.emplace(std::move(owner), std::move(allocation));
  const std::string* key = &it->first;
  for (int cpu : it->second.cpus) cpu_holders_.emplace(cpu, key);
  for (const std::string& gpu : it->second.gpus) gpu_holders_.emplace(gpu, key);
  held_cpus_ |= it->second.cpus;
  if (!it->second.reservation.empty()) users_[it->second.reservation].insert(key);
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
  if (const std::string& uid = it->second.reservation; !uid.empty()) {
    auto users = users_.find(uid);
    if (users != users_.end()) {
      users->second.erase(&it->first);
      if (users->second.empty()) users_.erase(users);
    }
  }
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
  users_.clear();
  for (const auto& [owner, a] : allocations_) {
    for (int cpu : a.cpus) cpu_holders_.emplace(cpu, &owner);
    for (const std::string& gpu : a.gpus) gpu_holders_.emplace(gpu, &owner);
    held_cpus_ |= a.cpus;
    if (!a.reservation.empty()) users_[a.reservation].insert(&owner);
  }
  cpu_reservations_.clear();
  gpu_reservations_.clear();
  reserved_cpus_ = CpuSet();
  for (const auto& [uid, r] : reservations_) IndexReservation(&uid, r);
}

void State::IndexReservation(const std::string* uid, const Reservation& r) {
  for (int cpu : r.cpus) cpu_reservations_.emplace(cpu, uid);
  for (const std::string& gpu : r.gpus) gpu_reservations_.emplace(gpu, uid);
  reserved_cpus_ |= r.cpus;
}

void State::UnindexReservation(const Reservation& r) {
  for (int cpu : r.cpus) cpu_reservations_.erase(cpu);
  for (const std::string& gpu : r.gpus) gpu_reservations_.erase(gpu);
  // Reservations never overlap, so none of these CPUs is another's.
  reserved_cpus_ -= r.cpus;
}

absl::Status State::PutReservation(Reservation r) {
  if (r.uid.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(Quoted(r), ": empty uid"));
  }
  if (r.name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Reservation with uid \"", r.uid, "\": empty name"));
  }
  for (const std::string& gpu : r.gpus) {
    if (gpu.empty()) return absl::InvalidArgumentError(absl::StrCat(Quoted(r), ": empty GPU id"));
  }
  for (int cpu : r.cpus& reserved_cpus_) {
    const std::string& other = *cpu_reservations_.at(cpu);
    if (other != r.uid) {
      return absl::FailedPreconditionError(absl::StrCat(
          Quoted(r), ": CPU ", cpu, " is already reserved by ", Quoted(reservations_.at(other))));
    }
  }
  for (const std::string& gpu : r.gpus) {
    auto it = gpu_reservations_.find(gpu);
    if (it != gpu_reservations_.end() && *it->second != r.uid) {
      return absl::FailedPreconditionError(absl::StrCat(Quoted(r), ": GPU \"", gpu,
                                                        "\" is already reserved by ",
                                                        Quoted(reservations_.at(*it->second))));
    }
  }
  auto it = reservations_.find(r.uid);
  if (it == reservations_.end()) {
    std::string uid = r.uid;
    it = reservations_.emplace(std::move(uid), std::move(r)).first;
  } else {
    UnindexReservation(it->second);
    it->second = std::move(r);
  }
  IndexReservation(&it->first, it->second);
  return absl::OkStatus();
}

absl::Status State::RemoveReservation(const std::string& uid) {
  auto it = reservations_.find(uid);
  if (it == reservations_.end()) return absl::OkStatus();
  UnindexReservation(it->second);
  reservations_.erase(it);
  return absl::OkStatus();
}

const Reservation* State::FindReservation(const std::string& uid) const {
  auto it = reservations_.find(uid);
  return it == reservations_.end() ? nullptr : &it->second;
}

std::optional<std::string> State::ReservationOfCpu(int cpu) const {
  auto it = cpu_reservations_.find(cpu);
  if (it == cpu_reservations_.end()) return std::nullopt;
  return *it->second;
}

std::optional<std::string> State::ReservationOfGpu(const std::string& pci) const {
  auto it = gpu_reservations_.find(pci);
  if (it == gpu_reservations_.end()) return std::nullopt;
  return *it->second;
}

std::set<std::string> State::ReservedGpus() const {
  std::set<std::string> reserved;
  for (const auto& [gpu, uid] : gpu_reservations_) reserved.insert(reserved.end(), gpu);
  return reserved;
}

std::vector<const Allocation*> State::AllocationsOf(const std::string& reservation_uid) const {
  std::vector<const Allocation*> out;
  auto it = users_.find(reservation_uid);
  if (it == users_.end()) return out;
  out.reserve(it->second.size());
  for (const std::string* owner : it->second) out.push_back(&allocations_.at(*owner));
  return out;
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
