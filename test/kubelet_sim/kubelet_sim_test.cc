// The kubelet simulator against a fake DRA plugin served in-process over Unix sockets: plugin
// discovery (inotify and the start-up walk), the 1.34+ version pick, re-registration and
// deregistration, prepare/unprepare on both API versions and the kubelet's response checks.
#include "test/kubelet_sim/kubelet_sim.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "proto/dra/v1/api.grpc.pb.h"
#include "proto/dra/v1beta1/api.grpc.pb.h"
#include "proto/pluginregistration/api.grpc.pb.h"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using topodra::Message;
using topodra::testing::ClaimResult;
using topodra::testing::KubeletSimOptions;
using topodra::testing::KubeletSimulator;
using topodra::testing::PrepareClaim;
using topodra::testing::PreparedDevice;
using topodra::testing::Registration;

namespace dra_v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra_v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace reg = ::pluginregistration;

constexpr char kDriver[] = "cpu.example.com";
constexpr absl::Duration kWait = absl::Seconds(3);  // generous; registration takes ~100 ms

// How the fake plugin answers.
struct PluginBehaviour {
  std::string type = "DRAPlugin";
  std::string driver = kDriver;
  std::vector<std::string> versions = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
  bool empty_endpoint = false;  // serve DRA on the registration socket and leave endpoint empty
  std::string omit_uid;         // leave this claim out of DRA responses
  std::string extra_uid;        // add a result for a claim nobody asked for
  grpc::Status fail;            // returned by every DRA call when not OK
};

struct V1Api {
  static constexpr char kName[] = "v1";
  using Service = dra_v1::DRAPlugin;
  using PrepareRequest = dra_v1::NodePrepareResourcesRequest;
  using PrepareResponse = dra_v1::NodePrepareResourcesResponse;
  using UnprepareRequest = dra_v1::NodeUnprepareResourcesRequest;
  using UnprepareResponse = dra_v1::NodeUnprepareResourcesResponse;
};

struct V1beta1Api {
  static constexpr char kName[] = "v1beta1";
  using Service = dra_v1beta1::DRAPlugin;
  using PrepareRequest = dra_v1beta1::NodePrepareResourcesRequest;
  using PrepareResponse = dra_v1beta1::NodePrepareResourcesResponse;
  using UnprepareRequest = dra_v1beta1::NodeUnprepareResourcesRequest;
  using UnprepareResponse = dra_v1beta1::NodeUnprepareResourcesResponse;
};

