#include "driver/plugin/device_plugin_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/file_io.h"
#include "driver/plugin/socket_server.h"
#include "proto/deviceplugin/v1beta1/api.grpc.pb.h"

namespace topodra::plugin {
namespace {

namespace dp = ::v1beta1;

constexpr char kVersion[] = "v1beta1";

grpc::StatusCode CodeOf(const absl::Status& st) {
  return static_cast<grpc::StatusCode>(static_cast<int>(st.code()));
}

grpc::Status ToGrpc(const absl::Status& st) {
  return grpc::Status(CodeOf(st), std::string(st.message()));
}

dp::DevicePluginOptions Options() {
  dp::DevicePluginOptions o;
  o.set_pre_start_required(false);
  o.set_get_preferred_allocation_available(true);
  return o;
}

class Service final : public dp::DevicePlugin::Service {
 public:
  Service(DevicePluginServer* server, deviceplugin::DevicePluginService* service,
          absl::Duration poll)
      : server_(server), service_(service), poll_(poll) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const dp::Empty*,
                                      dp::DevicePluginOptions* out) override {
    *out = Options();
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const dp::Empty*,
                            grpc::ServerWriter<dp::ListAndWatchResponse>* writer) override {
    try {
      const uint64_t epoch = server_->epoch();
      state::ChangeSignal& changes = service_->ledger()->changes();
      std::optional<std::vector<deviceplugin::Device>> sent;
      while (!server_->StreamsMustEnd(epoch) && !context->IsCancelled()) {
        // The generation before the list: a change after it wakes the wait below.
        const uint64_t seen = changes.generation();
        std::vector<deviceplugin::Device> devices = service_->Devices();
        if (!sent || devices != *sent) {
          dp::ListAndWatchResponse response;
          for (const deviceplugin::Device& d : devices) {
            dp::Device* out = response.add_devices();
            out->set_id(d.id);
            out->set_health(d.healthy ? "Healthy" : "Unhealthy");
            for (int numa : d.numa_nodes) out->mutable_topology()->add_nodes()->set_id(numa);
          }
          if (!writer->Write(response)) break;
          spdlog::debug("device plugin {}: ListAndWatch sent {} devices ({} healthy)",
                        service_->resource(), devices.size(),
                        std::count_if(devices.begin(), devices.end(),
                                      [](const auto& d) { return d.healthy; }));
          sent = std::move(devices);
        }
        changes.WaitChange(seen, poll_);
      }
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("ListAndWatch: ", e.what()));
    }
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const dp::PreferredAllocationRequest* request,
                                      dp::PreferredAllocationResponse* response) override {
    try {
      for (const dp::ContainerPreferredAllocationRequest& r : request->container_requests()) {
        const std::vector<std::string> available(r.available_deviceids().begin(),
                                                 r.available_deviceids().end());
        const std::vector<std::string> must(r.must_include_deviceids().begin(),
                                            r.must_include_deviceids().end());
        absl::StatusOr<std::vector<std::string>> ids =
            service_->Preferred(available, must, r.allocation_size());
        if (!ids.ok()) {
          spdlog::warn("device plugin {}: GetPreferredAllocation: {}", service_->resource(),
                       std::string(ids.status().message()));
          return ToGrpc(ids.status());
        }
        dp::ContainerPreferredAllocationResponse* out = response->add_container_responses();
        for (const std::string& id : *ids) out->add_deviceids(id);
      }
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("GetPreferredAllocation: ", e.what()));
    }
  }

  grpc::Status Allocate(grpc::ServerContext*, const dp::AllocateRequest* request,
                        dp::AllocateResponse* response) override {
    // Allocations this call created, given up again if a later container request fails: the
    // kubelet records nothing of a failed Allocate.
    std::vector<std::string> created;
    auto roll_back = [&] {
      for (const std::string& owner : created) (void)service_->Release(owner);
    };
    try {
      for (const dp::ContainerAllocateRequest& r : request->container_requests()) {
        const std::vector<std::string> ids(r.devices_ids().begin(), r.devices_ids().end());
        absl::StatusOr<deviceplugin::DevicePluginService::Allocated> a = service_->Allocate(ids);
        if (!a.ok()) {
          spdlog::warn("device plugin {}: Allocate failed: {}", service_->resource(),
                       std::string(a.status().message()));
          roll_back();
          return ToGrpc(a.status());
        }
        if (a->created) created.push_back(a->owner);
        dp::ContainerAllocateResponse* out = response->add_container_responses();
        for (const auto& [k, v] : a->grant.envs) (*out->mutable_envs())[k] = v;
        for (const deviceplugin::DeviceNodeGrant& d : a->grant.devices) {
          dp::DeviceSpec* spec = out->add_devices();
          spec->set_container_path(d.container_path);
          spec->set_host_path(d.host_path);
          spec->set_permissions(d.permissions);
        }
        for (const std::string& name : a->grant.cdi_devices) out->add_cdi_devices()->set_name(name);
      }
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      roll_back();
      return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("Allocate: ", e.what()));
    }
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const dp::PreStartContainerRequest*,
                                 dp::PreStartContainerResponse*) override {
    return grpc::Status::OK;  // pre_start_required is false; answer anyway
  }

 private:
  DevicePluginServer* server_;
  deviceplugin::DevicePluginService* service_;
  const absl::Duration poll_;
};

}  // namespace

