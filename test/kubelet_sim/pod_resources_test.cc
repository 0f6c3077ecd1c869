// The daemon's PodResources client (driver/plugin/pod_resources.h) against the simulator
// (test/kubelet_sim/pod_resources_sim.h) over a real Unix socket: what List returns and in which
// order, how the simulator groups entries on the wire, errors of the kubelet, a missing or hanging
// kubelet, responses above gRPC's default size limit, and kubelet restarts on the same path.
#include "driver/plugin/pod_resources.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/podresources/v1/api.grpc.pb.h"
#include "test/kubelet_sim/grpc_util.h"
#include "test/kubelet_sim/pod_resources_sim.h"

namespace topodra::plugin {
// For readable failure output of the matchers below.
void PrintTo(const AssignedDevices& a, std::ostream* os) {
  *os << "{" << a.pod_namespace << "/" << a.pod_name << " " << a.container << " " << a.resource
      << " [" << absl::StrJoin(a.device_ids, ",") << "]}";
}
}  // namespace topodra::plugin

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::topodra::plugin::AssignedDevices;
using ::topodra::plugin::NewPodResourcesClient;
using ::topodra::plugin::PodResourcesLister;
using ::topodra::testing::PodResourcesSimulator;
using Entry = PodResourcesSimulator::Entry;

namespace podres = ::v1;

// Far longer than any answer over a local socket takes: a test that waits for it has failed.
constexpr absl::Duration kTimeout = absl::Seconds(10);

constexpr char kGpu[] = "example.com/gpu";
constexpr char kNic[] = "example.com/nic";

// Entries out of kubelet order on purpose: repeated (pod, container, resource) triples and a
// pod name that exists in two namespaces.
std::vector<Entry> SampleEntries() {
  return {
      {"default", "train-0", "worker", kGpu, {"gpu-0", "gpu-1"}},
      {"default", "train-0", "worker", kNic, {"nic-3"}},
      {"default", "train-0", "sidecar", kGpu, {"gpu-2"}},
      {"ml", "infer-7", "main", kGpu, {"gpu-3"}},
      {"default", "train-0", "worker", kGpu, {"gpu-5"}},
      {"other", "train-0", "main", kGpu, {"gpu-4"}},
  };
}

class PodResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/prs.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    socket_ = root_ + "/pod-resources/kubelet.sock";  // the directory is made by the simulator
    StartSim();
  }

  void TearDown() override {
    sim_.reset();
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  void StartSim() {
    absl::StatusOr<std::unique_ptr<PodResourcesSimulator>> sim =
        PodResourcesSimulator::Start(socket_);
    ASSERT_TRUE(sim.ok()) << sim.status();
    sim_ = std::move(*sim);
  }

  std::string root_, socket_;
  std::unique_ptr<PodResourcesSimulator> sim_;
};

TEST_F(PodResourcesTest, ListsEveryAssignmentInKubeletOrder) {
  sim_->Set(SampleEntries());
  std::unique_ptr<PodResourcesLister> client = NewPodResourcesClient(socket_, kTimeout);
  absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(
      *got, ElementsAre(
                AssignedDevices{"default", "train-0", "worker", kGpu, {"gpu-0", "gpu-1", "gpu-5"}},
                AssignedDevices{"default", "train-0", "worker", kNic, {"nic-3"}},
                AssignedDevices{"default", "train-0", "sidecar", kGpu, {"gpu-2"}},
                AssignedDevices{"ml", "infer-7", "main", kGpu, {"gpu-3"}},
                AssignedDevices{"other", "train-0", "main", kGpu, {"gpu-4"}}));
  EXPECT_EQ(sim_->list_calls(), 1);

  // Each call asks again; nothing is cached.
  sim_->Set({{"ml", "infer-7", "main", kNic, {"nic-0"}}});
  got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ElementsAre(AssignedDevices{"ml", "infer-7", "main", kNic, {"nic-0"}}));
  EXPECT_EQ(sim_->list_calls(), 2);
}

