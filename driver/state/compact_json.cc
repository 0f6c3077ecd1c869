#include "driver/state/compact_json.h"

#include "common/json_print.h"

namespace topodra::state {

void AppendCompactJson(const nlohmann::json& value, std::string* out) {
  AppendJson(value, /*indent=*/-1, /*at=*/0, out);
}

std::string CompactJson(const nlohmann::json& value) { return PrintJson(value); }

}  // namespace topodra::state
