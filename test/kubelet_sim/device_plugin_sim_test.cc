// The device-plugin simulator against a fake device plugin served in-process over Unix sockets:
// registration and its validation, options, ListAndWatch updates and stream end, the allocation
// calls with all response fields, replacement by a second registration, and the kubelet restart.
#include "test/kubelet_sim/device_plugin_sim.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "proto/deviceplugin/v1beta1/api.grpc.pb.h"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::topodra::testing::DevicePluginSimOptions;
using ::topodra::testing::DevicePluginSimulator;
using ::topodra::testing::PluginDevice;
using ::topodra::testing::RegisteredResource;

namespace dp = ::v1beta1;

constexpr char kResource[] = "example.com/fake";
constexpr absl::Duration kWait = absl::Seconds(3);  // generous; registration takes a few ms

std::chrono::system_clock::time_point In(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

dp::Device Dev(const std::string& id, const std::string& health,
               const std::vector<int64_t>& numa = {}) {
  dp::Device d;
  d.set_id(id);
  d.set_health(health);
  for (int64_t n : numa) d.mutable_topology()->add_nodes()->set_id(n);
  return d;
}

bool IsSocket(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// What a device plugin watches to notice a kubelet restart: "+name" for a created file, "-name"
// for a deleted one, in order.
std::vector<std::string> ReadEvents(int fd) {
  std::vector<std::string> out;
  alignas(struct inotify_event) char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return out;
    for (char* p = buf; p < buf + n;) {
      const auto* ev = reinterpret_cast<const struct inotify_event*>(p);
      p += sizeof(struct inotify_event) + ev->len;
      if (ev->len == 0) continue;
      if (ev->mask & IN_CREATE) out.push_back(absl::StrCat("+", ev->name));
      if (ev->mask & IN_DELETE) out.push_back(absl::StrCat("-", ev->name));
    }
  }
}

// A device plugin: serves v1beta1.DevicePlugin on <dir>/<socket>, registers on kubelet.sock,
// pushes device lists on demand and answers the allocation calls by echoing the request.
class FakeDevicePlugin final : public dp::DevicePlugin::Service {
 public:
  FakeDevicePlugin(std::string dir, std::string socket, bool preferred, bool pre_start,
                   std::vector<dp::Device> devices)
      : dir_(std::move(dir)), socket_(std::move(socket)), devices_(std::move(devices)) {
    options_.set_get_preferred_allocation_available(preferred);
    options_.set_pre_start_required(pre_start);
  }
  ~FakeDevicePlugin() override { Stop(); }

  std::string socket_path() const { return absl::StrCat(dir_, "/", socket_); }

  void Serve() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("unix:", socket_path()),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr) << "cannot serve on " << socket_path();
  }

  void Stop() {
    if (server_ == nullptr) return;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      cv_.SignalAll();
    }
    server_->Shutdown(In(absl::Milliseconds(500)));
    server_->Wait();
    server_.reset();
  }

  grpc::Status Register(const std::string& resource, const std::string& version = "v1beta1") {
    auto channel = grpc::CreateChannel(absl::StrCat("unix:", dir_, "/kubelet.sock"),
                                       grpc::InsecureChannelCredentials());
    dp::RegisterRequest req;
    req.set_version(version);
    req.set_endpoint(socket_);
    req.set_resource_name(resource);
    *req.mutable_options() = options_;
    dp::Empty resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    ctx.set_wait_for_ready(true);
    return dp::Registration::NewStub(channel)->Register(&ctx, req, &resp);
  }

  void SetDevices(std::vector<dp::Device> devices) {
    absl::MutexLock lock(&mu_);
    devices_ = std::move(devices);
    ++list_version_;
    cv_.SignalAll();
  }
  // Ends every open ListAndWatch stream with OK, as a plugin that stops streaming.
  void EndStreams() {
    absl::MutexLock lock(&mu_);
    end_streams_ = true;
    cv_.SignalAll();
  }
  void set_empty_allocate(bool v) {
    absl::MutexLock lock(&mu_);
    empty_allocate_ = v;
  }

  int options_calls() const {
    absl::MutexLock lock(&mu_);
    return options_calls_;
  }
  int list_and_watch_calls() const {
    absl::MutexLock lock(&mu_);
    return list_and_watch_calls_;
  }
  int active_streams() const {
    absl::MutexLock lock(&mu_);
    return active_streams_;
  }
  bool WaitForActiveStreams(int n, absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    while (active_streams_ != n) {
      if (absl::Now() >= deadline) return false;
      cv_.WaitWithDeadline(&mu_, deadline);
    }
    return true;
  }
  dp::ContainerPreferredAllocationRequest last_preferred_request() const {
    absl::MutexLock lock(&mu_);
    return last_preferred_;
  }
  std::vector<std::string> last_pre_start() const {
    absl::MutexLock lock(&mu_);
    return last_pre_start_;
  }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const dp::Empty*,
                                      dp::DevicePluginOptions* resp) override {
    absl::MutexLock lock(&mu_);
    ++options_calls_;
    *resp = options_;
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const dp::Empty*,
                            grpc::ServerWriter<dp::ListAndWatchResponse>* writer) override {
    absl::MutexLock lock(&mu_);
    ++list_and_watch_calls_;
    ++active_streams_;
    cv_.SignalAll();
    int sent = -1;
    while (!stopping_ && !end_streams_ && !ctx->IsCancelled()) {
      if (sent != list_version_) {
        dp::ListAndWatchResponse msg;
        for (const dp::Device& d : devices_) *msg.add_devices() = d;
        sent = list_version_;
        mu_.Unlock();
        const bool ok = writer->Write(msg);
        mu_.Lock();
        if (!ok) break;
        continue;
      }
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(20));  // also polls IsCancelled
    }
    --active_streams_;
    cv_.SignalAll();
    return grpc::Status::OK;
  }

  // must_include first, then the other available devices, up to the size.
  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const dp::PreferredAllocationRequest* req,
                                      dp::PreferredAllocationResponse* resp) override {
    absl::MutexLock lock(&mu_);
    for (const auto& c : req->container_requests()) {
      last_preferred_ = c;
      auto* out = resp->add_container_responses();
      std::vector<std::string> chosen(c.must_include_deviceids().begin(),
                                      c.must_include_deviceids().end());
      for (const std::string& id : c.available_deviceids()) {
        if (static_cast<int>(chosen.size()) >= c.allocation_size()) break;
        if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
      }
      for (const std::string& id : chosen) out->add_deviceids(id);
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const dp::AllocateRequest* req,
                        dp::AllocateResponse* resp) override {
    absl::MutexLock lock(&mu_);
    if (empty_allocate_) return grpc::Status::OK;
    for (const auto& c : req->container_requests()) {
      auto* r = resp->add_container_responses();
      const std::string ids = absl::StrJoin(c.devices_ids(), ",");
      (*r->mutable_envs())["FAKE_DEVICES"] = ids;
      (*r->mutable_envs())["FAKE_COUNT"] = absl::StrCat(c.devices_ids_size());
      (*r->mutable_annotations())["example.com/devices"] = ids;
      for (const std::string& id : c.devices_ids()) {
        auto* d = r->add_devices();
        d->set_container_path(absl::StrCat("/dev/fake-", id));
        d->set_host_path(absl::StrCat("/dev/fake-", id));
        d->set_permissions("rw");
        auto* m = r->add_mounts();
        m->set_container_path(absl::StrCat("/fake/", id));
        m->set_host_path(absl::StrCat("/var/lib/fake/", id));
        m->set_read_only(true);
        r->add_cdi_devices()->set_name(absl::StrCat("example.com/fake=", id));
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const dp::PreStartContainerRequest* req,
                                 dp::PreStartContainerResponse*) override {
    absl::MutexLock lock(&mu_);
    last_pre_start_.assign(req->devices_ids().begin(), req->devices_ids().end());
    return grpc::Status::OK;
  }

 private:
  const std::string dir_, socket_;
  dp::DevicePluginOptions options_;
  std::unique_ptr<grpc::Server> server_;

  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;
  std::vector<dp::Device> devices_ ABSL_GUARDED_BY(mu_);
  int list_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool end_streams_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool empty_allocate_ ABSL_GUARDED_BY(mu_) = false;
  int options_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int list_and_watch_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int active_streams_ ABSL_GUARDED_BY(mu_) = 0;
  dp::ContainerPreferredAllocationRequest last_preferred_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> last_pre_start_ ABSL_GUARDED_BY(mu_);
};

class DevicePluginSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dps.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/device-plugins";  // created by the simulator
    auto sim = DevicePluginSimulator::Start(DevicePluginSimOptions{dir_});
    ASSERT_TRUE(sim.ok()) << sim.status();
    sim_ = std::move(*sim);
  }

  void TearDown() override {
    if (HasFailure() && sim_ != nullptr) {
      for (const std::string& line : sim_->Log()) std::cerr << "sim: " << line << "\n";
    }
    plugins_.clear();
    sim_.reset();
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  FakeDevicePlugin* AddPlugin(const std::string& socket, bool preferred, bool pre_start,
                              std::vector<dp::Device> devices) {
    plugins_.push_back(
        std::make_unique<FakeDevicePlugin>(dir_, socket, preferred, pre_start, std::move(devices)));
    plugins_.back()->Serve();
    return plugins_.back().get();
  }

  std::string root_, dir_;
  std::unique_ptr<DevicePluginSimulator> sim_;
  std::vector<std::unique_ptr<FakeDevicePlugin>> plugins_;  // destroyed before sim_
};

auto SizeIs(size_t n) {
  return [n](const std::vector<PluginDevice>& d) { return d.size() == n; };
}

TEST_F(DevicePluginSimTest, RegistrationReadsOptionsAndFirstList) {
  EXPECT_TRUE(IsSocket(dir_ + "/kubelet.sock"));
  FakeDevicePlugin* plugin =
      AddPlugin("fake.sock", /*preferred=*/true, /*pre_start=*/true,
                {Dev("d0", "Healthy", {0}), Dev("d1", "Unhealthy", {1, 2}), Dev("d2", "Healthy")});
  ASSERT_TRUE(plugin->Register(kResource).ok());

  absl::StatusOr<RegisteredResource> r = sim_->WaitForResource(kResource, 1, kWait);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->resource_name, kResource);
  EXPECT_EQ(r->endpoint, "fake.sock");
  EXPECT_EQ(r->version, "v1beta1");
  EXPECT_TRUE(r->preferred_allocation_available);
  EXPECT_TRUE(r->pre_start_required);
  EXPECT_EQ(r->registrations, 1);
  EXPECT_TRUE(r->connected);
  EXPECT_FALSE(r->endpoint_gone);
  EXPECT_EQ(plugin->options_calls(), 1);

  absl::StatusOr<std::vector<PluginDevice>> devices =
      sim_->WaitForDevices(kResource, SizeIs(3), kWait);
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 3u);
  EXPECT_EQ((*devices)[0].id, "d0");
  EXPECT_EQ((*devices)[0].health, "Healthy");
  EXPECT_THAT((*devices)[0].numa_nodes, ElementsAre(0));
  EXPECT_EQ((*devices)[1].id, "d1");
  EXPECT_EQ((*devices)[1].health, "Unhealthy");
  EXPECT_THAT((*devices)[1].numa_nodes, ElementsAre(1, 2));
  EXPECT_EQ((*devices)[2].id, "d2");
  EXPECT_THAT((*devices)[2].numa_nodes, IsEmpty());

  std::optional<RegisteredResource> found = sim_->Find(kResource);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->list_updates, 1);
  EXPECT_GT(found->last_update, absl::Now() - kWait);
  EXPECT_EQ(plugin->list_and_watch_calls(), 1);
  EXPECT_FALSE(sim_->Find("example.com/other").has_value());
}

