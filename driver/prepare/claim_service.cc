#include "driver/prepare/claim_service.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/status.h"
#include "driver/claims/allocation_result.h"
#include "driver/kube/rest_client.h"
#include "driver/prepare/identifiers.h"

namespace topodra::prepare {
namespace {

using json = nlohmann::json;

std::string Ref(const ClaimRef& ref) { return absl::StrCat(ref.ns, "/", ref.name); }

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Checks the CDI file a prepared claim's answer names ({"file", "spec"} as the planner stored
// it; anything else: the claim has none) and writes it again when it is missing or differs.
// Returns "" when it was right, else why it was written.
absl::StatusOr<std::string> RestoreCdiFile(const cdi::SpecStore& store, const json& cdi) {
  if (!cdi.is_object()) return std::string();
  const auto file = cdi.find("file");
  const auto spec = cdi.find("spec");
  if (file == cdi.end() || !file->is_string() || spec == cdi.end()) return std::string();
  const std::string name = file->get<std::string>();
  absl::StatusOr<cdi::Spec> want = cdi::FromJson(spec->dump());
  if (!want.ok()) {
    return absl::DataLossError(
        absl::StrCat("stored CDI spec of ", name, ": ", Message(want.status())));
  }
  absl::StatusOr<cdi::Spec> have = store.Read(name);
  if (have.ok() && *have == *want) return std::string();
  std::string why = "it differed";
  if (absl::IsNotFound(have.status())) {
    why = "it was missing";
  } else if (!have.ok()) {
    why = absl::StrCat("it could not be read: ", Message(have.status()));
  }
  // Not synced, as at prepare: the journal holds the content and start restores it.
  if (absl::StatusOr<cdi::Spec> w = store.Write(name, *want, /*synced=*/false); !w.ok()) {
    return w.status();
  }
  return why;
}

}  // namespace

absl::StatusOr<json> ApiClaimSource::GetClaim(const std::string& ns, const std::string& name,
                                              const FetchLimits& limits) {
  const absl::Time deadline = absl::Now() + limits.timeout;
  std::string version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    version = version_;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::string path =
        absl::StrCat("/apis/resource.k8s.io/", version, "/namespaces/", kube::UrlEncode(ns),
                     "/resourceclaims/", kube::UrlEncode(name));
    kube::RequestLimits request;
    // At least 1 ms: 0 would mean the client's own timeout.
    request.timeout =
        std::max(std::chrono::milliseconds(1), absl::ToChronoMilliseconds(deadline - absl::Now()));
    request.cancelled = limits.cancelled;
    absl::StatusOr<kube::Response> got = client_->GetWithin(path, request);
    if (got.ok()) return std::move(got->body);
    // A 404 for the group version itself (not a Status about the claim): try the other one.
    const bool claim_not_found =
        absl::IsNotFound(got.status()) &&
        std::string(got.status().message()).find("resourceclaims") != std::string::npos &&
        std::string(got.status().message()).find("not found") != std::string::npos;
    if (!absl::IsNotFound(got.status()) || claim_not_found || attempt == 1) return got.status();
    version = version == "v1" ? "v1beta2" : "v1";
    std::lock_guard<std::mutex> lock(mu_);
    version_ = version;
  }
  return absl::InternalError("unreachable");
}

ClaimService::ClaimService(DriverSetup setup, topology::Topology topo, NodeAllocations* node,
                           const cdi::SpecStore* cdi, ClaimSource* source)
    : driver_(setup.driver),
      node_(node),
      cdi_(cdi),
      source_(source),
      setup_(std::move(setup)),
      topo_(std::move(topo)) {}

void ClaimService::Update(DriverSetup setup, topology::Topology topo) {
  std::lock_guard<std::mutex> lock(node_->mu);
  setup_ = std::move(setup);
  topo_ = std::move(topo);
  node_->changes.Notify();
}

std::vector<std::pair<std::string, std::string>> ClaimService::Devices() const {
  std::lock_guard<std::mutex> lock(node_->mu);
  std::vector<std::pair<std::string, std::string>> out;
  if (setup_.kind == DriverKind::kCpu) {
    for (const auto& [name, device] : setup_.cpu_pool.devices) {
      out.emplace_back(setup_.cpu_pool.name, name);
    }
  } else {
    for (const auto& [name, gpu] : setup_.gpus) out.emplace_back(setup_.gpu_pool, name);
  }
  return out;
}

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

