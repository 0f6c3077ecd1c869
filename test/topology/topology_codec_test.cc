// The machine model's stored text (topology_codec.h): every fixture machine comes back equal,
// and a damaged text is refused with the line and the reason, never a crash.
#include "topology/topology_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "test/testing/fixtures.h"

namespace topodra::topology {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Machines() {
  std::vector<std::string> all = testing::AllFixtures();
  // Without caches, cores or NUMA nodes, and large.
  for (const char* s : {"pack:1 pu:4", "pack:2 core:3 pu:2", "pack:4 numa:4 core:25 pu:2"}) {
    all.emplace_back(s);
  }
  return all;
}

TEST(TopologyCodecTest, EveryFixtureMachineRoundTrips) {
  for (const std::string& name : Machines()) {
    const Topology t = testing::LoadTopology(name);
    ASSERT_FALSE(t.cpus.empty()) << name;
    const std::string text = EncodeTopology(t);
    absl::StatusOr<Topology> back = DecodeTopology(text);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_TRUE(*back == t) << name;
    EXPECT_EQ(EncodeTopology(*back), text) << name;
    // What the queries derive comes back too.
    EXPECT_EQ(back->online, t.online) << name;
    EXPECT_EQ(back->SmtSiblings(t.cpus.back().id), t.SmtSiblings(t.cpus.back().id)) << name;
  }
}

// Every field the fixtures leave empty, and text that needs escaping.
Topology Unusual() {
  Topology t;
  t.source = "xml:/a dir/100%~machine.xml\n";
  t.packages = {{0, CpuSet{0, 1}}};
  t.numa_nodes = {{0, CpuSet{0, 1}, CpuSet{0, 1}, "", 1 << 20},
                  {3, CpuSet{}, CpuSet{0, 1}, "MCDRAM", 5}};
  t.l2 = {{2, 0, 1 << 20, CpuSet{0, 1}}};
  t.cores = {{0, 7, 0, 0, kNone, 0, CoreType::kEfficiency, CpuSet{0, 1}}};
  t.cpus = {{0, 0}, {1, 0}};
  t.cpu_kinds = {{2, CoreType::kEfficiency, CpuSet{0, 1}, {{"CoreType", "Intel Atom"}, {"", "~"}}}};
  topology::Gpu g;
  g.pci_bus_id = "0000:3b:00.0";
  g.vendor_id = 0x10de;
  g.device_id = 0xffff;
  g.class_id = 0x302;
  g.vendor_name = "NVIDIA Corporation";
  g.device_name = "GV100 [Tesla V100 \xc3\xa9]";
  g.uuid = "GPU-1%2";
  g.numa = kNone;
  g.local_cpus = CpuSet{0, 1};
  g.pcie_root = "pci0000:3a";
  g.pci_path = {"pci0000:3a", "0000:3a:00.0", "bridge#12"};
  g.memory_bytes = 34359738368ull;
  g.os_devices = {{"card0", "gpu", ""}, {"nvml0", "gpu", "NVML"}};
  t.gpus = {g};
  t.pcie_roots = {{"pci0000:3a", CpuSet{0, 1}, kNone}};
  t.offline = CpuSet{2, 3};
  t.numa_distances = {{10, 31}, {31, 10}};
  t.Finalize();
  return t;
}

TEST(TopologyCodecTest, EveryFieldAndAnyTextRoundTrips) {
  const Topology t = Unusual();
  const std::string text = EncodeTopology(t);
  EXPECT_THAT(text, HasSubstr("source xml:/a%20dir/100%25%7Emachine.xml%0A\n"));
  // Empty texts and sets are "~"; a text that is "~" is escaped.
  EXPECT_THAT(text, HasSubstr("\nkind 2 efficiency 0-1 2 ~ %7E CoreType Intel%20Atom\n"));
  EXPECT_THAT(text, HasSubstr("\nnuma 3 ~ 0-1 MCDRAM 5\n"));
  absl::StatusOr<Topology> back = DecodeTopology(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == t);
  EXPECT_EQ(back->gpus[0].device_name, t.gpus[0].device_name);
  EXPECT_EQ(back->cpu_kinds[0].infos, t.cpu_kinds[0].infos);
}

TEST(TopologyCodecTest, DamagedTextIsRefusedWithItsLineAndReason) {
  const std::string good = EncodeTopology(testing::LoadTopology("16em64t-4s2c2t.xml"));
  ASSERT_TRUE(DecodeTopology(good).ok());
  struct Case {
    std::string text;
    std::string error;
  };
  const std::string tail = "cpu 0 0\noffline ~\n";
  const std::string core = "core 0 -1 -1 -1 -1 unknown 0\n";
  const std::string two_numa = "numa 0 ~ ~ ~ 0\nnuma 1 ~ ~ ~ 0\n";
  auto gpu = [](int numa) {
    return absl::StrCat("gpu 0000:01:00.0 4318 1 768 ~ ~ ~ ~ ", numa, " ~ ~ 0 0 0\n");
  };
  auto Repeat = [](const std::string& line, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += line;
    return out;
  };
  const std::vector<Case> cases = {
      {"", "does not end with a complete line"},
      {good.substr(0, good.size() - 1), "does not end with a complete line"},
      {"source s\n" + core + tail + "gadget 1\n",
       "line 5 (\"gadget 1\"): unknown record \"gadget\""},
      {"source s\n" + core + "cpu 0 x\noffline ~\n", "line 3 (\"cpu 0 x\"): core \"x\" is not"},
      {"source s\n" + core + "cpu 0 01\noffline ~\n", "core \"01\" is not a decimal integer"},
      {"source s\n" + core + "cpu 0 0 9\noffline ~\n", "1 fields too many"},
      {"source s\n" + core + "cpu 0\noffline ~\n", "line 3 (\"cpu 0\"): no core"},
      {"source s\n" + core + "cpu 0  0\noffline ~\n", "empty core"},
      {"source s\nsource t\n" + core + tail, "line 2 (\"source t\"): a second record"},
      {"source s%2\n" + core + tail, "source has a bad escape at offset 1"},
      {"source s~s\n" + core + tail, "source has an unescaped byte at offset 1"},
      {"source s\ncore 0 0 0 -1 -1 fast 0\n" + tail, "type \"fast\" is not a core type"},
      {"source s\ncore 0 0 0 -1 -1 unknown 5-2\n" + tail, "cpus: invalid cpuset \"5-2\""},
      {"source s\n" + core + "offline ~\n", "no CPU"},
      {"source s\n" + core + "cpu 0 1\noffline ~\n", "CPU 0: core 1 of 1"},
      {"source s\n" + core + "cpu 1 0\noffline ~\n", "CPU 1 is not among the CPUs of its core 0"},
      {"source s\ncore 0 0 0 -1 -1 unknown 0-1\ncpu 1 0\ncpu 0 0\noffline ~\n",
       "CPU 0 is not after CPU 1"},
      {"source s\ncore 0 -1 -1 2 -1 unknown 0\n" + tail, "core 0: L3 2 of 0"},
      {"source s\ncore 0 -1 -1 -1 0 unknown 0\n" + tail, "core 0: L2 0 of 0"},
      {"source s\ncore 0 -1 4 -1 -1 unknown 0\n" + tail, "core 0: no NUMA node 4"},
      {"source s\ncore 0 1 -1 -1 -1 unknown 0\n" + tail, "core 0: no package 1"},
      {"source s\n" + two_numa + core + tail + "distances 2 10 20 20\n", "no distance"},
      {"source s\n" + two_numa + core + tail + "distances 1 10\n",
       "distances for 1 NUMA nodes, the machine has 2"},
      {"source s\n" + core + tail + "distances 1 10\n", "NUMA nodes 1 is outside [0, 0]"},
      {"source s\nnuma 0 ~ ~ ~ 0\nnuma 0 ~ ~ ~ 0\n" + core + tail, "NUMA node 0 twice"},
      {"source s\npackage 3 ~\npackage 3 ~\n" + core + tail, "package 3 twice"},
      {"source s\n" + core + tail + gpu(-1) + gpu(-1), "GPU \"0000:01:00.0\" twice"},
      {"source s\n" + core + tail + gpu(3), "GPU \"0000:01:00.0\": no NUMA node 3"},
      {"source s\n" + core + tail + "root pci0000:00 ~ -1\nroot pci0000:00 ~ -1\n",
       "PCIe root \"pci0000:00\" twice"},
      {"source s\n" + core + tail + "root pci0000:00 ~ 2\n",
       "PCIe root \"pci0000:00\": no NUMA node 2"},
      {"source s\ncore 0 -1 -1 -1 -1 unknown 0-2\ncpu 0 0\noffline ~\n",
       "core 0: CPUs 1-2 have no cpu record"},
      // A small file must not allocate without bound: sets of 8 KiB on 20-byte lines, and
      // records past any machine's count.
      {"source s\n" + Repeat("package 0 0-65535\n", 4200) + core + tail,
       "line 4098 (\"package 0 0-65535\"): the CPU sets so far exceed 33554432 bytes"},
      {"source s\n" + Repeat("kind -1 unknown ~ 0\n", 257) + core + tail,
       "line 258 (\"kind -1 unknown ~ 0\"): more records of this kind than any machine has"},
      {"source s\n" + core + "cpu 0 0\n", "no \"offline\" record"},
      {core + tail, "no \"source\" record"},
      {"source s\ngpu 0 70000\n" + core + tail, "vendor id 70000 is outside [0, 65535]"},
      {"source s\n" + core + "cpu 99999999999999999999 0\noffline ~\n", "is not a decimal integer"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Topology> t = DecodeTopology(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(t.status().message(), HasSubstr(c.error)) << c.text;
  }
  // No prefix of the text (a torn file) crashes or is taken for the machine.
  const Topology whole = *DecodeTopology(good);
  for (size_t end = 0; end < good.size(); ++end) {
    absl::StatusOr<Topology> t = DecodeTopology(good.substr(0, end));
    EXPECT_FALSE(t.ok() && *t == whole) << end;
  }
}

}  // namespace
}  // namespace topodra::topology
