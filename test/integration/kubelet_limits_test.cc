// What the kubelet sends and how long it waits, against the real daemon over its real socket
// (issue 15 items 3, 8 and 11): identifiers beyond the API's limits, a repeated prepare whose CDI
// file is gone, claims whose GET the API server does not answer, a caller that gives up.
// Timings are printed, never asserted.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "proto/dra_api.h"
#include "test/integration/node_fixture.h"

namespace topodra::testing {
namespace {

namespace dra = ::k8s::io::kubelet::pkg::apis::dra::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class KubeletLimitsTest : public NodeTest {
 protected:
  std::unique_ptr<dra::DRAPlugin::Stub> Stub() {
    return dra::DRAPlugin::NewStub(
        grpc::CreateChannel("unix:" + dirs_.kubelet_root + "/plugins/dra.cpu/dra.sock",
                            grpc::InsecureChannelCredentials()));
  }

  static dra::NodePrepareResourcesRequest Request(const std::vector<PrepareClaim>& claims) {
    dra::NodePrepareResourcesRequest request;
    for (const PrepareClaim& c : claims) {
      dra::Claim* claim = request.add_claims();
      claim->set_namespace_(c.ns);
      claim->set_uid(c.uid);
      claim->set_name(c.name);
    }
    return request;
  }

  size_t LongestLogLine() const {
    size_t longest = 0;
    for (absl::string_view line : absl::StrSplit(daemon_.Log(), '\n')) {
      longest = std::max(longest, line.size());
    }
    return longest;
  }

  // How many claim GETs (of namespace "default") reached the fake API server: the hang rule
  // `rule` counts them as they arrive.
  int ClaimGets(int rule = 0) {
    absl::StatusOr<std::string> rules = server_->Control("GET", "/__control/hang");
    EXPECT_TRUE(rules.ok()) << rules.status();
    if (!rules.ok()) return -1;
    return json::parse(*rules)[rule]["matched"].get<int>();
  }
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Item 3: a 1 MB claim name fails that claim alone, with a short message, and no log line of
// the daemon carries the name.
TEST_F(KubeletLimitsTest, AMegabyteClaimNameFailsThatClaimAloneAndTheLogStaysSmall) {
  StartNode();
  const PrepareClaim good = CpuClaim("good", "cpudevnuma000", "2");
  const PrepareClaim huge{"default", "0b6f4f2e-9a43-4c2d-8e4f-5a6b7c8d9e0f",
                          std::string(1 << 20, 'a')};
  auto got = sim_->Prepare(kCpu, {good, huge});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[good.uid].error, "");
  EXPECT_EQ((*got)[good.uid].devices.size(), 1u);
  const std::string& error = (*got)[huge.uid].error;
  EXPECT_THAT(error, StartsWith(absl::StrCat("claim default/\"", std::string(64, 'a'),
                                             "...\" (1048576 bytes) uid \"", huge.uid,
                                             "\": refused: name \"")));
  EXPECT_THAT(error, HasSubstr("is longer than 253 characters, the limit of a ResourceClaim name "
                               "(a DNS-1123 subdomain)"));
  EXPECT_LT(error.size(), 500u);
  EXPECT_TRUE((*got)[huge.uid].devices.empty());

  auto un = sim_->Unprepare(kCpu, {huge, good});
  ASSERT_TRUE(un.ok()) << un.status();
  EXPECT_THAT((*un)[huge.uid], HasSubstr("(1048576 bytes) is longer than 253 characters"));
  EXPECT_LT((*un)[huge.uid].size(), 500u);
  EXPECT_EQ((*un)[good.uid], "");

