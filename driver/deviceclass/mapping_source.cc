#include "driver/deviceclass/mapping_source.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "driver/kube/informer.h"
#include "driver/kube/rest_client.h"

namespace topodra::deviceclass {
namespace {

using nlohmann::json;

class ApiMappingSource : public MappingSource, private kube::InformerHandler {
 public:
  explicit ApiMappingSource(kube::RestClient* client)
      : informer_(client, Options(), static_cast<kube::InformerHandler*>(this)) {}
  ~ApiMappingSource() override { Stop(); }

  absl::StatusOr<std::vector<Mapping>> List() override {
    if (absl::Status st = informer_.List(); !st.ok()) return st;
    delivered_ = Current();
    return delivered_;
  }

  void Watch(OnChange on_change) override {
    on_change_ = std::move(on_change);
    thread_ = std::thread([this] { informer_.Run(); });
  }

  void Stop() override {
    informer_.Stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  static kube::InformerOptions Options() {
    kube::InformerOptions o;
    o.collections = {"/apis/resource.k8s.io/v1/deviceclasses",
                     "/apis/resource.k8s.io/v1beta2/deviceclasses",
                     "/apis/resource.k8s.io/v1beta1/deviceclasses"};
    o.refused_max_backoff = std::chrono::milliseconds(2000);
    return o;
  }

  // Loop thread (or List's caller, before the loop runs) from here on.
  absl::Status OnList(std::vector<json> items) override {
    mappings_.clear();
    for (const json& item : items) Put(item);
    return absl::OkStatus();
  }

  Next OnEvent(const std::string& type, const json& object) override {
    if (type == "DELETED") {
      const json* meta =
          object.is_object() && object.contains("metadata") ? &object["metadata"] : nullptr;
      if (meta != nullptr && meta->is_object() && meta->contains("name") &&
          (*meta)["name"].is_string()) {
        mappings_.erase((*meta)["name"].get<std::string>());
      }
    } else {
      Put(object);
    }
    Deliver();
    return Next::kContinue;
  }

  absl::Status Sync() override {
    Deliver();
    return absl::OkStatus();
  }

  void Deliver() {
    std::vector<Mapping> now = Current();
    if (now != delivered_ && on_change_) on_change_(now);
    delivered_ = std::move(now);
  }

  void OnResult(const absl::Status& result) override {
    const std::string msg = result.ok() ? "" : std::string(result.message());
    if (msg == last_error_) return;
    if (!result.ok()) {
      spdlog::warn(
          "DeviceClasses (extended resources of the device plugins): {}; retrying with "
          "backoff, the last ones seen still count",
          msg);
    } else {
      spdlog::info("DeviceClasses (extended resources of the device plugins): watching again");
    }
    last_error_ = msg;
  }

  // A class that does not parse (the API server validated it) is left out.
  void Put(const json& object) {
    absl::StatusOr<std::optional<Mapping>> m = MappingOf(object);
    if (!m.ok()) {
      spdlog::warn("{}; left out of the extended resource check",
                   std::string(m.status().message()));
      return;
    }
    const std::string name = object["metadata"]["name"].get<std::string>();
    if (m->has_value()) {
      mappings_[name] = **m;
    } else {
      mappings_.erase(name);
    }
  }

  std::vector<Mapping> Current() const {
    std::vector<Mapping> out;
    for (const auto& [_, m] : mappings_) out.push_back(m);
    std::sort(out.begin(), out.end());
    return out;
  }

  kube::Informer informer_;
  std::thread thread_;
  OnChange on_change_;
  std::map<std::string, Mapping> mappings_;  // class name -> mapping
  std::vector<Mapping> delivered_;
  std::string last_error_;
};

}  // namespace

std::unique_ptr<MappingSource> NewApiMappingSource(kube::RestClient* client) {
  return std::make_unique<ApiMappingSource>(client);
}

}  // namespace topodra::deviceclass
