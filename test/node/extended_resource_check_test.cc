// --extended-resource-check as the device plugins use it: the decision per mode and list
// outcome, and what is forwarded from the watch.
#include "driver/node/extended_resource_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test/node/fake_mapping_source.h"
#include "test/testing/log_capture.h"

namespace topodra::node {
namespace {

using deviceclass::CheckMode;
using deviceclass::Mapping;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Refused = ExtendedResourceCheck::Refused;
using Shared = testing::FakeMappingSource::Shared;

const std::vector<std::string> kBoth = {"topodra.io/gpu", "topodra.io/cpu"};

TEST(ExtendedResourceCheckTest, DecideTable) {
  struct Case {
    const char* what;
    std::vector<Mapping> mappings;
    std::vector<std::string> resources;
    Refused want;
  };
  const std::vector<Case> cases = {
      {"nothing mapped", {}, kBoth, {}},
      {"the chart's default",
       {{"gpu.topodra.io", "topodra.io/gpu"}},
       kBoth,
       {{"topodra.io/gpu",
         "DeviceClass \"gpu.topodra.io\" maps \"topodra.io/gpu\" (spec.extendedResourceName)"}}},
      {"only the plugins' names", {{"c", "example.com/gpu"}}, kBoth, {}},
      {"both",
       {{"g", "topodra.io/gpu"}, {"c", "topodra.io/cpu"}},
       kBoth,
       {{"topodra.io/gpu", "DeviceClass \"g\" maps \"topodra.io/gpu\" (spec.extendedResourceName)"},
        {"topodra.io/cpu",
         "DeviceClass \"c\" maps \"topodra.io/cpu\" (spec.extendedResourceName)"}}},
      {"a plugin not configured", {{"c", "topodra.io/cpu"}}, {"topodra.io/gpu"}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(ExtendedResourceCheck::Decide(c.mappings, c.resources), c.want);
  }
}

struct Outcome {
  absl::StatusOr<Refused> refused;
  bool watching;
  int lists;
};

Outcome CheckOnce(CheckMode mode, absl::StatusOr<std::vector<Mapping>> list,
                  std::vector<std::string> resources = kBoth) {
  auto shared = std::make_shared<Shared>();
  shared->list = std::move(list);
  ExtendedResourceCheck check(mode, std::make_unique<testing::FakeMappingSource>(shared),
                              std::move(resources));
  Outcome o{check.Check(), false, 0};
  check.Watch([](const Refused&) {});
  std::lock_guard<std::mutex> lock(shared->mu);
  o.watching = shared->watching;
  o.lists = shared->lists;
  return o;
}

TEST(ExtendedResourceCheckTest, ModesAndListOutcomes) {
  const std::vector<Mapping> gpu = {{"gpu.topodra.io", "topodra.io/gpu"}};
  topodra::testing::LogCapture log;
  {
    SCOPED_TRACE("off: never asks");
    Outcome o = CheckOnce(CheckMode::kOff, gpu);
    ASSERT_TRUE(o.refused.ok());
    EXPECT_THAT(*o.refused, IsEmpty());
    EXPECT_EQ(o.lists, 0);
    EXPECT_FALSE(o.watching);
  }
  {
    SCOPED_TRACE("no device plugin: never asks");
    Outcome o = CheckOnce(CheckMode::kOn, gpu, {});
    ASSERT_TRUE(o.refused.ok());
    EXPECT_EQ(o.lists, 0);
    EXPECT_FALSE(o.watching);
  }
  for (CheckMode mode : {CheckMode::kAuto, CheckMode::kOn}) {
    SCOPED_TRACE(deviceclass::CheckModeName(mode));
    Outcome o = CheckOnce(mode, gpu);
    ASSERT_TRUE(o.refused.ok());
    EXPECT_THAT(*o.refused, ElementsAre(::testing::Key("topodra.io/gpu")));
    EXPECT_EQ(o.lists, 1);
    EXPECT_TRUE(o.watching);
  }
  {
    SCOPED_TRACE("auto, forbidden: no check, no watch, said once");
    Outcome o = CheckOnce(CheckMode::kAuto, absl::PermissionDeniedError(
                                                "GET /apis/resource.k8s.io/v1/deviceclasses: HTTP "
                                                "403 Forbidden: deviceclasses is forbidden"));
    ASSERT_TRUE(o.refused.ok());
    EXPECT_THAT(*o.refused, IsEmpty());
    EXPECT_FALSE(o.watching);
    EXPECT_THAT(log.Lines("DeviceClasses cannot be listed"),
                ElementsAre(HasSubstr("--extended-resource-check=auto: DeviceClasses cannot be "
                                      "listed (GET /apis/resource.k8s.io/v1/deviceclasses: HTTP "
                                      "403 Forbidden: deviceclasses is forbidden); the device "
                                      "plugins are served without the check")));
  }
  {
    SCOPED_TRACE("auto, not served");
    Outcome o = CheckOnce(CheckMode::kAuto, absl::NotFoundError("404"));
    ASSERT_TRUE(o.refused.ok());
    EXPECT_FALSE(o.watching);
  }
  {
    SCOPED_TRACE("auto, a passing failure: served, and the watch keeps trying");
    Outcome o = CheckOnce(CheckMode::kAuto, absl::UnavailableError("HTTP 503"));
    ASSERT_TRUE(o.refused.ok());
    EXPECT_THAT(*o.refused, IsEmpty());
    EXPECT_TRUE(o.watching);
    EXPECT_THAT(log.Lines("cannot be listed yet"), ElementsAre(HasSubstr("(HTTP 503)")));
  }
  for (absl::Status error :
       {absl::UnavailableError("HTTP 503"), absl::PermissionDeniedError("HTTP 403")}) {
    SCOPED_TRACE(absl::StrCat("on: ", error.ToString()));
    Outcome o = CheckOnce(CheckMode::kOn, error);
    ASSERT_FALSE(o.refused.ok());
    EXPECT_EQ(o.refused.status().code(), error.code());
    EXPECT_EQ(o.refused.status().message(),
              absl::StrCat("--extended-resource-check=on: cannot list DeviceClasses, so cannot "
                           "tell whether DRA serves the device plugins' resources: ",
                           error.message()));
    EXPECT_FALSE(o.watching);
  }
}

TEST(ExtendedResourceCheckTest, WatchForwardsEveryDecisionUntilStop) {
  auto shared = std::make_shared<Shared>();
  ExtendedResourceCheck check(CheckMode::kAuto,
                              std::make_unique<testing::FakeMappingSource>(shared), kBoth);
  ASSERT_TRUE(check.Check().ok());
  std::vector<Refused> seen;
  check.Watch([&](const Refused& r) { seen.push_back(r); });
  shared->Push({{"g", "topodra.io/gpu"}, {"other", "example.com/x"}});
  shared->Push({});
  check.Stop();
  shared->Push({{"g", "topodra.io/gpu"}});
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_THAT(seen[0], ElementsAre(::testing::Key("topodra.io/gpu")));
  EXPECT_THAT(seen[1], IsEmpty());
  EXPECT_TRUE(shared->stopped);
}

}  // namespace
}  // namespace topodra::node
