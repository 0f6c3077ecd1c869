// Subcommands as plain functions of parsed options, so main.cc is the only file that sees CLI11
// and each command can be tested without a command line.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "topology/discoverer.h"

namespace topodra::cmd {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the work itself failed (e.g. the live machine)
inline constexpr int kExitUsage = 2;    // bad flags or bad input named on the command line

struct TopologyFlags {
  std::optional<std::string> file;       // --topology-file
  std::optional<std::string> synthetic;  // --topology-synthetic (given but empty is an error)
};

topology::TopologySource SourceFromFlags(const TopologyFlags& flags);

struct TopologyCommand {
  TopologyFlags topology;
  std::string output = "text";  // text | json
};

int RunTopology(const TopologyCommand& cmd, std::ostream& out, std::ostream& err);

}  // namespace topodra::cmd
