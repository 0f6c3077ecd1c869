// An in-memory API server behind the RestClient interface, for unit tests of the daemon's
// controllers (publisher, reservations, informer) without the Python server, sockets or sleeps.
// It keeps what those controllers rely on, and each behaviour has a test
// (test/kube/fake_rest_client_test.cc):
// - cluster-scoped collections by path ("/apis/resource.k8s.io/v1/resourceslices"); a path not
//   served answers 404 (a CRD not installed, a version not served);
// - one resourceVersion counter for every write; uid, generation (bumped when spec changes),
//   creationTimestamp (from SetClock's clock, the real one by default),
//   generateName, dryRun=All, the status subresource (PUT .../status writes only the status,
//   a PUT of the object keeps the stored status);
// - 404 for a missing object, 409 AlreadyExists on create, 409 Conflict for a stale
//   resourceVersion or a failed delete precondition (uid, resourceVersion);
// - list with metadata.resourceVersion; fieldSelector (a.b=v, a.b==v, a.b!=v, comma = and) and
//   labelSelector (k=v, k!=v, k) on lists and watches;
// - watch from a resourceVersion with every event since, in order; from "" or "0" the current
//   objects as ADDED first; bookmarks on demand; a resourceVersion older than the history kept
//   (Compact) or newer than the server's (a restore) gets an ERROR event with a 410 Status;
//   ExpireWatches sends that 410 to open watches; EndWatches ends them as timeoutSeconds does;
//   Restart loses everything and breaks open watches with an error.
// - faults: FailNext (HTTP codes), Refuse (connection refused, as libcurl reports it).
// Watches block on a condition variable: Stop-like flags are seen on WakeWatches(), which the
// informer calls, or on any change; there is no polling. Await waits on the same signal.
// Kept with the tests (not in driver/kube) because nothing in the daemon may use it: it knows
// only the API server behaviour our tests have needed, not Kubernetes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "driver/kube/rest_client.h"
#include "nlohmann/json.hpp"

namespace topodra::testing {

class FakeRestClient : public kube::RestClient {
 public:
  struct Request {
    std::string verb;  // GET POST PUT DELETE WATCH
    std::string path;  // with the query
    int code = 0;      // HTTP code answered (0: refused)
  };

  FakeRestClient() = default;

  // Serves a cluster-scoped collection ("/apis/topodra.io/v1alpha1/reservations") of `kind`.
  void Serve(const std::string& collection, const std::string& kind,
             bool status_subresource = false);
  // Stops serving it (a CRD deleted): its objects are gone, requests answer 404. No events.
  void Unserve(const std::string& collection);

  // The stored objects of a collection, by name; nullopt when absent.
  std::optional<nlohmann::json> Object(const std::string& collection,
                                       const std::string& name) const;
  std::vector<nlohmann::json> Objects(const std::string& collection) const;
  uint64_t resource_version() const;

  // Faults. The next `n` requests (watches included) whose path contains `path_part` answer
  // `http_code` with a v1 Status.
  void FailNext(int n, int http_code, const std::string& path_part = "");
  // While true, every request fails as libcurl's "Couldn't connect to server" does.
  void Refuse(bool refuse);
  // Forgets the history up to now: a watch from an older resourceVersion gets 410.
  void Compact();
  // Open watches get an ERROR event with a 410 Status, then end.
  void ExpireWatches();
  // Open watches end normally, as after timeoutSeconds.
  void EndWatches();
  // Open watches that asked for bookmarks get one with the current resourceVersion.
  void SendBookmarks();
  // The server restarts empty (collections still served): objects and history gone, open
  // watches broken with Unavailable; resourceVersions go on from `next_resource_version` (0:
  // from where they were; lower: an etcd restored without a revision bump).
  void Restart(uint64_t next_resource_version = 0);

  // What creationTimestamp says on create (a test's injected clock); the real time by default.
  void SetClock(std::function<absl::Time()> now);

