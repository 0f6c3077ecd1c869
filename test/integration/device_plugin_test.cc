// The real `topodra run --device-plugin=gpu,cpu` as the kubelet's device manager sees it: the
// device-plugin side of the kubelet simulator (kubelet.sock Registration, connect-back,
// ListAndWatch, GetPreferredAllocation, Allocate), the kubelet's PodResources API simulated, and
// the DRA side on the same node, over real Unix sockets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "proto/deviceplugin/v1beta1/api.grpc.pb.h"
#include "test/integration/node_fixture.h"
#include "test/kubelet_sim/device_plugin_sim.h"
#include "test/kubelet_sim/pod_resources_sim.h"
#include "test/testing/private_net.h"

namespace topodra::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kGpuResource[] = "topodra.io/gpu";
constexpr char kCpuResource[] = "topodra.io/cpu";

bool HealthyIs(const std::vector<PluginDevice>& devices, const std::string& id, bool healthy) {
  for (const PluginDevice& d : devices) {
    if (d.id == id) return (d.health == "Healthy") == healthy;
  }
  return false;
}

class DevicePluginTest : public NodeTest {
 protected:
  void TearDown() override {
    if (HasFailure() && dp_ != nullptr) {
      std::cerr << "device manager log:\n" << absl::StrJoin(dp_->Log(), "\n") << "\n";
    }
    dp_.reset();
    pods_.reset();
    NodeTest::TearDown();
  }

  std::string PodResourcesPath() const {
    return dirs_.kubelet_root + "/pod-resources/kubelet.sock";
  }

  // The kubelet's device manager and PodResources API first, as on a node where the kubelet is
  // up; then the daemon and the DRA side; waits until both resources are registered.
  void StartDevicePluginNode(std::vector<std::string> extra = {},
                             const std::string& machine = kMachine) {
    auto dp = DevicePluginSimulator::Start({dirs_.kubelet_root + "/device-plugins"});
    ASSERT_TRUE(dp.ok()) << dp.status();
    dp_ = *std::move(dp);
    auto pods = PodResourcesSimulator::Start(PodResourcesPath());
    ASSERT_TRUE(pods.ok()) << pods.status();
    pods_ = *std::move(pods);
    std::vector<std::string> args = {"--device-plugin", "gpu,cpu",
                                     "--device-plugin-reclaim-interval", "0.2"};
    args.insert(args.end(), extra.begin(), extra.end());
    StartNode(args, machine);
    for (const char* r : {kGpuResource, kCpuResource}) {
      auto reg = dp_->WaitForResource(r, 1, absl::Seconds(20));
      ASSERT_TRUE(reg.ok()) << r << ": " << reg.status() << "\n" << daemon_.Log();
    }
  }

  std::vector<PluginDevice> Devices(const std::string& resource) {
    auto devices = dp_->WaitForDevices(
        resource, [](const std::vector<PluginDevice>& d) { return !d.empty(); }, absl::Seconds(10));
    EXPECT_TRUE(devices.ok()) << devices.status();
    return devices.ok() ? *devices : std::vector<PluginDevice>{};
  }

  bool WaitHealth(const std::string& resource, const std::string& id, bool healthy) {
    return dp_
        ->WaitForDevices(
            resource, [&](const std::vector<PluginDevice>& d) { return HealthyIs(d, id, healthy); },
            absl::Seconds(10))
        .ok();
  }

  // A DRA claim for the GPU the DRA driver publishes as `device`.
  PrepareClaim GpuClaim(const std::string& name, const std::string& device) {
    return MakeClaim(name, json::array({Request("gpu", kGpu)}),
                     json::array({Result("gpu", device, "", kGpu)}));
  }

