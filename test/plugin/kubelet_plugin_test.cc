// The kubelet-facing plugin in-process, with a claim service that has no devices: how its
// health streams end.
#include "driver/plugin/kubelet_plugin.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "driver/prepare/claim_service.h"
#include "proto/drahealth/health_api.h"
#include "proto/pluginregistration/api.grpc.pb.h"
#include "test/testing/eventually.h"

namespace topodra::plugin {
namespace {

namespace fs = std::filesystem;
using topodra::testing::Eventually;

class KubeletPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kpt-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    prepare::DriverSetup setup;
    setup.driver = "dra.cpu";
    service_ = std::make_unique<prepare::ClaimService>(setup, topology::Topology{}, &ledger_,
                                                       nullptr, nullptr);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string dir_;
  state::Ledger ledger_{nullptr, state::State{}};
  std::unique_ptr<prepare::ClaimService> service_;
};

// The kubelet re-opening its health stream on its connection to a DRA server that is being
// replaced (after the streams were told to end) held the replacement, and with it the missing
// socket, until the next health interval: the handler slept without looking at its call.
TEST_F(KubeletPluginTest, AHealthStreamEndsOnceItsCallIsCancelled) {
  PluginOptions opts;
  opts.driver = "dra.cpu";
  opts.kubelet_root = dir_;
  opts.health_interval = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<KubeletPlugin>> plugin =
      KubeletPlugin::Start(opts, service_.get());
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  auto channel =
      grpc::CreateChannel("unix:" + (*plugin)->dra_socket(), grpc::InsecureChannelCredentials());
  auto stub = ::v1alpha1::DRAResourceHealth::NewStub(channel);
  grpc::ClientContext ctx;
  auto reader = stub->NodeWatchResources(&ctx, ::v1alpha1::NodeWatchResourcesRequest());
  ::v1alpha1::NodeWatchResourcesResponse first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_EQ((*plugin)->health_streams(), 1);

  ctx.TryCancel();
  // Well before the interval of 60 s.
  EXPECT_TRUE(Eventually([&] { return (*plugin)->health_streams() == 0; }))
      << (*plugin)->health_streams() << " health stream(s) still running";
  (*plugin)->Stop();
  EXPECT_EQ((*plugin)->health_streams(), 0);
}

std::vector<std::string> SupportedVersions(const KubeletPlugin& p) {
  auto channel =
      grpc::CreateChannel("unix:" + p.registration_socket(), grpc::InsecureChannelCredentials());
  auto stub = ::pluginregistration::Registration::NewStub(channel);
  grpc::ClientContext ctx;
  ::pluginregistration::PluginInfo info;
  EXPECT_TRUE(stub->GetInfo(&ctx, ::pluginregistration::InfoRequest(), &info).ok());
  return {info.supported_versions().begin(), info.supported_versions().end()};
}

// Both health versions from one implementation: the board's list in full on open, each device
// with the explicit timeout, and a change on the board sent at once (not at the interval).
template <typename Api>
void WatchBoth(const std::string& socket, health::Board* board) {
  SCOPED_TRACE(Api::kVersion);
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = Api::Service::NewStub(channel);
  grpc::ClientContext ctx;
  auto reader = stub->NodeWatchResources(&ctx, typename Api::Request());
  typename Api::Response r;
  ASSERT_TRUE(reader->Read(&r));
  ASSERT_EQ(r.devices_size(), 2);
  EXPECT_EQ(r.devices(0).device().pool_name(), "node1");
  EXPECT_EQ(r.devices(0).device().device_name(), "cpudev000");
  EXPECT_EQ(r.devices(0).health(), Api::kHealthy);
  EXPECT_EQ(r.devices(0).health_check_timeout_seconds(), 30);
  EXPECT_GT(r.devices(0).last_updated_time(), 0);
  EXPECT_EQ(r.devices(1).health(), Api::kUnhealthy);
  EXPECT_EQ(r.devices(1).message(), "CPU 1 is offline");

  board->Set({{"node1", "cpudev000", true, "CPU 0 online"},
              {"node1", "cpudev001", true, std::string(2000, 'x')}});
  ASSERT_TRUE(reader->Read(&r));  // the interval is 60 s: this is the change
  EXPECT_EQ(r.devices(1).health(), Api::kHealthy);
  EXPECT_EQ(r.devices(1).message().size(), 1024u);
  board->Set({{"node1", "cpudev000", true, "CPU 0 online"},
              {"node1", "cpudev001", false, "CPU 1 is offline"}});
  ctx.TryCancel();
  while (reader->Read(&r)) {
  }
}

TEST_F(KubeletPluginTest, ServesHealthV1AndV1alpha1FromTheBoard) {
  health::Board board;
  board.Set({{"node1", "cpudev000", true, "CPU 0 online"},
             {"node1", "cpudev001", false, "CPU 1 is offline"}});
  PluginOptions opts;
  opts.driver = "dra.cpu";
  opts.kubelet_root = dir_;
  opts.health_interval = absl::Seconds(60);
  opts.health_board = &board;
  absl::StatusOr<std::unique_ptr<KubeletPlugin>> plugin =
      KubeletPlugin::Start(opts, service_.get());
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ(SupportedVersions(**plugin),
            (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                                      "v1alpha1.DRAResourceHealth"}));
  WatchBoth<proto::HealthV1>((*plugin)->dra_socket(), &board);
  WatchBoth<proto::HealthV1alpha1>((*plugin)->dra_socket(), &board);
  (*plugin)->Stop();
  // The board outlives the plugin: a change after Stop reaches nobody.
  board.Set({});
}

TEST_F(KubeletPluginTest, HealthOffAdvertisesNeitherAndAnswersUnimplemented) {
  PluginOptions opts;
  opts.driver = "dra.cpu";
  opts.kubelet_root = dir_;
  opts.health = false;
  absl::StatusOr<std::unique_ptr<KubeletPlugin>> plugin =
      KubeletPlugin::Start(opts, service_.get());
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ(SupportedVersions(**plugin),
            (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin"}));
  auto channel =
      grpc::CreateChannel("unix:" + (*plugin)->dra_socket(), grpc::InsecureChannelCredentials());
  for (int v = 0; v < 2; ++v) {
    grpc::ClientContext ctx;
    grpc::Status st;
    if (v == 0) {
      auto reader = ::v1::DRAResourceHealth::NewStub(channel)->NodeWatchResources(
          &ctx, ::v1::NodeWatchResourcesRequest());
      ::v1::NodeWatchResourcesResponse r;
      EXPECT_FALSE(reader->Read(&r));
      st = reader->Finish();
    } else {
      auto reader = ::v1alpha1::DRAResourceHealth::NewStub(channel)->NodeWatchResources(
          &ctx, ::v1alpha1::NodeWatchResourcesRequest());
      ::v1alpha1::NodeWatchResourcesResponse r;
      EXPECT_FALSE(reader->Read(&r));
      st = reader->Finish();
    }
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED) << v;
  }
}

}  // namespace
}  // namespace topodra::plugin
