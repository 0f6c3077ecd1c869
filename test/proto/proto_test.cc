// Our .proto files against the spec's tables (shared/spec/kubelet-grpc.md §1): package and
// service names, method paths and field numbers, read back from the compiled descriptors. A
// wrong number here would silently break the wire format with a real kubelet.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <string>

#include "proto/deviceplugin/v1beta1/api.grpc.pb.h"
#include "proto/dra/v1/api.grpc.pb.h"
#include "proto/dra/v1beta1/api.grpc.pb.h"
#include "proto/drahealth/v1/api.grpc.pb.h"
#include "proto/drahealth/v1alpha1/api.grpc.pb.h"
#include "proto/pluginregistration/api.grpc.pb.h"

namespace {

using google::protobuf::DescriptorPool;

struct FieldCase {
  const char* message;  // full name
  const char* field;
  int number;
};

TEST(ProtoTest, FieldNumbersMatchTheSpec) {
  // Touch each generated file so its descriptors are registered.
  pluginregistration::PluginInfo a;
  k8s::io::kubelet::pkg::apis::dra::v1::Device b;
  k8s::io::kubelet::pkg::apis::dra::v1beta1::Device c;
  v1alpha1::DeviceHealth d;
  v1beta1::Device e;
  v1::DeviceHealth f;
  const FieldCase cases[] = {
      {"pluginregistration.PluginInfo", "type", 1},
      {"pluginregistration.PluginInfo", "name", 2},
      {"pluginregistration.PluginInfo", "endpoint", 3},
      {"pluginregistration.PluginInfo", "supported_versions", 4},
      {"pluginregistration.RegistrationStatus", "plugin_registered", 1},
      {"pluginregistration.RegistrationStatus", "error", 2},
      {"k8s.io.kubelet.pkg.apis.dra.v1.NodePrepareResourcesRequest", "claims", 1},
      {"k8s.io.kubelet.pkg.apis.dra.v1.NodePrepareResourcesResponse", "claims", 1},
      {"k8s.io.kubelet.pkg.apis.dra.v1.NodePrepareResourceResponse", "devices", 1},
      {"k8s.io.kubelet.pkg.apis.dra.v1.NodePrepareResourceResponse", "error", 2},
      {"k8s.io.kubelet.pkg.apis.dra.v1.Device", "request_names", 1},
      {"k8s.io.kubelet.pkg.apis.dra.v1.Device", "pool_name", 2},
      {"k8s.io.kubelet.pkg.apis.dra.v1.Device", "device_name", 3},
      {"k8s.io.kubelet.pkg.apis.dra.v1.Device", "cdi_device_ids", 4},
      {"k8s.io.kubelet.pkg.apis.dra.v1.Device", "share_id", 5},
      {"k8s.io.kubelet.pkg.apis.dra.v1.NodeUnprepareResourceResponse", "error", 1},
      {"k8s.io.kubelet.pkg.apis.dra.v1.Claim", "namespace", 1},
      {"k8s.io.kubelet.pkg.apis.dra.v1.Claim", "uid", 2},
      {"k8s.io.kubelet.pkg.apis.dra.v1.Claim", "name", 3},
      {"k8s.io.kubelet.pkg.apis.dra.v1beta1.Device", "cdi_device_ids", 4},
      {"k8s.io.kubelet.pkg.apis.dra.v1beta1.Claim", "name", 3},
      {"v1alpha1.DeviceIdentifier", "pool_name", 1},
      {"v1alpha1.DeviceIdentifier", "device_name", 2},
      {"v1alpha1.DeviceHealth", "device", 1},
      {"v1alpha1.DeviceHealth", "health", 2},
      {"v1alpha1.DeviceHealth", "last_updated_time", 3},
      {"v1alpha1.DeviceHealth", "health_check_timeout_seconds", 4},
      {"v1alpha1.DeviceHealth", "message", 5},
      {"v1alpha1.NodeWatchResourcesResponse", "devices", 1},
      {"v1.DeviceIdentifier", "pool_name", 1},
      {"v1.DeviceIdentifier", "device_name", 2},
      {"v1.DeviceHealth", "device", 1},
      {"v1.DeviceHealth", "health", 2},
      {"v1.DeviceHealth", "last_updated_time", 3},
      {"v1.DeviceHealth", "health_check_timeout_seconds", 4},
      {"v1.DeviceHealth", "message", 5},
      {"v1.NodeWatchResourcesResponse", "devices", 1},
      {"v1beta1.DevicePluginOptions", "pre_start_required", 1},
      {"v1beta1.DevicePluginOptions", "get_preferred_allocation_available", 2},
      {"v1beta1.RegisterRequest", "version", 1},
      {"v1beta1.RegisterRequest", "endpoint", 2},
      {"v1beta1.RegisterRequest", "resource_name", 3},
      {"v1beta1.RegisterRequest", "options", 4},
      {"v1beta1.NUMANode", "ID", 1},
      {"v1beta1.Device", "ID", 1},
      {"v1beta1.Device", "health", 2},
      {"v1beta1.Device", "topology", 3},
      {"v1beta1.ContainerPreferredAllocationRequest", "available_deviceIDs", 1},
      {"v1beta1.ContainerPreferredAllocationRequest", "must_include_deviceIDs", 2},
      {"v1beta1.ContainerPreferredAllocationRequest", "allocation_size", 3},
      {"v1beta1.ContainerPreferredAllocationResponse", "deviceIDs", 1},
      {"v1beta1.ContainerAllocateRequest", "devices_ids", 1},
      {"v1beta1.ContainerAllocateResponse", "envs", 1},
      {"v1beta1.ContainerAllocateResponse", "mounts", 2},
      {"v1beta1.ContainerAllocateResponse", "devices", 3},
      {"v1beta1.ContainerAllocateResponse", "annotations", 4},
      {"v1beta1.ContainerAllocateResponse", "cdi_devices", 5},
      {"v1beta1.Mount", "read_only", 3},
      {"v1beta1.DeviceSpec", "permissions", 3},
      {"v1beta1.PreStartContainerRequest", "devices_ids", 1},
  };
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  for (const FieldCase& c : cases) {
    SCOPED_TRACE(std::string(c.message) + "." + c.field);
    const auto* m = pool->FindMessageTypeByName(c.message);
    ASSERT_NE(m, nullptr);
    const auto* f = m->FindFieldByName(c.field);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->number(), c.number);
  }
  // v1beta1 of DRA has no share_id; v1 tracks its presence (proto3 optional).
  EXPECT_EQ(pool->FindMessageTypeByName("k8s.io.kubelet.pkg.apis.dra.v1beta1.Device")
                ->FindFieldByName("share_id"),
            nullptr);
  EXPECT_TRUE(b.GetDescriptor()->FindFieldByName("share_id")->has_presence());
  EXPECT_EQ(v1alpha1::HEALTHY, 1);
  EXPECT_EQ(v1alpha1::UNHEALTHY, 2);
  EXPECT_EQ(v1::UNKNOWN, 0);
  EXPECT_EQ(v1::HEALTHY, 1);
  EXPECT_EQ(v1::UNHEALTHY, 2);
}

