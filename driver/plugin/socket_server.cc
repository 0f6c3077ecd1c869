#include "driver/plugin/socket_server.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"

namespace topodra::plugin {
namespace {

// sun_path is 108 bytes including the terminating NUL.
constexpr size_t kMaxSocketPath = 107;

// The umask is process-wide: two watchers serving at once would otherwise restore each other's
// 0177 and leave it set for every file the daemon makes afterwards.
std::mutex umask_mu;

// A server stops only when its clients hang up or the grace is over, and the kubelet keeps its
// connection open: the grace of a replaced server is how long its socket stays missing. Calls
// still running then are cancelled; the kubelet retries them (prepare and unprepare are
// idempotent).
constexpr std::chrono::milliseconds kReplaceGrace{1000};

std::string KindOf(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return absl::StrFormat("a file of mode 0%o", mode);
}

}  // namespace

// Removes a socket left by a dead instance (the instance lock says none is alive). Anything
// else at that path is not ours to delete.
absl::Status RemoveStaleSocket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return files::ErrnoStatus(errno, "stat", path);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", path, "\" exists and is not a socket; refusing to replace it"));
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return files::ErrnoStatus(errno, "remove stale socket", path);
  }
  return absl::OkStatus();
}

namespace {

unsigned long IdOf(const struct stat& st) {
  const uint64_t id =
      static_cast<uint64_t>(st.st_ino) ^ (static_cast<uint64_t>(st.st_dev) * 0x9E3779B97F4A7C15ULL);
  return id == 0 ? 1 : static_cast<unsigned long>(id);
}

}  // namespace

unsigned long InodeOf(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return IdOf(st);
}

HeldSocket::HeldSocket(const std::string& path) {
  // O_NOFOLLOW with O_PATH opens a symlink itself, which fstat then shows is not a socket.
  const int fd = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    ::close(fd);
    return;
  }
  fd_ = fd;
  id_ = IdOf(st);
}

HeldSocket::HeldSocket(HeldSocket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), id_(std::exchange(other.id_, 0)) {}

HeldSocket& HeldSocket::operator=(HeldSocket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

HeldSocket::~HeldSocket() {
  if (fd_ >= 0) ::close(fd_);
}

// Builds a server on `path` with owner-only permissions from the first moment: the umask is
// process-wide, so this runs while no other thread creates files (start-up, or the watchers,
// which only ever run this, one at a time).
absl::StatusOr<std::unique_ptr<grpc::Server>> Serve(const std::string& path,
                                                    const std::vector<grpc::Service*>& services) {
  if (path.size() > kMaxSocketPath) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path \"", path, "\" is longer than ", kMaxSocketPath, " bytes"));
  }
  if (absl::Status st = RemoveStaleSocket(path); !st.ok()) return st;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* s : services) builder.RegisterService(s);
  builder.SetMaxReceiveMessageSize(16 << 20);
  // A few pollers kept alive: with the default (1..2) a burst of calls makes gRPC start and stop
  // threads per call, which shows up in prepare latency.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 4);
  std::unique_ptr<grpc::Server> server;
  {
    std::lock_guard<std::mutex> lock(umask_mu);
    const mode_t old = ::umask(0177);
    server = builder.BuildAndStart();
    ::umask(old);
  }
  if (server == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on \"", path, "\""));
  }
  if (::chmod(path.c_str(), 0600) != 0) {
    server->Shutdown();
    return files::ErrnoStatus(errno, "chmod", path);
  }
  return server;
}

void Shutdown(grpc::Server* server, std::chrono::milliseconds grace) {
  server->Shutdown(std::chrono::system_clock::now() + grace);
  server->Wait();
}

void ShutdownAt(grpc::Server* server, const std::string& path, std::chrono::milliseconds grace) {
  const std::string aside = path + ".kept";
  struct stat st {};
  const bool kept = ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode) &&
                    ::linkat(AT_FDCWD, path.c_str(), AT_FDCWD, aside.c_str(), 0) == 0;
  Shutdown(server, grace);
  if (!kept) return;
  // Back under its name, unless it is still there or something else has taken the name.
  if (::linkat(AT_FDCWD, aside.c_str(), AT_FDCWD, path.c_str(), 0) != 0 && errno != EEXIST) {
    spdlog::warn("cannot put the symbolic link {} back (kept as {}): {}", path, aside,
                 std::strerror(errno));
    return;
  }
  ::unlink(aside.c_str());
}

