// JSON form of ResourceSlices (spec §1.2-1.6; mixins per KEP-5234 §1.10). Parsing is strict for
// the fields topodra models and keeps the rest verbatim; errors name the JSON path.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "driver/publish/slice_model.h"
#include "nlohmann/json.hpp"

namespace topodra::publish {

inline constexpr char kResourceApiV1[] = "resource.k8s.io/v1";

nlohmann::json AttributeToJson(const AttributeValue& v);
// A device's attributes as the JSON object SliceToJson prints.
nlohmann::json AttributesToJson(const Attributes& attributes);
absl::StatusOr<AttributeValue> AttributeFromJson(const nlohmann::json& j);
nlohmann::json CapacityToJson(const Capacity& c);
absl::StatusOr<Capacity> CapacityFromJson(const nlohmann::json& j);

nlohmann::json SliceToJson(const Slice& s, const std::string& api_version = kResourceApiV1);
// DumpJson(SliceToJson(s, api_version)).size(), counted without building or printing the JSON:
// deciding between the mixin and the flat form compares the two sizes of every slice.
size_t SliceJsonSize(const Slice& s, const std::string& api_version = kResourceApiV1);
// The same count for one attribute value and one capacity as SliceToJson prints them.
size_t AttributeJsonSize(const AttributeValue& v);
size_t CapacityJsonSize(const Capacity& c);
absl::StatusOr<Slice> SliceFromJson(const nlohmann::json& j);

// {"apiVersion":"v1","kind":"List","items":[...]}
nlohmann::json SliceListToJson(const std::vector<Slice>& slices,
                               const std::string& api_version = kResourceApiV1);
// One ResourceSlice, or a List / ResourceSliceList of them.
absl::StatusOr<std::vector<Slice>> SlicesFromDocument(const nlohmann::json& doc);

}  // namespace topodra::publish
