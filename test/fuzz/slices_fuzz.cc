// Whatever an operator feeds `topodra flatten` (JSON or YAML): parsing, ResourceSlice decoding and
// flattening must never crash, and whatever flattens must survive a JSON round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cmd/yaml_json.h"
#include "common/json_text.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<nlohmann::json> doc = topodra::cmd::ParseJsonOrYaml(text);
  if (!doc.ok()) return 0;
  absl::StatusOr<std::vector<topodra::publish::Slice>> slices =
      topodra::publish::SlicesFromDocument(*doc);
  if (!slices.ok()) return 0;
  absl::StatusOr<std::vector<topodra::publish::Slice>> flat = topodra::publish::Flatten(*slices);
  if (!flat.ok()) return 0;
  const nlohmann::json out = topodra::publish::SliceListToJson(*flat);
  absl::StatusOr<std::vector<topodra::publish::Slice>> again =
      topodra::publish::SlicesFromDocument(nlohmann::json::parse(topodra::DumpJson(out)));
  if (!again.ok() || *again != *flat) std::abort();
  // Also exercise the YAML writer on what we produced.
  (void)topodra::cmd::ToYaml(out);
  return 0;
}
