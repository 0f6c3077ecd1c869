// Where a Topology comes from. The daemon asks the live machine; tests, the CLI and benchmarks
// simulate any machine from an hwloc XML export or a synthetic description.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "topology/topology.h"

namespace topodra::topology {

struct TopologySource {
  enum class Kind { kLive, kXmlFile, kSynthetic };
  Kind kind = Kind::kLive;
  std::string value;  // file path or synthetic description

  static TopologySource Live() { return {}; }
  static TopologySource XmlFile(std::string path) { return {Kind::kXmlFile, std::move(path)}; }
  static TopologySource Synthetic(std::string desc) { return {Kind::kSynthetic, std::move(desc)}; }
  std::string Describe() const;  // "live", "xml:<path>", "synthetic:<desc>"
};

class Discoverer {
 public:
  virtual ~Discoverer() = default;
  virtual absl::StatusOr<Topology> Discover() = 0;
};

// The production implementation; the only code in the project that includes hwloc.
std::unique_ptr<Discoverer> NewHwlocDiscoverer(TopologySource source);

// The discovery library and its version, as this process loaded it ("hwloc API 2.8.0"): another
// version may find another model in the same machine.
std::string DiscovererVersion();

// Convenience for one-shot callers (CLI, tests, benchmarks).
absl::StatusOr<Topology> Discover(const TopologySource& source);

}  // namespace topodra::topology
