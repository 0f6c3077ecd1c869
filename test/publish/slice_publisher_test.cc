// The slice publisher against the in-memory API server (test/testing/fake_rest_client.h): the
// requests it makes, healing after deletions, edits, a restarted or unreachable server, and the
// log lines, with no Python server and no sleeps (backoffs are recorded, not waited).
// test/integration/publisher_test.cc runs the same publisher over HTTP against the Python server.
#include "driver/publish/slice_publisher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_features.h"
#include "driver/publish/slice_json.h"
#include "test/testing/fake_rest_client.h"
#include "test/testing/fixtures.h"
#include "test/testing/log_capture.h"
#include "test/testing/rewriting_rest_client.h"

namespace topodra::publish {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::SizeIs;
using topodra::testing::FakeRestClient;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr char kBeta[] = "/apis/resource.k8s.io/v1beta2/resourceslices";
// 32 CPUs, in slices of 12 devices at most: 3 slices in individual mode. Small, because building
// slices is most of the time these tests take under ASan.
constexpr char k32[] = "32em64t-2n8c2t-pci-normalio.xml";

SliceLimits Limits() {
  SliceLimits l;
  l.max_devices = 12;
  return l;
}

Pool PoolFor(const std::string& machine, CpuDeviceMode mode = CpuDeviceMode::kIndividual) {
  // Discovery is the slow part under ASan: once per machine.
  static std::map<std::string, topology::Topology>* loaded =
      new std::map<std::string, topology::Topology>();
  auto it = loaded->find(machine);
  if (it == loaded->end()) {
    it = loaded->emplace(machine, topodra::testing::LoadTopology(machine)).first;
  }
  PublishOptions o;
  o.node_name = "node-a";
  o.cpu_mode = mode;
  return BuildPools(it->second, o).at(0);
}

class SlicePublisherTest : public ::testing::Test {
 protected:
  SlicePublisherTest() {
    fake_.Serve(kSlices, "ResourceSlice");
    fake_.Serve("/api/v1/nodes", "Node");
    node_uid_ = (*fake_.Post("/api/v1/nodes", {{"metadata", {{"name", "node-a"}}}}))
                    .body["metadata"]["uid"];
  }
  ~SlicePublisherTest() override { StopRunning(); }

  PublisherOptions Options() {
    PublisherOptions o;
    o.write_concurrency = write_concurrency_;
    o.driver = "dra.cpu";
    o.node_name = "node-a";
    o.watch_timeout_seconds = 9;
    o.limits = Limits();
    o.backoff_wait = [this](std::unique_lock<std::mutex>&, std::condition_variable&,
                            std::chrono::milliseconds d, const std::function<bool()>&) {
      waits_.push_back(d.count());
      if (on_wait_) on_wait_(waits_.size());
    };
    return o;
  }
  // The publisher under test; the fixture stops it before it goes.
  SlicePublisher& Make() {
    StopRunning();
    publisher_ = std::make_unique<SlicePublisher>(&fake_, Options());
    return *publisher_;
  }
  void Start(SlicePublisher* p) {
    running_ = p;
    thread_ = std::thread([p] { p->Run(); });
  }
  void StopRunning() {
    if (running_ == nullptr) return;
    running_->Stop();
    thread_.join();  // a watch or backoff that did not wake would hang here
    running_ = nullptr;
  }
  // The publisher is idle in its watch with `slices` slices stored.
  bool Settled(size_t slices, const std::string& collection = kSlices) {
    return fake_.Await(
        [&] { return fake_.WatchesIdle(1) && fake_.Objects(collection).size() == slices; });
  }
  // The stored slices, flattened, against the flat form of `pool`; every one at `generation`.
  void ExpectStored(const Pool& pool, int64_t generation, const std::string& collection = kSlices) {
    json doc = {{"kind", "List"}, {"items", fake_.Objects(collection)}};
    absl::StatusOr<std::vector<Slice>> stored = SlicesFromDocument(doc);
    ASSERT_TRUE(stored.ok()) << stored.status();
    absl::StatusOr<std::vector<Slice>> flat = Flatten(*stored);
    ASSERT_TRUE(flat.ok()) << flat.status() << " " << DumpJson(doc).substr(0, 2000);
    absl::StatusOr<std::vector<Slice>> want = BuildSlices(pool, SliceForm::kFlat, Limits());
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(flat->size(), want->size());
    for (size_t i = 0; i < flat->size(); ++i) {
      Slice got = (*flat)[i];
      Slice w = (*want)[i];
      EXPECT_EQ(StringField(got.metadata, "name"), StringField(w.metadata, "name"));
      EXPECT_EQ(got.generation, generation);
      EXPECT_EQ(Field(got.metadata, "ownerReferences")[0]["uid"], node_uid_);
      got.metadata = w.metadata = json::object();
      got.generation = w.generation = 0;
      EXPECT_EQ(got, w);
    }
  }
  // The requests since the last call, with the query of writes cut (it is always the same).
  std::vector<std::string> Take() {
    std::vector<std::string> out;
    for (const FakeRestClient::Request& r : fake_.Requests()) {
      std::string path = r.path;
      if (r.verb != "GET" && r.verb != "WATCH") {
        path = path.substr(0, path.find('?')) +
               (r.path.find("dryRun=All") != std::string::npos ? "?dryRun=All" : "");
      }
      out.push_back(absl::StrCat(r.verb, " ", path, " ", r.code));
    }
    fake_.ClearRequests();
    return out;
  }