std::string DevicePluginSocketName(const std::string& resource) {
  return absl::StrReplaceAll(resource, {{"/", "-"}}) + ".sock";
}

DevicePluginServer::DevicePluginServer(DevicePluginOptions opts,
                                       deviceplugin::DevicePluginService* service)
    : opts_(std::move(opts)), service_(service) {}

absl::StatusOr<std::unique_ptr<DevicePluginServer>> DevicePluginServer::Start(
    DevicePluginOptions opts, deviceplugin::DevicePluginService* service) {
  std::unique_ptr<DevicePluginServer> s(new DevicePluginServer(std::move(opts), service));
  s->dir_ = s->opts_.kubelet_root + "/device-plugins";
  s->socket_ = absl::StrCat(s->dir_, "/", DevicePluginSocketName(service->resource()));
  s->kubelet_socket_ = s->dir_ + "/kubelet.sock";
  if (absl::Status st = files::MakeDirectories(s->dir_, 0750); !st.ok()) return st;
  s->grpc_service_ = std::make_unique<Service>(s.get(), service, s->opts_.stream_poll);
  if (absl::Status st = s->Serve(); !st.ok()) return st;
  spdlog::info("device plugin {}: serving v1beta1.DevicePlugin on {}", service->resource(),
               s->socket_);
  s->watcher_ = std::thread([raw = s.get()] { raw->Watch(); });
  return s;
}

bool DevicePluginServer::StreamsMustEnd(uint64_t epoch) const {
  return stopping_.load() || epoch_.load() != epoch;
}

absl::Status DevicePluginServer::Serve() {
  if (server_ != nullptr) {
    // The streams of the old socket end first, so the kubelet sees them close.
    ++epoch_;
    service_->ledger()->changes().Notify();
    plugin::ShutdownAt(server_.get(), socket_, std::chrono::milliseconds(100));
    server_.reset();
  }
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      plugin::Serve(socket_, {grpc_service_.get()});
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  socket_held_ = HeldSocket(socket_);
  socket_inode_ = socket_held_.id();
  return absl::OkStatus();
}

absl::Status DevicePluginServer::Register() {
  grpc::ChannelArguments args;
  // A channel of its own each time: a shared subchannel would carry the reconnect backoff of
  // the previous kubelet's socket over to the new one.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel("unix:" + kubelet_socket_,
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = dp::Registration::NewStub(channel);
  dp::RegisterRequest request;
  request.set_version(kVersion);
  request.set_endpoint(DevicePluginSocketName(service_->resource()));
  request.set_resource_name(service_->resource());
  *request.mutable_options() = Options();
  grpc::ClientContext context;
  // The kubelet dials us back (10 s) and asks for our options inside Register.
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  dp::Empty reply;
  grpc::Status st = stub->Register(&context, request, &reply);
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat("register ", service_->resource(), " on ", kubelet_socket_,
                                     ": ", st.error_message()));
  }
  return absl::OkStatus();
}

