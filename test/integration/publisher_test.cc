// The slice publisher against the fake API server over real HTTP(S): every mode, mixins accepted
// or not, and the faults of issue 3 (server restarted empty, down at start, slices deleted or
// changed behind the daemon's back).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"
#include "driver/kube/rest_client.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_json.h"
#include "driver/publish/slice_publisher.h"
#include "test/integration/fake_apiserver.h"
#include "test/integration/fake_apiserver_client.h"
#include "test/testing/eventually.h"
#include "test/testing/fixtures.h"
#include "test/testing/rewriting_rest_client.h"

namespace topodra::publish {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using topodra::testing::Eventually;
using topodra::testing::FakeApiServer;
using topodra::testing::FakeApiServerOptions;

topology::Topology Load(const std::string& name) { return topodra::testing::LoadTopology(name); }

std::unique_ptr<FakeApiServer> StartServer(FakeApiServerOptions o = {}) {
  o.nodes.push_back({"node-a", "0b7c5e7e-node-a"});
  absl::StatusOr<std::unique_ptr<FakeApiServer>> s = FakeApiServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::unique_ptr<kube::RestClient> ClientFor(const FakeApiServer& server) {
  std::unique_ptr<kube::RestClient> client =
      topodra::testing::ClientFor(server, std::chrono::milliseconds(3000));
  EXPECT_NE(client, nullptr);
  return client;
}

Pool PoolFor(const topology::Topology& t, CpuDeviceMode mode, GroupBy by = GroupBy::kNuma,
             size_t index = 0) {
  PublishOptions o;
  o.node_name = "node-a";
  o.cpu_mode = mode;
  o.group_by = by;
  return BuildPools(t, o).at(index);
}

PublisherOptions FastOptions(const std::string& driver, MixinMode mixins = MixinMode::kAuto) {
  PublisherOptions o;
  o.driver = driver;
  o.node_name = "node-a";
  o.mixins = mixins;
  o.initial_backoff = std::chrono::milliseconds(20);
  o.max_backoff = std::chrono::milliseconds(200);
  o.watch_timeout_seconds = 5;
  return o;
}

// What the server stores for one driver, as slices; names sorted.
std::vector<Slice> Stored(kube::RestClient& client, const std::string& driver,
                          const std::string& version = "v1") {
  absl::StatusOr<kube::Response> r =
      client.Get("/apis/resource.k8s.io/" + version + "/resourceslices?fieldSelector=" +
                 kube::UrlEncode("spec.driver=" + driver + ",spec.nodeName=node-a"));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  absl::StatusOr<std::vector<Slice>> s = SlicesFromDocument(r->body);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  std::sort(s->begin(), s->end(), [](const Slice& a, const Slice& b) {
    return StringField(a.metadata, "name") < StringField(b.metadata, "name");
  });
  return *s;
}

// The stored pool, flattened and stripped of server-owned metadata, must equal the flat form.
void ExpectStoredEquals(kube::RestClient& client, const Pool& pool, bool expect_mixins,
                        int64_t generation = -1) {
  std::vector<Slice> stored = Stored(client, pool.driver);
  absl::StatusOr<std::vector<Slice>> want = BuildSlices(pool, SliceForm::kFlat);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(stored.size(), want->size());
  bool any_mixins = false;
  for (const Slice& s : stored) any_mixins |= !s.mixins.empty();
  EXPECT_EQ(any_mixins, expect_mixins);
  absl::StatusOr<std::vector<Slice>> flat = Flatten(stored);
  ASSERT_TRUE(flat.ok()) << flat.status();
  for (size_t i = 0; i < flat->size(); ++i) {
    Slice got = (*flat)[i];
    Slice w = (*want)[i];
    EXPECT_EQ(StringField(got.metadata, "name"), StringField(w.metadata, "name"));
    EXPECT_EQ(got.slice_count, static_cast<int64_t>(want->size()));
    if (generation >= 0) {
      EXPECT_EQ(got.generation, generation);
    }
    EXPECT_EQ(topodra::Field(got.metadata, "ownerReferences")[0]["uid"], "0b7c5e7e-node-a");
    got.metadata = w.metadata = json::object();
    got.generation = w.generation = 0;
    EXPECT_EQ(got, w);
  }
}

struct Running {
  explicit Running(SlicePublisher* p) : publisher(p), thread([p] { p->Run(); }) {}
  ~Running() {
    publisher->Stop();
    thread.join();
  }
  SlicePublisher* publisher;
  std::thread thread;
};

TEST(PublisherTest, EveryModeWithAndWithoutMixins) {
  const topology::Topology t = Load("192em64t-24n8c2t.xml");
  for (bool accept : {false, true}) {
    FakeApiServerOptions o;
    o.accept_mixins = accept;
    auto server = StartServer(o);
    ASSERT_NE(server, nullptr);
    auto client = ClientFor(*server);
    for (auto [mode, by] : {std::pair{CpuDeviceMode::kIndividual, GroupBy::kNuma},
                            std::pair{CpuDeviceMode::kGrouped, GroupBy::kNuma},
                            std::pair{CpuDeviceMode::kGrouped, GroupBy::kSocket},
                            std::pair{CpuDeviceMode::kGrouped, GroupBy::kMachine}}) {
      SCOPED_TRACE(std::string(accept ? "mixins accepted, " : "mixins rejected, ") +
                   CpuDeviceModeName(mode) + " " + GroupByName(by));
      const Pool pool = PoolFor(t, mode, by);
      SlicePublisher p(client.get(), FastOptions("dra.cpu"));
      p.SetDesired(pool);
      ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
      // The machine mode pool has nothing to share, so it is flat either way.
      ExpectStoredEquals(*client, pool, accept && by != GroupBy::kMachine);
      EXPECT_TRUE(p.status().in_sync);
    }
  }
}

// The daemon's writes go out 4 at a time over its HTTP client (each on a connection of its own):
// the server ends up with the same pool, in either form, and a change is published whole.
TEST(PublisherTest, ConcurrentWritesOverHttp) {
  const topology::Topology t = Load("192em64t-24n8c2t.xml");
  for (bool accept : {false, true}) {
    SCOPED_TRACE(accept ? "mixins accepted" : "mixins rejected");
    FakeApiServerOptions o;
    o.accept_mixins = accept;
    auto server = StartServer(o);
    ASSERT_NE(server, nullptr);
    auto client = ClientFor(*server);
    PublisherOptions po = FastOptions("dra.cpu");
    po.write_concurrency = 4;
    SlicePublisher p(client.get(), po);
    p.SetDesired(PoolFor(t, CpuDeviceMode::kIndividual));
    ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
    ExpectStoredEquals(*client, PoolFor(t, CpuDeviceMode::kIndividual), accept, 1);
    p.SetDesired(PoolFor(t, CpuDeviceMode::kGrouped));
    ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
    ExpectStoredEquals(*client, PoolFor(t, CpuDeviceMode::kGrouped), accept, 2);
    EXPECT_EQ(p.status().errors, 0);
  }
}

TEST(PublisherTest, ChangesBumpGenerationAndRemoveObsoleteSlices) {
  auto server = StartServer();
  auto client = ClientFor(*server);
  const topology::Topology t = Load("192em64t-24n8c2t.xml");
  SlicePublisher p(client.get(), FastOptions("dra.cpu"));
  p.SetDesired(PoolFor(t, CpuDeviceMode::kIndividual));
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  ExpectStoredEquals(*client, PoolFor(t, CpuDeviceMode::kIndividual), false, 1);
  EXPECT_EQ(Stored(*client, "dra.cpu").size(), 3u);
  // Nothing changed: nothing written, generation stays.
  const int64_t writes = p.status().writes;
  ASSERT_TRUE(p.SyncOnce().ok());
  EXPECT_EQ(p.status().writes, writes);
  p.SetDesired(PoolFor(t, CpuDeviceMode::kGrouped));
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  ExpectStoredEquals(*client, PoolFor(t, CpuDeviceMode::kGrouped), false, 2);
  // No pool at all: every slice of the driver goes.
  p.SetDesired(std::nullopt);
  ASSERT_TRUE(p.SyncOnce().ok());
  EXPECT_TRUE(Stored(*client, "dra.cpu").empty());
}

TEST(PublisherTest, RecreatesSlicesDeletedBehindItsBack) {
  auto server = StartServer();
  auto client = ClientFor(*server);
  const Pool pool = PoolFor(Load("power8gpudistances.xml"), CpuDeviceMode::kIndividual);
  SlicePublisher p(client.get(), FastOptions("dra.cpu"));
  p.SetDesired(pool);
  Running running(&p);
  ASSERT_TRUE(Eventually([&] { return p.status().in_sync; }));
  ASSERT_TRUE(client->Delete("/apis/resource.k8s.io/v1/resourceslices/node-a-dra.cpu-0", {}).ok());
  EXPECT_TRUE(Eventually([&] {
    const std::vector<Slice> s = Stored(*client, "dra.cpu");
    return s.size() == 1 && s[0].generation == 2;
  }));
  ExpectStoredEquals(*client, pool, false, 2);
}

TEST(PublisherTest, RestoresASliceSomeoneElseChanged) {
  auto server = StartServer();
  auto client = ClientFor(*server);
  const Pool pool = PoolFor(Load("power8gpudistances.xml"), CpuDeviceMode::kGrouped);
  SlicePublisher p(client.get(), FastOptions("dra.cpu"));
  p.SetDesired(pool);
  Running running(&p);
  ASSERT_TRUE(Eventually([&] { return p.status().in_sync; }));
  const std::string path = "/apis/resource.k8s.io/v1/resourceslices/node-a-dra.cpu-0";
  absl::StatusOr<kube::Response> cur = client->Get(path);
  ASSERT_TRUE(cur.ok());
  json changed = cur->body;
  changed["spec"]["devices"][0]["attributes"]["dra.cpu/numCPUs"]["int"] = 1000;
  ASSERT_TRUE(client->Put(path, changed).ok());
  EXPECT_TRUE(Eventually([&] {
    const std::vector<Slice> s = Stored(*client, "dra.cpu");
    return s.size() == 1 && s[0].generation >= 2 &&
           std::get<int64_t>(s[0].devices[0].attributes.at("dra.cpu/numCPUs")) == 8;
  }));
}

TEST(PublisherTest, ServerRestartedEmpty) {
  auto server = StartServer();
  auto client = ClientFor(*server);
  const Pool pool = PoolFor(Load("nvidiaDGX2.xml"), CpuDeviceMode::kGrouped, GroupBy::kNuma, 1);
  SlicePublisher p(client.get(), FastOptions("gpu.topodra.io"));
  p.SetDesired(pool);
  Running running(&p);
  ASSERT_TRUE(Eventually([&] { return p.status().in_sync; }));
  ASSERT_TRUE(server->Restart().ok());
  EXPECT_TRUE(Eventually([&] { return Stored(*client, "gpu.topodra.io").size() == 1; }));
  ExpectStoredEquals(*client, pool, false);
}

TEST(PublisherTest, ServerDownAtStart) {
  auto server = StartServer();
  auto client = ClientFor(*server);
  ASSERT_TRUE(server->Stop().ok());
  const Pool pool = PoolFor(Load("fakecpukinds.xml"), CpuDeviceMode::kIndividual);
  SlicePublisher p(client.get(), FastOptions("dra.cpu"));
  p.SetDesired(pool);
  Running running(&p);
  ASSERT_TRUE(Eventually([&] { return p.status().errors >= 3; }));
  EXPECT_FALSE(p.status().in_sync);
  EXPECT_FALSE(p.status().last_error.empty());
  ASSERT_TRUE(server->Restart().ok());
  // in_sync is set inside the pass, the error cleared when the pass is recorded: wait for both.
  EXPECT_TRUE(Eventually([&] {
    const PublisherStatus st = p.status();
    return st.in_sync && st.last_error.empty();
  }));
  ExpectStoredEquals(*client, pool, false, 1);
}

TEST(PublisherTest, MixinsOnAgainstAServerWithoutThemFailsClearly) {
  auto server = StartServer();
  auto client = ClientFor(*server);
  SlicePublisher p(client.get(), FastOptions("dra.cpu", MixinMode::kOn));
  p.SetDesired(PoolFor(Load("power8gpudistances.xml"), CpuDeviceMode::kIndividual));
  const absl::Status st = p.SyncOnce();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(kube::HttpCodeOf(st), 400);
  EXPECT_THAT(std::string(st.message()), HasSubstr("mixins"));
  // off: flat even where the server would take mixins.
  FakeApiServerOptions o;
  o.accept_mixins = true;
  auto accepting = StartServer(o);
  auto c2 = ClientFor(*accepting);
  SlicePublisher off(c2.get(), FastOptions("dra.cpu", MixinMode::kOff));
  const Pool pool = PoolFor(Load("power8gpudistances.xml"), CpuDeviceMode::kIndividual);
  off.SetDesired(pool);
  ASSERT_TRUE(off.SyncOnce().ok());
  ExpectStoredEquals(*c2, pool, false);
}

TEST(PublisherTest, TlsTokenAndV1beta2OnlyServer) {
  FakeApiServerOptions o;
  o.tls = true;
  o.token = "s3cret-token";
  o.versions = {"v1beta2"};
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  const std::string kubeconfig = server->WriteKubeconfig(::testing::TempDir() + "/kc.yaml");
  absl::StatusOr<kube::ClusterConfig> config = kube::KubeconfigConfig(kubeconfig);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<kube::RestClient>> client = kube::NewHttpRestClient(*config);
  ASSERT_TRUE(client.ok());
  const Pool pool = PoolFor(Load("power8gpudistances.xml"), CpuDeviceMode::kGrouped);
  SlicePublisher p(client->get(), FastOptions("dra.cpu"));
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  absl::StatusOr<kube::Response> r =
      (*client)->Get("/apis/resource.k8s.io/v1beta2/resourceslices/node-a-dra.cpu-0");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["apiVersion"], "resource.k8s.io/v1beta2");

  config->token = "wrong";
  absl::StatusOr<std::unique_ptr<kube::RestClient>> bad = kube::NewHttpRestClient(*config);
  SlicePublisher q(bad->get(), FastOptions("dra.cpu"));
  q.SetDesired(pool);
  const absl::Status st = q.SyncOnce();
  EXPECT_EQ(kube::HttpCodeOf(st), 401) << st;
}

// --- Reservations: tainted devices -------------------------------------------------------------

constexpr char kSince[] = "2025-03-01T09:00:00Z";

// 32em64t grouped by NUMA node: two reservation CPU devices and a held GPU, all with a time.
std::vector<Pool> ReservedPools(CpuDeviceMode mode = CpuDeviceMode::kGrouped,
                                const std::string& resv_b_since = kSince) {
  PublishOptions o;
  o.node_name = "node-a";
  o.cpu_mode = mode;
  o.reservations = {{"job-a", CpuSet::Range(8, 11), {"0000:83:00.0"}, kSince},
                    {"batch.b", CpuSet{0, 1}, {}, resv_b_since}};
  return BuildPools(Load("32em64t-2n8c2t-pci-normalio.xml"), o);
}

PublisherOptions TaintOptions(const std::string& driver, TaintMode taints) {
  PublisherOptions o = FastOptions(driver);
  o.taints = taints;
  return o;
}

// The taints of each device of the driver's stored pool, by device name.
std::map<std::string, json> StoredTaints(kube::RestClient& client, const std::string& driver) {
  std::map<std::string, json> out;
  for (const Slice& s : Stored(client, driver)) {
    for (const Device& d : s.devices) {
      if (d.extra.contains("taints")) out[d.name] = d.extra["taints"];
    }
  }
  return out;
}

json Taint(const std::string& name, const std::string& since = kSince) {
  return json::array({{{"key", "topodra.io/reservation"},
                       {"value", name},
                       {"effect", "NoSchedule"},
                       {"timeAdded", since}}});
}

TEST(PublisherTest, TaintModesAgainstAServerWithTaints) {
  const std::vector<Pool> pools = ReservedPools();
  ASSERT_EQ(pools.size(), 2u);
  for (TaintMode mode : {TaintMode::kOn, TaintMode::kOff, TaintMode::kAuto}) {
    SCOPED_TRACE(mode == TaintMode::kOn ? "on" : mode == TaintMode::kOff ? "off" : "auto");
    auto server = StartServer();
    ASSERT_NE(server, nullptr);
    auto client = ClientFor(*server);
    for (const Pool& pool : pools) {
      SlicePublisher p(client.get(), TaintOptions(pool.driver, mode));
      p.SetDesired(pool);
      ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
      EXPECT_TRUE(p.status().in_sync);
      EXPECT_EQ(p.status().taints, mode != TaintMode::kOff);
      ExpectStoredEquals(*client, mode == TaintMode::kOff ? WithoutTaints(pool) : pool, false);
      // What the server stored is what was sent (timeAdded included): nothing to do again.
      const int64_t writes = p.status().writes;
      ASSERT_TRUE(p.SyncOnce().ok());
      EXPECT_EQ(p.status().writes, writes);
    }
    std::map<std::string, json> want_cpu, want_gpu;
    if (mode != TaintMode::kOff) {
      want_cpu = {{"cpudevresv-batch-b", Taint("batch.b")}, {"cpudevresv-job-a", Taint("job-a")}};
      want_gpu = {{"gpu-0000-83-00-0", Taint("job-a")}};
    }
    EXPECT_EQ(StoredTaints(*client, "dra.cpu"), want_cpu);
    EXPECT_EQ(StoredTaints(*client, "gpu.topodra.io"), want_gpu);
    // The held devices carry the reservation's name either way.
    for (const Slice& s : Stored(*client, "dra.cpu")) {
      for (const Device& d : s.devices) {
        const auto it = d.attributes.find("topodra.io/reservation");
        EXPECT_EQ(it != d.attributes.end(), d.name.rfind("cpudevresv-", 0) == 0) << d.name;
      }
    }
  }
}

TEST(PublisherTest, TaintsWithoutTimeDoNotFlap) {
  auto server = StartServer();
  auto client = ClientFor(*server);
  const Pool pool = ReservedPools(CpuDeviceMode::kGrouped, "")[0];
  SlicePublisher p(client.get(), TaintOptions("dra.cpu", TaintMode::kOn));
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  const std::map<std::string, json> stored = StoredTaints(*client, "dra.cpu");
  ASSERT_EQ(stored.size(), 2u);
  // The server filled in timeAdded; the publisher did not send one and does not miss it.
  const json& added = stored.at("cpudevresv-batch-b")[0]["timeAdded"];
  ASSERT_TRUE(added.is_string());
  EXPECT_NE(added.get<std::string>(), "");
  EXPECT_EQ(stored.at("cpudevresv-job-a"), Taint("job-a"));
  const int64_t writes = p.status().writes;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(p.SyncOnce().ok());
  EXPECT_EQ(p.status().writes, writes);
  EXPECT_EQ(Stored(*client, "dra.cpu")[0].generation, 1);
}

TEST(PublisherTest, TaintsAutoAgainstAServerThatDropsThem) {
  // Individual mode on 192em64t: 384 devices, 6 slices of 64 with a taint, 3 of 128 without.
  PublishOptions o;
  o.node_name = "node-a";
  o.cpu_mode = CpuDeviceMode::kIndividual;
  o.reservations = {{"job-a", CpuSet{0, 192}, {}, kSince}};
  const topology::Topology t = Load("192em64t-24n8c2t.xml");
  const Pool pool = BuildPools(t, o).at(0);
  ASSERT_EQ(BuildSlices(pool, SliceForm::kFlat)->size(), 6u);
  for (bool accept_mixins : {false, true}) {
    SCOPED_TRACE(accept_mixins ? "mixins accepted" : "mixins rejected");
    FakeApiServerOptions so;
    so.accept_mixins = accept_mixins;
    so.device_taints = false;
    auto server = StartServer(so);
    ASSERT_NE(server, nullptr);
    auto client = ClientFor(*server);
    SlicePublisher p(client.get(), TaintOptions("dra.cpu", TaintMode::kAuto));
    p.SetDesired(pool);
    ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
    EXPECT_TRUE(p.status().in_sync);
    EXPECT_FALSE(p.status().taints);
    // The taints probe must not make a server with mixins look like one without.
    EXPECT_EQ(p.status().mixins, accept_mixins);
    EXPECT_EQ(p.status().slices, 3);
    ExpectStoredEquals(*client, WithoutTaints(pool), accept_mixins);
    EXPECT_TRUE(StoredTaints(*client, "dra.cpu").empty());
    const int64_t writes = p.status().writes;
    ASSERT_TRUE(p.SyncOnce().ok());
    EXPECT_EQ(p.status().writes, writes);
    EXPECT_EQ(p.status().writes, 3);
    // Found out by the dry-run probes (taints, then mixins), not by a write: nothing was
    // written twice.
    absl::StatusOr<json> requests = server->Requests();
    ASSERT_TRUE(requests.ok()) << requests.status();
    int dry_runs = 0, creates = 0, updates = 0;
    for (const json& r : *requests) {
      const std::string method = StringField(r, "method");
      const bool dry = StringField(r, "query").find("dryRun=All") != std::string::npos;
      dry_runs += method == "POST" && dry;
      creates += method == "POST" && !dry;
      updates += method == "PUT";
    }
    EXPECT_EQ(dry_runs, 2);
    EXPECT_EQ(creates, 3);
    EXPECT_EQ(updates, 0);

    // on: the dropped taints are an error naming the problem; off: fine.
    ASSERT_TRUE(server->Reset().ok());
    SlicePublisher on(client.get(), TaintOptions("dra.cpu", TaintMode::kOn));
    on.SetDesired(pool);
    const absl::Status st = on.SyncOnce();
    EXPECT_THAT(std::string(st.message()), HasSubstr("without some of the fields")) << st;
    SlicePublisher off(client.get(), TaintOptions("dra.cpu", TaintMode::kOff));
    off.SetDesired(pool);
    ASSERT_TRUE(off.SyncOnce().ok()) << off.status().last_error;
    EXPECT_FALSE(off.status().taints);
    ExpectStoredEquals(*client, WithoutTaints(pool), accept_mixins);
  }
}

// A server whose dry runs keep taints but whose real writes drop them (a feature gate that
// differs between API servers behind one load balancer): auto mode finds out at the first write
// and republishes without taints.
TEST(PublisherTest, TaintsAutoFallsBackWhenAWriteDropsThem) {
  const Pool pool = ReservedPools()[0];
  for (bool run_loop : {false, true}) {
    SCOPED_TRACE(run_loop ? "Run" : "SyncOnce");
    auto server = StartServer();
    auto real = ClientFor(*server);
    topodra::testing::TaintDroppingClient client(real.get());
    SlicePublisher p(&client, TaintOptions("dra.cpu", TaintMode::kAuto));
    p.SetDesired(pool);
    if (run_loop) {
      Running running(&p);
      ASSERT_TRUE(Eventually([&] {
        const PublisherStatus st = p.status();
        return st.in_sync && st.last_error.empty();
      }));
    } else {
      ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
    }
    const PublisherStatus st = p.status();
    EXPECT_TRUE(st.in_sync);
    EXPECT_FALSE(st.taints);
    EXPECT_EQ(st.errors, 0);  // a fallback is not a failed attempt
    ExpectStoredEquals(*real, WithoutTaints(pool), false);
    EXPECT_TRUE(StoredTaints(*real, "dra.cpu").empty());
  }
}

// Ending a reservation in individual mode changes nothing but an attribute and the taints of the
// held devices; the stored slices must lose both.
TEST(PublisherTest, EndedReservationLeavesNoAttributeOrTaintBehind) {
  for (bool accept_mixins : {false, true}) {
    SCOPED_TRACE(accept_mixins ? "mixins" : "flat");
    FakeApiServerOptions so;
    so.accept_mixins = accept_mixins;
    auto server = StartServer(so);
    auto client = ClientFor(*server);
    for (size_t driver : {0u, 1u}) {
      const Pool held = ReservedPools(CpuDeviceMode::kIndividual).at(driver);
      const Pool free = PoolFor(Load("32em64t-2n8c2t-pci-normalio.xml"), CpuDeviceMode::kIndividual,
                                GroupBy::kNuma, driver);
      SlicePublisher p(client.get(), TaintOptions(held.driver, TaintMode::kOn));
      p.SetDesired(held);
      ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
      ExpectStoredEquals(*client, held, accept_mixins, 1);
      p.SetDesired(free);
      ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
      EXPECT_FALSE(p.status().taints);
      ExpectStoredEquals(*client, free, accept_mixins, 2);
      // And back: the attribute and taints come again.
      p.SetDesired(held);
      ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
      ExpectStoredEquals(*client, held, accept_mixins, 3);
    }
  }
}

// --- Healing (issue 14): the kubelet's wipe, an empty restarted server, slices others changed --

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
// Individual mode: 128 devices a slice.
constexpr char k384[] = "192em64t-24n8c2t.xml";              // 3 slices
constexpr char k1024[] = "pack:4 numa:2 l3:4 core:16 pu:2";  // 8 slices
constexpr char k1152[] = "pack:4 numa:2 l3:3 core:24 pu:2";  // 9 slices

// The kubelet's wipe at its start (shared/spec kubelet-grpc.md §4.6): one DELETE of the collection
// of every slice of the node. Returns how many the server deleted.
size_t WipeNode(kube::RestClient& client) {
  absl::StatusOr<kube::Response> r = client.Delete(
      absl::StrCat(kSlices, "?fieldSelector=", kube::UrlEncode("spec.nodeName=node-a")),
      json{{"kind", "DeleteOptions"}, {"apiVersion", "v1"}});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->body["items"].size() : 0;
}

// True when the server holds exactly the slices of `pool` (names, count, resourceSliceCount), all
// in one generation newer than `than`; *generation is set to it.
bool CompleteAfter(kube::RestClient& client, const Pool& pool, int64_t than,
                   int64_t* generation = nullptr) {
  const std::vector<Slice> stored = Stored(client, pool.driver);
  absl::StatusOr<std::vector<Slice>> want = BuildSlices(pool, SliceForm::kFlat);
  if (!want.ok() || stored.size() != want->size()) return false;
  for (size_t i = 0; i < stored.size(); ++i) {
    if (StringField(stored[i].metadata, "name") != StringField((*want)[i].metadata, "name") ||
        stored[i].slice_count != static_cast<int64_t>(want->size()) ||
        stored[i].generation != stored[0].generation || stored[i].generation <= than) {
      return false;
    }
  }
  if (generation != nullptr) *generation = stored[0].generation;
  return true;
}

// Waits until the pool is complete in a generation newer than `than` and the publisher says so,
// checks every slice in full and that nothing more is written; returns the generation.
int64_t ExpectHealed(kube::RestClient& client, SlicePublisher& p, const Pool& pool, int64_t than) {
  int64_t generation = 0;
  // The publisher's word first: listing hundreds of devices every few milliseconds would slow
  // down the server under test.
  EXPECT_TRUE(Eventually(
      [&] {
        const PublisherStatus st = p.status();
        return st.in_sync && st.last_error.empty() && st.generation > than &&
               CompleteAfter(client, pool, than, &generation);
      },
      std::chrono::seconds(60)))
      << "stored " << Stored(client, pool.driver).size() << " slices; last error "
      << p.status().last_error;
  ExpectStoredEquals(client, pool, false, generation);
  EXPECT_EQ(p.status().generation, generation);
  // Settled: the loop does not go on writing.
  const int64_t writes = p.status().writes;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(p.status().writes, writes);
  EXPECT_EQ(p.status().generation, generation);
  return generation;
}

TEST(PublisherHealTest, KubeletWipeOfAMultiSlicePool) {
  for (const char* machine : {k384, k1024, k1152}) {
    SCOPED_TRACE(machine);
    auto server = StartServer();
    ASSERT_NE(server, nullptr);
    auto client = ClientFor(*server);
    const Pool pool = PoolFor(Load(machine), CpuDeviceMode::kIndividual);
    const size_t slices = BuildSlices(pool, SliceForm::kFlat)->size();
    SlicePublisher p(client.get(), FastOptions("dra.cpu"));
    p.SetDesired(pool);
    Running running(&p);
    int64_t generation = ExpectHealed(*client, p, pool, 0);
    EXPECT_EQ(generation, 1);
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE(round);
      EXPECT_EQ(WipeNode(*client), slices);
      generation = ExpectHealed(*client, p, pool, generation);
    }
  }
}

