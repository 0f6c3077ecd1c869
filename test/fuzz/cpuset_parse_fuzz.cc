#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "topology/cpuset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<topodra::CpuSet> set = topodra::CpuSet::Parse(input);
  if (!set.ok()) return 0;
  const std::string text = set->ToString();
  absl::StatusOr<topodra::CpuSet> reparsed = topodra::CpuSet::Parse(text);
  if (!reparsed.ok() || *reparsed != *set || reparsed->ToString() != text) std::abort();
  return 0;
}
