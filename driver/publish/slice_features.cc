#include "driver/publish/slice_features.h"

#include <algorithm>
#include <variant>

#include "absl/strings/str_cat.h"

namespace topodra::publish {
namespace {

using nlohmann::json;

// One 1.37 entry in the 1.36 shape; null when it has no 1.36 form (overhead only).
json ToV136(const json& entry) {
  const json* mapping =
      entry.is_object() && entry.contains("mapping") ? &entry["mapping"] : nullptr;
  if (mapping == nullptr || !mapping->is_object()) return nullptr;
  json out = json::object();
  if (mapping->contains("capacityKey")) {
    out["capacityKey"] = (*mapping)["capacityKey"];
    if (mapping->contains("capacityMultiplier")) {
      out["allocationMultiplier"] = (*mapping)["capacityMultiplier"];
    }
  } else if (mapping->contains("deviceMultiplier")) {
    out["allocationMultiplier"] = (*mapping)["deviceMultiplier"];
  } else {
    return nullptr;
  }
  return out;
}

}  // namespace

absl::StatusOr<FeatureMode> ParseFeatureMode(const std::string& s, const std::string& what) {
  if (s == "auto") return FeatureMode::kAuto;
  if (s == "on") return FeatureMode::kOn;
  if (s == "off") return FeatureMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("invalid ", what, " mode \"", s, "\" (want auto, on or off)"));
}

const char* FeatureModeName(FeatureMode m) {
  switch (m) {
    case FeatureMode::kOn:
      return "on";
    case FeatureMode::kOff:
      return "off";
    case FeatureMode::kAuto:
      break;
  }
  return "auto";
}

const char* NodeAllocatableFieldName(NodeAllocatableField f) {
  switch (f) {
    case NodeAllocatableField::kV136:
      return kNodeAllocatableResourceMappings;
    case NodeAllocatableField::kV137:
      return kNodeAllocatableResources;
    case NodeAllocatableField::kNone:
      break;
  }
  return "none";
}

bool HasListAttributes(const Pool& pool) {
  for (const Device& d : pool.devices) {
    for (const auto& [k, v] : d.attributes) {
      if (std::holds_alternative<StringList>(v)) return true;
    }
  }
  return false;
}

Pool WithoutListAttributes(Pool pool) {
  for (Device& d : pool.devices) {
    std::erase_if(d.attributes,
                  [](const auto& kv) { return std::holds_alternative<StringList>(kv.second); });
  }
  return pool;
}

bool HasNodeAllocatable(const Pool& pool) {
  return std::any_of(pool.devices.begin(), pool.devices.end(), [](const Device& d) {
    return d.extra.is_object() && d.extra.contains(kNodeAllocatableResources);
  });
}

Pool WithNodeAllocatableField(Pool pool, NodeAllocatableField field) {
  for (Device& d : pool.devices) {
    if (!d.extra.is_object() || !d.extra.contains(kNodeAllocatableResources)) continue;
    if (field == NodeAllocatableField::kV137) continue;
    json v137 = std::move(d.extra[kNodeAllocatableResources]);
    d.extra.erase(kNodeAllocatableResources);
    if (field != NodeAllocatableField::kV136 || !v137.is_object()) continue;
    json v136 = json::object();
    for (const auto& [resource, entry] : v137.items()) {
      if (json e = ToV136(entry); !e.is_null()) v136[resource] = std::move(e);
    }
    if (!v136.empty()) d.extra[kNodeAllocatableResourceMappings] = std::move(v136);
  }
  return pool;
}

}  // namespace topodra::publish
