#include "test/kubelet_sim/health_sim.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/drahealth/health_api.h"
#include "test/kubelet_sim/grpc_util.h"

namespace topodra::testing {

std::string PickHealthService(const std::vector<std::string>& supported, HealthKubelet kubelet) {
  if (kubelet == HealthKubelet::k134_136) return kHealthV1alpha1;
  auto has = [&](const char* v) {
    return std::find(supported.begin(), supported.end(), v) != supported.end();
  };
  if (has(kHealthV1)) return kHealthV1;
  if (has(kHealthV1alpha1)) return kHealthV1alpha1;
  return "";
}

class HealthWatcher::Impl {
 public:
  virtual ~Impl() = default;
  virtual void Cancel() = 0;

  std::mutex mu;
  std::condition_variable cv;
  HealthCache cache;
  int messages = 0;
  std::string ended;
  std::thread reader;
};

namespace {

constexpr int64_t kDefaultTimeout = 30;

template <typename Api>
class Watch final : public HealthWatcher::Impl {
 public:
  explicit Watch(const std::string& socket)
      : stub_(Api::Service::NewStub(
            grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()))) {
    reader = std::thread([this] { Read(); });
  }
  ~Watch() override {
    Cancel();
    if (reader.joinable()) reader.join();
  }
  void Cancel() override { ctx_.TryCancel(); }

 private:
  static const char* Health(int h) {
    if (h == Api::kHealthy) return "Healthy";
    if (h == Api::kUnhealthy) return "Unhealthy";
    return "Unknown";
  }
  void Read() {
    auto stream = stub_->NodeWatchResources(&ctx_, typename Api::Request());
    typename Api::Response r;
    while (stream->Read(&r)) {
      const absl::Time now = absl::Now();
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& d : r.devices()) {
        DeviceHealthView& v =
            cache[absl::StrCat(d.device().pool_name(), "/", d.device().device_name())];
        v.health = Health(d.health());
        v.message = d.message();
        if (v.message.size() > 1024) v.message = v.message.substr(0, 1021) + "...";
        v.timeout_seconds = d.health_check_timeout_seconds() > 0 ? d.health_check_timeout_seconds()
                                                                 : kDefaultTimeout;
        v.received = now;
      }
      ++messages;
      cv.notify_all();
    }
    const grpc::Status st = stream->Finish();
    std::lock_guard<std::mutex> lock(mu);
    cache.clear();  // the kubelet forgets the driver's health when its stream ends
    ended = sim::GrpcResult(st);
    cv.notify_all();
  }

  std::unique_ptr<typename Api::Service::Stub> stub_;
  grpc::ClientContext ctx_;
};

HealthCache Expired(HealthCache cache, absl::Time now) {
  for (auto& [key, v] : cache) {
    if (now - v.received > absl::Seconds(v.timeout_seconds)) v.health = "Unknown";
  }
  return cache;
}

std::string Describe(const HealthCache& cache) {
  return absl::StrJoin(cache, "; ", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.first, " ", kv.second.health, " \"", kv.second.message, "\"");
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<HealthWatcher>> HealthWatcher::Start(const std::string& socket,
                                                                    const std::string& service) {
  std::unique_ptr<Impl> impl;
  if (service == kHealthV1) {
    impl = std::make_unique<Watch<proto::HealthV1>>(socket);
  } else if (service == kHealthV1alpha1) {
    impl = std::make_unique<Watch<proto::HealthV1alpha1>>(socket);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown health service \"", service, "\""));
  }
  return std::unique_ptr<HealthWatcher>(new HealthWatcher(std::move(impl)));
}

HealthWatcher::HealthWatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HealthWatcher::~HealthWatcher() = default;

HealthCache HealthWatcher::Cache(absl::Time now) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return Expired(impl_->cache, now);
}

absl::StatusOr<HealthCache> HealthWatcher::WaitFor(
    const std::function<bool(const HealthCache&)>& done, absl::Duration timeout) {
  const auto until = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  std::unique_lock<std::mutex> lock(impl_->mu);
  while (true) {
    HealthCache now = Expired(impl_->cache, absl::Now());
    if (done(now)) return now;
    if (!impl_->ended.empty()) {
      return absl::UnavailableError(absl::StrCat("health stream ended: ", impl_->ended));
    }
    if (impl_->cv.wait_until(lock, until) == std::cv_status::timeout) {
      HealthCache last = Expired(impl_->cache, absl::Now());
      if (done(last)) return last;
      return absl::DeadlineExceededError(absl::StrCat("health not as expected after ",
                                                      absl::FormatDuration(timeout),
                                                      "; last: ", Describe(last)));
    }
  }
}

absl::StatusOr<HealthCache> HealthWatcher::WaitForMessages(int n, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                          [&] { return impl_->messages >= n || !impl_->ended.empty(); })) {
    return absl::DeadlineExceededError(
        absl::StrCat("fewer than ", n, " health messages after ", absl::FormatDuration(timeout)));
  }
  if (impl_->messages < n) {
    return absl::UnavailableError(absl::StrCat("health stream ended: ", impl_->ended));
  }
  return Expired(impl_->cache, absl::Now());
}

int HealthWatcher::messages() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->messages;
}

std::string HealthWatcher::ended() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->ended;
}

}  // namespace topodra::testing
