// A placed Reservation as the state and store tests build them.
#pragma once

#include <set>
#include <string>
#include <utility>

#include "driver/state/state.h"
#include "nlohmann/json.hpp"

namespace topodra::state_testing {

inline state::Reservation Resv(const std::string& name, const std::string& cpus,
                               std::set<std::string> gpus = {}) {
  state::Reservation r;
  r.uid = "uid-" + name;
  r.name = name;
  r.cpus = *CpuSet::Parse(cpus);
  r.gpus = std::move(gpus);
  r.placed_at = "2026-01-02T03:04:05Z";
  r.spec = nlohmann::json{{"nodeName", "node-a"}, {"owners", {{{"namespace", "default"}}}}};
  return r;
}

}  // namespace topodra::state_testing