absl::StatusOr<ClaimService::Reconciled> ClaimService::ReconcileCdi() {
  std::map<std::string, json> wanted;
  std::string marker;
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    marker = setup_.cdi_marker;
    for (const auto& [owner, a] : node_->state.allocations()) {
      if (a.kind != state::AllocationKind::kDraClaim || a.driver != driver_) continue;
      const json cdi = a.cdi.Parse();
      if (!cdi.is_object()) continue;
      const auto file = cdi.find("file");
      const auto spec = cdi.find("spec");
      if (file == cdi.end() || !file->is_string() || spec == cdi.end()) continue;
      wanted[file->get<std::string>()] = *spec;
    }
  }
  return cdi::ReconcileCdiFiles(
      *cdi_, wanted,
      [&](const std::string& file) {
        return ClassifyCdiFile(IsCdiFileOf(driver_, file), file, marker);
      },
      absl::StrCat("driver ", driver_));
}

struct ClaimService::Fetched {
  // The outcome is final: an error, or the answer of a claim prepared before.
  bool answered = false;
  // Answered because the caller gave up or its deadline was near: told in one line per call.
  bool given_up = false;
  ClaimOutcome outcome;
  std::optional<claims::Claim> claim;  // to commit, when not answered
};

namespace {

enum GiveUp : int { kGoOn = 0, kCancelled = 1, kDeadline = 2 };

std::string GiveUpText(int why) {
  return why == kCancelled ? "the caller cancelled the call" : "the caller's deadline has passed";
}

}  // namespace

