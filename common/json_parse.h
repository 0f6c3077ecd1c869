// Parsing JSON that came from outside (spec files, checkpoints) without exceptions and with a
// nesting bound, so a hostile file cannot exhaust the stack.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace topodra::files {

// InvalidArgument "malformed JSON: <parser message>" or "... nested deeper than N levels".
absl::StatusOr<nlohmann::json> ParseJsonBounded(absl::string_view text, int max_depth);

}  // namespace topodra::files