// The wire format as a kubelet sends it, seen by a plain gRPC client of our proto.
TEST_F(PodResourcesTest, SimulatorGroupsLikeTheKubelet) {
  sim_->Set(SampleEntries());
  auto stub = podres::PodResourcesLister::NewStub(topodra::testing::sim::Dial(socket_));
  grpc::ClientContext ctx;
  ctx.set_deadline(topodra::testing::sim::Deadline(kTimeout));
  podres::ListPodResourcesResponse r;
  grpc::Status s = stub->List(&ctx, podres::ListPodResourcesRequest(), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();

  ASSERT_EQ(r.pod_resources_size(), 3);
  const podres::PodResources& train = r.pod_resources(0);
  EXPECT_EQ(train.namespace_(), "default");
  EXPECT_EQ(train.name(), "train-0");
  ASSERT_EQ(train.containers_size(), 2);
  EXPECT_EQ(train.containers(0).name(), "worker");
  ASSERT_EQ(train.containers(0).devices_size(), 2);
  EXPECT_EQ(train.containers(0).devices(0).resource_name(), kGpu);
  EXPECT_THAT(train.containers(0).devices(0).device_ids(), ElementsAre("gpu-0", "gpu-1", "gpu-5"));
  EXPECT_EQ(train.containers(0).devices(1).resource_name(), kNic);
  EXPECT_THAT(train.containers(0).devices(1).device_ids(), ElementsAre("nic-3"));
  EXPECT_EQ(train.containers(1).name(), "sidecar");
  ASSERT_EQ(train.containers(1).devices_size(), 1);
  EXPECT_THAT(train.containers(1).devices(0).device_ids(), ElementsAre("gpu-2"));
  // Nothing the simulator does not model is filled in.
  EXPECT_THAT(train.containers(0).cpu_ids(), IsEmpty());
  EXPECT_THAT(train.containers(0).dynamic_resources(), IsEmpty());
  EXPECT_FALSE(train.containers(0).devices(0).has_topology());

  EXPECT_EQ(r.pod_resources(1).namespace_(), "ml");
  EXPECT_EQ(r.pod_resources(1).name(), "infer-7");
  ASSERT_EQ(r.pod_resources(1).containers_size(), 1);
  EXPECT_EQ(r.pod_resources(2).namespace_(), "other");
  EXPECT_EQ(r.pod_resources(2).name(), "train-0");
  ASSERT_EQ(r.pod_resources(2).containers_size(), 1);
  EXPECT_THAT(r.pod_resources(2).containers(0).devices(0).device_ids(), ElementsAre("gpu-4"));
}

TEST_F(PodResourcesTest, EmptyList) {
  std::unique_ptr<PodResourcesLister> client = NewPodResourcesClient(socket_, kTimeout);
  absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, IsEmpty());

  sim_->Set(SampleEntries());
  got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 5u);

  sim_->Set({});
  got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, IsEmpty());
  EXPECT_EQ(sim_->list_calls(), 3);
}

TEST_F(PodResourcesTest, ResourceWithoutDevicesIsLeftOut) {
  sim_->Set({{"default", "a", "main", kGpu, {}}, {"default", "a", "main", kNic, {"nic-1"}}});
  std::unique_ptr<PodResourcesLister> client = NewPodResourcesClient(socket_, kTimeout);
  absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ElementsAre(AssignedDevices{"default", "a", "main", kNic, {"nic-1"}}));
}

TEST_F(PodResourcesTest, KubeletErrorKeepsItsCodeAndNamesTheSocket) {
  sim_->Set(SampleEntries());
  std::unique_ptr<PodResourcesLister> client = NewPodResourcesClient(socket_, kTimeout);

  sim_->FailWith(absl::InternalError("checkpoint is corrupted"));
  absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInternal) << got.status();
  EXPECT_EQ(got.status().message(),
            absl::StrCat("pod resources List on \"", socket_, "\": checkpoint is corrupted"));

  // What the kubelet's rate limiter answers.
  sim_->FailWith(absl::ResourceExhaustedError("rejected by rate limit"));
  got = client->List();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("rejected by rate limit"));

  sim_->FailWith(absl::OkStatus());
  got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 5u);
  EXPECT_EQ(sim_->list_calls(), 3);
}

// Unavailable at once, not after the timeout: "cannot reach" is the connect failure, the timeout
// has a message of its own (next test).
TEST_F(PodResourcesTest, MissingSocketIsUnavailableAndNamesThePath) {
  const std::string missing = root_ + "/elsewhere/kubelet.sock";
  std::unique_ptr<PodResourcesLister> client = NewPodResourcesClient(missing, kTimeout);
  absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(absl::StrCat("pod resources List on \"", missing,
                                                             "\": cannot reach the kubelet")));
  EXPECT_EQ(sim_->list_calls(), 0);
}

