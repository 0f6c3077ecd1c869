#include "driver/reservation/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"

namespace topodra::reservation {
namespace {

using json = nlohmann::json;

class SystemClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

constexpr char kCrdMissing[] = "the Reservation CRD is not installed";

kube::InformerOptions InformerOptionsFor(const ControllerOptions& o) {
  kube::InformerOptions i;
  i.collections = {absl::StrCat("/apis/", kGroup, "/", kVersion, "/", kPlural)};
  i.field_selector = "spec.nodeName=" + o.node_name;
  i.initial_backoff = absl::ToChronoMilliseconds(o.initial_backoff);
  i.max_backoff = absl::ToChronoMilliseconds(o.max_backoff);
  i.watch_timeout_seconds = o.watch_timeout_seconds;
  i.wait = o.backoff_wait;
  return i;
}

}  // namespace

Clock* RealClock() {
  static SystemClock clock;
  return &clock;
}

Controller::Controller(kube::RestClient* client, ControllerOptions options, state::Ledger* ledger,
                       Clock* clock, std::function<NodeContext()> context,
                       std::function<void(const std::vector<Held>&)> held_changed)
    : client_(client),
      opts_(std::move(options)),
      ledger_(ledger),
      clock_(clock),
      context_(std::move(context)),
      held_changed_(std::move(held_changed)),
      informer_(client, InformerOptionsFor(opts_), this) {}

Controller::~Controller() { Stop(); }

std::string Controller::Collection() const {
  return absl::StrCat("/apis/", kGroup, "/", kVersion, "/", kPlural);
}

void Controller::Start() {
  watch_thread_ = std::thread([this] { informer_.Run(); });
  pass_thread_ = std::thread([this] { PassLoop(); });
  // Claims prepared and released change what reservations hold and show.
  changes_thread_ = std::thread([this] {
    uint64_t seen = ledger_->changes().generation();
    while (!stop_.load()) {
      const uint64_t now = ledger_->changes().WaitChange(seen, absl::Milliseconds(250));
      if (now != seen) {
        seen = now;
        Kick();
      }
    }
  });
}

void Controller::Stop() {
  stop_ = true;
  informer_.Stop();
  cv_.notify_all();
  for (std::thread* t : {&watch_thread_, &pass_thread_, &changes_thread_}) {
    if (t->joinable()) t->join();
  }
}

void Controller::Kick() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    kicked_ = true;
  }
  cv_.notify_all();
}

ControllerStatus Controller::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void Controller::RecordError(Loop loop, const absl::Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  // A missing CRD is a state of its own, announced once by List (and its end too): retrying
  // until it is installed is not a failure to warn about again.
  const bool crd_missing = !st.ok() && status_.crd_missing && absl::IsNotFound(st);
  const std::string msg = st.ok() ? "" : std::string(st.message());
  if (!st.ok()) ++status_.errors;
  std::string& last = loop_error_[static_cast<int>(loop)];
  if (msg != last) {
    // Once per change of state, not per retry.
    if (!st.ok() && !crd_missing) {
      spdlog::warn("reservations node={}: {}; retrying with backoff", opts_.node_name, msg);
    } else if (st.ok() && last != kCrdMissing) {
      spdlog::info("reservations node={}: working again", opts_.node_name);
    }
  }
  last = crd_missing ? kCrdMissing : msg;
  const std::string& watch = loop_error_[static_cast<int>(Loop::kWatch)];
  status_.last_error = watch.empty() ? loop_error_[static_cast<int>(Loop::kPass)] : watch;
}

absl::Status Controller::OnListError(const absl::Status& error) {
  if (kube::HttpCodeOf(error) != 404) return error;
  // No CRD, no Reservation objects: what was placed for them is released (deleting a CRD
  // deletes its objects). Checked again with backoff, so installing it later works.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status_.crd_missing) {
      spdlog::info(
          "reservations node={}: the Reservation CRD ({}.{}) is not installed; reservations "
          "are off until it is",
          opts_.node_name, kPlural, kGroup);
    }
    status_.crd_missing = true;
    cache_.clear();
    listed_ = true;
    status_.listed = true;
    kicked_ = true;
  }
  cv_.notify_all();
  return absl::NotFoundError(kCrdMissing);
}

