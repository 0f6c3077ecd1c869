// gRPC servers on Unix sockets, as every kubelet-facing service of the daemon needs them.
#pragma once

#include <chrono>
#include <memory>
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
// An identity of the socket at `path` (inode and change time), 0 when there is none: how a
// watcher tells "our socket" from "deleted" and "replaced by someone else's".
unsigned long InodeOf(const std::string& path);
// Serves `services` on `path` (mode 0600 from the first moment).
absl::StatusOr<std::unique_ptr<grpc::Server>> Serve(const std::string& path,
                                                    const std::vector<grpc::Service*>& services);
// Shuts down: calls still running after `grace` are cancelled; waits for the handlers.
void Shutdown(grpc::Server* server, std::chrono::milliseconds grace = std::chrono::seconds(5));

}  // namespace topodra::plugin
