#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "topology/cpuset.h"

namespace topodra::state {

enum class AllocationKind { kDraClaim, kDevicePlugin };
// kPreparing: planned, its side effects and journal record not done yet (never in a snapshot).
// kUnpreparing: its release is being recorded; still holds its devices until that is durable.
// Only kPreparing and kPrepared are written to files; kUnpreparing lives in memory only.
enum class Phase { kPreparing, kPrepared, kUnpreparing };

// A JSON value kept as its compact text. Every prepared claim keeps its answer and CDI spec for
// replays and restarts; as text they take a few hundred bytes, as parsed trees several KiB, which
// matters with thousands of claims.
class JsonText {
 public:
  JsonText() = default;                   // null
  JsonText(const nlohmann::json& value);  // NOLINT: implicit, so values assign naturally
  // `text` must be the compact text JsonText makes of a value ("null" for null), e.g. a value of
  // a state file that canonical::ScanCanonical accepted: kept as it is, without parsing it.
  static JsonText FromCanonicalText(absl::string_view text);
  nlohmann::json Parse() const;  // null for null; never throws
  const std::string& text() const { return text_; }
  bool is_null() const { return text_.empty(); }
  std::string dump() const { return is_null() ? "null" : text_; }
  bool operator==(const JsonText& other) const = default;
  friend bool operator==(const JsonText& a, const nlohmann::json& b) { return a.Parse() == b; }
  friend std::ostream& operator<<(std::ostream& os, const JsonText& j) { return os << j.dump(); }

 private:
  std::string text_;  // "" for null
};

// "DraClaim" / "DevicePlugin", "Preparing" / "Prepared": the spellings of the checkpoint file
// ("Unpreparing" for logs only).
const char* KindName(AllocationKind kind);
const char* PhaseName(Phase phase);

// What one owner holds. The owner is DraOwner(driver, claim uid) for kDraClaim, or
// "<resource>/<allocation id>" for kDevicePlugin ("topodra.io/gpu/3f9a...": the device-plugin
// API never says which pod an Allocate is for, so the id is derived from the devices).
struct Allocation {
  AllocationKind kind = AllocationKind::kDraClaim;
  std::string owner;
  // The claim's namespace and name (kDraClaim only), for messages naming the holder.
  std::string claim_namespace;
  std::string claim_name;
  // The DRA driver that prepared the claim (kDraClaim only). A claim with CPU and GPU results is
  // prepared once by each driver, so a claim's owner is DraOwner(driver, uid).
  std::string driver;
  CpuSet cpus;
  // PCI bus ids, e.g. "0000:3b:00.0".
  std::set<std::string> gpus;
  // What prepare returned, replayed when the kubelet repeats an idempotent prepare.
  JsonText answer;
  // The CDI spec written for the claim, {"file": name, "spec": {...}}, or null: kept so a file lost
  // in a node crash (written without fsync) is restored at start.
  JsonText cdi;
  // Preparing is recorded before any side effect, Prepared after all of them, so a crash in
  // between is found at start and rolled forward or back.
  Phase phase = Phase::kPreparing;
  // uid of the Reservation whose devices it uses; "" for none.
  std::string reservation;
  // The NUMA nodes its containers allocate memory on (--numa-memory=claim), as prepare chose
  // them from the CPUs and the claim's numaMemory config. Empty: not recorded (older state,
  // --numa-memory=none, device-plugin allocations): the nodes local to `cpus`.
  CpuSet mems;

  bool operator==(const Allocation& other) const;
};

// CPUs and GPUs held for a Reservation (topodra.io/v1alpha1). Owners' claims take them (their
// Allocation::reservation names the reservation); nobody else may. Placed CPUs still held by
// another allocation (preAllocation) are waited for: they become reserved as they are released.
struct Reservation {
  std::string uid;             // the Reservation object's metadata.uid: the key
  std::string name;            // metadata.name
  CpuSet cpus;                 // placed CPUs
  std::set<std::string> gpus;  // placed GPUs, PCI bus ids
  std::string placed_at;       // RFC 3339 (seconds), when placed: the published taints' timeAdded
  std::string expires_at;      // RFC 3339, "" for never
  // Ended (expired, deleted, used once, failed): it holds only what owners' claims still use
  // and gives nothing new; kept as a tombstone until its object is gone.
  bool ended = false;
  std::string end_reason;  // e.g. "Expired", "Deleted", "Succeeded", "DevicesGone"; "" while active
  // RFC 3339, when it ended ("" while active): a Succeeded reservation keeps what its claim has
  // not prepared yet for a grace period (the kubelet prepares a claim's drivers one by one).
  std::string ended_at;
  JsonText spec;  // the object's spec when placed (owners are matched against it)
  bool operator==(const Reservation&) const = default;
};

// The owner key of a DRA claim prepared by `driver`.
std::string DraOwner(const std::string& driver, const std::string& claim_uid);
// The claim UID of a kDraClaim allocation (the owner without its driver prefix).
std::string ClaimUid(const Allocation& allocation);

// "claim default/gpu-claim (uid 1234)" or "device-plugin allocation topodra.io/cpu/<id>".
std::string Describe(const Allocation& allocation);

// Every allocation and reservation of the node, by owner and by uid. A pure value: no I/O, no
// clock. Invariants: no CPU and no GPU is held by two owners, nor reserved by two reservations.
// A CPU may be both held and reserved: by an owner's claim, or by anyone it was held by when the
// reservation was placed (it becomes reserved for the owners once released).
class State {
 public:
  State() = default;
  State(const State& other) : allocations_(other.allocations_), reservations_(other.reservations_) {
    Reindex();
  }
  State& operator=(const State& other) {
    if (this != &other) {
      allocations_ = other.allocations_;
      reservations_ = other.reservations_;
      Reindex();
    }
    return *this;
  }
  State(State&&) noexcept = default;
  State& operator=(State&&) noexcept = default;