  FakeRestClient fake_;
  int write_concurrency_ = 1;
  std::string node_uid_;
  std::vector<int64_t> waits_;
  std::function<void(size_t)> on_wait_;
  SlicePublisher* running_ = nullptr;
  std::thread thread_;
  std::unique_ptr<SlicePublisher> publisher_;
};

const std::string kList =
    absl::StrCat("GET ", kSlices, "?fieldSelector=spec.driver%3Ddra.cpu%2Cspec.nodeName%3Dnode-a");

TEST_F(SlicePublisherTest, SyncOnceProbesMixinsOnceThenPublishes) {
  const Pool pool = PoolFor(k32);
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  fake_.ClearRequests();
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  ExpectStored(pool, 1);
  const std::string post = absl::StrCat("POST ", kSlices, " 201");
  // The fake keeps every field it is sent, as a server with KEP-5234 does: mixin form.
  EXPECT_THAT(Take(),
              ElementsAre(kList + " 200", "GET /api/v1/nodes/node-a 200",
                          absl::StrCat("POST ", kSlices, "?dryRun=All 201"), post, post, post));
  EXPECT_TRUE(p.status().mixins);
  EXPECT_TRUE(p.status().in_sync);
  EXPECT_EQ(p.status().writes, 3);
  // In sync: a second pass lists and writes nothing.
  ASSERT_TRUE(p.SyncOnce().ok());
  EXPECT_THAT(Take(), ElementsAre(kList + " 200"));
  EXPECT_EQ(p.status().generation, 1);
}

TEST_F(SlicePublisherTest, RunPublishesThenFollowsNewDesiredStatesWithoutRelisting) {
  SlicePublisher& p = Make();
  p.SetDesired(PoolFor(k32));
  Start(&p);
  ASSERT_TRUE(Settled(3));
  ExpectStored(PoolFor(k32), 1);
  Take();
  // A new pool wakes the watch: updates from the cache, no list.
  const Pool grouped = PoolFor(k32, CpuDeviceMode::kGrouped);
  p.SetDesired(grouped);
  ASSERT_TRUE(fake_.Await(
      [&] { return fake_.WatchesIdle(1) && p.status().in_sync && p.status().generation == 2; }));
  ExpectStored(grouped, 2);
  for (const std::string& r : Take()) {
    EXPECT_THAT(r, ::testing::Not(::testing::StartsWith("GET "))) << r;
  }
  // Nothing to publish: every slice goes.
  p.SetDesired(std::nullopt);
  ASSERT_TRUE(Settled(0));
  EXPECT_TRUE(waits_.empty());
}

TEST_F(SlicePublisherTest, HealsAWipeAndAnEditBehindItsBack) {
  const Pool pool = PoolFor(k32);
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  Start(&p);
  ASSERT_TRUE(Settled(3));
  // The kubelet's wipe at its start: every slice deleted.
  for (const json& s : fake_.Objects(kSlices)) {
    ASSERT_TRUE(
        fake_.Delete(absl::StrCat(kSlices, "/", s["metadata"]["name"].get<std::string>()), {})
            .ok());
  }
  // The deletes are three requests, as a real DeleteCollection's are: a publisher that sees the
  // first before the others heals twice, each time with a new generation. Healed: the whole pool
  // stored at the generation the publisher last wrote.
  int64_t healed = 0;
  ASSERT_TRUE(fake_.Await([&] {
    const std::vector<json> stored = fake_.Objects(kSlices);
    if (!fake_.WatchesIdle(1) || stored.size() != 3) return false;
    healed = p.status().generation;
    for (const json& s : stored) {
      if (s["spec"]["pool"]["generation"] != healed) return false;
    }
    return true;
  }));
  EXPECT_GE(healed, 2);
  ExpectStored(pool, healed);
  // Someone edits a slice: restored, with a new generation everywhere.
  json edited = *fake_.Object(kSlices, "node-a-dra.cpu-1");
  edited["spec"]["devices"][0]["attributes"]["dra.cpu/numaNodeID"]["int"] = 77;
  ASSERT_TRUE(fake_.Put(absl::StrCat(kSlices, "/node-a-dra.cpu-1"), edited).ok());
  ASSERT_TRUE(
      fake_.Await([&] { return fake_.WatchesIdle(1) && p.status().generation == healed + 1; }));
  ExpectStored(pool, healed + 1);
  EXPECT_TRUE(waits_.empty());
  EXPECT_EQ(p.status().errors, 0);
}

TEST_F(SlicePublisherTest, ServerRestartedEmptyWithLowerResourceVersions) {
  testing::LogCapture log;
  const Pool pool = PoolFor(k32);
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  Start(&p);
  ASSERT_TRUE(Settled(3));
  // An etcd restored without a revision bump: empty, and versions start below ours.
  fake_.Restart(/*next_resource_version=*/1);
  ASSERT_TRUE(Settled(3));
  // The generation goes on from what was published, though the server lost it.
  ExpectStored(pool, 2);
  EXPECT_THAT(waits_, ElementsAre(200));  // the broken watch, once
  EXPECT_THAT(log.Lines("retrying with backoff"), SizeIs(1));
  EXPECT_THAT(log.Lines("works again"), SizeIs(1));
}

TEST_F(SlicePublisherTest, ServerDownAtStartBacksOffWithinASecondAndLogsOnce) {
  testing::LogCapture log;
  fake_.Refuse(true);
  on_wait_ = [this](size_t n) {
    if (n == 6) fake_.Refuse(false);
  };
  SlicePublisher& p = Make();
  p.SetDesired(PoolFor(k32));
  Start(&p);
  ASSERT_TRUE(Settled(3));
  // Nothing listens: the backoff stays within a second (kRefusedMaxBackoff).
  EXPECT_THAT(waits_, ElementsAre(200, 400, 800, 1000, 1000, 1000));
  EXPECT_EQ(p.status().errors, 6);
  EXPECT_THAT(
      log.Lines("retrying with backoff"),
      ElementsAre("driver=dra.cpu node=node-a: publishing ResourceSlices failed, retrying with "
                  "backoff: GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%"
                  "3Ddra.cpu%2Cspec.nodeName%3Dnode-a: Couldn't connect to server"));
  EXPECT_THAT(log.Lines("works again"),
              ElementsAre("driver=dra.cpu node=node-a: publishing ResourceSlices works again"));
  EXPECT_EQ(p.status().last_error, "");
}

TEST_F(SlicePublisherTest, ServerErrorsGetTheFullBackoff) {
  fake_.FailNext(4, 503);
  SlicePublisher& p = Make();
  p.SetDesired(PoolFor(k32));
  Start(&p);
  ASSERT_TRUE(Settled(3));
  EXPECT_THAT(waits_, ElementsAre(200, 400, 800, 1600));
}

TEST_F(SlicePublisherTest, V1beta2OnlyServer) {
  fake_.Unserve(kSlices);
  fake_.Serve(kBeta, "ResourceSlice");
  fake_.ClearRequests();
  const Pool pool = PoolFor(k32);
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  Start(&p);
  ASSERT_TRUE(Settled(3, kBeta));
  ExpectStored(pool, 1, kBeta);
  EXPECT_EQ(fake_.Objects(kBeta)[0]["apiVersion"], "resource.k8s.io/v1beta2");
  const std::vector<std::string> r = Take();
  EXPECT_EQ(r[0], kList + " 404");
  EXPECT_THAT(r.back(), ::testing::StartsWith(absl::StrCat("WATCH ", kBeta, "?watch=true")));
}

TEST_F(SlicePublisherTest, CreateOverAStaleCacheRelistsAtOnce) {
  for (bool run_loop : {false, true}) {
    SCOPED_TRACE(run_loop ? "Run" : "SyncOnce");
    for (const json& s : fake_.Objects(kSlices)) {
      ASSERT_TRUE(
          fake_.Delete(absl::StrCat(kSlices, "/", s["metadata"]["name"].get<std::string>()), {})
              .ok());
    }
    const Pool pool = PoolFor(k32);
    // Someone stores an old slice of that name between the publisher's list and its create.
    fake_.SetBeforeRequest([&](const std::string& verb, const std::string& path) {
      if (verb != "POST" || path.find("dryRun") != std::string::npos) return;
      fake_.SetBeforeRequest(nullptr);
      Slice old = BuildSlices(pool, SliceForm::kFlat, Limits())->at(0);
      old.devices.resize(1);
      old.generation = 9;
      ASSERT_TRUE(fake_.Post(kSlices, SliceToJson(old, "resource.k8s.io/v1")).ok());
    });
    SlicePublisher& p = Make();
    p.SetDesired(pool);
    fake_.ClearRequests();
    if (run_loop) {
      Start(&p);
      ASSERT_TRUE(Settled(3));
      StopRunning();
    } else {
      ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
    }
    ExpectStored(pool, 10);
    EXPECT_EQ(p.status().errors, 0);  // a stale cache is not a failure worth a warning
    EXPECT_TRUE(waits_.empty());
    // The other writer's create, our 409, then a list and the update of what is there now.
    const std::vector<std::string> r = Take();
    ASSERT_GE(r.size(), 6u);
    EXPECT_EQ(r[3], absl::StrCat("POST ", kSlices, " 201"));
    EXPECT_EQ(r[4], absl::StrCat("POST ", kSlices, " 409"));
    EXPECT_EQ(r[5], kList + " 200");
  }
}

TEST_F(SlicePublisherTest, UpdateOfASliceDeletedMeanwhileCreatesIt) {
  const Pool pool = PoolFor(k32);
  Pool changed = pool;
  for (Device& d : changed.devices) d.attributes["test.topodra.io/round"] = int64_t{1};
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok());
  fake_.SetBeforeRequest([&](const std::string& verb, const std::string& path) {
    if (verb != "PUT") return;
    fake_.SetBeforeRequest(nullptr);
    ASSERT_TRUE(fake_.Delete(path.substr(0, path.find('?')), {}).ok());
  });
  p.SetDesired(changed);
  fake_.ClearRequests();
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  EXPECT_EQ(p.status().errors, 0);
  ExpectStored(changed, 2);
  std::vector<std::string> writes;
  for (const std::string& r : Take()) {
    if (r.rfind("GET", 0) != 0) writes.push_back(r.substr(0, r.find(' ')) + r.substr(r.rfind(' ')));
  }
  EXPECT_THAT(writes, ElementsAre("DELETE 200", "PUT 404", "POST 201", "PUT 200", "PUT 200"));
}

