// The list + watch loop against the in-memory API server: the requests it makes, resuming from
// the last resourceVersion, 410 -> relist, backoff (recorded, not slept), stop and wake at once.
#include "driver/kube/informer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "test/testing/fake_rest_client.h"

namespace topodra::kube {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using topodra::testing::FakeRestClient;
using Next = InformerHandler::Next;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
const std::string kSelector = "spec.nodeName%3Dn1";  // as encoded in paths

json Slice(const std::string& name, const std::string& node = "n1") {
  return {{"metadata", {{"name", name}}}, {"spec", {{"nodeName", node}}}};
}

// Records what the informer tells it, as lines.
class Recorder : public InformerHandler {
 public:
  absl::Status OnList(std::vector<json> items) override {
    std::string line = "list";
    for (const json& i : items)
      absl::StrAppend(&line, " ", i["metadata"]["name"].get<std::string>());
    Add(line);
    return absl::OkStatus();
  }
  absl::Status OnListError(const absl::Status& error) override {
    return list_error ? list_error(error) : error;
  }
  Next OnEvent(const std::string& type, const json& object) override {
    const std::string name = object["metadata"]["name"];
    Add(type + " " + name);
    return on_event ? on_event(type, name) : Next::kContinue;
  }
  absl::Status Sync() override {
    Add("sync");
    return sync ? sync() : absl::OkStatus();
  }
  void OnResult(const absl::Status& result) override {
    Add(result.ok() ? "ok" : absl::StrCat("error ", result.message()));
  }
  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  // The lines since the last call.
  std::vector<std::string> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(lines_, {});
  }

  std::function<Next(const std::string&, const std::string&)> on_event;
  std::function<absl::Status()> sync;
  std::function<absl::Status(const absl::Status&)> list_error;

 private:
  void Add(std::string line) {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(std::move(line));
  }
  std::mutex mu_;
  std::vector<std::string> lines_;
};

class InformerTest : public ::testing::Test {
 protected:
  InformerTest() { fake_.Serve(kSlices, "ResourceSlice"); }
  ~InformerTest() override { StopRunning(); }

  InformerOptions Options() {
    InformerOptions o;
    o.collections = {kSlices};
    o.field_selector = "spec.nodeName=n1";
    o.watch_timeout_seconds = 7;
    // Backoffs are recorded and pass at once; `on_wait` may act at the n-th.
    o.wait = [this](std::unique_lock<std::mutex>&, std::condition_variable&,
                    std::chrono::milliseconds d, const std::function<bool()>&) {
      waits_.push_back(d.count());
      if (on_wait_) on_wait_(waits_.size());
    };
    return o;
  }
  void Start(InformerOptions o) {
    informer_ = std::make_unique<Informer>(&fake_, std::move(o), &handler_);
    thread_ = std::thread([this] { informer_->Run(); });
  }
  void StopRunning() {
    if (informer_ == nullptr) return;
    informer_->Stop();
    thread_.join();
    informer_.reset();
  }
  bool Idle() {
    return fake_.Await([&] { return fake_.WatchesIdle(1); });
  }
  std::string Watch(const std::string& rv) {
    return absl::StrCat("WATCH ", kSlices,
                        "?watch=true&allowWatchBookmarks=true&fieldSelector=", kSelector,
                        "&resourceVersion=", rv, "&timeoutSeconds=7 200");
  }
  std::string List(int code = 200) {
    return absl::StrCat("GET ", kSlices, "?fieldSelector=", kSelector, " ", code);
  }
  std::string Rv() { return std::to_string(fake_.resource_version()); }
  // The informer's requests (the test's own writes left out).
  std::vector<std::string> Reads() {
    std::vector<std::string> out;
    for (const std::string& l : fake_.RequestLines()) {
      if (l.rfind("GET ", 0) == 0 || l.rfind("WATCH ", 0) == 0) out.push_back(l);
    }
    return out;
  }
  bool IdleAfter(size_t reads) {
    return fake_.Await([&] { return Reads().size() == reads && fake_.WatchesIdle(1); });
  }
  void Create(const std::string& name, const std::string& node = "n1") {
    ASSERT_TRUE(fake_.Post(kSlices, Slice(name, node)).ok());
  }

  FakeRestClient fake_;
  Recorder handler_;
  std::vector<int64_t> waits_;  // written on the informer's thread, read after Idle()/Stop
  std::function<void(size_t)> on_wait_;
  std::unique_ptr<Informer> informer_;
  std::thread thread_;
};

TEST_F(InformerTest, ListsWatchesFromTheListAndResumesFromTheLastEvent) {
  Create("a");
  Create("other", "n2");
  const std::string listed = Rv();
  Start(Options());
  ASSERT_TRUE(Idle());
  EXPECT_THAT(handler_.Take(), ElementsAre("list a", "sync", "ok"));
  Create("b");
  const std::string b = Rv();
  Create("elsewhere", "n2");
  ASSERT_TRUE(fake_.Await([&] { return handler_.Lines().size() == 1 && fake_.WatchesIdle(1); }));
  EXPECT_THAT(handler_.Take(), ElementsAre("ADDED b"));
  EXPECT_EQ(informer_->resource_version(), b);
  fake_.EndWatches();  // timeoutSeconds: watch again from the last event, no list
  ASSERT_TRUE(IdleAfter(3));
  EXPECT_THAT(handler_.Take(), ElementsAre("sync", "ok"));
  EXPECT_THAT(Reads(), ElementsAre(List(), Watch(listed), Watch(b)));
  EXPECT_TRUE(waits_.empty());
}

