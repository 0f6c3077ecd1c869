// The kubelet's PodResources API v1 (only List) for tests: serves v1.PodResourcesLister on a Unix
// socket, as a real gRPC server of our proto, answering with the entries last Set. Independent of
// driver/ code, so the daemon's client is tested against something it did not write itself.
//
// Differences from the kubelet, chosen for tests: only device-plugin devices are reported (no
// CPU ids, memory or DRA claims, no NUMA topology), only pods with entries are listed, there is
// no rate limit, and List can be made to fail or stall on demand.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace topodra::testing {

class PodResourcesSimulator {
 public:
  // Devices of one resource assigned to one container.
  struct Entry {
    std::string pod_namespace, pod_name, container, resource;
    std::vector<std::string> device_ids;
  };

  // Like a kubelet start: creates the parent directory, removes a stale socket at the path (any
  // other kind of file there is an error) and serves on it.
  static absl::StatusOr<std::unique_ptr<PodResourcesSimulator>> Start(std::string socket_path);
  ~PodResourcesSimulator();  // Stop()
  PodResourcesSimulator(const PodResourcesSimulator&) = delete;
  PodResourcesSimulator& operator=(const PodResourcesSimulator&) = delete;

  // What List answers from now on. Entries are grouped as the kubelet does: one PodResources per
  // (namespace, pod), one ContainerResources per container of it, one ContainerDevices per
  // resource of that container (device IDs of repeated entries appended in order); each level in
  // the order of first appearance.
  void Set(std::vector<Entry> entries);
  // List fails with `status` (its code and message go on the wire) until FailWith(OkStatus()).
  void FailWith(absl::Status status);
  // List waits this long before answering (until Stop at most), to play a kubelet that hangs.
  void StallListBy(absl::Duration delay);
  // List calls received, failed and stalled ones included.
  int list_calls() const;
  const std::string& socket_path() const;

  // Like a kubelet stop: ends the server (cancelling calls in flight) and deletes the socket if it
  // is still the one this simulator made. Idempotent.
  void Stop();

 private:
  class Impl;
  explicit PodResourcesSimulator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace topodra::testing