// The daemon sends a pass's writes a few at a time: the same pool ends up stored, changes and
// deletions follow, and the answers count as before.
TEST_F(SlicePublisherTest, ConcurrentWritesPublishTheSamePool) {
  write_concurrency_ = 4;
  const Pool pool = PoolFor(k32);
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  fake_.ClearRequests();
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  ExpectStored(pool, 1);
  const std::string post = absl::StrCat("POST ", kSlices, " 201");
  EXPECT_THAT(Take(),
              ElementsAre(kList + " 200", "GET /api/v1/nodes/node-a 200",
                          absl::StrCat("POST ", kSlices, "?dryRun=All 201"), post, post, post));
  EXPECT_EQ(p.status().writes, 3);
  const Pool grouped = PoolFor(k32, CpuDeviceMode::kGrouped);
  p.SetDesired(grouped);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  ExpectStored(grouped, 2);
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  ExpectStored(pool, 3);
  EXPECT_EQ(p.status().errors, 0);
  // In sync: a further pass lists and writes nothing.
  Take();
  ASSERT_TRUE(p.SyncOnce().ok());
  EXPECT_THAT(Take(), ElementsAre(kList + " 200"));
}

// Holds the first create (not a dry run) that comes in until a second one arrives or the hold
// ends: whether the pass's writes went out together. Rearm starts over for another pass.
class FirstCreateHold {
 public:
  FirstCreateHold(FakeRestClient& fake, std::chrono::seconds hold) : fake_(fake), hold_(hold) {
    fake_.SetBeforeRequest(
        [this](const std::string& verb, const std::string& path) { OnRequest(verb, path); });
  }
  ~FirstCreateHold() { fake_.SetBeforeRequest(nullptr); }
  void Rearm(std::chrono::seconds hold) {
    std::lock_guard<std::mutex> lock(mu_);
    posts_ = 0;
    together_ = false;
    hold_ = hold;
  }
  bool together() {
    std::lock_guard<std::mutex> lock(mu_);
    return together_;
  }

