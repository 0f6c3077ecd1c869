// The daemon's HTTP endpoints for Prometheus and the kubelet's probes, on one port:
//   /metrics  the text exposition
//   /healthz  200 "ok" while the process and its main loop are alive, 503 otherwise
//   /readyz   200 "ok" when the node serves the kubelet and its slices are published, 503 with
//             what is missing otherwise
// Served by civetweb's CivetServer (what prometheus-cpp's Exposer runs on): prometheus-cpp 1.0's
// Exposer only serves collectables and cannot take other handlers.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

class CivetServer;
class CivetHandler;

namespace topodra::metrics {

struct Probe {
  bool ok = true;
  std::string message;  // what is wrong, when not ok
};

struct Endpoints {
  std::function<std::string()> metrics;  // the body of /metrics
  std::function<Probe()> health;
  std::function<Probe()> ready;
};

// --metrics-address as civetweb's listening_ports: ":9477" (every interface), "127.0.0.1:9477",
// "[::1]:9477". nullopt for "" and "none" (no endpoints). Errors quote the address.
absl::StatusOr<std::optional<std::string>> ListeningPortsFor(const std::string& address);

class MetricsServer {
 public:
  // Listens on `listening_ports` (from ListeningPortsFor) and serves until destroyed. Fails when
  // the address cannot be bound, saying why (in use, not this machine's, a privileged port).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listening_ports,
                                                              Endpoints endpoints);
  ~MetricsServer();  // in-flight requests finish first; returns in milliseconds, not seconds
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The ports listened on (the one a port 0 was given).
  std::vector<int> ports() const;

 private:
  MetricsServer() = default;
  Endpoints endpoints_;
  // Where to connect to wake civetweb's accept loop when stopping (loopback for a wildcard).
  std::string wake_host_;  // "127.0.0.1", "::1", ...
  std::vector<int> wake_ports_;
  std::vector<std::unique_ptr<CivetHandler>> handlers_;
  std::unique_ptr<CivetServer> server_;  // last: stopped before the handlers go
};

}  // namespace topodra::metrics
