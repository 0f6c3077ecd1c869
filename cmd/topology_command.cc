#include <ostream>

#include "cmd/commands.h"
#include "common/json_text.h"
#include "topology/topology_format.h"

namespace topodra::cmd {

topology::TopologySource SourceFromFlags(const TopologyFlags& flags) {
  if (flags.file) return topology::TopologySource::XmlFile(*flags.file);
  if (flags.synthetic) return topology::TopologySource::Synthetic(*flags.synthetic);
  return topology::TopologySource::Live();
}

std::optional<topology::Topology> DiscoverOrReport(const TopologyFlags& flags, const char* command,
                                                   std::ostream& err, int* exit_code) {
  const topology::TopologySource source = SourceFromFlags(flags);
  absl::StatusOr<topology::Topology> topo = topology::Discover(source);
  if (topo.ok()) return *std::move(topo);
  err << "topodra " << command << ": error: " << topo.status().message() << "\n";
  // A named file or description is the user's input; the live machine failing is ours.
  *exit_code = source.kind == topology::TopologySource::Kind::kLive ? kExitFailure : kExitUsage;
  return std::nullopt;
}

int RunTopology(const TopologyCommand& cmd, std::ostream& out, std::ostream& err) {
  int code = kExitOk;
  std::optional<topology::Topology> topo = DiscoverOrReport(cmd.topology, "topology", err, &code);
  if (!topo) return code;
  if (cmd.output == "json") {
    out << DumpJson(topology::TopologyToJson(*topo), 2) << "\n";
  } else {
    out << topology::TopologyToText(*topo);
  }
  return kExitOk;
}

}  // namespace topodra::cmd