 private:
  void OnRequest(const std::string& verb, const std::string& path) {
    if (verb != "POST" || path.find("dryRun") != std::string::npos) return;
    std::unique_lock<std::mutex> lock(mu_);
    if (++posts_ == 1) {
      together_ = cv_.wait_for(lock, hold_, [&] { return posts_ >= 2; });
    } else {
      cv_.notify_all();
    }
  }
  FakeRestClient& fake_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::chrono::seconds hold_;
  int posts_ = 0;
  bool together_ = false;
};

// Slices that carry no field a server may drop unseen (none gated, or every one probed) go out
// together from the first: the first create is held until a second one arrives (it never would
// if the first went alone; the wait's bound only keeps such a failure from hanging).
TEST_F(SlicePublisherTest, FirstWriteGoesWithTheOthersWhenNothingIsLeftToFind) {
  write_concurrency_ = 4;
  const Pool pool = PoolFor(k32);
  FirstCreateHold hold(fake_, std::chrono::seconds(20));
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  EXPECT_TRUE(hold.together());
  ExpectStored(pool, 1);
}

// A probe vouches for the server in its own pass only: the server may change later (an upgrade
// pruning the 1.36 field, a gate rolled back). After a first pass whose writes all went together
// (mixins probed), a wipe makes the next pass create every slice again: with the probe's answer
// from before, its first create goes alone. The hold is the one of
// FirstWriteGoesAloneWhenAFieldIsUnprobed (a slow machine can only make this pass wrongly).
TEST_F(SlicePublisherTest, FirstWriteOfALaterPassGoesAloneWhenItsProbeRanBefore) {
  write_concurrency_ = 4;
  const Pool pool = PoolFor(k32);
  FirstCreateHold hold(fake_, std::chrono::seconds(20));
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  ASSERT_TRUE(p.status().mixins);
  EXPECT_TRUE(hold.together());  // the first pass probed mixins: all went together
  for (const json& s : fake_.Objects(kSlices)) {
    ASSERT_TRUE(
        fake_.Delete(absl::StrCat(kSlices, "/", s["metadata"]["name"].get<std::string>()), {})
            .ok());
  }
  hold.Rearm(std::chrono::seconds(1));
  fake_.ClearRequests();
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  EXPECT_FALSE(hold.together());
  // No probe again: the answer from before still decides the form.
  for (const std::string& r : Take()) EXPECT_EQ(r.find("dryRun"), std::string::npos) << r;
  ExpectStored(pool, 2);
}