TEST(PublisherHealTest, EmptyRestartedServer) {
  enum class How { kWipedInPlace, kRestarted, kRestartedWithResourceVersionsFromOne };
  for (How how :
       {How::kWipedInPlace, How::kRestarted, How::kRestartedWithResourceVersionsFromOne}) {
    SCOPED_TRACE(static_cast<int>(how));
    FakeApiServerOptions o;
    if (how == How::kRestartedWithResourceVersionsFromOne) {
      // An etcd restored without --bump-revision: resourceVersions start over, lower than the
      // ones the publisher saw.
      o.extra_args = {"--initial-resource-version", "1"};
    }
    auto server = StartServer(o);
    ASSERT_NE(server, nullptr);
    auto client = ClientFor(*server);
    const Pool pool = PoolFor(Load(k384), CpuDeviceMode::kIndividual);
    SlicePublisher p(client.get(), FastOptions("dra.cpu"));
    p.SetDesired(pool);
    Running running(&p);
    int64_t generation = ExpectHealed(*client, p, pool, 0);
    // Move the resourceVersion on, so that a restarted server starts below it.
    Pool changed = pool;
    for (Device& d : changed.devices) d.attributes["test.topodra.io/round"] = int64_t{1};
    p.SetDesired(changed);
    generation = ExpectHealed(*client, p, changed, generation);
    if (how == How::kWipedInPlace) {
      ASSERT_TRUE(server->Reset().ok());
    } else {
      ASSERT_TRUE(server->Restart().ok());
    }
    // The generation goes on from what the publisher published last, though the server lost it.
    ExpectHealed(*client, p, changed, generation);
  }
}

