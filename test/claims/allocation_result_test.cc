// ParseClaim, BaseRequest, ResultsForDriver and ConfigsFor on inline claim JSON.
#include "driver/claims/allocation_result.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace topodra::claims {
namespace {

using json = nlohmann::json;

constexpr char kFullClaim[] = R"({
  "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
  "metadata": {"uid": "u1", "namespace": "default", "name": "c1", "resourceVersion": "7"},
  "spec": {"devices": {"requests": [{"name": "cpus", "firstAvailable": []}]}},
  "status": {"allocation": {
    "devices": {
      "results": [
        {"request": "cpus/big", "driver": "dra.cpu", "pool": "node1", "device": "cpus0",
         "shareID": "7e0c7ac1-0000-4000-8000-000000000001", "adminAccess": false,
         "consumedCapacity": {"dra.cpu/cpu": "4"}},
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node1", "device": "gpu-0",
         "adminAccess": null}
      ],
      "config": [
        {"source": "FromClaim", "requests": ["cpus"],
         "opaque": {"driver": "dra.cpu", "parameters": {"apiVersion": "v1alpha1"}}},
        {"source": "FromClass", "opaque": {"driver": "gpu.nvidia.com", "parameters": {}}}
      ]
    },
    "nodeSelector": {}
  }}
})";

TEST(ParseClaimTest, ReadsEveryField) {
  absl::StatusOr<Claim> claim = ParseClaim(json::parse(kFullClaim));
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ(claim->uid, "u1");
  EXPECT_EQ(claim->namespace_name, "default");
  EXPECT_EQ(claim->name, "c1");
  EXPECT_EQ(claim->Ref(), "default/c1");
  EXPECT_TRUE(claim->allocated);
  ASSERT_EQ(claim->results.size(), 2u);
  const DeviceResult& r = claim->results[0];
  EXPECT_EQ(r.request, "cpus/big");
  EXPECT_EQ(r.driver, "dra.cpu");
  EXPECT_EQ(r.pool, "node1");
  EXPECT_EQ(r.device, "cpus0");
  EXPECT_EQ(r.share_id, "7e0c7ac1-0000-4000-8000-000000000001");
  EXPECT_FALSE(r.admin_access);
  EXPECT_EQ(r.consumed_capacity, (std::map<std::string, std::string>{{"dra.cpu/cpu", "4"}}));
  EXPECT_EQ(claim->results[1].share_id, "");
  EXPECT_TRUE(claim->results[1].consumed_capacity.empty());
  ASSERT_EQ(claim->configs.size(), 2u);
  EXPECT_EQ(claim->configs[0].source, ConfigSource::kFromClaim);
  EXPECT_EQ(claim->configs[0].requests, std::vector<std::string>{"cpus"});
  EXPECT_EQ(claim->configs[0].driver, "dra.cpu");
  EXPECT_EQ(claim->configs[0].parameters, json::parse(R"({"apiVersion": "v1alpha1"})"));
  EXPECT_EQ(claim->configs[1].source, ConfigSource::kFromClass);
  EXPECT_TRUE(claim->configs[1].requests.empty());
  EXPECT_EQ(claim->configs[1].driver, "gpu.nvidia.com");
}

TEST(ParseClaimTest, PodsOfReservedForAreKeptForLogLinesAndOddEntriesSkipped) {
  json j = json::parse(kFullClaim);
  j["status"]["reservedFor"] = json::array({
      {{"resource", "pods"}, {"name", "trainer-0"}, {"uid", "p1"}},
      {{"apiGroup", "batch"}, {"resource", "jobs"}, {"name", "train"}, {"uid", "j1"}},
      {{"resource", "pods"}, {"name", 7}},
      "garbage",
      {{"resource", "pods"}, {"name", "trainer-1"}, {"uid", "p2"}},
  });
  absl::StatusOr<Claim> claim = ParseClaim(j);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_THAT(claim->pods, ::testing::ElementsAre("default/trainer-0", "default/trainer-1"));
  j["status"]["reservedFor"] = "not a list";
  claim = ParseClaim(j);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_TRUE(claim->pods.empty());
}

