#include "driver/cgroup/reconciler.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace topodra::cgroup {
namespace {

using Clock = std::chrono::steady_clock;

// How long the thread lets a burst of new cgroups (a pod's sandbox and containers, a pod and
// its containers moved in) settle before one apply covers them all. Short, because until then a
// new container runs on whatever CPUs its parent gave it.
constexpr std::chrono::milliseconds kSettle{5};
constexpr uint32_t kWatchMask = IN_CREATE | IN_MOVED_TO | IN_ONLYDIR;

}  // namespace

Reconciler::Reconciler(std::unique_ptr<CgroupFs> fs, std::string watch_root)
    : fs_(std::move(fs)), watch_root_(std::move(watch_root)) {}

Reconciler::~Reconciler() { Stop(); }

ApplyResult Reconciler::Apply(const Target& target) {
  std::lock_guard<std::mutex> apply_lock(apply_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    target_ = target;
    have_target_ = true;
  }
  return ApplyLocked(target);
}

ApplyResult Reconciler::ApplyLocked(const Target& target) {
  ApplyResult result;
  absl::StatusOr<std::vector<Observed>> tree = fs_->Scan(/*mems=*/!target.all_mems.Empty());
  if (!tree.ok()) {
    result.failed = 1;
    applies_.fetch_add(1);
    spdlog::warn("cgroup apply: listing the pod cgroups failed, nothing written: {}",
                 Message(tree.status()));
    return result;
  }
  result.cgroups = static_cast<int>(tree->size());
  const std::vector<Write> writes = Plan(*tree, target);
  int gone = 0;
  for (const Write& w : writes) {
    const absl::Status st = fs_->Write(w.path, w.file, w.cpus);
    if (st.ok()) {
      ++result.writes;
    } else if (absl::IsNotFound(st)) {
      ++gone;  // removed since the scan: nothing left to set
    } else {
      ++result.failed;
      spdlog::warn("cgroup {}: setting {} to \"{}\" failed: {}", w.path, FileName(w.file),
                   w.cpus.ToString(), Message(st));
    }
  }
  applies_.fetch_add(1);
  spdlog::debug(
      "cgroup apply: {} cgroups, {} writes planned, {} written, {} cgroups gone, {} failed "
      "(shared {}, {} exclusive containers, {} with their own memory nodes)",
      result.cgroups, writes.size(), result.writes, gone, result.failed, target.shared.ToString(),
      target.exclusive.size(), target.exclusive_mems.size());
  return result;
}

void Reconciler::SetTarget(Target target) {
  std::lock_guard<std::mutex> lock(mu_);
  target_ = std::move(target);
  have_target_ = true;
  pending_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    // Only fails if the counter would overflow, and then the thread is awake anyway.
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
}

absl::Status Reconciler::Start() {
  if (thread_.joinable()) return absl::FailedPreconditionError("cgroup reconciler already started");
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) return files::ErrnoStatus(errno, "eventfd for", "cgroup reconciler");
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_fd_ = wake_fd;
    stopping_ = false;
    // Whatever appeared between the last apply and the watches below is covered by this one.
    if (have_target_) {
      pending_ = true;
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
    }
  }
  watches_.clear();
  watch_failure_logged_ = false;
  if (!watch_root_.empty()) {
    inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ < 0) {
      spdlog::warn(
          "cgroup reconciler: inotify unavailable ({}); new containers get their CPUs only at the "
          "next prepare or unprepare",
          Message(files::ErrnoStatus(errno, "inotify_init1 for", watch_root_)));
    } else {
      WatchTree("");
    }
  }
  const size_t watched = watches_.size();  // the thread owns watches_ once it runs
  try {
    thread_ = std::thread(&Reconciler::Run, this);
  } catch (const std::system_error& e) {
    if (inotify_fd_ >= 0) ::close(inotify_fd_);
    inotify_fd_ = -1;
    std::lock_guard<std::mutex> lock(mu_);
    ::close(wake_fd_);
    wake_fd_ = -1;
    return absl::InternalError(absl::StrCat("cgroup reconciler: cannot start thread: ", e.what()));
  }
  if (inotify_fd_ >= 0) {
    spdlog::info("cgroup reconciler started: {} directories watched under \"{}\"", watched,
                 watch_root_);
  } else {
    spdlog::info("cgroup reconciler started, not watching for new cgroups");
  }
  return absl::OkStatus();
}

