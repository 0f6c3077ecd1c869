// The node daemon as an object: the XML discoverer, a stub API server, real kubelet sockets in a
// temporary directory. Start and stop order, a machine change republished, a second instance
// refused.
#include "driver/node/node.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "test/node/fake_mapping_source.h"
#include "test/node/stub_rest_client.h"
#include "test/testing/eventually.h"
#include "test/testing/fixtures.h"

namespace topodra::node {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using topodra::testing::Eventually;

class NodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodeXXXXXX";  // short: socket paths must fit in 107 bytes
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  NodeConfig Config() const {
    NodeConfig c;
    c.publish.node_name = "node1";
    c.slice_mixins = publish::MixinMode::kOff;
    c.reservation_taints = publish::TaintMode::kOff;
    c.reservations = false;
    c.kubelet_root_dir = dir_ + "/k";
    c.cdi_dir = dir_ + "/cdi";
    c.state_dir = dir_ + "/state";
    c.host_root = dir_ + "/host";
    c.enforce = Enforce::kNone;
    c.metrics_listen.reset();
    c.health_listen.reset();
    c.version = "test";
    return c;
  }

  // The machine the node discovers: `fixture` until changed.
  NodeDeps Deps() {
    NodeDeps d;
    d.client = &api_;
    d.discover = [this]() -> absl::StatusOr<topology::Topology> {
      std::lock_guard<std::mutex> lock(mu_);
      return topodra::testing::LoadTopology(fixture_);
    };
    d.watch_uevents = false;
    return d;
  }
  void SetMachine(const std::string& fixture) {
    std::lock_guard<std::mutex> lock(mu_);
    fixture_ = fixture;
  }
  std::unique_ptr<Node> Create(NodeConfig config) {
    absl::StatusOr<std::unique_ptr<Node>> node =
        Node::Create(std::move(config), *Deps().discover(), Deps());
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? *std::move(node) : nullptr;
  }

  std::string dir_;
  testing::StubRestClient api_;
  std::mutex mu_;
  std::string fixture_ = "16em64t-4s2c2t.xml";
};

TEST_F(NodeTest, StartsInOrderServesTheKubeletAndStopsInReverse) {
  std::unique_ptr<Node> node = Create(Config());
  ASSERT_NE(node, nullptr);
  EXPECT_THAT(node->ComponentNames(), ElementsAre("dra-drivers", "publishing", "machine-watch"));
  const std::string sock = dir_ + "/k/plugins/dra.cpu/dra.sock";
  EXPECT_FALSE(std::filesystem::exists(sock));
  ASSERT_TRUE(node->Start().ok());
  EXPECT_TRUE(std::filesystem::exists(sock));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/k/plugins_registry/dra.cpu-reg.sock"));
  // 16 CPUs on one NUMA node: one grouped device.
  EXPECT_TRUE(Eventually([&] { return api_.Devices("dra.cpu") == 1; })) << api_.Devices("dra.cpu");
  node->Stop();
  EXPECT_FALSE(std::filesystem::exists(sock));
  node->Stop();  // idempotent
}

TEST_F(NodeTest, EveryConfiguredComponentHasItsPlace) {
  NodeConfig c = Config();
  fixture_ = "nvidiaDGX2.xml";
  c.device_plugin.kinds = {DevicePluginKind::kGpu, DevicePluginKind::kCpu};
  c.reservations = true;
  c.health_listen = "127.0.0.1:0";
  std::unique_ptr<Node> node = Create(c);
  ASSERT_NE(node, nullptr);
  EXPECT_THAT(node->ComponentNames(), ElementsAre("dra-drivers", "device-plugins", "health-metrics",
                                                  "publishing", "reservations", "machine-watch"));
}

TEST_F(NodeTest, MachineChangeIsRepublished) {
  NodeConfig c = Config();
  c.publish.cpu_mode = publish::CpuDeviceMode::kIndividual;
  std::unique_ptr<Node> node = Create(c);
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(node->Start().ok());
  const size_t before = node->inventory().CpuPool()->devices.size();
  EXPECT_EQ(before, 16u);
  EXPECT_TRUE(Eventually([&] { return api_.Devices("dra.cpu") == before; }));
  EXPECT_FALSE(node->OnMachineChanged());  // the same machine: nothing to do
  SetMachine("16em64t-4s2c2t-offlines.xml");
  EXPECT_TRUE(node->OnMachineChanged());
  const size_t after = node->inventory().CpuPool()->devices.size();
  EXPECT_LT(after, before);
  EXPECT_TRUE(Eventually([&] { return api_.Devices("dra.cpu") == after; }))
      << api_.Devices("dra.cpu");
  EXPECT_FALSE(node->OnMachineChanged());
  node->Stop();
}

