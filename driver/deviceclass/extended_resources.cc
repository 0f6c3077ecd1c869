#include "driver/deviceclass/extended_resources.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace topodra::deviceclass {
namespace {

using nlohmann::json;

// A value quoted for a message, bounded: it comes from outside.
std::string Shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

const json* Member(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

}  // namespace

absl::StatusOr<CheckMode> ParseCheckMode(const std::string& s) {
  if (s == "auto") return CheckMode::kAuto;
  if (s == "on") return CheckMode::kOn;
  if (s == "off") return CheckMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("invalid value \"", s, "\" (want auto, on or off)"));
}

const char* CheckModeName(CheckMode m) {
  switch (m) {
    case CheckMode::kAuto:
      return "auto";
    case CheckMode::kOn:
      return "on";
    case CheckMode::kOff:
      return "off";
  }
  return "auto";
}

absl::StatusOr<std::optional<Mapping>> MappingOf(const json& device_class) {
  if (!device_class.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceClass: want an object, got ", Shown(device_class)));
  }
  const json* metadata = Member(device_class, "metadata");
  const json* name =
      metadata != nullptr && metadata->is_object() ? Member(*metadata, "name") : nullptr;
  if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceClass: metadata.name: want a non-empty string, got ",
                     name == nullptr ? "nothing" : Shown(*name)));
  }
  const std::string& class_name = name->get_ref<const std::string&>();
  const json* spec = Member(device_class, "spec");
  if (spec == nullptr || spec->is_null()) return std::nullopt;
  if (!spec->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceClass \"", class_name, "\": spec: want an object, got ", Shown(*spec)));
  }
  const json* resource = Member(*spec, "extendedResourceName");
  if (resource == nullptr || resource->is_null()) return std::nullopt;
  if (!resource->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceClass \"", class_name,
                     "\": spec.extendedResourceName: want a string, got ", Shown(*resource)));
  }
  // The API server refuses an empty name; a server that keeps one maps nothing with it.
  if (resource->get_ref<const std::string&>().empty()) return std::nullopt;
  return Mapping{class_name, resource->get<std::string>()};
}

std::vector<Conflict> Conflicts(const std::vector<Mapping>& mappings,
                                const std::vector<std::string>& plugin_resources) {
  std::map<std::string, std::set<std::string>> classes_of;
  for (const Mapping& m : mappings) classes_of[m.resource].insert(m.device_class);
  std::vector<Conflict> out;
  std::set<std::string> seen;
  for (const std::string& r : plugin_resources) {
    auto it = classes_of.find(r);
    if (it == classes_of.end() || !seen.insert(r).second) continue;
    out.push_back({r, std::vector<std::string>(it->second.begin(), it->second.end())});
  }
  return out;
}

std::string Describe(const Conflict& conflict) {
  std::vector<std::string> quoted;
  for (const std::string& c : conflict.device_classes)
    quoted.push_back(absl::StrCat("\"", c, "\""));
  return absl::StrCat(conflict.device_classes.size() == 1 ? "DeviceClass " : "DeviceClasses ",
                      absl::StrJoin(quoted, ", "),
                      conflict.device_classes.size() == 1 ? " maps \"" : " map \"",
                      conflict.resource, "\" (spec.extendedResourceName)");
}

ListFailure OnListFailure(CheckMode mode, const absl::Status& error) {
  if (mode == CheckMode::kOff) return ListFailure::kNoCheck;
  if (mode == CheckMode::kOn) return ListFailure::kFail;
  if (absl::IsPermissionDenied(error) || absl::IsNotFound(error)) return ListFailure::kNoCheck;
  return ListFailure::kRetry;
}

}  // namespace topodra::deviceclass
