// The real `topodra run` binary as the kubelet sees it: registered through plugins_registry by
// the kubelet simulator, preparing claims it GETs from the fake API server, over real Unix
// sockets. Every rejection rule of issue 4 is exercised end to end here, plus idempotency,
// kill -9 and restart, concurrency, prioritized lists, DeviceClass configs and re-registration.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "proto/drahealth/v1alpha1/api.grpc.pb.h"
#include "test/integration/daemon.h"
#include "test/integration/fake_apiserver.h"
#include "test/integration/node_fixture.h"
#include "test/kubelet_sim/kubelet_sim.h"
#include "test/testing/cdi_validator.h"
#include "test/testing/fixtures.h"
#include "topology/cpuset.h"

namespace topodra::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
namespace fs = std::filesystem;

class DraPluginTest : public NodeTest {};

TEST_F(DraPluginTest, RegistersBothDriversWithV1First) {
  StartNode();
  auto cpu = sim_->Find(kCpu);
  ASSERT_TRUE(cpu.has_value());
  EXPECT_EQ(cpu->version, "v1.DRAPlugin");
  EXPECT_THAT(cpu->supported_versions,
              ::testing::ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                                     "v1alpha1.DRAResourceHealth"));
  EXPECT_EQ(cpu->endpoint, dirs_.kubelet_root + "/plugins/dra.cpu/dra.sock");
  auto gpu = sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  // Owner-only sockets.
  for (const std::string& path :
       {cpu->endpoint, cpu->socket_path, gpu->endpoint, gpu->socket_path}) {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << path;
  }
  EXPECT_EQ(daemon_.Terminate(), 0);
  EXPECT_FALSE(fs::exists(cpu->endpoint));
  EXPECT_FALSE(fs::exists(cpu->socket_path));
  EXPECT_TRUE(sim_->WaitForDeregistration(kCpu, absl::Seconds(10)));
}

TEST_F(DraPluginTest, HealthStreamSendsTheFullDeviceList) {
  StartNode();
  EXPECT_THAT(sim_->Find(kCpu)->supported_versions,
              ::testing::Contains("v1alpha1.DRAResourceHealth"));
  auto channel =
      grpc::CreateChannel("unix:" + sim_->Find(kCpu)->endpoint, grpc::InsecureChannelCredentials());
  auto stub = ::v1alpha1::DRAResourceHealth::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto reader = stub->NodeWatchResources(&ctx, ::v1alpha1::NodeWatchResourcesRequest());
  ::v1alpha1::NodeWatchResourcesResponse first;
  ASSERT_TRUE(reader->Read(&first));
  std::set<std::string> devices;
  for (const auto& d : first.devices()) {
    EXPECT_EQ(d.device().pool_name(), kNode);
    EXPECT_EQ(d.health(), ::v1alpha1::HEALTHY);
    EXPECT_GT(d.last_updated_time(), 1700000000);
    devices.insert(d.device().device_name());
  }
  EXPECT_EQ(devices, (std::set<std::string>{"cpudevnuma000", "cpudevnuma001"}));
  ctx.TryCancel();
}

TEST_F(DraPluginTest, AKubeletThatOnlySpeaksV1beta1IsServedToo) {
  KubeletSimOptions old;
  old.known_versions = {"v1beta1.DRAPlugin"};
  StartNode({}, kMachine, old);
  EXPECT_EQ(sim_->Find(kCpu)->version, "v1beta1.DRAPlugin");
  PrepareClaim c = CpuClaim("old-kubelet", "cpudevnuma001", "2");
  ClaimResult r = PrepareOne(c);
  EXPECT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].pool, kNode);
  EXPECT_EQ(UnprepareOne(c), "");
}

TEST_F(DraPluginTest, GroupedClaimIsTopologyAlignedIdempotentAndUnprepared) {
  StartNode();
  PrepareClaim c = CpuClaim("grouped", "cpudevnuma001", "4");
  ClaimResult first = PrepareOne(c);
  ASSERT_EQ(first.error, "");
  ASSERT_EQ(first.devices.size(), 1u);
  EXPECT_EQ(first.devices[0].device, "cpudevnuma001");
  EXPECT_THAT(first.devices[0].request_names, ::testing::ElementsAre("cpus"));
  // The claim's own CDI device, then the device metadata's (--device-metadata=on by default).
  EXPECT_THAT(first.devices[0].cdi_device_ids,
              ::testing::ElementsAre("dra.cpu/claim=" + c.uid + "-cpudevnuma001",
                                     "dra.cpu/metadata=" + c.uid + "_cpus"));
  // Two whole cores of NUMA node 1 (8-15 with siblings 24-31).
  const CpuSet cpus = CdiCpus(c.uid);
  EXPECT_EQ(cpus.ToString(), "8-9,24-25");
  // The kubelet repeats prepare after a restart: same answer.
  ClaimResult again = PrepareOne(c);
  EXPECT_EQ(again.error, "");
  ASSERT_EQ(again.devices.size(), 1u);
  EXPECT_EQ(again.devices[0].cdi_device_ids, first.devices[0].cdi_device_ids);
  EXPECT_EQ(CdiCpus(c.uid), cpus);

  EXPECT_EQ(UnprepareOne(c), "");
  EXPECT_FALSE(fs::exists(CdiPath(c.uid)));
  EXPECT_EQ(UnprepareOne(c), "");  // again: still fine
  // The CPUs are free again: the same request gets them back.
  PrepareClaim next = CpuClaim("grouped-2", "cpudevnuma001", "4");
  EXPECT_EQ(PrepareOne(next).error, "");
  EXPECT_EQ(CdiCpus(next.uid), cpus);
}

