#include "driver/plugin/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"

namespace topodra::plugin {

absl::StatusOr<std::unique_ptr<InstanceLock>> InstanceLock::Acquire(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (absl::Status st = files::MakeDirectories(path.substr(0, slash), 0700); !st.ok()) return st;
  }
  absl::StatusOr<int> opened = files::OpenRegularFile(path, O_RDWR | O_CREAT, 0600);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("lock file: ", opened.status().message()));
  }
  const int fd = *opened;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return files::ErrnoStatus(err, "lock", path);
    int pid = 0;
    if (n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)), &pid)) {
      holder = absl::StrCat(" (pid ", pid, ")");
    }
    return absl::FailedPreconditionError(
        absl::StrCat("another topodra is running on this node", holder, ": it holds the lock \"",
                     path, "\"; only one instance may serve a node's kubelet and state"));
  }
  // The pid is only for the message above; the flock is what counts.
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    const int err = errno;
    ::close(fd);
    return files::ErrnoStatus(err, "write", path);
  }
  return std::unique_ptr<InstanceLock>(new InstanceLock(path, fd));
}

absl::Status InstanceLock::Renew() {
  struct stat held {
  }, at{};
  if (::fstat(fd_, &held) == 0 && ::lstat(path_.c_str(), &at) == 0 && held.st_dev == at.st_dev &&
      held.st_ino == at.st_ino) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<InstanceLock>> fresh = Acquire(path_);
  if (!fresh.ok()) return fresh.status();
  ::close(fd_);
  fd_ = std::exchange((*fresh)->fd_, -1);
  return absl::OkStatus();
}

InstanceLock::~InstanceLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace topodra::plugin