  const size_t longest = LongestLogLine();
  std::printf("longest daemon log line: %zu bytes; error answered: %zu bytes\n", longest,
              error.size());
  EXPECT_LT(longest, 2000u);
  EXPECT_THAT(daemon_.Log(), HasSubstr("(1048576 bytes) is longer than 253 characters"));
}

// Item 8: a repeated prepare puts back the CDI file of a prepared claim before answering.
TEST_F(KubeletLimitsTest, RepeatedPrepareWritesTheDeletedCdiFileAgain) {
  StartNode();
  const PrepareClaim c = CpuClaim("again", "cpudevnuma001", "2");
  const ClaimResult first = PrepareOne(c);
  ASSERT_EQ(first.error, "");
  const std::string written = ReadFile(CdiPath(c.uid));
  ASSERT_FALSE(written.empty());
  ASSERT_TRUE(fs::remove(CdiPath(c.uid)));
  const ClaimResult again = PrepareOne(c);
  EXPECT_EQ(again.error, "");
  ASSERT_EQ(again.devices.size(), 1u);
  EXPECT_EQ(again.devices[0].cdi_device_ids, first.devices[0].cdi_device_ids);
  ASSERT_TRUE(fs::exists(CdiPath(c.uid)));
  EXPECT_EQ(json::parse(ReadFile(CdiPath(c.uid))), json::parse(written));
  EXPECT_THAT(daemon_.Log(), HasSubstr("already prepared; restored its CDI spec " + CdiPath(c.uid) +
                                       " (it was missing)"));
}

// Item 11: five claims whose GET the API server never answers, beside five good ones, in one call
// with a 15 s deadline: the call answers in time, the good claims prepared, each stuck claim
// failed alone with a message naming the timeout.
TEST_F(KubeletLimitsTest, FiveHangingClaimsFailAloneWithinTheCallersDeadline) {
  StartNode();
  std::vector<PrepareClaim> claims;
  for (int i = 0; i < 5; ++i) {
    claims.push_back(CpuClaim(absl::StrCat("good-", i), "cpudevnuma000", "1"));
    claims.push_back(CpuClaim(absl::StrCat("stuck-", i), "cpudevnuma001", "1"));
  }
  ASSERT_TRUE(
      server_->Control("POST", "/__control/hang?method=GET&path=/resourceclaims/stuck-").ok());
  auto stub = Stub();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  dra::NodePrepareResourcesResponse response;
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status status = stub->NodePrepareResources(&ctx, Request(claims), &response);
  std::printf("a call of 5 good and 5 hanging claims with a 15 s deadline answered after %.2f s\n",
              SecondsSince(start));
  (void)server_->Control("DELETE", "/__control/hang");
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  ASSERT_EQ(response.claims_size(), 10);
  for (int i = 0; i < 5; ++i) {
    const PrepareClaim& good = claims[2 * i];
    const PrepareClaim& stuck = claims[2 * i + 1];
    EXPECT_EQ(response.claims().at(good.uid).error(), "") << good.name;
    EXPECT_EQ(response.claims().at(good.uid).devices_size(), 1) << good.name;
    EXPECT_THAT(response.claims().at(stuck.uid).error(),
                StartsWith(absl::StrCat("claim default/", stuck.name,
                                        ": get ResourceClaim: no answer within 10s (the "
                                        "per-request timeout); the other claims of the call go "
                                        "on: GET /apis/resource.k8s.io/v1/namespaces/default/"
                                        "resourceclaims/",
                                        stuck.name, ": ")));
    EXPECT_EQ(response.claims().at(stuck.uid).devices_size(), 0) << stuck.name;
  }
}

// Item 11: a call of many claims whose caller cancels after 2 s: the daemon stops asking the API
// server for them at once.
TEST_F(KubeletLimitsTest, ACancelledCallStopsQueryingTheApiServer) {
  StartNode();
  // Every claim GET takes 200 ms; the claims do not exist (404), which is as good as any answer
  // for counting.
  ASSERT_TRUE(server_
                  ->Control("POST",
                            "/__control/hang?method=GET&seconds=0.2&path=/namespaces/default/"
                            "resourceclaims/")
                  .ok());
  std::vector<PrepareClaim> claims;
  for (int i = 0; i < 2000; ++i) {
    claims.push_back({"default", absl::StrCat("uid-", i), absl::StrCat("claim-", i)});
  }
  auto stub = Stub();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    ctx.TryCancel();
  });
  dra::NodePrepareResourcesResponse response;
  const grpc::Status status = stub->NodePrepareResources(&ctx, Request(claims), &response);
  canceller.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
  const auto cancelled = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int after_1s = ClaimGets();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int after_3s = ClaimGets();
  std::printf("claim GETs: %d 1 s after the cancel, %d 3 s after (%.2f s)\n", after_1s, after_3s,
              SecondsSince(cancelled));
  EXPECT_GT(after_1s, 0);
  EXPECT_LT(after_1s, 2000);
  EXPECT_EQ(after_3s, after_1s);
  (void)server_->Control("DELETE", "/__control/hang");
  EXPECT_THAT(daemon_.Log(), HasSubstr("claims of a prepare call were not prepared after"));
}

// Issue 19: a call of one claim fetches it on the gRPC thread; the kubelet cancelling it still
// abandons the GET at once (gRPC's IsCancelled polled by the GET itself), not after the GET's own
// 10 s timeout.
TEST_F(KubeletLimitsTest, ACancelledCallOfOneClaimAbandonsItsGet) {
  StartNode();
  ASSERT_TRUE(server_
                  ->Control("POST",
                            "/__control/hang?method=GET&seconds=30&path=/namespaces/default/"
                            "resourceclaims/lone")
                  .ok());
  auto stub = Stub();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    ctx.TryCancel();
  });
  dra::NodePrepareResourcesResponse response;
  const grpc::Status status =
      stub->NodePrepareResources(&ctx, Request({{"default", "uid-lone", "lone"}}), &response);
  canceller.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
  const auto cancelled = std::chrono::steady_clock::now();
  // Well inside the GET's 10 s timeout, after which it would end anyway.
  bool gave_up = false;
  for (int i = 0; i < 50 && !gave_up; ++i) {
    gave_up =
        absl::StrContains(daemon_.Log(), "1 of 1 claims of a prepare call were not prepared after");
    if (!gave_up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("the daemon gave the claim up %.2f s after the cancel\n", SecondsSince(cancelled));
  EXPECT_TRUE(gave_up) << daemon_.Log();
  EXPECT_THAT(daemon_.Log(), HasSubstr("the caller cancelled the call"));
  EXPECT_THAT(daemon_.Log(), ::testing::Not(HasSubstr("no answer within")));
  (void)server_->Control("DELETE", "/__control/hang");
}

}  // namespace
}  // namespace topodra::testing