// STYLE.md: every claim-scoped line names the claim and its pod (from the claim's reservedFor).
TEST_F(DraPluginTest, ClaimLinesNameTheClaimAndThePod) {
  StartNode();
  PrepareClaim claim = CpuClaim("logged", "cpudevnuma000", "2");
  ASSERT_EQ(PrepareOne(claim).error, "");
  ASSERT_EQ(UnprepareOne(claim), "");
  const std::string who = absl::StrCat("claim default/logged uid=", claim.uid,
                                       " driver=dra.cpu pod=default/pod-logged");
  EXPECT_THAT(daemon_.Log(), HasSubstr(who + ": prepared cpus="));
  EXPECT_THAT(daemon_.Log(), HasSubstr(who + ": unprepared, freed cpus="));
}

TEST_F(DraPluginTest, UnprepareOfUnknownClaimsSucceeds) {
  StartNode();
  auto got = sim_->Unprepare(
      kCpu, {{"default", "no-such-uid", "never-prepared"}, {"other", "uid-2", "gone"}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["no-such-uid"], "");
  EXPECT_EQ((*got)["uid-2"], "");
}

TEST_F(DraPluginTest, IndividualModePreparesExactlyTheNamedCpus) {
  StartNode({"--cpu-device-mode", "individual"});
  // cpudev numbering walks cores with siblings adjacent: cpudev002/003 are CPUs 1 and 17.
  PrepareClaim c =
      MakeClaim("individual", json::array({Request("cpus")}),
                json::array({Result("cpus", "cpudev002"), Result("cpus", "cpudev003")}));
  ClaimResult r = PrepareOne(c);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(CdiCpus(c.uid).ToString(), "1,17");
}

TEST_F(DraPluginTest, MachineGroupTakesTheOpaqueCpuset) {
  StartNode({"--group-by", "machine"});
  PrepareClaim c = CpuClaim("external", "cpudevmachine", "4", Cpuset("2-3,18-19"));
  ClaimResult r = PrepareOne(c);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(CdiCpus(c.uid).ToString(), "2-3,18-19");
  PrepareClaim bare = CpuClaim("no-cpuset", "cpudevmachine", "4");
  EXPECT_THAT(PrepareOne(bare).error, HasSubstr("naming the CPUs is required"));
}

// Every rejection of the opaque cpuset config, each with the offending value in the message.
TEST_F(DraPluginTest, RejectionsNameTheClaimAndTheValue) {
  StartNode({"--reserved-cpus", "0,16"});
  PrepareClaim holder = CpuClaim("holder", "cpudevnuma001", "2", Cpuset("12-13"));
  ASSERT_EQ(PrepareOne(holder).error, "");

  struct Case {
    std::string name;
    json results;
    json config;
    std::string error;
  };
  const json one = json::array({Result("cpus", "cpudevnuma000", "2")});
  auto claim_cfg = [](const json& params) {
    return json::array({Config("FromClaim", json::array(), params)});
  };
  const std::vector<Case> cases = {
      {"unknown-field", one,
       claim_cfg({{"apiVersion", "v1alpha1"}, {"cpuConfig", {{"cpuset", "2-3"}, {"cpus", 2}}}}),
       "unknown field \"cpuConfig.cpus\""},
      {"wrong-type", one, claim_cfg({{"apiVersion", "v1alpha1"}, {"cpuConfig", "2-3"}}),
       "cpuConfig: expected an object, got string"},
      {"api-version", one, claim_cfg({{"apiVersion", "v2"}, {"cpuConfig", {{"cpuset", "2-3"}}}}),
       "unsupported apiVersion \"v2\""},
      {"missing-cpuset", one,
       claim_cfg({{"apiVersion", "v1alpha1"}, {"cpuConfig", json::object()}}),
       "cpuConfig.cpuset is missing"},
      {"empty-cpuset", one, claim_cfg(Cpuset("")), "cpuConfig.cpuset is empty"},
      {"unparsable", one, claim_cfg(Cpuset("2-x")), "\"2-x\""},
      {"size", one, claim_cfg(Cpuset("2-4")),
       "cpuset \"2-4\" has 3 CPUs but the request consumes 2 dra.cpu/cpu"},
      {"not-on-node", one, claim_cfg(Cpuset("2,40")), "CPU 40 is not on this node"},
      {"reserved", one, claim_cfg(Cpuset("0-1")), "CPU 0 is reserved (--reserved-cpus)"},
      {"outside-group", one, claim_cfg(Cpuset("2,8")),
       "CPU 8 is not in the allocated device \"cpudevnuma000\""},
      {"held", json::array({Result("cpus", "cpudevnuma001", "2")}), claim_cfg(Cpuset("13-14")),
       "CPU 13 is already prepared for claim default/holder (uid " + holder.uid + ")"},
      {"twice",
       json::array({Result("cpus", "cpudevnuma000", "2"), Result("more", "cpudevnuma000", "2")}),
       json::array({Config("FromClaim", json::array({"cpus"}), Cpuset("2-3")),
                    Config("FromClaim", json::array({"more"}), Cpuset("3-4"))}),
       "CPU 3 is used by two results (requests \"cpus\" and \"more\")"},
      {"two-configs", one,
       json::array({Config("FromClaim", json::array({"cpus"}), Cpuset("2-3")),
                    Config("FromClaim", json::array(), Cpuset("4-5"))}),
       "2 configs target request \"cpus\""},
      {"capacity-missing", json::array({Result("cpus", "cpudevnuma000")}), json::array(),
       "consumedCapacity dra.cpu/cpu is missing"},
      {"capacity-zero", json::array({Result("cpus", "cpudevnuma000", "0")}), json::array(),
       "consumedCapacity dra.cpu/cpu is 0"},
      {"capacity-fraction", json::array({Result("cpus", "cpudevnuma000", "1500m")}), json::array(),
       "consumedCapacity dra.cpu/cpu is fractional (\"1500m\")"},
      {"not-my-device", json::array({Result("cpus", "cpudevnuma007", "2")}), json::array(),
       "device \"cpudevnuma007\" is not a CPU device of this node"},
  };
  std::vector<PrepareClaim> claims;
  for (const Case& c : cases) {
    json requests = json::array({Request("cpus")});
    if (c.name == "twice") requests.push_back(Request("more"));
    claims.push_back(MakeClaim(c.name, requests, c.results, c.config));
  }
  // Also a claim that is good, in the same call: its outcome must not depend on the others.
  PrepareClaim good = CpuClaim("good", "cpudevnuma000", "2", Cpuset("4-5"));
  claims.push_back(good);
  auto got = sim_->Prepare(kCpu, claims);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string& error = (*got)[claims[i].uid].error;
    EXPECT_THAT(error, HasSubstr("claim default/" + cases[i].name)) << cases[i].name;
    EXPECT_THAT(error, HasSubstr(cases[i].error)) << cases[i].name;
    EXPECT_FALSE(fs::exists(CdiPath(claims[i].uid))) << cases[i].name;
  }
  EXPECT_EQ((*got)[good.uid].error, "");
  EXPECT_EQ(CdiCpus(good.uid).ToString(), "4-5");
}

