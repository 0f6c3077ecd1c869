// The device-plugin side of a kubelet (the device manager, shared/spec/kubelet-grpc.md §1.7, §5)
// for integration tests: serves v1beta1.Registration on <dir>/kubelet.sock, connects back to each
// registered plugin (GetDevicePluginOptions, then one ListAndWatch stream), and calls
// GetPreferredAllocation / Allocate / PreStartContainer on demand, as a real gRPC client of our
// protos.
//
// Differences from the kubelet, chosen for tests:
// * Register validates the request and returns at once; the dial (10 s, like the kubelet) and
//   GetDevicePluginOptions run on a separate thread afterwards. A failure there cannot fail the
//   Register RPC; it marks the resource's endpoint gone and is reported by WaitForResource.
// * Calls the kubelet makes without a deadline (GetDevicePluginOptions, GetPreferredAllocation,
//   Allocate) get 30 s, so a hanging plugin fails a test instead of hanging it.
// * A ListAndWatch stream that ends is not retried (like the kubelet) and there is no 5 min grace
//   period: the resource stays listed with its last device list and endpoint_gone = true.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace topodra::testing {

struct DevicePluginSimOptions {
  std::string device_plugins_dir;  // e.g. <kubelet-root>/device-plugins; created if missing
};

struct PluginDevice {
  std::string id;
  std::string health;  // as sent: "Healthy", "Unhealthy" or anything else
  std::vector<int64_t> numa_nodes;
};

struct RegisteredResource {
  std::string resource_name, endpoint /* socket file name */, version;
  // From GetDevicePluginOptions (what the kubelet uses), not from RegisterRequest.options.
  bool preferred_allocation_available = false, pre_start_required = false;
  std::vector<PluginDevice> devices;  // the latest ListAndWatch list (kept when the stream ends)
  int list_updates = 0;               // ListAndWatch messages received, over all registrations
  absl::Time last_update;             // when the latest message arrived (InfinitePast: none)
  int registrations = 0;              // how often Register was accepted for this resource
  // Options read and ListAndWatch open for the latest registration.
  bool connected = false;
  // The latest registration's connect-back failed or its ListAndWatch stream ended (or the
  // kubelet restarted); `error` says why. Cleared by the next Register.
  bool endpoint_gone = false;
  std::string error;
};

class DevicePluginSimulator {
 public:
  // Like a kubelet start: creates the directory, deletes the sockets in it (a stale kubelet.sock
  // and plugin sockets; other files stay) and serves Registration on <dir>/kubelet.sock.
  static absl::StatusOr<std::unique_ptr<DevicePluginSimulator>> Start(DevicePluginSimOptions opts);
  ~DevicePluginSimulator();  // stops the server, cancels the streams, joins the threads
  DevicePluginSimulator(const DevicePluginSimulator&) = delete;
  DevicePluginSimulator& operator=(const DevicePluginSimulator&) = delete;

  // Like a kubelet restart: stop the Registration server, end every ListAndWatch stream (the
  // resources stay, with endpoint_gone = true and their last list, as from the kubelet's
  // checkpoint), delete every socket in the directory (not other files), create kubelet.sock
  // again and serve Registration again. Registration counts carry over.
  absl::Status RestartKubelet();

  // Blocks until `resource` has registrations >= min_registrations and the connect-back of the
  // latest registration is finished. Returns the resource (possibly with endpoint_gone, if its
  // stream already ended); an error if the connect-back failed (dial or GetDevicePluginOptions)
  // or on timeout.
  absl::StatusOr<RegisteredResource> WaitForResource(const std::string& resource,
                                                     int min_registrations, absl::Duration timeout);
  // Waits until at least one ListAndWatch message arrived for `resource` and its device list
  // satisfies pred (called without locks held); returns the list.
  absl::StatusOr<std::vector<PluginDevice>> WaitForDevices(
      const std::string& resource,
      const std::function<bool(const std::vector<PluginDevice>&)>& pred, absl::Duration timeout);
  // Waits until the latest registration of `resource` has endpoint_gone.
  bool WaitForEndpointGone(const std::string& resource, absl::Duration timeout);
  std::optional<RegisteredResource> Find(const std::string& resource) const;

  // The calls the kubelet makes during pod admission / container start, to the latest
  // registration's endpoint. FailedPrecondition when the resource is not registered, not
  // connected (endpoint gone), or did not advertise the option (GetPreferredAllocation needs
  // get_preferred_allocation_available, PreStartContainer needs pre_start_required). A gRPC error
  // is returned as a Status with the gRPC code and message.
  // GetPreferredAllocation sends one container request and returns entry 0 of the response
  // (an empty response is an error here; the kubelet would silently ignore the preference).
  absl::StatusOr<std::vector<std::string>> GetPreferredAllocation(
      const std::string& resource, const std::vector<std::string>& available,
      const std::vector<std::string>& must_include, int size);
  struct ContainerAllocation {
    std::map<std::string, std::string> envs;
    std::vector<std::string> device_node_host_paths;  // ContainerAllocateResponse.devices
    std::vector<std::string> cdi_devices;             // CDIDevice.name
    std::vector<std::string> mounts_host_paths;
    std::map<std::string, std::string> annotations;
  };
  // One ContainerAllocateRequest per entry (the kubelet sends exactly one); the response must
  // have exactly as many container responses.
  absl::StatusOr<std::vector<ContainerAllocation>> Allocate(
      const std::string& resource,
      const std::vector<std::vector<std::string>>& device_ids_per_container);
  // With the kubelet's 30 s deadline.
  absl::Status PreStartContainer(const std::string& resource,
                                 const std::vector<std::string>& device_ids);

  // One line per Register / GetDevicePluginOptions / ListAndWatch message or end / call made /
  // restart, for debugging failures.
  std::vector<std::string> Log() const;

 private:
  class Impl;
  explicit DevicePluginSimulator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace topodra::testing
