// Every pool topodra can publish must pass the API server's validation (issue 14, item 2): every
// fixture and a 1024-CPU synthetic machine, in every CPU device mode, without reservations and
// with --reserved-cpus or Reservations that leave exactly one CPU in a group, published by the
// real SlicePublisher to the fake API server, flat (to a server without mixins) and in mixin form
// (to a server that keeps them). The fake refuses what the real server refuses (k8s-api-cdi.md
// §1.3-§1.8) and, with --pool-checks=reject, a device name used twice in one pool.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/kube/rest_client.h"
#include "driver/publish/device_builder.h"
#include "driver/publish/slice_json.h"
#include "driver/publish/slice_publisher.h"
#include "test/integration/fake_apiserver.h"
#include "test/integration/fake_apiserver_client.h"
#include "test/testing/fixtures.h"

namespace topodra::publish {
namespace {

using topodra::testing::FakeApiServer;
using topodra::testing::FakeApiServerOptions;

// 1024 CPUs: 2 packages x 4 NUMA nodes x 64 cores x 2 threads.
constexpr char kSynthetic1024[] = "pack:2 numa:4 core:64 pu:2";

std::unique_ptr<FakeApiServer> StartServer(bool accept_mixins) {
  FakeApiServerOptions o;
  o.accept_mixins = accept_mixins;
  o.extra_args = {"--pool-checks", "reject"};
  absl::StatusOr<std::unique_ptr<FakeApiServer>> s = FakeApiServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::unique_ptr<kube::RestClient> ClientFor(const FakeApiServer& server) {
  std::unique_ptr<kube::RestClient> client =
      topodra::testing::ClientFor(server, std::chrono::milliseconds(10000));
  EXPECT_NE(client, nullptr);
  return client;
}

struct Mode {
  CpuDeviceMode mode;
  GroupBy by;
  std::string name;
};

const std::vector<Mode>& Modes() {
  static const std::vector<Mode> kModes = {
      {CpuDeviceMode::kGrouped, GroupBy::kNuma, "numa"},
      {CpuDeviceMode::kGrouped, GroupBy::kSocket, "socket"},
      {CpuDeviceMode::kGrouped, GroupBy::kMachine, "machine"},
      {CpuDeviceMode::kIndividual, GroupBy::kNuma, "individual"},
  };
  return kModes;
}

// The online CPUs of each group of the mode, in group order (one group in individual mode).
std::vector<CpuSet> Groups(const topology::Topology& t, GroupBy by) {
  std::vector<CpuSet> out;
  if (by == GroupBy::kNuma) {
    for (const topology::NumaNode& n : t.numa_nodes) out.push_back(n.cpus & t.online);
  } else if (by == GroupBy::kSocket) {
    for (const topology::Package& p : t.packages) out.push_back(p.cpus & t.online);
  }
  if (out.empty() || by == GroupBy::kMachine) out = {t.online};
  std::erase_if(out, [](const CpuSet& c) { return c.Empty(); });
  return out;
}

CpuSet AllButFirst(const CpuSet& cpus) {
  CpuSet rest = cpus;
  if (!cpus.Empty()) rest -= CpuSet{*cpus.begin()};
  return rest;
}

struct Case {
  std::string name;
  PublishOptions opts;
};

// The reservation cases of one fixture and mode: none; --reserved-cpus leaving one CPU in the
// first group and in the last; a Reservation of one CPU; a Reservation of all but one CPU of the
// last group (its group and the reservation's device both keep the rest).
std::vector<Case> CasesFor(const topology::Topology& t, const Mode& m) {
  PublishOptions base;
  base.cpu_mode = m.mode;
  base.group_by = m.by;
  const std::vector<CpuSet> groups = Groups(t, m.by);
  std::vector<Case> out;
  out.push_back({"nothing reserved", base});
  if (groups.empty()) return out;
  Case first{"reserved-cpus leave one CPU in the first group", base};
  first.opts.reserved_cpus = AllButFirst(groups.front());
  if (first.opts.reserved_cpus != t.online) out.push_back(first);
  Case last{"reserved-cpus leave one CPU in the last group and the first", base};
  last.opts.reserved_cpus = AllButFirst(groups.back()) | AllButFirst(groups.front());
  if (last.opts.reserved_cpus != t.online) out.push_back(last);
  Case one{"a Reservation of one CPU", base};
  one.opts.reservations = {{"one.cpu", CpuSet{*groups.front().begin()}, {}, ""}};
  out.push_back(one);
  Case most{"a Reservation leaves one CPU in the last group", base};
  most.opts.reservations = {{"most", AllButFirst(groups.back()), {}, "2025-03-01T09:00:00Z"}};
  if (!most.opts.reservations[0].cpus.Empty()) out.push_back(most);
  return out;
}

// What the server stores for the driver's pool on the node.
int StoredSlices(kube::RestClient& client, const std::string& driver, const std::string& node) {
  absl::StatusOr<kube::Response> r =
      client.Get("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" +
                 kube::UrlEncode("spec.driver=" + driver + ",spec.nodeName=" + node));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return -1;
  absl::StatusOr<std::vector<Slice>> s = SlicesFromDocument(r->body);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? static_cast<int>(s->size()) : -1;
}

TEST(SliceValidationTest, EveryFixtureModeAndReservationIsAccepted) {
  std::vector<std::string> machines = topodra::testing::AllFixtures();
  machines.push_back(kSynthetic1024);
  auto flat_server = StartServer(false);
  auto mixin_server = StartServer(true);
  ASSERT_NE(flat_server, nullptr);
  ASSERT_NE(mixin_server, nullptr);
  auto flat_client = ClientFor(*flat_server);
  auto mixin_client = ClientFor(*mixin_server);
  int node_index = 0;
  int pools = 0;
  int one_cpu_groups = 0;
  int mixin_pools = 0;
  for (const std::string& machine : machines) {
    const topology::Topology t = topodra::testing::LoadTopology(machine);
    ASSERT_FALSE(t.online.Empty()) << machine;
    for (const Mode& m : Modes()) {
      for (const Case& c : CasesFor(t, m)) {
        PublishOptions opts = c.opts;
        opts.node_name = absl::StrCat("node-", node_index++);
        SCOPED_TRACE(absl::StrCat(machine, ", ", m.name, ", ", c.name, " (", opts.node_name, ")"));
        ASSERT_TRUE(ValidateOptions(opts, t).ok()) << ValidateOptions(opts, t);
        for (const Pool& pool : BuildPools(t, opts)) {
          for (const Device& d : pool.devices) {
            auto it = d.capacity.find("dra.cpu/cpu");
            if (it != d.capacity.end() && it->second.value == "1") ++one_cpu_groups;
          }
          for (bool mixins : {false, true}) {
            SCOPED_TRACE(absl::StrCat(pool.driver, mixins ? ", mixin form" : ", flat"));
            kube::RestClient& client = mixins ? *mixin_client : *flat_client;
            PublisherOptions po;
            po.driver = pool.driver;
            po.node_name = opts.node_name;
            po.mixins = mixins ? MixinMode::kAuto : MixinMode::kOff;
            SlicePublisher p(&client, po);
            p.SetDesired(pool);
            const absl::Status st = p.SyncOnce();
            ASSERT_TRUE(st.ok()) << st;
            EXPECT_TRUE(p.status().in_sync);
            EXPECT_EQ(StoredSlices(client, pool.driver, opts.node_name), p.status().slices);
            ++pools;
            if (p.status().mixins) ++mixin_pools;
          }
        }
      }
    }
  }
  // The cases that broke the rule min + step <= value are really there, and the mixin form
  // was really sent where it is smaller.
  EXPECT_GT(one_cpu_groups, 40);
  EXPECT_GT(mixin_pools, 40);
  std::printf("%d pools published (%d in mixin form), %d grouped devices with one CPU\n", pools,
              mixin_pools, one_cpu_groups);
}

// The machines the issue names: nvidiaDGX2 with --reserved-cpus=0,24-25 and the socket groups
// of 16em64t-4s2c2t-offlines, each with a group of exactly one CPU.
TEST(SliceValidationTest, TheReportedOneCpuGroupsAreAccepted) {
  auto server = StartServer(false);
  ASSERT_NE(server, nullptr);
  auto client = ClientFor(*server);
  struct Reported {
    std::string machine;
    GroupBy by;
    CpuSet reserved;
  };
  for (const Reported& r : {Reported{"nvidiaDGX2.xml", GroupBy::kNuma, CpuSet{0, 24, 25}},
                            Reported{"nvidiaDGX2.xml", GroupBy::kSocket, CpuSet{0, 24, 25}},
                            Reported{"16em64t-4s2c2t-offlines.xml", GroupBy::kSocket, {}}}) {
    SCOPED_TRACE(r.machine + " " + GroupByName(r.by));
    const topology::Topology t = topodra::testing::LoadTopology(r.machine);
    PublishOptions opts;
    opts.node_name = absl::StrCat("reported-", GroupByName(r.by), "-", r.reserved.Size());
    opts.group_by = r.by;
    opts.reserved_cpus = r.reserved;
    const Pool pool = BuildPools(t, opts).at(0);
    bool one_cpu = false;
    for (const Device& d : pool.devices) one_cpu |= d.capacity.at("dra.cpu/cpu").value == "1";
    EXPECT_TRUE(one_cpu) << "the fixture no longer has a one-CPU group";
    PublisherOptions po;
    po.driver = pool.driver;
    po.node_name = opts.node_name;
    SlicePublisher p(client.get(), po);
    p.SetDesired(pool);
    const absl::Status st = p.SyncOnce();
    EXPECT_TRUE(st.ok()) << st;
  }
}

}  // namespace
}  // namespace topodra::publish
