// ParseSpec / ParseObject / owner matching, table-driven on inline JSON.
#include "driver/reservation/spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace topodra::reservation {
namespace {

using json = nlohmann::json;

json Base() {
  return json::parse(R"({"nodeName": "n1", "cpus": {"count": 4},
                         "owners": [{"namespace": "team-a"}]})");
}

TEST(ParseSpecTest, ReadsEveryField) {
  json j = json::parse(R"({
    "nodeName": "n1",
    "cpus": {"count": 3, "cpuset": "4-5,9", "numaNode": 1, "socket": 0},
    "gpus": {"devices": ["gpu-0000-3b-00-0", "0000:86:00.0"]},
    "owners": [
      {"namespace": "a", "claimName": "c"},
      {"claimSelector": {"matchLabels": {"app": "x"},
                         "matchExpressions": [{"key": "tier", "operator": "In",
                                               "values": ["gold", "silver"]},
                                              {"key": "canary", "operator": "DoesNotExist"}]}},
      {"controller": {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j1"}}
    ],
    "ttl": "1h30m",
    "preAllocation": true,
    "allocateOnce": false
  })");
  absl::StatusOr<Spec> s = ParseSpec(j);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->node_name, "n1");
  ASSERT_TRUE(s->cpus.has_value());
  EXPECT_EQ(s->cpus->count, 3);
  EXPECT_EQ(s->cpus->cpuset->ToString(), "4-5,9");
  EXPECT_EQ(s->cpus->numa_node, 1);
  EXPECT_EQ(s->cpus->socket, 0);
  ASSERT_TRUE(s->gpus.has_value());
  EXPECT_EQ(s->gpus->count, 2);
  EXPECT_THAT(s->gpus->devices, ::testing::ElementsAre("gpu-0000-3b-00-0", "0000:86:00.0"));
  ASSERT_EQ(s->owners.size(), 3u);
  EXPECT_EQ(s->owners[0].ns, "a");
  EXPECT_EQ(s->owners[0].claim_name, "c");
  ASSERT_TRUE(s->owners[1].claim_selector.has_value());
  EXPECT_EQ(s->owners[1].claim_selector->match_expressions.size(), 2u);
  EXPECT_EQ(s->owners[2].controller->kind, "Job");
  EXPECT_EQ(s->ttl, absl::Minutes(90));
  EXPECT_FALSE(s->expires.has_value());
  EXPECT_TRUE(s->pre_allocation);
  EXPECT_FALSE(s->allocate_once);
}

TEST(ParseSpecTest, Defaults) {
  absl::StatusOr<Spec> s = ParseSpec(Base());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->pre_allocation);
  EXPECT_TRUE(s->allocate_once);
  EXPECT_FALSE(s->ttl.has_value());
  EXPECT_FALSE(s->gpus.has_value());
  json j = Base();
  j["cpus"] = {{"cpuset", "0-7"}};
  s = ParseSpec(j);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cpus->count, 8);  // from the cpuset
  j["expires"] = "2026-11-22T10:00:00Z";
  s = ParseSpec(j);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Rfc3339(*s->expires), "2026-11-22T10:00:00Z");
}

struct BadCase {
  std::string name;
  std::function<void(json&)> edit;
  std::string error;
};

class ParseSpecErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ParseSpecErrorTest, NamesThePathAndValue) {
  json j = Base();
  GetParam().edit(j);
  absl::StatusOr<Spec> s = ParseSpec(j);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.status().message()), GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseSpecErrorTest,
    ::testing::Values(
        BadCase{"NoNode", [](json& j) { j.erase("nodeName"); }, "spec.nodeName: missing"},
        BadCase{"NothingHeld", [](json& j) { j.erase("cpus"); },
                "spec: holds neither cpus nor gpus"},
        BadCase{"CountZero", [](json& j) { j["cpus"]["count"] = 0; },
                "spec.cpus.count: 0 is not in [1, 65536]"},
        BadCase{"CountString", [](json& j) { j["cpus"]["count"] = "4"; },
                "spec.cpus.count: expected an integer, got string \"4\""},
        BadCase{"BadCpuset",
                [](json& j) {
                  j["cpus"] = {{"cpuset", "4-x"}};
                },
                "spec.cpus.cpuset: invalid cpuset \"4-x\": \"x\" at position 2 is not a CPU id"},
        BadCase{"CountDiffers",
                [](json& j) {
                  j["cpus"] = {{"cpuset", "0-3"}, {"count", 2}};
                },
                "spec.cpus.count: 2 differs from the 4 CPUs of cpuset \"0-3\""},
        BadCase{"CpusEmpty", [](json& j) { j["cpus"] = json::object(); },
                "spec.cpus: needs count or cpuset"},
        BadCase{"GpuDeviceTwice",
                [](json& j) {
                  j["gpus"] = {{"devices", {"gpu-a", "gpu-a"}}};
                },
                "spec.gpus.devices[1]: \"gpu-a\" is listed twice"},
        BadCase{"NoOwners", [](json& j) { j.erase("owners"); }, "spec.owners: missing"},
        BadCase{"OwnersEmpty", [](json& j) { j["owners"] = json::array(); },
                "spec.owners: 0 owners (want 1 to 16)"},
        BadCase{"OwnerMatchesAll", [](json& j) { j["owners"] = {json::object()}; },
                "spec.owners[0]: names nothing to match (namespace, claimName, claimSelector or "
                "controller)"},
        BadCase{"BadOperator",
                [](json& j) {
                  j["owners"] = {{{"claimSelector",
                                   {{"matchExpressions", {{{"key", "a"}, {"operator", "Gt"}}}}}}}};
                },
                "spec.owners[0].claimSelector.matchExpressions[0].operator: \"Gt\" is not In, "
                "NotIn, Exists or DoesNotExist"},
        BadCase{"InWithoutValues",
                [](json& j) {
                  j["owners"] = {{{"claimSelector",
                                   {{"matchExpressions", {{{"key", "a"}, {"operator", "In"}}}}}}}};
                },
                "spec.owners[0].claimSelector.matchExpressions[0].values: In needs at least one "
                "value"},
        BadCase{"EmptySelector",
                [](json& j) {
                  j["owners"] = {{{"claimSelector", json::object()}}};
                },
                "spec.owners[0].claimSelector: empty (it would match every claim)"},
        BadCase{"TtlTooLong", [](json& j) { j["ttl"] = "87841h"; },
                "spec.ttl: \"87841h\" is longer than ten years"},
        BadCase{"ControllerWithoutKind",
                [](json& j) {
                  j["owners"] = {{{"controller", {{"name", "x"}}}}};
                },
                "spec.owners[0].controller.kind: missing"},
        BadCase{"TtlAndExpires",
                [](json& j) {
                  j["ttl"] = "1h";
                  j["expires"] = "2026-11-22T10:00:00Z";
                },
                "spec: ttl and expires are mutually exclusive"},
        BadCase{"BadTtl", [](json& j) { j["ttl"] = "1d"; },
                "spec.ttl: \"1d\" is not a duration (units ms, s, m, h)"},
        BadCase{"BadExpires", [](json& j) { j["expires"] = "tomorrow"; },
                "spec.expires: \"tomorrow\" is not an RFC 3339 time"},
        BadCase{"PreAllocationString", [](json& j) { j["preAllocation"] = "yes"; },
                "spec.preAllocation: expected a boolean, got string \"yes\""}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(ParseDurationTest, GoDurations) {
  EXPECT_EQ(*ParseDuration("30m"), absl::Minutes(30));
  EXPECT_EQ(*ParseDuration("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseDuration("90s"), absl::Seconds(90));
  EXPECT_EQ(*ParseDuration("1500ms"), absl::Milliseconds(1500));
  for (const char* bad : {"", "m", "1", "1x", "-1h", "1.5h", "h1"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
}

TEST(ParseObjectTest, KeepsABadSpecForTheStatus) {
  json obj = {{"metadata",
               {{"name", "r1"},
                {"uid", "u1"},
                {"resourceVersion", "7"},
                {"generation", 2},
                {"creationTimestamp", "2026-11-22T10:00:00Z"}}},
              {"spec", {{"nodeName", "n1"}}}};
  absl::StatusOr<Object> o = ParseObject(obj);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->name, "r1");
  EXPECT_EQ(o->generation, 2);
  EXPECT_EQ(Rfc3339(o->created), "2026-11-22T10:00:00Z");
  EXPECT_FALSE(o->parsed.has_value());
  EXPECT_EQ(o->spec_error, "spec: holds neither cpus nor gpus");
  EXPECT_FALSE(o->deleting);
  obj["metadata"]["deletionTimestamp"] = "2026-11-22T11:00:00Z";
  EXPECT_TRUE(ParseObject(obj)->deleting);
  obj["metadata"].erase("uid");
  EXPECT_FALSE(ParseObject(obj).ok());
}

claims::Claim ClaimOf(const std::string& ns, const std::string& name,
                      std::map<std::string, std::string> labels = {},
                      std::optional<claims::ControllerRef> controller = std::nullopt) {
  claims::Claim c;
  c.uid = "c-" + name;
  c.namespace_name = ns;
  c.name = name;
  c.labels = std::move(labels);
  c.controller = std::move(controller);
  return c;
}

struct OwnerCase {
  std::string name;
  json owner;
  claims::Claim claim;
  bool matches;
};

class OwnerMatchTest : public ::testing::TestWithParam<OwnerCase> {};

TEST_P(OwnerMatchTest, Matches) {
  json spec = Base();
  spec["owners"] = {GetParam().owner};
  absl::StatusOr<Spec> s = ParseSpec(spec);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(IsOwner(*s, GetParam().claim), GetParam().matches);
}

const claims::ControllerRef kPod{"v1", "Pod", "trainer-0", "p1"};

INSTANTIATE_TEST_SUITE_P(
    Cases, OwnerMatchTest,
    ::testing::Values(
        OwnerCase{"Namespace", {{"namespace", "a"}}, ClaimOf("a", "c"), true},
        OwnerCase{"OtherNamespace", {{"namespace", "a"}}, ClaimOf("b", "c"), false},
        OwnerCase{"ClaimName", {{"claimName", "c"}}, ClaimOf("x", "c"), true},
        OwnerCase{"OtherClaimName", {{"claimName", "c"}}, ClaimOf("x", "d"), false},
        OwnerCase{"NamespaceAndNameBothNeeded",
                  {{"namespace", "a"}, {"claimName", "c"}},
                  ClaimOf("b", "c"),
                  false},
        OwnerCase{"MatchLabels",
                  {{"claimSelector", {{"matchLabels", {{"app", "x"}}}}}},
                  ClaimOf("a", "c", {{"app", "x"}, {"more", "y"}}),
                  true},
        OwnerCase{"MatchLabelsWrongValue",
                  {{"claimSelector", {{"matchLabels", {{"app", "x"}}}}}},
                  ClaimOf("a", "c", {{"app", "y"}}),
                  false},
        OwnerCase{"In",
                  {{"claimSelector",
                    {{"matchExpressions",
                      {{{"key", "tier"}, {"operator", "In"}, {"values", {"gold", "silver"}}}}}}}},
                  ClaimOf("a", "c", {{"tier", "silver"}}),
                  true},
        OwnerCase{"NotInAbsentKey",
                  {{"claimSelector",
                    {{"matchExpressions",
                      {{{"key", "tier"}, {"operator", "NotIn"}, {"values", {"gold"}}}}}}}},
                  ClaimOf("a", "c"),
                  true},
        OwnerCase{"NotIn",
                  {{"claimSelector",
                    {{"matchExpressions",
                      {{{"key", "tier"}, {"operator", "NotIn"}, {"values", {"gold"}}}}}}}},
                  ClaimOf("a", "c", {{"tier", "gold"}}),
                  false},
        OwnerCase{
            "Exists",
            {{"claimSelector", {{"matchExpressions", {{{"key", "x"}, {"operator", "Exists"}}}}}}},
            ClaimOf("a", "c"),
            false},
        OwnerCase{"DoesNotExist",
                  {{"claimSelector",
                    {{"matchExpressions", {{{"key", "x"}, {"operator", "DoesNotExist"}}}}}}},
                  ClaimOf("a", "c"),
                  true},
        OwnerCase{"Controller",
                  {{"controller", {{"kind", "Pod"}, {"name", "trainer-0"}}}},
                  ClaimOf("a", "c", {}, kPod),
                  true},
        OwnerCase{"ControllerUid",
                  {{"controller", {{"kind", "Pod"}, {"name", "trainer-0"}, {"uid", "p2"}}}},
                  ClaimOf("a", "c", {}, kPod),
                  false},
        OwnerCase{
            "ControllerApiVersion",
            {{"controller", {{"apiVersion", "batch/v1"}, {"kind", "Pod"}, {"name", "trainer-0"}}}},
            ClaimOf("a", "c", {}, kPod),
            false},
        OwnerCase{"NoController",
                  {{"controller", {{"kind", "Pod"}, {"name", "trainer-0"}}}},
                  ClaimOf("a", "c"),
                  false}),
    [](const ::testing::TestParamInfo<OwnerCase>& info) { return info.param.name; });

TEST(OwnerMatchTest, OwnersAreOred) {
  json spec = Base();
  spec["owners"] = {{{"namespace", "a"}}, {{"claimName", "z"}}};
  absl::StatusOr<Spec> s = ParseSpec(spec);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(IsOwner(*s, ClaimOf("a", "c")));
  EXPECT_TRUE(IsOwner(*s, ClaimOf("b", "z")));
  EXPECT_FALSE(IsOwner(*s, ClaimOf("b", "c")));
}

}  // namespace
}  // namespace topodra::reservation
