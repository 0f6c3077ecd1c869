#include "driver/plugin/socket_server.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace topodra::plugin {
namespace {

// sun_path is 108 bytes including the terminating NUL.
constexpr size_t kMaxSocketPath = 107;

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

unsigned long InodeOf(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  // File systems reuse a deleted socket's inode number for the next one, so the change time is
  // mixed in: a socket deleted and made again is a different socket.
  const uint64_t ctime = static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000000ULL +
                         static_cast<uint64_t>(st.st_ctim.tv_nsec);
  const uint64_t id = static_cast<uint64_t>(st.st_ino) ^ (ctime * 0x9E3779B97F4A7C15ULL);
  return id == 0 ? 1 : static_cast<unsigned long>(id);
}

// Builds a server on `path` with owner-only permissions from the first moment: the umask is
// process-wide, so this runs while no other thread creates files (start-up, or the watcher,
// which only ever runs this).
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
  const mode_t old = ::umask(0177);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ::umask(old);
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

}  // namespace topodra::plugin
