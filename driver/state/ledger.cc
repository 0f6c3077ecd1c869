#include "driver/state/ledger.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"

namespace topodra::state {

void ChangeSignal::Notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
  }
  cv_.notify_all();
}

uint64_t ChangeSignal::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

uint64_t ChangeSignal::WaitChange(uint64_t seen, absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, absl::ToChronoMicroseconds(timeout), [&] { return generation_ != seen; });
  return generation_;
}

// One change of a transaction, with what it replaced.
struct Ledger::Change {
  enum class Kind { kAdd, kRelease, kShrink, kPutReservation, kRemoveReservation };
  Kind kind = Kind::kAdd;
  std::string key;  // owner or reservation uid
  std::optional<Allocation> before, after;
  std::optional<Reservation> reservation_before, reservation_after;
  std::string label;
};

struct Ledger::Open {
  std::vector<Change> changes;
  std::set<std::string> owners;  // changed
  std::vector<std::string> held;
  bool commit_failed = false;
  // Frees devices in memory before its records are durable (a shrink, a reservation replaced or
  // removed): no other transaction plans until it ends, so nobody takes those devices and an
  // Abort can always put them back.
  bool exclusive = false;
};

Ledger::Txn& Ledger::Txn::operator=(Txn&& other) noexcept {
  if (this != &other) {
    if (ledger_ != nullptr) ledger_->Abort(*this);
    ledger_ = std::exchange(other.ledger_, nullptr);
    id_ = other.id_;
  }
  return *this;
}

Ledger::Txn::~Txn() {
  if (ledger_ != nullptr) ledger_->Abort(*this);
}

namespace {

class NoJournal : public Journal {
 public:
  absl::Status Put(const Allocation&) override { return absl::OkStatus(); }
  absl::Status Remove(const std::string&) override { return absl::OkStatus(); }
  absl::Status PutReservation(const Reservation&) override { return absl::OkStatus(); }
  absl::Status RemoveReservation(const std::string&) override { return absl::OkStatus(); }
  bool ShouldCompact(int) const override { return false; }
  absl::Status Compact(const State&) override { return absl::OkStatus(); }
};

}  // namespace

Ledger::Ledger(std::unique_ptr<Journal> journal, State loaded)
    : journal_(journal != nullptr ? std::move(journal) : std::make_unique<NoJournal>()),
      state_(std::move(loaded)) {}

Ledger::~Ledger() = default;

State Ledger::Copy() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

absl::StatusOr<Ledger::Txn> Ledger::Reserve(const std::function<absl::Status(Edit&)>& plan) {
  Txn txn;
  bool notify = false;
  {
    absl::MutexLock lock(&mu_);
    auto no_exclusive = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return exclusive_ == 0; };
    mu_.Await(absl::Condition(&no_exclusive));
    const uint64_t id = ++next_id_;
    Open& open = open_[id];
    Edit edit(this, id);
    absl::Status planned;
    auto undo = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (auto c = open.changes.rbegin(); c != open.changes.rend(); ++c) Undo(*c, &state_);
      Finish(id);
    };
    try {
      planned = plan(edit);
    } catch (...) {
      undo();
      throw;
    }
    if (!planned.ok()) {
      undo();
      return planned;
    }
    if (open.changes.empty() && open.held.empty()) {
      Finish(id);
      return txn;
    }
    notify = std::any_of(open.changes.begin(), open.changes.end(), [](const Change& c) {
      return c.kind == Change::Kind::kAdd || c.kind == Change::Kind::kShrink;
    });
    txn = Txn(this, id);
  }
  // Devices taken in memory: whoever lists free devices must see them gone now.
  if (notify) changes_.Notify();
  return txn;
}