TEST(PublisherHealTest, MixOfDeletedChangedAndForeignSlices) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto client = ClientFor(*server);
  const Pool pool = PoolFor(Load(k1024), CpuDeviceMode::kIndividual);
  SlicePublisher p(client.get(), FastOptions("dra.cpu"));
  p.SetDesired(pool);
  Running running(&p);
  const int64_t first = ExpectHealed(*client, p, pool, 0);
  const std::string prefix = absl::StrCat(kSlices, "/node-a-dra.cpu-");
  // Three slices deleted one by one, one changed, one moved to a higher generation by someone
  // else, and two foreign slices of the same driver and node: an old name in the same pool with
  // a higher generation still, and another pool.
  for (int i : {0, 1, 2}) ASSERT_TRUE(client->Delete(absl::StrCat(prefix, i), {}).ok());
  absl::StatusOr<kube::Response> cur = client->Get(absl::StrCat(prefix, 3));
  ASSERT_TRUE(cur.ok());
  json changed = cur->body;
  changed["spec"]["devices"][0]["attributes"]["dra.cpu/numaNodeID"]["int"] = 7;
  ASSERT_TRUE(client->Put(absl::StrCat(prefix, 3), changed).ok());
  cur = client->Get(absl::StrCat(prefix, 4));
  ASSERT_TRUE(cur.ok());
  json newer = cur->body;
  newer["spec"]["pool"]["generation"] = 50;
  ASSERT_TRUE(client->Put(absl::StrCat(prefix, 4), newer).ok());
  for (auto [name, pool_name, gen] : {std::tuple{"node-a-dra.cpu-old", "node-a", 60},
                                      std::tuple{"node-a-dra.cpu-other", "other-pool", 1}}) {
    json foreign = cur->body;
    foreign["metadata"] = {{"name", name}};
    foreign["spec"]["pool"] = {{"name", pool_name}, {"generation", gen}, {"resourceSliceCount", 1}};
    ASSERT_TRUE(client->Post(kSlices, foreign).ok());
  }
  const int64_t healed = ExpectHealed(*client, p, pool, 60);
  EXPECT_GT(healed, first);
}

