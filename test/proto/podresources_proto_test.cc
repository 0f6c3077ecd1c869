// proto/podresources/v1/api.proto against the upstream definition (kubernetes/kubernetes
// staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto and the marshalling code
// generated from it, api_vtproto.pb.go, as of releases after DynamicResource lost class_name in
// 1.31): the method path, every field's number and type, read back from the compiled
// descriptors, and one response encoded byte for byte. The table is written by hand on purpose:
// a number copied from our own .proto would check nothing.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <string>

#include "proto/deviceplugin/v1beta1/api.grpc.pb.h"
#include "proto/dra/v1/api.grpc.pb.h"
#include "proto/dra/v1beta1/api.grpc.pb.h"
#include "proto/drahealth/v1alpha1/api.grpc.pb.h"
#include "proto/pluginregistration/api.grpc.pb.h"
#include "proto/podresources/v1/api.grpc.pb.h"

namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;

struct FieldCase {
  const char* message;  // full name
  const char* field;
  int number;
  FieldDescriptor::Type type;
  bool repeated;
};

constexpr auto kString = FieldDescriptor::TYPE_STRING;
constexpr auto kMessage = FieldDescriptor::TYPE_MESSAGE;
constexpr auto kInt64 = FieldDescriptor::TYPE_INT64;
constexpr auto kUint64 = FieldDescriptor::TYPE_UINT64;

TEST(PodResourcesProtoTest, FieldsMatchUpstream) {
  v1::ListPodResourcesResponse touch;  // registers the file's descriptors
  const FieldCase cases[] = {
      {"v1.ListPodResourcesResponse", "pod_resources", 1, kMessage, true},
      {"v1.PodResources", "name", 1, kString, false},
      {"v1.PodResources", "namespace", 2, kString, false},
      {"v1.PodResources", "containers", 3, kMessage, true},
      {"v1.ContainerResources", "name", 1, kString, false},
      {"v1.ContainerResources", "devices", 2, kMessage, true},
      {"v1.ContainerResources", "cpu_ids", 3, kInt64, true},
      {"v1.ContainerResources", "memory", 4, kMessage, true},
      {"v1.ContainerResources", "dynamic_resources", 5, kMessage, true},
      {"v1.ContainerMemory", "memory_type", 1, kString, false},
      {"v1.ContainerMemory", "size", 2, kUint64, false},
      {"v1.ContainerMemory", "topology", 3, kMessage, false},
      {"v1.ContainerDevices", "resource_name", 1, kString, false},
      {"v1.ContainerDevices", "device_ids", 2, kString, true},
      {"v1.ContainerDevices", "topology", 3, kMessage, false},
      {"v1.TopologyInfo", "nodes", 1, kMessage, true},
      {"v1.NUMANode", "ID", 1, kInt64, false},
      {"v1.DynamicResource", "claim_name", 2, kString, false},
      {"v1.DynamicResource", "claim_namespace", 3, kString, false},
      {"v1.DynamicResource", "claim_resources", 4, kMessage, true},
      {"v1.ClaimResource", "cdi_devices", 1, kMessage, true},
      {"v1.ClaimResource", "driver_name", 2, kString, false},
      {"v1.ClaimResource", "pool_name", 3, kString, false},
      {"v1.ClaimResource", "device_name", 4, kString, false},
      {"v1.CDIDevice", "name", 1, kString, false},
  };
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  int total = 0;
  for (const FieldCase& c : cases) {
    SCOPED_TRACE(std::string(c.message) + "." + c.field);
    const auto* m = pool->FindMessageTypeByName(c.message);
    ASSERT_NE(m, nullptr);
    const FieldDescriptor* f = m->FindFieldByName(c.field);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->number(), c.number);
    EXPECT_EQ(f->type(), c.type);
    EXPECT_EQ(f->is_repeated(), c.repeated);
    ++total;
  }
  // No field beyond the table: an extra one would be a number nobody checked.
  int declared = 0;
  for (const char* name :
       {"v1.ListPodResourcesRequest", "v1.ListPodResourcesResponse", "v1.PodResources",
        "v1.ContainerResources", "v1.ContainerMemory", "v1.ContainerDevices", "v1.TopologyInfo",
        "v1.NUMANode", "v1.DynamicResource", "v1.ClaimResource", "v1.CDIDevice"}) {
    const auto* m = pool->FindMessageTypeByName(name);
    ASSERT_NE(m, nullptr) << name;
    declared += m->field_count();
  }
  EXPECT_EQ(declared, total);
  EXPECT_EQ(pool->FindMessageTypeByName("v1.ListPodResourcesRequest")->field_count(), 0);

  // DynamicResource's number 1 (class_name, removed in 1.31) must stay unused.
  const auto* dynamic = pool->FindMessageTypeByName("v1.DynamicResource");
  EXPECT_EQ(dynamic->FindFieldByNumber(1), nullptr);
  EXPECT_TRUE(dynamic->IsReservedNumber(1));
  // The kubelet sends cpu_ids packed (proto3's default); a decoder accepts both anyway.
  EXPECT_TRUE(pool->FindMessageTypeByName("v1.ContainerResources")
                  ->FindFieldByName("cpu_ids")
                  ->is_packed());
}

