// One list + watch loop over a collection of the API server, for every controller of the daemon
// (the slice publisher, the reservation controller): list, then watch from the list's
// resourceVersion, resume each new watch where the last event left off, list again after a
// 410 Gone / Expired event or a failed watch, back off on errors, and stop or wake at once.
// What the objects mean stays with the handler: it gets the list, the events and a Sync step
// after each, and reports its own changes of state (the log lines) from OnResult.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "driver/kube/rest_client.h"
#include "nlohmann/json.hpp"

namespace topodra::kube {

// Waits out a backoff on the informer's condition variable (its lock held): returns after `d`,
// or earlier once `done()` holds. Tests pass one that records `d` and returns at once.
using BackoffWait =
    std::function<void(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                       std::chrono::milliseconds d, const std::function<bool()>& done)>;

struct InformerOptions {
  // The collection's paths in order of preference ("/apis/resource.k8s.io/v1/resourceslices",
  // then v1beta2): every list tries them in turn and uses the first the server serves (does not
  // answer 404); the watch follows the list.
  std::vector<std::string> collections;
  std::string field_selector;  // "spec.nodeName=n1", not encoded; empty: every object
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{30000};
  // While connections are refused (nothing listens where the API server should be: it is
  // restarting) the backoff stays within this, when set: asking again costs the server nothing.
  std::chrono::milliseconds refused_max_backoff{0};
  int watch_timeout_seconds = 300;
  BackoffWait wait;  // null: the real clock
};

class InformerHandler {
 public:
  enum class Next {
    kContinue,  // keep watching
    kSync,      // end the watch: Sync, then watch on from the last resourceVersion
    kRelist,    // end the watch: list again, Sync, watch from the new list
  };
  virtual ~InformerHandler() = default;
  // A list succeeded: `items` are all the objects (replace the cache, do not merge). An error
  // makes the list count as failed.
  virtual absl::Status OnList(std::vector<nlohmann::json> items) = 0;
  // A list failed with `error`: what to report instead (e.g. a missing CRD is a state of its own).
  virtual absl::Status OnListError(const absl::Status& error) { return error; }
  // One ADDED, MODIFIED or DELETED event (bookmarks and errors are the informer's).
  virtual Next OnEvent(const std::string& type, const nlohmann::json& object) = 0;
  // After every list and every watch that ended: bring the world in line with the cache. An error
  // backs off; a list comes first next time only if the handler asked (Informer::Relist).
  virtual absl::Status Sync() { return absl::OkStatus(); }
  // The outcome of every round (OK after a list and Sync that worked, or the error of a list,
  // Sync or watch), for status and for logging changes of state once.
  virtual void OnResult(const absl::Status& /*result*/) {}
};

class Informer {
 public:
  // `client` and `handler` outlive the informer. The handler is called on the thread that runs
  // Run (or List).
  Informer(RestClient* client, InformerOptions options, InformerHandler* handler);

  // Lists and watches until Stop(); never returns because of API errors.
  void Run();
  // Ends Run: interrupts a watch or a backoff at once. Before Run, Run returns at once.
  void Stop();
  // Interrupts a watch or a backoff now: the loop runs Sync and watches again (new work).
  void Wake();
  // The next round lists first (the handler distrusts its cache). Loop thread only.
  void Relist() { need_list_ = true; }
  // One list now, delivered to OnList (or OnListError's status returned). Not while Run runs on
  // another thread: it is Run's own step, also for synchronous callers (SyncOnce).
  absl::Status List();

  // The collection the last list used (the first of options.collections before any).
  std::string collection() const;
  std::string resource_version() const;

 private:
  absl::Status Watch();
  bool OnWatchEvent(const nlohmann::json& event);
  // Waits out the backoff after `error`; false when stopped meanwhile.
  bool Backoff(std::chrono::milliseconds* backoff, const absl::Status& error);

  RestClient* client_;
  InformerOptions opts_;
  InformerHandler* handler_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string collection_;        // guarded by mu_
  std::string resource_version_;  // guarded by mu_
  std::atomic<bool> stopped_{false};
  std::atomic<bool> interrupt_{false};  // the watch's stop flag: Wake() or Stop()
  // Loop thread only.
  bool need_list_ = true;
  bool watch_delivered_ = false;  // the current watch got at least one line: the stream was up
};

}  // namespace topodra::kube