std::chrono::system_clock::time_point In(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

// A DRA plugin: a pluginregistration.Registration server on the registration socket and the v1
// and v1beta1 DRAPlugin services (echoing the claims back) on the endpoint socket.
class FakePlugin {
 public:
  struct Notification {
    bool registered;
    std::string error;
  };

  explicit FakePlugin(PluginBehaviour b) : b_(std::move(b)) {}
  ~FakePlugin() {
    for (auto& s : servers_) {
      s->Shutdown(In(absl::Milliseconds(500)));
      s->Wait();
    }
  }

  // Like the plugin helper: the service socket first, then the registration socket.
  void Start(const std::string& reg_socket, const std::string& dra_socket) {
    reg_socket_ = reg_socket;
    std::filesystem::create_directories(std::filesystem::path(reg_socket).parent_path());
    if (!b_.empty_endpoint) {
      endpoint_ = dra_socket;
      std::filesystem::create_directories(std::filesystem::path(dra_socket).parent_path());
      servers_.push_back(Serve(dra_socket, /*registration=*/false, /*dra=*/true));
    }
    StartRegistration();
  }

  void StartRegistration() {
    servers_.push_back(Serve(reg_socket_, /*registration=*/true, /*dra=*/b_.empty_endpoint));
    reg_server_ = servers_.back().get();
  }

  // Stops the registration server and makes sure its socket is gone.
  void StopRegistration() {
    reg_server_->Shutdown(In(absl::Milliseconds(500)));
    reg_server_->Wait();
    ::unlink(reg_socket_.c_str());
  }

  // Puts a new registration socket in place of the old one in one step (rename), so the path is
  // never missing: the simulator sees only the new inode.
  void ReplaceRegistration() {
    const std::string next =
        (std::filesystem::path(reg_socket_).parent_path() / ".next-reg.sock").string();
    servers_.push_back(Serve(next, /*registration=*/true, /*dra=*/b_.empty_endpoint));
    ASSERT_EQ(::rename(next.c_str(), reg_socket_.c_str()), 0)
        << std::generic_category().message(errno);
  }

  const PluginBehaviour& behaviour() const { return b_; }
  const std::string& endpoint() const { return endpoint_; }

  int get_info_calls() const {
    absl::MutexLock lock(&mu_);
    return get_info_calls_;
  }
  std::vector<Notification> notifications() const {
    absl::MutexLock lock(&mu_);
    return notifications_;
  }
  // One line per DRA call: "<version> <prepare|unprepare> ns/name/uid ...".
  std::vector<std::string> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

  void RecordGetInfo() {
    absl::MutexLock lock(&mu_);
    ++get_info_calls_;
  }
  void RecordNotification(bool registered, const std::string& error) {
    absl::MutexLock lock(&mu_);
    notifications_.push_back({registered, error});
  }
  void RecordCall(std::string call) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(std::move(call));
  }

 private:
  class RegistrationService final : public reg::Registration::Service {
   public:
    explicit RegistrationService(FakePlugin* p) : p_(p) {}
    grpc::Status GetInfo(grpc::ServerContext*, const reg::InfoRequest*,
                         reg::PluginInfo* info) override {
      p_->RecordGetInfo();
      info->set_type(p_->b_.type);
      info->set_name(p_->b_.driver);
      info->set_endpoint(p_->endpoint_);
      for (const auto& v : p_->b_.versions) info->add_supported_versions(v);
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const reg::RegistrationStatus* req,
                                          reg::RegistrationStatusResponse*) override {
      p_->RecordNotification(req->plugin_registered(), req->error());
      return grpc::Status::OK;
    }

   private:
    FakePlugin* p_;
  };

  template <typename Api>
  class DraService final : public Api::Service::Service {
   public:
    explicit DraService(FakePlugin* p) : p_(p) {}

    grpc::Status NodePrepareResources(grpc::ServerContext*, const typename Api::PrepareRequest* req,
                                      typename Api::PrepareResponse* resp) override {
      p_->RecordCall(Describe("prepare", *req));
      if (!p_->b_.fail.ok()) return p_->b_.fail;
      for (const auto& c : req->claims()) {
        if (c.uid() == p_->b_.omit_uid) continue;
        auto& result = (*resp->mutable_claims())[c.uid()];
        if (c.name().rfind("bad", 0) == 0) {
          result.set_error("cannot prepare " + c.name());
          continue;
        }
        auto* d = result.add_devices();
        d->add_request_names("req-0");
        d->set_pool_name("pool-0");
        d->set_device_name("dev-" + c.name());
        d->add_cdi_device_ids("example.com/cpu=" + c.uid());
        if constexpr (requires { d->set_share_id(""); }) d->set_share_id("share-" + c.uid());
      }
      if (!p_->b_.extra_uid.empty()) (*resp->mutable_claims())[p_->b_.extra_uid];
      return grpc::Status::OK;
    }

    grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                        const typename Api::UnprepareRequest* req,
                                        typename Api::UnprepareResponse* resp) override {
      p_->RecordCall(Describe("unprepare", *req));
      if (!p_->b_.fail.ok()) return p_->b_.fail;
      for (const auto& c : req->claims()) {
        if (c.uid() == p_->b_.omit_uid) continue;
        auto& result = (*resp->mutable_claims())[c.uid()];
        if (c.name().rfind("bad", 0) == 0) result.set_error("cannot unprepare " + c.name());
      }
      if (!p_->b_.extra_uid.empty()) (*resp->mutable_claims())[p_->b_.extra_uid];
      return grpc::Status::OK;
    }

   private:
    template <typename Request>
    static std::string Describe(const char* what, const Request& req) {
      std::string out = absl::StrCat(Api::kName, " ", what);
      for (const auto& c : req.claims()) {
        absl::StrAppend(&out, " ", c.namespace_(), "/", c.name(), "/", c.uid());
      }
      return out;
    }
    FakePlugin* p_;
  };

  std::unique_ptr<grpc::Server> Serve(const std::string& path, bool registration, bool dra) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
    // A service object can belong to one server only: new ones for every server.
    if (registration) {
      services_.push_back(std::make_unique<RegistrationService>(this));
      builder.RegisterService(services_.back().get());
    }
    if (dra) {
      services_.push_back(std::make_unique<DraService<V1Api>>(this));
      builder.RegisterService(services_.back().get());
      services_.push_back(std::make_unique<DraService<V1beta1Api>>(this));
      builder.RegisterService(services_.back().get());
    }
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    EXPECT_NE(server, nullptr) << "cannot serve on " << path;
    return server;
  }

  const PluginBehaviour b_;
  std::string reg_socket_;
  std::string endpoint_;  // empty with empty_endpoint
  // Services outlive the servers (members are destroyed in reverse order).
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  grpc::Server* reg_server_ = nullptr;

  mutable absl::Mutex mu_;
  int get_info_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Notification> notifications_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

