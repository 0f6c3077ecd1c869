// JSON text that never throws: strings that came from outside (hwloc PCI names, YAML files,
// API responses) may hold invalid UTF-8, on which nlohmann's default dump throws.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace topodra {

inline std::string DumpJson(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace topodra

namespace topodra {

// j[key] when j is an object holding a string there, else fallback. nlohmann's value() throws
// on a type mismatch, which outside input must never cause.
inline std::string StringField(const nlohmann::json& j, const char* key,
                               const std::string& fallback = "") {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace topodra

namespace topodra {

// j[key] when j is an object that has it, else null; never throws.
inline const nlohmann::json& Field(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

}  // namespace topodra
