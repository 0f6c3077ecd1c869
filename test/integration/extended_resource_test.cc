// DRA extended resources (KEP-5004) on a whole node: the real `topodra run`, the fake API server
// and the kubelet simulator. The scheduler serves `resources.limits: {topodra.io/gpu: 2}` by
// creating a ResourceClaim of its own for the pod (k8s-1.35-1.37-addendum.md §2.3); the daemon
// must prepare it like any claim. A node must not also serve that name through a device plugin
// (§2.5): the daemon leaves out the device plugin of a name a DeviceClass maps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "test/integration/node_fixture.h"
#include "test/kubelet_sim/device_plugin_sim.h"
#include "test/kubelet_sim/pod_resources_sim.h"

namespace topodra::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// The daemon's spelling of a claim UID in a variable name: every other character becomes '_'.
std::string EnvSafeForTest(std::string text) {
  for (char& ch : text) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return text;
}

class ExtendedResourceTest : public NodeTest {
 protected:
  // The names of the GPU devices the daemon published (waits for the slice).
  std::vector<std::string> GpuDevices() {
    for (int i = 0; i < 500; ++i) {
      auto slices = server_->Api(
          "GET",
          "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dgpu.topodra.io");
      if (slices.ok() && !(*slices)["items"].empty()) {
        std::vector<std::string> out;
        for (const json& s : (*slices)["items"]) {
          for (const json& d : s["spec"]["devices"]) out.push_back(d["name"]);
        }
        if (!out.empty()) return out;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {};
  }

  // The chart's GPU class with its default extendedResourceName.
  void CreateGpuClass(const std::string& name = "gpu.topodra.io",
                      const std::string& resource = "topodra.io/gpu") {
    json cls = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "DeviceClass"},
        {"metadata", {{"name", name}}},
        {"spec",
         {{"selectors",
           json::array({{{"cel", {{"expression", "device.driver == \"gpu.topodra.io\""}}}}})},
          {"extendedResourceName", resource}}}};
    auto created = server_->CreateDeviceClass(cls);
    ASSERT_TRUE(created.ok()) << created.status();
  }
};

