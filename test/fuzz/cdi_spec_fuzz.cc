// cdi::FromJson on arbitrary bytes: any input is a status, never a crash, a hang or a leak. A
// spec that parses and validates must survive ToJson -> FromJson unchanged, or what we write
// would not be what we meant.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cdi/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<topodra::cdi::Spec> spec = topodra::cdi::FromJson(text);
  if (!spec.ok()) {
    if (spec.status().message().empty()) std::abort();
    return 0;
  }
  // Each of these must be total on any parsed spec.
  const std::string minimum = topodra::cdi::MinimumVersion(*spec);
  if (!topodra::cdi::IsKnownVersion(minimum)) std::abort();
  const absl::Status valid = topodra::cdi::Validate(*spec);
  if (!valid.ok()) {
    if (valid.message().empty()) std::abort();
    return 0;
  }
  for (const topodra::cdi::Device& device : spec->devices) {
    if (!topodra::cdi::QualifiedName(spec->kind, device.name).ok()) std::abort();
  }
  for (int indent : {-1, 2}) {
    absl::StatusOr<topodra::cdi::Spec> back =
        topodra::cdi::FromJson(topodra::cdi::ToJsonText(*spec, indent));
    if (!back.ok() || !(*back == *spec)) std::abort();
    if (!topodra::cdi::Validate(*back).ok()) std::abort();
  }
  // Lowering the version to the minimum keeps a valid spec valid.
  topodra::cdi::Spec lowered = *spec;
  lowered.cdi_version = minimum;
  if (!topodra::cdi::Validate(lowered).ok()) std::abort();
  return 0;
}
