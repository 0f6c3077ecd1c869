// The JSON document is an interface (docs/user/cli.md): its summary keys are fixed and whole
// documents are compared with checked-in goldens, so any change to the shape is deliberate.
// Regenerate the goldens with TOPODRA_UPDATE_GOLDEN=1 and review the diff.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "test/testing/fixtures.h"
#include "topology/discoverer.h"
#include "topology/topology_format.h"

namespace topodra::topology {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

Topology Load(const std::string& name) {
  Topology t = testing::LoadTopology(name);
  t.source = "xml:" + name;  // the checkout path differs between machines
  return t;
}

TEST(TopologyFormatTest, SummaryHasExactlyTheDocumentedKeys) {
  const json j = TopologyToJson(Load("16em64t-4s2c2t-offlines.xml"));
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.at("summary").items()) keys.push_back(k);
  EXPECT_THAT(keys, ::testing::UnorderedElementsAre("packages", "numaNodes", "cores", "cpus",
                                                    "onlineCpus", "offlineCpus", "gpus"));
  EXPECT_EQ(j["summary"]["packages"], 4);
  EXPECT_EQ(j["summary"]["numaNodes"], 1);
  EXPECT_EQ(j["summary"]["cores"], 6);
  EXPECT_EQ(j["summary"]["cpus"], 7);
  EXPECT_EQ(j["summary"]["onlineCpus"], "0-1,3-4,6,12,15");
  EXPECT_EQ(j["summary"]["offlineCpus"], "2,5,7-11,13-14");
  EXPECT_EQ(j["summary"]["gpus"], 0);
}

TEST(TopologyFormatTest, GpuDetailUsesKubernetesStyleNames) {
  const json j = TopologyToJson(Load("power8gpudistances.xml"));
  const json& g = j.at("gpus").at(2);
  EXPECT_EQ(g["pciBusID"], "000a:01:00.0");
  EXPECT_EQ(g["vendorID"], "0x10de");
  EXPECT_EQ(g["deviceID"], "0x15f9");
  EXPECT_EQ(g["numaNode"], 1);
  EXPECT_EQ(g["pcieRoot"], "pci000a:00");
  EXPECT_EQ(j["numaNodes"][0]["distances"]["1"], 40);
}

TEST(TopologyFormatTest, UnknownIdsAreNull) {
  const json j = TopologyToJson(Load("16em64t-4s2c2t.xml"));
  EXPECT_TRUE(j["cores"][0]["l3"].is_number());
  // This machine has L2 per core and L3 per package; synthetic "pack:1 pu:4" has neither.
  absl::StatusOr<Topology> t = Discover(TopologySource::Synthetic("pack:1 pu:4"));
  ASSERT_TRUE(t.ok());
  const json s = TopologyToJson(*t);
  EXPECT_TRUE(s["cores"][0]["l3"].is_null());
  EXPECT_TRUE(s["cores"][0]["l2"].is_null());
}

void CheckGolden(const std::string& fixture) {
  SCOPED_TRACE(fixture);
  const std::string got = TopologyToJson(Load(fixture)).dump(2) + "\n";
  const std::string path = std::string(TOPODRA_SOURCE_DIR) + "/test/fixtures/topology/" +
                           fixture.substr(0, fixture.size() - 4) + ".json";
  if (std::getenv("TOPODRA_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path) << got;
    GTEST_SKIP() << "golden rewritten: " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing golden " << path;
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(got, want.str()) << "JSON for " << fixture << " changed; see " << path;
}

TEST(TopologyFormatTest, GoldenJson) {
  for (const char* f : {"power8gpudistances.xml", "16em64t-4s2c2t-offlines.xml", "fakecpukinds.xml",
                        "64intel64-fakeKNL-SNC4-hybrid.xml"}) {
    CheckGolden(f);
  }
}

TEST(TopologyFormatTest, TextTree) {
  const std::string text = TopologyToText(Load("power8gpudistances.xml"));
  EXPECT_THAT(text, HasSubstr("Machine (xml:power8gpudistances.xml): 2 packages, 2 NUMA nodes, "
                              "8 cores, 16 CPUs online"));
  EXPECT_THAT(text, HasSubstr("  Package 1 (CPUs 80-81,88-89,96-97,104-105)\n"
                              "    NUMA 1 (CPUs 80-81,88-89,96-97,104-105, 63.7 GiB)\n"));
  EXPECT_THAT(text, HasSubstr("Core 0 (os 8): CPUs 0-1\n"));
  EXPECT_THAT(text, HasSubstr("GPU 000b:01:00.0 [10de:15f9] NVIDIA Corporation "
                              "Tesla P100-SXM2-16GB, NUMA 1, root pci000b:00"));
  const std::string knl = TopologyToText(Load("64intel64-fakeKNL-SNC4-hybrid.xml"));
  EXPECT_THAT(knl,
              HasSubstr("Memory-only NUMA 4 (MCDRAM): 2 GiB, near CPUs 4-7,20-23,36-39,52-55"));
  const std::string off = TopologyToText(Load("16em64t-4s2c2t-offlines.xml"));
  EXPECT_THAT(off, HasSubstr("offline: 2,5,7-11,13-14"));
}

TEST(TopologyFormatTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(16ull << 30), "16 GiB");
}

}  // namespace
}  // namespace topodra::topology
