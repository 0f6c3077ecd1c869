// gRPC servers on Unix sockets, as every kubelet-facing service of the daemon needs them.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace topodra::plugin {

// Removes a socket left by a dead instance; anything else at `path` is an error.
absl::Status RemoveStaleSocket(const std::string& path);
// An identity of the socket at `path` (device and inode number), 0 when there is none: how a
// watcher tells "our socket" from "deleted" and "replaced by someone else's". chmod, chown or
// touch leave it as it is. A file system gives a deleted file's inode number to the next file it
// makes, so an identity names one socket only while that socket is held (HeldSocket).
unsigned long InodeOf(const std::string& path);

// The socket at a path, opened with O_PATH (no I/O: it only keeps the inode alive). While it is
// held, its inode number is not given to another file, so InodeOf(path) == id() means the path
// still names this very socket.
class HeldSocket {
 public:
  HeldSocket() = default;
  explicit HeldSocket(const std::string& path);  // nothing is held when `path` is not a socket
  HeldSocket(HeldSocket&& other) noexcept;
  HeldSocket& operator=(HeldSocket&& other) noexcept;
  HeldSocket(const HeldSocket&) = delete;
  HeldSocket& operator=(const HeldSocket&) = delete;
  ~HeldSocket();

  // InodeOf() of the held socket; 0 when none is held.
  unsigned long id() const { return id_; }

 private:
  int fd_ = -1;
  unsigned long id_ = 0;
};
// Serves `services` on `path` (mode 0600 from the first moment).
absl::StatusOr<std::unique_ptr<grpc::Server>> Serve(const std::string& path,
                                                    const std::vector<grpc::Service*>& services);
// Shuts down: calls still running after `grace` are cancelled; waits for the handlers.
void Shutdown(grpc::Server* server, std::chrono::milliseconds grace = std::chrono::seconds(5));

// Shutdown() of the server on `path`. gRPC removes the socket `path` names when a server stops,
// following a symbolic link to find out: a symlink someone put in place of our socket would go
// with it, so it is kept under a second name meanwhile and put back.
void ShutdownAt(grpc::Server* server, const std::string& path,
                std::chrono::milliseconds grace = std::chrono::seconds(5));

// What is at the path of a socket the daemon serves, as lstat sees it (a symlink is never
// followed: it is a thing of its own at the path).
struct SocketPath {
  enum Kind {
    kOurs,         // the socket this process made
    kMissing,      // nothing
    kOtherSocket,  // a socket this process did not make (a stale one, or someone else's)
    kNotASocket,   // a regular file, a symlink, a directory, ...
  };
  Kind kind = kMissing;
  std::string what;  // kNotASocket: "a regular file", "a symbolic link", ...
};
// `ours` is InodeOf() of the socket this process made there (0: none).
SocketPath InspectSocketPath(const std::string& path, unsigned long ours);

// One gRPC server kept on one Unix socket path while the daemon runs. The owner's watcher calls
// Keep() periodically: a socket deleted, or replaced by another socket, is served afresh at once;
// anything else at the path is never removed (it is not ours), and the socket stays unserved
// until it is gone. Each change of state is one log line, never one per check.
class ServedSocket {
 public:
  // `name` starts its log and readiness lines ("driver dra.cpu: DRA socket"). `dir_mode` is the
  // mode of the socket's directory when it has to be made again. Stop() lets calls in flight
  // finish for up to `grace`, a replacement for up to 1 s of it; `before_replacing` (optional) is
  // called first, to end streams that would otherwise hold the old server up.
  ServedSocket(std::string name, std::string path, std::vector<grpc::Service*> services,
               mode_t dir_mode, std::chrono::milliseconds grace,
               std::function<void()> before_replacing = nullptr);
  ~ServedSocket();  // Stop()

  // Serves a fresh socket at the path (a stale socket there is replaced; anything else is an
  // error), after stopping the server it replaces.
  absl::Status Serve();
  // Watcher: re-serves when our socket is gone; see the class comment.
  void Keep();
  // "" while our socket is at the path; otherwise one line saying what is wrong, for /readyz.
  std::string Problem() const;
  // Stops the server and removes the socket if it is ours.
  void Stop();

  const std::string& path() const { return path_; }

 private:
  absl::Status ServeLocked();

  const std::string name_, path_;
  const std::vector<grpc::Service*> services_;
  const mode_t dir_mode_;
  const std::chrono::milliseconds grace_;
  const std::function<void()> before_replacing_;
  std::atomic<unsigned long> inode_{0};  // held_.id(), read without mu_
  std::mutex mu_;                        // guards the members below
  std::unique_ptr<grpc::Server> server_;
  HeldSocket held_;        // the socket server_ made, while it is served
  std::string condition_;  // why the socket is not served, as last logged; "" while it is
};

}  // namespace topodra::plugin
