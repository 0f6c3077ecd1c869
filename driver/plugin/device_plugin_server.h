// One extended resource towards the kubelet's device manager: serves v1beta1.DevicePlugin on
// <kubelet-root>/device-plugins/<name>.sock, then registers on kubelet.sock, and does both again
// with a fresh socket whenever the kubelet restarts (it deletes our socket and re-creates
// kubelet.sock). The work is done by deviceplugin::DevicePluginService.
//
// Also the reclaimer: device-plugin allocations are released when the kubelet's PodResources API
// no longer reports their devices on any container.
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
#include "driver/deviceplugin/device_plugin_service.h"
#include "driver/plugin/pod_resources.h"
#include "driver/plugin/socket_server.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace topodra::plugin {

struct DevicePluginOptions {
  std::string kubelet_root = "/var/lib/kubelet";
  // How often the sockets are checked for a kubelet restart.
  absl::Duration check = absl::Milliseconds(250);
  // A ListAndWatch stream re-checks for shutdown at least this often.
  absl::Duration stream_poll = absl::Seconds(1);
};

// "topodra.io/gpu" -> "topodra.io-gpu.sock".
std::string DevicePluginSocketName(const std::string& resource);

class DevicePluginServer {
 public:
  // Serves the socket; registration happens on the watcher thread (the kubelet may not be up).
  static absl::StatusOr<std::unique_ptr<DevicePluginServer>> Start(
      DevicePluginOptions opts, deviceplugin::DevicePluginService* service);
  ~DevicePluginServer();  // Stop()
  // Ends the streams, stops the server and removes our socket.
  void Stop();

  const std::string& socket() const { return socket_; }
  int registrations() const { return registrations_.load(); }
  bool registered() const { return registered_.load(); }
  // "" while our socket is at its path; otherwise what is wrong, for /readyz.
  std::string SocketProblem() const;

  // Internal, for the service handlers: true when streams of `epoch` must end.
  bool StreamsMustEnd(uint64_t epoch) const;
  uint64_t epoch() const { return epoch_.load(); }

 private:
  DevicePluginServer(DevicePluginOptions opts, deviceplugin::DevicePluginService* service);
  absl::Status Serve();  // (re)starts the server on a fresh socket
  absl::Status Register();
  void Watch();

  DevicePluginOptions opts_;
  deviceplugin::DevicePluginService* service_;
  std::string dir_, socket_, kubelet_socket_;
  std::unique_ptr<grpc::Service> grpc_service_;
  std::unique_ptr<grpc::Server> server_;        // watcher thread (and Stop) only
  std::atomic<unsigned long> socket_inode_{0};  // socket_held_.id(), read by SocketProblem()
  HeldSocket socket_held_;                      // watcher thread (and Stop) only
  unsigned long kubelet_inode_ = 0;             // watcher thread only: kubelet_held_.id()
  HeldSocket kubelet_held_;                     // the kubelet socket we registered on
  std::string condition_;  // watcher thread only: why the socket is not served, or ""
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> registrations_{0};
  std::atomic<bool> registered_{false};
  std::atomic<bool> stopping_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::thread watcher_;
};

// Every `interval`, lists the kubelet's pod resources and lets each service release what no
// container uses any more (see DevicePluginService::Reclaim; the grace is one interval, so an
// allocation is released after two listings without it). When the kubelet cannot be asked,
// nothing is released.
class DevicePluginReclaimer {
 public:
  DevicePluginReclaimer(std::unique_ptr<PodResourcesLister> lister,
                        std::vector<deviceplugin::DevicePluginService*> services,
                        absl::Duration interval);
  ~DevicePluginReclaimer();  // Stop()
  void Stop();
  // One pass now (tests; also what the thread runs).
  void RunOnce();

 private:
  std::unique_ptr<PodResourcesLister> lister_;
  std::vector<deviceplugin::DevicePluginService*> services_;
  const absl::Duration interval_;
  bool failing_ = false;  // thread only: log a failure once per streak
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace topodra::plugin