absl::Status Ledger::Commit(Txn& txn) {
  if (!txn.open()) return absl::OkStatus();
  const uint64_t id = txn.id_;
  std::vector<Change> records;
  {
    absl::MutexLock lock(&mu_);
    Open& open = open_.at(id);
    if (open.changes.empty()) {
      Finish(id);
      txn.ledger_ = nullptr;
      return absl::OkStatus();
    }
    auto not_compacting = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !compacting_; };
    mu_.Await(absl::Condition(&not_compacting));
    ++appending_;
    records = open.changes;
  }
  absl::Status recorded = absl::OkStatus();
  for (const Change& c : records) {
    // A throw here would leave appending_ raised and every later commit waiting behind a
    // compaction that never starts.
    try {
      recorded = Record(c);
    } catch (const std::exception& e) {
      recorded = absl::InternalError(absl::StrCat("journal write threw: ", e.what()));
    }
    if (!recorded.ok()) {
      if (!c.label.empty()) {
        recorded = absl::Status(recorded.code(), absl::StrCat(c.label, ": ", recorded.message()));
      }
      break;
    }
  }
  bool notify = false;
  {
    absl::MutexLock lock(&mu_);
    --appending_;
    Open& open = open_.at(id);
    if (!recorded.ok()) {
      open.commit_failed = true;
      return recorded;
    }
    for (const Change& c : open.changes) {
      switch (c.kind) {
        case Change::Kind::kAdd:
          (void)state_.SetPhase(c.key, Phase::kPrepared);
          // Now durable, the use of a reservation counts (an allocateOnce one ends).
          notify = notify || !c.after->reservation.empty();
          break;
        case Change::Kind::kRelease:
          (void)state_.Remove(c.key);
          notify = true;
          break;
        case Change::Kind::kShrink:
          break;
        case Change::Kind::kPutReservation:
        case Change::Kind::kRemoveReservation:
          notify = true;
          break;
      }
    }
    Finish(id);
    txn.ledger_ = nullptr;
  }
  if (notify) changes_.Notify();
  CompactIfDue();
  return absl::OkStatus();
}

void Ledger::Abort(Txn& txn) {
  if (!txn.open()) return;
  const uint64_t id = txn.id_;
  txn.ledger_ = nullptr;
  std::vector<Change> compensate;
  bool notify = false;
  {
    absl::MutexLock lock(&mu_);
    Open& open = open_.at(id);
    for (auto c = open.changes.rbegin(); c != open.changes.rend(); ++c) {
      Undo(*c, &state_);
      notify = notify || c->kind != Change::Kind::kRelease;
    }
    if (!open.commit_failed) {
      Finish(id);
    } else {
      // A record reported as failed may still have reached the disk (a failed fdatasync after
      // the write). Its owners stay in flight until the former values are recorded again, so no
      // later change of theirs is recorded before these.
      auto not_compacting = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !compacting_; };
      mu_.Await(absl::Condition(&not_compacting));
      ++appending_;
      compensate = open.changes;
    }
  }
  if (notify) changes_.Notify();
  if (compensate.empty()) return;
  for (auto c = compensate.rbegin(); c != compensate.rend(); ++c) RecordBefore(*c);
  absl::MutexLock lock(&mu_);
  --appending_;
  Finish(id);
}

void Ledger::Finish(uint64_t id) {
  auto it = open_.find(id);
  if (it == open_.end()) return;
  for (const std::string& owner : it->second.owners) {
    changing_.erase(owner);
    in_flight_.erase(owner);
  }
  for (const std::string& owner : it->second.held) {
    if (--held_[owner] <= 0) held_.erase(owner);
  }
  if (it->second.exclusive) --exclusive_;
  open_.erase(it);
}

void Ledger::Undo(const Change& c, State* state) {
  switch (c.kind) {
    case Change::Kind::kAdd:
      (void)state->Remove(c.key);
      break;
    case Change::Kind::kRelease:
      (void)state->SetPhase(c.key, c.before->phase);
      break;
    case Change::Kind::kShrink:
      (void)state->Remove(c.key);
      (void)state->Restore(*c.before);
      break;
    case Change::Kind::kPutReservation:
      if (c.reservation_before) {
        (void)state->PutReservation(*c.reservation_before);
      } else {
        (void)state->RemoveReservation(c.key);
      }
      break;
    case Change::Kind::kRemoveReservation:
      (void)state->PutReservation(*c.reservation_before);
      break;
  }
}