TEST_F(DraPluginTest, OfflineCpusAreRejected) {
  // Online 0-1,3-4,6,12,15 of 0-15.
  StartNode({"--group-by", "machine"}, "16em64t-4s2c2t-offlines.xml");
  PrepareClaim c = CpuClaim("offline", "cpudevmachine", "2", Cpuset("6-7"));
  EXPECT_THAT(PrepareOne(c).error, HasSubstr("cpuset \"6-7\": CPU 7 is offline"));
}

TEST_F(DraPluginTest, ClaimsThatAreNotPreparableAreRejected) {
  StartNode();
  // Not found.
  EXPECT_THAT(PrepareOne({"default", "uid-x", "missing"}).error,
              HasSubstr("claim default/missing: get ResourceClaim"));
  // Replaced: the kubelet's uid is not the current object's.
  PrepareClaim c = CpuClaim("replaced", "cpudevnuma000", "2");
  EXPECT_THAT(PrepareOne({"default", "old-uid", "replaced"}).error,
              HasSubstr("uid \"" + c.uid + "\" but the kubelet asked for uid \"old-uid\""));
  // Not allocated.
  json claim = {{"metadata", {{"name", "pending"}, {"namespace", "default"}}},
                {"spec", {{"devices", {{"requests", json::array({Request("cpus")})}}}}}};
  auto created = server_->CreateClaim(claim);
  ASSERT_TRUE(created.ok());
  EXPECT_THAT(PrepareOne({"default", (*created)["metadata"]["uid"], "pending"}).error,
              HasSubstr("claim default/pending is not allocated"));
}

TEST_F(DraPluginTest, PrioritizedListUsesBaseRequestNamesAndSubrequestConfigs) {
  StartNode();
  PrepareClaim c =
      MakeClaim("prioritized", json::array({FirstAvailable("cpus", {"large", "small"})}),
                json::array({Result("cpus/small", "cpudevnuma000", "2")}),
                json::array({Config("FromClaim", json::array({"cpus/large"}), Cpuset("2-5")),
                             Config("FromClaim", json::array({"cpus/small"}), Cpuset("6-7"))}));
  ClaimResult r = PrepareOne(c);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_THAT(r.devices[0].request_names, ::testing::ElementsAre("cpus"));
  EXPECT_EQ(CdiCpus(c.uid).ToString(), "6-7");
  EXPECT_THAT(ReadFile(CdiPath(c.uid)), HasSubstr("DRA_CPUSET_" + c.uid + "_cpus=6-7"));
}

TEST_F(DraPluginTest, DeviceClassConfigIsHonouredAndClaimConfigWins) {
  StartNode();
  json cls = {
      {"metadata", {{"name", "pinned-cpus"}}},
      {"spec",
       {{"config",
         json::array({{{"opaque", {{"driver", kCpu}, {"parameters", Cpuset("20-21")}}}}})}}}};
  ASSERT_TRUE(server_->CreateDeviceClass(cls).ok());
  // The scheduler copies the class config into the allocation as FromClass.
  PrepareClaim from_class =
      MakeClaim("from-class", json::array({Request("cpus", "pinned-cpus")}),
                json::array({Result("cpus", "cpudevnuma000", "2")}),
                json::array({Config("FromClass", json::array({"cpus"}), Cpuset("20-21"))}));
  EXPECT_EQ(PrepareOne(from_class).error, "");
  EXPECT_EQ(CdiCpus(from_class.uid).ToString(), "20-21");
  PrepareClaim both =
      MakeClaim("claim-wins", json::array({Request("cpus", "pinned-cpus")}),
                json::array({Result("cpus", "cpudevnuma000", "2")}),
                json::array({Config("FromClass", json::array({"cpus"}), Cpuset("20-21")),
                             Config("FromClaim", json::array(), Cpuset("22-23"))}));
  EXPECT_EQ(PrepareOne(both).error, "");
  EXPECT_EQ(CdiCpus(both.uid).ToString(), "22-23");
}

