// Arbitrary contents of the sysfs files the health checks read (current/max_link_speed,
// current/max_link_width, aer_dev_fatal): each parser returns a value or an error, never crashes,
// and what it accepts holds together; the verdict of any parsed facts has a bounded message.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "driver/health/health.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  topodra::health::GpuFacts f;
  f.present = true;
  f.driver = "fuzz";
  absl::StatusOr<double> speed = topodra::health::ParseLinkSpeed(text);
  if (speed.ok() && (!std::isfinite(*speed) || *speed < 0)) std::abort();
  absl::StatusOr<int> width = topodra::health::ParseLinkWidth(text);
  if (width.ok() && (*width < 0 || *width > 64)) std::abort();
  if (speed.ok() && width.ok()) f.link = topodra::health::PciLink{*speed, *width, 16, 16};
  absl::StatusOr<topodra::health::AerFatal> aer = topodra::health::ParseAerFatal(text);
  if (aer.ok()) {
    if (aer->total < 0) std::abort();
    for (const auto& [name, n] : aer->nonzero) {
      if (name.empty() || n <= 0) std::abort();
    }
    f.aer_fatal = *aer;
  }
  if (!speed.ok()) f.unreadable.push_back(std::string(speed.status().message()));
  const topodra::health::Verdict v = topodra::health::AssessGpu("0000:00:00.0", f);
  if (v.message.size() > topodra::health::kMaxMessage) std::abort();
  return 0;
}
