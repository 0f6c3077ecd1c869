// The names of the machine exports in test/fixtures/topologies, without gtest: test programs
// that are not gtest binaries (test/schema/slice_cases_dump.cc) walk the same list as the tests
// (fixtures.h's AllFixtures() returns it).
#pragma once

#include <string>
#include <vector>

namespace topodra::testing {

// Every file of test/fixtures/topologies/README.md.
inline const std::vector<std::string>& FixtureFiles() {
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

}  // namespace topodra::testing