std::map<std::string, ClaimOutcome> ClaimService::Prepare(const std::vector<ClaimRef>& claims,
                                                          const CallLimits& limits) {
  const absl::Time call_start = absl::Now();
  // One piece of work per uid: the response has one entry per uid, and a uid repeated in one
  // call would otherwise race with itself.
  std::vector<const ClaimRef*> work;
  {
    std::set<std::string> seen;
    for (const ClaimRef& ref : claims) {
      if (seen.insert(ref.uid).second) work.push_back(&ref);
    }
  }
  struct Slot {
    Fetched fetched;
    bool ready = false;  // guarded by mu
    std::chrono::steady_clock::time_point start;
  };
  std::vector<Slot> slots(work.size());
  std::mutex mu;
  std::condition_variable ready_cv;
  std::atomic<size_t> next{0};
  // A GiveUp: set on this thread, read by the fetchers (and the GETs they run) to stop.
  std::atomic<int> give_up{kGoOn};
  std::atomic<bool> stop_gets{false};
  // Polled on this thread only (see CallLimits::cancelled).
  auto check_caller = [&] {
    if (give_up.load() != kGoOn) return;
    int why = kGoOn;
    if (limits.cancelled && limits.cancelled()) {
      why = kCancelled;
    } else if (absl::Now() >= limits.deadline) {
      why = kDeadline;
    }
    if (why != kGoOn) {
      give_up = why;
      stop_gets = true;
    }
  };

  bool on_this_thread = false;  // no fetcher thread could be made
  auto fetcher = [&] {
    for (size_t i; (i = next++) < work.size();) {
      if (on_this_thread) check_caller();
      slots[i].start = std::chrono::steady_clock::now();
      Fetched f;
      try {
        if (const int why = give_up.load(); why != kGoOn) {
          f.answered = f.given_up = true;
          f.outcome.error = absl::StrCat("claim ", ShowClaimRef(work[i]->ns, work[i]->name),
                                         ": not prepared: ", GiveUpText(why));
        } else {
          f = FetchOne(*work[i], limits, call_start, stop_gets);
          if (f.given_up && give_up.load() != kGoOn) {
            f.outcome.error = absl::StrCat("claim ", ShowClaimRef(work[i]->ns, work[i]->name),
                                           ": not prepared: ", GiveUpText(give_up.load()));
          }
        }
      } catch (const std::exception& e) {
        // STYLE.md: nothing throws on purpose; this keeps one bug from failing every claim.
        f = Fetched();
        f.answered = true;
        f.outcome.error = absl::StrCat("claim ", ShowClaimRef(work[i]->ns, work[i]->name),
                                       ": internal error: ", e.what());
        spdlog::error("driver {}: {}", driver_, f.outcome.error);
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        slots[i].fetched = std::move(f);
        slots[i].ready = true;
      }
      ready_cv.notify_all();
    }
  };
  std::vector<std::thread> fetchers;
  // Whatever ends this function (an exception too) stops and joins the fetchers first.
  struct JoinAll {
    std::vector<std::thread>& threads;
    std::atomic<int>& give_up;
    std::atomic<bool>& stop_gets;
    ~JoinAll() {
      int none = kGoOn;
      give_up.compare_exchange_strong(none, kCancelled);
      stop_gets = true;
      for (std::thread& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } join_all{fetchers, give_up, stop_gets};
  const size_t wanted = std::min<size_t>(std::max(1, fetch_.parallel), work.size());
  for (size_t t = 0; t < wanted; ++t) {
    try {
      fetchers.emplace_back(fetcher);
    } catch (const std::system_error& e) {
      if (fetchers.empty()) {
        spdlog::warn("driver {}: no thread for claim GETs, one at a time: {}", driver_, e.what());
      }
      break;
    }
  }
  if (fetchers.empty()) {  // one at a time on this thread, still within the limits
    on_this_thread = true;
    fetcher();
  }

  std::map<std::string, ClaimOutcome> out;
  int given_up = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    {
      std::unique_lock<std::mutex> lock(mu);
      while (!slots[i].ready) {
        lock.unlock();
        check_caller();
        lock.lock();
        ready_cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return slots[i].ready; });
      }
    }
    const ClaimRef& ref = *work[i];
    Fetched& f = slots[i].fetched;
    check_caller();
    ClaimOutcome outcome;
    if (f.answered) {
      outcome = std::move(f.outcome);
      if (f.given_up) ++given_up;
    } else if (const int why = give_up.load(); why != kGoOn) {
      outcome.error = absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name),
                                   ": fetched but not prepared: ", GiveUpText(why));
      ++given_up;
    } else {
      try {
        outcome = CommitOne(ref, *f.claim);
      } catch (const std::exception& e) {
        outcome = ClaimOutcome();
        outcome.error = absl::StrCat("claim ", Ref(ref), ": internal error: ", e.what());
        spdlog::error("{}: {}", Who(ref), outcome.error);
      }
    }
    if (observer_ != nullptr) {
      observer_->OnPrepare(driver_, outcome.error.empty(), SecondsSince(slots[i].start));
    }
    out[ref.uid] = std::move(outcome);
  }
  if (given_up > 0) {
    // One line for the call, not one per claim: a call of thousands of claims may give up.
    spdlog::warn("driver {}: {} of {} claims of a prepare call were not prepared after {}: {}",
                 driver_, given_up, work.size(), absl::FormatDuration(absl::Now() - call_start),
                 give_up.load() != kGoOn ? GiveUpText(give_up.load())
                                         : "too little time was left before the caller's deadline");
  }
  return out;
}

