#include "driver/plugin/kubelet_plugin.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "driver/plugin/socket_server.h"
#include "proto/dra_api.h"
#include "proto/drahealth/health_api.h"
#include "proto/pluginregistration/api.grpc.pb.h"

namespace topodra::plugin {
namespace {

namespace reg = ::pluginregistration;

template <typename Request>
std::vector<prepare::ClaimRef> ClaimsOf(const Request& request) {
  std::vector<prepare::ClaimRef> out;
  out.reserve(request.claims_size());
  for (const auto& c : request.claims()) out.push_back({c.namespace_(), c.uid(), c.name()});
  return out;
}

// The two DRA versions have the same messages except Device.share_id (v1 only); one template
// serves both.
template <typename Api>
class DraService final : public Api::DRAPlugin::Service {
 public:
  explicit DraService(prepare::ClaimService* service) : service_(service) {}

  grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                    const typename Api::NodePrepareResourcesRequest* request,
                                    typename Api::NodePrepareResourcesResponse* response) override {
    try {
      // Work the kubelet no longer waits for (its 45 s deadline passed, or it cancelled) is
      // stopped: the claims not yet fetched or prepared are not.
      prepare::CallLimits limits;
      if (context->deadline() != std::chrono::system_clock::time_point::max()) {
        limits.deadline = absl::FromChrono(context->deadline());
      }
      limits.cancelled = [context] { return context->IsCancelled(); };
      const std::map<std::string, prepare::ClaimOutcome> outcomes =
          service_->Prepare(ClaimsOf(*request), limits);
      auto* claims = response->mutable_claims();
      for (const auto& [uid, outcome] : outcomes) {
        typename Api::NodePrepareResourceResponse& r = (*claims)[uid];
        if (!outcome.error.empty()) {
          r.set_error(outcome.error);
          continue;
        }
        for (const prepare::PreparedDevice& d : outcome.devices) {
          typename Api::Device* device = r.add_devices();
          for (const std::string& name : d.request_names) device->add_request_names(name);
          device->set_pool_name(d.pool);
          device->set_device_name(d.device);
          for (const std::string& id : d.cdi_device_ids) device->add_cdi_device_ids(id);
          if constexpr (Api::kHasShareId) {
            if (d.share_id) device->set_share_id(*d.share_id);
          }
        }
      }
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("prepare: ", e.what()));
    }
  }

  grpc::Status NodeUnprepareResources(
      grpc::ServerContext*, const typename Api::NodeUnprepareResourcesRequest* request,
      typename Api::NodeUnprepareResourcesResponse* response) override {
    try {
      const std::map<std::string, std::string> errors = service_->Unprepare(ClaimsOf(*request));
      auto* claims = response->mutable_claims();
      for (const auto& [uid, error] : errors) (*claims)[uid].set_error(error);
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("unprepare: ", e.what()));
    }
  }

 private:
  prepare::ClaimService* service_;
};

// One implementation for both health API versions. The first message is the full list; then
// the list again whenever the board changes and every health_interval, so the kubelet's
// per-device lease (health_timeout) never runs out while the stream is open.
template <typename Api>
class HealthService final : public Api::Service::Service {
 public:
  HealthService(KubeletPlugin* plugin, prepare::ClaimService* service)
      : plugin_(plugin), service_(service) {}

  grpc::Status NodeWatchResources(grpc::ServerContext* context, const typename Api::Request*,
                                  grpc::ServerWriter<typename Api::Response>* writer) override {
    try {
      const PluginOptions& opts = plugin_->options();
      const uint64_t epoch = plugin_->stream_epoch();
      const KubeletPlugin::StreamCount counted(plugin_);
      uint64_t seen = plugin_->health_changes();
      const int64_t timeout = std::max<int64_t>(1, absl::ToInt64Seconds(opts.health_timeout));
      do {
        typename Api::Response response;
        const int64_t now = absl::ToUnixSeconds(absl::Now());
        for (const health::DeviceStatus& d : Devices()) {
          typename Api::DeviceHealth* h = response.add_devices();
          h->mutable_device()->set_pool_name(d.pool);
          h->mutable_device()->set_device_name(d.device);
          h->set_health(d.healthy ? Api::kHealthy : Api::kUnhealthy);
          h->set_last_updated_time(now);
          h->set_health_check_timeout_seconds(timeout);
          h->set_message(d.message.substr(0, health::kMaxMessage));
        }
        if (context->IsCancelled() || !writer->Write(response)) break;
      } while (plugin_->WaitForHealth(
          opts.health_interval, epoch, [context] { return context->IsCancelled(); }, &seen));
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("health: ", e.what()));
    }
  }

 private:
  std::vector<health::DeviceStatus> Devices() const {
    if (const health::Board* board = plugin_->options().health_board) return board->Get().devices;
    std::vector<health::DeviceStatus> out;
    for (const auto& [pool, device] : service_->Devices()) out.push_back({pool, device, true, ""});
    return out;
  }

  KubeletPlugin* plugin_;
  prepare::ClaimService* service_;
};