  // The DRA device name of the GPU with PCI bus id `pci` ("gpu-0000-84-00-0"-style names are the
  // publisher's business: look it up in the slice).
  std::string GpuDeviceName(const std::string& pci) {
    FirstGpu();  // waits for the slice
    auto slices = server_->Api(
        "GET",
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dgpu.topodra.io");
    if (!slices.ok()) return "";
    for (const json& slice : (*slices)["items"]) {
      for (const json& d : slice["spec"]["devices"]) {
        const json attrs = d.value("attributes", json::object());
        for (const auto& [k, v] : attrs.items()) {
          if (v.contains("string") && v["string"] == pci) return d["name"];
        }
      }
    }
    return "";
  }

  std::unique_ptr<DevicePluginSimulator> dp_;
  std::unique_ptr<PodResourcesSimulator> pods_;
};

TEST_F(DevicePluginTest, RegistersBothResourcesAndListsDevicesWithNuma) {
  StartDevicePluginNode();
  auto gpu = dp_->Find(kGpuResource);
  ASSERT_TRUE(gpu.has_value());
  EXPECT_EQ(gpu->endpoint, "topodra.io-gpu.sock");
  EXPECT_EQ(gpu->version, "v1beta1");
  EXPECT_TRUE(gpu->preferred_allocation_available);
  EXPECT_FALSE(gpu->pre_start_required);
  struct stat st {};
  ASSERT_EQ(::stat((dirs_.kubelet_root + "/device-plugins/topodra.io-gpu.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  const std::vector<PluginDevice> gpus = Devices(kGpuResource);
  std::map<std::string, std::vector<int64_t>> numa;
  for (const PluginDevice& d : gpus) {
    EXPECT_EQ(d.health, "Healthy") << d.id;
    numa[d.id] = d.numa_nodes;
  }
  EXPECT_THAT(numa["0000:03:00.0"], ElementsAre(0));
  EXPECT_THAT(numa["0000:84:00.0"], ElementsAre(1));
  EXPECT_THAT(numa["0000:84:00.1"], ElementsAre(1));

  const std::vector<PluginDevice> cpus = Devices(kCpuResource);
  ASSERT_EQ(cpus.size(), 32u);
  EXPECT_EQ(cpus[2].id, "2");
  EXPECT_EQ(cpus[10].id, "10");
  EXPECT_THAT(cpus[8].numa_nodes, ElementsAre(1));   // CPU 8 is on NUMA node 1
  EXPECT_THAT(cpus[16].numa_nodes, ElementsAre(0));  // CPU 16 is CPU 0's sibling
}

TEST_F(DevicePluginTest, ReservedCpusAreNotListed) {
  StartDevicePluginNode({"--reserved-cpus", "0,16"});
  const std::vector<PluginDevice> cpus = Devices(kCpuResource);
  ASSERT_EQ(cpus.size(), 30u);
  EXPECT_EQ(cpus[0].id, "1");
  auto a = dp_->Allocate(kCpuResource, {{"0"}});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("CPU 0 is reserved"));
}

TEST_F(DevicePluginTest, PreferredAllocationIsTopologyAligned) {
  StartDevicePluginNode();
  std::vector<std::string> all_gpus;
  for (const PluginDevice& d : Devices(kGpuResource)) all_gpus.push_back(d.id);
  // NUMA node 1 holds three of them; two functions of one board are closest.
  auto two = dp_->GetPreferredAllocation(kGpuResource, all_gpus, {}, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_THAT(*two, ElementsAre("0000:84:00.0", "0000:84:00.1"));
  auto with = dp_->GetPreferredAllocation(kGpuResource, all_gpus, {"0000:03:00.0"}, 2);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_THAT(*with, ::testing::Contains("0000:03:00.0"));
  auto too_many = dp_->GetPreferredAllocation(kGpuResource, {"0000:03:00.0"}, {}, 2);
  EXPECT_FALSE(too_many.ok());

  std::vector<std::string> all_cpus;
  for (const PluginDevice& d : Devices(kCpuResource)) all_cpus.push_back(d.id);
  auto core = dp_->GetPreferredAllocation(kCpuResource, all_cpus, {}, 2);
  ASSERT_TRUE(core.ok()) << core.status();
  EXPECT_THAT(*core, ElementsAre("0", "16"));  // one whole core
  auto node1 = dp_->GetPreferredAllocation(kCpuResource, all_cpus, {"8"}, 4);
  ASSERT_TRUE(node1.ok()) << node1.status();
  EXPECT_THAT(*node1, ElementsAre("8", "9", "24", "25"));  // two whole cores of NUMA node 1
}

TEST_F(DevicePluginTest, AllocateGivesCdiDevicesAndEnvAndWritesTheSpec) {
  StartDevicePluginNode();
  auto gpus = dp_->Allocate(kGpuResource, {{"0000:84:00.1", "0000:84:00.0"}});
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].envs["TOPODRA_GPUS"], "0000:84:00.0,0000:84:00.1");
  ASSERT_EQ((*gpus)[0].cdi_devices.size(), 1u);
  const std::string cdi = (*gpus)[0].cdi_devices[0];
  ASSERT_THAT(cdi, ::testing::StartsWith("topodra.io/gpu="));
  const std::string id = cdi.substr(std::string("topodra.io/gpu=").size());
  const std::string file =
      absl::StrCat(dirs_.cdi, "/topodra.io_gpu-dp_", id, "_i", CdiMarker(), ".json");
  const json spec = json::parse(ReadFile(file), nullptr, false);
  ASSERT_TRUE(spec.is_object()) << file;
  EXPECT_EQ(spec["kind"], "topodra.io/gpu");
  EXPECT_EQ(spec["devices"][0]["name"], id);

  // The same devices again (the kubelet re-issues Allocate after a node reboot race): same answer.
  auto again = dp_->Allocate(kGpuResource, {{"0000:84:00.0", "0000:84:00.1"}});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].cdi_devices, (*gpus)[0].cdi_devices);

