// The kubelet's DRA health client (addendum §1.3-1.4): which DRAResourceHealth version it opens
// for a plugin (a 1.37 kubelet reads supported_versions, 1.34-1.36 always open v1alpha1), and its
// per-device health cache: each message merges per device (stamped with the receive time), a
// device unheard of for its timeout (health_check_timeout_seconds, else 30 s) reads Unknown, and
// the end of the stream clears the cache.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace topodra::testing {

enum class HealthKubelet {
  k137,     // pickHealthService over supported_versions: v1 when listed, else v1alpha1, else none
  k134_136  // v1alpha1 whatever the plugin lists
};

inline constexpr char kHealthV1[] = "v1.DRAResourceHealth";
inline constexpr char kHealthV1alpha1[] = "v1alpha1.DRAResourceHealth";

// The health service such a kubelet opens, or "" for none.
std::string PickHealthService(const std::vector<std::string>& supported, HealthKubelet kubelet);

struct DeviceHealthView {
  std::string health;  // "Healthy", "Unhealthy" or "Unknown" (as the pod status shows it)
  std::string message;
  int64_t timeout_seconds = 30;
  absl::Time received;  // the kubelet's receive time, not the plugin's last_updated_time
  bool operator==(const DeviceHealthView&) const = default;
};
// "<pool>/<device>" -> its state.
using HealthCache = std::map<std::string, DeviceHealthView>;

class HealthWatcher {
 public:
  // Opens NodeWatchResources of `service` (kHealthV1 or kHealthV1alpha1) on `socket` and reads
  // it on a thread of its own. Fails for another service name.
  static absl::StatusOr<std::unique_ptr<HealthWatcher>> Start(const std::string& socket,
                                                              const std::string& service);
  ~HealthWatcher();  // cancels the stream

  // The cache as the kubelet would read it at `now` (leases expired -> Unknown).
  HealthCache Cache(absl::Time now = absl::Now()) const;
  // Waits until `done(cache)` holds after a message (checked at once, then after each
  // message). DeadlineExceeded naming the last cache otherwise; the stream's end is an error.
  absl::StatusOr<HealthCache> WaitFor(const std::function<bool(const HealthCache&)>& done,
                                      absl::Duration timeout);
  // Waits until `n` messages have come; the cache then.
  absl::StatusOr<HealthCache> WaitForMessages(int n, absl::Duration timeout);
  int messages() const;
  // Set once the stream ended: its status ("OK" or "<CODE>: <message>").
  std::string ended() const;

  class Impl;

 private:
  explicit HealthWatcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace topodra::testing