TEST_F(PodResourcesTest, HangingKubeletIsUnavailableAfterTheTimeout) {
  sim_->Set(SampleEntries());
  sim_->StallListBy(absl::Seconds(60));
  std::unique_ptr<PodResourcesLister> client =
      NewPodResourcesClient(socket_, absl::Milliseconds(200));
  absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_EQ(got.status().message(), absl::StrCat("pod resources List on \"", socket_,
                                                 "\": the kubelet did not answer within 200ms"));

  sim_->StallListBy(absl::ZeroDuration());
  got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 5u);
}

// Above gRPC's default receive limit of 4 MiB.
TEST_F(PodResourcesTest, LargeResponse) {
  std::vector<std::string> ids;
  ids.reserve(60000);
  for (int i = 0; i < 60000; ++i)
    ids.push_back(absl::StrCat("device-", i, "-", std::string(90, 'x')));
  sim_->Set({{"default", "big", "main", kGpu, ids}});
  std::unique_ptr<PodResourcesLister> client = NewPodResourcesClient(socket_, kTimeout);
  absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].device_ids, ids);
}

TEST_F(PodResourcesTest, KubeletRestartAfterAFailedCall) {
  sim_->Set({{"default", "a", "main", kGpu, {"gpu-0"}}});
  std::unique_ptr<PodResourcesLister> client = NewPodResourcesClient(socket_, kTimeout);
  ASSERT_TRUE(client->List().ok());

  sim_->Stop();
  EXPECT_FALSE(std::filesystem::exists(socket_));
  absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(socket_));

  StartSim();
  sim_->Set({{"default", "b", "main", kGpu, {"gpu-1"}}});
  got = client->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(*got, ElementsAre(AssignedDevices{"default", "b", "main", kGpu, {"gpu-1"}}));
  EXPECT_EQ(sim_->list_calls(), 1);
}

// The restart falls between two polls: the first call after it already gets an answer.
TEST_F(PodResourcesTest, KubeletRestartBetweenCalls) {
  std::unique_ptr<PodResourcesLister> client = NewPodResourcesClient(socket_, kTimeout);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("restart ", round));
    const std::string pod = absl::StrCat("pod-", round);
    sim_->Set({{"default", pod, "main", kGpu, {"gpu-0"}}});
    absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_THAT(*got, ElementsAre(AssignedDevices{"default", pod, "main", kGpu, {"gpu-0"}}));
    sim_.reset();
    StartSim();
  }
}

TEST_F(PodResourcesTest, ConcurrentCalls) {
  sim_->Set(SampleEntries());
  std::unique_ptr<PodResourcesLister> client = NewPodResourcesClient(socket_, kTimeout);
  constexpr int kThreads = 8, kCalls = 20;
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        absl::StatusOr<std::vector<AssignedDevices>> got = client->List();
        if (got.ok() && got->size() == 5) ++ok[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(ok, ::testing::Each(kCalls));
  EXPECT_EQ(sim_->list_calls(), kThreads * kCalls);
}

TEST_F(PodResourcesTest, TooLongSocketPath) {
  const std::string path = "/tmp/" + std::string(120, 'p') + "/kubelet.sock";
  absl::StatusOr<std::vector<AssignedDevices>> got = NewPodResourcesClient(path, kTimeout)->List();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(path));
}

TEST_F(PodResourcesTest, SimulatorReplacesAStaleSocketButNotAFile) {
  // A socket file nobody listens on, as a crashed kubelet leaves it.
  const std::string stale = root_ + "/stale/kubelet.sock";
  std::filesystem::create_directories(root_ + "/stale");
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, stale.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
  ASSERT_TRUE(std::filesystem::is_socket(stale));

  absl::StatusOr<std::unique_ptr<PodResourcesSimulator>> sim = PodResourcesSimulator::Start(stale);
  ASSERT_TRUE(sim.ok()) << sim.status();
  (*sim)->Set({{"default", "a", "main", kGpu, {"gpu-0"}}});
  absl::StatusOr<std::vector<AssignedDevices>> got = NewPodResourcesClient(stale, kTimeout)->List();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 1u);
  (*sim)->Stop();
  EXPECT_FALSE(std::filesystem::exists(stale));

  const std::string file = root_ + "/file/kubelet.sock";
  std::filesystem::create_directories(root_ + "/file");
  std::ofstream(file) << "not a socket";
  sim = PodResourcesSimulator::Start(file);
  ASSERT_FALSE(sim.ok());
  EXPECT_EQ(sim.status().code(), absl::StatusCode::kFailedPrecondition) << sim.status();
  EXPECT_THAT(sim.status().message(), HasSubstr(file));
  EXPECT_TRUE(std::filesystem::is_regular_file(file));
}

}  // namespace