absl::Status Ledger::Record(const Change& c) {
  switch (c.kind) {
    case Change::Kind::kAdd:
      return journal_->Put(*c.after);
    case Change::Kind::kRelease:
      return journal_->Remove(c.key);
    case Change::Kind::kShrink:
      if (c.after->cpus.Empty() && c.after->gpus.empty()) return journal_->Remove(c.key);
      return journal_->Put(*c.after);
    case Change::Kind::kPutReservation:
      return journal_->PutReservation(*c.reservation_after);
    case Change::Kind::kRemoveReservation:
      return journal_->RemoveReservation(c.key);
  }
  return absl::InternalError("unknown change");
}

void Ledger::RecordBefore(const Change& c) {
  switch (c.kind) {
    case Change::Kind::kAdd:
      return;
    case Change::Kind::kRelease:
    case Change::Kind::kShrink:
      (void)journal_->Put(*c.before);
      return;
    case Change::Kind::kPutReservation:
    case Change::Kind::kRemoveReservation:
      if (c.reservation_before) (void)journal_->PutReservation(*c.reservation_before);
      return;
  }
}

State Ledger::Committed() const {
  State committed = state_;
  // Undone newest first: each transaction's changes were made on what the older ones left.
  for (auto open = open_.rbegin(); open != open_.rend(); ++open) {
    const std::vector<Change>& changes = open->second.changes;
    for (auto c = changes.rbegin(); c != changes.rend(); ++c) Undo(*c, &committed);
  }
  return committed;
}

void Ledger::CompactIfDue() {
  State committed;
  {
    absl::MutexLock lock(&mu_);
    if (compacting_ || !journal_->ShouldCompact(state_.Size())) return;
    compacting_ = true;
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return appending_ == 0; };
    mu_.Await(absl::Condition(&drained));
    committed = Committed();
  }
  // Outside the lock: the snapshot is synced. No record is written meanwhile (Commit waits).
  if (absl::Status st = journal_->Compact(committed); !st.ok()) {
    // The journal keeps growing but stays correct; try again on the next change.
    spdlog::warn("state compaction failed: {}", std::string(st.message()));
  } else {
    spdlog::debug("state compacted: {} allocations", committed.Size());
  }
  absl::MutexLock lock(&mu_);
  compacting_ = false;
}

// --- Edit ---

void Ledger::Edit::MarkExclusive() {
  ledger_->mu_.AssertHeld();
  Open& open = txn();
  if (open.exclusive) return;
  open.exclusive = true;
  ++ledger_->exclusive_;
}

Ledger::Open& Ledger::Edit::txn() {
  ledger_->mu_.AssertHeld();
  return ledger_->open_.at(id_);
}

bool Ledger::Edit::InFlight(const std::string& owner) const {
  ledger_->mu_.AssertHeld();
  auto it = ledger_->changing_.find(owner);
  return it != ledger_->changing_.end() && it->second != id_;
}

bool Ledger::Edit::Busy(const std::string& owner) const {
  ledger_->mu_.AssertHeld();
  return InFlight(owner) || ledger_->held_.contains(owner);
}

absl::Status Ledger::Edit::Claim(const std::string& owner) {
  ledger_->mu_.AssertHeld();
  const Open& mine = txn();
  const bool held_by_me = std::find(mine.held.begin(), mine.held.end(), owner) != mine.held.end();
  if (InFlight(owner) || (ledger_->held_.contains(owner) && !held_by_me)) {
    return absl::UnavailableError(
        absl::StrCat(owner, " is being changed by a concurrent call; retry"));
  }
  return absl::OkStatus();
}

