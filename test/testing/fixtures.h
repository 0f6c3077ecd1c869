// The machine exports in test/fixtures/topologies, for tests. Every test target gets
// TOPODRA_TOPOLOGIES_DIR from test/CMakeLists.txt.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test/testing/fixture_files.h"
#include "topology/discoverer.h"

namespace topodra::testing {

inline std::string FixturePath(const std::string& name) {
  return std::string(TOPODRA_TOPOLOGIES_DIR) + "/" + name;
}

// Every file of test/fixtures/topologies/README.md (the list is fixture_files.h's, which
// programs without gtest use too).
inline const std::vector<std::string>& AllFixtures() { return FixtureFiles(); }

// A fixture file name, or an hwloc synthetic description ("pack:2 core:8 pu:2"). A load failure
// fails the calling test and yields an empty topology.
inline topology::Topology LoadTopology(const std::string& name_or_synthetic) {
  const bool file = name_or_synthetic.size() > 4 &&
                    name_or_synthetic.compare(name_or_synthetic.size() - 4, 4, ".xml") == 0;
  absl::StatusOr<topology::Topology> t =
      topology::Discover(file ? topology::TopologySource::XmlFile(FixturePath(name_or_synthetic))
                              : topology::TopologySource::Synthetic(name_or_synthetic));
  EXPECT_TRUE(t.ok()) << name_or_synthetic << ": " << t.status();
  return t.ok() ? *std::move(t) : topology::Topology{};
}

}  // namespace topodra::testing