// What SIGUSR1 does: the machine watch rediscovers now, not at the next --topology-refresh.
TEST_F(NodeTest, ARequestedRediscoveryRunsOnTheMachineWatch) {
  NodeConfig c = Config();
  c.publish.cpu_mode = publish::CpuDeviceMode::kIndividual;
  c.topology_refresh = absl::Hours(1);
  std::unique_ptr<Node> node = Create(c);
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(node->Start().ok());
  SetMachine("16em64t-4s2c2t-offlines.xml");
  node->RequestRediscovery();
  EXPECT_TRUE(Eventually([&] { return node->inventory().CpuPool()->devices.size() < 16; }));
  node->Stop();
}

// --topology-cache: the machine kept in the state directory, on a key read from a tree of the
// test's own (the boot id is all a synthetic-source key reads).
class StoredTopologyTest : public NodeTest {
 protected:
  void SetUp() override {
    NodeTest::SetUp();
    std::filesystem::create_directories(dir_ + "/root/proc/sys/kernel/random");
    std::ofstream(dir_ + "/root/proc/sys/kernel/random/boot_id") << "b1\n";
    MachineKeyInputs in;
    in.source = topology::TopologySource::Synthetic("the test's machine");
    in.version = "test";
    in.root = dir_ + "/root";
    cache_ = std::make_shared<TopologyCache>(dir_ + "/state", in);
  }
  // Create as `topodra run` does: the file when its key matches, else a discovery.
  std::unique_ptr<Node> CreateAtStart(NodeConfig config, bool* from_cache) {
    NodeDeps deps = Deps();
    absl::StatusOr<StartTopology> start = FindTopologyAtStart(cache_.get(), deps.discover);
    EXPECT_TRUE(start.ok()) << start.status();
    if (!start.ok()) return nullptr;
    *from_cache = start->from_cache;
    topology::Topology topo = std::move(start->topology);
    deps.topology_cache = cache_;
    deps.topology_start = *std::move(start);
    if (hook_) deps.file_check_ending = [this] { hook_(); };
    absl::StatusOr<std::unique_ptr<Node>> node =
        Node::Create(std::move(config), std::move(topo), std::move(deps));
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? *std::move(node) : nullptr;
  }
  // Individual CPU devices; the machine watch discovers at its first turn only.
  NodeConfig OneTurnConfig() const {
    NodeConfig c = Config();
    c.publish.cpu_mode = publish::CpuDeviceMode::kIndividual;
    c.topology_refresh = absl::Hours(1);
    return c;
  }
  // Stored under this boot's key: the machine with CPUs offline (7 online). The machine the
  // node discovers has all 16. Returns the key.
  absl::StatusOr<MachineKey> StoreOfflines() {
    absl::StatusOr<MachineKey> key = cache_->ReadKey();
    if (!key.ok()) return key.status();
    absl::Status st =
        cache_->Store(*key, topodra::testing::LoadTopology("16em64t-4s2c2t-offlines.xml"));
    if (!st.ok()) return st;
    return key;
  }

  std::shared_ptr<TopologyCache> cache_;
  std::function<void()> hook_;  // the nodes' file_check_ending
};

TEST_F(StoredTopologyTest, AStartFromTheStoredModelServesWhatADiscoveredStartDoes) {
  NodeConfig c = Config();
  c.publish.cpu_mode = publish::CpuDeviceMode::kIndividual;
  fixture_ = "nvidiaDGX2.xml";  // CPUs, GPUs, PCIe roots, distances
  bool from_cache = true;
  std::unique_ptr<Node> first = CreateAtStart(c, &from_cache);
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(from_cache);
  const std::string file = dir_ + "/state/topology-cache";
  EXPECT_FALSE(std::filesystem::exists(file));  // stored by the running node, not at Create
  ASSERT_TRUE(first->Start().ok());
  EXPECT_TRUE(Eventually([&] { return std::filesystem::exists(file); }));
  const Inventory discovered = first->inventory();
  first->Stop();
  first.reset();

  std::unique_ptr<Node> second = CreateAtStart(c, &from_cache);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(from_cache);
  const Inventory stored = second->inventory();
  EXPECT_TRUE(stored.SamePools(discovered));
  EXPECT_TRUE(stored.topology() == discovered.topology());
  EXPECT_EQ(stored.CpuSetup().cpu_pool.devices.size(),
            discovered.CpuSetup().cpu_pool.devices.size());
  EXPECT_EQ(stored.PublishedGpus().size(), 16u);
  ASSERT_TRUE(second->Start().ok());
  EXPECT_TRUE(Eventually([&] { return api_.Devices("gpu.topodra.io") == 16; }));
  second->Stop();
}

