// The stored machine model (topology_cache.h): the file round-trips every fixture machine and
// refuses a damaged, torn or other-version file with a clear error; the key changes with the
// boot, the online CPUs and the topology file; the start uses the file only when its key
// matches and discovers otherwise.
#include "driver/node/topology_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "test/testing/fixtures.h"
#include "topology/topology_codec.h"

namespace topodra::node {
namespace {

using ::testing::HasSubstr;

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

class TopologyCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/topocacheXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // A live machine's files, in a tree of the test's own.
    Write(dir_ + "/root/proc/sys/kernel/random/boot_id", "1b3c1e2a-0000-4000-8000-000000000001\n");
    Write(dir_ + "/root/sys/devices/system/cpu/online", "0-15\n");
    Write(dir_ + "/root/sys/devices/system/cpu/present", "0-15\n");
    Write(dir_ + "/root/sys/bus/pci/devices/0000:00:00.0", "");
    Write(dir_ + "/root/sys/class/drm/card0", "");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  MachineKeyInputs Live() const {
    MachineKeyInputs in;
    in.source = topology::TopologySource::Live();
    in.version = "1.0";
    in.discoverer = "hwloc API 2.8.0";
    in.root = dir_ + "/root";
    return in;
  }
  MachineKey KeyNow(const MachineKeyInputs& in) const {
    absl::StatusOr<MachineKey> key = ReadMachineKey(in);
    EXPECT_TRUE(key.ok()) << key.status();
    return key.ok() ? *key : MachineKey{};
  }

