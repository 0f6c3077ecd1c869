#include "driver/plugin/pod_resources.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <exception>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/podresources/v1/api.grpc.pb.h"

namespace topodra::plugin {
namespace {

namespace podres = ::v1;

// sun_path is 108 bytes including the terminating NUL.
constexpr size_t kMaxSocketPath = 107;
// List returns every pod of the node, with CPU ids and memory, devices or not; on a big node that
// passes gRPC's default limit of 4 MiB. 16 MiB is what other node agents (dcgm-exporter) use.
constexpr int kMaxResponseBytes = 16 << 20;

std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

std::vector<AssignedDevices> Flatten(const podres::ListPodResourcesResponse& response) {
  std::vector<AssignedDevices> out;
  for (const podres::PodResources& pod : response.pod_resources()) {
    for (const podres::ContainerResources& container : pod.containers()) {
      for (const podres::ContainerDevices& devices : container.devices()) {
        if (devices.device_ids().empty()) continue;
        out.push_back(AssignedDevices{
            pod.namespace_(), pod.name(), container.name(), devices.resource_name(),
            std::vector<std::string>(devices.device_ids().begin(), devices.device_ids().end())});
      }
    }
  }
  return out;
}

// The channel is kept between calls (List is polled; a Unix-socket connect per call is cheap,
// but there is no reason to pay it) and thrown away after any failed call. That is what makes a
// kubelet restart harmless: the kubelet deletes and re-creates the socket, and a channel that
// failed to connect meanwhile waits out gRPC's reconnect backoff (up to two minutes) and fails
// every call until then, while a new channel dials the new socket at once. A restart between
// two calls usually needs nothing (gRPC sees the old connection close and dials again on the next
// call), but a call can race the close and fail on the dead connection: a kept channel's
// Unavailable is therefore retried once on a new channel, within the same deadline (List changes
// nothing, so asking twice is harmless).
class PodResourcesClient final : public PodResourcesLister {
 public:
  PodResourcesClient(std::string socket_path, absl::Duration timeout)
      : socket_path_(std::move(socket_path)), timeout_(timeout) {}

  absl::StatusOr<std::vector<AssignedDevices>> List() override {
    try {
      return ListOnce();
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("pod resources List on ", Quote(socket_path_), ": ", e.what()));
    }
  }

 private:
  absl::StatusOr<std::vector<AssignedDevices>> ListOnce() {
    if (socket_path_.size() > kMaxSocketPath) {
      return absl::InvalidArgumentError(absl::StrCat("pod resources socket path ",
                                                     Quote(socket_path_), " is longer than ",
                                                     kMaxSocketPath, " bytes"));
    }
    const absl::Time deadline = absl::Now() + timeout_;
    bool fresh = false;
    std::shared_ptr<grpc::Channel> channel = Channel(&fresh);
    podres::ListPodResourcesResponse response;
    grpc::Status s = Call(channel, deadline, &response);
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && !fresh) {
      Drop(channel);
      channel = Channel(&fresh);
      response.Clear();
      s = Call(channel, deadline, &response);
    }
    if (!s.ok()) {
      Drop(channel);
      return ErrorOf(s);
    }
    std::vector<AssignedDevices> out = Flatten(response);
    spdlog::debug("pod resources: List on {}: {} pods, {} device assignments", socket_path_,
                  response.pod_resources_size(), out.size());
    if (spdlog::should_log(spdlog::level::trace)) {
      spdlog::trace("pod resources: List response: {}", response.ShortDebugString());
    }
    return out;
  }

  static grpc::Status Call(const std::shared_ptr<grpc::Channel>& channel, absl::Time deadline,
                           podres::ListPodResourcesResponse* response) {
    std::unique_ptr<podres::PodResourcesLister::Stub> stub =
        podres::PodResourcesLister::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    return stub->List(&ctx, podres::ListPodResourcesRequest(), response);
  }

  absl::Status ErrorOf(const grpc::Status& s) const {
    const std::string where = absl::StrCat("pod resources List on ", Quote(socket_path_));
    switch (s.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
        return absl::UnavailableError(
            absl::StrCat(where, ": cannot reach the kubelet: ", s.error_message()));
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return absl::UnavailableError(absl::StrCat(where, ": the kubelet did not answer within ",
                                                   absl::FormatDuration(timeout_)));
      default:
        // gRPC and absl share the canonical code numbering.
        return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                            absl::StrCat(where, ": ", s.error_message()));
    }
  }

  std::shared_ptr<grpc::Channel> Channel(bool* fresh) {
    std::lock_guard<std::mutex> lock(mu_);
    *fresh = channel_ == nullptr;
    if (channel_ == nullptr) {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(kMaxResponseBytes);
      // Without this a new channel to the same path shares the global subchannel, backoff
      // included, with the one just thrown away.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      channel_ = grpc::CreateCustomChannel(absl::StrCat("unix:", socket_path_),
                                           grpc::InsecureChannelCredentials(), args);
    }
    return channel_;
  }

  // Only the channel the failed call used: another thread may already have made a new one.
  void Drop(const std::shared_ptr<grpc::Channel>& used) {
    std::lock_guard<std::mutex> lock(mu_);
    if (channel_ == used) channel_.reset();
  }

  const std::string socket_path_;
  const absl::Duration timeout_;
  std::mutex mu_;
  std::shared_ptr<grpc::Channel> channel_;  // guarded by mu_; null: dial on the next call
};

}  // namespace

std::unique_ptr<PodResourcesLister> NewPodResourcesClient(std::string socket_path,
                                                          absl::Duration timeout) {
  return std::make_unique<PodResourcesClient>(std::move(socket_path), timeout);
}

}  // namespace topodra::plugin