TEST_F(DevicePluginSimTest, ListUpdatesPropagate) {
  FakeDevicePlugin* plugin =
      AddPlugin("fake.sock", false, false, {Dev("d0", "Healthy", {0}), Dev("d1", "Healthy", {1})});
  ASSERT_TRUE(plugin->Register(kResource).ok());
  ASSERT_TRUE(sim_->WaitForDevices(kResource, SizeIs(2), kWait).ok());
  const RegisteredResource first = *sim_->Find(kResource);
  EXPECT_EQ(first.list_updates, 1);

  plugin->SetDevices({Dev("d0", "Unhealthy", {0}), Dev("d1", "Healthy", {1})});
  auto unhealthy = sim_->WaitForDevices(
      kResource,
      [](const std::vector<PluginDevice>& d) {
        return d.size() == 2 && d[0].health == "Unhealthy";
      },
      kWait);
  ASSERT_TRUE(unhealthy.ok()) << unhealthy.status();
  const RegisteredResource second = *sim_->Find(kResource);
  EXPECT_EQ(second.list_updates, 2);
  EXPECT_GT(second.last_update, first.last_update);

  plugin->SetDevices({});
  auto empty = sim_->WaitForDevices(kResource, SizeIs(0), kWait);
  ASSERT_TRUE(empty.ok()) << empty.status();
  const RegisteredResource third = *sim_->Find(kResource);
  EXPECT_EQ(third.list_updates, 3);
  EXPECT_GT(third.last_update, second.last_update);
  EXPECT_EQ(third.registrations, 1);
}