TEST_F(DraPluginTest, GpuClaimsAreExclusive) {
  StartNode();
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10)).ok());
  const std::string gpu = FirstGpu();
  ASSERT_FALSE(gpu.empty());
  PrepareClaim a = MakeClaim("gpu-a", json::array({Request("gpu", "gpu.topodra.io")}),
                             json::array({Result("gpu", gpu, "", kGpu)}));
  ClaimResult r = PrepareOne(a, kGpu);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].cdi_device_ids[0], "gpu.topodra.io/claim=" + a.uid + "-" + gpu);
  EXPECT_TRUE(fs::exists(CdiPath(a.uid, kGpu)));
  PrepareClaim b = MakeClaim("gpu-b", json::array({Request("gpu", "gpu.topodra.io")}),
                             json::array({Result("gpu", gpu, "", kGpu)}));
  EXPECT_THAT(PrepareOne(b, kGpu).error,
              HasSubstr("is already prepared for claim default/gpu-a (uid " + a.uid + ")"));
  EXPECT_EQ(UnprepareOne(a, kGpu), "");
  EXPECT_EQ(PrepareOne(b, kGpu).error, "");
}

TEST_F(DraPluginTest, StateSurvivesKill9AndRestart) {
  StartNode();
  PrepareClaim a = CpuClaim("before-crash", "cpudevnuma000", "4");
  ClaimResult first = PrepareOne(a);
  ASSERT_EQ(first.error, "");
  const CpuSet held = CdiCpus(a.uid);
  sim_.reset();
  daemon_.Kill();
  // A power loss may also take a CDI file written without fsync: it comes back at start.
  fs::remove(CdiPath(a.uid));
  StartNode();
  EXPECT_EQ(CdiCpus(a.uid), held);
  ClaimResult again = PrepareOne(a);
  EXPECT_EQ(again.error, "");
  EXPECT_EQ(again.devices[0].cdi_device_ids, first.devices[0].cdi_device_ids);
  PrepareClaim overlap =
      CpuClaim("overlap", "cpudevnuma000", "1", Cpuset(std::to_string(*held.begin())));
  EXPECT_THAT(PrepareOne(overlap).error,
              HasSubstr("already prepared for claim default/before-crash"));
  EXPECT_EQ(UnprepareOne(a), "");
  EXPECT_EQ(PrepareOne(overlap).error, "");
}

TEST_F(DraPluginTest, Kill9AtAnyMomentNeverHandsACpuOutTwice) {
  StartNode({"--group-by", "machine"});
  // 16 claims, each wanting a pair of CPUs that overlaps its neighbours'.
  std::vector<PrepareClaim> claims;
  for (int i = 0; i < 16; ++i) {
    claims.push_back(
        CpuClaim(absl::StrCat("c", i), "cpudevmachine", "2", Cpuset(absl::StrCat(i, "-", i + 1))));
  }
  std::mt19937 rng(42);
  for (int round = 0; round < 8; ++round) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937 r(round * 10 + t);
        while (!stop) {
          const PrepareClaim& c = claims[r() % claims.size()];
          if (r() % 2) {
            (void)sim_->Prepare(kCpu, {c});
          } else {
            (void)sim_->Unprepare(kCpu, {c});
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 80));
    daemon_.Kill();
    stop = true;
    for (std::thread& w : workers) w.join();
    sim_.reset();
    StartNode({"--group-by", "machine"});
    // Ask for every claim again: what is prepared must be disjoint.
    auto got = sim_->Prepare(kCpu, claims);
    ASSERT_TRUE(got.ok()) << got.status();
    CpuSet seen;
    for (const PrepareClaim& c : claims) {
      if (!(*got)[c.uid].error.empty()) continue;
      const CpuSet cpus = CdiCpus(c.uid);
      ASSERT_EQ(cpus.Size(), 2) << c.name;
      EXPECT_FALSE(cpus.Intersects(seen))
          << "round " << round << ": " << c.name << " got " << cpus << " already handed out";
      seen |= cpus;
    }
    // CDI files exist only for prepared claims: their own and their device metadata's (whose
    // host file is there too).
    for (const auto& entry : fs::directory_iterator(dirs_.cdi)) {
      const std::string name = entry.path().filename().string();
      bool known = false;
      for (const PrepareClaim& c : claims) {
        const std::string metadata = absl::StrCat("dra.cpu_metadata_", c.uid, "_cpus.json");
        known =
            known || ((name == fs::path(CdiPath(c.uid)).filename().string() || name == metadata) &&
                      (*got)[c.uid].error.empty());
      }
      EXPECT_TRUE(known || name[0] == '.') << "stray CDI file " << name;
    }
    for (const PrepareClaim& c : claims) {
      const std::string host =
          absl::StrCat(dirs_.kubelet_root, "/plugins/dra.cpu/dra-device-metadata/default_", c.name,
                       "/cpus/metadata.json");
      const bool prepared = (*got)[c.uid].error.empty();
      EXPECT_EQ(fs::exists(absl::StrCat(dirs_.cdi, "/dra.cpu_metadata_", c.uid, "_cpus.json")),
                prepared)
          << "round " << round << ": " << c.name;
      EXPECT_EQ(fs::exists(host), prepared) << "round " << round << ": " << c.name;
    }
  }
}