  std::string dir_;
};

TEST_F(TopologyCacheTest, TheFileRoundTripsEveryFixtureMachine) {
  const MachineKey key = KeyNow(Live());
  for (const std::string& name : testing::AllFixtures()) {
    const topology::Topology t = testing::LoadTopology(name);
    absl::StatusOr<StoredTopology> back = DecodeTopologyCache(EncodeTopologyCache(key, t));
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_TRUE(back->key == key) << name;
    EXPECT_TRUE(back->topology == t) << name;
  }
}

TEST_F(TopologyCacheTest, ADamagedTornOrOtherVersionFileIsRefused) {
  const MachineKey key = KeyNow(Live());
  const std::string good =
      EncodeTopologyCache(key, testing::LoadTopology("32em64t-2n8c2t-pci-normalio.xml"));
  struct Case {
    std::string text;
    absl::StatusCode code;
    std::string error;
  };
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x20;
  std::string other_version = good;
  other_version.replace(0, other_version.find('\n'), "topodra-topology-cache 2");
  const size_t body = good.find("\nkey ") + 1;
  const std::string bad_sum =
      good.substr(0, good.find("checksum ")) + "checksum 00000000\n" + good.substr(body);
  const std::vector<Case> cases = {
      {"", absl::StatusCode::kDataLoss, "damaged: no complete first line"},
      {"{\"version\": 1}\n", absl::StatusCode::kDataLoss, "not a topology cache"},
      {"topodra-topology-cache x\n", absl::StatusCode::kDataLoss, "bad version \"x\""},
      {other_version, absl::StatusCode::kFailedPrecondition,
       "version 2, this daemon reads version 1"},
      {good.substr(0, good.size() - 7), absl::StatusCode::kDataLoss, "checksum"},
      {flipped, absl::StatusCode::kDataLoss, "(a torn or altered file)"},
      {bad_sum, absl::StatusCode::kDataLoss, "checksum \"00000000\" stored"},
      {"topodra-topology-cache 1\nkey x y\n", absl::StatusCode::kDataLoss, "no checksum line"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<StoredTopology> t = DecodeTopologyCache(c.text);
    ASSERT_FALSE(t.ok()) << c.text.substr(0, 100);
    EXPECT_EQ(t.status().code(), c.code) << t.status();
    EXPECT_THAT(t.status().message(), HasSubstr(c.error));
  }
  // Every prefix of the file (a torn write that was not atomic after all) is refused.
  for (size_t end = 0; end < good.size(); end += 97) {
    EXPECT_FALSE(DecodeTopologyCache(good.substr(0, end)).ok()) << end;
  }
}

TEST_F(TopologyCacheTest, TheKeyChangesWithTheBootTheOnlineCpusAndTheTopologyFile) {
  const MachineKey before = KeyNow(Live());
  EXPECT_TRUE(KeyNow(Live()) == before);
  Write(dir_ + "/root/proc/sys/kernel/random/boot_id", "1b3c1e2a-0000-4000-8000-000000000002\n");
  const MachineKey rebooted = KeyNow(Live());
  EXPECT_FALSE(rebooted == before);
  EXPECT_THAT(KeyDifference(before, rebooted),
              HasSubstr("boot_id \"1b3c1e2a-0000-4000-8000-000000000001\" is now "
                        "\"1b3c1e2a-0000-4000-8000-000000000002\""));
  Write(dir_ + "/root/sys/devices/system/cpu/online", "0-14\n");
  EXPECT_THAT(KeyDifference(rebooted, KeyNow(Live())),
              HasSubstr("/sys/devices/system/cpu/online \"0-15\" is now \"0-14\""));
  const MachineKey offline = KeyNow(Live());
  Write(dir_ + "/root/sys/bus/pci/devices/0000:3b:00.0", "");
  EXPECT_THAT(KeyDifference(offline, KeyNow(Live())), HasSubstr("/sys/bus/pci/devices \"1 names"));
  // No NUMA support in the kernel: "absent", still a key.
  EXPECT_EQ(KeyNow(Live()).entries[8].second, "absent");
  // No boot id: nothing proves the boot, no key.
  std::filesystem::remove(dir_ + "/root/proc/sys/kernel/random/boot_id");
  std::filesystem::create_directories(dir_ + "/root/proc/sys/kernel/random/boot_id");
  EXPECT_FALSE(ReadMachineKey(Live()).ok());

  // An XML export: its bytes, whatever its size and time say.
  MachineKeyInputs xml = Live();
  std::filesystem::remove_all(dir_ + "/root/proc/sys/kernel/random/boot_id");
  Write(dir_ + "/root/proc/sys/kernel/random/boot_id", "b\n");
  xml.source = topology::TopologySource::XmlFile(dir_ + "/machine.xml");
  Write(dir_ + "/machine.xml", "<topology>a</topology>");
  const MachineKey a = KeyNow(xml);
  Write(dir_ + "/machine.xml", "<topology>b</topology>");
  EXPECT_THAT(KeyDifference(a, KeyNow(xml)), HasSubstr("file \"22 bytes"));
  // The HWLOC_* environment and the daemon's version are part of it.
  MachineKeyInputs env = xml;
  env.hwloc_environment = {"HWLOC_XMLFILE=/x.xml"};
  EXPECT_THAT(KeyDifference(KeyNow(xml), KeyNow(env)), HasSubstr("hwloc_environment"));
  env = xml;
  env.version = "1.1";
  EXPECT_THAT(KeyDifference(KeyNow(xml), KeyNow(env)), HasSubstr("daemon \"1.0\" is now \"1.1\""));
  // So is the binary: a rebuild of the same version is another file.
  EXPECT_EQ(KeyNow(xml).entries[2], (std::pair<std::string, std::string>("executable", "none")));
  env = xml;
  env.executable = dir_ + "/topodra";
  Write(env.executable, "build 1");
  const MachineKey build1 = KeyNow(env);
  EXPECT_THAT(build1.entries[2].second, HasSubstr("7 bytes, mtime "));
  Write(env.executable + ".new", "build 22");
  std::filesystem::rename(env.executable + ".new", env.executable);
  EXPECT_THAT(KeyDifference(build1, KeyNow(env)), HasSubstr("executable \"7 bytes"));
  env.executable = dir_ + "/no-such-binary";
  EXPECT_FALSE(ReadMachineKey(env).ok());
}

TEST_F(TopologyCacheTest, StoreRemovesTheTemporaryFilesOfACrashedStore) {
  const TopologyCache cache(dir_ + "/state", Live());
  std::filesystem::create_directories(dir_ + "/state");
  Write(dir_ + "/state/.topology-cache.4242-7.tmp", "half a model");
  Write(dir_ + "/state/.checkpoint.4242-7.tmp", "another file's");
  const topology::Topology machine = testing::LoadTopology("16em64t-4s2c2t.xml");
  ASSERT_TRUE(cache.Store(KeyNow(Live()), machine).ok());
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/state")) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".checkpoint.4242-7.tmp", "topology-cache"}));
}

TEST_F(TopologyCacheTest, ALargeMachineFitsTheFileBoundAndALargerFileIsRefused) {
  // restart_bench's machine.
  absl::StatusOr<topology::Topology> machine =
      topology::Discover(topology::TopologySource::Synthetic("pack:4 numa:4 core:400 pu:2"));
  ASSERT_TRUE(machine.ok()) << machine.status();
  ASSERT_EQ(machine->cpus.size(), 12800u);
  const std::string text = EncodeTopologyCache(KeyNow(Live()), *machine);
  std::printf("12800-cpu model: %zu bytes\n", text.size());
  EXPECT_LT(text.size() * 4, kMaxTopologyCacheBytes);
  // A file past the bound is refused without being decoded.
  const TopologyCache cache(dir_ + "/state", Live());
  std::filesystem::create_directories(dir_ + "/state");
  Write(cache.path(), std::string(kMaxTopologyCacheBytes + 1, 'x'));
  absl::StatusOr<topology::Topology> loaded = cache.Load(KeyNow(Live()));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(loaded.status().message(), HasSubstr("is larger than 3145728 bytes"));
}

TEST_F(TopologyCacheTest, TheStartUsesTheFileOnlyWhenItsKeyMatches) {
  const TopologyCache cache(dir_ + "/state", Live());
  const topology::Topology machine = testing::LoadTopology("16em64t-4s2c2t.xml");
  int discoveries = 0;
  auto discover = [&]() -> absl::StatusOr<topology::Topology> {
    ++discoveries;
    return machine;
  };
  // Nothing stored yet: discovered, with the key to store it under.
  absl::StatusOr<StartTopology> first = FindTopologyAtStart(&cache, discover);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->from_cache);
  ASSERT_TRUE(first->key.has_value());
  EXPECT_THAT(first->note, HasSubstr("no stored machine at " + dir_ + "/state/topology-cache"));
  EXPECT_EQ(discoveries, 1);
  ASSERT_TRUE(cache.Store(*first->key, first->topology).ok());
  EXPECT_EQ(std::filesystem::status(dir_ + "/state/topology-cache").permissions() &
                std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  // Stored on this boot: the file, no discovery.
  absl::StatusOr<StartTopology> second = FindTopologyAtStart(&cache, discover);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->from_cache);
  EXPECT_TRUE(second->topology == machine);
  EXPECT_THAT(second->note, HasSubstr("machine read from " + dir_ + "/state/topology-cache"));
  EXPECT_EQ(discoveries, 1);

  // A CPU went offline since: the key differs, the machine is discovered.
  Write(dir_ + "/root/sys/devices/system/cpu/online", "0-14\n");
  absl::StatusOr<StartTopology> third = FindTopologyAtStart(&cache, discover);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->from_cache);
  EXPECT_EQ(discoveries, 2);
  EXPECT_THAT(third->note, HasSubstr("stored for another machine or boot: "
                                     "/sys/devices/system/cpu/online \"0-15\" is now \"0-14\""));