// Taints in on mode are never probed: only a write can show the server drops them, so the first
// write goes alone and the pass stops after it, with one slice stored instead of the pool. The
// first create is held a while for a second one to come in: none may (a slow machine can only
// make this pass wrongly, never fail wrongly); FirstWriteMustGoAlone's table is the exact test.
TEST_F(SlicePublisherTest, FirstWriteGoesAloneWhenAFieldIsUnprobed) {
  write_concurrency_ = 4;
  Pool pool = PoolFor(k32);
  for (Device& d : pool.devices) {
    d.extra["taints"] = json::array({{{"key", "k"}, {"value", "v"}, {"effect", "NoSchedule"}}});
  }
  FirstCreateHold hold(fake_, std::chrono::seconds(1));
  topodra::testing::TaintDroppingClient client(&fake_);
  PublisherOptions o = Options();
  o.taints = TaintMode::kOn;
  o.mixins = MixinMode::kOff;             // flat: no mixin fallback to take first
  o.limits.max_devices_with_taints = 12;  // several slices
  SlicePublisher p(&client, o);
  p.SetDesired(pool);
  const absl::Status st = p.SyncOnce();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_FALSE(hold.together());
  EXPECT_THAT(fake_.Objects(kSlices), SizeIs(1));
}

// Which fields make the first write go alone: those a gate may drop, unless a probe showed the
// server keeps them.
TEST(FirstWriteMustGoAloneTest, GatedFieldsUnlessProbed) {
  const json taints = json::array({{{"key", "k"}, {"value", "v"}, {"effect", "NoSchedule"}}});
  struct Case {
    std::string name;
    std::function<void(Slice&, Device&)> edit;
    ProbedFields probed;
    bool alone;
  };
  ProbedFields all;
  all.mixins = all.taints = all.lists = true;
  all.node_allocatable = NodeAllocatableField::kV137;
  ProbedFields mixins_only;
  mixins_only.mixins = true;
  ProbedFields v136;
  v136.node_allocatable = NodeAllocatableField::kV136;
  const std::vector<Case> cases = {
      {"plain", [](Slice&, Device&) {}, {}, false},
      {"plain, all probed", [](Slice&, Device&) {}, all, false},
      {"taints unprobed", [&](Slice&, Device& d) { d.extra["taints"] = taints; }, {}, true},
      {"taints probed", [&](Slice&, Device& d) { d.extra["taints"] = taints; }, all, false},
      {"list attribute unprobed",
       [](Slice&, Device& d) {
         d.attributes["dra.cpu/l"] = StringList{{"a", "b"}};
       },
       {},
       true},
      {"list attribute probed",
       [](Slice&, Device& d) {
         d.attributes["dra.cpu/l"] = StringList{{"a", "b"}};
       },
       all, false},
      {"mixins unprobed",
       [](Slice& s, Device& d) {
         s.mixins.push_back({"m", {}, {}});
         d.includes = {"m"};
       },
       {},
       true},
      {"mixins probed",
       [](Slice& s, Device& d) {
         s.mixins.push_back({"m", {}, {}});
         d.includes = {"m"};
       },
       all, false},
      // CompactSlice moves attributes of any type, lists too, into the mixins.
      {"list attribute in a mixin, lists unprobed",
       [&](Slice& s, Device& d) {
         s.mixins.push_back({"m", {{"dra.cpu/l", StringList{{"a", "b"}}}}, {}});
         d.includes = {"m"};
       },
       mixins_only, true},
      {"list attribute in a mixin, lists probed",
       [&](Slice& s, Device& d) {
         s.mixins.push_back({"m", {{"dra.cpu/l", StringList{{"a", "b"}}}}, {}});
         d.includes = {"m"};
       },
       all, false},
      {"request policy in a mixin",
       [](Slice& s, Device& d) {
         s.mixins.push_back({"m", {}, {{"dra.cpu/cpu", {"4", RequestPolicy{"1", {}, {}}}}}});
         d.includes = {"m"};
       },
       all, true},
      {"1.37 field unprobed",
       [](Slice&, Device& d) { d.extra[kNodeAllocatableResources] = 1; },
       {},
       true},
      {"1.37 field probed", [](Slice&, Device& d) { d.extra[kNodeAllocatableResources] = 1; }, all,
       false},
      {"1.37 field, 1.36 probed", [](Slice&, Device& d) { d.extra[kNodeAllocatableResources] = 1; },
       v136, true},
      {"1.36 field, 1.36 probed",
       [](Slice&, Device& d) { d.extra[kNodeAllocatableResourceMappings] = 1; }, v136, false},
      {"consumable capacity", [](Slice&, Device& d) { d.allow_multiple_allocations = true; }, all,
       true},
      {"request policy",
       [](Slice&, Device& d) {
         d.capacity["dra.cpu/cpu"] = {"4", RequestPolicy{"1", {}, {}}};
       },
       all, true},
      {"counters", [](Slice&, Device& d) { d.extra["consumesCounters"] = json::array(); }, all,
       true},
      {"spec field not modelled", [](Slice& s, Device&) { s.extra_spec["sharedCounters"] = 1; },
       all, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Slice> slices(2);
    for (Slice& s : slices) s.devices.resize(2);
    // The field on the last device of the last slice: every device is looked at.
    c.edit(slices.back(), slices.back().devices.back());
    EXPECT_EQ(FirstWriteMustGoAlone(slices, c.probed), c.alone);
  }
}

// One of the writes sent together fails: the pass fails, no further write starts, and the next
// pass publishes the whole pool at a new generation.
TEST_F(SlicePublisherTest, ConcurrentWriteFailureIsRetriedWithANewGeneration) {
  write_concurrency_ = 4;
  const Pool pool = PoolFor(k32);
  std::atomic<int> posts{0};
  fake_.SetBeforeRequest([&](const std::string& verb, const std::string& path) {
    // The second real create fails.
    if (verb == "POST" && path.find("dryRun") == std::string::npos && ++posts == 2) {
      fake_.FailNext(1, 500, "/resourceslices");
    }
  });
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  EXPECT_FALSE(p.SyncOnce().ok());
  EXPECT_FALSE(p.status().in_sync);
  EXPECT_EQ(p.status().errors, 1);
  fake_.SetBeforeRequest(nullptr);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  // Generation 1 may have been seen in the slices that were stored: the pool goes on at 2.
  ExpectStored(pool, 2);
  EXPECT_TRUE(p.status().in_sync);
}

// A slice of a later name appears between the list and the writes sent together: its create gets
// 409, the cache is re-listed at once and that slice is updated, with no backoff and no error.
TEST_F(SlicePublisherTest, ConcurrentCreateOverAStaleCacheRelistsAtOnce) {
  write_concurrency_ = 4;
  const Pool pool = PoolFor(k32);
  Slice old = BuildSlices(pool, SliceForm::kFlat, Limits())->at(2);
  old.devices.resize(1);
  old.generation = 9;
  // At the Node GET, which comes after the list and before any create: the writes go out
  // together, so the first create that comes in may be that slice's own.
  std::atomic<bool> done{false};
  fake_.SetBeforeRequest([&](const std::string& verb, const std::string& path) {
    if (verb != "GET" || path.rfind("/api/v1/nodes/", 0) != 0 || done.exchange(true)) return;
    ASSERT_TRUE(fake_.Post(kSlices, SliceToJson(old, "resource.k8s.io/v1")).ok());
  });
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  fake_.SetBeforeRequest(nullptr);
  ExpectStored(pool, 10);
  EXPECT_EQ(p.status().errors, 0);
  EXPECT_TRUE(waits_.empty());
}

// The reservation controller writes a status only once the slices showing its devices are
// stored: WaitPublished returns true only then, for the last pool given.
TEST_F(SlicePublisherTest, WaitPublishedReturnsOnceTheLastPoolIsStored) {
  const Pool pool = PoolFor(k32);
  SlicePublisher& p = Make();
  p.SetDesired(pool);
  Start(&p);
  ASSERT_TRUE(p.WaitPublished(std::chrono::seconds(30)));
  ExpectStored(pool, 1);
  const Pool grouped = PoolFor(k32, CpuDeviceMode::kGrouped);
  p.SetDesired(grouped);
  ASSERT_TRUE(p.WaitPublished(std::chrono::seconds(30)));
  ExpectStored(grouped, 2);
  // The watch, started after both passes, replays the mixin slices' creation and deletion: the
  // slices we deleted are not brought back (deleted again, the pool rewritten at generation 3).
  ASSERT_TRUE(Settled(1));
  ExpectStored(grouped, 2);
  for (const FakeRestClient::Request& r : fake_.Requests()) EXPECT_NE(r.code, 404) << r.path;
  // A server refusing every write: the wait ends at its bound, false. Only writes carry a field
  // manager: a failure armed for any request could be taken by the watch's list instead.
  on_wait_ = [this](size_t) { fake_.FailNext(1, 503, "fieldManager="); };
  fake_.FailNext(1, 503, "fieldManager=");
  p.SetDesired(pool);
  EXPECT_FALSE(p.WaitPublished(std::chrono::milliseconds(100)));
  ExpectStored(grouped, 2);
  // And Stop ends it at once.
  StopRunning();
  EXPECT_FALSE(p.WaitPublished(std::chrono::seconds(30)));
}

// The daemon's start: the publisher lists, asks for its Node and probes (dry runs, nothing
// stored) while the DRA socket is still coming up; its first write waits for ReleaseWrites.
TEST_F(SlicePublisherTest, HeldWritesWaitForReleaseAndStopEndsTheWait) {
  const Pool pool = PoolFor(k32);
  // Stopped while held first: it leaves nothing behind, so the second publisher starts alike.
  for (bool release : {false, true}) {
    SCOPED_TRACE(release ? "released" : "stopped while held");
    fake_.ClearRequests();
    SlicePublisher& p = Make();
    p.HoldWrites();
    p.SetDesired(pool);
    Start(&p);
    // The mixin probe is the last request before the writes.
    ASSERT_TRUE(fake_.Await([&] {
      for (const FakeRestClient::Request& r : fake_.Requests()) {
        if (r.verb == "POST" && r.path.find("dryRun=All") != std::string::npos) return true;
      }
      return false;
    }));
    for (const FakeRestClient::Request& r : fake_.Requests()) {
      EXPECT_TRUE(r.verb == "GET" || r.path.find("dryRun=All") != std::string::npos)
          << r.verb << " " << r.path;
    }
    EXPECT_TRUE(fake_.Objects(kSlices).empty());
    EXPECT_FALSE(p.status().published_once);
    if (!release) {
      StopRunning();  // would hang here if the held write did not see Stop
      EXPECT_TRUE(fake_.Objects(kSlices).empty());
      continue;
    }
    p.ReleaseWrites();
    ASSERT_TRUE(p.WaitPublished(std::chrono::seconds(30)));
    ExpectStored(pool, 1);
    StopRunning();
  }
}

// SIGTERM while the writes are held: the pass ends Cancelled, which is no failed publish (no
// warning, no slice_publish_errors).
TEST_F(SlicePublisherTest, StopWhileWritesAreHeldIsNoError) {
  testing::LogCapture log;
  SlicePublisher& p = Make();
  p.HoldWrites();
  p.SetDesired(PoolFor(k32));
  absl::Status result;
  std::thread sync([&] { result = p.SyncOnce(); });
  ASSERT_TRUE(fake_.Await([&] {
    for (const FakeRestClient::Request& r : fake_.Requests()) {
      if (r.verb == "POST" && r.path.find("dryRun=All") != std::string::npos) return true;
    }
    return false;
  }));
  p.Stop();
  sync.join();
  EXPECT_TRUE(absl::IsCancelled(result)) << result;
  EXPECT_EQ(p.status().errors, 0);
  EXPECT_EQ(p.status().last_error, "");
  EXPECT_THAT(log.Lines("publishing ResourceSlices failed"), SizeIs(0));
  EXPECT_TRUE(fake_.Objects(kSlices).empty());
}

// A pool that changes faster than a pass plans it (reservations, health republishes), with no
// hold: each pass writes the pool it planned and the next pass the newer one. Re-planning
// whenever the pool had changed would write nothing for as long as the changes come.
TEST_F(SlicePublisherTest, DesiredChangingDuringEveryPassStillWrites) {
  const Pool pool = PoolFor(k32);
  const Pool grouped = PoolFor(k32, CpuDeviceMode::kGrouped);
  // With no Node every pass asks for it again, so the hook below runs inside every plan.
  fake_.FailNext(1000, 404, "/api/v1/nodes/node-a");
  SlicePublisher& p = Make();
  constexpr int kChanges = 10;
  std::atomic<int> plans{0};
  std::atomic<int> writes_before_last{-1};
  fake_.SetBeforeRequest([&](const std::string& verb, const std::string& path) {
    if (verb != "GET" || path.find("/api/v1/nodes/node-a") == std::string::npos) return;
    const int n = ++plans;
    if (n > kChanges) return;
    if (n == kChanges) {
      int writes = 0;
      for (const FakeRestClient::Request& r : fake_.Requests()) {
        if ((r.verb == "POST" || r.verb == "PUT") &&
            r.path.find("dryRun=All") == std::string::npos) {
          ++writes;
        }
      }
      writes_before_last = writes;
    }
    p.SetDesired(n % 2 == 1 ? grouped : pool);
  });
  p.SetDesired(pool);
  Start(&p);
  ASSERT_TRUE(fake_.Await([&] { return plans.load() > kChanges; }));
  ASSERT_TRUE(p.WaitPublished(std::chrono::seconds(30)));
  fake_.SetBeforeRequest(nullptr);
  // Nine passes wrote before the last change.
  EXPECT_GE(writes_before_last.load(), kChanges - 1);
  EXPECT_GE(p.status().generation, kChanges);
  // The last change asked for `pool`: 3 slices in individual mode.
  EXPECT_THAT(fake_.Objects(kSlices), SizeIs(3));
  EXPECT_EQ(p.status().errors, 0);
}

TEST_F(SlicePublisherTest, StopBeforeADesiredStateReturnsAtOnce) {
  SlicePublisher& p = Make();
  fake_.ClearRequests();
  Start(&p);
  StopRunning();
  EXPECT_TRUE(fake_.Requests().empty());  // nothing decided: nothing listed or touched
}

}  // namespace
}  // namespace topodra::publish