TEST_F(DevicePluginSimTest, WaitForDevicesTimesOutWithTheLatestList) {
  FakeDevicePlugin* plugin = AddPlugin("fake.sock", false, false, {Dev("d0", "Healthy")});
  ASSERT_TRUE(plugin->Register(kResource).ok());
  auto r = sim_->WaitForDevices(kResource, SizeIs(5), absl::Milliseconds(300));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("d0:Healthy"));
}

TEST_F(DevicePluginSimTest, PreferredAllocationAllocateAndPreStartRoundTrip) {
  FakeDevicePlugin* plugin = AddPlugin("fake.sock", /*preferred=*/true, /*pre_start=*/true,
                                       {Dev("d0", "Healthy"), Dev("d1", "Healthy")});
  ASSERT_TRUE(plugin->Register(kResource).ok());
  ASSERT_TRUE(sim_->WaitForResource(kResource, 1, kWait).ok());

  auto preferred = sim_->GetPreferredAllocation(kResource, {"d0", "d1", "d2", "d3"}, {"d2"}, 2);
  ASSERT_TRUE(preferred.ok()) << preferred.status();
  EXPECT_THAT(*preferred, ElementsAre("d2", "d0"));
  const dp::ContainerPreferredAllocationRequest req = plugin->last_preferred_request();
  EXPECT_THAT(req.available_deviceids(), ElementsAre("d0", "d1", "d2", "d3"));
  EXPECT_THAT(req.must_include_deviceids(), ElementsAre("d2"));
  EXPECT_EQ(req.allocation_size(), 2);

  auto alloc = sim_->Allocate(kResource, {{"d0", "d1"}, {"d2"}});
  ASSERT_TRUE(alloc.ok()) << alloc.status();
  ASSERT_EQ(alloc->size(), 2u);
  const auto& c0 = (*alloc)[0];
  EXPECT_THAT(c0.envs, ElementsAre(Pair("FAKE_COUNT", "2"), Pair("FAKE_DEVICES", "d0,d1")));
  EXPECT_THAT(c0.device_node_host_paths, ElementsAre("/dev/fake-d0", "/dev/fake-d1"));
  EXPECT_THAT(c0.cdi_devices, ElementsAre("example.com/fake=d0", "example.com/fake=d1"));
  EXPECT_THAT(c0.mounts_host_paths, ElementsAre("/var/lib/fake/d0", "/var/lib/fake/d1"));
  EXPECT_THAT(c0.annotations, ElementsAre(Pair("example.com/devices", "d0,d1")));
  const auto& c1 = (*alloc)[1];
  EXPECT_THAT(c1.envs, ElementsAre(Pair("FAKE_COUNT", "1"), Pair("FAKE_DEVICES", "d2")));
  EXPECT_THAT(c1.device_node_host_paths, ElementsAre("/dev/fake-d2"));
  EXPECT_THAT(c1.cdi_devices, ElementsAre("example.com/fake=d2"));
  EXPECT_THAT(c1.mounts_host_paths, ElementsAre("/var/lib/fake/d2"));
  EXPECT_THAT(c1.annotations, ElementsAre(Pair("example.com/devices", "d2")));

  ASSERT_TRUE(sim_->PreStartContainer(kResource, {"d1", "d0"}).ok());
  EXPECT_THAT(plugin->last_pre_start(), ElementsAre("d1", "d0"));

  // The kubelet's check: an empty response is an error.
  plugin->set_empty_allocate(true);
  auto empty = sim_->Allocate(kResource, {{"d0"}});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(empty.status().message(), HasSubstr("no containers return in allocation response"));
}

