// One DRA driver towards the kubelet: the DRAPlugin service (v1 and v1beta1) on
// <kubelet-root>/plugins/<driver>/dra.sock and the registration service on
// <kubelet-root>/plugins_registry/<driver>-reg.sock, in that order (the kubelet may call the
// service as soon as it sees the registration socket). The only file that sees protobuf types
// of the DRA API; the work is done by prepare::ClaimService. The same socket serves the device
// health streams, v1 and v1alpha1 of DRAResourceHealth from one implementation: a 1.37 kubelet
// picks v1 from the registration's supported_versions, 1.34-1.36 always open v1alpha1.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "driver/health/board.h"
#include "driver/plugin/socket_server.h"
#include "driver/prepare/claim_service.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace topodra::plugin {

inline constexpr char kDraV1[] = "v1.DRAPlugin";
inline constexpr char kDraV1beta1[] = "v1beta1.DRAPlugin";
inline constexpr char kDraHealthV1[] = "v1.DRAResourceHealth";
inline constexpr char kDraHealth[] = "v1alpha1.DRAResourceHealth";

struct PluginOptions {
  std::string driver;
  std::string kubelet_root = "/var/lib/kubelet";
  // How often both sockets are checked. A deleted one is created again at once (the kubelet
  // registers the plugin again, or reconnects to the service); something else put in its place is
  // left alone and reported by SocketProblems() until it is gone.
  absl::Duration registration_check = absl::Milliseconds(250);
  // --dra-health: serve DRAResourceHealth (v1 and v1alpha1) and advertise both. Off: neither
  // is advertised and the kubelet's calls get UNIMPLEMENTED.
  bool health = true;
  // The devices' health (not owned; outlives the plugin). Null: every device the claim service
  // serves is reported Healthy.
  health::Board* health_board = nullptr;
  // The health stream sends the full device list on open, at once when the board changes, and
  // again this often; each device carries health_timeout as health_check_timeout_seconds, after
  // which the kubelet marks a device it has not heard of Unknown. The interval stays at most a
  // third of the timeout, as the kubelet's own helper expects.
  absl::Duration health_interval = absl::Seconds(10);
  absl::Duration health_timeout = absl::Seconds(30);
  // Optional, called before each check of the sockets: the instance lock in the plugin directory
  // taken again if that directory was deleted (InstanceLock::Renew). While it fails, the sockets
  // are left to whoever holds the lock, and SocketProblems() says so.
  std::function<absl::Status()> keep_lock;
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
  // One line per socket that is not ours at its path now (missing, replaced), for /readyz.
  std::vector<std::string> SocketProblems() const;
  // NotifyRegistrationStatus(true) calls received: how often the kubelet registered us.
  int registrations() const { return registrations_.load(); }

  // Internal, for the registration and health services.
  void OnRegistrationStatus(bool registered, const std::string& error);
  // Waits up to `d`; false when the plugin is stopping, when the DRA socket a stream of `epoch`
  // came in on is being replaced (its server waits for the stream to end), or once `cancelled`
  // (the stream's call) says true, within 100 ms.
  bool SleepUnlessStopping(absl::Duration d, uint64_t epoch,
                           const std::function<bool()>& cancelled);
  uint64_t stream_epoch() const;
  // Like SleepUnlessStopping, but also returns (true) as soon as the health board changed since
  // `*seen` (which it updates).
  bool WaitForHealth(absl::Duration d, uint64_t epoch, const std::function<bool()>& cancelled,
                     uint64_t* seen);
  uint64_t health_changes() const;
  void OnHealthChanged();
  const PluginOptions& options() const { return opts_; }
  // Health streams whose handler is running.
  int health_streams() const { return health_streams_.load(); }
  class StreamCount {
   public:
    explicit StreamCount(KubeletPlugin* p) : p_(p) { ++p_->health_streams_; }
    ~StreamCount() { --p_->health_streams_; }
    StreamCount(const StreamCount&) = delete;
    StreamCount& operator=(const StreamCount&) = delete;

   private:
    KubeletPlugin* p_;
  };

 private:
  explicit KubeletPlugin(PluginOptions opts);
  void Watch();
  bool KeepLock();    // false while keep_lock fails
  void EndStreams();  // before the DRA server is replaced

  PluginOptions opts_;
  std::string plugin_dir_, registry_dir_, dra_socket_, reg_socket_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Service> registration_service_;
  std::unique_ptr<ServedSocket> dra_server_, reg_server_;
  std::atomic<int> registrations_{0};
  std::atomic<int> health_streams_{0};
  mutable std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  uint64_t stream_epoch_ = 0;    // guarded by stop_mu_
  uint64_t health_changes_ = 0;  // guarded by stop_mu_
  // What the board's listener reaches: cleared at Stop, so a board that outlives the plugin
  // never calls into a destroyed one.
  struct HealthWake {
    std::mutex mu;
    KubeletPlugin* plugin = nullptr;
  };
  std::shared_ptr<HealthWake> wake_ = std::make_shared<HealthWake>();
  std::string lock_problem_;  // guarded by stop_mu_: why keep_lock failed, as last logged
  std::thread watcher_;
};

}  // namespace topodra::plugin
