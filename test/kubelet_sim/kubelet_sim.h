// A kubelet simulator for integration tests and the demo: the plugin watcher of a Kubernetes 1.34+
// kubelet (inotify on <root>/plugins_registry, GetInfo, version pick, NotifyRegistrationStatus)
// and its DRA client (NodePrepareResources / NodeUnprepareResources with the kubelet's response
// checks), as a real gRPC client of our protos. Behaviour follows shared/spec/kubelet-grpc.md
// §1–§4; the differences are a faster reconcile loop (100 ms instead of 1 s) and a faster retry
// backoff (50 ms doubling to 2 s instead of 500 ms to 2 min), so tests stay quick.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace topodra::testing {

struct KubeletSimOptions {
  std::string root_dir;  // kubelet root; watches <root>/plugins_registry
  // Versions this kubelet knows, in no particular order; a 1.34+ kubelet picks the FIRST entry of
  // the plugin's supported_versions list that it knows. Tests can drop "v1.DRAPlugin" to
  // simulate a kubelet that only speaks v1beta1.
  std::vector<std::string> known_versions = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
  bool reject_registration = false;  // answer NotifyRegistrationStatus(false, "...") (tests)
};

struct Registration {
  std::string driver, endpoint, version /* chosen, e.g. "v1.DRAPlugin" */, socket_path;
  std::vector<std::string> supported_versions;
  int generation = 0;  // increments each time this driver (re)registers
};

struct PrepareClaim {
  std::string ns, uid, name;
};

struct PreparedDevice {
  std::vector<std::string> request_names;
  std::string pool, device;
  std::vector<std::string> cdi_device_ids;
  std::optional<std::string> share_id;
};

struct ClaimResult {
  std::vector<PreparedDevice> devices;
  std::string error;
};

class KubeletSimulator {
 public:
  static absl::StatusOr<std::unique_ptr<KubeletSimulator>> Start(KubeletSimOptions opts);
  ~KubeletSimulator();  // stops the watcher thread, closes channels
  KubeletSimulator(const KubeletSimulator&) = delete;
  KubeletSimulator& operator=(const KubeletSimulator&) = delete;

  // Blocks until `driver` is registered with generation >= min_generation, or timeout.
  absl::StatusOr<Registration> WaitForRegistration(const std::string& driver, int min_generation,
                                                   absl::Duration timeout);
  std::optional<Registration> Find(const std::string& driver) const;
  bool WaitForDeregistration(const std::string& driver, absl::Duration timeout);

  // NodePrepareResources / NodeUnprepareResources through the chosen version's service, with
  // the kubelet's 45 s deadline. A gRPC error is returned as a Status carrying the gRPC code and
  // message. The kubelet's own response checks (§4.3) are applied and reported as errors:
  // missing claim UIDs ("skipped N ResourceClaims"), unknown UIDs in the response.
  absl::StatusOr<std::map<std::string, ClaimResult>> Prepare(
      const std::string& driver, const std::vector<PrepareClaim>& claims);
  absl::StatusOr<std::map<std::string, std::string>> Unprepare(
      const std::string& driver, const std::vector<PrepareClaim>& claims);  // uid -> error

  // Every GetInfo/Notify/Prepare/Unprepare call made, one line each, for debugging failures.
  // Registrations and deregistrations are logged too ("Registered ...", "Deregistered ...").
  std::vector<std::string> Log() const;

 private:
  class Impl;
  explicit KubeletSimulator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace topodra::testing