TEST(ParseClaimTest, LabelsAndTheControllerReferenceAreKeptForReservationOwners) {
  json j = json::parse(kFullClaim);
  j["metadata"]["labels"] = {{"team", "a"}, {"tier", "gold"}};
  j["metadata"]["ownerReferences"] = json::array({
      {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", "not-controller"}, {"uid", "c0"}},
      {{"apiVersion", "v1"},
       {"kind", "Pod"},
       {"name", "trainer-0"},
       {"uid", "p1"},
       {"controller", true}},
  });
  absl::StatusOr<Claim> claim = ParseClaim(j);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ(claim->labels, (std::map<std::string, std::string>{{"team", "a"}, {"tier", "gold"}}));
  ASSERT_TRUE(claim->controller.has_value());
  EXPECT_EQ(*claim->controller, (ControllerRef{"v1", "Pod", "trainer-0", "p1"}));

  j["metadata"].erase("ownerReferences");
  claim = ParseClaim(j);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_FALSE(claim->controller.has_value());
}

TEST(ParseClaimTest, UnallocatedClaims) {
  for (const char* text : {
           R"({"metadata": {"uid": "u", "namespace": "n", "name": "c"}})",
           R"({"metadata": {"uid": "u", "namespace": "n", "name": "c"}, "status": {}})",
           R"({"metadata": {"uid": "u", "namespace": "n", "name": "c"}, "status": null})",
           R"({"metadata": {"uid": "u", "namespace": "n", "name": "c"},
               "status": {"allocation": null}})",
       }) {
    absl::StatusOr<Claim> claim = ParseClaim(json::parse(text));
    ASSERT_TRUE(claim.ok()) << text << ": " << claim.status();
    EXPECT_FALSE(claim->allocated) << text;
    EXPECT_TRUE(claim->results.empty()) << text;
  }
  absl::StatusOr<Claim> empty = ParseClaim(json::parse(
      R"({"metadata": {"uid": "u", "namespace": "n", "name": "c"}, "status": {"allocation": {}}})"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->allocated);
  EXPECT_TRUE(empty->results.empty());
}

struct ParseErrorCase {
  std::string name;
  std::string json;
  std::string error;
};

