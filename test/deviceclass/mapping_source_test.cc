// The DeviceClasses of the API server as the device plugins' check reads them, against the
// in-memory API server: the versions tried, the errors the check decides on, and the watch that
// reports each change of the mappings once.
#include "driver/deviceclass/mapping_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "test/testing/fake_rest_client.h"

namespace topodra::deviceclass {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;

constexpr char kV1[] = "/apis/resource.k8s.io/v1/deviceclasses";
constexpr char kV1beta1[] = "/apis/resource.k8s.io/v1beta1/deviceclasses";

json Class(const std::string& name, const std::string& resource) {
  json c = {{"metadata", {{"name", name}}}, {"spec", {{"selectors", json::array()}}}};
  if (!resource.empty()) c["spec"]["extendedResourceName"] = resource;
  return c;
}

class MappingSourceTest : public ::testing::Test {
 protected:
  // What on_change got, in order.
  std::vector<std::vector<Mapping>> Seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  MappingSource::OnChange Record() {
    return [this](const std::vector<Mapping>& m) {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(m);
    };
  }
  bool AwaitSeen(size_t n) {
    return fake_.Await([&] { return Seen().size() >= n; });
  }

  testing::FakeRestClient fake_;
  std::mutex mu_;
  std::vector<std::vector<Mapping>> seen_;
};

TEST_F(MappingSourceTest, ListsV1AndKeepsOnlyClassesThatMapAName) {
  fake_.Serve(kV1, "DeviceClass");
  ASSERT_TRUE(fake_.Post(kV1, Class("gpu.topodra.io", "topodra.io/gpu")).ok());
  ASSERT_TRUE(fake_.Post(kV1, Class("dra.cpu", "")).ok());
  ASSERT_TRUE(fake_.Post(kV1, Class("a-gpus", "topodra.io/gpu")).ok());
  std::unique_ptr<MappingSource> source = NewApiMappingSource(&fake_);
  absl::StatusOr<std::vector<Mapping>> got = source->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ElementsAre(Mapping{"a-gpus", "topodra.io/gpu"},
                                Mapping{"gpu.topodra.io", "topodra.io/gpu"}));
}

TEST_F(MappingSourceTest, FallsBackToOlderVersions) {
  fake_.Serve(kV1beta1, "DeviceClass");
  ASSERT_TRUE(fake_.Post(kV1beta1, Class("g", "example.com/gpu")).ok());
  std::unique_ptr<MappingSource> source = NewApiMappingSource(&fake_);
  fake_.ClearRequests();
  absl::StatusOr<std::vector<Mapping>> got = source->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ElementsAre(Mapping{"g", "example.com/gpu"}));
  EXPECT_THAT(fake_.RequestLines(),
              ElementsAre(absl::StrCat("GET ", kV1, " 404"),
                          "GET /apis/resource.k8s.io/v1beta2/deviceclasses 404",
                          absl::StrCat("GET ", kV1beta1, " 200")));
}