// A pod with an init container (no devices), a main container asking topodra.io/gpu: 2 and a
// sidecar asking 1: one claim, one request per container that asks, named by the container's
// index among initContainers+containers.
TEST_F(ExtendedResourceTest, TheSchedulersClaimForAnExtendedResourceIsPreparedAndUnprepared) {
  StartNode();
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10)).ok());
  CreateGpuClass();
  const std::vector<std::string> gpus = GpuDevices();
  ASSERT_GE(gpus.size(), 3u);

  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", "trainer"}, {"namespace", "default"}}},
      {"spec",
       {{"initContainers", json::array({{{"name", "fetch"}, {"image", "busybox"}}})},
        {"containers", json::array({{{"name", "main"},
                                     {"image", "busybox"},
                                     {"resources", {{"limits", {{"topodra.io/gpu", "2"}}}}}},
                                    {{"name", "sidecar"},
                                     {"image", "busybox"},
                                     {"resources", {{"limits", {{"topodra.io/gpu", "1"}}}}}}})}}}};
  auto created_pod = server_->Api("POST", "/api/v1/namespaces/default/pods", &pod);
  ASSERT_TRUE(created_pod.ok()) << created_pod.status();
  const std::string pod_uid = (*created_pod)["metadata"]["uid"];

  // What kube-scheduler's DynamicResources plugin writes in PreBind.
  json claim = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceClaim"},
                {"metadata",
                 {{"generateName", "trainer-extended-resources-"},
                  {"namespace", "default"},
                  {"annotations", {{"resource.kubernetes.io/extended-resource-claim", "true"}}},
                  {"ownerReferences", json::array({{{"apiVersion", "v1"},
                                                    {"kind", "Pod"},
                                                    {"name", "trainer"},
                                                    {"uid", pod_uid},
                                                    {"controller", true},
                                                    {"blockOwnerDeletion", true}}})}}},
                {"spec",
                 {{"devices",
                   {{"requests", json::array({{{"name", "container-1-request-0"},
                                               {"exactly",
                                                {{"deviceClassName", "gpu.topodra.io"},
                                                 {"allocationMode", "ExactCount"},
                                                 {"count", 2}}}},
                                              {{"name", "container-2-request-0"},
                                               {"exactly",
                                                {{"deviceClassName", "gpu.topodra.io"},
                                                 {"allocationMode", "ExactCount"},
                                                 {"count", 1}}}}})}}}}}};
  auto created = server_->CreateClaim(claim);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string name = (*created)["metadata"]["name"];
  ASSERT_TRUE(name.starts_with("trainer-extended-resources-")) << name;
  EXPECT_EQ(name.size(), std::string("trainer-extended-resources-").size() + 5);
  EXPECT_FALSE(
      (*created)["metadata"]["annotations"].contains("resource.kubernetes.io/pod-claim-name"));
  json allocation = {
      {"devices",
       {{"results", json::array({Result("container-1-request-0", gpus[0], "", kGpu),
                                 Result("container-1-request-0", gpus[1], "", kGpu),
                                 Result("container-2-request-0", gpus[2], "", kGpu)})}}}};
  auto allocated = server_->AllocateClaim(
      "default", name, allocation,
      json::array({{{"resource", "pods"}, {"name", "trainer"}, {"uid", pod_uid}}}));
  ASSERT_TRUE(allocated.ok()) << allocated.status();
  const PrepareClaim c{"default", (*created)["metadata"]["uid"], name};

  ClaimResult r = PrepareOne(c, kGpu);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 3u);
  const std::vector<std::string> want_requests = {"container-1-request-0", "container-1-request-0",
                                                  "container-2-request-0"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_THAT(r.devices[i].request_names, ElementsAre(want_requests[i])) << i;
    EXPECT_EQ(r.devices[i].pool, kNode);
    EXPECT_EQ(r.devices[i].device, gpus[i]);
    // The first device of each request also carries the request's device-metadata id, after
    // the hardware id (which the kubelet shows as the device's resourceID).
    std::vector<std::string> ids = {absl::StrCat("gpu.topodra.io/claim=", c.uid, "-", gpus[i])};
    if (i != 1) {
      ids.push_back(absl::StrCat("gpu.topodra.io/metadata=", c.uid, "_", want_requests[i]));
    }
    EXPECT_THAT(r.devices[i].cdi_device_ids, ElementsAreArray(ids)) << i;
  }
  const std::string spec_path = CdiPath(c.uid, kGpu);
  const json spec = json::parse(ReadFile(spec_path), nullptr, false);
  ASSERT_TRUE(spec.is_object()) << spec_path;
  ASSERT_EQ(spec["devices"].size(), 3u);
  // The main container's two GPUs are one request: both of its devices name both addresses.
  const std::string var =
      absl::StrCat("TOPODRA_GPU_", EnvSafeForTest(c.uid), "_container_1_request_0=");
  const std::string env0 = spec["devices"][0]["containerEdits"]["env"][0];
  const std::string env1 = spec["devices"][1]["containerEdits"]["env"][0];
  EXPECT_TRUE(env0.starts_with(var)) << env0;
  EXPECT_EQ(env0, env1);
  EXPECT_EQ(std::count(env0.begin(), env0.end(), ','), 1) << env0;
  const std::string env2 = spec["devices"][2]["containerEdits"]["env"][0];
  EXPECT_THAT(env2, HasSubstr("_container_2_request_0="));
  EXPECT_EQ(std::count(env2.begin(), env2.end(), ','), 0) << env2;
  // The log names the claim and, from reservedFor, its pod.
  EXPECT_THAT(daemon_.Log(), HasSubstr(absl::StrCat("claim default/", name, " uid=", c.uid,
                                                    " driver=gpu.topodra.io pod=default/trainer: "
                                                    "prepared cpus=none gpus=3 devices=3")));

  // Again, as the kubelet does after a restart: the same answer.
  ClaimResult again = PrepareOne(c, kGpu);
  ASSERT_EQ(again.error, "");
  ASSERT_EQ(again.devices.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(again.devices[i].cdi_device_ids, r.devices[i].cdi_device_ids);
  }
  EXPECT_EQ(UnprepareOne(c, kGpu), "");
  EXPECT_FALSE(fs::exists(spec_path));
  // The GPUs are free again: an ordinary claim takes one of them.
  PrepareClaim other = MakeClaim("after", json::array({Request("gpu", "gpu.topodra.io")}),
                                 json::array({Result("gpu", gpus[0], "", kGpu)}));
  EXPECT_EQ(PrepareOne(other, kGpu).error, "");
}

