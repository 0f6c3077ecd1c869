// NodePrepareResources / NodeUnprepareResources for one DRA driver, without gRPC: claims in,
// per-claim outcomes out. Owns the order of side effects that makes prepare crash-safe and
// idempotent:
//
//   prepare:   GET claim -> Ledger::Reserve: plan and hold the CPUs/GPUs in memory (under the
//              ledger's lock, so two concurrent calls never get the same CPU) -> write the CDI
//              spec and the device metadata files with their CDI specs (atomic) ->
//              Ledger::Commit: journal the allocation (durable) -> answer.
//   unprepare: Ledger::Reserve: Release (kUnpreparing) -> remove the device metadata and the
//              CDI spec -> Ledger::Commit: journal the removal, then free.
//
// A crash before the journal record leaves at most an orphan CDI file, removed at start; after
// it, the claim is prepared and a repeated prepare replays the stored answer (writing its CDI
// file again if it is gone). CDI files are
// written without fsync because the journal holds their content: Start rewrites any that a power
// loss took.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cdi/reconcile.h"
#include "cdi/spec_store.h"
#include "driver/allocation/cpu_allocator.h"
#include "driver/metrics/observer.h"
#include "driver/prepare/planner.h"
#include "driver/prepare/worker_pool.h"
#include "driver/state/ledger.h"
#include "driver/state/state.h"
#include "nlohmann/json.hpp"
#include "topology/topology.h"

namespace topodra::kube {
class RestClient;
}

namespace topodra::prepare {

// How long one claim GET may take, and whether to give it up.
struct FetchLimits {
  absl::Duration timeout = absl::Seconds(10);  // DeadlineExceeded after it
  // True: the caller no longer waits; give up now (Cancelled). May be null.
  const std::atomic<bool>* cancelled = nullptr;
  // The same, asked only on the thread that called GetClaim (kube::RequestLimits::caller_gone).
  // May be empty.
  std::function<bool()> caller_gone;
};

// Where claims come from: the API server in the daemon, a map in unit tests. Called from several
// threads at once.
class ClaimSource {
 public:
  virtual ~ClaimSource() = default;
  // The ResourceClaim object; NotFound when it does not exist.
  virtual absl::StatusOr<nlohmann::json> GetClaim(const std::string& ns, const std::string& name,
                                                  const FetchLimits& limits) = 0;
};

// GET /apis/resource.k8s.io/{v1,v1beta2}/namespaces/{ns}/resourceclaims/{name}: v1 first, and
// v1beta2 (the same JSON) when the server does not serve v1; both within the limits.
class ApiClaimSource : public ClaimSource {
 public:
  explicit ApiClaimSource(kube::RestClient* client) : client_(client) {}
  absl::StatusOr<nlohmann::json> GetClaim(const std::string& ns, const std::string& name,
                                          const FetchLimits& limits) override;

 private:
  kube::RestClient* client_;
  std::mutex mu_;
  std::string version_ = "v1";
};

struct ClaimRef {
  std::string ns;
  std::string uid;
  std::string name;
};

struct ClaimOutcome {
  std::vector<PreparedDevice> devices;
  std::string error;  // empty on success
};

// What the caller of one Prepare waits for.
struct CallLimits {
  // When the caller stops waiting (the gRPC deadline; the kubelet's is 45 s).
  absl::Time deadline = absl::InfiniteFuture();
  // True once the caller has gone (gRPC cancellation). Polled every 50 ms, and only on the thread
  // that called Prepare: gRPC's ServerContext::IsCancelled is thread-safe, but asking it there
  // lets any callable serve (tests pass plain lambdas). May be empty.
  std::function<bool()> cancelled;
};

// How the claims of one Prepare call are fetched.
struct FetchOptions {
  // The most one claim GET may take (the API client's own timeout is the default's too).
  absl::Duration request_timeout = absl::Seconds(10);
  // Claim GETs of one call in flight at once.
  int parallel = 8;
  // Kept before the caller's deadline for preparing the fetched claims and answering: a GET gets
  // at most (deadline - now - margin), where margin is the smaller of this and a quarter of the
  // call's whole time.
  absl::Duration margin = absl::Seconds(2);
};

class ClaimService {
 public:
  ClaimService(DriverSetup setup, topology::Topology topo, state::Ledger* ledger,
               const cdi::SpecStore* cdi, ClaimSource* source);

  const std::string& driver() const { return driver_; }
  // Told of every claim prepared or unprepared; nullptr (the default) for none. Set before the
  // service is used; not owned.
  void SetObserver(metrics::Observer* observer) { observer_ = observer; }

