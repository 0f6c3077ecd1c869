// YAML <-> JSON for files operators hand to the CLI (slices to flatten, the daemon config).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace topodra::cmd {

// Parses JSON, or YAML when the text is not JSON. Plain YAML scalars become int, bool or null
// where they read as such; quoted ones stay strings. Errors name the line.
absl::StatusOr<nlohmann::json> ParseJsonOrYaml(const std::string& text);
// Block-style YAML; strings that would read back as another type are quoted.
std::string ToYaml(const nlohmann::json& j);

}  // namespace topodra::cmd