TEST_F(InformerTest, BookmarksMoveTheResourceVersionWithoutAnEvent) {
  Start(Options());
  ASSERT_TRUE(Idle());
  Create("elsewhere", "n2");  // filtered out: only a bookmark tells of the new version
  fake_.SendBookmarks();
  ASSERT_TRUE(
      fake_.Await([&] { return informer_->resource_version() == Rv() && fake_.WatchesIdle(1); }));
  fake_.EndWatches();
  ASSERT_TRUE(IdleAfter(3));
  EXPECT_EQ(Reads().back(), Watch(Rv()));
  EXPECT_THAT(handler_.Lines(), ElementsAre("list", "sync", "ok", "sync", "ok"));
}

TEST_F(InformerTest, GoneRelists) {
  Start(Options());
  ASSERT_TRUE(Idle());
  // An open watch expires (410 event) ...
  fake_.ExpireWatches();
  ASSERT_TRUE(IdleAfter(4));
  Create("a");
  const std::string a = Rv();
  ASSERT_TRUE(fake_.Await([&] { return handler_.Lines().size() == 7 && fake_.WatchesIdle(1); }));
  // ... and a watch resumed from a version the server no longer has gets 410 too.
  Create("elsewhere", "n2");
  fake_.Compact();
  fake_.EndWatches();
  ASSERT_TRUE(IdleAfter(7));
  EXPECT_THAT(Reads(),
              ElementsAre(List(), Watch("1"), List(), Watch("1"), Watch(a), List(), Watch(Rv())));
  EXPECT_THAT(handler_.Lines(), ElementsAre("list", "sync", "ok", "list", "sync", "ok", "ADDED a",
                                            "sync", "ok", "list a", "sync", "ok"));
  EXPECT_TRUE(waits_.empty());  // none of this is an error
}

TEST_F(InformerTest, HandlerEndsTheWatchToSyncOrRelist) {
  handler_.on_event = [](const std::string& type, const std::string&) {
    return type == "ADDED" ? Next::kSync : Next::kRelist;
  };
  Start(Options());
  ASSERT_TRUE(Idle());
  Create("a");
  ASSERT_TRUE(IdleAfter(3));
  const std::string added = Rv();
  ASSERT_TRUE(fake_.Delete(absl::StrCat(kSlices, "/a"), {}).ok());
  ASSERT_TRUE(IdleAfter(5));
  EXPECT_THAT(Reads(), ElementsAre(List(), Watch("1"), Watch(added), List(), Watch(Rv())));
  EXPECT_THAT(handler_.Lines(), ElementsAre("list", "sync", "ok", "ADDED a", "sync", "ok",
                                            "DELETED a", "list", "sync", "ok"));
}

TEST_F(InformerTest, ErrorsBackOffAndTheBackoffStartsOverOnceAWatchWasUp) {
  InformerOptions o = Options();
  o.initial_backoff = std::chrono::milliseconds(200);
  o.max_backoff = std::chrono::milliseconds(1000);
  fake_.FailNext(4, 503, "fieldSelector");  // lists and watches
  Start(o);
  ASSERT_TRUE(Idle());
  // Four failed lists: 200 400 800 1000 (the max).
  EXPECT_THAT(waits_, ElementsAre(200, 400, 800, 1000));
  const std::vector<std::string> lines = handler_.Take();
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[0], "error GET " + std::string(kSlices) + "?fieldSelector=" + kSelector +
                          ": HTTP 503 ServiceUnavailable: injected failure");
  EXPECT_THAT(std::vector<std::string>(lines.begin() + 4, lines.end()),
              ElementsAre("list", "sync", "ok"));
  // The watch that ran reset the backoff; watches that fail at once, though the list between
  // them works, make it grow again (the list alone proves little: RBAC without watch).
  waits_.clear();
  fake_.FailNext(3, 503, "watch=true");
  fake_.EndWatches();
  ASSERT_TRUE(IdleAfter(13));
  EXPECT_THAT(waits_, ElementsAre(200, 400, 800));
  // A watch that ran resets it again.
  waits_.clear();
  fake_.EndWatches();
  ASSERT_TRUE(IdleAfter(14));
  fake_.FailNext(1, 503, "watch=true");
  fake_.EndWatches();
  ASSERT_TRUE(IdleAfter(17));
  EXPECT_THAT(waits_, ElementsAre(200));
}