absl::Status Ledger::Edit::Add(Allocation allocation) {
  ledger_->mu_.AssertHeld();
  if (absl::Status st = Claim(allocation.owner); !st.ok()) return st;
  Change c;
  c.kind = Change::Kind::kAdd;
  c.key = allocation.owner;
  c.after = allocation;
  c.after->phase = Phase::kPrepared;
  allocation.phase = Phase::kPreparing;
  if (absl::Status st = ledger_->state_.Add(std::move(allocation)); !st.ok()) return st;
  ledger_->changing_[c.key] = id_;
  ledger_->in_flight_.insert(c.key);
  txn().owners.insert(c.key);
  txn().changes.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status Ledger::Edit::Release(const std::string& owner) {
  ledger_->mu_.AssertHeld();
  if (absl::Status st = Claim(owner); !st.ok()) return st;
  const Allocation* a = ledger_->state_.Find(owner);
  if (a == nullptr) return absl::NotFoundError(absl::StrCat(owner, " holds nothing"));
  Change c;
  c.kind = Change::Kind::kRelease;
  c.key = owner;
  c.before = *a;
  (void)ledger_->state_.SetPhase(owner, Phase::kUnpreparing);
  ledger_->changing_[owner] = id_;
  ledger_->in_flight_.insert(owner);
  txn().owners.insert(owner);
  txn().changes.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status Ledger::Edit::Shrink(Allocation allocation) {
  ledger_->mu_.AssertHeld();
  if (absl::Status st = Claim(allocation.owner); !st.ok()) return st;
  const Allocation* a = ledger_->state_.Find(allocation.owner);
  if (a == nullptr) return absl::NotFoundError(absl::StrCat(allocation.owner, " holds nothing"));
  MarkExclusive();
  Change c;
  c.kind = Change::Kind::kShrink;
  c.key = allocation.owner;
  c.before = *a;
  c.after = allocation;
  (void)ledger_->state_.Remove(c.key);
  if (!allocation.cpus.Empty() || !allocation.gpus.empty()) {
    if (absl::Status st = ledger_->state_.Restore(std::move(allocation)); !st.ok()) {
      (void)ledger_->state_.Restore(*c.before);
      return st;
    }
  }
  ledger_->changing_[c.key] = id_;
  ledger_->in_flight_.insert(c.key);
  txn().owners.insert(c.key);
  txn().changes.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status Ledger::Edit::PutReservation(Reservation reservation, std::string label) {
  ledger_->mu_.AssertHeld();
  MarkExclusive();
  Change c;
  c.kind = Change::Kind::kPutReservation;
  c.key = reservation.uid;
  c.label = std::move(label);
  if (const Reservation* had = ledger_->state_.FindReservation(c.key)) c.reservation_before = *had;
  c.reservation_after = reservation;
  if (absl::Status st = ledger_->state_.PutReservation(std::move(reservation)); !st.ok()) {
    return st;
  }
  txn().changes.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status Ledger::Edit::RemoveReservation(const std::string& uid, std::string label) {
  ledger_->mu_.AssertHeld();
  const Reservation* had = ledger_->state_.FindReservation(uid);
  if (had == nullptr) return absl::OkStatus();  // nothing to record
  MarkExclusive();
  Change c;
  c.kind = Change::Kind::kRemoveReservation;
  c.key = uid;
  c.label = std::move(label);
  c.reservation_before = *had;
  (void)ledger_->state_.RemoveReservation(uid);
  txn().changes.push_back(std::move(c));
  return absl::OkStatus();
}

void Ledger::Edit::Hold(const std::string& owner) {
  ledger_->mu_.AssertHeld();
  ++ledger_->held_[owner];
  txn().held.push_back(owner);
}

absl::StatusOr<int> ReleaseAllReservations(Ledger& ledger) {
  int released = 0;
  absl::StatusOr<Ledger::Txn> txn = ledger.Reserve([&](Ledger::Edit& edit) {
    std::vector<std::string> uids;
    for (const auto& [uid, r] : edit.state().reservations()) uids.push_back(uid);
    for (const std::string& uid : uids) {
      if (absl::Status st = edit.RemoveReservation(uid, uid); !st.ok()) return st;
    }
    released = static_cast<int>(uids.size());
    return absl::OkStatus();
  });
  if (!txn.ok()) return txn.status();
  if (absl::Status st = ledger.Commit(*txn); !st.ok()) {
    ledger.Abort(*txn);
    return st;
  }
  return released;
}

}  // namespace topodra::state
