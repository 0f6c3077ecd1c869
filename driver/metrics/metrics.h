// The daemon's Prometheus metrics: what the services report through metrics::Observer (claims
// prepared and unprepared, device-plugin allocations), plus what is read from the node at each
// scrape (CPUs and GPUs held, slice publishing errors). prometheus-cpp stays behind this header.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver/metrics/observer.h"

namespace topodra::metrics {

// The node as a scrape sees it.
struct NodeSnapshot {
  int cpus_allocated = 0;  // held by DRA claims and device-plugin allocations
  int cpus_available = 0;  // online, not reserved and not allocated: what a claim can still get
  int cpus_shared = 0;     // the shared pool: online, not allocated (not reserved when strict)
  int cpus_reserved = 0;   // --reserved-cpus
  int gpus_allocated = 0;
  // DRA driver -> failed publishing attempts since start (publish::PublisherStatus::errors).
  std::map<std::string, int64_t> slice_publish_errors;
};

struct MetricsOptions {
  std::string version;  // topodra_build_info{version}
  // Label values whose series exist (at 0) from the start, so rate() and absent() work before
  // the first claim: the DRA drivers and the device-plugin resources the daemon serves.
  std::vector<std::string> drivers;
  std::vector<std::string> resources;
};

class Metrics : public Observer {
 public:
  explicit Metrics(const MetricsOptions& options);
  ~Metrics() override;
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Thread-safe: called from the gRPC threads of the kubelet services.
  void OnPrepare(const std::string& driver, bool ok, double seconds) override;
  void OnUnprepare(const std::string& driver, bool ok, double seconds) override;
  void OnDevicePluginAllocate(const std::string& resource, bool ok) override;

  // Called at every scrape for the gauges and the publishing errors. Set before serving.
  void SetSnapshotSource(std::function<NodeSnapshot()> source);

  // Takes a snapshot and returns every metric in the Prometheus text format (version 0.0.4).
  // Thread-safe.
  std::string Render();

 private:
  struct Families;
  std::unique_ptr<Families> f_;
  std::mutex render_mu_;
  std::function<NodeSnapshot()> source_;  // guarded by render_mu_
  // The publishing error totals already added to the counter, per driver.
  std::map<std::string, int64_t> publish_errors_seen_;  // guarded by render_mu_
};

// The content type of Render()'s text.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace topodra::metrics