  auto cpus = dp_->Allocate(kCpuResource, {{"3", "19", "2", "18"}});
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_EQ((*cpus)[0].envs["TOPODRA_CPUSET"], "2-3,18-19");
  ASSERT_EQ((*cpus)[0].cdi_devices.size(), 1u);
  EXPECT_THAT((*cpus)[0].cdi_devices[0], ::testing::StartsWith("topodra.io/cpu="));
}

TEST_F(DevicePluginTest, AllocateRejectsUnknownAndMalformedIds) {
  StartDevicePluginNode();
  auto unknown = dp_->Allocate(kGpuResource, {{"0000:ff:00.0"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown GPU \"0000:ff:00.0\""));
  auto cpu = dp_->Allocate(kCpuResource, {{"99"}});
  ASSERT_FALSE(cpu.ok());
  EXPECT_THAT(cpu.status().message(), HasSubstr("CPU 99 does not exist"));
  auto bad = dp_->Allocate(kCpuResource, {{"cpu1"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("\"cpu1\" is not a CPU id"));
  auto twice = dp_->Allocate(kCpuResource, {{"1", "1"}});
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(), HasSubstr("listed twice"));
}

// One allocation state: a GPU or CPU prepared through DRA is not handed out here, and the
// other way round; ListAndWatch reports DRA-held devices as unhealthy and healthy again.
TEST_F(DevicePluginTest, DraAndDevicePluginNeverShareADevice) {
  StartDevicePluginNode();
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10)).ok());
  const std::string name = GpuDeviceName("0000:84:00.0");
  ASSERT_FALSE(name.empty());
  PrepareClaim claim = GpuClaim("dra-gpu", name);
  ASSERT_EQ(PrepareOne(claim, kGpu).error, "");
  EXPECT_TRUE(WaitHealth(kGpuResource, "0000:84:00.0", false));
  auto taken = dp_->Allocate(kGpuResource, {{"0000:84:00.0"}});
  ASSERT_FALSE(taken.ok());
  EXPECT_THAT(taken.status().message(), HasSubstr("claim default/dra-gpu"));
  // Not offered as a preference either, even when the kubelet lists it.
  auto preferred = dp_->GetPreferredAllocation(
      kGpuResource, {"0000:84:00.0", "0000:84:00.1", "0000:83:00.0"}, {}, 2);
  ASSERT_TRUE(preferred.ok()) << preferred.status();
  EXPECT_THAT(*preferred, ElementsAre("0000:83:00.0", "0000:84:00.1"));
  ASSERT_EQ(UnprepareOne(claim, kGpu), "");
  EXPECT_TRUE(WaitHealth(kGpuResource, "0000:84:00.0", true));

  // The other way: a device-plugin GPU cannot be prepared through DRA.
  ASSERT_TRUE(dp_->Allocate(kGpuResource, {{"0000:84:00.0"}}).ok());
  PrepareClaim late = GpuClaim("dra-late", name);
  EXPECT_THAT(PrepareOne(late, kGpu).error, HasSubstr("device-plugin allocation topodra.io/gpu/"));

  // CPUs: a device-plugin CPU is not taken by a DRA claim's cpuset, and a DRA CPU is unhealthy.
  ASSERT_TRUE(dp_->Allocate(kCpuResource, {{"5"}}).ok());
  PrepareClaim cpuset = CpuClaim("dra-cpu", "cpudevnuma000", "1", Cpuset("5"));
  EXPECT_THAT(PrepareOne(cpuset).error,
              HasSubstr("CPU 5 is already prepared for device-plugin allocation topodra.io/cpu/"));
  PrepareClaim grouped = CpuClaim("dra-grouped", "cpudevnuma000", "2");
  ASSERT_EQ(PrepareOne(grouped).error, "");
  const CpuSet dra = CdiCpus(grouped.uid);
  ASSERT_EQ(dra.Size(), 2);
  EXPECT_FALSE(dra.Contains(5));
  EXPECT_TRUE(WaitHealth(kCpuResource, std::to_string(*dra.begin()), false));
}

