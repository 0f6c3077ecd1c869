// Keeps one driver's pool on the API server equal to what this node should publish (spec §1.11):
// list + watch its own slices, create / update / delete until they match, bump the pool
// generation on every change, re-create what others delete, survive an API server that is down,
// restarted empty or silently dropping fields, and never exit because of any of that.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "driver/kube/informer.h"
#include "driver/kube/rest_client.h"
#include "driver/publish/resource_slice_api.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_features.h"

namespace topodra::publish {

enum class MixinMode { kAuto, kOn, kOff };
absl::StatusOr<MixinMode> ParseMixinMode(const std::string& s);

// Device taints (DRADeviceTaints: alpha and off in 1.34, beta and on from 1.36): kOn publishes
// them (a server that drops them is an error), kOff strips them from every device, kAuto finds out
// with a dry-run create once the pool has a taint and strips them when the server rejects or
// drops them.
enum class TaintMode { kAuto, kOn, kOff };
absl::StatusOr<TaintMode> ParseTaintMode(const std::string& s);  // auto | on | off

struct PublisherOptions {
  std::string driver;
  std::string node_name;
  MixinMode mixins = MixinMode::kAuto;
  TaintMode taints = TaintMode::kAuto;
  // List attributes (DRAListTypeAttributes, alpha): kAuto probes with a dry-run create once the
  // pool has one and strips them when the server rejects or drops them; kOn keeps them (a server
  // that drops them is an error); kOff strips them.
  FeatureMode list_attributes = FeatureMode::kAuto;
  // Node-allocatable mapping (DRANodeAllocatableResources, alpha): kAuto probes the 1.37 field,
  // then the 1.36 one, and publishes the one the server keeps, or none; kOn does the same but a
  // server that keeps neither is an error; kOff strips it.
  FeatureMode node_allocatable = FeatureMode::kOff;
  // Creates and updates of one pass sent at once, each on its own connection (the first write of
  // a pass goes alone when FirstWriteMustGoAlone says so). 1 sends them one after another.
  int write_concurrency = 1;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{30000};
  int watch_timeout_seconds = 300;
  SliceLimits limits;
  kube::BackoffWait backoff_wait;  // null: the real clock (tests record backoffs instead)
};

// The gated fields a publisher's probes (dry-run creates) have shown the server keeps, in the
// pass being written (an older answer may be stale: the server can change).
struct ProbedFields {
  bool mixins = false;
  bool taints = false;
  bool lists = false;
  NodeAllocatableField node_allocatable = NodeAllocatableField::kNone;
};

// Whether the first write of a pass must go alone, so that a server dropping a field is found
// before the rest are written: true when some slice carries a field a feature gate may drop
// (mixins, taints, list attributes, a node-allocatable field, consumable capacity, anything not
// modelled) that no probe has shown the server keeps.
bool FirstWriteMustGoAlone(const std::vector<Slice>& slices, const ProbedFields& probed);

// What a status probe (readiness, metrics, tests) sees.
struct PublisherStatus {
  bool in_sync = false;         // the server holds exactly the desired pool
  bool published_once = false;  // in_sync has been reached at least once (readiness)
  int64_t generation = 0;       // pool generation on the server
  int slices = 0;
  bool mixins = false;           // published in mixin form
  bool taints = false;           // published with device taints (some device of the pool has one)
  bool list_attributes = false;  // published with list attributes
  NodeAllocatableField node_allocatable = NodeAllocatableField::kNone;  // the field published
  std::string last_error;  // empty when the last attempt worked
  int64_t writes = 0;      // create + update + delete calls that succeeded
  int64_t errors = 0;      // failed attempts
};

// Lists and watches its slices through a kube::Informer; Sync is the reconcile.
class SlicePublisher : private kube::InformerHandler {
 public:
  SlicePublisher(kube::RestClient* client, PublisherOptions options);

  // The pool to publish; nullopt publishes nothing and deletes whatever this driver has on this
  // node. Thread-safe; wakes the loop.
  void SetDesired(std::optional<Pool> pool);
  // The same, shared with the caller (null: nothing): the node's inventory hands over its pool
  // without copying it on the thread that serves the DRA socket once done.
  void SetDesired(std::shared_ptr<const Pool> pool);
  // Waits until the pool last given to SetDesired is stored on the server (true), or Stop() or
  // `timeout` comes first (false).
  bool WaitPublished(std::chrono::milliseconds timeout);
  // Holds every create, update and delete until ReleaseWrites() (or Stop()): called before Run,
  // it lets the list, the probes (dry runs, which store nothing) and the slices' build happen
  // while the daemon is still starting, and the first write go out as soon as it may.
  void HoldWrites();
  void ReleaseWrites();
  // Runs until Stop(), which interrupts a watch or a backoff at once; never returns because of
  // API errors.
  void Run();
  void Stop();
  // One list + reconcile pass, for tests and for callers that want a synchronous publish.
  absl::Status SyncOnce();
  PublisherStatus status() const;

 private:
  struct Desired {
    bool known = false;                // SetDesired was called
    std::shared_ptr<const Pool> pool;  // null: nothing
    uint64_t version = 0;
  };
  // kube::InformerHandler, on the Run thread (or SyncOnce's caller).
  absl::Status OnList(std::vector<nlohmann::json> items) override;
  Next OnEvent(const std::string& type, const nlohmann::json& object) override;
  absl::Status Sync() override;
  void OnResult(const absl::Status& result) override { RecordResult(result); }