absl::Status Controller::OnList(std::vector<json> items) {
  std::map<std::string, Cached> fresh;
  for (const json& item : items) {
    absl::StatusOr<Object> o = ParseObject(item);
    if (!o.ok()) continue;  // cannot be named, so cannot be reported either
    const std::string uid = o->uid;
    fresh[uid] = Cached{item, *std::move(o)};
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    cache_ = std::move(fresh);
    listed_ = true;
    status_.listed = true;
    if (status_.crd_missing) {
      spdlog::info("reservations node={}: the Reservation CRD is installed; reservations are on",
                   opts_.node_name);
    }
    status_.crd_missing = false;
    kicked_ = true;
  }
  cv_.notify_all();
  return absl::OkStatus();
}

kube::InformerHandler::Next Controller::OnEvent(const std::string& type, const json& obj) {
  absl::StatusOr<Object> o = ParseObject(obj);
  if (!o.ok()) return Next::kContinue;
  spdlog::debug("reservations node={}: {} {} (resourceVersion {})", opts_.node_name, type, o->name,
                o->resource_version);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (type == "DELETED") {
      cache_.erase(o->uid);
    } else {
      auto it = cache_.find(o->uid);
      // Our own status write already updated the cache; an older echo must not undo it.
      if (it != cache_.end() && it->second.object.resource_version == o->resource_version) {
        return Next::kContinue;
      }
      const std::string uid = o->uid;
      cache_[uid] = Cached{obj, *std::move(o)};
    }
    kicked_ = true;
  }
  cv_.notify_all();
  return Next::kContinue;
}

absl::Status Controller::WriteStatus(const std::string& uid, const json& desired) {
  json body;
  std::string sent_rv;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(uid);
    if (it == cache_.end()) return absl::OkStatus();  // gone meanwhile
    body = it->second.raw;
    sent_rv = it->second.object.resource_version;
  }
  body["status"] = desired;
  const std::string name = StringField(Field(body, "metadata"), "name");
  absl::StatusOr<kube::Response> r =
      client_->Put(absl::StrCat(Collection(), "/", name, "/status"), body);
  // An answer replaces the cached object only while the watch has not moved it on (a newer
  // spec, a deletion) since we read it: answers travel beside the watch, not in its order.
  auto refresh = [&](const json& fresh) {
    absl::StatusOr<Object> o = ParseObject(fresh);
    auto it = cache_.find(uid);
    if (o.ok() && o->uid == uid && it != cache_.end() &&
        it->second.object.resource_version == sent_rv) {
      it->second = Cached{fresh, *std::move(o)};
    }
  };
  if (!r.ok()) {
    const std::optional<int> code = kube::HttpCodeOf(r.status());
    if (code == 409 || code == 404) {
      // Someone changed or deleted it: read it again and decide again.
      absl::StatusOr<kube::Response> fresh = client_->Get(absl::StrCat(Collection(), "/", name));
      std::lock_guard<std::mutex> lock(mu_);
      if (fresh.ok()) {
        refresh(fresh->body);
      } else if (kube::HttpCodeOf(fresh.status()) == 404) {
        cache_.erase(uid);
      }
      kicked_ = true;
    }
    return absl::Status(r.status().code(),
                        absl::StrCat("status of reservation ", name, ": ", r.status().message()));
  }
  spdlog::debug("reservations node={}: status of {} written (phase {})", opts_.node_name, name,
                StringField(desired, "phase"));
  std::lock_guard<std::mutex> lock(mu_);
  ++status_.status_writes;
  refresh(r->body);
  return absl::OkStatus();
}