class RegistrationService final : public reg::Registration::Service {
 public:
  RegistrationService(KubeletPlugin* plugin, std::string driver, std::string endpoint, bool health)
      : plugin_(plugin),
        driver_(std::move(driver)),
        endpoint_(std::move(endpoint)),
        health_(health) {}

  grpc::Status GetInfo(grpc::ServerContext*, const reg::InfoRequest*,
                       reg::PluginInfo* info) override {
    info->set_type("DRAPlugin");
    info->set_name(driver_);
    info->set_endpoint(endpoint_);
    // A 1.34+ kubelet takes the first entry it knows: v1, and v1beta1 for older kubelets.
    info->add_supported_versions(kDraV1);
    info->add_supported_versions(kDraV1beta1);
    // A 1.37 kubelet opens a health stream only for a version listed here (v1 when both are);
    // 1.34-1.36 open v1alpha1 whatever the list says.
    if (health_) {
      info->add_supported_versions(kDraHealthV1);
      info->add_supported_versions(kDraHealth);
    }
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const reg::RegistrationStatus* status,
                                        reg::RegistrationStatusResponse*) override {
    plugin_->OnRegistrationStatus(status->plugin_registered(), status->error());
    return grpc::Status::OK;
  }

 private:
  KubeletPlugin* plugin_;
  const std::string driver_;
  const std::string endpoint_;
  const bool health_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KubeletPlugin>> KubeletPlugin::Start(
    PluginOptions opts, prepare::ClaimService* service) {
  std::unique_ptr<KubeletPlugin> p(new KubeletPlugin(std::move(opts)));
  p->plugin_dir_ = absl::StrCat(p->opts_.kubelet_root, "/plugins/", p->opts_.driver);
  p->registry_dir_ = absl::StrCat(p->opts_.kubelet_root, "/plugins_registry");
  p->dra_socket_ = absl::StrCat(p->plugin_dir_, "/dra.sock");
  p->reg_socket_ = absl::StrCat(p->registry_dir_, "/", p->opts_.driver, "-reg.sock");
  if (absl::Status st = files::MakeDirectories(p->plugin_dir_, 0750); !st.ok()) return st;
  if (absl::Status st = files::MakeDirectories(p->registry_dir_, 0755); !st.ok()) return st;

  p->services_.push_back(std::make_unique<DraService<proto::DraV1>>(service));
  p->services_.push_back(std::make_unique<DraService<proto::DraV1beta1>>(service));
  // Without --dra-health the methods are simply not there: gRPC answers UNIMPLEMENTED.
  if (p->opts_.health) {
    p->services_.push_back(std::make_unique<HealthService<proto::HealthV1>>(p.get(), service));
    p->services_.push_back(
        std::make_unique<HealthService<proto::HealthV1alpha1>>(p.get(), service));
    p->wake_->plugin = p.get();
    if (p->opts_.health_board != nullptr) {
      p->opts_.health_board->Listen([wake = p->wake_] {
        std::lock_guard<std::mutex> lock(wake->mu);
        if (wake->plugin != nullptr) wake->plugin->OnHealthChanged();
      });
    }
  }
  std::vector<grpc::Service*> services;
  for (auto& s : p->services_) services.push_back(s.get());
  p->dra_server_ = std::make_unique<ServedSocket>(
      absl::StrCat("driver ", p->opts_.driver, ": DRA socket"), p->dra_socket_, services, 0750,
      std::chrono::seconds(5), [raw = p.get()] { raw->EndStreams(); });
  if (absl::Status st = p->dra_server_->Serve(); !st.ok()) return st;

  p->registration_service_ = std::make_unique<RegistrationService>(p.get(), p->opts_.driver,
                                                                   p->dra_socket_, p->opts_.health);
  p->reg_server_ = std::make_unique<ServedSocket>(
      absl::StrCat("driver ", p->opts_.driver, ": registration socket"), p->reg_socket_,
      std::vector<grpc::Service*>{p->registration_service_.get()}, 0755, std::chrono::seconds(5));
  if (absl::Status st = p->reg_server_->Serve(); !st.ok()) return st;  // ~KubeletPlugin stops
  spdlog::info("driver {}: serving DRA v1 and v1beta1{} on {}, registration on {}", p->opts_.driver,
               p->opts_.health ? ", health v1 and v1alpha1" : "", p->dra_socket_, p->reg_socket_);
  p->watcher_ = std::thread([raw = p.get()] { raw->Watch(); });
  return p;
}

// The service first: the kubelet dials it as soon as it sees the registration socket.
void KubeletPlugin::Watch() {
  const auto period = absl::ToChronoMilliseconds(opts_.registration_check);
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    if (KeepLock()) {
      dra_server_->Keep();
      reg_server_->Keep();
    }
    lock.lock();
  }
}

