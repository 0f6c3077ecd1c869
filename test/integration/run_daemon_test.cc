// The real `topodra run` binary against the fake API server: publishes both drivers, survives
// the server going away, and stops cleanly on SIGTERM.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "driver/kube/rest_client.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/testing/eventually.h"
#include "test/testing/fixtures.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using topodra::testing::FakeApiServer;
using topodra::testing::FakeApiServerOptions;

using topodra::testing::Daemon;
using topodra::testing::DaemonDirs;
using topodra::testing::Eventually;

// Every daemon gets directories of its own: never /var/lib, and tests can run side by side.
void Start(Daemon& d, const std::vector<std::string>& extra) {
  static const DaemonDirs dirs = DaemonDirs::Make();
  d.Start(dirs, extra);
}

size_t SliceCount(topodra::kube::RestClient& c, const std::string& driver) {
  absl::StatusOr<topodra::kube::Response> r =
      c.Get("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3D" + driver);
  return r.ok() ? r->body["items"].size() : 0;
}

std::string Fixture(const std::string& name) { return topodra::testing::FixturePath(name); }

// The harness never lets a test point the daemon at the host's directories: it stops the test
// before the daemon starts.
TEST(RunDaemonDeathTest, APathFlagOutsideTheTestsDirectoriesStopsTheTest) {
  const DaemonDirs dirs = DaemonDirs::Make();
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--cdi-dir", "/var/run/cdi"},
           {"--hook-dir=/opt/topodra/bin"},
           {"--enforce", "cgroup", "--cgroup-root", "/sys/fs/cgroup"}}) {
    EXPECT_DEATH(
        {
          Daemon d;
          d.Start(dirs, extra);
        },
        "is not a temporary directory of the test")
        << extra[0];
  }
  std::filesystem::remove_all(dirs.root);
}

TEST(RunDaemonTest, PublishesBothDriversAndStopsOnSigterm) {
  FakeApiServerOptions o;
  o.tls = true;
  o.token = "daemon-token";
  o.nodes = {{"node-a", "uid-node-a"}};
  auto server = FakeApiServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string kc = (*server)->WriteKubeconfig(::testing::TempDir() + "/run_kc.yaml");
  auto config = topodra::kube::KubeconfigConfig(kc);
  ASSERT_TRUE(config.ok());
  auto client = topodra::kube::NewHttpRestClient(*config);
  ASSERT_TRUE(client.ok());

  Daemon d;
  Start(d, {"--kubeconfig", kc, "--node-name", "node-a", "--topology-file",
            Fixture("192em64t-24n8c2t.xml"), "--cpu-device-mode", "individual",
            "--topology-refresh", "1"});
  // 384 CPUs in three slices; this machine's only display controller is a BMC: no GPU slices.
  EXPECT_TRUE(Eventually([&] { return SliceCount(**client, "dra.cpu") == 3; })) << d.Log();
  // The server goes away and comes back empty: the daemon notices and publishes again.
  ASSERT_TRUE((*server)->Restart().ok());
  EXPECT_TRUE(Eventually([&] { return SliceCount(**client, "dra.cpu") == 3; })) << d.Log();
  EXPECT_EQ(d.Terminate(), 0);
  const std::string log = d.Log();
  EXPECT_THAT(log, HasSubstr("starting on node node-a"));
  EXPECT_THAT(log, HasSubstr("published 3 ResourceSlices"));
  EXPECT_THAT(log, HasSubstr("received SIGTERM, stopping"));
}