TEST_F(DevicePluginTest, SeveralListAndWatchStreamsEachGetEveryChange) {
  StartDevicePluginNode();
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10)).ok());
  auto channel =
      grpc::CreateChannel("unix:" + dirs_.kubelet_root + "/device-plugins/topodra.io-cpu.sock",
                          grpc::InsecureChannelCredentials());
  auto stub = ::v1beta1::DevicePlugin::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto reader = stub->ListAndWatch(&ctx, ::v1beta1::Empty());
  ::v1beta1::ListAndWatchResponse first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_EQ(first.devices_size(), 32);
  PrepareClaim claim = CpuClaim("watched", "cpudevnuma000", "1", Cpuset("7"));
  ASSERT_EQ(PrepareOne(claim).error, "");
  ::v1beta1::ListAndWatchResponse next;
  ASSERT_TRUE(reader->Read(&next));
  int unhealthy = 0;
  for (const auto& d : next.devices()) {
    if (d.health() == "Unhealthy") {
      ++unhealthy;
      EXPECT_EQ(d.id(), "7");
    }
  }
  EXPECT_EQ(unhealthy, 1);
  // The simulator's own stream saw it too.
  EXPECT_TRUE(WaitHealth(kCpuResource, "7", false));
  ctx.TryCancel();
}

TEST_F(DevicePluginTest, KubeletRestartMeansAFreshSocketAndRegisteringAgain) {
  StartDevicePluginNode();
  const std::string socket = dirs_.kubelet_root + "/device-plugins/topodra.io-gpu.sock";
  ASSERT_TRUE(dp_->RestartKubelet().ok());
  for (const char* r : {kGpuResource, kCpuResource}) {
    auto reg = dp_->WaitForResource(r, 2, absl::Seconds(20));
    ASSERT_TRUE(reg.ok()) << r << ": " << reg.status() << "\n" << daemon_.Log();
    EXPECT_TRUE(reg->connected);
  }
  struct stat after {};
  ASSERT_EQ(::stat(socket.c_str(), &after), 0);
  EXPECT_THAT(daemon_.Log(), HasSubstr("serving a fresh socket and registering again"));
  // The new streams carry the list, and calls work on the new socket.
  auto devices = dp_->WaitForDevices(
      kGpuResource, [](const auto& d) { return !d.empty(); }, absl::Seconds(10));
  ASSERT_TRUE(devices.ok()) << devices.status();
  EXPECT_TRUE(dp_->Allocate(kGpuResource, {{"0000:03:00.0"}}).ok());
}