  // At start, before serving: rewrites the CDI file and the device metadata files of every claim
  // this driver has prepared when they are missing or differ, and removes this driver's CDI and
  // metadata files of claims that are not prepared. Returns how many files were written and
  // removed.
  using Reconciled = cdi::ReconciledCdi;
  absl::StatusOr<Reconciled> ReconcileCdi();
  // The same check on a thread of its own, so the driver can register with the kubelet before
  // it has read its claims' files (30,000 of them for 10,000 claims). A prepare or unprepare of a
  // claim the check has not reached checks that claim's files first, and the check then leaves
  // them alone; one of a claim being checked waits for that claim's check. Files of claims that
  // are not prepared are removed under the same exclusion, so a removal never races a prepare or
  // unprepare of the same claim. `done` is called on the check's thread with its outcome (an
  // error does not stop it: the other claims are still checked). Call once, before serving.
  void StartFileCheck(std::function<void(const absl::StatusOr<Reconciled>&)> done);
  // Stops the background check between two claims (or two removals) and waits for it (unless
  // called on the check's own thread); its outcome is then Cancelled. A no-op when none runs.
  void StopFileCheck();
  // Tests only: called on the check's thread before it checks the claim of `owner`, holding no
  // key, so a test can order a call before a given claim's check. Set before StartFileCheck.
  void SetBeforeClaimCheckForTest(std::function<void(const std::string& owner)> hook) {
    before_claim_check_ = std::move(hook);
  }
  // Why the last file check failed, "" when it did not (or has not ended yet).
  std::string FileCheckProblem() const;
  ~ClaimService();

  // Set before the service is used.
  void SetFetchOptions(FetchOptions options) { fetch_ = options; }

  // One outcome per claim UID of the request, each independent of the others: a claim with
  // identifiers beyond the API's limits, or whose GET fails or times out, fails alone. The claims
  // are fetched concurrently (FetchOptions::parallel), each GET bounded by the time left before
  // `limits.deadline`, and prepared in request order. Once the caller has cancelled, or its
  // deadline has passed, the claims not yet fetched are not fetched and those not yet prepared
  // are not prepared: they fail with a message saying so. A repeated prepare of a prepared claim
  // answers as before, after checking its CDI file (written again when missing or different).
  // Never throws.
  std::map<std::string, ClaimOutcome> Prepare(const std::vector<ClaimRef>& claims,
                                              const CallLimits& limits = {});
  // uid -> error ("" on success). Unknown claims succeed; claims with identifiers beyond the
  // API's limits fail alone.
  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims);

  // The devices this driver can prepare now, as {pool, device}: what the health stream reports.
  std::vector<std::pair<std::string, std::string>> Devices() const;

  // The machine changed (CPUs offline, GPUs gone): later prepares use the new view. Claims
  // already prepared keep what they have.
  void Update(DriverSetup setup, topology::Topology topo);

 private:
  // A claim of a Prepare call on its way: fetched (and parsed), or already answered.
  struct Fetched;
  // What the claim's driver setup and machine are now (Update replaces them whole).
  struct View {
    View(DriverSetup s, topology::Topology t)
        : setup(std::move(s)), topo(std::move(t)), cpu_layout(topo) {}
    DriverSetup setup;
    topology::Topology topo;
    allocation::CpuLayout cpu_layout;  // of topo: built once, not on every pick
  };
  // A claim the ledger already has, found under its lock (Lookup), answered outside it (Replay).
  struct Known;
  std::shared_ptr<const View> view() const;
  // The claim GETs of one Prepare call, run beside each other.
  class Call;
  // Everything of one claim that can run beside the other claims of the call: the identifier
  // checks, the replay of a prepared claim, the GET and its checks.
  // `caller_gone`, when given, is polled during the GET: FetchOne runs on the caller's thread.
  Fetched FetchOne(const ClaimRef& ref, const CallLimits& limits, absl::Time call_start,
                   const std::atomic<bool>& gave_up, std::function<bool()> caller_gone = {});
  // The rest, one claim at a time in request order: plan and hold, CDI file, journal.
  ClaimOutcome PrepareOne(const ClaimRef& ref, const claims::Claim& claim);
  // PrepareOne's plan, under the ledger's lock: the claim as the ledger knows it (`known`), or
  // its plan, held.
  absl::Status PlanOne(state::Ledger::Edit& edit, const ClaimRef& ref, const claims::Claim& claim,
                       const View& view, std::optional<Known>* known, Plan* plan);
  // Within a Reserve: nullopt when the ledger does not know the claim; else its outcome, or (a
  // prepared claim) its answer to replay, holding the claim until the transaction ends.
  std::optional<Known> Lookup(state::Ledger::Edit& edit, const ClaimRef& ref);
  // Outside the lock, the claim held: checks the CDI file of a known claim and answers.
  ClaimOutcome Replay(const ClaimRef& ref, Known known);
  // "claim ns/name uid=... driver=... pod=ns/p": how every claim-scoped log line starts. Only for
  // claims whose identifiers passed ValidateClaimIdentity.
  std::string Who(const ClaimRef& ref) const;
  std::string UnprepareOne(const ClaimRef& ref);
  // What unprepare removes of a prepared claim (FilesOf).
  struct ClaimFiles {
    std::string cdi_file;                          // "" for none
    std::vector<std::string> metadata_cdi_files;   // in the CDI directory
    std::string metadata_host_path;                // the first metadata file's; "" for none
    std::vector<std::string> metadata_host_files;  // all of them
  };
  // Kept at prepare, so unprepare need not parse the stored CDI JSON (the CDI spec, the metadata
  // files' contents and specs) back to find a few file names: that parse was a sixth of a
  // prepare+unprepare cycle's instructions.
  void Remember(const std::string& owner, const state::JsonText& cdi, ClaimFiles files);
  // The files of `owner` whose stored CDI JSON is `cdi`: as remembered when `cdi` is the text
  // they were remembered with, else parsed from it (a claim prepared before this start).
  absl::StatusOr<ClaimFiles> FilesOf(const std::string& owner, const state::JsonText& cdi);
  void Forget(const std::string& owner);