bool Eventually(const std::function<bool()>& condition, absl::Duration timeout = kWait) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

int CountLines(const std::vector<std::string>& log, const std::string& prefix) {
  int n = 0;
  for (const auto& line : log) n += line.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

class KubeletSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ks.XXXXXX";  // Unix socket paths are limited to 107 bytes
    ASSERT_NE(mkdtemp(tmpl), nullptr) << std::generic_category().message(errno);
    root_ = tmpl;
    registry_ = root_ + "/plugins_registry";
  }

  void TearDown() override {
    if (sim_ != nullptr && HasFailure()) {
      std::cerr << "kubelet sim log:\n  " << absl::StrJoin(sim_->Log(), "\n  ") << "\n";
    }
    sim_.reset();
    plugins_.clear();
    std::filesystem::remove_all(root_);
  }

  void StartSim(KubeletSimOptions opts = {}) {
    opts.root_dir = root_;
    auto sim = KubeletSimulator::Start(std::move(opts));
    ASSERT_TRUE(sim.ok()) << sim.status();
    sim_ = std::move(*sim);
  }

  // Starts a plugin with its registration socket at registry/<reg_name> and its service socket
  // at <root>/plugins/<driver>/dra.sock.
  FakePlugin& AddPlugin(PluginBehaviour b, const std::string& reg_name = "") {
    const std::string name = reg_name.empty() ? b.driver + "-reg.sock" : reg_name;
    const std::string dra = absl::StrCat(root_, "/plugins/", b.driver, "/dra.sock");
    plugins_.push_back(std::make_unique<FakePlugin>(std::move(b)));
    plugins_.back()->Start(registry_ + "/" + name, dra);
    return *plugins_.back();
  }

  Registration MustRegister(const std::string& driver = kDriver, int generation = 1) {
    auto r = sim_->WaitForRegistration(driver, generation, kWait);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : Registration{};
  }

  std::string root_, registry_;
  std::unique_ptr<KubeletSimulator> sim_;
  std::vector<std::unique_ptr<FakePlugin>> plugins_;
};