TEST_F(InformerTest, RefusedConnectionsKeepTheBackoffSmall) {
  InformerOptions o = Options();
  o.initial_backoff = std::chrono::milliseconds(200);
  o.max_backoff = std::chrono::milliseconds(30000);
  o.refused_max_backoff = std::chrono::milliseconds(1000);
  fake_.Refuse(true);
  on_wait_ = [this](size_t n) {
    if (n == 5) {
      fake_.Refuse(false);
      fake_.FailNext(2, 429);
    }
  };
  Start(o);
  ASSERT_TRUE(Idle());
  // Refused: 200 400 800 1000 1000; then the server answers 429: it starts from 1000, not 16 s.
  EXPECT_THAT(waits_, ElementsAre(200, 400, 800, 1000, 1000, 1000, 2000));
}

TEST_F(InformerTest, WithoutARefusedLimitRefusedIsAnError) {
  InformerOptions o = Options();
  o.initial_backoff = std::chrono::milliseconds(200);
  fake_.Refuse(true);
  on_wait_ = [this](size_t n) {
    if (n == 5) fake_.Refuse(false);
  };
  Start(o);
  ASSERT_TRUE(Idle());
  EXPECT_THAT(waits_, ElementsAre(200, 400, 800, 1600, 3200));
}

TEST_F(InformerTest, SyncErrorsBackOffWithoutRelistingUnlessAsked) {
  int failures = 2;
  handler_.sync = [&] {
    if (failures-- > 0) {
      if (failures == 0) informer_->Relist();
      return absl::UnavailableError("sync failed");
    }
    return absl::OkStatus();
  };
  InformerOptions o = Options();
  o.initial_backoff = std::chrono::milliseconds(10);
  Start(o);
  ASSERT_TRUE(Idle());
  EXPECT_THAT(waits_, ElementsAre(10, 20));
  EXPECT_THAT(handler_.Lines(), ElementsAre("list", "sync", "error sync failed", "sync",
                                            "error sync failed", "list", "sync", "ok"));
}

TEST_F(InformerTest, ListErrorsGoThroughTheHandler) {
  fake_.Unserve(kSlices);
  handler_.list_error = [](const absl::Status& st) {
    return HttpCodeOf(st) == 404 ? absl::NotFoundError("not installed") : st;
  };
  on_wait_ = [this](size_t n) {
    if (n == 2) fake_.Serve(kSlices, "ResourceSlice");
  };
  Start(Options());
  ASSERT_TRUE(Idle());
  EXPECT_THAT(handler_.Lines(),
              ElementsAre("error not installed", "error not installed", "list", "sync", "ok"));
}

TEST_F(InformerTest, FallsBackToTheFirstServedCollection) {
  const std::string beta = "/apis/resource.k8s.io/v1beta2/resourceslices";
  fake_.Unserve(kSlices);
  fake_.Serve(beta, "ResourceSlice");
  InformerOptions o = Options();
  o.collections = {kSlices, beta};
  Start(o);
  ASSERT_TRUE(Idle());
  EXPECT_EQ(informer_->collection(), beta);
  const std::vector<std::string> r = Reads();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], List(404));
  EXPECT_EQ(r[1], absl::StrCat("GET ", beta, "?fieldSelector=", kSelector, " 200"));
  EXPECT_THAT(r[2], ::testing::StartsWith("WATCH " + beta + "?watch=true"));
}

TEST_F(InformerTest, StopEndsAWatchAtOnce) {
  Start(Options());
  ASSERT_TRUE(Idle());
  StopRunning();  // joins: a watch that did not wake would hang here
  EXPECT_EQ(fake_.open_watches(), 0);
}

TEST_F(InformerTest, StopEndsABackoffAtOnce) {
  InformerOptions o = Options();
  o.wait = nullptr;  // the real clock
  o.initial_backoff = std::chrono::hours(1);
  fake_.FailNext(1, 500);
  Start(o);
  ASSERT_TRUE(fake_.Await([&] { return Reads().size() == 1; }));
  StopRunning();  // an hour otherwise
  EXPECT_EQ(Reads().size(), 1u);
}

TEST_F(InformerTest, StopBeforeRunReturnsAtOnce) {
  Informer informer(&fake_, Options(), &handler_);
  informer.Stop();
  informer.Run();
  EXPECT_TRUE(Reads().empty());
}

TEST_F(InformerTest, WakeEndsTheWatchAndSyncsWithoutAList) {
  Start(Options());
  ASSERT_TRUE(Idle());
  handler_.Take();
  informer_->Wake();
  ASSERT_TRUE(IdleAfter(3));
  EXPECT_THAT(handler_.Lines(), ElementsAre("sync", "ok"));
  EXPECT_EQ(Reads()[2], Watch("1"));
}

TEST_F(InformerTest, ListOnTheCallersThread) {
  Create("a");
  Informer informer(&fake_, Options(), &handler_);
  ASSERT_TRUE(informer.List().ok());
  EXPECT_EQ(informer.resource_version(), Rv());
  EXPECT_THAT(handler_.Lines(), ElementsAre("list a"));
  fake_.Unserve(kSlices);
  EXPECT_EQ(HttpCodeOf(informer.List()), 404);
}

}  // namespace
}  // namespace topodra::kube
