#include "test/kubelet_sim/device_plugin_sim.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <regex>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "proto/deviceplugin/v1beta1/api.grpc.pb.h"
#include "test/kubelet_sim/grpc_util.h"

namespace topodra::testing {
namespace {

using sim::Deadline;
using sim::Dial;
using sim::FromGrpc;
using sim::GrpcResult;

namespace dp = ::v1beta1;

// The kubelet's values (spec §6); the calls it makes without a deadline get kNoDeadline.
constexpr absl::Duration kDialTimeout = absl::Seconds(10);
constexpr absl::Duration kNoDeadline = absl::Seconds(30);
constexpr absl::Duration kPreStartTimeout = absl::Seconds(30);
// How often a wait for a connection looks whether it was cancelled.
constexpr absl::Duration kCancelCheck = absl::Milliseconds(50);
constexpr absl::Duration kServerShutdownGrace = absl::Milliseconds(500);

constexpr char kVersion[] = "v1beta1";
constexpr char kKubeletSocket[] = "kubelet.sock";
constexpr size_t kMaxUnixPath = 107;  // sizeof(sockaddr_un::sun_path) - 1

std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

std::string Bool(bool b) { return b ? "true" : "false"; }

// validation.IsQualifiedName as the kubelet applies it to "requests." + name.
bool IsQualifiedName(const std::string& value) {
  static const std::regex kName("([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]");
  static const std::regex kSubdomain(
      "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  std::string name = value;
  const size_t slash = value.find('/');
  if (slash != std::string::npos) {
    const std::string prefix = value.substr(0, slash);
    name = value.substr(slash + 1);
    if (prefix.empty() || prefix.size() > 253 || !std::regex_match(prefix, kSubdomain)) {
      return false;
    }
  }
  return !name.empty() && name.size() <= 63 && std::regex_match(name, kName);
}

// v1helper.IsExtendedResourceName (spec §5.1 step 3).
bool IsExtendedResourceName(const std::string& name) {
  constexpr char kRequestsPrefix[] = "requests.";
  const bool native =
      name.find('/') == std::string::npos || absl::StrContains(name, "kubernetes.io/");
  if (native || absl::StartsWith(name, kRequestsPrefix)) return false;
  return IsQualifiedName(absl::StrCat(kRequestsPrefix, name));
}

std::string DevicesForLog(const std::vector<PluginDevice>& devices) {
  return absl::StrCat("[",
                      absl::StrJoin(devices, ", ",
                                    [](std::string* out, const PluginDevice& d) {
                                      absl::StrAppend(out, d.id, ":", d.health);
                                      if (!d.numa_nodes.empty())
                                        absl::StrAppend(out, "@", absl::StrJoin(d.numa_nodes, "+"));
                                    }),
                      "]");
}

// One connect-back to a plugin endpoint (one registration). Cancel() ends whatever call is in
// flight; the connection thread then stops without touching the resource's state.
class Connection {
 public:
  Connection(uint64_t gen, std::string resource, std::string socket_path)
      : gen_(gen), resource_(std::move(resource)), socket_path_(std::move(socket_path)) {}

  uint64_t gen() const { return gen_; }
  const std::string& resource() const { return resource_; }
  const std::string& socket_path() const { return socket_path_; }

  void Cancel() {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (active_ != nullptr) active_->TryCancel();
  }
  bool cancelled() const {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  // Makes `ctx` cancellable by Cancel(); false when already cancelled.
  bool Begin(grpc::ClientContext* ctx) {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    active_ = ctx;
    return true;
  }
  void End() {
    absl::MutexLock lock(&mu_);
    active_ = nullptr;
  }

 private:
  const uint64_t gen_;
  const std::string resource_, socket_path_;
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace

class DevicePluginSimulator::Impl {
 public:
  explicit Impl(DevicePluginSimOptions opts) : opts_(std::move(opts)), service_(this) {}

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    {
      absl::MutexLock lock(&server_mu_);
      StopServer();
    }
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [name, e] : resources_) {
        if (e.conn) e.conn->Cancel();
      }
      for (Worker& w : workers_) threads.push_back(std::move(w.thread));
      workers_.clear();
    }
    for (std::thread& t : threads) t.join();
  }

  absl::Status Init() {
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::absolute(opts_.device_plugins_dir, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("device plugins dir ", Quote(opts_.device_plugins_dir), ": ", ec.message()));
    }
    dir_ = dir.lexically_normal().string();
    while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
    kubelet_socket_ = absl::StrCat(dir_, "/", kKubeletSocket);
    if (kubelet_socket_.size() > kMaxUnixPath) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "socket path %s is %d bytes long, more than the %d a Unix socket path can have",
          Quote(kubelet_socket_), kubelet_socket_.size(), kMaxUnixPath));
    }
    std::filesystem::create_directories(dir_, ec);
    if (ec) return absl::InternalError(absl::StrCat("creating ", Quote(dir_), ": ", ec.message()));
    absl::MutexLock lock(&server_mu_);
    if (absl::Status s = RemoveSockets(); !s.ok()) return s;
    return StartServer();
  }

  absl::Status RestartKubelet() {
    absl::MutexLock lock(&server_mu_);
    AddLog("Kubelet restart: stopping the Registration server");
    StopServer();
    {
      absl::MutexLock l(&mu_);
      for (auto& [name, e] : resources_) {
        if (e.conn) e.conn->Cancel();
        e.conn.reset();
        e.channel.reset();
        if (!e.info.endpoint_gone) {
          e.info.connected = false;
          e.info.endpoint_gone = true;
          e.info.error = "kubelet restarted";
        }
        e.connect_done = true;
      }
      cv_.SignalAll();
    }
    if (absl::Status s = RemoveSockets(); !s.ok()) return s;
    return StartServer();
  }

  absl::StatusOr<RegisteredResource> WaitForResource(const std::string& resource,
                                                     int min_registrations,
                                                     absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    for (;;) {
      auto it = resources_.find(resource);
      if (it != resources_.end() && it->second.info.registrations >= min_registrations &&
          it->second.connect_done) {
        const Entry& e = it->second;
        if (!e.options_read) {
          return absl::FailedPreconditionError(absl::StrCat(
              "device plugin for ", Quote(resource), " registered (", e.info.registrations,
              " times) but the kubelet could not connect back: ", e.info.error));
        }
        return e.info;
      }
      if (absl::Now() >= deadline) {
        std::string msg =
            absl::StrFormat("resource %s not registered %d times within %s", Quote(resource),
                            min_registrations, absl::FormatDuration(timeout));
        if (it != resources_.end()) {
          absl::StrAppend(&msg, " (registrations: ", it->second.info.registrations,
                          it->second.connect_done ? "" : ", connecting back", ")");
        }
        return absl::DeadlineExceededError(msg);
      }
      cv_.WaitWithDeadline(&mu_, deadline);
    }
  }

  absl::StatusOr<std::vector<PluginDevice>> WaitForDevices(
      const std::string& resource,
      const std::function<bool(const std::vector<PluginDevice>&)>& pred, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    int seen = -1;
    std::vector<PluginDevice> devices;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        for (;;) {
          auto it = resources_.find(resource);
          const int updates = it == resources_.end() ? 0 : it->second.info.list_updates;
          if (updates > 0 && updates != seen) {
            seen = updates;
            devices = it->second.info.devices;
            break;
          }
          if (absl::Now() >= deadline) {
            return absl::DeadlineExceededError(
                absl::StrFormat("device list of %s did not match within %s (%s)", Quote(resource),
                                absl::FormatDuration(timeout),
                                updates == 0 ? "no ListAndWatch message received"
                                             : absl::StrCat("latest: ", DevicesForLog(devices))));
          }
          cv_.WaitWithDeadline(&mu_, deadline);
        }
      }
      if (pred(devices)) return devices;
    }
  }

  bool WaitForEndpointGone(const std::string& resource, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    for (;;) {
      auto it = resources_.find(resource);
      if (it != resources_.end() && it->second.info.endpoint_gone) return true;
      if (absl::Now() >= deadline) return false;
      cv_.WaitWithDeadline(&mu_, deadline);
    }
  }

  std::optional<RegisteredResource> Find(const std::string& resource) const {
    absl::MutexLock lock(&mu_);
    auto it = resources_.find(resource);
    if (it == resources_.end()) return std::nullopt;
    return it->second.info;
  }

  absl::StatusOr<std::vector<std::string>> GetPreferredAllocation(
      const std::string& resource, const std::vector<std::string>& available,
      const std::vector<std::string>& must_include, int size) {
    std::shared_ptr<grpc::Channel> channel;
    if (absl::Status s = Lookup(resource, Need::kPreferred, &channel); !s.ok()) return s;
    dp::PreferredAllocationRequest req;
    auto* c = req.add_container_requests();
    for (const std::string& id : available) c->add_available_deviceids(id);
    for (const std::string& id : must_include) c->add_must_include_deviceids(id);
    c->set_allocation_size(size);
    dp::PreferredAllocationResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(kNoDeadline));
    grpc::Status s = dp::DevicePlugin::NewStub(channel)->GetPreferredAllocation(&ctx, req, &resp);
    std::string line =
        absl::StrCat("GetPreferredAllocation resource=", resource, " available=[",
                     absl::StrJoin(available, ","), "] must_include=[",
                     absl::StrJoin(must_include, ","), "] size=", size, " -> ", GrpcResult(s));
    if (!s.ok()) {
      AddLog(line);
      return FromGrpc(s);
    }
    if (resp.container_responses_size() == 0) {
      AddLog(absl::StrCat(line, " rejected: no container responses"));
      return absl::InternalError(absl::StrCat("GetPreferredAllocation for ", Quote(resource),
                                              ": response has no container responses"));
    }
    std::vector<std::string> out(resp.container_responses(0).deviceids().begin(),
                                 resp.container_responses(0).deviceids().end());
    AddLog(absl::StrCat(line, " [", absl::StrJoin(out, ","), "]"));
    return out;
  }

  absl::StatusOr<std::vector<ContainerAllocation>> Allocate(
      const std::string& resource,
      const std::vector<std::vector<std::string>>& device_ids_per_container) {
    std::shared_ptr<grpc::Channel> channel;
    if (absl::Status s = Lookup(resource, Need::kNothing, &channel); !s.ok()) return s;
    dp::AllocateRequest req;
    std::vector<std::string> requested;
    for (const auto& ids : device_ids_per_container) {
      auto* c = req.add_container_requests();
      for (const std::string& id : ids) c->add_devices_ids(id);
      requested.push_back(absl::StrCat("[", absl::StrJoin(ids, ","), "]"));
    }
    dp::AllocateResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(kNoDeadline));
    grpc::Status s = dp::DevicePlugin::NewStub(channel)->Allocate(&ctx, req, &resp);
    std::string line =
        absl::StrCat("Allocate resource=", resource, " containers=", absl::StrJoin(requested, " "),
                     " -> ", GrpcResult(s));
    if (!s.ok()) {
      AddLog(line);
      return FromGrpc(s);
    }
    if (resp.container_responses_size() != req.container_requests_size()) {
      std::string err =
          resp.container_responses_size() == 0
              ? std::string("no containers return in allocation response")
              : absl::StrFormat("%d container responses for %d container requests",
                                resp.container_responses_size(), req.container_requests_size());
      AddLog(absl::StrCat(line, " rejected: ", err));
      return absl::InternalError(absl::StrCat("Allocate for ", Quote(resource), ": ", err));
    }
    std::vector<ContainerAllocation> out;
    for (const dp::ContainerAllocateResponse& r : resp.container_responses()) {
      ContainerAllocation a;
      a.envs.insert(r.envs().begin(), r.envs().end());
      for (const dp::DeviceSpec& d : r.devices()) a.device_node_host_paths.push_back(d.host_path());
      for (const dp::CDIDevice& d : r.cdi_devices()) a.cdi_devices.push_back(d.name());
      for (const dp::Mount& m : r.mounts()) a.mounts_host_paths.push_back(m.host_path());
      a.annotations.insert(r.annotations().begin(), r.annotations().end());
      absl::StrAppend(&line, " {envs: ", a.envs.size(), ", devices: [",
                      absl::StrJoin(a.device_node_host_paths, ","), "], cdi: [",
                      absl::StrJoin(a.cdi_devices, ","), "], mounts: ", a.mounts_host_paths.size(),
                      ", annotations: ", a.annotations.size(), "}");
      out.push_back(std::move(a));
    }
    AddLog(line);
    return out;
  }

  absl::Status PreStartContainer(const std::string& resource,
                                 const std::vector<std::string>& device_ids) {
    std::shared_ptr<grpc::Channel> channel;
    if (absl::Status s = Lookup(resource, Need::kPreStart, &channel); !s.ok()) return s;
    dp::PreStartContainerRequest req;
    for (const std::string& id : device_ids) req.add_devices_ids(id);
    dp::PreStartContainerResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(kPreStartTimeout));
    grpc::Status s = dp::DevicePlugin::NewStub(channel)->PreStartContainer(&ctx, req, &resp);
    AddLog(absl::StrCat("PreStartContainer resource=", resource, " devices=[",
                        absl::StrJoin(device_ids, ","), "] -> ", GrpcResult(s)));
    return FromGrpc(s);
  }

  std::vector<std::string> Log() const {
    absl::MutexLock lock(&log_mu_);
    return log_;
  }

  // v1beta1.Registration/Register (spec §5.1), minus the synchronous connect-back.
  grpc::Status Register(const dp::RegisterRequest& req) {
    const dp::DevicePluginOptions& o = req.options();
    const std::string what = absl::StrCat(
        "Register resource=", req.resource_name(), " endpoint=", Quote(req.endpoint()),
        " version=", Quote(req.version()),
        " options={pre_start_required=", Bool(o.pre_start_required()),
        ", get_preferred_allocation_available=", Bool(o.get_preferred_allocation_available()), "}");
    auto reject = [&](const std::string& error) {
      AddLog(absl::StrCat(what, " -> rejected: ", error));
      // The kubelet returns a plain Go error, which gRPC sends as UNKNOWN.
      return grpc::Status(grpc::StatusCode::UNKNOWN, error);
    };
    if (req.version() != kVersion) {
      return reject(absl::StrFormat(
          "requested API version %s is not supported by kubelet. Supported versions are [%s]",
          Quote(req.version()), Quote(kVersion)));
    }
    if (!IsExtendedResourceName(req.resource_name())) {
      return reject(absl::StrFormat("the ResourceName %s is invalid", Quote(req.resource_name())));
    }
    if (req.endpoint().empty()) return reject("empty endpoint");
    const std::string socket_path = absl::StrCat(dir_, "/", req.endpoint());

    std::vector<std::thread> finished;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return reject("kubelet is shutting down");
      for (auto it = workers_.begin(); it != workers_.end();) {
        if (it->done->load()) {
          finished.push_back(std::move(it->thread));
          it = workers_.erase(it);
        } else {
          ++it;
        }
      }
      Entry& e = resources_[req.resource_name()];
      if (e.conn) {
        AddLog(absl::StrCat("Replacing the registration of ", req.resource_name(), " (endpoint ",
                            Quote(e.info.endpoint), ")"));
        e.conn->Cancel();
      }
      e.info.resource_name = req.resource_name();
      e.info.endpoint = req.endpoint();
      e.info.version = req.version();
      e.info.registrations++;
      e.info.connected = false;
      e.info.endpoint_gone = false;
      e.info.error.clear();
      e.connect_done = false;
      e.options_read = false;
      e.channel.reset();
      e.conn = std::make_shared<Connection>(++next_gen_, req.resource_name(), socket_path);
      auto done = std::make_shared<std::atomic<bool>>(false);
      workers_.push_back(Worker{std::thread([this, conn = e.conn, done] {
                                  ConnectBack(conn);
                                  done->store(true);
                                }),
                                done});
      AddLog(absl::StrCat(what, " -> OK (registration ", e.info.registrations, ")"));
      cv_.SignalAll();
    }
    for (std::thread& t : finished) t.join();
    return grpc::Status::OK;
  }

 private:
  class RegistrationService final : public dp::Registration::Service {
   public:
    explicit RegistrationService(Impl* impl) : impl_(impl) {}
    grpc::Status Register(grpc::ServerContext*, const dp::RegisterRequest* req,
                          dp::Empty*) override {
      return impl_->Register(*req);
    }

   private:
    Impl* impl_;
  };

  struct Entry {
    RegisteredResource info;
    bool connect_done = false;  // the latest registration's connect-back finished (either way)
    bool options_read = false;  // ... and GetDevicePluginOptions answered
    std::shared_ptr<grpc::Channel> channel;  // set while connected
    std::shared_ptr<Connection> conn;        // the latest registration's connect-back
  };
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  enum class Need { kNothing, kPreferred, kPreStart };

  void AddLog(std::string line) {
    absl::MutexLock lock(&log_mu_);
    log_.push_back(std::move(line));
  }

  absl::Status Lookup(const std::string& resource, Need need,
                      std::shared_ptr<grpc::Channel>* channel) {
    absl::MutexLock lock(&mu_);
    auto it = resources_.find(resource);
    if (it == resources_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot allocate unregistered device ", resource));
    }
    const Entry& e = it->second;
    if (!e.info.connected || e.channel == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("device plugin endpoint for ", resource, " is not connected",
                       e.info.error.empty() ? std::string() : absl::StrCat(": ", e.info.error)));
    }
    if (need == Need::kPreferred && !e.info.preferred_allocation_available) {
      return absl::FailedPreconditionError(absl::StrCat(
          "device plugin for ", resource,
          " does not advertise get_preferred_allocation_available; the kubelet would not call it"));
    }
    if (need == Need::kPreStart && !e.info.pre_start_required) {
      return absl::FailedPreconditionError(
          absl::StrCat("device plugin for ", resource,
                       " does not advertise pre_start_required; the kubelet would not call it"));
    }
    *channel = e.channel;
    return absl::OkStatus();
  }

  // Applies `update` to the resource if `conn` is still its latest registration and was not
  // cancelled (whoever cancels updates the state itself).
  template <typename F>
  void UpdateIfCurrent(const Connection& conn, F update) {
    absl::MutexLock lock(&mu_);
    auto it = resources_.find(conn.resource());
    if (it == resources_.end() || it->second.conn == nullptr ||
        it->second.conn->gen() != conn.gen() || conn.cancelled()) {
      return;
    }
    update(it->second);
    cv_.SignalAll();
  }

  void Fail(const Connection& conn, const std::string& error) {
    AddLog(
        absl::StrCat("Endpoint of ", conn.resource(), " (", conn.socket_path(), ") gone: ", error));
    UpdateIfCurrent(conn, [&](Entry& e) {
      e.info.connected = false;
      e.info.endpoint_gone = true;
      e.info.error = error;
      e.connect_done = true;
      e.channel.reset();
    });
  }

  absl::Status WaitConnected(grpc::Channel& channel, const Connection& conn) {
    const absl::Time deadline = absl::Now() + kDialTimeout;
    grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
    while (state != GRPC_CHANNEL_READY) {
      if (conn.cancelled()) return absl::CancelledError("registration replaced or kubelet stopped");
      if (absl::Now() >= deadline) {
        return absl::UnavailableError(absl::StrCat("cannot connect to ", conn.socket_path(),
                                                   " within ", absl::FormatDuration(kDialTimeout)));
      }
      channel.WaitForStateChange(
          state, absl::ToChronoTime(std::min(deadline, absl::Now() + kCancelCheck)));
      state = channel.GetState(/*try_to_connect=*/true);
    }
    return absl::OkStatus();
  }

  // Dial, GetDevicePluginOptions, then consume ListAndWatch until it ends (spec §5.1 step 4,
  // §5.2). Runs on its own thread.
  void ConnectBack(const std::shared_ptr<Connection>& conn) {
    std::shared_ptr<grpc::Channel> channel = Dial(conn->socket_path());
    if (absl::Status s = WaitConnected(*channel, *conn); !s.ok()) {
      if (!conn->cancelled()) Fail(*conn, std::string(s.message()));
      return;
    }
    auto stub = dp::DevicePlugin::NewStub(channel);
    dp::DevicePluginOptions options;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(Deadline(kNoDeadline));
      if (!conn->Begin(&ctx)) return;
      grpc::Status s = stub->GetDevicePluginOptions(&ctx, dp::Empty(), &options);
      conn->End();
      AddLog(absl::StrCat(
          "GetDevicePluginOptions ", conn->resource(), " -> ", GrpcResult(s),
          s.ok() ? absl::StrCat(" pre_start_required=", Bool(options.pre_start_required()),
                                " get_preferred_allocation_available=",
                                Bool(options.get_preferred_allocation_available()))
                 : std::string()));
      if (!s.ok()) {
        if (!conn->cancelled())
          Fail(*conn, absl::StrCat("GetDevicePluginOptions: ", GrpcResult(s)));
        return;
      }
    }
    grpc::ClientContext ctx;  // no deadline, as in the kubelet
    if (!conn->Begin(&ctx)) return;
    std::unique_ptr<grpc::ClientReader<dp::ListAndWatchResponse>> reader =
        stub->ListAndWatch(&ctx, dp::Empty());
    UpdateIfCurrent(*conn, [&](Entry& e) {
      e.info.preferred_allocation_available = options.get_preferred_allocation_available();
      e.info.pre_start_required = options.pre_start_required();
      e.info.connected = true;
      e.connect_done = true;
      e.options_read = true;
      e.channel = channel;
    });
    dp::ListAndWatchResponse msg;
    while (reader->Read(&msg)) {
      std::vector<PluginDevice> devices;
      for (const dp::Device& d : msg.devices()) {
        PluginDevice pd{d.id(), d.health(), {}};
        for (const dp::NUMANode& n : d.topology().nodes()) pd.numa_nodes.push_back(n.id());
        devices.push_back(std::move(pd));
      }
      AddLog(absl::StrCat("ListAndWatch ", conn->resource(), " -> ", DevicesForLog(devices)));
      const absl::Time now = absl::Now();
      UpdateIfCurrent(*conn, [&](Entry& e) {
        e.info.devices = std::move(devices);
        e.info.list_updates++;
        e.info.last_update = now;
      });
    }
    grpc::Status s = reader->Finish();
    conn->End();
    if (conn->cancelled()) {
      AddLog(absl::StrCat("ListAndWatch ", conn->resource(), " cancelled by the kubelet"));
      return;
    }
    Fail(*conn, absl::StrCat("ListAndWatch ended: ", GrpcResult(s)));
  }

  // Deletes the sockets directly in the directory (the kubelet's start-up clean-up, spec §5.7).
  absl::Status RemoveSockets() ABSL_EXCLUSIVE_LOCKS_REQUIRED(server_mu_) {
    std::error_code ec;
    std::vector<std::string> removed;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      struct stat st {};
      const std::string path = entry.path().string();
      if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return absl::InternalError(absl::StrCat("deleting socket ", Quote(path), ": ",
                                                std::generic_category().message(errno)));
      }
      removed.push_back(entry.path().filename().string());
    }
    if (ec) return absl::InternalError(absl::StrCat("listing ", Quote(dir_), ": ", ec.message()));
    AddLog(absl::StrCat("Deleted sockets in ", dir_, ": [", absl::StrJoin(removed, ", "), "]"));
    return absl::OkStatus();
  }

  absl::Status StartServer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(server_mu_) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("unix:", kubelet_socket_),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) {
      return absl::InternalError(absl::StrCat("cannot serve on ", Quote(kubelet_socket_)));
    }
    AddLog(absl::StrCat("Serving v1beta1.Registration on ", kubelet_socket_));
    return absl::OkStatus();
  }

  void StopServer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(server_mu_) {
    if (server_ == nullptr) return;
    server_->Shutdown(Deadline(kServerShutdownGrace));
    server_->Wait();
    server_.reset();
  }

  const DevicePluginSimOptions opts_;
  std::string dir_, kubelet_socket_;
  RegistrationService service_;

  absl::Mutex server_mu_;  // serializes start, restart and stop of the server
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(server_mu_);

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled on every change of resources_
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_gen_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Entry> resources_ ABSL_GUARDED_BY(mu_);
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