TEST_F(KubeletSimTest, StartCreatesRegistryAndRejectsUnknownKnownVersions) {
  StartSim();
  EXPECT_TRUE(std::filesystem::is_directory(registry_));
  auto bad =
      KubeletSimulator::Start({.root_dir = root_, .known_versions = {"v1alpha3.NodeService"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("v1alpha3.NodeService"));
}

TEST_F(KubeletSimTest, RegistersSocketCreatedAfterStart) {
  StartSim();
  FakePlugin& plugin = AddPlugin({});
  Registration r = MustRegister();
  EXPECT_EQ(r.driver, kDriver);
  EXPECT_EQ(r.version, "v1.DRAPlugin");
  EXPECT_EQ(r.endpoint, plugin.endpoint());
  EXPECT_EQ(r.socket_path, registry_ + "/cpu.example.com-reg.sock");
  EXPECT_THAT(r.supported_versions, ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin"));
  EXPECT_EQ(r.generation, 1);

  ASSERT_EQ(plugin.notifications().size(), 1u);
  EXPECT_TRUE(plugin.notifications()[0].registered);
  EXPECT_EQ(plugin.notifications()[0].error, "");
  auto found = sim_->Find(kDriver);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->endpoint, plugin.endpoint());
  EXPECT_FALSE(sim_->Find("other.example.com").has_value());

  const auto log = sim_->Log();
  EXPECT_EQ(CountLines(log, "GetInfo " + r.socket_path + " -> OK type=DRAPlugin"), 1);
  EXPECT_EQ(CountLines(log, "NotifyRegistrationStatus " + r.socket_path + " registered=true"), 1);
}

TEST_F(KubeletSimTest, DiscoversSocketsThatExistedBeforeStartIncludingSubdirectories) {
  FakePlugin& top = AddPlugin({});
  FakePlugin& nested = AddPlugin({.driver = "gpu.example.com"}, "a/b/gpu.example.com-reg.sock");
  StartSim();
  Registration r1 = MustRegister();
  Registration r2 = MustRegister("gpu.example.com");
  EXPECT_EQ(r1.endpoint, top.endpoint());
  EXPECT_EQ(r2.endpoint, nested.endpoint());
  EXPECT_EQ(r2.socket_path, registry_ + "/a/b/gpu.example.com-reg.sock");
}

TEST_F(KubeletSimTest, WatchesSubdirectoriesCreatedAfterStart) {
  StartSim();
  // Created in one go: the simulator must walk "x" when it appears, since "x/y" may already exist.
  FakePlugin& plugin = AddPlugin({}, "x/y/cpu.example.com-reg.sock");
  Registration r = MustRegister();
  EXPECT_EQ(r.socket_path, registry_ + "/x/y/cpu.example.com-reg.sock");
  EXPECT_EQ(r.endpoint, plugin.endpoint());
}

TEST_F(KubeletSimTest, IgnoresHiddenNamesAndNonSockets) {
  StartSim();
  std::ofstream(registry_ + "/plain.sock") << "not a socket";
  FakePlugin& hidden = AddPlugin({.driver = "hidden.example.com"}, ".hidden-reg.sock");
  FakePlugin& in_hidden_dir = AddPlugin({.driver = "dir.example.com"}, ".d/dir-reg.sock");
  // A visible plugin registered after the hidden ones proves the events were all processed.
  AddPlugin({});
  MustRegister();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(hidden.get_info_calls(), 0);
  EXPECT_EQ(in_hidden_dir.get_info_calls(), 0);
  EXPECT_EQ(CountLines(sim_->Log(), "GetInfo "), 1);
}

TEST_F(KubeletSimTest, StaleSocketDoesNotHoldUpOtherPlugins) {
  // A socket file nobody listens on, as a crashed plugin leaves behind.
  std::filesystem::create_directories(registry_);
  const std::string stale = registry_ + "/stale-reg.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  (void)std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", stale.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);

  StartSim();
  FakePlugin& plugin = AddPlugin({});
  Registration r = MustRegister();
  EXPECT_EQ(r.endpoint, plugin.endpoint());
  EXPECT_EQ(CountLines(sim_->Log(), "GetInfo " + stale), 0);
  // Removing the stale socket ends its pending attempt; destroying the simulator must not wait
  // for the 10 s dial timeout either (TearDown).
  ::unlink(stale.c_str());
}

TEST_F(KubeletSimTest, PicksFirstVersionOfThePluginsListThatItKnows) {
  StartSim();
  FakePlugin& plugin =
      AddPlugin({.versions = {"v9.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAPlugin"}});
  Registration r = MustRegister();
  EXPECT_EQ(r.version, "v1beta1.DRAPlugin");
  auto results = sim_->Prepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_THAT(plugin.calls(), ElementsAre("v1beta1 prepare ns/claim-a/uid-a"));
}

TEST_F(KubeletSimTest, KubeletWithoutV1UsesV1beta1) {
  StartSim({.known_versions = {"v1beta1.DRAPlugin"}});
  FakePlugin& plugin = AddPlugin({});
  Registration r = MustRegister();
  EXPECT_EQ(r.version, "v1beta1.DRAPlugin");

  auto results = sim_->Prepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 1u);
  const ClaimResult& a = results->at("uid-a");
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_EQ(a.devices[0].device, "dev-claim-a");
  EXPECT_FALSE(a.devices[0].share_id.has_value());  // v1beta1 has no share_id
  auto un = sim_->Unprepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  ASSERT_TRUE(un.ok()) << un.status();
  EXPECT_THAT(plugin.calls(), ElementsAre("v1beta1 prepare ns/claim-a/uid-a",
                                          "v1beta1 unprepare ns/claim-a/uid-a"));
}