TEST_F(StoredTopologyTest, TheConfirmingDiscoveryRepublishesAStoredModelThatDiffers) {
  const NodeConfig c = OneTurnConfig();
  absl::StatusOr<MachineKey> key = StoreOfflines();
  ASSERT_TRUE(key.ok()) << key.status();
  bool from_cache = false;
  std::unique_ptr<Node> node = CreateAtStart(c, &from_cache);
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(from_cache);
  EXPECT_EQ(node->inventory().CpuPool()->devices.size(), 7u);
  ASSERT_TRUE(node->Start().ok());
  EXPECT_TRUE(Eventually([&] { return node->inventory().CpuPool()->devices.size() == 16; }));
  EXPECT_TRUE(Eventually([&] { return api_.Devices("dra.cpu") == 16; })) << api_.Devices("dra.cpu");
  // And the file holds the machine now.
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<topology::Topology> now = cache_->Load(*key);
    return now.ok() && now->cpus.size() == 16;
  }));
  node->Stop();
}

// The stored model's confirming discovery (hwloc, a CPU for a fifth of a second on a large
// machine) waits for the DRA drivers' checks of their claims' files: held here, nothing is
// rediscovered; released, the machine as it is now is published.
TEST_F(StoredTopologyTest, TheConfirmingDiscoveryWaitsForTheClaimFileChecks) {
  const NodeConfig c = OneTurnConfig();
  ASSERT_TRUE(StoreOfflines().ok());
  std::mutex mu;
  std::condition_variable cv;
  int held = 0;
  bool released = false;
  hook_ = [&] {
    std::unique_lock<std::mutex> lock(mu);
    ++held;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  };
  bool from_cache = false;
  std::unique_ptr<Node> node = CreateAtStart(c, &from_cache);
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(from_cache);
  auto release = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      released = true;
    }
    cv.notify_all();
  };
  // Released before the node is destroyed whatever fails, or its Stop would wait for the hold.
  struct Releaser {
    std::function<void()> f;
    ~Releaser() { f(); }
  } releaser{release};
  ASSERT_TRUE(node->Start().ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return held == 1; }));
  }
  // The machine watch's first turn came at Start; without the wait it has rediscovered by now.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(node->inventory().CpuPool()->devices.size(), 7u);
  release();
  EXPECT_TRUE(Eventually([&] { return node->inventory().CpuPool()->devices.size() == 16; }));
  node->Stop();
}

// A stopped node leaves its state and locks to the next one on the same directories.
TEST_F(NodeTest, RestartsOnTheStateItLeft) {
  {
    std::unique_ptr<Node> first = Create(Config());
    ASSERT_NE(first, nullptr);
    ASSERT_TRUE(first->Start().ok());
  }  // destroyed without Stop: the destructor stops it
  std::unique_ptr<Node> second = Create(Config());
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(second->Start().ok());
  second->Stop();
}

TEST_F(NodeTest, ASecondInstanceOnTheSameStateIsRefused) {
  std::unique_ptr<Node> first = Create(Config());
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<Node>> second = Node::Create(Config(), *Deps().discover(), Deps());
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("topodra.lock"));
}

