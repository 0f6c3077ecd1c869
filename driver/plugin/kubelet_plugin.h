// One DRA driver towards the kubelet: the DRAPlugin service (v1 and v1beta1) on
// <kubelet-root>/plugins/<driver>/dra.sock and the registration service on
// <kubelet-root>/plugins_registry/<driver>-reg.sock, in that order (the kubelet may call the
// service as soon as it sees the registration socket). The only file that sees protobuf types
// of the DRA API; the work is done by prepare::ClaimService.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "driver/prepare/claim_service.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace topodra::plugin {

inline constexpr char kDraV1[] = "v1.DRAPlugin";
inline constexpr char kDraV1beta1[] = "v1beta1.DRAPlugin";
inline constexpr char kDraHealth[] = "v1alpha1.DRAResourceHealth";

struct PluginOptions {
  std::string driver;
  std::string kubelet_root = "/var/lib/kubelet";
  // How often the registration socket is checked; when it is gone (or replaced), it is created
  // again so the kubelet registers the plugin again.
  absl::Duration registration_check = absl::Milliseconds(250);
  // The health stream re-sends the full device list this often; the kubelet marks a device
  // Unknown when it has not heard of it for 30 s.
  absl::Duration health_interval = absl::Seconds(10);
};

class KubeletPlugin {
 public:
  // Starts both servers. Fails (with the path) when a directory or socket cannot be made.
  static absl::StatusOr<std::unique_ptr<KubeletPlugin>> Start(PluginOptions opts,
                                                              prepare::ClaimService* service);
  ~KubeletPlugin();  // Stop()

  // Stops the registration server first (the kubelet deregisters), then the service; removes
  // both sockets. In-flight calls finish first (up to 5 s).
  void Stop();

  const std::string& dra_socket() const { return dra_socket_; }
  const std::string& registration_socket() const { return reg_socket_; }
  // NotifyRegistrationStatus(true) calls received: how often the kubelet registered us.
  int registrations() const { return registrations_.load(); }

  // Internal, for the registration and health services.
  void OnRegistrationStatus(bool registered, const std::string& error);
  // Waits up to `d`; false when the plugin is stopping.
  bool SleepUnlessStopping(absl::Duration d);

 private:
  explicit KubeletPlugin(PluginOptions opts);
  absl::Status StartRegistration();
  void Watch();

  PluginOptions opts_;
  std::string plugin_dir_, registry_dir_, dra_socket_, reg_socket_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Service> registration_service_;
  std::unique_ptr<grpc::Server> dra_server_;
  std::mutex mu_;  // guards reg_server_, reg_inode_
  std::unique_ptr<grpc::Server> reg_server_;
  unsigned long reg_inode_ = 0;
  std::atomic<int> registrations_{0};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace topodra::plugin