TEST_F(KubeletSimTest, PluginWithOnlyUnknownVersionsIsRejectedAndRetried) {
  StartSim();
  FakePlugin& plugin = AddPlugin({.versions = {"v9.DRAPlugin", "1.0.0"}});
  ASSERT_TRUE(Eventually([&] { return plugin.notifications().size() >= 2; }));
  for (const auto& n : plugin.notifications()) {
    EXPECT_FALSE(n.registered);
    EXPECT_THAT(n.error, HasSubstr("no supported version"));
    EXPECT_THAT(n.error, HasSubstr("v9.DRAPlugin"));
  }
  EXPECT_FALSE(sim_->Find(kDriver).has_value());
  auto r = sim_->WaitForRegistration(kDriver, 1, absl::Milliseconds(100));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(Message(r.status()), HasSubstr("no supported version"));
}

TEST_F(KubeletSimTest, WrongPluginTypeIsRejected) {
  StartSim();
  FakePlugin& plugin = AddPlugin({.type = "CSIPlugin"});
  ASSERT_TRUE(Eventually([&] { return !plugin.notifications().empty(); }));
  EXPECT_FALSE(plugin.notifications()[0].registered);
  EXPECT_THAT(plugin.notifications()[0].error,
              HasSubstr("no handler registered for plugin type: CSIPlugin"));
  EXPECT_FALSE(sim_->Find(kDriver).has_value());
}

TEST_F(KubeletSimTest, RejectRegistrationOption) {
  StartSim({.reject_registration = true});
  FakePlugin& plugin = AddPlugin({});
  ASSERT_TRUE(Eventually([&] { return plugin.notifications().size() >= 2; }));
  EXPECT_FALSE(plugin.notifications()[0].registered);
  EXPECT_THAT(plugin.notifications()[0].error, HasSubstr("rejected"));
  EXPECT_FALSE(sim_->Find(kDriver).has_value());
}

TEST_F(KubeletSimTest, EmptyEndpointMeansTheRegistrationSocket) {
  StartSim();
  FakePlugin& plugin = AddPlugin({.empty_endpoint = true});
  Registration r = MustRegister();
  EXPECT_EQ(r.endpoint, r.socket_path);
  auto results = sim_->Prepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_THAT(plugin.calls(), ElementsAre("v1 prepare ns/claim-a/uid-a"));
}

TEST_F(KubeletSimTest, DeregistersWhenSocketIsDeleted) {
  StartSim();
  FakePlugin& plugin = AddPlugin({});
  MustRegister();
  plugin.StopRegistration();
  EXPECT_TRUE(sim_->WaitForDeregistration(kDriver, kWait));
  EXPECT_FALSE(sim_->Find(kDriver).has_value());
  EXPECT_EQ(CountLines(sim_->Log(), "Deregistered driver=cpu.example.com"), 1);
  auto results = sim_->Prepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  ASSERT_FALSE(results.ok());
  EXPECT_EQ(results.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(results.status()), HasSubstr("DRA driver cpu.example.com is not registered"));
}

TEST_F(KubeletSimTest, ReRegistersWhenSocketIsDeletedAndRecreated) {
  StartSim();
  FakePlugin& plugin = AddPlugin({});
  EXPECT_EQ(MustRegister().generation, 1);
  plugin.StopRegistration();
  plugin.StartRegistration();
  Registration r = MustRegister(kDriver, 2);
  EXPECT_EQ(r.generation, 2);
  EXPECT_EQ(plugin.get_info_calls(), 2);
  ASSERT_EQ(plugin.notifications().size(), 2u);
  EXPECT_TRUE(plugin.notifications()[1].registered);
  EXPECT_EQ(CountLines(sim_->Log(), "Deregistered driver=cpu.example.com"), 1);
  // The new registration works end to end.
  auto results = sim_->Prepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  EXPECT_TRUE(results.ok()) << results.status();
}

TEST_F(KubeletSimTest, ReRegistersWhenSocketIsReplacedInPlace) {
  StartSim();
  FakePlugin& plugin = AddPlugin({});
  EXPECT_EQ(MustRegister().generation, 1);
  plugin.ReplaceRegistration();  // rename over the old path: no removal event, a new inode
  Registration r = MustRegister(kDriver, 2);
  EXPECT_EQ(r.generation, 2);
  EXPECT_EQ(CountLines(sim_->Log(), "Deregistered driver=cpu.example.com"), 1);
  EXPECT_EQ(plugin.get_info_calls(), 2);
}