  // Runs before each request is answered, without the fake's lock (it may write to the fake):
  // the server changing between a client's read and its write.
  void SetBeforeRequest(std::function<void(const std::string& verb, const std::string& path)> hook);

  std::vector<Request> Requests() const;
  // "VERB path code" per request, in order.
  std::vector<std::string> RequestLines() const;
  void ClearRequests();
  int open_watches() const;

  // Waits until `condition` holds, re-testing it after every change of the fake (a write, a
  // request, a watch opened, blocked or ended); false after `limit` (a hang guard, not timing).
  // `condition` runs without the fake's lock and may call it.
  bool Await(const std::function<bool()>& condition,
             std::chrono::milliseconds limit = std::chrono::seconds(20));
  // True when `n` watches are open, each has delivered every event for it and waits for more
  // (its stop flag not set): the client is idle in its watch.
  bool WatchesIdle(int n = 1) const;

  // kube::RestClient
  absl::StatusOr<kube::Response> Get(const std::string& path) override;
  absl::StatusOr<kube::Response> Post(const std::string& path, const nlohmann::json& body) override;
  absl::StatusOr<kube::Response> Put(const std::string& path, const nlohmann::json& body) override;
  absl::StatusOr<kube::Response> Delete(const std::string& path,
                                        const nlohmann::json& body) override;
  absl::Status Watch(const std::string& path, const kube::WatchHandler& on_event,
                     const std::atomic<bool>* stop) override;
  void WakeWatches() override;

 private:
  struct Collection {
    std::string kind;
    bool status_subresource = false;
    std::map<std::string, nlohmann::json> objects;  // by name
  };
  struct Event {
    uint64_t rv;
    std::string collection;
    std::string type;
    nlohmann::json object;
  };
  struct OpenWatch {
    std::string collection, field_selector, label_selector;
    bool bookmarks = false;
    const std::atomic<bool>* stop = nullptr;
    std::vector<nlohmann::json> queue;  // events to deliver, in order
    bool waiting = false;               // blocked with nothing to deliver
    bool end = false;                   // end normally once the queue is delivered
    absl::Status broken;                // end with this error
  };
  struct Target {  // a parsed request path
    std::string collection;
    std::string name;
    bool status = false;
    std::map<std::string, std::string> query;
  };

  absl::Status Fault(const std::string& verb, const std::string& path);                  // mu_ held
  absl::StatusOr<Target> Parse(const std::string& verb, const std::string& path) const;  // mu_
  absl::StatusOr<kube::Response> Answer(const std::string& verb, const std::string& path,
                                        const nlohmann::json* body);
  absl::StatusOr<kube::Response> Write(const std::string& verb, const std::string& path,
                                       const Target& t, const nlohmann::json* body);  // mu_ held
  void Record(const std::string& verb, const std::string& path, int code);            // mu_ held
  void Emit(const std::string& collection, const std::string& type, const nlohmann::json& obj);
  void Changed();  // mu_ held

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Collection> collections_;
  uint64_t rv_ = 1;
  uint64_t uid_counter_ = 0;
  uint64_t oldest_rv_ = 1;  // history holds every event after this
  std::vector<Event> history_;
  std::vector<OpenWatch*> watches_;
  std::vector<Request> requests_;
  uint64_t changes_ = 0;
  struct Failure {
    int left;
    int code;
    std::string path_part;
  };
  std::vector<Failure> failures_;
  bool refuse_ = false;
  std::function<void(const std::string&, const std::string&)> before_;
  std::function<absl::Time()> now_;
};

// Label and field selectors as the API server reads them: `selector` holds when every
// comma-separated term does. For fields, keys are dotted paths into the object.
bool FieldSelectorMatches(const std::string& selector, const nlohmann::json& object);
bool LabelSelectorMatches(const std::string& selector, const nlohmann::json& object);

}  // namespace topodra::testing