// Before the sockets: serving them again in a re-made plugin directory is for the instance that
// holds the lock there.
bool KubeletPlugin::KeepLock() {
  if (!opts_.keep_lock) return true;
  const absl::Status st = opts_.keep_lock();
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (st.ok()) {
    if (!lock_problem_.empty()) {
      spdlog::info("driver {}: holds its instance lock again (before: {})", opts_.driver,
                   lock_problem_);
      lock_problem_.clear();
    }
    return true;
  }
  if (lock_problem_ != st.message()) {
    spdlog::error("driver {}: {}; its sockets are not served again while another holds the lock",
                  opts_.driver, std::string(st.message()));
    lock_problem_ = std::string(st.message());
  }
  return false;
}

std::vector<std::string> KubeletPlugin::SocketProblems() const {
  std::vector<std::string> out;
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (!lock_problem_.empty())
      out.push_back(absl::StrCat("driver ", opts_.driver, ": ", lock_problem_));
  }
  for (const ServedSocket* s : {dra_server_.get(), reg_server_.get()}) {
    if (std::string p = s->Problem(); !p.empty()) out.push_back(std::move(p));
  }
  return out;
}

bool KubeletPlugin::SleepUnlessStopping(absl::Duration d, uint64_t epoch,
                                        const std::function<bool()>& cancelled) {
  // gRPC's sync API has no callback for a cancelled call, so it is polled in short slices: a
  // stream that began after EndStreams (the kubelet re-opened it on its connection to a server
  // being replaced) ends when the replacement's grace cancels it, not an interval later.
  constexpr auto kSlice = std::chrono::milliseconds(100);
  const auto until = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(d);
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return true;
    if (stop_cv_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(until - now, kSlice),
                          [&] { return stopping_ || stream_epoch_ != epoch; })) {
      return false;
    }
    lock.unlock();
    const bool gone = cancelled();
    lock.lock();
    if (gone) return false;
  }
}

bool KubeletPlugin::WaitForHealth(absl::Duration d, uint64_t epoch,
                                  const std::function<bool()>& cancelled, uint64_t* seen) {
  constexpr auto kSlice = std::chrono::milliseconds(100);
  const auto until = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(d);
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (true) {
    if (health_changes_ != *seen) {
      *seen = health_changes_;
      return !stopping_ && stream_epoch_ == epoch;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return true;
    if (stop_cv_.wait_for(
            lock, std::min<std::chrono::steady_clock::duration>(until - now, kSlice),
            [&] { return stopping_ || stream_epoch_ != epoch || health_changes_ != *seen; })) {
      if (stopping_ || stream_epoch_ != epoch) return false;
      continue;  // the board changed: send now
    }
    lock.unlock();
    const bool gone = cancelled();
    lock.lock();
    if (gone) return false;
  }
}

uint64_t KubeletPlugin::health_changes() const {
  std::lock_guard<std::mutex> lock(stop_mu_);
  return health_changes_;
}

void KubeletPlugin::OnHealthChanged() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    ++health_changes_;
  }
  stop_cv_.notify_all();
}

uint64_t KubeletPlugin::stream_epoch() const {
  std::lock_guard<std::mutex> lock(stop_mu_);
  return stream_epoch_;
}

void KubeletPlugin::EndStreams() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    ++stream_epoch_;
  }
  stop_cv_.notify_all();
}

void KubeletPlugin::OnRegistrationStatus(bool registered, const std::string& error) {
  if (registered) {
    const int n = ++registrations_;
    spdlog::info("driver {}: registered with the kubelet{}", opts_.driver,
                 n > 1 ? absl::StrCat(" (again, ", n, " times)") : "");
  } else {
    spdlog::error("driver {}: the kubelet refused the registration: {}", opts_.driver, error);
  }
}

void KubeletPlugin::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    wake_->plugin = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  // Registration first: the kubelet deregisters before the service goes.
  if (reg_server_ != nullptr) reg_server_->Stop();
  if (dra_server_ != nullptr) dra_server_->Stop();
}

KubeletPlugin::KubeletPlugin(PluginOptions opts) : opts_(std::move(opts)) {}

KubeletPlugin::~KubeletPlugin() { Stop(); }

}  // namespace topodra::plugin