ClaimService::Fetched ClaimService::FetchOne(const ClaimRef& ref, const CallLimits& limits,
                                             absl::Time call_start,
                                             const std::atomic<bool>& gave_up) {
  Fetched f;
  f.answered = true;
  if (absl::Status id = ValidateClaimIdentity(ref.ns, ref.name, ref.uid); !id.ok()) {
    // Who() would echo the whole value: only bounded forms of what the kubelet sent.
    f.outcome.error = absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name), " uid ",
                                   ShowValue(ref.uid), ": refused: ", Message(id));
    spdlog::warn("driver {}: prepare failed: {}", driver_, f.outcome.error);
    return f;
  }
  auto fail = [&](std::string message) {
    spdlog::warn("{}: prepare failed: {}", Who(ref), message);
    f.outcome.error = std::move(message);
    return std::move(f);
  };
  {
    std::unique_lock<std::mutex> lock(node_->mu);
    if (std::optional<ClaimOutcome> o = Known(ref, lock)) {
      f.outcome = *std::move(o);
      return f;
    }
  }

  // Each GET ends in time for the claims of the call to be prepared and answered before the
  // caller's deadline.
  const absl::Duration margin = std::min(fetch_.margin, (limits.deadline - call_start) / 4);
  const absl::Duration left = limits.deadline - absl::Now() - margin;
  const absl::Duration timeout = std::min(fetch_.request_timeout, left);
  if (timeout <= absl::ZeroDuration()) {
    f.given_up = true;
    f.outcome.error =
        absl::StrCat("claim ", Ref(ref), ": not fetched: less than ", absl::FormatDuration(margin),
                     " was left before the caller's deadline");
    return f;
  }
  const auto t0 = std::chrono::steady_clock::now();
  FetchLimits fetch_limits;
  fetch_limits.timeout = timeout;
  fetch_limits.cancelled = &gave_up;
  absl::StatusOr<json> object = source_->GetClaim(ref.ns, ref.name, fetch_limits);
  const auto t1 = std::chrono::steady_clock::now();
  if (absl::IsCancelled(object.status()) && gave_up.load()) {
    f.given_up = true;
    f.outcome.error = absl::StrCat("claim ", Ref(ref), ": not fetched: the caller gave up");
    return f;
  }
  if (absl::IsDeadlineExceeded(object.status())) {
    return fail(absl::StrCat(
        "claim ", Ref(ref), ": get ResourceClaim: no answer within ", absl::FormatDuration(timeout),
        timeout == fetch_.request_timeout
            ? " (the per-request timeout)"
            : absl::StrCat(" (the time left before the caller's deadline, less ",
                           absl::FormatDuration(margin), " to answer)"),
        "; the other claims of the call go on: ", Message(object.status())));
  }
  if (!object.ok()) {
    return fail(
        absl::StrCat("claim ", Ref(ref), ": get ResourceClaim: ", Message(object.status())));
  }
  absl::StatusOr<claims::Claim> claim = claims::ParseClaim(*object);
  if (!claim.ok()) {
    return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(claim.status())));
  }
  if (!claim->pods.empty() && claim->uid == ref.uid) {
    std::lock_guard<std::mutex> lock(pods_mu_);
    pods_[ref.uid] = absl::StrJoin(claim->pods, ",");
  }
  if (claim->uid != ref.uid) {
    return fail(absl::StrCat("claim ", Ref(ref), ": the API server has uid \"", claim->uid,
                             "\" but the kubelet asked for uid \"", ref.uid,
                             "\" (the claim was deleted and re-created)"));
  }
  spdlog::debug("{}: get took {} us", Who(ref),
                std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
  f.answered = false;
  f.claim = *std::move(claim);
  return f;
}

std::optional<ClaimOutcome> ClaimService::Known(const ClaimRef& ref,
                                                std::unique_lock<std::mutex>& lock) {
  const std::string owner = state::DraOwner(driver_, ref.uid);
  const state::Allocation* a = node_->state.Find(owner);
  if (a == nullptr) return std::nullopt;
  ClaimOutcome o;
  auto fail = [&](std::string message) {
    spdlog::warn("{}: prepare failed: {}", Who(ref), message);
    o.error = std::move(message);
    return o;
  };
  if (a->phase != state::Phase::kPrepared || node_->in_flight.contains(owner)) {
    return fail(absl::StrCat("claim ", Ref(ref),
                             ": a concurrent call is preparing or unpreparing it; retry"));
  }
  absl::StatusOr<std::vector<PreparedDevice>> devices = DevicesFromJson(a->answer.Parse());
  if (!devices.ok()) return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(devices.status())));
  // The answer names CDI devices: their file must be there (a user or a cleanup may have removed
  // it since). Outside the lock; unprepare waits for it (checking_cdi_).
  const json cdi = a->cdi.Parse();
  ++checking_cdi_[owner];
  lock.unlock();
  absl::StatusOr<std::string> restored = RestoreCdiFile(*cdi_, cdi);
  lock.lock();
  if (--checking_cdi_[owner] == 0) checking_cdi_.erase(owner);
  if (!restored.ok()) {
    return fail(absl::StrCat("claim ", Ref(ref), ": prepared, but its CDI file cannot be written: ",
                             Message(restored.status())));
  }
  if (!restored->empty()) {
    spdlog::info("{}: already prepared; restored its CDI spec {} ({})", Who(ref),
                 cdi_->PathOf(cdi["file"].get<std::string>()), *restored);
  } else {
    spdlog::debug("{}: already prepared, same answer", Who(ref));
  }
  o.devices = *std::move(devices);
  return o;
}

