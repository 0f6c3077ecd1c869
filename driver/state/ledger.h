// The node's allocation state and its one owner. Every writer (DRA prepare and unprepare,
// device-plugin Allocate and release, reservation placement, start-up) changes it through the
// same transaction, so "memory, side effects, journal, compaction, undo" happen in one order:
//
//   Reserve(plan)  under the lock: the plan reads the State and changes it through an Edit
//                  (checked by State's rules); what it touched is in flight (not durable)
//   side effects   the caller's, outside the lock (CDI files, cgroups)
//   Commit         outside the lock: the journal records, with the group commit of concurrent
//                  writers (StateStore); then the memory is final and nothing is in flight
//   or Abort       the memory as before Reserve (and, after a failed Commit, the records of the
//                  former values again, in case a failed record still reached the disk)
//
// Devices are taken in memory at Reserve and given back only once their release is durable
// (Release keeps them, kUnpreparing, until Commit), so a device never goes to two owners, in
// memory or on replay. The edits that free devices at once (Shrink, and a reservation replaced
// or removed) make their transaction exclusive: no other Reserve plans until it has committed
// or aborted, so nobody takes the freed devices before the change is durable, and an Abort can
// always put them back. No file is synced while the lock is held: a compaction snapshots the
// committed state (every open transaction undone on a copy) with no record in flight, then
// writes it outside the lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "driver/state/state.h"
#include "driver/state/store.h"

namespace topodra::state {

// Wakes whoever reports the node's devices (device-plugin ListAndWatch streams, pinning, the
// reservation controller) when who holds what, or what exists, may have changed. A generation
// counter: waiters never miss a change that happened between two waits.
class ChangeSignal {
 public:
  void Notify();
  uint64_t generation() const;
  // Returns as soon as the generation differs from `seen`, or after `timeout`; returns the
  // generation then.
  uint64_t WaitChange(uint64_t seen, absl::Duration timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint64_t generation_ = 0;
};

class Ledger {
 public:
  // `loaded`: what the journal held at start (StateStore::Opened). Owns the journal; a null one
  // records nothing (tests that need no durability).
  Ledger(std::unique_ptr<Journal> journal, State loaded);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  class Edit;
  // One Reserve's changes until Commit or Abort; move-only. Destroyed while open, it aborts.
  class Txn {
   public:
    Txn() = default;
    Txn(Txn&& other) noexcept : ledger_(std::exchange(other.ledger_, nullptr)), id_(other.id_) {}
    Txn& operator=(Txn&& other) noexcept;
    ~Txn();
    bool open() const { return ledger_ != nullptr; }

   private:
    friend class Ledger;
    Txn(Ledger* ledger, uint64_t id) : ledger_(ledger), id_(id) {}
    Ledger* ledger_ = nullptr;
    uint64_t id_ = 0;
  };

  // Runs `plan` with the lock held. An error from `plan` undoes what it changed and is returned
  // as is. `plan` must not block, do I/O, or call the Ledger.
  absl::StatusOr<Txn> Reserve(const std::function<absl::Status(Edit&)>& plan)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the records of `txn` in order (stops at the first failure) and makes its changes
  // final. On failure the transaction stays open, its changes in memory: undo the side effects,
  // then Abort. The error is the journal's, after the label of the failing change if it has one.
  absl::Status Commit(Txn& txn) ABSL_LOCKS_EXCLUDED(mu_);
  // Undoes the memory changes of an open transaction; a no-op for a finished one.
  void Abort(Txn& txn) ABSL_LOCKS_EXCLUDED(mu_);

  // Runs `read(const State&)` with the lock held and returns what it returns. Keep it short.
  template <typename F>
  auto Read(F&& read) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return std::forward<F>(read)(static_cast<const State&>(state_));
  }
  // Likewise with the owners in flight (changed by an open transaction: not durable yet).
  template <typename F>
  auto ReadWithInFlight(F&& read) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return std::forward<F>(read)(static_cast<const State&>(state_),
                                 static_cast<const std::set<std::string>&>(in_flight_));
  }
  // A copy of the state as it is in memory (open transactions included).
  State Copy() const ABSL_LOCKS_EXCLUDED(mu_);

  ChangeSignal& changes() { return changes_; }

 private:
  struct Change;
  struct Open;
  static void Undo(const Change& c, State* state);
  // The journal record of a change, and the one putting back the value before it.
  absl::Status Record(const Change& c);
  void RecordBefore(const Change& c);
  // Forgets an open transaction: its owners are no longer in flight or held.
  void Finish(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state the journal holds: every open transaction undone.
  State Committed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompactIfDue() ABSL_LOCKS_EXCLUDED(mu_);

  std::unique_ptr<Journal> journal_;
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Open> open_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Owners changed by an open transaction, and by which.
  std::map<std::string, uint64_t> changing_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> in_flight_ ABSL_GUARDED_BY(mu_);
  // Owners an open transaction holds unchanged (a replayed prepare checking its CDI file).
  std::map<std::string, int> held_ ABSL_GUARDED_BY(mu_);
  // Commits writing records now; a compaction waits for none, and none starts during it.
  int appending_ ABSL_GUARDED_BY(mu_) = 0;
  // Open transactions that freed devices in memory before their records are durable (Open's
  // `exclusive`): while one is open, Reserve waits.
  int exclusive_ ABSL_GUARDED_BY(mu_) = 0;
  bool compacting_ ABSL_GUARDED_BY(mu_) = false;
  ChangeSignal changes_;
};

// What a plan may do, with the Ledger's lock held. Every change is checked by State's rules and
// refused (Unavailable) for an owner another open transaction changes or holds.
class Ledger::Edit {
 public:
  const State& state() const {
    ledger_->mu_.AssertHeld();
    return ledger_->state_;
  }
  // Changed by an open transaction (this one's changes excluded): not durable yet.
  bool InFlight(const std::string& owner) const;
  // In flight, or held by an open transaction.
  bool Busy(const std::string& owner) const;
  const std::set<std::string>& in_flight() const {
    ledger_->mu_.AssertHeld();
    return ledger_->in_flight_;
  }

  // A new owner: kPreparing until Commit, recorded and then kept as kPrepared.
  absl::Status Add(Allocation allocation);
  // Gives up `owner` (must exist): kUnpreparing, holding its devices, until Commit removes it.
  absl::Status Release(const std::string& owner);
  // `allocation` replaces its owner's, holding a subset of its devices (State::Restore's rule);
  // one holding nothing removes the owner.
  absl::Status Shrink(Allocation allocation);
  // `label` starts the error of a failed record ("recording reservation r1").
  absl::Status PutReservation(Reservation reservation, std::string label = "");
  absl::Status RemoveReservation(const std::string& uid, std::string label = "");
  // Keeps others from changing `owner` until the transaction ends; changes nothing.
  void Hold(const std::string& owner);

 private:
  friend class Ledger;
  Edit(Ledger* ledger, uint64_t id) : ledger_(ledger), id_(id) {}
  // Marks `owner` changed by this transaction; Unavailable when another one changes or holds it.
  absl::Status Claim(const std::string& owner);
  Open& txn();
  // This transaction frees devices before they are durable: no other one may plan until it ends.
  void MarkExclusive();
  Ledger* ledger_;
  uint64_t id_;
};

// Start-up with reservations off: forgets every reservation (nobody would ever expire or release
// them) in one transaction. Returns how many; the error starts with the uid whose record failed.
absl::StatusOr<int> ReleaseAllReservations(Ledger& ledger);

}  // namespace topodra::state
