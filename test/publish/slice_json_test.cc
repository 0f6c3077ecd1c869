// JSON of ResourceSlices: round trips, foreign fields kept, errors with paths; name formats.
#include "driver/publish/slice_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/json_text.h"
#include "driver/publish/names.h"

namespace topodra::publish {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

Slice Sample() {
  Slice s;
  s.metadata = {{"name", "n1-dra.cpu-0"}};
  s.driver = "dra.cpu";
  s.pool = "n1";
  s.generation = 7;
  s.slice_count = 2;
  s.node_name = "n1";
  s.mixins = {{"m0", {{"dra.cpu/smtEnabled", true}}, {{"dra.cpu/cpu", Capacity{"8", {}}}}}};
  Device d;
  d.name = "cpudevnuma000";
  d.includes = {"m0"};
  d.attributes = {{"resource.kubernetes.io/numaNode", int64_t{0}},
                  {"dra.cpu/coreType", std::string("standard")},
                  {"driverVersion", Version{"1.2.3"}}};
  d.capacity = {{"mem", Capacity{"16Gi", RequestPolicy{"1Gi", {"1Gi", "2Gi"}, std::nullopt}}},
                {"dra.cpu/cpu", Capacity{"8", RequestPolicy{"1", {}, ValidRange{"1", "8", "1"}}}}};
  d.allow_multiple_allocations = true;
  d.extra = {{"taints", json::array({{{"key", "k"}, {"effect", "NoSchedule"}}})}};
  s.devices = {d};
  return s;
}

TEST(SliceJsonTest, RoundTrip) {
  const Slice s = Sample();
  const json j = SliceToJson(s);
  EXPECT_EQ(j["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(j["kind"], "ResourceSlice");
  EXPECT_EQ(j["spec"]["pool"]["generation"], 7);
  EXPECT_EQ(j["spec"]["mixins"]["device"][0]["name"], "m0");
  EXPECT_EQ(j["spec"]["devices"][0]["attributes"]["driverVersion"], json({{"version", "1.2.3"}}));
  EXPECT_EQ(j["spec"]["devices"][0]["capacity"]["dra.cpu/cpu"]["requestPolicy"]["validRange"],
            json({{"min", "1"}, {"max", "8"}, {"step", "1"}}));
  EXPECT_EQ(j["spec"]["devices"][0]["taints"][0]["key"], "k");
  absl::StatusOr<Slice> back = SliceFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_EQ(SliceToJson(s, "resource.k8s.io/v1beta2")["apiVersion"], "resource.k8s.io/v1beta2");
}

// The size is counted, not printed; every shape SliceToJson prints must count the same, also
// strings that are escaped or replaced and extra fields that the modelled ones override.
TEST(SliceJsonTest, SliceJsonSizeIsTheLengthOfThePrintedSlice) {
  std::vector<Slice> cases;
  cases.push_back(Sample());
  Slice bare;
  bare.driver = "d";
  cases.push_back(bare);
  Slice odd = Sample();
  odd.metadata = {{"name", "x"}, {"labels", {{"a", "b\"c"}}}};
  odd.node_name.clear();
  odd.generation = -12;
  odd.slice_count = 1234567890123;
  odd.extra_spec = {{"driver", "overridden"}, {"perDeviceNodeSelection", true}, {"mixins", 1}};
  odd.mixins.clear();
  Device& d = odd.devices[0];
  d.name = "dev\\with\"quotes\n\t\x01";
  d.attributes["s"] = std::string("caf\xc3\xa9 \x7f");
  d.attributes["bad"] = std::string("\xff\xfe invalid UTF-8");
  d.attributes["list"] = StringList{{"a", "b\"", ""}};
  d.attributes["neg"] = int64_t{INT64_MIN};
  d.attributes["no"] = false;
  d.extra["name"] = "overridden";
  d.extra["includes"] = json::array({"kept: the device has none of its own"});
  d.includes.clear();
  d.capacity["plain"] = Capacity{"1k", {}};
  cases.push_back(odd);
  for (const Slice& c : cases) {
    for (const char* v : {"resource.k8s.io/v1", "resource.k8s.io/v1beta2"}) {
      EXPECT_EQ(SliceJsonSize(c, v), DumpJson(SliceToJson(c, v)).size())
          << DumpJson(SliceToJson(c, v));
    }
    for (const Device& d : c.devices) {
      for (const auto& [k, a] : d.attributes) {
        EXPECT_EQ(AttributeJsonSize(a), DumpJson(AttributeToJson(a)).size()) << k;
      }
      for (const auto& [k, cap] : d.capacity) {
        EXPECT_EQ(CapacityJsonSize(cap), DumpJson(CapacityToJson(cap)).size()) << k;
      }
    }
  }
}

TEST(SliceJsonTest, DocumentsAndLists) {
  const json list = SliceListToJson({Sample(), Sample()});
  EXPECT_EQ(list["kind"], "List");
  absl::StatusOr<std::vector<Slice>> slices = SlicesFromDocument(list);
  ASSERT_TRUE(slices.ok());
  EXPECT_EQ(slices->size(), 2u);
  json rsl = list;
  rsl["kind"] = "ResourceSliceList";
  EXPECT_TRUE(SlicesFromDocument(rsl).ok());
  EXPECT_EQ(SlicesFromDocument(SliceToJson(Sample()))->size(), 1u);
}

TEST(SliceJsonTest, ErrorsNameThePath) {
  struct Case {
    const char* label;
    json doc;
    const char* message;
  };
  json bad_attr = SliceToJson(Sample());
  bad_attr["spec"]["devices"][0]["attributes"]["x"] = {{"int", 1}, {"bool", true}};
  json float_attr = SliceToJson(Sample());
  float_attr["spec"]["devices"][0]["attributes"]["x"] = {{"int", 1.5}};
  json list_attr = SliceToJson(Sample());
  list_attr["spec"]["devices"][0]["attributes"]["x"] = {{"ints", {1, 2}}};
  json no_name = SliceToJson(Sample());
  no_name["spec"]["devices"][0].erase("name");
  json bad_cap = SliceToJson(Sample());
  bad_cap["spec"]["devices"][0]["capacity"]["x"] = {{"value", true}};
  json bad_mixin = SliceToJson(Sample());
  bad_mixin["spec"]["mixins"]["device"][0]["taints"] = json::array();
  json bad_list = SliceListToJson({Sample()});
  bad_list["items"][0]["spec"]["driver"] = 3;
  const std::vector<Case> cases = {
      {"not an object", json::array(), "must be an object"},
      {"wrong kind", {{"kind", "Pod"}}, "must be ResourceSlice, got \"Pod\""},
      {"no spec", {{"kind", "ResourceSlice"}}, "spec: is required"},
      {"two attribute types", bad_attr,
       "spec.devices[0].attributes[\"x\"]: must have exactly one of"},
      {"float int", float_attr, "must be an integer"},
      {"list attribute", list_attr, "unsupported attribute type \"ints\""},
      {"device without name", no_name, "spec.devices[0].name: is required"},
      {"capacity value", bad_cap, "must be a quantity"},
      {"unknown mixin field", bad_mixin, "spec.mixins.device[0].taints: unknown field"},
      {"bad list item", bad_list,
       "items[0]: ResourceSlice \"n1-dra.cpu-0\" spec.driver: must be a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<std::vector<Slice>> s = SlicesFromDocument(c.doc);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.message));
  }
}

TEST(NamesTest, Formats) {
  struct Case {
    const char* s;
    bool label, subdomain, driver, qualified;
  };
  const Case cases[] = {
      {"cpudev000", true, true, true, true},
      {"dra.cpu", false, true, true, false},
      {"dra.cpu/cpuID", false, false, false, true},
      {"resource.kubernetes.io/numaNode", false, false, false, true},
      {"numaNode", false, false, false, true},
      {"Node", false, false, false, true},
      {"-a", false, false, false, false},
      {"a-", false, false, false, false},
      {"a..b", false, false, false, false},
      {"", false, false, false, false},
      {"9lives", true, true, true, false},
      {"dra.cpu/9x", false, false, false, false},
      {"UPPER.example.com/x", false, false, false, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.s);
    EXPECT_EQ(IsDnsLabel(c.s), c.label);
    EXPECT_EQ(IsDnsSubdomain(c.s), c.subdomain);
    EXPECT_EQ(IsDriverName(c.s), c.driver);
    EXPECT_EQ(IsQualifiedName(c.s), c.qualified);
  }
  EXPECT_TRUE(IsDnsLabel(std::string(63, 'a')));
  EXPECT_FALSE(IsDnsLabel(std::string(64, 'a')));
  EXPECT_FALSE(IsDriverName(std::string(30, 'a') + "." + std::string(33, 'b')));
  EXPECT_TRUE(IsQualifiedName(std::string(32, 'x')));
  EXPECT_FALSE(IsQualifiedName(std::string(33, 'x')));
}

}  // namespace
}  // namespace topodra::publish
