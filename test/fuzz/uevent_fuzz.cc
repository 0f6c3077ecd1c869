// Arbitrary datagrams on the uevent socket (any process in the host's network namespace can send
// to it): the parser returns an event or nothing, never crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/uevent.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view d(reinterpret_cast<const char*>(data), size);
  std::optional<topodra::uevent::Uevent> e = topodra::uevent::Parse(d);
  if (e.has_value()) {
    if (e->action.empty() || e->devpath.empty()) std::abort();
    (void)topodra::uevent::AffectsDevices(*e);
  }
  return 0;
}
