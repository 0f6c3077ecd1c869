// Keeps the node's Reservations real: lists and watches the Reservation objects of this node,
// runs lifecycle.h's Decide after every change (objects, claims prepared or released, the
// machine, the clock), records placements in the crash-safe state before anything is published,
// tells the daemon when the held devices change (so slices and prepare follow), and writes each
// object's status. Never exits because of the API server: errors are retried with backoff, and
// while the objects are unknown nothing is placed or forgotten (expiry and use still apply).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "driver/kube/informer.h"
#include "driver/kube/rest_client.h"
#include "driver/reservation/lifecycle.h"
#include "driver/state/ledger.h"

namespace topodra::reservation {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};
Clock* RealClock();

// What the controller needs to know about the machine and what is published, from the daemon.
struct NodeContext {
  topology::Topology topo;
  CpuSet reserved_cpus;
  std::map<std::string, std::string> gpus;                // published: device name -> PCI
  std::map<std::string, std::vector<DeviceRef>> devices;  // reservation name -> devices
};

struct ControllerOptions {
  std::string node_name;
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(30);
  int watch_timeout_seconds = 300;
  // A pass at least this often, whatever happens (a missed event costs at most this).
  absl::Duration resync = absl::Seconds(30);
  kube::BackoffWait backoff_wait;  // the list + watch loop's; null: the real clock
  // Called once before a pass writes statuses after the held devices changed (not on Stop), so
  // the slices naming them can be stored first; it bounds its own wait. Null: no wait.
  std::function<void()> before_statuses;
};

struct ControllerStatus {
  bool listed = false;  // the objects are known (a list succeeded)
  bool crd_missing = false;
  int64_t passes = 0;
  int64_t status_writes = 0;
  int64_t errors = 0;
  std::string last_error;
};

// The objects come from a kube::Informer (list + watch on one thread); passes run on another.
class Controller : private kube::InformerHandler {
 public:
  // `context` is called at every pass (without the ledger's lock held); `held_changed` after the
  // held devices changed (placed, released, waited-for devices freed) and that change is durable,
  // with the devices held now, also without the lock: it must republish the slices and update
  // what prepare knows, synchronously. Those devices are the ones to publish: a read of the
  // ledger may see another pass's change before it is durable.
  Controller(kube::RestClient* client, ControllerOptions options, state::Ledger* ledger,
             Clock* clock, std::function<NodeContext()> context,
             std::function<void(const std::vector<Held>& held)> held_changed);
  ~Controller();

  void Start();
  void Stop();
  // Run a pass soon (e.g. the machine changed).
  void Kick();
  // List (when `relist`), decide, apply and write statuses once, on the calling thread.
  absl::Status SyncOnce(bool relist = true);
  ControllerStatus status() const;

 private:
  struct Cached {
    nlohmann::json raw;
    Object object;
  };
  // kube::InformerHandler, on the watch thread (or SyncOnce's caller).
  absl::Status OnList(std::vector<nlohmann::json> items) override;
  absl::Status OnListError(const absl::Status& error) override;
  Next OnEvent(const std::string& type, const nlohmann::json& object) override;
  void OnResult(const absl::Status& result) override { RecordError(Loop::kWatch, result); }

  absl::Status Pass();
  absl::Status WriteStatus(const std::string& uid, const nlohmann::json& status);
  // The watch loop (list and watch) and the pass loop (status writes) fail and recover apart:
  // each logs its own changes of state, so one loop's success is not the other's recovery.
  enum class Loop { kWatch = 0, kPass = 1 };
  void RecordError(Loop loop, const absl::Status& st);
  void PassLoop();
  std::string Collection() const;

  kube::RestClient* client_;
  ControllerOptions opts_;
  state::Ledger* ledger_;
  Clock* clock_;
  std::function<NodeContext()> context_;
  std::function<void(const std::vector<Held>&)> held_changed_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Cached> cache_;  // by uid; guarded by mu_
  bool listed_ = false;                  // guarded by mu_
  bool kicked_ = false;                  // guarded by mu_
  std::optional<absl::Time> next_;       // the next expiry; guarded by mu_
  ControllerStatus status_;              // guarded by mu_
  std::string loop_error_[2];            // by Loop: its last error, "" when working; mu_
  std::vector<Held> last_held_;          // pass thread only
  bool held_known_ = false;              // pass thread only

  std::mutex pass_mu_;  // one pass at a time (SyncOnce from tests vs the loop)
  std::atomic<bool> stop_{false};
  kube::Informer informer_;
  std::thread watch_thread_, pass_thread_, changes_thread_;
};

}  // namespace topodra::reservation