TEST_F(MappingSourceTest, ListErrorsKeepTheirCode) {
  std::unique_ptr<MappingSource> source = NewApiMappingSource(&fake_);
  // No version served: NotFound.
  EXPECT_EQ(source->List().status().code(), absl::StatusCode::kNotFound);
  fake_.Serve(kV1, "DeviceClass");
  fake_.FailNext(1, 403);
  EXPECT_EQ(source->List().status().code(), absl::StatusCode::kPermissionDenied);
  fake_.FailNext(1, 503);
  EXPECT_EQ(source->List().status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(MappingSourceTest, WatchReportsEachChangeOfTheMappingsOnce) {
  fake_.Serve(kV1, "DeviceClass");
  ASSERT_TRUE(fake_.Post(kV1, Class("dra.cpu", "")).ok());
  std::unique_ptr<MappingSource> source = NewApiMappingSource(&fake_);
  ASSERT_TRUE(source->List().ok());
  source->Watch(Record());
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  // A class that maps nothing changes nothing.
  ASSERT_TRUE(fake_.Post(kV1, Class("other", "")).ok());
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  EXPECT_TRUE(Seen().empty());
  // Created mapping.
  ASSERT_TRUE(fake_.Post(kV1, Class("gpu.topodra.io", "topodra.io/gpu")).ok());
  ASSERT_TRUE(AwaitSeen(1));
  // Changed to another name.
  json changed = *fake_.Object(kV1, "gpu.topodra.io");
  changed["spec"]["extendedResourceName"] = "example.com/gpu";
  ASSERT_TRUE(fake_.Put(absl::StrCat(kV1, "/gpu.topodra.io"), changed).ok());
  ASSERT_TRUE(AwaitSeen(2));
  // Mapping removed by an update, then the class deleted (nothing left to report).
  changed = *fake_.Object(kV1, "gpu.topodra.io");
  changed["spec"].erase("extendedResourceName");
  ASSERT_TRUE(fake_.Put(absl::StrCat(kV1, "/gpu.topodra.io"), changed).ok());
  ASSERT_TRUE(AwaitSeen(3));
  ASSERT_TRUE(fake_.Post(kV1, Class("tpu", "example.com/tpu")).ok());
  ASSERT_TRUE(AwaitSeen(4));
  ASSERT_TRUE(fake_.Delete(absl::StrCat(kV1, "/tpu"), {}).ok());
  ASSERT_TRUE(AwaitSeen(5));
  source->Stop();
  EXPECT_THAT(Seen(),
              ElementsAre(ElementsAre(Mapping{"gpu.topodra.io", "topodra.io/gpu"}),
                          ElementsAre(Mapping{"gpu.topodra.io", "example.com/gpu"}), ElementsAre(),
                          ElementsAre(Mapping{"tpu", "example.com/tpu"}), ElementsAre()));
}

TEST_F(MappingSourceTest, AWatchBrokenByAServerRestartGoesOn) {
  fake_.Serve(kV1, "DeviceClass");
  ASSERT_TRUE(fake_.Post(kV1, Class("old", "topodra.io/gpu")).ok());
  std::unique_ptr<MappingSource> source = NewApiMappingSource(&fake_);
  ASSERT_TRUE(source->List().ok());
  source->Watch(Record());
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  // The server comes back empty (the watch breaks), then gets another class: whether the
  // relist sees it or the new watch does, the mappings change twice, to nothing and to it.
  fake_.Restart();
  ASSERT_TRUE(AwaitSeen(1));
  ASSERT_TRUE(fake_.Post(kV1, Class("new", "topodra.io/gpu")).ok());
  ASSERT_TRUE(AwaitSeen(2));
  source->Stop();
  EXPECT_THAT(Seen(), ElementsAre(ElementsAre(), ElementsAre(Mapping{"new", "topodra.io/gpu"})));
}

TEST_F(MappingSourceTest, AWatchStartedAfterAFailedListFindsTheClasses) {
  fake_.Serve(kV1, "DeviceClass");
  ASSERT_TRUE(fake_.Post(kV1, Class("g", "topodra.io/gpu")).ok());
  std::unique_ptr<MappingSource> source = NewApiMappingSource(&fake_);
  fake_.FailNext(1, 503);
  ASSERT_FALSE(source->List().ok());
  source->Watch(Record());
  ASSERT_TRUE(AwaitSeen(1));
  source->Stop();
  EXPECT_THAT(Seen(), ElementsAre(ElementsAre(Mapping{"g", "topodra.io/gpu"})));
}

TEST_F(MappingSourceTest, StopWithoutWatchAndTwice) {
  std::unique_ptr<MappingSource> source = NewApiMappingSource(&fake_);
  source->Stop();
  source->Stop();
}

}  // namespace
}  // namespace topodra::deviceclass