// The same node also runs the device plugins (--device-plugin=gpu,cpu), with the kubelet's
// device manager simulated.
class ExtendedResourceDevicePluginTest : public ExtendedResourceTest {
 protected:
  void TearDown() override {
    if (HasFailure() && dp_ != nullptr) {
      std::cerr << "device manager log:\n" << absl::StrJoin(dp_->Log(), "\n") << "\n";
    }
    dp_.reset();
    pods_.reset();
    ExtendedResourceTest::TearDown();
  }

  void StartDevicePluginNode(std::vector<std::string> extra = {}) {
    auto dp = DevicePluginSimulator::Start({dirs_.kubelet_root + "/device-plugins"});
    ASSERT_TRUE(dp.ok()) << dp.status();
    dp_ = *std::move(dp);
    auto pods = PodResourcesSimulator::Start(dirs_.kubelet_root + "/pod-resources/kubelet.sock");
    ASSERT_TRUE(pods.ok()) << pods.status();
    pods_ = *std::move(pods);
    std::vector<std::string> args = {"--device-plugin", "gpu,cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    StartNode(args);
  }

  // The device plugin's socket, as the kubelet finds it.
  std::string Socket(const std::string& resource) const {
    std::string name = resource;
    std::replace(name.begin(), name.end(), '/', '-');
    return absl::StrCat(dirs_.kubelet_root, "/device-plugins/", name, ".sock");
  }

  // Waits for the daemon's log to have `n` lines containing `part`.
  std::vector<std::string> AwaitLines(const std::string& part, size_t n = 1) {
    for (int i = 0; i < 1000; ++i) {
      std::vector<std::string> lines = LinesWith(daemon_.Log(), part);
      if (lines.size() >= n) return lines;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return LinesWith(daemon_.Log(), part);
  }

  std::unique_ptr<DevicePluginSimulator> dp_;
  std::unique_ptr<PodResourcesSimulator> pods_;
};

// The chart's GPU class maps topodra.io/gpu before the daemon starts: the GPU device plugin is
// not registered (the scheduler serves the name through DRA), the CPU one is, and the log says
// why. A class mapping topodra.io/cpu later takes the CPU plugin's socket away (the kubelet
// counts none of it allocatable, and the scheduler turns to DRA); deleting the classes brings
// both back.
TEST_F(ExtendedResourceDevicePluginTest, ADevicePluginIsNotServedForANameADeviceClassMaps) {
  CreateGpuClass();
  StartDevicePluginNode();
  auto cpu = dp_->WaitForResource("topodra.io/cpu", 1, absl::Seconds(20));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_THAT(AwaitLines("device plugin topodra.io/gpu: not served"),
              ElementsAre("device plugin topodra.io/gpu: not served: DeviceClass "
                          "\"gpu.topodra.io\" maps \"topodra.io/gpu\" "
                          "(spec.extendedResourceName), and one node must not serve a resource "
                          "through both a device plugin and DRA"));
  EXPECT_FALSE(dp_->Find("topodra.io/gpu").has_value());
  EXPECT_FALSE(fs::exists(Socket("topodra.io/gpu")));
  // The DRA side serves the GPUs as before.
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10)).ok());

  // A class comes to map the CPU plugin's name.
  json cls = {{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "DeviceClass"},
              {"metadata", {{"name", "cpus-as-extended"}}},
              {"spec", {{"extendedResourceName", "topodra.io/cpu"}}}};
  ASSERT_TRUE(server_->CreateDeviceClass(cls).ok());
  EXPECT_TRUE(dp_->WaitForEndpointGone("topodra.io/cpu", absl::Seconds(20)));
  EXPECT_THAT(AwaitLines("device plugin topodra.io/cpu: no longer served"),
              ElementsAre(HasSubstr("DeviceClass \"cpus-as-extended\" maps \"topodra.io/cpu\"")));
  EXPECT_FALSE(fs::exists(Socket("topodra.io/cpu")));

  // Both classes deleted: both plugins registered again.
  ASSERT_TRUE(
      server_->Api("DELETE", "/apis/resource.k8s.io/v1/deviceclasses/cpus-as-extended").ok());
  ASSERT_TRUE(server_->Api("DELETE", "/apis/resource.k8s.io/v1/deviceclasses/gpu.topodra.io").ok());
  auto gpu = dp_->WaitForResource("topodra.io/gpu", 1, absl::Seconds(20));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  cpu = dp_->WaitForResource("topodra.io/cpu", 2, absl::Seconds(20));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_FALSE(cpu->endpoint_gone);
  EXPECT_EQ(AwaitLines("served again: no DeviceClass maps it", 2).size(), 2u);
  // Once per change of state, not per event.
  EXPECT_EQ(LinesWith(daemon_.Log(), "no longer served").size(), 1u);
}

