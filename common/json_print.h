// JSON text byte for byte as nlohmann's dump(indent, ' ', /*ensure_ascii=*/false,
// error_handler_t::replace) prints it, made faster: runs of characters that need no escape are
// copied whole where nlohmann decodes each byte, and no serializer is set up per value. Prepare
// prints each claim's CDI spec, its device metadata and its stored record with it; the state's
// canonical form (driver/state/compact_json.h) is its compact print.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace topodra {

// Appends value.dump(indent, ...) to *out (indent < 0: compact), as it would print if the value
// began on a line indented by `at` spaces inside a larger document printed with the same indent:
// every line after the first is indented `at` spaces more. at = 0 is the value on its own.
void AppendJson(const nlohmann::json& value, int indent, int at, std::string* out);

// Appends `s` as a JSON string (what AppendJson prints for json(s)), without making a json of it.
void AppendJsonString(const std::string& s, std::string* out);

inline std::string PrintJson(const nlohmann::json& value, int indent = -1) {
  std::string out;
  AppendJson(value, indent, 0, &out);
  return out;
}

}  // namespace topodra
