#include "driver/metrics/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <sstream>
#include <utility>

namespace topodra::metrics {
namespace {

const char* Result(bool ok) { return ok ? "ok" : "error"; }

// From a replayed prepare (tens of microseconds) to a slow API server (seconds).
prometheus::Histogram::BucketBoundaries DurationBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

}  // namespace

struct Metrics::Families {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Counter>& prepare_total =
      prometheus::BuildCounter()
          .Name("topodra_prepare_total")
          .Help(
              "DRA claims the kubelet asked this node to prepare (NodePrepareResources), by "
              "driver and result (ok or error)")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& unprepare_total =
      prometheus::BuildCounter()
          .Name("topodra_unprepare_total")
          .Help(
              "DRA claims the kubelet asked this node to unprepare (NodeUnprepareResources), "
              "by driver and result (ok or error)")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& prepare_seconds =
      prometheus::BuildHistogram()
          .Name("topodra_prepare_duration_seconds")
          .Help(
              "Time to prepare one DRA claim (claim GET, allocation, CDI spec, journal), by "
              "driver and result")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& unprepare_seconds =
      prometheus::BuildHistogram()
          .Name("topodra_unprepare_duration_seconds")
          .Help("Time to unprepare one DRA claim (CDI spec removal, journal), by driver and result")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& cpus_allocated =
      prometheus::BuildGauge()
          .Name("topodra_cpus_allocated")
          .Help("CPUs held exclusively by DRA claims and device-plugin allocations")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& cpus_available =
      prometheus::BuildGauge()
          .Name("topodra_cpus_available")
          .Help(
              "Online CPUs a claim can still get exclusively: not in --reserved-cpus and not held "
              "by a DRA claim or device-plugin allocation (with --enforce=cgroup a claim that "
              "would empty the shared pool is refused)")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& cpus_shared =
      prometheus::BuildGauge()
          .Name("topodra_cpus_shared")
          .Help(
              "CPUs of the shared pool, where containers without a CPU claim run: online CPUs "
              "not held by a DRA claim or device-plugin allocation; --reserved-cpus are part of "
              "it unless --strict-cpu-reservation")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& cpus_reserved =
      prometheus::BuildGauge()
          .Name("topodra_cpus_reserved")
          .Help(
              "CPUs reserved for the system (--reserved-cpus): never handed out exclusively, in "
              "the shared pool unless --strict-cpu-reservation")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& gpus_allocated =
      prometheus::BuildGauge()
          .Name("topodra_gpus_allocated")
          .Help("GPUs held by DRA claims and device-plugin allocations")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& slice_publish_errors =
      prometheus::BuildCounter()
          .Name("topodra_slice_publish_errors_total")
          .Help(
              "Failed attempts to publish this node's ResourceSlices to the API server, by "
              "driver (each is retried with backoff)")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& dp_allocations =
      prometheus::BuildCounter()
          .Name("topodra_device_plugin_allocations_total")
          .Help(
              "Container allocations of the legacy device-plugin API (Allocate), by resource "
              "and result (ok or error)")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& build_info =
      prometheus::BuildGauge()
          .Name("topodra_build_info")
          .Help("Always 1; the version label is the running topodra's version")
          .Register(*registry);
};

Metrics::Metrics(const MetricsOptions& options) : f_(std::make_unique<Families>()) {
  f_->build_info.Add({{"version", options.version}}).Set(1);
  f_->cpus_allocated.Add({});
  f_->cpus_available.Add({});
  f_->cpus_shared.Add({});
  f_->cpus_reserved.Add({});
  f_->gpus_allocated.Add({});
  for (const std::string& driver : options.drivers) {
    for (bool ok : {true, false}) {
      const prometheus::Labels labels = {{"driver", driver}, {"result", Result(ok)}};
      f_->prepare_total.Add(labels);
      f_->unprepare_total.Add(labels);
      f_->prepare_seconds.Add(labels, DurationBuckets());
      f_->unprepare_seconds.Add(labels, DurationBuckets());
    }
  }
  for (const std::string& resource : options.resources) {
    for (bool ok : {true, false}) {
      f_->dp_allocations.Add({{"resource", resource}, {"result", Result(ok)}});
    }
  }
}

Metrics::~Metrics() = default;

void Metrics::OnPrepare(const std::string& driver, bool ok, double seconds) {
  const prometheus::Labels labels = {{"driver", driver}, {"result", Result(ok)}};
  f_->prepare_total.Add(labels).Increment();
  f_->prepare_seconds.Add(labels, DurationBuckets()).Observe(seconds);
}

void Metrics::OnUnprepare(const std::string& driver, bool ok, double seconds) {
  const prometheus::Labels labels = {{"driver", driver}, {"result", Result(ok)}};
  f_->unprepare_total.Add(labels).Increment();
  f_->unprepare_seconds.Add(labels, DurationBuckets()).Observe(seconds);
}

void Metrics::OnDevicePluginAllocate(const std::string& resource, bool ok) {
  f_->dp_allocations.Add({{"resource", resource}, {"result", Result(ok)}}).Increment();
}

void Metrics::SetSnapshotSource(std::function<NodeSnapshot()> source) {
  std::lock_guard<std::mutex> lock(render_mu_);
  source_ = std::move(source);
}

std::string Metrics::Render() {
  std::lock_guard<std::mutex> lock(render_mu_);
  if (source_) {
    const NodeSnapshot s = source_();
    f_->cpus_allocated.Add({}).Set(s.cpus_allocated);
    f_->cpus_available.Add({}).Set(s.cpus_available);
    f_->cpus_shared.Add({}).Set(s.cpus_shared);
    f_->cpus_reserved.Add({}).Set(s.cpus_reserved);
    f_->gpus_allocated.Add({}).Set(s.gpus_allocated);
    for (const auto& [driver, total] : s.slice_publish_errors) {
      prometheus::Counter& c = f_->slice_publish_errors.Add({{"driver", driver}});
      int64_t& seen = publish_errors_seen_[driver];
      // A counter only grows: a total that went down (cannot happen) is not subtracted.
      if (total > seen) {
        c.Increment(static_cast<double>(total - seen));
        seen = total;
      }
    }
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, f_->registry->Collect());
  return out.str();
}

}  // namespace topodra::metrics