SocketPath InspectSocketPath(const std::string& path, unsigned long ours) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {SocketPath::kMissing, ""};
  if (!S_ISSOCK(st.st_mode)) return {SocketPath::kNotASocket, KindOf(st.st_mode)};
  return {ours != 0 && InodeOf(path) == ours ? SocketPath::kOurs : SocketPath::kOtherSocket, ""};
}

ServedSocket::ServedSocket(std::string name, std::string path, std::vector<grpc::Service*> services,
                           mode_t dir_mode, std::chrono::milliseconds grace,
                           std::function<void()> before_replacing)
    : name_(std::move(name)),
      path_(std::move(path)),
      services_(std::move(services)),
      dir_mode_(dir_mode),
      grace_(grace),
      before_replacing_(std::move(before_replacing)) {}

ServedSocket::~ServedSocket() { Stop(); }

absl::Status ServedSocket::Serve() {
  std::lock_guard<std::mutex> lock(mu_);
  return ServeLocked();
}

absl::Status ServedSocket::ServeLocked() {
  if (server_ != nullptr) {
    // Stopped before the new one listens, not after: gRPC removes whatever socket is at the path
    // when a server stops, which would be the new one.
    if (before_replacing_) before_replacing_();
    ShutdownAt(server_.get(), path_, std::min(grace_, kReplaceGrace));
    server_.reset();
  }
  absl::StatusOr<std::unique_ptr<grpc::Server>> fresh = plugin::Serve(path_, services_);
  if (!fresh.ok()) return fresh.status();
  server_ = *std::move(fresh);
  held_ = HeldSocket(path_);
  inode_ = held_.id();
  return absl::OkStatus();
}

void ServedSocket::Keep() {
  const SocketPath at = InspectSocketPath(path_, inode_.load());
  if (at.kind == SocketPath::kOurs) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (at.kind == SocketPath::kNotASocket) {
    // Whoever put it there meant something by it: deleting it is the operator's decision.
    const std::string now = absl::StrCat(at.what, " was in its place");
    if (condition_ != now) {
      spdlog::error(
          "{} {}: {} is there instead of the socket; the daemon leaves it alone (it removes only "
          "its own sockets) and serves no socket there until it is removed",
          name_, path_, at.what);
      condition_ = now;
    }
    return;
  }
  const std::string what_happened =
      at.kind == SocketPath::kMissing
          ? "was removed"
          : "was replaced by a socket the daemon did not make, which it removes";
  absl::Status st = files::MakeDirectories(path_.substr(0, path_.rfind('/')), dir_mode_);
  if (st.ok()) st = ServeLocked();
  if (!st.ok()) {
    const std::string now = absl::StrCat("it could not be served: ", st.message());
    if (condition_ != now) {
      spdlog::error("{} {} {}; cannot serve it again (retrying): {}", name_, path_, what_happened,
                    std::string(st.message()));
      condition_ = now;
    }
    return;
  }
  if (condition_.empty()) {
    spdlog::warn("{} {} {}; serving a fresh one", name_, path_, what_happened);
  } else {
    spdlog::info("{} {} is served again (before: {})", name_, path_, condition_);
    condition_.clear();
  }
}

std::string ServedSocket::Problem() const {
  const SocketPath at = InspectSocketPath(path_, inode_.load());
  switch (at.kind) {
    case SocketPath::kOurs:
      return "";
    case SocketPath::kMissing:
      return absl::StrCat(name_, " ", path_, " is missing");
    case SocketPath::kOtherSocket:
      return absl::StrCat(name_, " ", path_, " is not the daemon's socket");
    case SocketPath::kNotASocket:
      return absl::StrCat(name_, " ", path_, " is ", at.what,
                          ", not the daemon's socket: remove it (the daemon does not)");
  }
  return "";
}

void ServedSocket::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (server_ == nullptr) return;
  ShutdownAt(server_.get(), path_, grace_);
  server_.reset();
  // Only our own socket (gRPC has usually removed it already).
  if (InspectSocketPath(path_, inode_.load()).kind == SocketPath::kOurs) ::unlink(path_.c_str());
  held_ = HeldSocket();
  inode_ = 0;
}

}  // namespace topodra::plugin
