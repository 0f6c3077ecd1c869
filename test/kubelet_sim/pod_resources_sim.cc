#include "test/kubelet_sim/pod_resources_sim.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "proto/podresources/v1/api.grpc.pb.h"
#include "test/kubelet_sim/grpc_util.h"

namespace topodra::testing {
namespace {

namespace podres = ::v1;

constexpr size_t kMaxUnixPath = 107;  // sizeof(sockaddr_un::sun_path) - 1
constexpr absl::Duration kServerShutdownGrace = absl::Milliseconds(500);
// How often a stalled List looks whether its caller gave up.
constexpr absl::Duration kCancelCheck = absl::Milliseconds(20);

std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

std::string ErrnoText(int err) { return std::generic_category().message(err); }

podres::ListPodResourcesResponse Group(const std::vector<PodResourcesSimulator::Entry>& entries) {
  podres::ListPodResourcesResponse out;
  // Elements of a RepeatedPtrField keep their address when more are added.
  std::map<std::pair<std::string, std::string>, podres::PodResources*> pods;
  std::map<std::pair<const void*, std::string>, podres::ContainerResources*> containers;
  std::map<std::pair<const void*, std::string>, podres::ContainerDevices*> devices;
  for (const PodResourcesSimulator::Entry& e : entries) {
    podres::PodResources*& pod = pods[{e.pod_namespace, e.pod_name}];
    if (pod == nullptr) {
      pod = out.add_pod_resources();
      pod->set_namespace_(e.pod_namespace);
      pod->set_name(e.pod_name);
    }
    podres::ContainerResources*& container = containers[{pod, e.container}];
    if (container == nullptr) {
      container = pod->add_containers();
      container->set_name(e.container);
    }
    podres::ContainerDevices*& dev = devices[{container, e.resource}];
    if (dev == nullptr) {
      dev = container->add_devices();
      dev->set_resource_name(e.resource);
    }
    for (const std::string& id : e.device_ids) dev->add_device_ids(id);
  }
  return out;
}

}  // namespace

class PodResourcesSimulator::Impl final : public podres::PodResourcesLister::Service {
 public:
  explicit Impl(std::string socket_path) : socket_path_(std::move(socket_path)) {}
  ~Impl() override { Stop(); }

  absl::Status Init() {
    if (socket_path_.empty()) return absl::InvalidArgumentError("empty socket path");
    if (socket_path_.size() > kMaxUnixPath) {
      return absl::InvalidArgumentError(absl::StrCat("socket path ", Quote(socket_path_), " is ",
                                                     socket_path_.size(), " bytes long, more than ",
                                                     kMaxUnixPath, " a Unix socket path can have"));
    }
    const std::filesystem::path parent = std::filesystem::path(socket_path_).parent_path();
    if (!parent.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(parent, ec);
      if (ec) {
        return absl::InternalError(
            absl::StrCat("creating ", Quote(parent.string()), ": ", ec.message()));
      }
    }
    struct stat st {};
    if (::lstat(socket_path_.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return absl::FailedPreconditionError(
            absl::StrCat(Quote(socket_path_), " exists and is not a socket"));
      }
      if (::unlink(socket_path_.c_str()) != 0 && errno != ENOENT) {
        return absl::InternalError(
            absl::StrCat("deleting stale socket ", Quote(socket_path_), ": ", ErrnoText(errno)));
      }
    } else if (errno != ENOENT) {
      return absl::InternalError(
          absl::StrCat("stat ", Quote(socket_path_), ": ", ErrnoText(errno)));
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("unix:", socket_path_),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    absl::MutexLock lock(&server_mu_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) {
      return absl::InternalError(absl::StrCat("cannot serve on ", Quote(socket_path_)));
    }
    if (::lstat(socket_path_.c_str(), &st) == 0) inode_ = st.st_ino;
    return absl::OkStatus();
  }

  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      cv_.SignalAll();
    }
    absl::MutexLock lock(&server_mu_);
    if (server_ == nullptr) return;
    server_->Shutdown(sim::Deadline(kServerShutdownGrace));
    server_->Wait();
    server_.reset();
    // A simulator started later on the same path owns the socket now.
    struct stat st {};
    if (::lstat(socket_path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == inode_) {
      ::unlink(socket_path_.c_str());
    }
  }

  void Set(const std::vector<Entry>& entries) {
    podres::ListPodResourcesResponse response = Group(entries);
    absl::MutexLock lock(&mu_);
    response_ = std::move(response);
  }

  void FailWith(absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_ = std::move(status);
  }

  void StallListBy(absl::Duration delay) {
    absl::MutexLock lock(&mu_);
    stall_ = delay;
  }

  int list_calls() const {
    absl::MutexLock lock(&mu_);
    return list_calls_;
  }

  const std::string& socket_path() const { return socket_path_; }

  grpc::Status List(grpc::ServerContext* context, const podres::ListPodResourcesRequest*,
                    podres::ListPodResourcesResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++list_calls_;
    const absl::Time until = absl::Now() + stall_;
    while (!stopping_ && !context->IsCancelled() && absl::Now() < until) {
      cv_.WaitWithDeadline(&mu_, std::min(until, absl::Now() + kCancelCheck));
    }
    if (!fail_.ok()) {
      // gRPC and absl share the canonical code numbering.
      return grpc::Status(static_cast<grpc::StatusCode>(fail_.code()),
                          std::string(fail_.message()));
    }
    *response = response_;
    return grpc::Status::OK;
  }

 private:
  const std::string socket_path_;

  absl::Mutex server_mu_;  // serializes start and stop of the server
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(server_mu_);
  ino_t inode_ ABSL_GUARDED_BY(server_mu_) = 0;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when stopping
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  podres::ListPodResourcesResponse response_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
  absl::Duration stall_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  int list_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<std::unique_ptr<PodResourcesSimulator>> PodResourcesSimulator::Start(
    std::string socket_path) {
  auto impl = std::make_unique<Impl>(std::move(socket_path));
  if (absl::Status s = impl->Init(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("pod resources sim: ", s.message()));
  }
  return std::unique_ptr<PodResourcesSimulator>(new PodResourcesSimulator(std::move(impl)));
}

PodResourcesSimulator::PodResourcesSimulator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PodResourcesSimulator::~PodResourcesSimulator() = default;

void PodResourcesSimulator::Set(std::vector<Entry> entries) { impl_->Set(entries); }
void PodResourcesSimulator::FailWith(absl::Status status) { impl_->FailWith(std::move(status)); }
void PodResourcesSimulator::StallListBy(absl::Duration delay) { impl_->StallListBy(delay); }
int PodResourcesSimulator::list_calls() const { return impl_->list_calls(); }
const std::string& PodResourcesSimulator::socket_path() const { return impl_->socket_path(); }
void PodResourcesSimulator::Stop() { impl_->Stop(); }

}  // namespace topodra::testing