TEST(ProtoTest, MethodPathsMatchTheSpec) {
  const char* methods[] = {
      "/pluginregistration.Registration/GetInfo",
      "/pluginregistration.Registration/NotifyRegistrationStatus",
      "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
      "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
      "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
      "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
      "/v1alpha1.DRAResourceHealth/NodeWatchResources",
      "/v1.DRAResourceHealth/NodeWatchResources",
      "/v1beta1.Registration/Register",
      "/v1beta1.DevicePlugin/GetDevicePluginOptions",
      "/v1beta1.DevicePlugin/ListAndWatch",
      "/v1beta1.DevicePlugin/GetPreferredAllocation",
      "/v1beta1.DevicePlugin/Allocate",
      "/v1beta1.DevicePlugin/PreStartContainer",
  };
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  pluginregistration::InfoRequest touch1;
  k8s::io::kubelet::pkg::apis::dra::v1::Claim touch2;
  k8s::io::kubelet::pkg::apis::dra::v1beta1::Claim touch3;
  v1alpha1::NodeWatchResourcesRequest touch4;
  v1beta1::Empty touch5;
  v1::NodeWatchResourcesRequest touch6;
  for (const std::string path : methods) {
    SCOPED_TRACE(path);
    const size_t slash = path.rfind('/');
    const auto* service = pool->FindServiceByName(path.substr(1, slash - 1));
    ASSERT_NE(service, nullptr);
    EXPECT_NE(service->FindMethodByName(path.substr(slash + 1)), nullptr);
  }
  EXPECT_TRUE(pool->FindMethodByName("v1beta1.DevicePlugin.ListAndWatch")->server_streaming());
  EXPECT_TRUE(
      pool->FindMethodByName("v1alpha1.DRAResourceHealth.NodeWatchResources")->server_streaming());
  EXPECT_TRUE(
      pool->FindMethodByName("v1.DRAResourceHealth.NodeWatchResources")->server_streaming());
}

}  // namespace