ClaimOutcome ClaimService::CommitOne(const ClaimRef& ref, const claims::Claim& claim) {
  ClaimOutcome out;
  const std::string owner = state::DraOwner(driver_, ref.uid);
  auto fail = [&](std::string message) {
    spdlog::warn("{}: prepare failed: {}", Who(ref), message);
    out.error = std::move(message);
    return out;
  };
  const auto t1 = std::chrono::steady_clock::now();
  Plan plan;
  {
    std::unique_lock<std::mutex> lock(node_->mu);
    // Another call may have prepared it while we fetched it.
    if (std::optional<ClaimOutcome> o = Known(ref, lock)) return *o;
    absl::StatusOr<Plan> planned = PlanClaim(claim, setup_, topo_, node_->state);
    if (!planned.ok()) return fail(Message(planned.status()));
    plan = *std::move(planned);
    if (absl::Status st = node_->state.Add(plan.allocation); !st.ok()) {
      return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(st)));
    }
    node_->changes.Notify();
  }
  const auto t2 = std::chrono::steady_clock::now();
  auto undo = [&]() {
    if (!plan.cdi_file.empty()) (void)cdi_->Remove(plan.cdi_file, /*synced=*/false);
    std::lock_guard<std::mutex> lock(node_->mu);
    (void)node_->state.Remove(owner);
    node_->changes.Notify();
  };
  if (!plan.cdi_file.empty()) {
    if (absl::StatusOr<cdi::Spec> w = cdi_->Write(plan.cdi_file, plan.cdi_spec, /*synced=*/false);
        !w.ok()) {
      undo();
      return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(w.status())));
    }
  }
  const auto t3 = std::chrono::steady_clock::now();
  state::Allocation prepared = plan.allocation;
  prepared.phase = state::Phase::kPrepared;
  {
    // Prepared in memory before the journal record, so a compaction in between keeps it; but
    // not answerable (in_flight) until the record is durable.
    std::lock_guard<std::mutex> lock(node_->mu);
    (void)node_->state.SetPhase(owner, state::Phase::kPrepared);
    node_->in_flight.insert(owner);
  }
  if (absl::Status st = node_->store->Put(prepared); !st.ok()) {
    {
      std::lock_guard<std::mutex> lock(node_->mu);
      node_->in_flight.erase(owner);
    }
    undo();
    return fail(absl::StrCat("claim ", Ref(ref), ": record the allocation: ", Message(st)));
  }
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    node_->in_flight.erase(owner);
    CompactIfDue(node_);
  }
  // Now durable, the use of a reservation counts (an allocateOnce one ends): tell its controller.
  if (!prepared.reservation.empty()) node_->changes.Notify();
  const auto t4 = std::chrono::steady_clock::now();
  auto us = [](auto d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
  spdlog::info("{}: prepared cpus={} gpus={} devices={}", Who(ref),
               prepared.cpus.Empty() ? "none" : prepared.cpus.ToString(), prepared.gpus.size(),
               plan.devices.size());
  spdlog::debug("{}: prepare took plan {} us, cdi {} us, journal {} us", Who(ref), us(t2 - t1),
                us(t3 - t2), us(t4 - t3));
  out.devices = std::move(plan.devices);
  return out;
}

std::map<std::string, std::string> ClaimService::Unprepare(const std::vector<ClaimRef>& claims) {
  std::map<std::string, std::string> out;
  for (const ClaimRef& ref : claims) {
    std::string error;
    const auto start = std::chrono::steady_clock::now();
    try {
      error = UnprepareOne(ref);
    } catch (const std::exception& e) {
      error =
          absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name), ": internal error: ", e.what());
      spdlog::error("driver {}: {}", driver_, error);
    }
    if (observer_ != nullptr) observer_->OnUnprepare(driver_, error.empty(), SecondsSince(start));
    out[ref.uid] = std::move(error);
  }
  return out;
}