  // A damaged file: discovered, and the note says why.
  Write(dir_ + "/root/sys/devices/system/cpu/online", "0-15\n");
  std::string text = EncodeTopologyCache(*first->key, machine);
  text[text.size() - 3] = '9';
  Write(dir_ + "/state/topology-cache", text);
  absl::StatusOr<StartTopology> fourth = FindTopologyAtStart(&cache, discover);
  ASSERT_TRUE(fourth.ok());
  EXPECT_FALSE(fourth->from_cache);
  EXPECT_EQ(discoveries, 3);
  EXPECT_THAT(fourth->note, HasSubstr("topology-cache\": damaged: checksum"));

  // Off: discovered, no key, nothing read.
  absl::StatusOr<StartTopology> off = FindTopologyAtStart(nullptr, discover);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->from_cache);
  EXPECT_FALSE(off->key.has_value());
  EXPECT_THAT(off->note, HasSubstr("--topology-cache=off"));

  // A discovery that fails is the start's error, as without the file.
  absl::StatusOr<StartTopology> failed =
      FindTopologyAtStart(&cache, []() -> absl::StatusOr<topology::Topology> {
        return absl::InvalidArgumentError("topology file \"x\" is not valid hwloc XML");
      });
  EXPECT_THAT(failed.status().message(), HasSubstr("is not valid hwloc XML"));
}

}  // namespace
}  // namespace topodra::node