std::string WithDevices(const std::string& devices) {
  return R"({"metadata": {"uid": "u", "namespace": "n", "name": "c"},
             "status": {"allocation": {"devices": )" +
         devices + "}}}";
}

constexpr char kResult[] = R"({"request": "r", "driver": "d", "pool": "p", "device": "x"})";

std::string TooManyResults() {
  std::string results = "[";
  for (int i = 0; i <= kMaxResults; ++i) results += std::string(i ? "," : "") + kResult;
  return WithDevices(R"({"results": )" + results + "]}");
}

class ParseClaimErrorTest : public ::testing::TestWithParam<ParseErrorCase> {};

TEST_P(ParseClaimErrorTest, NamesThePath) {
  absl::StatusOr<Claim> claim = ParseClaim(json::parse(GetParam().json));
  ASSERT_FALSE(claim.ok());
  EXPECT_EQ(claim.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(claim.status().message(), GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseClaimErrorTest,
    ::testing::Values(
        ParseErrorCase{"NotObject", "[]", "claim: expected an object, got array"},
        ParseErrorCase{"NoMetadata", "{}", "metadata: missing"},
        ParseErrorCase{"MetadataString", R"({"metadata": "x"})",
                       "metadata: expected an object, got string"},
        ParseErrorCase{"NoUid", R"({"metadata": {"namespace": "n", "name": "c"}})",
                       "metadata.uid: missing"},
        ParseErrorCase{"EmptyName", R"({"metadata": {"uid": "u", "namespace": "n", "name": ""}})",
                       "metadata.name: empty"},
        ParseErrorCase{"NamespaceNumber",
                       R"({"metadata": {"uid": "u", "namespace": 3, "name": "c"}})",
                       "metadata.namespace: expected a string, got number"},
        ParseErrorCase{"LabelNumber",
                       R"({"metadata": {"uid": "u", "namespace": "n", "name": "c",
                                        "labels": {"a": 1}}})",
                       "metadata.labels[\"a\"]: expected a string, got number"},
        ParseErrorCase{"ControllerKindNumber",
                       R"({"metadata": {"uid": "u", "namespace": "n", "name": "c",
                                        "ownerReferences": [{"controller": true, "kind": 1}]}})",
                       "metadata.ownerReferences[0].kind: expected a string, got number"},
        ParseErrorCase{"StatusArray",
                       R"({"metadata": {"uid": "u", "namespace": "n", "name": "c"}, "status": []})",
                       "status: expected an object, got array"},
        ParseErrorCase{"AllocationString",
                       R"({"metadata": {"uid": "u", "namespace": "n", "name": "c"},
                           "status": {"allocation": "yes"}})",
                       "status.allocation: expected an object, got string"},
        ParseErrorCase{"DevicesArray", WithDevices("[]"),
                       "status.allocation.devices: expected an object, got array"},
        ParseErrorCase{"ResultsObject", WithDevices(R"({"results": {}})"),
                       "status.allocation.devices.results: expected an array, got object"},
        ParseErrorCase{"ResultNotObject", WithDevices(R"({"results": [1]})"),
                       "status.allocation.devices.results[0]: expected an object, got number"},
        ParseErrorCase{
            "PoolNumber",
            WithDevices(std::string(R"({"results": [)") + kResult +
                        R"(, {"request": "r", "driver": "d", "pool": 1, "device": "x"}]})"),
            "status.allocation.devices.results[1].pool: expected a string, got number"},
        ParseErrorCase{
            "DeviceMissing",
            WithDevices(R"({"results": [{"request": "r", "driver": "d", "pool": "p"}]})"),
            "status.allocation.devices.results[0].device: missing"},
        ParseErrorCase{"AdminAccessString",
                       WithDevices(R"({"results": [{"request": "r", "driver": "d", "pool": "p",
                                      "device": "x", "adminAccess": "true"}]})"),
                       "status.allocation.devices.results[0].adminAccess: expected a boolean, got "
                       "string"},
        ParseErrorCase{"CapacityNumber",
                       WithDevices(R"({"results": [{"request": "r", "driver": "d", "pool": "p",
                                      "device": "x", "consumedCapacity": {"dra.cpu/cpu": 4}}]})"),
                       "status.allocation.devices.results[0].consumedCapacity[\"dra.cpu/cpu\"]: "
                       "expected a quantity string, got number"},
        ParseErrorCase{"TooManyResults", TooManyResults(),
                       "status.allocation.devices.results: 257 entries, more than 256"},
        ParseErrorCase{"ConfigObject", WithDevices(R"({"config": {}})"),
                       "status.allocation.devices.config: expected an array, got object"},
        ParseErrorCase{"UnknownSource", WithDevices(R"({"config": [{"source": "FromNowhere",
                                      "opaque": {"driver": "d", "parameters": {}}}]})"),
                       "status.allocation.devices.config[0].source: unknown source "
                       "\"FromNowhere\" (expected FromClass or FromClaim)"},
        ParseErrorCase{
            "NoSource",
            WithDevices(R"({"config": [{"opaque": {"driver": "d", "parameters": {}}}]})"),
            "status.allocation.devices.config[0].source: missing"},
        ParseErrorCase{"RequestNotString",
                       WithDevices(R"({"config": [{"source": "FromClaim", "requests": ["a", 2],
                                      "opaque": {"driver": "d", "parameters": {}}}]})"),
                       "status.allocation.devices.config[0].requests[1]: expected a string, got "
                       "number"},
        ParseErrorCase{"NoOpaque", WithDevices(R"({"config": [{"source": "FromClass"}]})"),
                       "status.allocation.devices.config[0].opaque: missing (the only config kind "
                       "this driver understands)"},
        ParseErrorCase{"NoOpaqueDriver", WithDevices(R"({"config": [{"source": "FromClass",
                                      "opaque": {"parameters": {}}}]})"),
                       "status.allocation.devices.config[0].opaque.driver: missing"},
        ParseErrorCase{"ParametersString", WithDevices(R"({"config": [{"source": "FromClass",
                                      "opaque": {"driver": "d", "parameters": "{}"}}]})"),
                       "status.allocation.devices.config[0].opaque.parameters: expected an object, "
                       "got string"},
        ParseErrorCase{"NoParameters", WithDevices(R"({"config": [{"source": "FromClass",
                                      "opaque": {"driver": "d"}}]})"),
                       "status.allocation.devices.config[0].opaque.parameters: missing"}),
    [](const ::testing::TestParamInfo<ParseErrorCase>& info) { return info.param.name; });

