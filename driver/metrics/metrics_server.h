// The daemon's HTTP endpoints for Prometheus and the kubelet's probes. --metrics-address serves
//   /metrics  the text exposition
//   /healthz  200 "ok" while the process and its main loop are alive, 503 otherwise
//   /readyz   200 "ok" when the node serves the kubelet and its slices are published, 503 with
//             what is missing otherwise
// --health-address serves the two probes alone (localhost by default: docs/user/security.md), so
// the kubelet's probes never compete with the network for the metrics port.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace topodra::metrics {

class HttpServer;

struct Probe {
  bool ok = true;
  std::string message;  // what is wrong, when not ok
};

struct Endpoints {
  std::function<std::string()> metrics;  // the body of /metrics
  std::function<Probe()> health;
  std::function<Probe()> ready;
};

// What one address serves.
enum class Serving {
  kMetricsAndProbes,  // --metrics-address: /metrics, and the probes for compatibility
  kProbes,            // --health-address: /healthz and /readyz only
};

// --metrics-address or --health-address (`what` names it in errors: "metrics address", "health
// address") as a listening address: ":9477" (every interface) is "9477", "127.0.0.1:9477" and
// "[::1]:9477" stay. nullopt for "" and "none" (nothing served). Errors quote the address.
absl::StatusOr<std::optional<std::string>> ListeningPortsFor(
    const std::string& address, const std::string& what = "metrics address");

class MetricsServer {
 public:
  // Listens on `listening_ports` (from ListeningPortsFor) and serves until destroyed, on one
  // event-loop thread (see http_server.h); /metrics renders on a worker thread of its own, so a
  // scrape never holds up a probe. Fails when the address cannot be bound, saying why (in use,
  // not this machine's, a privileged port).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listening_ports, Endpoints endpoints,
      Serving serving = Serving::kMetricsAndProbes);
  ~MetricsServer();  // a request being answered finishes first
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The ports listened on (the one a port 0 was given).
  std::vector<int> ports() const;
  // Connections closed to make room for newer ones (at the connection cap).
  uint64_t evictions() const;

 private:
  MetricsServer() = default;
  Endpoints endpoints_;
  std::unique_ptr<HttpServer> server_;  // last: stopped before the endpoints go
};

}  // namespace topodra::metrics