// Issue 15: a file that is not a socket in the place of ours is not the daemon's to delete, and
// was logged twice every 250 ms. Now: one line when it appears, one when it is gone.
TEST_F(DevicePluginTest, AFileInPlaceOfTheSocketIsLeftAloneAndLoggedOnceEachWay) {
  StartDevicePluginNode();
  const std::string socket = dirs_.kubelet_root + "/device-plugins/topodra.io-gpu.sock";
  PutFileInPlaceOf(socket, "not a socket\n");
  const std::string refused =
      "device plugin topodra.io/gpu: " + socket +
      " is a regular file, not a socket; the daemon leaves it alone (it removes only its own "
      "sockets) and serves no socket there until it is removed";
  for (int i = 0; i < 200 && LinesWith(daemon_.Log(), refused).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // A few more checks of the watcher (every 250 ms) go by while it stays.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(ReadFile(socket), "not a socket\n");
  ASSERT_TRUE(fs::remove(socket));
  auto reg = dp_->WaitForResource(kGpuResource, 2, absl::Seconds(20));
  ASSERT_TRUE(reg.ok()) << reg.status() << "\n" << daemon_.Log();
  EXPECT_TRUE(fs::is_socket(fs::symlink_status(socket)));
  EXPECT_TRUE(dp_->Allocate(kGpuResource, {{"0000:03:00.0"}}).ok());
  EXPECT_EQ(daemon_.Terminate(), 0);
  EXPECT_THAT(
      LinesWith(daemon_.Log(), socket),
      ::testing::ElementsAre(
          "device plugin topodra.io/gpu: serving v1beta1.DevicePlugin on " + socket, refused,
          "device plugin topodra.io/gpu: " + socket +
              " is served again (before: a regular file was in its place); registering "
              "again"));
}

TEST_F(DevicePluginTest, RegistersOnceTheKubeletComesUp) {
  // The daemon first: no kubelet.sock yet, so it keeps trying.
  StartNode({"--device-plugin", "gpu"});
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  auto dp = DevicePluginSimulator::Start({dirs_.kubelet_root + "/device-plugins"});
  ASSERT_TRUE(dp.ok()) << dp.status();
  dp_ = *std::move(dp);
  auto reg = dp_->WaitForResource(kGpuResource, 1, absl::Seconds(20));
  ASSERT_TRUE(reg.ok()) << reg.status() << "\n" << daemon_.Log();
  EXPECT_FALSE(dp_->Find(kCpuResource).has_value());
}

TEST_F(DevicePluginTest, AllocationsAreReleasedWhenNoPodUsesThemAnyMore) {
  StartDevicePluginNode();
  auto a = dp_->Allocate(kGpuResource, {{"0000:84:00.0"}});
  ASSERT_TRUE(a.ok()) << a.status();
  pods_->Set({{"default", "trainer", "main", kGpuResource, {"0000:84:00.0"}}});
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10)).ok());
  const std::string name = GpuDeviceName("0000:84:00.0");
  // Several reclaim passes: still in use, still held.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  PrepareClaim claim = GpuClaim("after-pod", name);
  EXPECT_THAT(PrepareOne(claim, kGpu).error, HasSubstr("device-plugin allocation"));
  const std::string file =
      absl::StrCat(dirs_.cdi, "/topodra.io_gpu-dp_",
                   (*a)[0].cdi_devices[0].substr(std::string("topodra.io/gpu=").size()), "_i",
                   CdiMarker(), ".json");
  EXPECT_TRUE(fs::exists(file));
  // The pod is gone: released after two listings without it.
  pods_->Set({});
  std::string error = "not tried";
  for (int i = 0; i < 100 && !error.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    error = PrepareOne(claim, kGpu).error;
  }
  EXPECT_EQ(error, "");
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(DevicePluginTest, NothingIsReleasedWhileTheKubeletCannotBeAsked) {
  StartDevicePluginNode();
  pods_->FailWith(absl::UnavailableError("kubelet busy"));
  ASSERT_TRUE(dp_->Allocate(kCpuResource, {{"4"}}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_GE(pods_->list_calls(), 3);
  PrepareClaim cpuset = CpuClaim("needs-4", "cpudevnuma000", "1", Cpuset("4"));
  EXPECT_THAT(PrepareOne(cpuset).error, HasSubstr("device-plugin allocation"));
  EXPECT_THAT(daemon_.Log(), HasSubstr("cannot list the kubelet's pod resources"));
}

TEST_F(DevicePluginTest, AllocationsSurviveKill9AndRestart) {
  StartDevicePluginNode();
  auto a = dp_->Allocate(kGpuResource, {{"0000:03:00.0"}});
  ASSERT_TRUE(a.ok()) << a.status();
  pods_->Set({{"default", "p", "c", kGpuResource, {"0000:03:00.0"}}});
  const std::string id = (*a)[0].cdi_devices[0].substr(std::string("topodra.io/gpu=").size());
  const std::string file =
      absl::StrCat(dirs_.cdi, "/topodra.io_gpu-dp_", id, "_i", CdiMarker(), ".json");
  sim_.reset();
  daemon_.Kill();
  fs::remove(file);  // lost in the power cut
  ASSERT_TRUE(dp_->RestartKubelet().ok());
  StartNode({"--device-plugin", "gpu,cpu", "--device-plugin-reclaim-interval", "0.2"});
  ASSERT_TRUE(dp_->WaitForResource(kGpuResource, 2, absl::Seconds(20)).ok()) << daemon_.Log();
  EXPECT_TRUE(fs::exists(file));
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10)).ok());
  PrepareClaim claim = GpuClaim("after-restart", GpuDeviceName("0000:03:00.0"));
  EXPECT_THAT(PrepareOne(claim, kGpu).error, HasSubstr("device-plugin allocation"));
  auto same = dp_->Allocate(kGpuResource, {{"0000:03:00.0"}});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)[0].cdi_devices, (*a)[0].cdi_devices);
}

