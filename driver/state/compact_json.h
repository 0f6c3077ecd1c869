// The compact text of a JSON value, byte for byte what nlohmann's
// dump(-1, ' ', /*ensure_ascii=*/false, error_handler_t::replace) prints (the canonical form of
// the state files, canonical_json.h): common/json_print.h's compact print. Prepare prints each
// claim's stored answer and CDI text, the device metadata documents among them, once per claim.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace topodra::state {

std::string CompactJson(const nlohmann::json& value);
// Appends CompactJson(value) to *out.
void AppendCompactJson(const nlohmann::json& value, std::string* out);

}  // namespace topodra::state