TEST_F(KubeletSimTest, PrepareUnprepareRoundTrip) {
  StartSim();
  FakePlugin& plugin = AddPlugin({});
  MustRegister();
  const std::vector<PrepareClaim> claims = {{"ns1", "uid-a", "claim-a"},
                                            {"ns2", "uid-b", "claim-b"}};
  auto results = sim_->Prepare(kDriver, claims);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 2u);
  for (const auto& [uid, name] : {std::pair{"uid-a", "claim-a"}, std::pair{"uid-b", "claim-b"}}) {
    const ClaimResult& r = results->at(uid);
    EXPECT_EQ(r.error, "");
    ASSERT_EQ(r.devices.size(), 1u);
    const PreparedDevice& d = r.devices[0];
    EXPECT_THAT(d.request_names, ElementsAre("req-0"));
    EXPECT_EQ(d.pool, "pool-0");
    EXPECT_EQ(d.device, absl::StrCat("dev-", name));
    EXPECT_THAT(d.cdi_device_ids, ElementsAre(absl::StrCat("example.com/cpu=", uid)));
    EXPECT_EQ(d.share_id, std::optional<std::string>(absl::StrCat("share-", uid)));
  }
  auto un = sim_->Unprepare(kDriver, claims);
  ASSERT_TRUE(un.ok()) << un.status();
  EXPECT_EQ(*un, (std::map<std::string, std::string>{{"uid-a", ""}, {"uid-b", ""}}));
  EXPECT_THAT(plugin.calls(), ElementsAre("v1 prepare ns1/claim-a/uid-a ns2/claim-b/uid-b",
                                          "v1 unprepare ns1/claim-a/uid-a ns2/claim-b/uid-b"));
  const auto log = sim_->Log();
  EXPECT_EQ(CountLines(log, "NodePrepareResources driver=cpu.example.com version=v1.DRAPlugin"), 1);
  EXPECT_EQ(CountLines(log, "NodeUnprepareResources driver=cpu.example.com version=v1.DRAPlugin"),
            1);
}

TEST_F(KubeletSimTest, PerClaimErrorsAreResultsNotRpcErrors) {
  StartSim();
  AddPlugin({});
  MustRegister();
  const std::vector<PrepareClaim> claims = {{"ns", "uid-a", "claim-a"}, {"ns", "uid-b", "bad-b"}};
  auto results = sim_->Prepare(kDriver, claims);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ(results->at("uid-a").error, "");
  EXPECT_EQ(results->at("uid-a").devices.size(), 1u);
  EXPECT_EQ(results->at("uid-b").error, "cannot prepare bad-b");
  EXPECT_THAT(results->at("uid-b").devices, IsEmpty());
  auto un = sim_->Unprepare(kDriver, claims);
  ASSERT_TRUE(un.ok()) << un.status();
  EXPECT_EQ(*un, (std::map<std::string, std::string>{{"uid-a", ""},
                                                     {"uid-b", "cannot unprepare bad-b"}}));
}

TEST_F(KubeletSimTest, MissingClaimInResponseIsAnError) {
  StartSim();
  AddPlugin({.omit_uid = "uid-b"});
  MustRegister();
  const std::vector<PrepareClaim> claims = {{"ns", "uid-a", "claim-a"}, {"ns", "uid-b", "claim-b"}};
  auto results = sim_->Prepare(kDriver, claims);
  ASSERT_FALSE(results.ok());
  EXPECT_THAT(Message(results.status()),
              HasSubstr("NodePrepareResources skipped 1 ResourceClaims"));
  EXPECT_THAT(Message(results.status()), HasSubstr("uid-b"));
  auto un = sim_->Unprepare(kDriver, claims);
  ASSERT_FALSE(un.ok());
  EXPECT_THAT(Message(un.status()), HasSubstr("NodeUnprepareResources skipped 1 ResourceClaims"));
}

TEST_F(KubeletSimTest, UnknownClaimInResponseIsAnError) {
  StartSim();
  AddPlugin({.extra_uid = "uid-x"});
  MustRegister();
  auto results = sim_->Prepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  ASSERT_FALSE(results.ok());
  EXPECT_THAT(Message(results.status()),
              HasSubstr("NodePrepareResources returned result for unknown claim UID uid-x"));
  auto un = sim_->Unprepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  ASSERT_FALSE(un.ok());
  EXPECT_THAT(Message(un.status()), HasSubstr("unknown claim UID uid-x"));
}