std::string ClaimService::UnprepareOne(const ClaimRef& ref) {
  if (absl::Status id = ValidateClaimIdentity(ref.ns, ref.name, ref.uid); !id.ok()) {
    // Who() would echo the whole value: only bounded forms of what the kubelet sent.
    std::string error = absl::StrCat("claim ", ShowClaimRef(ref.ns, ref.name), " uid ",
                                     ShowValue(ref.uid), ": refused: ", Message(id));
    spdlog::warn("driver {}: unprepare failed: {}", driver_, error);
    return error;
  }
  const std::string owner = state::DraOwner(driver_, ref.uid);
  auto fail = [&](std::string message) {
    spdlog::warn("{}: unprepare failed: {}", Who(ref), message);
    return message;
  };
  state::Allocation held;
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    const state::Allocation* a = node_->state.Find(owner);
    if (a == nullptr) {
      // Not ours (another instance's, or never prepared): nothing to do, but a CDI file of a
      // crashed prepare may still be there.
      (void)cdi_->Remove(CdiFileName(driver_, ref.uid, setup_.cdi_marker), /*synced=*/false);
      spdlog::debug("{}: not prepared, nothing to unprepare", Who(ref));
      return "";
    }
    // A prepare whose journal record is still being written (in_flight) would append it after our
    // removal record and bring the claim back on replay: that call must finish first.
    // A repeated prepare rewriting its CDI file (checking_cdi_) would leave it behind.
    if (a->phase != state::Phase::kPrepared || node_->in_flight.contains(owner) ||
        checking_cdi_.contains(owner)) {
      return fail(absl::StrCat("claim ", Ref(ref),
                               ": a concurrent call is preparing or "
                               "unpreparing it; retry"));
    }
    held = *a;
    // Still holding its CPUs, but out of snapshots: the removal record is about to follow.
    (void)node_->state.SetPhase(owner, state::Phase::kPreparing);
  }
  auto restore = [&]() {
    std::lock_guard<std::mutex> lock(node_->mu);
    (void)node_->state.SetPhase(owner, state::Phase::kPrepared);
  };
  const json held_cdi = held.cdi.Parse();
  if (held_cdi.is_object() && held_cdi.contains("file") && held_cdi["file"].is_string()) {
    // Not synced: the journal record below is what makes the release durable, and a file that
    // comes back after a power loss belongs to no prepared claim and is removed at start.
    if (absl::Status st = cdi_->Remove(held_cdi["file"].get<std::string>(), /*synced=*/false);
        !st.ok()) {
      restore();
      return fail(absl::StrCat("claim ", Ref(ref), ": ", Message(st)));
    }
  }
  if (absl::Status st = node_->store->Remove(owner); !st.ok()) {
    // Still prepared: its CDI file must be there for a replayed prepare.
    if (held_cdi.is_object() && held_cdi.contains("spec")) {
      absl::StatusOr<cdi::Spec> spec = cdi::FromJson(held_cdi["spec"].dump());
      if (spec.ok()) (void)cdi_->Write(held_cdi["file"].get<std::string>(), *spec, false);
    }
    restore();
    // The snapshot may have been compacted without it meanwhile: record it again.
    (void)node_->store->Put(held);
    return fail(absl::StrCat("claim ", Ref(ref), ": record the release: ", Message(st)));
  }
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    (void)node_->state.Remove(owner);
    node_->changes.Notify();
    CompactIfDue(node_);
  }
  spdlog::info("{}: unprepared, freed cpus={} gpus={}", Who(ref),
               held.cpus.Empty() ? "none" : held.cpus.ToString(), held.gpus.size());
  {
    std::lock_guard<std::mutex> lock(pods_mu_);
    pods_.erase(ref.uid);
  }
  return "";
}

std::string ClaimService::Who(const ClaimRef& ref) const {
  std::string pods;
  {
    std::lock_guard<std::mutex> lock(pods_mu_);
    if (auto it = pods_.find(ref.uid); it != pods_.end()) pods = it->second;
  }
  // The kubelet's call names no pod; the claim's reservedFor does, once it has been fetched.
  return absl::StrCat("claim ", Ref(ref), " uid=", ref.uid, " driver=", driver_,
                      " pod=", pods.empty() ? "unknown" : pods);
}

void CompactIfDue(NodeAllocations* node) {
  if (!node->store->ShouldCompact(node->state.Size())) return;
  if (absl::Status st = node->store->Compact(node->state); !st.ok()) {
    // The journal keeps growing but stays correct; try again on the next change.
    spdlog::warn("state compaction failed: {}", Message(st));
  } else {
    spdlog::debug("state compacted: {} allocations", node->state.Size());
  }
}

}  // namespace topodra::prepare
