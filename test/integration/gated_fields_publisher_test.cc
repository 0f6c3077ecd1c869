// The slice publisher and the alpha-gated fields, against the fake API server over HTTP in each
// of its modes: list attributes (--list-attributes drop | accept) and the node-allocatable field
// (--node-allocatable drop | v1.36 | v1.37), with the daemon's auto, on and off.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "driver/kube/rest_client.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_features.h"
#include "driver/publish/slice_json.h"
#include "driver/publish/slice_publisher.h"
#include "test/integration/fake_apiserver.h"
#include "test/integration/fake_apiserver_client.h"
#include "test/testing/fixtures.h"
#include "test/testing/rewriting_rest_client.h"

namespace topodra::publish {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using topodra::testing::FakeApiServer;
using topodra::testing::FakeApiServerOptions;

std::unique_ptr<FakeApiServer> StartServer(std::vector<std::string> args,
                                           bool accept_mixins = false) {
  FakeApiServerOptions o;
  o.nodes.push_back({"node-a", "0b7c5e7e-node-a"});
  o.extra_args = std::move(args);
  o.accept_mixins = accept_mixins;
  absl::StatusOr<std::unique_ptr<FakeApiServer>> s = FakeApiServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

PublisherOptions Options(FeatureMode lists, FeatureMode mapping,
                         MixinMode mixins = MixinMode::kOff) {
  PublisherOptions o;
  o.driver = "dra.cpu";
  o.node_name = "node-a";
  o.mixins = mixins;
  o.list_attributes = lists;
  o.node_allocatable = mapping;
  o.initial_backoff = std::chrono::milliseconds(20);
  o.max_backoff = std::chrono::milliseconds(200);
  o.watch_timeout_seconds = 5;
  return o;
}

Pool CpuPool(CpuDeviceMode mode = CpuDeviceMode::kGrouped,
             const std::string& fixture = "power8gpudistances.xml") {
  PublishOptions o;
  o.node_name = "node-a";
  o.cpu_mode = mode;
  o.pcie_root_lists = true;
  o.node_allocatable = true;
  return BuildPools(topodra::testing::LoadTopology(fixture), o).at(0);
}

std::vector<Device> StoredDevices(kube::RestClient& client) {
  absl::StatusOr<kube::Response> r =
      client.Get("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" +
                 kube::UrlEncode("spec.driver=dra.cpu,spec.nodeName=node-a"));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  absl::StatusOr<std::vector<Slice>> slices = SlicesFromDocument(r->body);
  EXPECT_TRUE(slices.ok()) << slices.status();
  if (!slices.ok()) return {};
  absl::StatusOr<std::vector<Slice>> flat = Flatten(*slices);
  EXPECT_TRUE(flat.ok()) << flat.status();
  std::vector<Device> out;
  for (const Slice& s : flat.ok() ? *flat : std::vector<Slice>{}) {
    out.insert(out.end(), s.devices.begin(), s.devices.end());
  }
  std::sort(out.begin(), out.end(),
            [](const Device& a, const Device& b) { return a.name < b.name; });
  return out;
}

int DryRuns(const FakeApiServer& server) {
  absl::StatusOr<json> requests = server.Requests();
  EXPECT_TRUE(requests.ok()) << requests.status();
  int n = 0;
  for (const json& r : requests.ok() ? *requests : json::array()) {
    n += StringField(r, "method") == "POST" &&
         StringField(r, "query").find("dryRun=All") != std::string::npos;
  }
  return n;
}

TEST(GatedPublisherTest, ListAttributes) {
  // Individual devices: 16 of them, so the mixin form is smaller and is probed too.
  const Pool pool = CpuPool(CpuDeviceMode::kIndividual);
  ASSERT_TRUE(HasListAttributes(pool));
  struct Case {
    std::string server;  // --list-attributes
    bool mixins;
    FeatureMode mode;
    bool published;  // list attributes on the server afterwards
    std::string error;
    int dry_runs;
  };
  const std::vector<Case> cases = {
      {"accept", false, FeatureMode::kAuto, true, "", 1},
      {"accept", true, FeatureMode::kAuto, true, "", 2},  // + the mixins probe
      {"accept", false, FeatureMode::kOn, true, "", 0},
      {"accept", false, FeatureMode::kOff, false, "", 0},
      {"drop", false, FeatureMode::kAuto, false, "", 1},
      {"drop", true, FeatureMode::kAuto, false, "", 2},
      // The fake drops the list member and then refuses the attribute left without a value
      // (422); a server that dropped the whole attribute would store the slice without it
      // ("without some of the fields"). Either way `on` reports it.
      {"drop", false, FeatureMode::kOn, false, "resource.kubernetes.io/pcieRoot", 0},
      {"drop", false, FeatureMode::kOff, false, "", 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.server + (c.mixins ? " +mixins " : " ") + FeatureModeName(c.mode));
    auto server = StartServer({"--list-attributes", c.server}, c.mixins);
    ASSERT_NE(server, nullptr);
    auto client = topodra::testing::ClientFor(*server, std::chrono::milliseconds(3000));
    SlicePublisher p(client.get(), Options(c.mode, FeatureMode::kOff,
                                           c.mixins ? MixinMode::kAuto : MixinMode::kOff));
    p.SetDesired(pool);
    const absl::Status st = p.SyncOnce();
    if (!c.error.empty()) {
      EXPECT_THAT(std::string(st.message()), HasSubstr(c.error)) << st;
      continue;
    }
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(p.status().list_attributes, c.published);
    EXPECT_EQ(DryRuns(*server), c.dry_runs);
    const Pool want = c.published ? WithNodeAllocatableField(pool, NodeAllocatableField::kNone)
                                  : WithNodeAllocatableField(WithoutListAttributes(pool),
                                                             NodeAllocatableField::kNone);
    EXPECT_EQ(StoredDevices(*client), want.devices);
    // Stored equals sent: a second pass writes nothing.
    const int64_t writes = p.status().writes;
    ASSERT_TRUE(p.SyncOnce().ok());
    EXPECT_EQ(p.status().writes, writes);
  }
}

TEST(GatedPublisherTest, NodeAllocatableField) {
  struct Case {
    std::string server;  // --node-allocatable
    CpuDeviceMode cpu_mode;
    FeatureMode mode;
    NodeAllocatableField published;
    std::string error;
    int dry_runs;
  };
  const std::vector<Case> cases = {
      {"v1.37", CpuDeviceMode::kGrouped, FeatureMode::kAuto, NodeAllocatableField::kV137, "", 1},
      {"v1.37", CpuDeviceMode::kIndividual, FeatureMode::kOn, NodeAllocatableField::kV137, "", 1},
      {"v1.36", CpuDeviceMode::kGrouped, FeatureMode::kAuto, NodeAllocatableField::kV136, "", 2},
      {"v1.36", CpuDeviceMode::kIndividual, FeatureMode::kAuto, NodeAllocatableField::kV136, "", 2},
      {"drop", CpuDeviceMode::kGrouped, FeatureMode::kAuto, NodeAllocatableField::kNone, "", 2},
      {"drop", CpuDeviceMode::kGrouped, FeatureMode::kOn, NodeAllocatableField::kNone,
       "keeps neither nodeAllocatableResources (1.37) nor nodeAllocatableResourceMappings", 2},
      {"v1.37", CpuDeviceMode::kGrouped, FeatureMode::kOff, NodeAllocatableField::kNone, "", 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.server + " " + CpuDeviceModeName(c.cpu_mode) + " " + FeatureModeName(c.mode));
    const Pool pool = WithoutListAttributes(CpuPool(c.cpu_mode));
    auto server = StartServer({"--node-allocatable", c.server});
    ASSERT_NE(server, nullptr);
    auto client = topodra::testing::ClientFor(*server, std::chrono::milliseconds(3000));
    SlicePublisher p(client.get(), Options(FeatureMode::kOff, c.mode));
    p.SetDesired(pool);
    const absl::Status st = p.SyncOnce();
    EXPECT_EQ(DryRuns(*server), c.dry_runs);
    if (!c.error.empty()) {
      EXPECT_THAT(std::string(st.message()), HasSubstr(c.error)) << st;
      EXPECT_TRUE(StoredDevices(*client).empty());  // nothing published
      continue;
    }
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(p.status().node_allocatable, c.published);
    const std::vector<Device> stored = StoredDevices(*client);
    EXPECT_EQ(stored, WithNodeAllocatableField(pool, c.published).devices);
    ASSERT_FALSE(stored.empty());
    const json& d = stored[0].extra;
    const json v137 =
        c.cpu_mode == CpuDeviceMode::kGrouped
            ? json{{"cpu",
                    {{"mapping", {{"capacityKey", "dra.cpu/cpu"}, {"capacityMultiplier", "1"}}}}}}
            : json{{"cpu", {{"mapping", {{"deviceMultiplier", "1"}}}}}};
    switch (c.published) {
      case NodeAllocatableField::kV137:
        EXPECT_EQ(d[kNodeAllocatableResources], v137);
        break;
      case NodeAllocatableField::kV136:
        EXPECT_EQ(d[kNodeAllocatableResourceMappings],
                  WithNodeAllocatableField(pool, NodeAllocatableField::kV136)
                      .devices[0]
                      .extra[kNodeAllocatableResourceMappings]);
        EXPECT_FALSE(d.contains(kNodeAllocatableResources));
        break;
      case NodeAllocatableField::kNone:
        EXPECT_FALSE(d.contains(kNodeAllocatableResources));
        EXPECT_FALSE(d.contains(kNodeAllocatableResourceMappings));
        break;
    }
    const int64_t writes = p.status().writes;
    ASSERT_TRUE(p.SyncOnce().ok());
    EXPECT_EQ(p.status().writes, writes);
    EXPECT_EQ(DryRuns(*server), c.dry_runs);  // learned once
  }
}

// A server whose dry runs keep the 1.36 field but whose writes drop it (the API server was
// upgraded to 1.37 between the probe and the write, or servers behind one address disagree):
// auto mode probes again and settles on what the writes keep.
class MappingDroppingClient : public topodra::testing::RewritingRestClient {
 public:
  using RewritingRestClient::RewritingRestClient;
  int dry_runs = 0;
  bool drop_all = false;   // after the first write: every request, dry run or not
  bool lists_too = false;  // also drop list attributes from writes (never from dry runs)

 private:
  json Rewrite(const std::string& path, json body) override {
    const bool dry = path.find("dryRun=All") != std::string::npos;
    dry_runs += dry;
    if (!dry) drop_all = true;
    if (!body.contains("spec") || !body["spec"].contains("devices")) return body;
    for (json& d : body["spec"]["devices"]) {
      if (!dry || drop_all) d.erase(kNodeAllocatableResourceMappings);
      if (!dry && lists_too && d.contains("attributes")) {
        for (auto it = d["attributes"].begin(); it != d["attributes"].end();) {
          it = it->contains("strings") ? d["attributes"].erase(it) : std::next(it);
        }
      }
    }
    return body;
  }
};

TEST(GatedPublisherTest, NodeAllocatableFieldLostAfterTheProbe) {
  auto server = StartServer({"--node-allocatable", "v1.36"});
  ASSERT_NE(server, nullptr);
  auto inner = topodra::testing::ClientFor(*server, std::chrono::milliseconds(3000));
  MappingDroppingClient client(inner.get());
  const Pool pool = WithoutListAttributes(CpuPool());
  SlicePublisher p(&client, Options(FeatureMode::kOff, FeatureMode::kAuto));
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  EXPECT_EQ(p.status().node_allocatable, NodeAllocatableField::kNone);
  EXPECT_EQ(StoredDevices(*inner),
            WithNodeAllocatableField(pool, NodeAllocatableField::kNone).devices);
  EXPECT_EQ(client.dry_runs, 2 + 2);  // probed, lost at the write, probed again
}

// Lists kept by the dry run but dropped by the write: auto falls back to scalar attributes at
// once, and the pool on the server is complete and consistent.
TEST(GatedPublisherTest, ListAttributesLostAtTheWrite) {
  auto server = StartServer({"--list-attributes", "accept"});
  ASSERT_NE(server, nullptr);
  auto inner = topodra::testing::ClientFor(*server, std::chrono::milliseconds(3000));
  MappingDroppingClient client(inner.get());
  client.lists_too = true;
  const Pool pool = WithNodeAllocatableField(CpuPool(), NodeAllocatableField::kNone);
  SlicePublisher p(&client, Options(FeatureMode::kAuto, FeatureMode::kOff));
  p.SetDesired(pool);
  ASSERT_TRUE(p.SyncOnce().ok()) << p.status().last_error;
  EXPECT_FALSE(p.status().list_attributes);
  EXPECT_TRUE(p.status().in_sync);
  EXPECT_EQ(StoredDevices(*inner), WithoutListAttributes(pool).devices);
  EXPECT_EQ(client.dry_runs, 1);  // no second probe: the write settled it
  const int64_t writes = p.status().writes;
  ASSERT_TRUE(p.SyncOnce().ok());
  EXPECT_EQ(p.status().writes, writes);
}

}  // namespace
}  // namespace topodra::publish