// A client that lets a test act on the server just before the publisher's first PUT or POST of a
// slice reaches it: the server changed between the publisher's read and its write.
class InterferingClient : public kube::RestClient {
 public:
  using Hook = std::function<void(const std::string& name)>;
  InterferingClient(kube::RestClient* inner, Hook before_put, Hook before_post,
                    Hook before_delete = nullptr)
      : inner_(inner),
        before_put_(std::move(before_put)),
        before_post_(std::move(before_post)),
        before_delete_(std::move(before_delete)) {}
  absl::StatusOr<kube::Response> Get(const std::string& path) override { return inner_->Get(path); }
  absl::StatusOr<kube::Response> Post(const std::string& path, const json& body) override {
    if (path.find("dryRun=") == std::string::npos && before_post_) {
      std::exchange(before_post_, nullptr)(StringField(Field(body, "metadata"), "name"));
    }
    return inner_->Post(path, body);
  }
  absl::StatusOr<kube::Response> Put(const std::string& path, const json& body) override {
    if (before_put_)
      std::exchange(before_put_, nullptr)(StringField(Field(body, "metadata"), "name"));
    return inner_->Put(path, body);
  }
  absl::StatusOr<kube::Response> Delete(const std::string& path, const json& body) override {
    if (before_delete_) std::exchange(before_delete_, nullptr)(path.substr(path.rfind('/') + 1));
    return inner_->Delete(path, body);
  }
  absl::Status Watch(const std::string& path, const kube::WatchHandler& on_event,
                     const std::atomic<bool>* stop) override {
    return inner_->Watch(path, on_event, stop);
  }

