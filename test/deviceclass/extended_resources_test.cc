// The pure part of the device plugins' DeviceClass check: what a DeviceClass maps, which device
// plugin resources that takes over, what to do when the classes cannot be listed.
#include "driver/deviceclass/extended_resources.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace topodra::deviceclass {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

json Class(const std::string& name, const json& resource) {
  json c = {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "DeviceClass"},
            {"metadata", {{"name", name}}},
            {"spec", {{"selectors", json::array()}}}};
  if (!resource.is_discarded()) c["spec"]["extendedResourceName"] = resource;
  return c;
}

TEST(MappingOfTest, Table) {
  struct Case {
    const char* what;
    json object;
    std::optional<Mapping> want;  // when ok
    const char* error;            // "" when ok
  };
  const json none = json(json::value_t::discarded);
  const std::vector<Case> cases = {
      {"maps", Class("gpu.topodra.io", "topodra.io/gpu"),
       Mapping{"gpu.topodra.io", "topodra.io/gpu"}, ""},
      {"no field", Class("dra.cpu", none), std::nullopt, ""},
      {"null field", Class("dra.cpu", nullptr), std::nullopt, ""},
      {"empty field", Class("dra.cpu", ""), std::nullopt, ""},
      {"no spec", {{"metadata", {{"name", "c"}}}}, std::nullopt, ""},
      {"null spec", {{"metadata", {{"name", "c"}}}, {"spec", nullptr}}, std::nullopt, ""},
      {"v1beta1 has the same place", Class("old", "example.com/x"), Mapping{"old", "example.com/x"},
       ""},
      {"number", Class("c", 5), std::nullopt,
       "DeviceClass \"c\": spec.extendedResourceName: want a string, got 5"},
      {"spec not an object",
       {{"metadata", {{"name", "c"}}}, {"spec", "x"}},
       std::nullopt,
       "DeviceClass \"c\": spec: want an object, got \"x\""},
      {"no name",
       {{"metadata", json::object()}, {"spec", json::object()}},
       std::nullopt,
       "DeviceClass: metadata.name: want a non-empty string, got nothing"},
      {"empty name",
       {{"metadata", {{"name", ""}}}},
       std::nullopt,
       "DeviceClass: metadata.name: want a non-empty string, got \"\""},
      {"no metadata",
       {{"spec", json::object()}},
       std::nullopt,
       "DeviceClass: metadata.name: want a non-empty string, got nothing"},
      {"not an object", json::array({1}), std::nullopt, "DeviceClass: want an object, got [1]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    absl::StatusOr<std::optional<Mapping>> got = MappingOf(c.object);
    if (std::string(c.error).empty()) {
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, c.want);
    } else {
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.error));
    }
  }
}

TEST(MappingOfTest, AnOversizedValueIsCutInTheMessage) {
  absl::StatusOr<std::optional<Mapping>> got =
      MappingOf(Class("c", json::array({std::string(5000, 'x')})));
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("got [\"xxx"));
  EXPECT_THAT(std::string(got.status().message()), ::testing::EndsWith("..."));
  EXPECT_LT(got.status().message().size(), 200u);
}

TEST(ConflictsTest, Table) {
  struct Case {
    const char* what;
    std::vector<Mapping> mappings;
    std::vector<std::string> resources;
    std::vector<Conflict> want;
  };
  const std::vector<Case> cases = {
      {"nothing mapped", {}, {"topodra.io/gpu"}, {}},
      {"no device plugin", {{"gpu.topodra.io", "topodra.io/gpu"}}, {}, {}},
      {"another name", {{"gpu.topodra.io", "example.com/gpu"}}, {"topodra.io/gpu"}, {}},
      {"the GPU plugin's name",
       {{"gpu.topodra.io", "topodra.io/gpu"}},
       {"topodra.io/gpu", "topodra.io/cpu"},
       {{"topodra.io/gpu", {"gpu.topodra.io"}}}},
      {"names are case-sensitive", {{"c", "topodra.io/GPU"}}, {"topodra.io/gpu"}, {}},
      {"several classes, sorted",
       {{"z-class", "topodra.io/gpu"}, {"a-class", "topodra.io/gpu"}},
       {"topodra.io/gpu"},
       {{"topodra.io/gpu", {"a-class", "z-class"}}}},
      {"both plugins, in the plugins' order",
       {{"gpus", "topodra.io/gpu"}, {"cpus", "topodra.io/cpu"}},
       {"topodra.io/cpu", "topodra.io/gpu"},
       {{"topodra.io/cpu", {"cpus"}}, {"topodra.io/gpu", {"gpus"}}}},
      {"one plugin named twice", {{"g", "x.io/a"}}, {"x.io/a", "x.io/a"}, {{"x.io/a", {"g"}}}},
      {"the implicit name is never a plugin's",
       {{"gpu.topodra.io", "topodra.io/gpu"}},
       {"deviceclass.resource.kubernetes.io/gpu.topodra.io"},
       {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(Conflicts(c.mappings, c.resources), c.want);
  }
}

TEST(DescribeTest, NamesClassesAndResource) {
  EXPECT_EQ(Describe({"topodra.io/gpu", {"gpu.topodra.io"}}),
            "DeviceClass \"gpu.topodra.io\" maps \"topodra.io/gpu\" (spec.extendedResourceName)");
  EXPECT_EQ(Describe({"topodra.io/gpu", {"a", "b"}}),
            "DeviceClasses \"a\", \"b\" map \"topodra.io/gpu\" (spec.extendedResourceName)");
}

TEST(OnListFailureTest, Table) {
  struct Case {
    CheckMode mode;
    absl::Status error;
    ListFailure want;
  };
  const std::vector<Case> cases = {
      {CheckMode::kOn, absl::PermissionDeniedError("403"), ListFailure::kFail},
      {CheckMode::kOn, absl::NotFoundError("404"), ListFailure::kFail},
      {CheckMode::kOn, absl::UnavailableError("503"), ListFailure::kFail},
      {CheckMode::kAuto, absl::PermissionDeniedError("403"), ListFailure::kNoCheck},
      {CheckMode::kAuto, absl::NotFoundError("404"), ListFailure::kNoCheck},
      {CheckMode::kAuto, absl::UnavailableError("503"), ListFailure::kRetry},
      {CheckMode::kAuto, absl::DeadlineExceededError("timeout"), ListFailure::kRetry},
      {CheckMode::kAuto, absl::UnauthenticatedError("401"), ListFailure::kRetry},
      {CheckMode::kAuto, absl::InternalError("bad body"), ListFailure::kRetry},
      {CheckMode::kOff, absl::UnavailableError("503"), ListFailure::kNoCheck},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(CheckModeName(c.mode), " ", c.error.ToString()));
    EXPECT_EQ(OnListFailure(c.mode, c.error), c.want);
  }
}

TEST(CheckModeTest, ParsesTheFlagsValues) {
  for (CheckMode m : {CheckMode::kAuto, CheckMode::kOn, CheckMode::kOff}) {
    absl::StatusOr<CheckMode> back = ParseCheckMode(CheckModeName(m));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(ParseCheckMode("yes").status().message(),
            "invalid value \"yes\" (want auto, on or off)");
}

}  // namespace
}  // namespace topodra::deviceclass
