// The machine exports in test/fixtures/topologies, for tests. Every test target gets
// TOPODRA_TOPOLOGIES_DIR from test/CMakeLists.txt.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topology/discoverer.h"

namespace topodra::testing {

inline std::string FixturePath(const std::string& name) {
  return std::string(TOPODRA_TOPOLOGIES_DIR) + "/" + name;
}

// Every file of test/fixtures/topologies/README.md.
inline const std::vector<std::string>& AllFixtures() {
  static const std::vector<std::string> kAll = {
      "16em64t-4s2c2t.xml",
      "16em64t-4s2c2t-offlines.xml",
      "28intel64-2p2g7c-CoDgroups.v1tov2.xml",
      "32em64t-2n8c2t-pci-normalio.xml",
      "64intel64-fakeKNL-SNC4-hybrid.xml",
      "96em64t-4n4d3ca2co-pci.xml",
      "192em64t-24n8c2t.xml",
      "fakecpukinds.xml",
      "power8gpudistances.xml",
      "nvidiaDGX2.xml",
  };
  return kAll;
}

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
