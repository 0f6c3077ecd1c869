// Keeps the kubelet's pod cgroups on the CPUs they must have (layout.h: Desired/Plan): applies
// a target when the daemon changes it (every prepare and unprepare) and again whenever a cgroup
// appears under the pod hierarchy (inotify), so containers created while nothing changed, or
// while the daemon was down (the first apply at start), end up right too.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "driver/cgroup/cgroupfs.h"
#include "driver/cgroup/layout.h"

namespace topodra::cgroup {

struct ApplyResult {
  int cgroups = 0;  // pod-hierarchy cgroups seen
  int writes = 0;   // cpuset.cpus and cpuset.mems files written
  int failed = 0;   // writes that failed (a cgroup removed meanwhile is not a failure); a scan
                    // that failed counts as one (then nothing is written)
};

class Reconciler {
 public:
  // `watch_root`: the hierarchy's absolute root (Hierarchy::root), watched for new cgroups; empty
  // disables watching (tests drive Apply by hand).
  Reconciler(std::unique_ptr<CgroupFs> fs, std::string watch_root);
  ~Reconciler();  // Stop()

  // Scans and writes now, synchronously, with `target`, which becomes the current one.
  ApplyResult Apply(const Target& target);
  // The same, on the background thread (returns at once); the latest target wins.
  void SetTarget(Target target);

  // Starts the background thread (inotify on watch_root and its pod-hierarchy directories) and
  // has it apply the current target once, if there is one, to cover cgroups created before the
  // watches existed. Without inotify (none left, or a fake tree on a filesystem without it) it
  // logs a warning and still applies every SetTarget. Errors only if the thread cannot start.
  absl::Status Start();
  // Start and Stop are called by the owner, not concurrently with each other; Apply and
  // SetTarget may be called from any thread at any time.
  void Stop();

  // Applies done so far (for tests and metrics).
  int applies() const { return applies_.load(); }

 private:
  void Run();
  ApplyResult ApplyLocked(const Target& target);  // apply_mu_ held
  // Watches `relative` (empty: watch_root itself) and, when DescendsInto, its directories.
  void WatchTree(const std::string& relative);
  // Reads every queued inotify event, watches new directories; true if a cgroup appeared.
  bool DrainEvents();

  std::unique_ptr<CgroupFs> fs_;
  const std::string watch_root_;
  std::mutex mu_;  // guards target_, have_target_, pending_, stopping_
  // Held for a whole scan-plan-write, and taken before mu_: the target applied is read under it,
  // so two applies cannot finish out of order and leave an older target on the cgroups.
  std::mutex apply_mu_;
  Target target_;
  bool have_target_ = false;
  bool pending_ = false;
  bool stopping_ = false;
  std::atomic<int> applies_{0};
  int inotify_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: SetTarget and Stop wake the thread's poll(2) on inotify_fd_
  // Watch descriptor -> relative path ("" for watch_root). Start fills it before the thread
  // runs; then only the thread touches it.
  std::unordered_map<int, std::string> watches_;
  bool watch_failure_logged_ = false;  // the thread's, like watches_
  std::thread thread_;
};

}  // namespace topodra::cgroup