TEST_F(KubeletSimTest, GrpcErrorKeepsCodeAndMessage) {
  StartSim();
  AddPlugin({.fail = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "no cpus left")});
  MustRegister();
  auto results = sim_->Prepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  ASSERT_FALSE(results.ok());
  EXPECT_EQ(results.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Message(results.status()), "no cpus left");
  auto un = sim_->Unprepare(kDriver, {{"ns", "uid-a", "claim-a"}});
  ASSERT_FALSE(un.ok());
  EXPECT_EQ(un.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CountLines(sim_->Log(), "NodePrepareResources driver=cpu.example.com"), 1);
}

// Runs the kubelet_sim command; returns its exit code and stdout.
std::pair<int, std::string> RunCli(const std::string& args) {
  const std::string cmd = absl::StrCat(KUBELET_SIM_BINARY, " ", args, " 2>/dev/null");
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  int status = pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST_F(KubeletSimTest, CommandLine) {
  FakePlugin& plugin = AddPlugin({});
  const std::string root = "--root-dir " + root_;

  auto [wait_rc, wait_out] = RunCli(root + " wait cpu.example.com --timeout 3s");
  ASSERT_EQ(wait_rc, 0);
  auto reg = nlohmann::json::parse(wait_out);
  EXPECT_EQ(reg["driver"], kDriver);
  EXPECT_EQ(reg["version"], "v1.DRAPlugin");
  EXPECT_EQ(reg["endpoint"], plugin.endpoint());
  EXPECT_EQ(reg["socketPath"], registry_ + "/cpu.example.com-reg.sock");
  EXPECT_EQ(reg["generation"], 1);

  auto [prep_rc, prep_out] =
      RunCli(root + " prepare cpu.example.com ns/claim-a/uid-a ns/bad-b/uid-b");
  ASSERT_EQ(prep_rc, 0) << prep_out;
  auto prep = nlohmann::json::parse(prep_out);
  EXPECT_EQ(prep, nlohmann::json::parse(R"({
    "uid-a": {"devices": [{"requestNames": ["req-0"], "poolName": "pool-0",
                           "deviceName": "dev-claim-a", "cdiDeviceIds": ["example.com/cpu=uid-a"],
                           "shareId": "share-uid-a"}],
              "error": ""},
    "uid-b": {"devices": [], "error": "cannot prepare bad-b"}})"));

  auto [unprep_rc, unprep_out] = RunCli(root + " unprepare cpu.example.com ns/claim-a/uid-a");
  ASSERT_EQ(unprep_rc, 0) << unprep_out;
  EXPECT_EQ(nlohmann::json::parse(unprep_out),
            nlohmann::json::parse(R"({"uid-a": {"error": ""}})"));
  EXPECT_THAT(plugin.calls(), ElementsAre("v1 prepare ns/claim-a/uid-a ns/bad-b/uid-b",
                                          "v1 unprepare ns/claim-a/uid-a"));

  EXPECT_EQ(RunCli(root + " wait other.example.com --timeout 200ms").first, 1);
  EXPECT_EQ(RunCli(root + " prepare cpu.example.com not-a-claim").first, 2);
  EXPECT_EQ(RunCli("wait cpu.example.com").first, 2);
  // The device manager's side (its success is test/runtime's, against the real daemon): bad
  // counts are flag errors, a resource no plugin registers fails after --timeout.
  EXPECT_EQ(RunCli(root + " allocate example.com/cpu 0").first, 2);
  EXPECT_EQ(RunCli(root + " allocate example.com/cpu two").first, 2);
  EXPECT_EQ(RunCli(root + " allocate example.com/cpu").first, 2);
  EXPECT_EQ(RunCli(root + " allocate example.com/cpu 1 --timeout 200ms").first, 1);
  // The simulator cannot start (its directory cannot be made): the work failed, not the flags.
  const std::string file = root_ + "/a-file";
  std::ofstream(file) << "x";
  auto [start_rc, start_out] =
      RunCli("--root-dir " + file + " allocate example.com/cpu 1 --timeout 200ms");
  EXPECT_EQ(start_rc, 1) << start_out;
}

TEST_F(KubeletSimTest, CommandLineFailsWhenTheRpcFails) {
  AddPlugin({.omit_uid = "uid-a"});
  auto [rc, out] = RunCli("--root-dir " + root_ + " prepare cpu.example.com ns/claim-a/uid-a");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(out, "");
}

}  // namespace
