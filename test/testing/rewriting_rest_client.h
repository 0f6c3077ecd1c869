// A RestClient that passes every request on to another, rewriting the bodies of writes (POST and
// PUT) on the way: an API server that drops fields a feature gate turns off, as the daemon's
// dry-run probes may not see it. Tests derive from it and say what the server drops.
#pragma once

#include <atomic>
#include <string>

#include "driver/kube/rest_client.h"
#include "nlohmann/json.hpp"

namespace topodra::testing {

class RewritingRestClient : public kube::RestClient {
 public:
  explicit RewritingRestClient(kube::RestClient* inner) : inner_(inner) {}
  absl::StatusOr<kube::Response> Get(const std::string& path) override { return inner_->Get(path); }
  absl::StatusOr<kube::Response> GetWithin(const std::string& path,
                                           const kube::RequestLimits& limits) override {
    return inner_->GetWithin(path, limits);
  }
  absl::StatusOr<kube::Response> Post(const std::string& path,
                                      const nlohmann::json& body) override {
    return inner_->Post(path, Rewrite(path, body));
  }
  absl::StatusOr<kube::Response> Put(const std::string& path, const nlohmann::json& body) override {
    return inner_->Put(path, Rewrite(path, body));
  }
  absl::StatusOr<kube::Response> Delete(const std::string& path,
                                        const nlohmann::json& body) override {
    return inner_->Delete(path, body);
  }
  absl::Status Watch(const std::string& path, const kube::WatchHandler& on_event,
                     const std::atomic<bool>* stop) override {
    return inner_->Watch(path, on_event, stop);
  }
  void WakeWatches() override { inner_->WakeWatches(); }

 protected:
  // The body as the server keeps it; `path` tells a dry run (dryRun=All) from a write.
  virtual nlohmann::json Rewrite(const std::string& path, nlohmann::json body) = 0;

 private:
  kube::RestClient* inner_;
};

// Drops every device's taints from the writes it passes on (not from dry runs): an API server
// whose DRADeviceTaints gate is off, as a probe cannot see it (or servers behind one address that
// disagree).
class TaintDroppingClient : public RewritingRestClient {
 public:
  using RewritingRestClient::RewritingRestClient;

 protected:
  nlohmann::json Rewrite(const std::string& path, nlohmann::json body) override {
    if (path.find("dryRun=") != std::string::npos || !body.contains("spec")) return body;
    nlohmann::json& devices = body["spec"]["devices"];
    if (devices.is_array()) {
      for (nlohmann::json& d : devices) d.erase("taints");
    }
    return body;
  }
};

}  // namespace topodra::testing
