// Text from outside the daemon on the CPU pinning path: cgroup paths found on the host (Classify),
// /proc/<pid>/cgroup and CPU lists the hook reads. Each parser returns a value or nothing and
// never crashes; what is accepted round-trips.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "driver/cgroup/hook_core.h"
#include "driver/cgroup/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view d(reinterpret_cast<const char*>(data), size);
  namespace hook = topodra::cgroup::hook;
  if (auto list = hook::ParseList(d)) {
    if (hook::ParseList(hook::FormatList(*list)) != list) std::abort();
  }
  for (bool v2 : {false, true}) {
    if (auto path = hook::CpusetCgroupOf(d, v2)) {
      if (path->empty() || path->front() == '/') std::abort();
      (void)hook::Chain(*path);
    }
  }
  if (auto node = topodra::cgroup::Classify(d)) {
    if (topodra::cgroup::Classify(node->path) != node) std::abort();
  }
  return 0;
}
