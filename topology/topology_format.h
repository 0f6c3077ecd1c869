// Renderings of a Topology for people (text tree) and programs (JSON). The JSON shape is a
// documented interface (docs/user/cli.md, "JSON output"): add keys, never rename or remove them.
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "topology/topology.h"

namespace topodra::topology {

nlohmann::json TopologySummaryJson(const Topology& topo);
nlohmann::json TopologyToJson(const Topology& topo);
std::string TopologyToText(const Topology& topo);
// "16 GiB", "512 MiB", "1.5 KiB": for people only.
std::string HumanBytes(uint64_t bytes);

}  // namespace topodra::topology
