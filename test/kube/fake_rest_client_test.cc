// Each API server behaviour the in-memory fake claims (test/testing/fake_rest_client.h), so the
// controller tests built on it test the controllers, not the fake.
#include "test/testing/fake_rest_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

namespace topodra::testing {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr char kResv[] = "/apis/topodra.io/v1alpha1/reservations";

json Slice(const std::string& name, const std::string& node, const std::string& driver = "d") {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", name}}},
          {"spec", {{"nodeName", node}, {"driver", driver}}}};
}

class FakeRestClientTest : public ::testing::Test {
 protected:
  FakeRestClientTest() {
    fake_.Serve(kSlices, "ResourceSlice");
    fake_.Serve(kResv, "Reservation", /*status_subresource=*/true);
  }
  json Create(const json& obj, const std::string& collection = kSlices) {
    absl::StatusOr<kube::Response> r = fake_.Post(collection, obj);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->body : json();
  }
  FakeRestClient fake_;
};

TEST_F(FakeRestClientTest, ResourceVersionsGrowWithEveryWriteAndListsCarryTheCurrentOne) {
  const uint64_t start = fake_.resource_version();
  const json a = Create(Slice("a", "n1"));
  EXPECT_EQ(a["metadata"]["resourceVersion"], std::to_string(start + 1));
  EXPECT_EQ(a["metadata"]["uid"].get<std::string>().empty(), false);
  EXPECT_EQ(a["metadata"]["generation"], 1);
  EXPECT_TRUE(a["metadata"]["creationTimestamp"].is_string());
  json changed = a;
  changed["spec"]["nodeName"] = "n2";
  absl::StatusOr<kube::Response> put = fake_.Put(std::string(kSlices) + "/a", changed);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->body["metadata"]["resourceVersion"], std::to_string(start + 2));
  EXPECT_EQ(put->body["metadata"]["generation"], 2);
  // The same object again: no change, no new version.
  absl::StatusOr<kube::Response> same = fake_.Put(std::string(kSlices) + "/a", put->body);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->body["metadata"]["resourceVersion"], std::to_string(start + 2));
  absl::StatusOr<kube::Response> list = fake_.Get(kSlices);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->body["kind"], "ResourceSliceList");
  EXPECT_EQ(list->body["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(list->body["metadata"]["resourceVersion"], std::to_string(start + 2));
  EXPECT_EQ(list->body["items"].size(), 1u);
}

TEST_F(FakeRestClientTest, NotFoundAlreadyExistsAndConflicts) {
  const json a = Create(Slice("a", "n1"));
  absl::StatusOr<kube::Response> get = fake_.Get(std::string(kSlices) + "/missing");
  EXPECT_EQ(kube::HttpCodeOf(get.status()), 404);
  EXPECT_EQ(get.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(get.status().message(),
            "GET /apis/resource.k8s.io/v1/resourceslices/missing: HTTP 404 NotFound: "
            "resourceslices \"missing\" not found");
  absl::StatusOr<kube::Response> again = fake_.Post(kSlices, Slice("a", "n1"));
  EXPECT_EQ(kube::HttpCodeOf(again.status()), 409);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  // An update from a stale read.
  json stale = a;
  stale["metadata"]["resourceVersion"] = "1";
  absl::StatusOr<kube::Response> put = fake_.Put(std::string(kSlices) + "/a", stale);
  EXPECT_EQ(kube::HttpCodeOf(put.status()), 409);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(put.status().message(), HasSubstr("the object has been modified"));
  // No create on update.
  absl::StatusOr<kube::Response> put_missing =
      fake_.Put(std::string(kSlices) + "/b", Slice("b", "n1"));
  EXPECT_EQ(kube::HttpCodeOf(put_missing.status()), 404);
  // Delete preconditions.
  json pre = {{"preconditions", {{"uid", "other"}}}};
  EXPECT_EQ(kube::HttpCodeOf(fake_.Delete(std::string(kSlices) + "/a", pre).status()), 409);
  pre = {{"preconditions", {{"uid", a["metadata"]["uid"]}, {"resourceVersion", "1"}}}};
  EXPECT_EQ(kube::HttpCodeOf(fake_.Delete(std::string(kSlices) + "/a", pre).status()), 409);
  pre["preconditions"]["resourceVersion"] = a["metadata"]["resourceVersion"];
  EXPECT_TRUE(fake_.Delete(std::string(kSlices) + "/a", pre).ok());
  EXPECT_EQ(kube::HttpCodeOf(fake_.Delete(std::string(kSlices) + "/a", {}).status()), 404);
  EXPECT_FALSE(fake_.Object(kSlices, "a"));
}

TEST_F(FakeRestClientTest, UnservedCollectionsAnswer404) {
  absl::StatusOr<kube::Response> r = fake_.Get("/apis/resource.k8s.io/v1beta2/resourceslices");
  EXPECT_EQ(kube::HttpCodeOf(r.status()), 404);
  Create(json{{"metadata", {{"name", "r"}}}}, kResv);
  fake_.Unserve(kResv);
  EXPECT_EQ(kube::HttpCodeOf(fake_.Get(kResv).status()), 404);
  fake_.Serve(kResv, "Reservation", true);
  EXPECT_TRUE(fake_.Objects(kResv).empty());  // a deleted CRD takes its objects with it
}

TEST_F(FakeRestClientTest, CreationTimestampFromTheInjectedClock) {
  fake_.SetClock([] { return absl::FromUnixSeconds(1767225600); });
  EXPECT_EQ(Create(Slice("a", "n1"))["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
}

TEST_F(FakeRestClientTest, GenerateNameAndDryRun) {
  json probe = Slice("", "n1");
  probe["metadata"] = {{"generateName", "probe-"}};
  absl::StatusOr<kube::Response> dry = fake_.Post(std::string(kSlices) + "?dryRun=All", probe);
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_THAT(dry->body["metadata"]["name"].get<std::string>(), ::testing::StartsWith("probe-"));
  EXPECT_TRUE(fake_.Objects(kSlices).empty());  // dry run: nothing stored
  const json created = Create(probe);
  EXPECT_THAT(created["metadata"]["name"].get<std::string>(), ::testing::StartsWith("probe-"));
  EXPECT_NE(created["metadata"]["name"], dry->body["metadata"]["name"]);
  EXPECT_EQ(fake_.Objects(kSlices).size(), 1u);
  json nameless = Slice("", "n1");
  nameless["metadata"] = json::object();
  EXPECT_EQ(kube::HttpCodeOf(fake_.Post(kSlices, nameless).status()), 422);
}

TEST_F(FakeRestClientTest, StatusSubresource) {
  json r =
      Create({{"metadata", {{"name", "r"}}}, {"spec", {{"a", 1}}}, {"status", {{"x", 1}}}}, kResv);
  EXPECT_FALSE(r.contains("status"));  // ignored on create
  r["status"] = {{"phase", "Available"}};
  absl::StatusOr<kube::Response> st = fake_.Put(std::string(kResv) + "/r/status", r);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->body["status"]["phase"], "Available");
  EXPECT_EQ(st->body["metadata"]["generation"], 1);  // a status write is no spec change
  // A PUT of the object keeps the stored status, whatever it sends.
  json obj = st->body;
  obj["status"] = {{"phase", "Failed"}};
  obj["spec"]["a"] = 2;
  absl::StatusOr<kube::Response> put = fake_.Put(std::string(kResv) + "/r", obj);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->body["status"]["phase"], "Available");
  EXPECT_EQ(put->body["metadata"]["generation"], 2);
  // Collections without the subresource have no .../status.
  Create(Slice("a", "n1"));
  EXPECT_EQ(
      kube::HttpCodeOf(fake_.Put(std::string(kSlices) + "/a/status", Slice("a", "n1")).status()),
      404);
}

TEST_F(FakeRestClientTest, FieldAndLabelSelectors) {
  json a = Slice("a", "n1", "dra.cpu");
  a["metadata"]["labels"] = {{"tier", "x"}};
  Create(a);
  Create(Slice("b", "n2", "dra.cpu"));
  Create(Slice("c", "n1", "dra.gpu"));
  auto names = [&](const std::string& query) {
    std::vector<std::string> out;
    absl::StatusOr<kube::Response> r = fake_.Get(std::string(kSlices) + "?" + query);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) {
      for (const json& i : r->body["items"]) out.push_back(i["metadata"]["name"]);
    }
    return out;
  };
  EXPECT_THAT(names("fieldSelector=" + kube::UrlEncode("spec.driver=dra.cpu,spec.nodeName=n1")),
              ElementsAre("a"));
  EXPECT_THAT(names("fieldSelector=" + kube::UrlEncode("spec.nodeName==n1")),
              ElementsAre("a", "c"));
  EXPECT_THAT(names("fieldSelector=" + kube::UrlEncode("spec.nodeName!=n1")), ElementsAre("b"));
  EXPECT_THAT(names("fieldSelector=" + kube::UrlEncode("metadata.name=b")), ElementsAre("b"));
  EXPECT_THAT(names("labelSelector=" + kube::UrlEncode("tier=x")), ElementsAre("a"));
  EXPECT_THAT(names("labelSelector=" + kube::UrlEncode("!tier")), ElementsAre("b", "c"));
  EXPECT_THAT(names("labelSelector=tier"), ElementsAre("a"));
}

// Runs a watch on its own thread, collecting the events.
class Watcher {
 public:
  Watcher(FakeRestClient* fake, std::string path) : fake_(fake) {
    thread_ = std::thread([this, path] {
      result_ = fake_->Watch(
          path,
          [this](const json& e) {
            std::lock_guard<std::mutex> lock(mu_);
            events_.push_back(e);
            return true;
          },
          &stop_);
      done_ = true;
      fake_->WakeWatches();  // a change for Await
    });
  }
  ~Watcher() {
    Stop();
    thread_.join();
  }
  void Stop() {
    stop_ = true;
    fake_->WakeWatches();
  }
  std::vector<std::string> Seen() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const json& e : events_) {
      const json& o = e["object"];
      out.push_back(e["type"].get<std::string>() + " " +
                    (e["type"] == "ERROR" ? std::to_string(o["code"].get<int>())
                                          : o["metadata"].value("name", "") + "@" +
                                                o["metadata"].value("resourceVersion", "")));
    }
    return out;
  }
  bool done() const { return done_; }
  absl::Status result() const { return result_; }

 private:
  FakeRestClient* fake_;
  std::mutex mu_;
  std::vector<json> events_;
  std::atomic<bool> stop_{false}, done_{false};
  absl::Status result_;
  std::thread thread_;
};