absl::StatusOr<std::unique_ptr<DevicePluginSimulator>> DevicePluginSimulator::Start(
    DevicePluginSimOptions opts) {
  if (opts.device_plugins_dir.empty()) {
    return absl::InvalidArgumentError("device plugin sim: empty device_plugins_dir");
  }
  auto impl = std::make_unique<Impl>(std::move(opts));
  if (absl::Status s = impl->Init(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("device plugin sim: ", s.message()));
  }
  return std::unique_ptr<DevicePluginSimulator>(new DevicePluginSimulator(std::move(impl)));
}

DevicePluginSimulator::DevicePluginSimulator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DevicePluginSimulator::~DevicePluginSimulator() = default;

absl::Status DevicePluginSimulator::RestartKubelet() { return impl_->RestartKubelet(); }

absl::StatusOr<RegisteredResource> DevicePluginSimulator::WaitForResource(
    const std::string& resource, int min_registrations, absl::Duration timeout) {
  return impl_->WaitForResource(resource, min_registrations, timeout);
}

absl::StatusOr<std::vector<PluginDevice>> DevicePluginSimulator::WaitForDevices(
    const std::string& resource, const std::function<bool(const std::vector<PluginDevice>&)>& pred,
    absl::Duration timeout) {
  return impl_->WaitForDevices(resource, pred, timeout);
}

bool DevicePluginSimulator::WaitForEndpointGone(const std::string& resource,
                                                absl::Duration timeout) {
  return impl_->WaitForEndpointGone(resource, timeout);
}

std::optional<RegisteredResource> DevicePluginSimulator::Find(const std::string& resource) const {
  return impl_->Find(resource);
}

absl::StatusOr<std::vector<std::string>> DevicePluginSimulator::GetPreferredAllocation(
    const std::string& resource, const std::vector<std::string>& available,
    const std::vector<std::string>& must_include, int size) {
  return impl_->GetPreferredAllocation(resource, available, must_include, size);
}

absl::StatusOr<std::vector<DevicePluginSimulator::ContainerAllocation>>
DevicePluginSimulator::Allocate(
    const std::string& resource,
    const std::vector<std::vector<std::string>>& device_ids_per_container) {
  return impl_->Allocate(resource, device_ids_per_container);
}

absl::Status DevicePluginSimulator::PreStartContainer(const std::string& resource,
                                                      const std::vector<std::string>& device_ids) {
  return impl_->PreStartContainer(resource, device_ids);
}

std::vector<std::string> DevicePluginSimulator::Log() const { return impl_->Log(); }

}  // namespace topodra::testing