  // The file check (ReconcileCdi, StartFileCheck) and its exclusion against the calls. Keys are
  // "uid:<claim uid>" (its CDI spec and metadata specs) and "dir:<ns>_<name>" (its metadata
  // directory); each has flags:
  enum KeyFlag : int {
    kRunning = 1,  // the check or a call's check of it is running now
    kChecked = 2,  // its files were checked
    kCalled = 4,   // a prepare or unprepare has taken it over: the check leaves it alone
    kKeep = 8,     // its stored files could not be read back: nothing of it is removed
  };
  // Runs `fn(flags of keys[0], flags of all keys or'ed)` with every key held exclusively, then
  // adds `add` and what `fn` returns to each key's flags. Does nothing once the check has ended.
  void Guarded(const std::vector<std::string>& keys, int add,
               const std::function<int(int first, int any)>& fn);
  // Ends a check (ReconcileCdi, StartFileCheck): no call is let into Guarded after it, and the
  // keys are dropped once no call is inside it.
  void EndFileCheck();
  // Before a prepare or unprepare of `ref` touches its files, while a check runs.
  void BeforeClaimFiles(const ClaimRef& ref);
  // The files the check found wanted (the claims it checked itself).
  struct Wanted {
    std::set<std::string> cdi_files;
    std::set<std::string> host_files;
    // Every host file the records name, `host_files` or not: a metadata CDI spec mounting one
    // is ours, wherever its root (an earlier --device-metadata-dir's).
    std::set<std::string> recorded_host_files;
  };
  // Checks the CDI spec, metadata specs and (when `host_files`) metadata files of `owner` as its
  // stored record says; returns how many were written. `wanted` (may be null) gets their names.
  absl::StatusOr<int> CheckClaimFiles(const std::string& owner, bool host_files, Wanted* wanted);
  absl::StatusOr<Reconciled> RunFileCheck();

  std::atomic<bool> checking_{false};
  std::atomic<bool> stop_check_{false};
  std::thread check_thread_;
  std::function<void(const std::string&)> before_claim_check_;
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  std::map<std::string, int> gate_keys_;
  mutable std::mutex check_error_mu_;
  std::string check_error_;

  const std::string driver_;
  state::Ledger* ledger_;
  const cdi::SpecStore* cdi_;
  ClaimSource* source_;
  metrics::Observer* observer_ = nullptr;
  // Claim UID -> the pods of its reservedFor, from the last GET (log lines only).
  mutable std::mutex pods_mu_;
  std::map<std::string, std::string> pods_;
  FetchOptions fetch_;
  // Owner -> its files and the size and hash of the stored text they were taken from.
  struct Remembered {
    size_t size = 0;
    size_t hash = 0;
    ClaimFiles files;
  };
  std::mutex files_mu_;
  std::map<std::string, Remembered> files_;
  // The threads of the claim GETs, kept from call to call (a thread made and joined per call
  // was a large part of a prepare's system time). One per concurrent GET of a call of several
  // claims (a call of one fetches on its gRPC thread), at most this many.
  static constexpr size_t kMaxFetcherThreads = 64;
  WorkerPool fetchers_;
  mutable absl::Mutex view_mu_;
  std::shared_ptr<const View> view_ ABSL_GUARDED_BY(view_mu_);
};

}  // namespace topodra::prepare
