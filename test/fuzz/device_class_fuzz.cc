// DeviceClass objects from the API server (JSON, any version, anything a server lets through)
// through MappingOf and the device plugins' decision: any input is a status or a decision, never
// a crash, a hang or a leak; a class that maps a plugin's resource is always in the decision.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/json_parse.h"
#include "driver/deviceclass/extended_resources.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using topodra::deviceclass::Conflicts;
  using topodra::deviceclass::Mapping;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<nlohmann::json> j = topodra::files::ParseJsonBounded(text, 32);
  if (!j.ok()) return 0;
  // A list body too: each item, as the informer hands them over.
  std::vector<nlohmann::json> objects = {*j};
  if (j->is_object() && j->contains("items") && (*j)["items"].is_array()) {
    for (const nlohmann::json& item : (*j)["items"]) objects.push_back(item);
  }
  std::vector<Mapping> mappings;
  for (const nlohmann::json& o : objects) {
    absl::StatusOr<std::optional<Mapping>> m = topodra::deviceclass::MappingOf(o);
    if (!m.ok()) {
      if (m.status().message().size() > 4096) std::abort();  // messages stay bounded
      continue;
    }
    if (!m->has_value()) continue;
    if ((*m)->device_class.empty() || (*m)->resource.empty()) std::abort();
    mappings.push_back(**m);
  }
  std::vector<std::string> resources = {"topodra.io/gpu", "topodra.io/cpu"};
  for (const Mapping& m : mappings) resources.push_back(m.resource);
  const auto conflicts = Conflicts(mappings, resources);
  for (const Mapping& m : mappings) {
    bool found = false;
    for (const auto& c : conflicts) found = found || c.resource == m.resource;
    if (!found) std::abort();
  }
  for (const auto& c : conflicts) (void)topodra::deviceclass::Describe(c);
  return 0;
}