 private:
  kube::RestClient* inner_;
  Hook before_put_, before_post_, before_delete_;
};

// [method code] of the slice writes the server answered.
std::vector<std::string> Writes(const FakeApiServer& server) {
  std::vector<std::string> out;
  absl::StatusOr<json> requests = server.Requests();
  EXPECT_TRUE(requests.ok()) << requests.status();
  if (!requests.ok()) return out;
  for (const json& r : *requests) {
    const std::string method = StringField(r, "method");
    if (method == "GET" || StringField(r, "path").find("resourceslices") == std::string::npos) {
      continue;
    }
    out.push_back(absl::StrCat(method, " ", r["code"].get<int>()));
  }
  return out;
}

TEST(PublisherHealTest, UpdateOfASliceDeletedMeanwhileCreatesIt) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto real = ClientFor(*server);
  const Pool pool = PoolFor(Load(k384), CpuDeviceMode::kIndividual);
  Pool changed = pool;
  for (Device& d : changed.devices) d.attributes["test.topodra.io/round"] = int64_t{1};
  InterferingClient client(
      real.get(),
      [&](const std::string& name) {
        ASSERT_TRUE(real->Delete(absl::StrCat(kSlices, "/", name), {}).ok());
      },
      nullptr);
  SlicePublisher p(&client, FastOptions("dra.cpu"));
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  ASSERT_TRUE(server->ClearRequests().ok());
  p.SetDesired(changed);
  // One pass: the 404 of the first update means the slice is gone, so it is created.
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  EXPECT_EQ(p.status().errors, 0);
  ExpectStoredEquals(*real, changed, false, 2);
  EXPECT_THAT(Writes(*server),
              ::testing::ElementsAre("DELETE 200", "PUT 404", "POST 201", "PUT 200", "PUT 200"));
}