  // What the desired objects carry of the optional features.
  struct Form {
    bool mixins = false;
    bool tainted = false;
    bool lists = false;
    NodeAllocatableField node_allocatable = NodeAllocatableField::kNone;
  };
  // The slices to write and their objects: objects[i] is slices[i]'s JSON at the pass's
  // generation, or null until built. Objects are built while the writes are held (the daemon is
  // still starting); once the writes may go, each one left is built by the writer that sends it,
  // so the first create does not wait for the whole pool's JSON.
  struct Planned {
    std::vector<Slice> slices;
    std::vector<nlohmann::json> objects;
  };
  absl::Status Reconcile();
  // Deletes the cached slices not `wanted` and writes every planned slice at `generation`;
  // counts the writes sent.
  absl::Status WriteDesired(Planned& planned, const std::set<std::string>& wanted,
                            int64_t generation, const Form& form, int64_t* writes);
  // Waits while writes are held; false when Stop() came first. *waited says whether it had to
  // wait (the pool may have changed meanwhile).
  bool WritesAllowed(bool* waited);
  bool WritesHeld() const;
  bool PrepareWrite(nlohmann::json& obj) const;
  absl::StatusOr<kube::Response> SendWrite(nlohmann::json& obj, bool update);
  // Writes planned.objects[begin, begin + n) (building those still null at `generation`), up to
  // opts_.write_concurrency at once; the answers in order. After a failure no further write
  // starts (those left unsent answer Cancelled). covered[i] says whether the answer of write i
  // holds every field sent (the workers check it to stop the batch; CheckStored need not walk
  // the slice again).
  std::vector<absl::StatusOr<kube::Response>> SendWrites(Planned& planned, int64_t generation,
                                                         size_t begin, size_t n,
                                                         std::vector<char>& covered);
  absl::Status CheckStored(const nlohmann::json& sent, const nlohmann::json& stored,
                           const Form& form, bool covered);
  // A create, update or delete failed with st: what the next pass must do differently.
  absl::Status WriteFailed(const absl::Status& st);
  absl::StatusOr<bool> MixinsSupported(const std::vector<Slice>& mixed);
  absl::StatusOr<bool> ProbeMixins(const Pool& pool);
  absl::StatusOr<bool> TaintsSupported(const Pool& pool);
  void LogTaintDecision(bool supported) const;
  // A dry-run create of `probe`: true when the server stores all of it, false when it drops a
  // field or rejects the request as invalid (400, 422); other errors mean it cannot tell yet.
  absl::StatusOr<bool> DryRunKeeps(const Slice& probe, const std::string& generate_name);
  absl::StatusOr<bool> ListAttributesSupported(const Pool& pool);
  absl::StatusOr<NodeAllocatableField> NodeAllocatableFieldKept(const Pool& pool);
  absl::StatusOr<Pool> ApplyGatedFields(Pool p, Form* form);
  // The slices of `pool` in the form this server keeps (probing once per gated field).
  absl::StatusOr<std::vector<Slice>> DesiredSlices(std::optional<Pool> pool, Form* form);
  nlohmann::json ObjectFor(const Slice& s, int64_t generation) const;
  void RecordResult(const absl::Status& s);

  ResourceSliceApi api_;
  PublisherOptions opts_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Desired desired_;
  PublisherStatus status_;
  bool stopped_ = false;      // guarded by mu_
  bool writes_held_ = false;  // guarded by mu_

  kube::Informer informer_;
  // Owned by the Run thread (or SyncOnce's caller); synced_version_ is written under mu_ too, for
  // WaitPublished.
  std::map<std::string, nlohmann::json> cache_;  // name -> stored slice
  bool drift_ = false;                           // the watch saw our slices change behind our back
  // name -> uid of a slice we deleted, until the watch reports its deletion: a watch resumed from
  // before the delete replays the slice's older events, which must not bring it back (a heal
  // that deletes it again and rewrites the pool at a new generation).
  std::map<std::string, std::string> deleted_;
  uint64_t synced_version_ = 0;
  std::optional<bool> mixins_supported_;  // auto mode: learned from the server
  std::optional<bool> taints_supported_;  // auto mode: learned from the server
  std::optional<bool> lists_supported_;   // auto mode: learned from the server
  // Learned from the server (auto and on); forgotten when a write loses it (an upgrade from 1.36
  // to 1.37 prunes the 1.36 field), so the next pass probes again.
  std::optional<NodeAllocatableField> node_allocatable_field_;
  // The fields whose probe ran, and showed the server keeps them, in the Reconcile now running.
  // Only those let the first write go with the others: a server may change after a probe (an
  // upgrade pruning the 1.36 field, a gate rolled back), and a later pass's lone first write is
  // what finds that before a whole pool generation is stored without the field.
  ProbedFields probed_this_pass_;
  bool retry_now_ = false;  // a fallback was taken or the cache was stale: publish again now
  static constexpr int kStaleRetries = 3;
  int stale_retries_ = 0;  // passes in a row that ended on a stale cache
  std::string node_uid_;
  int64_t highest_generation_ = 0;
};

}  // namespace topodra::publish
