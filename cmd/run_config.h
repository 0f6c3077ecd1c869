// `topodra run`'s flags (RunCommand) as the node daemon's typed configuration.
#pragma once

#include "absl/status/statusor.h"
#include "cmd/commands.h"
#include "driver/node/config.h"
#include "topology/topology.h"

namespace topodra::cmd {

// Every value parsed and checked (node::Validate); errors name the flag and the value, as the
// usage error line prints them. The API server's address is not filled in here.
absl::StatusOr<node::NodeConfig> NodeConfigFromFlags(const RunCommand& cmd,
                                                     const topology::Topology& topo);

}  // namespace topodra::cmd
