// --topology-cache with the real daemon against the fake API server: the first start discovers
// and stores the machine; the next starts from the file and publishes the same devices, the
// discovery in the background confirming it; a stored model that differs from the machine is
// republished by that discovery; a changed topology file, or the flag off, means a discovery.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "driver/kube/rest_client.h"
#include "driver/node/topology_cache.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/testing/eventually.h"
#include "test/testing/fixtures.h"

namespace {

using ::testing::HasSubstr;
using topodra::testing::Daemon;
using topodra::testing::DaemonDirs;
using topodra::testing::Eventually;
using topodra::testing::FakeApiServer;
using topodra::testing::FakeApiServerOptions;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The names of the CPU devices node-a publishes.
std::set<std::string> Devices(topodra::kube::RestClient& c) {
  absl::StatusOr<topodra::kube::Response> r =
      c.Get("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Ddra.cpu");
  std::set<std::string> out;
  if (!r.ok()) return out;
  for (const auto& item : r->body["items"]) {
    for (const auto& d : item["spec"]["devices"]) out.insert(d["name"].get<std::string>());
  }
  return out;
}

TEST(TopologyCacheDaemonTest, StartsFromTheStoredMachineAndRepublishesWhatDiffers) {
  FakeApiServerOptions o;
  o.nodes = {{"node-a", "uid-node-a"}};
  auto server = FakeApiServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const DaemonDirs dirs = DaemonDirs::Make();
  const std::string kc = (*server)->WriteKubeconfig(dirs.root + "/kc.yaml");
  auto client = topodra::kube::NewHttpRestClient(*topodra::kube::KubeconfigConfig(kc));
  ASSERT_TRUE(client.ok());
  const std::string machine = dirs.root + "/machine.xml";
  std::filesystem::copy_file(topodra::testing::FixturePath("192em64t-24n8c2t.xml"), machine);
  const std::string cache = dirs.state + "/topology-cache";
  const std::vector<std::string> args = {
      "--kubeconfig",      kc,           "--node-name",        "node-a", "--topology-file", machine,
      "--cpu-device-mode", "individual", "--topology-refresh", "3600"};
  Daemon d;

  // Nothing stored: discovered, and stored once the daemon runs.
  d.Start(dirs, args);
  ASSERT_TRUE(Eventually([&] { return Devices(**client).size() == 384; })) << d.Log();
  const std::set<std::string> discovered = Devices(**client);
  ASSERT_TRUE(Eventually([&] { return std::filesystem::exists(cache); })) << d.Log();
  EXPECT_EQ(d.Terminate(), 0);
  EXPECT_THAT(d.Log(), HasSubstr("machine discovered (no stored machine at " + cache + ")"));
  const std::string stored = ReadAll(cache);

  // Stored on this boot with the same file: the machine comes from the file, the same devices
  // are published, and the discovery in the background finds nothing else.
  d.Start(dirs, args);
  EXPECT_TRUE(Eventually([&] {
    return d.Log().find("stored machine model confirmed by the discovery") != std::string::npos;
  })) << d.Log();
  EXPECT_THAT(d.Log(), HasSubstr("machine read from " + cache));
  EXPECT_TRUE(Eventually([&] { return Devices(**client) == discovered; })) << d.Log();
  EXPECT_EQ(d.Terminate(), 0);
  EXPECT_EQ(ReadAll(cache), stored);  // nothing new to store

  // A stored model that is not the machine, under the machine's key: the daemon starts from it
  // (16 CPUs), and the discovery republishes the machine (384).
  {
    absl::StatusOr<topodra::node::StoredTopology> s = topodra::node::DecodeTopologyCache(stored);
    ASSERT_TRUE(s.ok()) << s.status();
    topodra::topology::Topology other = topodra::testing::LoadTopology("16em64t-4s2c2t.xml");
    other.source = s->topology.source;
    std::ofstream(cache, std::ios::trunc) << topodra::node::EncodeTopologyCache(s->key, other);
  }
  d.Start(dirs, args);
  EXPECT_TRUE(Eventually([&] {
    return d.Log().find("topology changed: 384 CPUs online") != std::string::npos;
  })) << d.Log();
  EXPECT_THAT(d.Log(), HasSubstr("16 CPUs online"));  // what it started from
  EXPECT_THAT(d.Log(), HasSubstr("the discovery found the machine differs from the stored model"));
  EXPECT_TRUE(Eventually([&] { return Devices(**client) == discovered; })) << d.Log();
  // The file holds the machine again.
  EXPECT_TRUE(Eventually([&] { return ReadAll(cache) == stored; }));
  EXPECT_EQ(d.Terminate(), 0);

  // Another topology file at the same path: the key differs, the machine is discovered.
  std::filesystem::copy_file(topodra::testing::FixturePath("16em64t-4s2c2t.xml"), machine,
                             std::filesystem::copy_options::overwrite_existing);
  d.Start(dirs, args);
  EXPECT_TRUE(Eventually([&] { return Devices(**client).size() == 16; })) << d.Log();
  EXPECT_EQ(d.Terminate(), 0);
  EXPECT_THAT(d.Log(),
              HasSubstr("machine discovered (stored for another machine or boot: file \""));

  // Off: discovered, the file neither read nor written.
  const std::string before_off = ReadAll(cache);
  std::vector<std::string> off = args;
  off.insert(off.end(), {"--topology-cache", "off"});
  d.Start(dirs, off);
  // The slices are those of the start before: wait for this daemon to serve.
  EXPECT_TRUE(Eventually([&] { return d.Log().find(": serving DRA") != std::string::npos; }))
      << d.Log();
  EXPECT_EQ(d.Terminate(), 0);
  EXPECT_THAT(d.Log(), HasSubstr("machine discovered (--topology-cache=off)"));
  EXPECT_EQ(ReadAll(cache), before_off);
  std::filesystem::remove_all(dirs.root);
}

}  // namespace