TEST_F(DevicePluginSimTest, CallsTheKubeletWouldNotMakeAreRefused) {
  FakeDevicePlugin* plugin =
      AddPlugin("fake.sock", /*preferred=*/false, /*pre_start=*/false, {Dev("d0", "Healthy")});
  ASSERT_TRUE(plugin->Register(kResource).ok());
  auto r = sim_->WaitForResource(kResource, 1, kWait);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->preferred_allocation_available);
  EXPECT_FALSE(r->pre_start_required);

  EXPECT_EQ(sim_->GetPreferredAllocation(kResource, {"d0"}, {}, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sim_->PreStartContainer(kResource, {"d0"}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(sim_->Allocate(kResource, {{"d0"}}).ok());
  EXPECT_EQ(sim_->Allocate("example.com/unknown", {{"d0"}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(DevicePluginSimTest, WrongVersionIsRejected) {
  FakeDevicePlugin* plugin = AddPlugin("fake.sock", false, false, {Dev("d0", "Healthy")});
  grpc::Status s = plugin->Register(kResource, "v1alpha2");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_THAT(s.error_message(), HasSubstr("\"v1alpha2\" is not supported by kubelet"));
  EXPECT_FALSE(sim_->Find(kResource).has_value());
  EXPECT_EQ(plugin->options_calls(), 0);
}

TEST_F(DevicePluginSimTest, InvalidResourceNamesAreRejected) {
  FakeDevicePlugin* plugin = AddPlugin("fake.sock", false, false, {Dev("d0", "Healthy")});
  for (const std::string name :
       {"gpu", "kubernetes.io/gpu", "sub.kubernetes.io/gpu", "requests.example.com/gpu",
        "Example.com/gpu", "example.com/", "/gpu", "example.com/-gpu", "a/b/c", ""}) {
    grpc::Status s = plugin->Register(name);
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_THAT(s.error_message(), HasSubstr("is invalid")) << name;
    EXPECT_FALSE(sim_->Find(name).has_value()) << name;
  }
  for (const std::string name : {"example.com/gpu", "vendor.example.com/gpu_0.a-b", "x/Y"}) {
    EXPECT_TRUE(plugin->Register(name).ok()) << name;
  }
}

TEST_F(DevicePluginSimTest, SecondRegisterReplacesTheFirst) {
  FakeDevicePlugin* a = AddPlugin("a.sock", false, false, {Dev("a0", "Healthy")});
  ASSERT_TRUE(a->Register(kResource).ok());
  ASSERT_TRUE(sim_->WaitForDevices(kResource, SizeIs(1), kWait).ok());
  ASSERT_TRUE(a->WaitForActiveStreams(1, kWait));

  FakeDevicePlugin* b =
      AddPlugin("b.sock", true, false, {Dev("b0", "Healthy"), Dev("b1", "Healthy")});
  ASSERT_TRUE(b->Register(kResource).ok());
  auto r = sim_->WaitForResource(kResource, 2, kWait);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint, "b.sock");
  EXPECT_EQ(r->registrations, 2);
  EXPECT_TRUE(r->preferred_allocation_available);
  ASSERT_TRUE(sim_->WaitForDevices(kResource, SizeIs(2), kWait).ok());
  // The old stream is closed by the kubelet, and its end does not mark the new endpoint gone.
  EXPECT_TRUE(a->WaitForActiveStreams(0, kWait));
  EXPECT_EQ(b->active_streams(), 1);
  const RegisteredResource now = *sim_->Find(kResource);
  EXPECT_TRUE(now.connected);
  EXPECT_FALSE(now.endpoint_gone);
  EXPECT_EQ(now.list_updates, 2);
  EXPECT_EQ(now.devices[0].id, "b0");
}

TEST_F(DevicePluginSimTest, EndedStreamMarksTheEndpointGone) {
  FakeDevicePlugin* plugin =
      AddPlugin("fake.sock", false, false, {Dev("d0", "Healthy"), Dev("d1", "Healthy")});
  ASSERT_TRUE(plugin->Register(kResource).ok());
  ASSERT_TRUE(sim_->WaitForDevices(kResource, SizeIs(2), kWait).ok());

  plugin->EndStreams();
  ASSERT_TRUE(sim_->WaitForEndpointGone(kResource, kWait));
  const RegisteredResource r = *sim_->Find(kResource);
  EXPECT_FALSE(r.connected);
  EXPECT_TRUE(r.endpoint_gone);
  EXPECT_THAT(r.error, HasSubstr("ListAndWatch ended"));
  EXPECT_EQ(r.devices.size(), 2u);  // the last list is kept
  EXPECT_EQ(r.list_updates, 1);
  auto alloc = sim_->Allocate(kResource, {{"d0"}});
  EXPECT_EQ(alloc.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(alloc.status().message(), HasSubstr("not connected"));
  // Not retried: the plugin must register again.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(plugin->list_and_watch_calls(), 1);
}

TEST_F(DevicePluginSimTest, StoppedPluginServerMarksTheEndpointGone) {
  FakeDevicePlugin* plugin = AddPlugin("fake.sock", false, false, {Dev("d0", "Healthy")});
  ASSERT_TRUE(plugin->Register(kResource).ok());
  ASSERT_TRUE(sim_->WaitForDevices(kResource, SizeIs(1), kWait).ok());
  plugin->Stop();
  ASSERT_TRUE(sim_->WaitForEndpointGone(kResource, kWait));
  EXPECT_THAT(sim_->Find(kResource)->error, HasSubstr("ListAndWatch ended"));
}

TEST_F(DevicePluginSimTest, RestartDeletesSocketsAndThePluginRegistersAgain) {
  const std::string kubelet_sock = dir_ + "/kubelet.sock";
  const std::string checkpoint = dir_ + "/kubelet_internal_checkpoint";
  std::ofstream(checkpoint) << "{}";
  ASSERT_TRUE(std::filesystem::create_directory(dir_ + "/subdir"));
  FakeDevicePlugin* plugin = AddPlugin("fake.sock", true, false, {Dev("d0", "Healthy")});
  ASSERT_TRUE(plugin->Register(kResource).ok());
  ASSERT_TRUE(sim_->WaitForDevices(kResource, SizeIs(1), kWait).ok());
  ASSERT_TRUE(plugin->WaitForActiveStreams(1, kWait));
  ASSERT_TRUE(IsSocket(plugin->socket_path()));
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_GE(inotify_add_watch(fd, dir_.c_str(), IN_CREATE | IN_DELETE), 0);

  ASSERT_TRUE(sim_->RestartKubelet().ok());
  // The plugin's signal: its socket is gone and kubelet.sock was created again (the inode number
  // may be reused, so the test looks at the events).
  const std::vector<std::string> events = ReadEvents(fd);
  close(fd);
  EXPECT_THAT(events, ::testing::Contains("-fake.sock"));
  EXPECT_THAT(events, ::testing::Contains("-kubelet.sock"));
  ASSERT_THAT(events, ::testing::Contains("+kubelet.sock"));
  EXPECT_EQ(events.back(), "+kubelet.sock");  // deleted first, created last
  EXPECT_FALSE(std::filesystem::exists(plugin->socket_path()));
  EXPECT_TRUE(IsSocket(kubelet_sock));
  EXPECT_TRUE(std::filesystem::is_regular_file(checkpoint));  // not a socket: kept
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/subdir"));
  EXPECT_TRUE(plugin->WaitForActiveStreams(0, kWait));  // the kubelet's stream ended
  RegisteredResource after = *sim_->Find(kResource);
  EXPECT_TRUE(after.endpoint_gone);
  EXPECT_FALSE(after.connected);
  EXPECT_EQ(after.error, "kubelet restarted");
  EXPECT_EQ(after.devices.size(), 1u);
  EXPECT_EQ(sim_->Allocate(kResource, {{"d0"}}).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // The plugin restarts its server on the same socket name and registers again.
  plugin->Stop();
  FakeDevicePlugin* again =
      AddPlugin("fake.sock", true, false, {Dev("d0", "Healthy"), Dev("d1", "Healthy")});
  ASSERT_TRUE(again->Register(kResource).ok());
  auto r = sim_->WaitForResource(kResource, 2, kWait);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->registrations, 2);
  EXPECT_TRUE(r->connected);
  EXPECT_FALSE(r->endpoint_gone);
  EXPECT_THAT(r->error, IsEmpty());
  ASSERT_TRUE(sim_->WaitForDevices(kResource, SizeIs(2), kWait).ok());
  EXPECT_EQ(sim_->Find(kResource)->list_updates, 2);
  EXPECT_TRUE(sim_->Allocate(kResource, {{"d1"}}).ok());
}

TEST_F(DevicePluginSimTest, StartDeletesStaleSockets) {
  FakeDevicePlugin* plugin = AddPlugin("stale.sock", false, false, {});
  sim_.reset();
  EXPECT_TRUE(IsSocket(plugin->socket_path()));
  auto sim = DevicePluginSimulator::Start(DevicePluginSimOptions{dir_});
  ASSERT_TRUE(sim.ok()) << sim.status();
  sim_ = std::move(*sim);
  EXPECT_FALSE(std::filesystem::exists(plugin->socket_path()));
  EXPECT_TRUE(IsSocket(dir_ + "/kubelet.sock"));
}

TEST(DevicePluginSimStartTest, RejectsTooLongSocketPath) {
  auto sim = DevicePluginSimulator::Start(DevicePluginSimOptions{"/tmp/" + std::string(120, 'x')});
  EXPECT_EQ(sim.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sim.status().message(), HasSubstr("Unix socket path"));
}

}  // namespace