TEST_F(NodeTest, BadConfigIsRefusedBeforeAnythingIsWritten) {
  NodeConfig c = Config();
  c.device_plugin.kinds = {DevicePluginKind::kGpu};
  c.device_plugin.gpu_resource = "kubernetes.io/gpu";
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(c, *Deps().discover(), Deps());
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(node.status().message(),
              HasSubstr("--device-plugin-gpu-resource: resource name \"kubernetes.io/gpu\" is not "
                        "an extended resource name"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/state"));
}

// --extended-resource-check: the device plugin of a resource a DeviceClass maps has no socket;
// it gets one when no class maps it, and loses it when one does again.
TEST_F(NodeTest, ADevicePluginWhoseResourceADeviceClassMapsIsNotServed) {
  NodeConfig c = Config();
  fixture_ = "nvidiaDGX2.xml";
  c.device_plugin.kinds = {DevicePluginKind::kGpu, DevicePluginKind::kCpu};
  auto classes = std::make_shared<testing::FakeMappingSource::Shared>();
  classes->list = std::vector<deviceclass::Mapping>{{"gpu.topodra.io", "topodra.io/gpu"}};
  NodeDeps deps = Deps();
  deps.device_classes = [classes] { return std::make_unique<testing::FakeMappingSource>(classes); };
  topology::Topology topo = *deps.discover();
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(c, std::move(topo), std::move(deps));
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_TRUE((*node)->Start().ok());
  const std::string gpu = dir_ + "/k/device-plugins/topodra.io-gpu.sock";
  const std::string cpu = dir_ + "/k/device-plugins/topodra.io-cpu.sock";
  EXPECT_TRUE(std::filesystem::exists(cpu));
  EXPECT_FALSE(std::filesystem::exists(gpu));
  classes->Push({});
  EXPECT_TRUE(std::filesystem::exists(gpu));
  classes->Push({{"b", "topodra.io/gpu"}, {"a", "topodra.io/cpu"}});
  EXPECT_FALSE(std::filesystem::exists(gpu));
  EXPECT_FALSE(std::filesystem::exists(cpu));
  (*node)->Stop();
  EXPECT_TRUE(classes->stopped);
}

TEST_F(NodeTest, ExtendedResourceCheckOnStopsTheStartWhenDeviceClassesCannotBeListed) {
  NodeConfig c = Config();
  c.device_plugin.kinds = {DevicePluginKind::kCpu};
  c.device_plugin.extended_resource_check = deviceclass::CheckMode::kOn;
  auto classes = std::make_shared<testing::FakeMappingSource::Shared>();
  classes->list = absl::PermissionDeniedError("HTTP 403 Forbidden");
  NodeDeps deps = Deps();
  deps.device_classes = [classes] { return std::make_unique<testing::FakeMappingSource>(classes); };
  topology::Topology topo = *deps.discover();
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Create(c, std::move(topo), std::move(deps));
  ASSERT_TRUE(node.ok()) << node.status();
  absl::Status st = (*node)->Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("--extended-resource-check=on: cannot list DeviceClasses"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/k/device-plugins/topodra.io-cpu.sock"));
}

// ---- ComponentList with components that record what happens to them.

class Recorder : public Component {
 public:
  Recorder(const char* name, std::vector<std::string>* log, bool fail = false)
      : name_(name), log_(log), fail_(fail) {}
  const char* name() const override { return name_; }
  absl::Status Start() override {
    log_->push_back(std::string("start ") + name_);
    return fail_ ? absl::UnavailableError(name_) : absl::OkStatus();
  }
  void Stop() override { log_->push_back(std::string("stop ") + name_); }
  void OnInventory(const Inventory&) override { log_->push_back(std::string("inv ") + name_); }

 private:
  const char* name_;
  std::vector<std::string>* log_;
  bool fail_;
};

TEST(ComponentListTest, StopsInReverseStartOrder) {
  std::vector<std::string> log;
  {
    ComponentList list;
    list.Add(std::make_unique<Recorder>("a", &log));
    list.Add(std::make_unique<Recorder>("b", &log));
    list.Add(std::make_unique<Recorder>("c", &log));
    ASSERT_TRUE(list.Start().ok());
    list.OnInventory(Inventory{});
    list.Stop();
    list.Stop();
  }
  EXPECT_THAT(log, ElementsAre("start a", "start b", "start c", "inv a", "inv b", "inv c", "stop c",
                               "stop b", "stop a"));
}

TEST(ComponentListTest, AFailedStartStopsWhatStarted) {
  std::vector<std::string> log;
  ComponentList list;
  list.Add(std::make_unique<Recorder>("a", &log));
  list.Add(std::make_unique<Recorder>("b", &log));
  list.Add(std::make_unique<Recorder>("c", &log, /*fail=*/true));
  list.Add(std::make_unique<Recorder>("d", &log));
  const absl::Status st = list.Start();
  EXPECT_EQ(st, absl::UnavailableError("c"));
  list.Stop();
  EXPECT_THAT(log, ElementsAre("start a", "start b", "start c", "stop b", "stop a"));
}

TEST(ComponentListTest, DestroyingStopsWhatRuns) {
  std::vector<std::string> log;
  {
    ComponentList list;
    list.Add(std::make_unique<Recorder>("a", &log));
    list.Add(std::make_unique<Recorder>("b", &log));
    ASSERT_TRUE(list.Start().ok());
  }
  EXPECT_THAT(log, ElementsAre("start a", "start b", "stop b", "stop a"));
}

}  // namespace
}  // namespace topodra::node