TEST(BaseRequestTest, StripsSubrequest) {
  EXPECT_EQ(BaseRequest("main"), "main");
  EXPECT_EQ(BaseRequest("main/sub"), "main");
  EXPECT_EQ(BaseRequest(""), "");
  EXPECT_EQ(BaseRequest("/sub"), "");
}

constexpr char kConfigsClaim[] = R"({
  "metadata": {"uid": "u1", "namespace": "default", "name": "c1"},
  "status": {"allocation": {"devices": {
    "results": [
      {"request": "cpus/big", "driver": "dra.cpu", "pool": "p", "device": "d0"},
      {"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "g0"},
      {"request": "more", "driver": "dra.cpu", "pool": "p", "device": "d1"}
    ],
    "config": [
      {"source": "FromClaim", "requests": [], "opaque": {"driver": "dra.cpu", "parameters": {"n": 0}}},
      {"source": "FromClass", "requests": ["cpus/big"],
       "opaque": {"driver": "dra.cpu", "parameters": {"n": 1}}},
      {"source": "FromClaim", "opaque": {"driver": "gpu.example.com", "parameters": {"n": 2}}},
      {"source": "FromClaim", "requests": ["cpus"],
       "opaque": {"driver": "dra.cpu", "parameters": {"n": 3}}},
      {"source": "FromClaim", "requests": ["cpus/small"],
       "opaque": {"driver": "dra.cpu", "parameters": {"n": 4}}},
      {"source": "FromClaim", "requests": ["cpu"],
       "opaque": {"driver": "dra.cpu", "parameters": {"n": 5}}},
      {"source": "FromClass", "requests": ["more", "cpus"],
       "opaque": {"driver": "dra.cpu", "parameters": {"n": 6}}}
    ]
  }}}
})";

std::vector<int> ConfigNumbers(const std::vector<const DeviceConfig*>& configs) {
  std::vector<int> out;
  for (const DeviceConfig* c : configs) out.push_back(c->parameters.at("n").get<int>());
  return out;
}

TEST(ConfigsForTest, ClassBeforeClaimInOrderMatchingBaseOrExactRequest) {
  absl::StatusOr<Claim> claim = ParseClaim(json::parse(kConfigsClaim));
  ASSERT_TRUE(claim.ok()) << claim.status();
  const std::vector<const DeviceResult*> mine = ResultsForDriver(*claim, "dra.cpu");
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[0], &claim->results[0]);
  EXPECT_EQ(mine[1], &claim->results[2]);
  EXPECT_EQ(ResultsForDriver(*claim, "gpu.example.com").size(), 1u);
  EXPECT_TRUE(ResultsForDriver(*claim, "dra.cpu.other").empty());

  // "cpus/big": class 1 (exact), class 6 (base), then claim 0 (empty), claim 3 (base); not 4
  // (another subrequest), 5 (a prefix of the name is not the name) or 2 (other driver).
  EXPECT_EQ(ConfigNumbers(ConfigsFor(*claim, claim->results[0], "dra.cpu")),
            (std::vector<int>{1, 6, 0, 3}));
  EXPECT_EQ(ConfigNumbers(ConfigsFor(*claim, claim->results[2], "dra.cpu")),
            (std::vector<int>{6, 0}));
  EXPECT_EQ(ConfigNumbers(ConfigsFor(*claim, claim->results[1], "gpu.example.com")),
            (std::vector<int>{2}));
}

}  // namespace
}  // namespace topodra::claims