void DevicePluginServer::Watch() {
  absl::Duration backoff = absl::Milliseconds(500);
  absl::Time next_attempt = absl::InfinitePast();
  bool warned = false;
  while (!stopping_.load()) {
    const SocketPath own = InspectSocketPath(socket_, socket_inode_.load());
    const unsigned long kubelet = InodeOf(kubelet_socket_);
    const bool socket_gone = own.kind != SocketPath::kOurs;
    const bool kubelet_restarted = registered_.load() && kubelet != kubelet_inode_;
    if (own.kind == SocketPath::kNotASocket) {
      // Not ours to delete; registering would point the kubelet at it.
      const std::string now = absl::StrCat(own.what, " was in its place");
      if (condition_ != now) {
        spdlog::error(
            "device plugin {}: {} is {}, not a socket; the daemon leaves it alone (it removes "
            "only its own sockets) and serves no socket there until it is removed",
            service_->resource(), socket_, own.what);
        condition_ = now;
      }
      registered_ = false;
    } else if (socket_gone || kubelet_restarted) {
      if (condition_.empty()) {
        spdlog::warn("device plugin {}: {}; serving a fresh socket and registering again",
                     service_->resource(),
                     socket_gone
                         ? absl::StrCat("socket ", socket_, " was removed (kubelet restart)")
                         : absl::StrCat(kubelet_socket_, " was re-created (kubelet restart)"));
      }
      registered_ = false;
      if (absl::Status st = Serve(); !st.ok()) {
        const std::string now = absl::StrCat("it could not be served: ", st.message());
        if (condition_ != now) {
          spdlog::error("device plugin {}: cannot serve {} (retrying): {}", service_->resource(),
                        socket_, std::string(st.message()));
          condition_ = now;
        }
      } else if (!condition_.empty()) {
        spdlog::info("device plugin {}: {} is served again (before: {}); registering again",
                     service_->resource(), socket_, condition_);
        condition_.clear();
      }
      backoff = absl::Milliseconds(500);
      next_attempt = absl::InfinitePast();
    }
    if (!registered_.load() && kubelet != 0 && absl::Now() >= next_attempt && server_ != nullptr &&
        condition_.empty()) {
      if (absl::Status st = Register(); st.ok()) {
        registered_ = true;
        // Held, so that a kubelet socket made again cannot come back with the same inode number.
        kubelet_held_ = HeldSocket(kubelet_socket_);
        kubelet_inode_ = kubelet_held_.id();
        const int n = ++registrations_;
        warned = false;
        backoff = absl::Milliseconds(500);
        spdlog::info("device plugin {}: registered with the kubelet{}", service_->resource(),
                     n > 1 ? absl::StrCat(" (again, ", n, " times)") : "");
      } else {
        // The kubelet may simply not be up yet: warn once per streak.
        spdlog::log(warned ? spdlog::level::debug : spdlog::level::warn,
                    "device plugin {}: {}; retrying in {}", service_->resource(),
                    std::string(st.message()), absl::FormatDuration(backoff));
        warned = true;
        next_attempt = absl::Now() + backoff;
        backoff = std::min(backoff * 2, absl::Seconds(10));
      }
      continue;  // check the sockets again at once: the kubelet may have restarted meanwhile
    }
    std::unique_lock<std::mutex> lock(stop_mu_);
    stop_cv_.wait_for(lock, absl::ToChronoMilliseconds(opts_.check),
                      [this] { return stopping_.load(); });
  }
}

void DevicePluginServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_.exchange(true)) return;
  }
  stop_cv_.notify_all();
  service_->ledger()->changes().Notify();
  if (watcher_.joinable()) watcher_.join();
  if (server_ != nullptr) {
    plugin::ShutdownAt(server_.get(), socket_, std::chrono::milliseconds(500));
    server_.reset();
    // Only our own socket: a successor may already have made a new one.
    if (InodeOf(socket_) == socket_inode_.load()) ::unlink(socket_.c_str());
  }
  socket_held_ = HeldSocket();
  kubelet_held_ = HeldSocket();
}

std::string DevicePluginServer::SocketProblem() const {
  const SocketPath at = InspectSocketPath(socket_, socket_inode_.load());
  switch (at.kind) {
    case SocketPath::kOurs:
      return "";
    case SocketPath::kMissing:
      return absl::StrCat("device plugin ", service_->resource(), ": socket ", socket_,
                          " is missing");
    case SocketPath::kOtherSocket:
      return absl::StrCat("device plugin ", service_->resource(), ": socket ", socket_,
                          " is not the daemon's socket");
    case SocketPath::kNotASocket:
      return absl::StrCat("device plugin ", service_->resource(), ": socket ", socket_, " is ",
                          at.what, ", not the daemon's socket: remove it (the daemon does not)");
  }
  return "";
}

DevicePluginServer::~DevicePluginServer() { Stop(); }

DevicePluginReclaimer::DevicePluginReclaimer(
    std::unique_ptr<PodResourcesLister> lister,
    std::vector<deviceplugin::DevicePluginService*> services, absl::Duration interval)
    : lister_(std::move(lister)), services_(std::move(services)), interval_(interval) {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (
        !cv_.wait_for(lock, absl::ToChronoMilliseconds(interval_), [this] { return stopping_; })) {
      lock.unlock();
      RunOnce();
      lock.lock();
    }
  });
}

void DevicePluginReclaimer::RunOnce() {
  try {
    absl::StatusOr<std::vector<AssignedDevices>> listed = lister_->List();
    const absl::Time now = absl::Now();
    if (!listed.ok()) {
      if (!failing_) {
        spdlog::warn(
            "device plugin: cannot list the kubelet's pod resources, so no device-plugin "
            "allocation is released until it answers: {}",
            std::string(listed.status().message()));
      }
      failing_ = true;
      return;
    }
    if (failing_) spdlog::info("device plugin: the kubelet's pod resources answer again");
    failing_ = false;
    for (deviceplugin::DevicePluginService* s : services_) {
      std::set<std::string> assigned;
      for (const AssignedDevices& a : *listed) {
        if (a.resource == s->resource()) assigned.insert(a.device_ids.begin(), a.device_ids.end());
      }
      for (const std::string& owner : s->Reclaim(assigned, now, interval_)) {
        spdlog::info("device plugin {}: {} released: no container uses its devices any more",
                     s->resource(), owner);
      }
    }
  } catch (const std::exception& e) {
    spdlog::error("device plugin: reclaim pass failed: {}", e.what());
  }
}

void DevicePluginReclaimer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

DevicePluginReclaimer::~DevicePluginReclaimer() { Stop(); }

}  // namespace topodra::plugin
