#include <ostream>

#include "cmd/commands.h"
#include "topology/json_text.h"
#include "topology/topology_format.h"

namespace topodra::cmd {

topology::TopologySource SourceFromFlags(const TopologyFlags& flags) {
  if (flags.file) return topology::TopologySource::XmlFile(*flags.file);
  if (flags.synthetic) return topology::TopologySource::Synthetic(*flags.synthetic);
  return topology::TopologySource::Live();
}

int RunTopology(const TopologyCommand& cmd, std::ostream& out, std::ostream& err) {
  const topology::TopologySource source = SourceFromFlags(cmd.topology);
  absl::StatusOr<topology::Topology> topo = topology::Discover(source);
  if (!topo.ok()) {
    err << "topodra topology: error: " << topo.status().message() << "\n";
    // A named file or description is the user's input; the live machine failing is ours.
    return source.kind == topology::TopologySource::Kind::kLive ? kExitFailure : kExitUsage;
  }
  if (cmd.output == "json") {
    out << DumpJson(topology::TopologyToJson(*topo), 2) << "\n";
  } else {
    out << topology::TopologyToText(*topo);
  }
  return kExitOk;
}

}  // namespace topodra::cmd