// The same node in a network namespace of its own (the fake API server and the daemon start in
// it), so the test can send the kernel's uevent group an event without writing the host's /sys.
class DevicePluginPrivateNetTest : public DevicePluginTest {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace (CI runs as root)";
    host_net_ = CurrentNetwork();
    netns_error_ = EnterPrivateNetwork();
    DevicePluginTest::SetUp();
  }
  // Back to the host's namespace, so later tests of the same process (a plain run of this
  // binary, --gtest_repeat) are not left in this one.
  void TearDown() override {
    DevicePluginTest::TearDown();
    LeavePrivateNetwork(host_net_);
    host_net_ = -1;
  }
  std::string netns_error_;
  int host_net_ = -1;
};

// A GPU that disappears leaves the ListAndWatch list at once, not at the next periodic
// rediscovery: the kernel's uevent wakes the daemon. Here the machine is a topology file the test
// edits, and the uevent is one the test sends in its private network namespace.
TEST_F(DevicePluginPrivateNetTest, AGpuThatDisappearsLeavesTheListAtOnce) {
  ASSERT_EQ(netns_error_, "");
  const std::string xml = dirs_.root + "/machine.xml";
  fs::copy_file(FixturePath(kMachine), xml);
  StartDevicePluginNode({"--topology-refresh", "3600"}, xml);
  ASSERT_TRUE(WaitHealth(kGpuResource, "0000:03:00.0", true));
  ASSERT_THAT(daemon_.Log(), ::testing::Not(HasSubstr("no kernel uevents")));
  const size_t before = Devices(kGpuResource).size();
  // The same machine without its PCI device 0000:03:00.0 (an object with no children).
  std::string text = ReadFile(xml);
  const size_t at = text.find("pci_busid=\"0000:03:00.0\"");
  ASSERT_NE(at, std::string::npos);
  const size_t begin = text.rfind("<object", at);
  const size_t end = text.find("</object>", at) + std::string("</object>").size();
  text.erase(begin, end - begin);
  std::ofstream(xml + ".new") << text;
  fs::rename(xml + ".new", xml);
  using namespace std::string_literals;
  ASSERT_EQ(SendUevent("remove@/devices/pci0000:00/0000:00:02.0/0000:03:00.0\0ACTION=remove\0"
                       "DEVPATH=/devices/pci0000:00/0000:00:02.0/0000:03:00.0\0SUBSYSTEM=pci\0"s),
            "");
  auto gone = dp_->WaitForDevices(
      kGpuResource,
      [](const std::vector<PluginDevice>& d) {
        return !d.empty() && std::none_of(d.begin(), d.end(), [](const PluginDevice& x) {
          return x.id == "0000:03:00.0";
        });
      },
      absl::Seconds(10));
  ASSERT_TRUE(gone.ok()) << gone.status() << "\n" << daemon_.Log();
  EXPECT_EQ(gone->size(), before - 1);
}

TEST_F(DevicePluginTest, BadResourceNameIsRefusedAtStart) {
  StartDaemon({"--device-plugin", "gpu", "--device-plugin-gpu-resource", "kubernetes.io/gpu"});
  EXPECT_NE(daemon_.WaitExit(), 0);
  EXPECT_THAT(daemon_.Log(), HasSubstr("is not an extended resource name"));
}

}  // namespace
}  // namespace topodra::testing