// A class mapping another name, or none, leaves the device plugins alone.
TEST_F(ExtendedResourceDevicePluginTest, OtherNamesLeaveTheDevicePluginsServed) {
  CreateGpuClass("gpu.example.com", "example.com/gpu");
  StartDevicePluginNode();
  for (const char* r : {"topodra.io/gpu", "topodra.io/cpu"}) {
    auto reg = dp_->WaitForResource(r, 1, absl::Seconds(20));
    ASSERT_TRUE(reg.ok()) << r << ": " << reg.status();
  }
  EXPECT_THAT(LinesWith(daemon_.Log(), ": not served"), ::testing::IsEmpty());
  EXPECT_THAT(LinesWith(daemon_.Log(), "no longer served"), ::testing::IsEmpty());
}

// --extended-resource-check=off: the operator takes it on himself.
TEST_F(ExtendedResourceDevicePluginTest, CheckOffServesEveryDevicePlugin) {
  CreateGpuClass();
  StartDevicePluginNode({"--extended-resource-check", "off"});
  auto gpu = dp_->WaitForResource("topodra.io/gpu", 1, absl::Seconds(20));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_TRUE(LinesWith(daemon_.Log(), "not served").empty());
}

// auto: an API server that forbids the list (RBAC without deviceclasses) leaves the check off,
// said once; on: the daemon does not start, and says why.
TEST_F(ExtendedResourceDevicePluginTest, AForbiddenListIsNoCheckWithAutoAndAnErrorWithOn) {
  CreateGpuClass();
  ASSERT_TRUE(server_->Control("POST", "/__control/fail?count=1&code=403&path=deviceclasses").ok());
  StartDevicePluginNode();
  auto gpu = dp_->WaitForResource("topodra.io/gpu", 1, absl::Seconds(20));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_THAT(
      LinesWith(daemon_.Log(), "DeviceClasses cannot be listed"),
      ElementsAre(HasSubstr("--extended-resource-check=auto: DeviceClasses cannot be "
                            "listed (GET /apis/resource.k8s.io/v1/deviceclasses: HTTP 403")));
  ASSERT_EQ(daemon_.Terminate(), 0);
  dp_.reset();
  pods_.reset();
  sim_.reset();

  ASSERT_TRUE(server_->Control("POST", "/__control/fail?count=1&code=403&path=deviceclasses").ok());
  StartDaemon({"--device-plugin", "gpu,cpu", "--extended-resource-check", "on"});
  EXPECT_EQ(daemon_.WaitExit(), 1);
  EXPECT_THAT(daemon_.Log(), HasSubstr("--extended-resource-check=on: cannot list DeviceClasses, "
                                       "so cannot tell whether DRA serves the device plugins' "
                                       "resources: GET /apis/resource.k8s.io/v1/deviceclasses: "
                                       "HTTP 403"));
}

}  // namespace
}  // namespace topodra::testing