std::string WatchPath(const std::string& rv, const std::string& selector = "") {
  std::string p =
      std::string(kSlices) + "?watch=true&allowWatchBookmarks=true&resourceVersion=" + rv;
  if (!selector.empty()) p += "&fieldSelector=" + kube::UrlEncode(selector);
  return p;
}

TEST_F(FakeRestClientTest, WatchFromAResourceVersionGetsEveryLaterEventInOrder) {
  const json a = Create(Slice("a", "n1"));
  const std::string rv = a["metadata"]["resourceVersion"];
  Create(Slice("b", "n2"));  // another node: filtered out
  Create(Slice("c", "n1"));
  Watcher w(&fake_, WatchPath(rv, "spec.nodeName=n1"));
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  json c = *fake_.Object(kSlices, "c");
  c["spec"]["driver"] = "e";
  ASSERT_TRUE(fake_.Put(std::string(kSlices) + "/c", c).ok());
  ASSERT_TRUE(fake_.Delete(std::string(kSlices) + "/a", {}).ok());
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  const uint64_t r = std::stoull(rv);
  EXPECT_THAT(w.Seen(),
              ElementsAre("ADDED c@" + std::to_string(r + 2), "MODIFIED c@" + std::to_string(r + 3),
                          "DELETED a@" + std::to_string(r + 4)));
  fake_.SendBookmarks();
  ASSERT_TRUE(fake_.Await([&] { return w.Seen().size() == 4; }));
  EXPECT_EQ(w.Seen().back(), "BOOKMARK @" + std::to_string(r + 4));
}

