// One topodra per node: an flock on a file that the kernel releases when the process dies, even
// by kill -9, so a crashed instance never blocks its successor. Needed because gRPC removes an
// existing socket file before binding: a second instance would silently take over the first
// one's sockets while both think they serve the kubelet.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace topodra::plugin {

class InstanceLock {
 public:
  // Creates the file (0600) and its directory if needed. FailedPrecondition, naming the file
  // and the holder's pid, when another live process holds it.
  static absl::StatusOr<std::unique_ptr<InstanceLock>> Acquire(const std::string& path);
  ~InstanceLock();
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;

  const std::string& path() const { return path_; }

  // The lock file goes when its directory is deleted (the kubelet's plugin directory, by an
  // operator): the flock then sits on a file no one else can open, and a second instance would
  // lock a new one there. When the path no longer names the locked file, takes the lock at the
  // path again, making the directory; FailedPrecondition when another process holds it.
  absl::Status Renew();

 private:
  InstanceLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

}  // namespace topodra::plugin