TEST(PublisherHealTest, DeleteOfASliceGoneMeanwhileIsDone) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto real = ClientFor(*server);
  // A foreign slice of the driver on this node, which someone else deletes just before the
  // publisher does.
  Slice foreign =
      BuildSlices(PoolFor(Load(k384), CpuDeviceMode::kIndividual), SliceForm::kFlat)->at(0);
  foreign.metadata = {{"name", "node-a-dra.cpu-old"}};
  foreign.generation = 1;
  ASSERT_TRUE(real->Post(kSlices, SliceToJson(foreign, "resource.k8s.io/v1")).ok());
  InterferingClient client(real.get(), nullptr, nullptr, [&](const std::string& name) {
    ASSERT_TRUE(real->Delete(absl::StrCat(kSlices, "/", name), {}).ok());
  });
  const Pool pool = PoolFor(Load(k384), CpuDeviceMode::kIndividual);
  SlicePublisher p(&client, FastOptions("dra.cpu"));
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  ExpectStoredEquals(*real, pool, false, 2);
  EXPECT_EQ(p.status().errors, 0);
}

TEST(PublisherHealTest, CreateOverAStaleCacheRelists) {
  for (bool run_loop : {false, true}) {
    SCOPED_TRACE(run_loop ? "Run" : "SyncOnce");
    auto server = StartServer();
    ASSERT_NE(server, nullptr);
    auto real = ClientFor(*server);
    const Pool pool = PoolFor(Load(k384), CpuDeviceMode::kIndividual);
    // Someone stores a slice of that name (an old one: generation 9, one device) between the
    // publisher's list and its create.
    InterferingClient client(real.get(), nullptr, [&](const std::string& name) {
      Slice old = BuildSlices(pool, SliceForm::kFlat)->at(0);
      old.metadata = {{"name", name}};
      old.devices.resize(1);
      old.generation = 9;
      ASSERT_TRUE(real->Post(kSlices, SliceToJson(old, "resource.k8s.io/v1")).ok());
    });
    SlicePublisher p(&client, FastOptions("dra.cpu"));
    p.SetDesired(pool);
    if (run_loop) {
      Running running(&p);
      ExpectHealed(*real, p, pool, 9);
    } else {
      ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
      ExpectStoredEquals(*real, pool, false, 10);
    }
    EXPECT_EQ(p.status().errors, 0);  // a stale cache is not a failure worth a warning
  }
}

TEST(PublisherTest, ParseTaintMode) {
  EXPECT_EQ(*ParseTaintMode("auto"), TaintMode::kAuto);
  EXPECT_EQ(*ParseTaintMode("on"), TaintMode::kOn);
  EXPECT_EQ(*ParseTaintMode("off"), TaintMode::kOff);
  const absl::StatusOr<TaintMode> bad = ParseTaintMode("yes");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "invalid device taint mode \"yes\" (want auto, on or off)");
}

}  // namespace
}  // namespace topodra::publish