absl::Status Controller::Pass() {
  std::lock_guard<std::mutex> pass_lock(pass_mu_);
  Outcome outcome;
  bool republished = false;
  // Placing changes what is published, which changes the devices the statuses name: decide
  // again until nothing moves (twice in practice).
  for (int round = 0; round < 4; ++round) {
    const NodeContext ctx = context_();
    Inputs in;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (listed_) {
        in.objects.emplace();
        for (const auto& [uid, c] : cache_) (*in.objects)[uid] = c.object;
      }
    }
    in.topo = &ctx.topo;
    in.reserved_cpus = ctx.reserved_cpus;
    in.gpus = ctx.gpus;
    in.devices = ctx.devices;
    in.now = clock_->Now();
    bool state_changed = false;
    std::vector<Held> held;
    // Decided and applied under the ledger's lock (the memory validates each change); recorded
    // outside it, and undone if the journal fails.
    absl::StatusOr<state::Ledger::Txn> txn =
        ledger_->Reserve([&](state::Ledger::Edit& edit) -> absl::Status {
          in.state = &edit.state();
          in.in_flight = edit.in_flight();
          outcome = Decide(in);
          for (const std::string& uid : outcome.remove) {
            const state::Reservation* had = edit.state().FindReservation(uid);
            if (had == nullptr) continue;
            (void)edit.RemoveReservation(uid, absl::StrCat("forgetting reservation ", had->name));
            state_changed = true;
          }
          for (const state::Reservation& r : outcome.put) {
            absl::Status st =
                edit.PutReservation(r, absl::StrCat("recording reservation ", r.name));
            if (!st.ok()) {
              spdlog::error("reservation {} (uid {}): cannot record: {}", r.name, r.uid,
                            std::string(st.message()));
              continue;
            }
            state_changed = true;
          }
          held = HeldDevices(edit.state());
          return absl::OkStatus();
        });
    if (!txn.ok()) return txn.status();
    if (state_changed) {
      spdlog::debug("reservations node={}: decided {} placed or changed, {} forgotten",
                    opts_.node_name, outcome.put.size(), outcome.remove.size());
    }
    // Commit tells the device plugin and the pinning of what changed; Abort of what it undid.
    if (absl::Status st = ledger_->Commit(*txn); !st.ok()) {
      ledger_->Abort(*txn);
      return st;
    }
    for (const std::string& e : outcome.events) spdlog::info("{}", e);
    const bool held_changed = !held_known_ || held != last_held_;
    if (held_changed) {
      last_held_ = held;
      held_known_ = true;
      held_changed_(held);
      republished = true;
    }
    if (!state_changed && !held_changed) break;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++status_.passes;
  }
  absl::Status result = absl::OkStatus();
  bool waited = false;
  for (const auto& [uid, desired] : outcome.status) {
    bool same = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(uid);
      same = it == cache_.end() || SameStatus(it->second.object.status, desired);
    }
    if (same) continue;
    if (republished && !waited && opts_.before_statuses && !stop_.load()) {
      opts_.before_statuses();
      waited = true;
    }
    if (absl::Status st = WriteStatus(uid, desired); !st.ok() && result.ok()) result = st;
  }
  if (outcome.next) {
    // Expiry is checked at the next pass: make sure there is one then.
    std::lock_guard<std::mutex> lock(mu_);
    next_ = outcome.next;
  }
  return result;
}

absl::Status Controller::SyncOnce(bool relist) {
  if (relist) {
    if (absl::Status st = informer_.List(); !st.ok()) return st;
  }
  return Pass();
}

void Controller::PassLoop() {
  absl::Duration backoff = opts_.initial_backoff;
  absl::Time retry_at = absl::InfiniteFuture();
  absl::Time last_pass = clock_->Now();
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const absl::Time now = clock_->Now();
      absl::Time wake = last_pass + opts_.resync;
      if (next_) wake = std::min(wake, *next_);
      wake = std::min(wake, retry_at);
      // The clock may be a test's: never sleep long on it, so a clock moved forward is seen soon.
      const absl::Duration wait =
          std::clamp(wake - now, absl::ZeroDuration(), absl::Milliseconds(500));
      cv_.wait_for(lock, absl::ToChronoMilliseconds(wait),
                   [this] { return stop_.load() || kicked_; });
      if (stop_.load()) break;
      const absl::Time after = clock_->Now();
      const bool due = after >= wake || kicked_;
      if (!due) continue;
      kicked_ = false;
      next_.reset();
    }
    last_pass = clock_->Now();
    absl::Status st;
    // An exception here would end the daemon; everything below is meant not to throw, and this
    // keeps a mistake in that from taking the node's claims down with it.
    try {
      st = Pass();
    } catch (const std::exception& e) {
      st = absl::InternalError(absl::StrCat("reservation pass failed: ", e.what()));
    }
    RecordError(Loop::kPass, st);
    if (st.ok()) {
      backoff = opts_.initial_backoff;
      retry_at = absl::InfiniteFuture();
    } else {
      retry_at = clock_->Now() + backoff;
      backoff = std::min(backoff * 2, opts_.max_backoff);
    }
  }
}

}  // namespace topodra::reservation