TEST_F(FakeRestClientTest, WatchFromNothingStartsWithTheCurrentObjects) {
  Create(Slice("a", "n1"));
  Create(Slice("b", "n1"));
  Watcher w(&fake_, WatchPath(""));
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  ASSERT_EQ(w.Seen().size(), 2u);
  EXPECT_THAT(w.Seen()[0], ::testing::StartsWith("ADDED a@"));
}

TEST_F(FakeRestClientTest, TooOldOrTooNewResourceVersionsGet410) {
  const std::string old = Create(Slice("a", "n1"))["metadata"]["resourceVersion"];
  Create(Slice("b", "n1"));
  fake_.Compact();
  for (const std::string& rv : {old, std::string("999999")}) {
    SCOPED_TRACE(rv);
    Watcher w(&fake_, WatchPath(rv));
    ASSERT_TRUE(fake_.Await([&] { return w.done(); }));
    EXPECT_TRUE(w.result().ok());
    EXPECT_THAT(w.Seen(), ElementsAre("ERROR 410"));
  }
  // From the current version it works.
  Watcher w(&fake_, WatchPath(std::to_string(fake_.resource_version())));
  EXPECT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
}

TEST_F(FakeRestClientTest, OpenWatchesExpireEndOrBreak) {
  {
    Watcher w(&fake_, WatchPath(std::to_string(fake_.resource_version())));
    ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
    fake_.ExpireWatches();
    ASSERT_TRUE(fake_.Await([&] { return w.done(); }));
    EXPECT_THAT(w.Seen(), ElementsAre("ERROR 410"));
  }
  {
    Watcher w(&fake_, WatchPath(std::to_string(fake_.resource_version())));
    ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
    fake_.EndWatches();  // timeoutSeconds
    ASSERT_TRUE(fake_.Await([&] { return w.done(); }));
    EXPECT_TRUE(w.result().ok());
    EXPECT_TRUE(w.Seen().empty());
  }
  {
    Create(Slice("a", "n1"));
    Watcher w(&fake_, WatchPath(std::to_string(fake_.resource_version())));
    ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
    fake_.Restart(/*next_resource_version=*/1);
    ASSERT_TRUE(fake_.Await([&] { return w.done(); }));
    EXPECT_EQ(w.result().code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(fake_.Objects(kSlices).empty());
    EXPECT_EQ(fake_.resource_version(), 1u);
  }
}

TEST_F(FakeRestClientTest, AStopFlagEndsAWatchOnWakeWithoutPolling) {
  Watcher w(&fake_, WatchPath(std::to_string(fake_.resource_version())));
  ASSERT_TRUE(fake_.Await([&] { return fake_.WatchesIdle(1); }));
  w.Stop();
  ASSERT_TRUE(fake_.Await([&] { return w.done(); }));
  EXPECT_TRUE(w.result().ok());
  EXPECT_EQ(fake_.open_watches(), 0);
}

TEST_F(FakeRestClientTest, InjectedFailuresAndRefusedConnections) {
  fake_.FailNext(2, 503, "resourceslices");
  EXPECT_TRUE(fake_.Get(kResv).ok());  // another path: not counted
  absl::StatusOr<kube::Response> r = fake_.Get(kSlices);
  EXPECT_EQ(kube::HttpCodeOf(r.status()), 503);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(kube::HttpCodeOf(fake_.Watch(
                WatchPath("1"), [](const json&) { return true; }, nullptr)),
            503);
  EXPECT_TRUE(fake_.Get(kSlices).ok());
  fake_.Refuse(true);
  absl::StatusOr<kube::Response> refused = fake_.Get(kSlices);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(kube::HttpCodeOf(refused.status()));
  EXPECT_THAT(refused.status().message(), HasSubstr("Couldn't connect"));
  fake_.Refuse(false);
  EXPECT_THAT(fake_.RequestLines(), ElementsAre("GET /apis/topodra.io/v1alpha1/reservations 200",
                                                "GET /apis/resource.k8s.io/v1/resourceslices 503",
                                                "WATCH " + WatchPath("1") + " 503",
                                                "GET /apis/resource.k8s.io/v1/resourceslices 200",
                                                "GET /apis/resource.k8s.io/v1/resourceslices 0"));
}

TEST_F(FakeRestClientTest, BeforeRequestHookMayWriteToTheFake) {
  fake_.SetBeforeRequest([this](const std::string& verb, const std::string&) {
    if (verb != "PUT") return;
    fake_.SetBeforeRequest(nullptr);
    ASSERT_TRUE(fake_.Delete(std::string(kSlices) + "/a", {}).ok());
  });
  const json a = Create(Slice("a", "n1"));
  EXPECT_EQ(kube::HttpCodeOf(fake_.Put(std::string(kSlices) + "/a", a).status()), 404);
}

}  // namespace
}  // namespace topodra::testing
