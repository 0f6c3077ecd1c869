// What the node's services report as they work, for whoever counts it (the daemon's Prometheus
// metrics, metrics.h). Every hook does nothing by default, and a service without an observer
// reports nothing, so the services and their tests do not depend on any metrics library: this
// header is all they include of driver/metrics, and they link nothing of it.
#pragma once

#include <string>

namespace topodra::metrics {

class Observer {
 public:
  virtual ~Observer() = default;
  // One DRA claim prepared or unprepared by `driver`; `seconds` is the time it took.
  virtual void OnPrepare(const std::string& /*driver*/, bool /*ok*/, double /*seconds*/) {}
  virtual void OnUnprepare(const std::string& /*driver*/, bool /*ok*/, double /*seconds*/) {}
  // One container's devices of the device-plugin `resource` allocated (or refused).
  virtual void OnDevicePluginAllocate(const std::string& /*resource*/, bool /*ok*/) {}
};

}  // namespace topodra::metrics