TEST_F(DraPluginTest, ConcurrentPreparesOfOverlappingCpusetsHaveOneWinnerPerCpu) {
  StartNode({"--group-by", "machine"});
  // Eight claims all want 4-7; eight more want overlapping pairs 16-17, 17-18, ...
  std::vector<PrepareClaim> claims;
  for (int i = 0; i < 8; ++i) {
    claims.push_back(CpuClaim(absl::StrCat("same", i), "cpudevmachine", "4", Cpuset("4-7")));
  }
  for (int i = 0; i < 8; ++i) {
    claims.push_back(CpuClaim(absl::StrCat("pair", i), "cpudevmachine", "2",
                              Cpuset(absl::StrCat(16 + i, "-", 17 + i))));
  }
  std::vector<ClaimResult> results(claims.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < claims.size(); ++i) {
    threads.emplace_back([&, i] {
      auto got = sim_->Prepare(kCpu, {claims[i]});
      if (got.ok()) results[i] = (*got)[claims[i].uid];
    });
  }
  for (std::thread& t : threads) t.join();
  int same_winners = 0;
  CpuSet seen;
  for (size_t i = 0; i < claims.size(); ++i) {
    if (!results[i].error.empty()) {
      EXPECT_THAT(results[i].error, HasSubstr("already prepared for claim default/"));
      continue;
    }
    if (i < 8) ++same_winners;
    const CpuSet cpus = CdiCpus(claims[i].uid);
    EXPECT_FALSE(cpus.Intersects(seen)) << claims[i].name;
    seen |= cpus;
  }
  EXPECT_EQ(same_winners, 1);
  EXPECT_TRUE(seen.Contains(4));
}

TEST_F(DraPluginTest, ConcurrentGroupedPreparesGetDisjointCpus) {
  StartNode();
  std::vector<PrepareClaim> claims;
  for (int i = 0; i < 10; ++i) {
    claims.push_back(CpuClaim(absl::StrCat("g", i), "cpudevnuma000", "2"));
  }
  std::vector<ClaimResult> results(claims.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < claims.size(); ++i) {
    threads.emplace_back([&, i] {
      auto got = sim_->Prepare(kCpu, {claims[i]});
      if (got.ok()) results[i] = (*got)[claims[i].uid];
    });
  }
  for (std::thread& t : threads) t.join();
  CpuSet seen;
  int ok = 0;
  for (size_t i = 0; i < claims.size(); ++i) {
    if (!results[i].error.empty()) {
      // NUMA 0 has 16 CPUs: 8 claims fit, the others find it full.
      EXPECT_THAT(results[i].error, HasSubstr("CPUs wanted from device \"cpudevnuma000\""));
      continue;
    }
    ++ok;
    const CpuSet cpus = CdiCpus(claims[i].uid);
    EXPECT_EQ(cpus.Size(), 2);
    EXPECT_FALSE(cpus.Intersects(seen));
    seen |= cpus;
  }
  EXPECT_EQ(ok, 8);
}

TEST_F(DraPluginTest, RegistrationSocketIsRecreatedWhenDeleted) {
  StartNode();
  const std::string reg = sim_->Find(kCpu)->socket_path;
  ASSERT_TRUE(fs::remove(reg));
  auto again = sim_->WaitForRegistration(kCpu, 2, absl::Seconds(10));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(fs::exists(reg));
  PrepareClaim c = CpuClaim("after-reregistration", "cpudevnuma000", "2");
  EXPECT_EQ(PrepareOne(c).error, "");
}