void Reconciler::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
  thread_.join();
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  inotify_fd_ = -1;
  watches_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  ::close(wake_fd_);
  wake_fd_ = -1;
}

void Reconciler::WatchTree(const std::string& relative) {
  const std::string dir = relative.empty() ? watch_root_ : absl::StrCat(watch_root_, "/", relative);
  // The watch first, the listing second: a directory created in between is both listed and
  // reported, never neither. Watching an already watched inode returns the same descriptor.
  const int wd = ::inotify_add_watch(inotify_fd_, dir.c_str(), kWatchMask);
  if (wd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return;  // gone already
    if (!watch_failure_logged_) {
      watch_failure_logged_ = true;
      // ENOSPC: fs.inotify.max_user_watches is exhausted.
      spdlog::warn(
          "cgroup reconciler: cannot watch for new cgroups, those below it get their CPUs only at "
          "the next prepare or unprepare: {}",
          Message(files::ErrnoStatus(err, "inotify_add_watch", dir)));
    }
    return;
  }
  watches_[wd] = relative;
  absl::StatusOr<std::vector<files::DirEntry>> entries = files::ListDirectory(dir);
  if (!entries.ok()) return;
  for (const files::DirEntry& e : *entries) {
    if (e.regular) continue;
    const std::string child = relative.empty() ? e.name : absl::StrCat(relative, "/", e.name);
    if (DescendsInto(child)) WatchTree(child);
  }
}

bool Reconciler::DrainEvents() {
  bool appeared = false;
  bool overflow = false;
  alignas(inotify_event) char buffer[16 * 1024];
  while (true) {
    const ssize_t n = ::read(inotify_fd_, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) {
        spdlog::warn("cgroup reconciler: {}",
                     Message(files::ErrnoStatus(errno, "read inotify events under", watch_root_)));
      }
      break;
    }
    if (n == 0) break;
    for (ssize_t offset = 0; offset + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + offset);
      offset += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      if (event->mask & IN_Q_OVERFLOW) {
        overflow = true;
        continue;
      }
      if (event->mask & IN_IGNORED) {  // the directory was removed
        watches_.erase(event->wd);
        continue;
      }
      if (!(event->mask & IN_ISDIR) || event->len == 0) continue;
      const auto it = watches_.find(event->wd);
      if (it == watches_.end()) continue;
      const std::string name(event->name);  // NUL-padded within len
      const std::string child = it->second.empty() ? name : absl::StrCat(it->second, "/", name);
      if (it->second.empty() && !DescendsInto(child)) continue;  // system.slice and the like
      appeared = true;
      if (DescendsInto(child)) WatchTree(child);
    }
  }
  if (overflow) {
    // Events were lost: watch whatever exists now; the apply that follows covers the rest.
    spdlog::debug("cgroup reconciler: inotify queue overflowed, rescanning");
    WatchTree("");
    appeared = true;
  }
  return appeared;
}

void Reconciler::Run() {
  std::optional<Clock::time_point> settle_at;
  while (true) {
    try {
      int timeout_ms = -1;
      if (settle_at) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(*settle_at - Clock::now());
        timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
      }
      pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
      const nfds_t nfds = inotify_fd_ >= 0 ? 2 : 1;
      if (::poll(fds, nfds, timeout_ms) < 0 && errno != EINTR) {
        spdlog::error("cgroup reconciler: {}",
                      Message(files::ErrnoStatus(errno, "poll", watch_root_)));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (fds[0].revents & POLLIN) {
        uint64_t count;
        [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof(count));
      }
      if (nfds == 2 && (fds[1].revents & POLLIN) && DrainEvents() && !settle_at) {
        // Not pushed back by later events: a steady trickle of new cgroups still gets applied.
        settle_at = Clock::now() + kSettle;
      }
      bool apply_now = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        apply_now = pending_;
        pending_ = false;
      }
      if (settle_at && Clock::now() >= *settle_at) apply_now = true;
      if (!apply_now) continue;
      settle_at.reset();
      std::lock_guard<std::mutex> apply_lock(apply_mu_);
      Target target;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!have_target_) continue;
        target = target_;
      }
      ApplyLocked(target);
    } catch (const std::exception& e) {
      spdlog::error("cgroup reconciler: {}", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } catch (...) {
      spdlog::error("cgroup reconciler: unknown exception");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace topodra::cgroup