TEST(PodResourcesProtoTest, MethodPathIsV1PodResourcesListerList) {
  v1::ListPodResourcesRequest touch;
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  const auto* service = pool->FindServiceByName("v1.PodResourcesLister");
  ASSERT_NE(service, nullptr);
  const auto* list = service->FindMethodByName("List");
  ASSERT_NE(list, nullptr);
  // gRPC puts "/<package>.<service>/<method>" on the wire.
  EXPECT_EQ("/" + service->full_name() + "/" + list->name(), "/v1.PodResourcesLister/List");
  EXPECT_EQ(list->input_type()->full_name(), "v1.ListPodResourcesRequest");
  EXPECT_EQ(list->output_type()->full_name(), "v1.ListPodResourcesResponse");
  EXPECT_FALSE(list->client_streaming());
  EXPECT_FALSE(list->server_streaming());
}

// Wire format by hand: a tag is (field number << 3 | wire type); every payload here is shorter
// than 128 bytes, so each length and value is one varint byte.
std::string Len(int field, const std::string& payload) {
  EXPECT_LT(payload.size(), 128u);
  return std::string{static_cast<char>(field << 3 | 2), static_cast<char>(payload.size())} +
         payload;
}
std::string Varint(int field, int value) {
  return std::string{static_cast<char>(field << 3 | 0), static_cast<char>(value)};
}

// The bytes a kubelet would send, written from the upstream field numbers and wire types: checks
// numbers and encodings together (a varint vs packed or fixed-width slip shows here).
TEST(PodResourcesProtoTest, EncodesLikeTheKubelet) {
  v1::ListPodResourcesResponse r;
  v1::PodResources* pod = r.add_pod_resources();
  pod->set_name("p");
  pod->set_namespace_("n");
  v1::ContainerResources* c = pod->add_containers();
  c->set_name("c");
  v1::ContainerDevices* d = c->add_devices();
  d->set_resource_name("r");
  d->add_device_ids("a");
  d->add_device_ids("b");
  d->mutable_topology()->add_nodes()->set_id(1);
  c->add_cpu_ids(3);
  c->add_cpu_ids(4);
  v1::ContainerMemory* mem = c->add_memory();
  mem->set_memory_type("m");
  mem->set_size(5);
  mem->mutable_topology()->add_nodes()->set_id(0);
  v1::DynamicResource* dyn = c->add_dynamic_resources();
  dyn->set_claim_name("k");
  dyn->set_claim_namespace("s");
  v1::ClaimResource* claim = dyn->add_claim_resources();
  claim->add_cdi_devices()->set_name("x");
  claim->set_driver_name("v");
  claim->set_pool_name("o");
  claim->set_device_name("e");

  const std::string want =
      Len(1,  // ListPodResourcesResponse.pod_resources
          Len(1, "p") + Len(2, "n") +
              Len(3,  // PodResources.containers
                  Len(1, "c") +
                      Len(2,  // ContainerResources.devices
                          Len(1, "r") + Len(2, "a") + Len(2, "b") + Len(3, Len(1, Varint(1, 1)))) +
                      Len(3, std::string("\x03\x04", 2)) +  // cpu_ids, packed
                      Len(4,                                // memory
                          Len(1, "m") + Varint(2, 5) + Len(3, Len(1, ""))) +
                      Len(5,  // dynamic_resources
                          Len(2, "k") + Len(3, "s") +
                              Len(4,  // claim_resources
                                  Len(1, Len(1, "x")) + Len(2, "v") + Len(3, "o") + Len(4, "e")))));

  std::string got;
  ASSERT_TRUE(r.SerializeToString(&got));
  EXPECT_EQ(got, want);

  v1::ListPodResourcesResponse back;
  ASSERT_TRUE(back.ParseFromString(want));
  EXPECT_EQ(back.pod_resources(0).namespace_(), "n");
  EXPECT_EQ(back.pod_resources(0).containers(0).devices(0).topology().nodes(0).id(), 1);
  EXPECT_EQ(back.pod_resources(0).containers(0).memory(0).size(), 5u);
  EXPECT_EQ(
      back.pod_resources(0).containers(0).dynamic_resources(0).claim_resources(0).device_name(),
      "e");
}

// Every proto of the project in one process: a clash of full names or file names in the
// descriptor pool aborts at start-up, and C++ names clashing would not compile.
TEST(PodResourcesProtoTest, CoexistsWithTheOtherProtos) {
  pluginregistration::PluginInfo a;
  k8s::io::kubelet::pkg::apis::dra::v1::Device b;
  k8s::io::kubelet::pkg::apis::dra::v1beta1::Device c;
  v1alpha1::DeviceHealth d;
  v1beta1::NUMANode e;
  v1::NUMANode f;
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  EXPECT_NE(pool->FindFileByName("proto/podresources/v1/api.proto"), nullptr);
  EXPECT_NE(pool->FindFileByName("proto/deviceplugin/v1beta1/api.proto"), nullptr);
  EXPECT_NE(pool->FindFileByName("proto/dra/v1/api.proto"), nullptr);
  // Same short names, different packages: distinct types.
  EXPECT_NE(e.GetDescriptor(), f.GetDescriptor());
  EXPECT_EQ(f.GetDescriptor()->full_name(), "v1.NUMANode");
  EXPECT_EQ(e.GetDescriptor()->full_name(), "v1beta1.NUMANode");
  EXPECT_NE(pool->FindServiceByName("k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"), nullptr);
  EXPECT_EQ(pool->FindServiceByName("v1.DRAPlugin"), nullptr);
}

}  // namespace
