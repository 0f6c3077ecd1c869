// gRPC helpers shared by the two halves of the kubelet simulator (DRA and device plugin).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace topodra::testing::sim {

inline absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  // gRPC and absl share the canonical code numbering.
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// "OK" or "<CODE>: <message>", for the call log.
inline std::string GrpcResult(const grpc::Status& s) {
  if (s.ok()) return "OK";
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())), ": ",
                      s.error_message());
}

inline std::chrono::system_clock::time_point Deadline(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

inline std::shared_ptr<grpc::Channel> Dial(const std::string& socket_path) {
  grpc::ChannelArguments args;
  // A fresh connection per channel: after a socket is re-created, a shared subchannel could still
  // be connected to the old server behind the unlinked socket.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Reconnect quickly when the plugin restarts (the default waits a second first).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(absl::StrCat("unix:", socket_path),
                                   grpc::InsecureChannelCredentials(), args);
}

}  // namespace topodra::testing::sim