  // Records `allocation`. Fails (FailedPrecondition) naming the CPU or GPU and its holder when
  // any of them is held by another owner; fails (AlreadyExists) when the owner already holds a
  // different allocation; adding the identical allocation again is OK. InvalidArgument for an
  // allocation that is not well formed (empty owner, claim without namespace/name, ...).
  // A CPU or GPU in a reservation may be taken only by an allocation naming that reservation:
  // FailedPrecondition (`CPU 5 is reserved by Reservation "r1"`) for anyone else.
  absl::Status Add(Allocation allocation);
  // Add without the reservation rule, for devices the owner held a moment ago (a device-plugin
  // allocation shrunk, an undo): a reservation placed over them meanwhile waits for them as for
  // any busy device. Never for devices the owner did not hold.
  absl::Status Restore(Allocation allocation);
  // Preparing -> Prepared with the answer to replay. NotFound for an unknown owner.
  absl::Status MarkPrepared(const std::string& owner, nlohmann::json answer);
  // Moves `owner` to `phase`, keeping its answer. NotFound for an unknown owner.
  absl::Status SetPhase(const std::string& owner, Phase phase);
  // Forgets `owner`; an unknown owner is OK (unprepare is idempotent).
  absl::Status Remove(const std::string& owner);

  const Allocation* Find(const std::string& owner) const;
  CpuSet HeldCpus() const;
  std::set<std::string> HeldGpus() const;
  std::optional<std::string> HolderOfCpu(int cpu) const;
  std::optional<std::string> HolderOfGpu(const std::string& gpu) const;

  // Sorted by owner: iteration order is deterministic.
  const std::map<std::string, Allocation>& allocations() const { return allocations_; }
  // Allocations only (reservations are reservations().size()).
  int Size() const { return static_cast<int>(allocations_.size()); }
  bool Empty() const { return allocations_.empty(); }

  // Records `r`, replacing the reservation with its uid. InvalidArgument for an empty uid, name
  // or GPU id; FailedPrecondition naming the CPU or GPU and the other reservation when any of
  // them is reserved by another reservation. CPUs and GPUs held by allocations are allowed.
  absl::Status PutReservation(Reservation r);
  // Forgets the reservation; an unknown uid is OK. Allocations naming it are kept.
  absl::Status RemoveReservation(const std::string& uid);
  const Reservation* FindReservation(const std::string& uid) const;
  // By uid.
  const std::map<std::string, Reservation>& reservations() const { return reservations_; }
  // The uid of the reservation holding the CPU or GPU.
  std::optional<std::string> ReservationOfCpu(int cpu) const;
  std::optional<std::string> ReservationOfGpu(const std::string& pci) const;
  CpuSet ReservedCpus() const { return reserved_cpus_; }
  std::set<std::string> ReservedGpus() const;
  // The allocations whose `reservation` is `reservation_uid` (whether or not it is still
  // recorded), sorted by owner.
  std::vector<const Allocation*> AllocationsOf(const std::string& reservation_uid) const;

  bool operator==(const State& other) const {
    return allocations_ == other.allocations_ && reservations_ == other.reservations_;
  }

 private:
  // Replays a recorded allocation (StateStore's journal): Add without the reservation rule,
  // which guards new decisions; the journal records decisions already taken, and a reservation
  // may legitimately have been placed over an allocation between its Add and its record.
  friend class StateStore;
  absl::Status Insert(Allocation allocation, bool check_reservations);

  // Orders owner pointers (keys of allocations_) by the owner they point at.
  struct KeyLess {
    bool operator()(const std::string* a, const std::string* b) const { return *a < *b; }
  };

  std::map<std::string, Allocation> allocations_;
  std::map<std::string, Reservation> reservations_;
  // Indexes kept in step with allocations_, so Add stays cheap with thousands of owners.
  // Owners point at the keys of allocations_ (map nodes never move), so a CPU costs no string.
  std::map<int, const std::string*> cpu_holders_;
  std::map<std::string, const std::string*> gpu_holders_;
  CpuSet held_cpus_;
  // The same for reservations: values point at the keys (uids) of reservations_.
  std::map<int, const std::string*> cpu_reservations_;
  std::map<std::string, const std::string*> gpu_reservations_;
  CpuSet reserved_cpus_;
  // Reservation uid -> the owners of the allocations naming it.
  std::map<std::string, std::set<const std::string*, KeyLess>> users_;
  void Reindex();
  void IndexReservation(const std::string* uid, const Reservation& r);
  void UnindexReservation(const Reservation& r);
};

}  // namespace topodra::state
