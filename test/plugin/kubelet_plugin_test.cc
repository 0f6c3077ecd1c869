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
#include "proto/drahealth/v1alpha1/api.grpc.pb.h"
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

}  // namespace
}  // namespace topodra::plugin