// The alpha-gated fields end to end: flags -> config -> devices -> probes -> the fake server of
// a 1.36 cluster with both gates on (list attributes kept, the 1.36 node-allocatable field).
TEST(RunDaemonTest, ListAttributesAndTheV136NodeAllocatableFieldReachTheServer) {
  FakeApiServerOptions o;
  o.nodes = {{"node-a", "uid-node-a"}};
  o.extra_args = {"--list-attributes", "accept", "--node-allocatable", "v1.36"};
  auto server = FakeApiServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string kc = (*server)->WriteKubeconfig(::testing::TempDir() + "/gated_kc.yaml");
  auto config = topodra::kube::KubeconfigConfig(kc);
  ASSERT_TRUE(config.ok());
  auto client = topodra::kube::NewHttpRestClient(*config);
  ASSERT_TRUE(client.ok());
  Daemon d;
  Start(d, {"--kubeconfig", kc, "--node-name", "node-a", "--topology-file",
            Fixture("power8gpudistances.xml"), "--node-allocatable-mapping", "auto",
            "--slice-mixins", "off"});
  auto device = [&](const std::string& driver) {
    absl::StatusOr<topodra::kube::Response> r = (*client)->Get(
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3D" + driver);
    if (!r.ok() || r->body["items"].empty()) return nlohmann::json();
    return r->body["items"][0]["spec"]["devices"][0];
  };
  EXPECT_TRUE(Eventually([&] {
    return device("dra.cpu").contains("nodeAllocatableResourceMappings") &&
           !device("gpu.topodra.io").is_null();
  })) << d.Log();
  const nlohmann::json cpu = device("dra.cpu");
  EXPECT_EQ(cpu["name"], "cpudevnuma000");
  EXPECT_EQ(cpu["attributes"]["resource.kubernetes.io/pcieRoot"],
            nlohmann::json::parse(R"({"strings": ["pci0002:00", "pci0003:00"]})"));
  EXPECT_EQ(cpu["nodeAllocatableResourceMappings"],
            nlohmann::json::parse(
                R"({"cpu": {"capacityKey": "dra.cpu/cpu", "allocationMultiplier": "1"}})"));
  EXPECT_FALSE(cpu.contains("nodeAllocatableResources"));
  EXPECT_EQ(device("gpu.topodra.io")["attributes"]["resource.kubernetes.io/pcieRoot"],
            nlohmann::json::parse(R"({"string": "pci0002:00"})"));
  EXPECT_EQ(d.Terminate(), 0);
  EXPECT_THAT(d.Log(), HasSubstr("with list attributes, with nodeAllocatableResourceMappings"));
}

// The stored pool of `driver` on node-a: {name -> generation}, when every slice says it is one of
// `count` in one generation, else empty.
std::map<std::string, int64_t> CompletePool(topodra::kube::RestClient& c, const std::string& driver,
                                            size_t count) {
  absl::StatusOr<topodra::kube::Response> r =
      c.Get("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3D" + driver);
  if (!r.ok() || r->body["items"].size() != count) return {};
  std::map<std::string, int64_t> out;
  for (const auto& item : r->body["items"]) {
    const auto& pool = item["spec"]["pool"];
    if (pool["resourceSliceCount"] != count || pool["name"] != "node-a" ||
        pool["generation"] != r->body["items"][0]["spec"]["pool"]["generation"]) {
      return {};
    }
    out[item["metadata"]["name"]] = pool["generation"].get<int64_t>();
  }
  return out;
}

TEST(RunDaemonTest, KubeletWipeOfAnIndividualPoolHeals) {
  FakeApiServerOptions o;
  o.nodes = {{"node-a", "uid-node-a"}};
  auto server = FakeApiServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string kc = (*server)->WriteKubeconfig(::testing::TempDir() + "/run_kc_wipe.yaml");
  auto client = topodra::kube::NewHttpRestClient(*topodra::kube::KubeconfigConfig(kc));
  ASSERT_TRUE(client.ok());

  Daemon d;
  Start(d, {"--kubeconfig", kc, "--node-name", "node-a", "--topology-file",
            Fixture("192em64t-24n8c2t.xml"), "--cpu-device-mode", "individual"});
  const std::vector<std::string> names = {"node-a-dra.cpu-0", "node-a-dra.cpu-1",
                                          "node-a-dra.cpu-2"};
  int64_t generation = 0;
  const auto healed = [&] {
    const std::map<std::string, int64_t> pool = CompletePool(**client, "dra.cpu", 3);
    if (pool.empty() || pool.begin()->second <= generation) return false;
    std::vector<std::string> got;
    for (const auto& [name, g] : pool) got.push_back(name);
    EXPECT_EQ(got, names);
    generation = pool.begin()->second;
    return true;
  };
  ASSERT_TRUE(Eventually(healed)) << d.Log();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    // What the kubelet does at its start (shared/spec kubelet-grpc.md §4.6): one DELETE of the
    // collection of every slice of its node.
    absl::StatusOr<topodra::kube::Response> wiped = (*client)->Delete(
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a",
        {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}});
    ASSERT_TRUE(wiped.ok()) << wiped.status();
    EXPECT_EQ(wiped->body["items"].size(), 3u);
    const int64_t before = generation;
    EXPECT_TRUE(Eventually(healed)) << "stored " << SliceCount(**client, "dra.cpu") << " slices\n"
                                    << d.Log();
    EXPECT_GT(generation, before);
  }
  EXPECT_EQ(d.Terminate(), 0);
  // A wipe is healed, not failed and retried.
  EXPECT_THAT(d.Log(), Not(HasSubstr("retrying with backoff")));
}

TEST(RunDaemonTest, RemovesStaleGpuSlicesWhenGpusAreOff) {
  FakeApiServerOptions o;
  o.nodes = {{"node-a", "uid-node-a"}};
  auto server = FakeApiServer::Start(o);
  ASSERT_TRUE(server.ok());
  const std::string kc = (*server)->WriteKubeconfig(::testing::TempDir() + "/run_kc2.yaml");
  auto client = topodra::kube::NewHttpRestClient(*topodra::kube::KubeconfigConfig(kc));
  {
    Daemon d;
    Start(d, {"--kubeconfig", kc, "--node-name", "node-a", "--topology-file",
              Fixture("nvidiaDGX2.xml")});
    EXPECT_TRUE(Eventually([&] { return SliceCount(**client, "gpu.topodra.io") == 1; })) << d.Log();
    EXPECT_EQ(d.Terminate(), 0);
  }
  Daemon d;
  Start(d, {"--kubeconfig", kc, "--node-name", "node-a", "--topology-file",
            Fixture("nvidiaDGX2.xml"), "--gpus", "none"});
  EXPECT_TRUE(Eventually([&] { return SliceCount(**client, "gpu.topodra.io") == 0; })) << d.Log();
  EXPECT_EQ(SliceCount(**client, "dra.cpu"), 1u);
  EXPECT_EQ(d.Terminate(), 0);
}

TEST(RunDaemonTest, BadConfigurationIsOneLineAndExitCodeTwo) {
  const std::string bad = ::testing::TempDir() + "/bad_kc.yaml";
  std::ofstream(bad) << "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--kubeconfig", bad, "--node-name", "n1"}, "nowhere"},
      {{"--node-name", "n1", "--slice-mixins", "maybe"}, "maybe"},
      {{"--node-name", "n1", "--reserved-cpus", "0-"}, "--reserved-cpus"},
  };
  for (const Case& c : cases) {
    Daemon d;
    Start(d, c.args);
    EXPECT_EQ(d.WaitExit(), 2);
    const std::string log = d.Log();
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
    EXPECT_THAT(log, HasSubstr(c.message));
  }
}

}  // namespace