// Polls (up to 10 s) until a socket is at `path`; the daemon checks every 250 ms.
bool WaitForSocket(const std::string& path) {
  for (int i = 0; i < 200; ++i) {
    std::error_code ec;
    if (fs::is_socket(fs::symlink_status(path, ec))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST_F(DraPluginTest, DraSocketIsServedAgainWhenDeleted) {
  StartNode();
  const std::string dra = sim_->Find(kCpu)->endpoint;
  ASSERT_TRUE(fs::remove(dra));
  ASSERT_TRUE(WaitForSocket(dra)) << "no socket at " << dra << " again\n" << daemon_.Log();
  struct stat st {};
  ASSERT_EQ(::stat(dra.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // A kubelet dialling the endpoint anew is served...
  ClaimResult fresh =
      PrepareOverNewConnection(dra, CpuClaim("new-connection", "cpudevnuma000", "2"));
  EXPECT_EQ(fresh.error, "");
  ASSERT_EQ(fresh.devices.size(), 1u);
  EXPECT_EQ(fresh.devices[0].device, "cpudevnuma000");
  // ... and so is the connection it made before, once it has reconnected: the first call on it
  // may fail UNAVAILABLE (its server went away), as a kubelet's does, which retries.
  PrepareClaim old = CpuClaim("old-connection", "cpudevnuma001", "2");
  std::string error = "not tried";
  for (int i = 0; i < 100 && !error.empty(); ++i) {
    auto got = sim_->Prepare(kCpu, {old});
    error = got.ok() ? (*got)[old.uid].error : std::string(got.status().message());
    if (!error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(error, "");

  EXPECT_EQ(daemon_.Terminate(), 0);
  EXPECT_FALSE(fs::exists(dra));
  EXPECT_THAT(LinesWith(daemon_.Log(), "DRA socket " + dra),
              ::testing::ElementsAre("driver dra.cpu: DRA socket " + dra +
                                     " was removed; serving a fresh one"));
}

// Review of issue 15: the daemon took its own socket for someone else's once its change time
// moved (chmod, chown, touch, restorecon), and removed it, served a new one and cancelled the
// calls in flight.
TEST_F(DraPluginTest, ChmodOfTheLiveSocketsLeavesThemServed) {
  StartNode();
  const std::string dra = sim_->Find(kCpu)->endpoint, reg = sim_->Find(kCpu)->socket_path;
  struct stat dra_before {
  }, reg_before{};
  ASSERT_EQ(::lstat(dra.c_str(), &dra_before), 0);
  ASSERT_EQ(::lstat(reg.c_str(), &reg_before), 0);
  ASSERT_EQ(::chmod(dra.c_str(), 0660), 0);
  ASSERT_EQ(::chmod(reg.c_str(), 0660), 0);
  // Several of the daemon's checks (every 250 ms).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  struct stat dra_after {
  }, reg_after{};
  ASSERT_EQ(::lstat(dra.c_str(), &dra_after), 0);
  ASSERT_EQ(::lstat(reg.c_str(), &reg_after), 0);
  EXPECT_EQ(dra_after.st_ino, dra_before.st_ino);
  EXPECT_EQ(reg_after.st_ino, reg_before.st_ino);
  // Left as the operator set it: the daemon did not make it again.
  EXPECT_EQ(dra_after.st_mode & 0777, 0660u);
  EXPECT_EQ(reg_after.st_mode & 0777, 0660u);
  // Over the kubelet's existing connection.
  EXPECT_EQ(PrepareOne(CpuClaim("after-chmod", "cpudevnuma000", "2")).error, "");
  EXPECT_EQ(sim_->Find(kCpu)->generation, 1);
  EXPECT_EQ(daemon_.Terminate(), 0);
  EXPECT_THAT(LinesWith(daemon_.Log(), "serving a fresh one"), ::testing::ElementsAre());
}

// Review of issue 15: the plugin directory deleted took the instance lock file with it; the
// daemon made the directory and its socket again, but the lock stayed on the deleted file, so a
// second instance could lock a new one there and take the sockets over.
TEST_F(DraPluginTest, APluginDirectoryMadeAgainIsLockedAgain) {
  StartNode();
  const std::string dra = sim_->Find(kCpu)->endpoint;
  const std::string dir = fs::path(dra).parent_path();
  fs::remove_all(dir);
  ASSERT_TRUE(WaitForSocket(dra)) << daemon_.Log();
  const std::string lock = dir + "/topodra.lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << lock << ": " << std::strerror(errno);
  EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_EQ(errno, EWOULDBLOCK);
  ::close(fd);
  EXPECT_EQ(daemon_.Terminate(), 0);
}

// Issue 15: a regular file at the registration path logged 8 lines a second. The daemon runs
// for several periods of each of its retry loops (registration check 250 ms, --topology-refresh
// 1 s, the reservation watch's backoff from 200 ms without the CRD) and logs each condition once
// when it starts and once when it ends.
TEST_F(DraPluginTest, AFileAtTheRegistrationPathIsOneLineAndItsEndAnother) {
  StartNode({"--reservations", "on", "--topology-refresh", "1"});
  const std::string reg = sim_->Find(kCpu)->socket_path;
  PutFileInPlaceOf(reg, "not a socket\n");
  std::this_thread::sleep_for(std::chrono::seconds(6));
  // Not ours: left as it was.
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(reg)));
  EXPECT_EQ(ReadFile(reg), "not a socket\n");
  ASSERT_TRUE(fs::remove(reg));
  auto again = sim_->WaitForRegistration(kCpu, 2, absl::Seconds(10));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << daemon_.Log();
  EXPECT_EQ(PrepareOne(CpuClaim("after-the-file", "cpudevnuma000", "2")).error, "");
  EXPECT_EQ(daemon_.Terminate(), 0);

  const std::string log = daemon_.Log();
  EXPECT_THAT(
      LinesWith(log, "registration socket " + reg),
      ::testing::ElementsAre(
          "driver dra.cpu: registration socket " + reg +
              ": a regular file is there instead of the socket; the daemon leaves it alone (it "
              "removes only its own sockets) and serves no socket there until it is removed",
          "driver dra.cpu: registration socket " + reg +
              " is served again (before: a regular file was in its place)"));
  EXPECT_THAT(LinesWith(log, "reservations node="),
              ::testing::ElementsAre("reservations node=node-a: the Reservation CRD "
                                     "(reservations.topodra.io) is not installed; reservations "
                                     "are off until it is"));
  // Nothing else repeats either.
  std::map<std::string, int> seen;
  for (const std::string& line : LinesWith(log, "")) ++seen[line];
  for (const auto& [line, n] : seen) EXPECT_EQ(n, 1) << line;
}

TEST_F(DraPluginTest, SecondInstanceIsRefusedAndStaleSocketsReplaced) {
  // A socket file left by a dead instance: bound, never unlinked.
  const std::string dra = dirs_.kubelet_root + "/plugins/dra.cpu/dra.sock";
  fs::create_directories(fs::path(dra).parent_path());
  {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", dra.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::close(fd);
  }
  StartNode();
  Daemon second;
  second.Start(dirs_, {"--kubeconfig", kubeconfig_, "--node-name", kNode, "--topology-file",
                       FixturePath(kMachine)});
  EXPECT_EQ(second.WaitExit(), 1);
  EXPECT_THAT(second.Log(), HasSubstr("another topodra is running on this node"));
  EXPECT_THAT(second.Log(), HasSubstr(dirs_.state + "/topodra.lock"));
  // The first one still serves.
  EXPECT_EQ(PrepareOne(CpuClaim("still-served", "cpudevnuma000", "2")).error, "");
}

TEST_F(DraPluginTest, CorruptStateStopsTheDaemonWithTheFileNamed) {
  fs::create_directories(dirs_.state);
  std::ofstream(dirs_.state + "/checkpoint.json") << "{\"version\": 1, \"checksum\": \"0\"}";
  StartDaemon();
  EXPECT_EQ(daemon_.WaitExit(), 1);
  EXPECT_THAT(daemon_.Log(), HasSubstr(dirs_.state + "/checkpoint.json"));
  EXPECT_THAT(daemon_.Log(),
              HasSubstr("move both checkpoint.json and checkpoint.json.journal aside"));
}

// The last record complete but damaged (a flipped byte, not a crash mid-append): the claim it
// prepared may be running, so the daemon refuses to start instead of dropping the record and,
// with it, the claim's CDI file and CPUs.
TEST_F(DraPluginTest, DamagedCompleteLastJournalRecordStopsTheDaemonAndKeepsTheCdiFile) {
  StartNode();
  PrepareClaim a = CpuClaim("first", "cpudevnuma000", "2");
  PrepareClaim b = CpuClaim("last", "cpudevnuma000", "2");
  ASSERT_EQ(PrepareOne(a).error, "");
  ASSERT_EQ(PrepareOne(b).error, "");
  sim_.reset();
  ASSERT_EQ(daemon_.Terminate(), 0);
  const std::string journal = dirs_.state + "/checkpoint.json.journal";
  std::string text = ReadFile(journal);
  ASSERT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  ASSERT_EQ(text.back(), '\n');
  const size_t at = text.find("\"cpus\"", text.find('\n'));
  ASSERT_NE(at, std::string::npos);
  text[at + 1] = 'C';  // "Cpus": still JSON, wrong checksum
  std::ofstream(journal, std::ios::binary | std::ios::trunc) << text;
  const std::string cdi_b = ReadFile(CdiPath(b.uid));
  ASSERT_FALSE(cdi_b.empty());

  StartDaemon();
  EXPECT_EQ(daemon_.WaitExit(), 1);
  EXPECT_THAT(daemon_.Log(), HasSubstr(absl::StrCat("journal \"", journal, "\": line 2 (byte ")));
  EXPECT_THAT(daemon_.Log(), HasSubstr("record checksum mismatch"));
  EXPECT_THAT(daemon_.Log(), HasSubstr("restore a good copy"));
  EXPECT_EQ(ReadFile(CdiPath(b.uid)), cdi_b);
  EXPECT_EQ(ReadFile(journal), text);
}

// The state files deleted while a claim is prepared: its CDI file shows the state was lost, so
// the daemon refuses to start empty (which would delete the file and hand its CPUs out again),
// lists what is left and how to recover; once the operator has moved the files aside, it starts.
TEST_F(DraPluginTest, LostStateWithCdiFilesLeftStopsTheDaemonAndKeepsThem) {
  StartNode();
  PrepareClaim a = CpuClaim("running", "cpudevnuma000", "2");
  ASSERT_EQ(PrepareOne(a).error, "");
  sim_.reset();
  ASSERT_EQ(daemon_.Terminate(), 0);
  const std::string file = FindCdiFile(a.uid);
  ASSERT_FALSE(file.empty());
  const std::string spec = ReadFile(file);
  // Both: the first record wrote the snapshot (of the current version, before it).
  ASSERT_TRUE(fs::remove(dirs_.state + "/checkpoint.json"));
  ASSERT_TRUE(fs::remove(dirs_.state + "/checkpoint.json.journal"));

  StartDaemon();
  EXPECT_EQ(daemon_.WaitExit(), 1);
  EXPECT_THAT(daemon_.Log(), HasSubstr("the allocation state in " + dirs_.state +
                                       " is gone (no checkpoint.json, no journal) but 1 "
                                       "CDI spec file(s) this daemon wrote are still in " +
                                       dirs_.cdi + ": " + fs::path(file).filename().string()));
  EXPECT_THAT(daemon_.Log(), HasSubstr("move these files out of " + dirs_.cdi));
  EXPECT_EQ(ReadFile(file), spec);
  // Not a one-off: the refusal created nothing that would make the next start take the state
  // for one that merely recorded nothing yet.
  EXPECT_FALSE(fs::exists(dirs_.state + "/checkpoint.json.journal"));
  EXPECT_FALSE(fs::exists(dirs_.state + "/checkpoint.json"));
  StartDaemon();
  EXPECT_EQ(daemon_.WaitExit(), 1);
  EXPECT_THAT(daemon_.Log(), HasSubstr("is gone (no checkpoint.json, no journal)"));
  EXPECT_EQ(ReadFile(file), spec);

  fs::rename(file, dirs_.root + "/moved-aside.json");
  StartNode();
  EXPECT_EQ(PrepareOne(CpuClaim("after-recovery", "cpudevnuma000", "2")).error, "");
}

// A crash during the first prepare ever, after its CDI file and before its journal record: the
// journal is there (empty, or with a torn record), so the state is not lost, and the file is an
// orphan of an unanswered prepare, removed at start like any other.
TEST_F(DraPluginTest, OrphanOfACrashedFirstPrepareIsRemovedNotTakenForALostState) {
  const std::vector<std::string> journals = {"", "0badc0de {\"seq\":1,\"pu"};
  for (size_t i = 0; i < journals.size(); ++i) {
    SCOPED_TRACE(i == 0 ? "empty journal" : "torn first record");
    StartNode();
    PrepareClaim first = CpuClaim(absl::StrCat("first-", i), "cpudevnuma000", "2");
    ASSERT_EQ(PrepareOne(first).error, "");
    sim_.reset();
    ASSERT_EQ(daemon_.Terminate(), 0);
    const std::string file = FindCdiFile(first.uid);
    ASSERT_FALSE(file.empty());
    // No snapshot: the layout of a build before state version 4, which wrote none until its
    // first compaction (this one writes it before the first record), so the journal alone tells
    // the state from a lost one.
    ASSERT_TRUE(fs::remove(dirs_.state + "/checkpoint.json"));
    // What a crash between the CDI file and the journal record leaves.
    std::ofstream(dirs_.state + "/checkpoint.json.journal", std::ios::binary | std::ios::trunc)
        << journals[i];

    StartNode();
    EXPECT_FALSE(fs::exists(file)) << daemon_.Log();
    EXPECT_THAT(daemon_.Log(), ::testing::Not(HasSubstr("is gone")));
    PrepareClaim second = CpuClaim(absl::StrCat("second-", i), "cpudevnuma000", "2");
    EXPECT_EQ(PrepareOne(second).error, "") << "CPUs 0-1 are free: the orphan held nothing";
    EXPECT_EQ(UnprepareOne(second), "");
    sim_.reset();
    ASSERT_EQ(daemon_.Terminate(), 0);
  }
}

// A second instance (its own state, kubelet directory and lock) sharing only the CDI directory
// leaves the first one's files alone, at start and when it unprepares a claim it does not hold.
TEST_F(DraPluginTest, InstancesSharingTheCdiDirectoryKeepEachOthersFiles) {
  StartNode();
  PrepareClaim a = CpuClaim("of-the-first", "cpudevnuma000", "2");
  ASSERT_EQ(PrepareOne(a).error, "");
  const std::string file = FindCdiFile(a.uid);
  ASSERT_FALSE(file.empty());
  const std::string spec = ReadFile(file);

  DaemonDirs other = DaemonDirs::Make();
  other.cdi = dirs_.cdi;
  Daemon second;
  second.Start(other, {"--kubeconfig", kubeconfig_, "--node-name", kNode, "--topology-file",
                       FixturePath(kMachine)});
  for (int i = 0; i < 1000 && second.Running() &&
                  second.Log().find("driver dra.cpu: serving") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(second.Log(), HasSubstr("driver dra.cpu: serving"));
  EXPECT_EQ(ReadFile(file), spec) << second.Log();
  {
    KubeletSimOptions o;
    o.root_dir = other.kubelet_root;
    auto sim = KubeletSimulator::Start(o);
    ASSERT_TRUE(sim.ok()) << sim.status();
    ASSERT_TRUE((*sim)->WaitForRegistration(kCpu, 1, absl::Seconds(20)).ok()) << second.Log();
    auto got = (*sim)->Unprepare(kCpu, {a});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)[a.uid], "");
  }
  EXPECT_EQ(ReadFile(file), spec);
  EXPECT_EQ(second.Terminate(), 0);
  std::error_code ec;
  fs::remove_all(other.root, ec);
  // The first one still has it prepared, file and all.
  EXPECT_EQ(PrepareOne(a).error, "");
  EXPECT_EQ(ReadFile(file), spec);
}

// The file names carry the instance marker; the CDI library still reads them (see
// CdiFilesAreAcceptedByTheCdiGoLibrary) and the kubelet only ever sees CDI device names.
TEST_F(DraPluginTest, CdiFileNamesCarryTheInstanceMarker) {
  StartNode();
  PrepareClaim a = CpuClaim("marked", "cpudevnuma000", "2");
  ASSERT_EQ(PrepareOne(a).error, "");
  EXPECT_EQ(FindCdiFile(a.uid), CdiPath(a.uid));
  EXPECT_THAT(CdiPath(a.uid), ::testing::EndsWith("_i" + CdiMarker() + ".json"));
  EXPECT_TRUE(fs::exists(CdiPath(a.uid)));
}

TEST_F(DraPluginTest, CdiFilesAreAcceptedByTheCdiGoLibrary) {
  StartNode();
  ASSERT_TRUE(sim_->WaitForRegistration(kGpu, 1, absl::Seconds(10)).ok());
  PrepareClaim cpu = MakeClaim(
      "two-requests", json::array({Request("a"), FirstAvailable("b", {"big", "small"})}),
      json::array({Result("a", "cpudevnuma000", "2"), Result("b/small", "cpudevnuma001", "3")}));
  ASSERT_EQ(PrepareOne(cpu).error, "");
  const std::string gpu = FirstGpu();
  ASSERT_FALSE(gpu.empty());
  PrepareClaim g = MakeClaim("gpu", json::array({Request("gpu", "gpu.topodra.io")}),
                             json::array({Result("gpu", gpu, "", kGpu)}));
  ASSERT_EQ(PrepareOne(g, kGpu).error, "");
  const std::string validator = BuildCdiValidator();
  ASSERT_FALSE(validator.empty());
  CommandResult r = RunCommand(validator + " " + dirs_.cdi);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("device: dra.cpu/claim=" + cpu.uid + "-cpudevnuma000"));
  EXPECT_THAT(r.output, HasSubstr("device: dra.cpu/claim=" + cpu.uid + "-cpudevnuma001"));
  EXPECT_THAT(r.output, HasSubstr("device: gpu.topodra.io/claim=" + g.uid + "-" + gpu));
}

}  // namespace
}  // namespace topodra::testing
