// A small in-memory API server behind kube::RestClient, enough for the node's slice publishers:
// list, create (name or generateName), update, delete of ResourceSlices, a Node object, and a
// watch that only waits. Requests are counted. (A fuller fake with watch events lives with the
// kube client; switch to it when it lands.)
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "driver/kube/rest_client.h"

namespace topodra::node::testing {

class StubRestClient : public kube::RestClient {
 public:
  absl::StatusOr<kube::Response> Get(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_;
    if (absl::StartsWith(path, "/api/v1/nodes/")) {
      return Ok({{"metadata", {{"name", path.substr(14)}, {"uid", "node-uid"}}}});
    }
    if (absl::StrContains(path, "/resourceslices")) {
      nlohmann::json items = nlohmann::json::array();
      for (const auto& [name, obj] : slices_) {
        if (absl::StrContains(path, obj["spec"].value("driver", "?"))) items.push_back(obj);
      }
      return Ok({{"items", items}, {"metadata", {{"resourceVersion", std::to_string(rv_)}}}});
    }
    return absl::NotFoundError(absl::StrCat("GET ", path, ": HTTP 404 Not Found"));
  }
  absl::StatusOr<kube::Response> Post(const std::string& path,
                                      const nlohmann::json& body) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_;
    nlohmann::json obj = body;
    nlohmann::json& meta = obj["metadata"];
    if (!meta.contains("name"))
      meta["name"] = absl::StrCat(meta.value("generateName", "x-"), ++rv_);
    meta["uid"] = absl::StrCat("uid-", ++rv_);
    meta["resourceVersion"] = std::to_string(rv_);
    if (!absl::StrContains(path, "dryRun")) slices_[meta["name"].get<std::string>()] = obj;
    return Ok(obj);
  }
  absl::StatusOr<kube::Response> Put(const std::string& /*path*/,
                                     const nlohmann::json& body) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_;
    nlohmann::json obj = body;
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    slices_[obj["metadata"]["name"].get<std::string>()] = obj;
    return Ok(obj);
  }
  absl::StatusOr<kube::Response> Delete(const std::string& path,
                                        const nlohmann::json& /*body*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_;
    slices_.erase(path.substr(path.rfind('/') + 1));
    ++rv_;
    return Ok({});
  }
  absl::Status Watch(const std::string& /*path*/, const kube::WatchHandler& /*on_event*/,
                     const std::atomic<bool>* stop) override {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (std::chrono::steady_clock::now() < end && (stop == nullptr || !stop->load())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return absl::OkStatus();
  }

  // Devices published for `driver`, over all its slices.
  size_t Devices(const std::string& driver) const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [name, obj] : slices_) {
      if (obj["spec"].value("driver", "") == driver && obj["spec"].contains("devices")) {
        n += obj["spec"]["devices"].size();
      }
    }
    return n;
  }
  int requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  static kube::Response Ok(nlohmann::json body) {
    kube::Response r;
    r.http_code = 200;
    r.body = std::move(body);
    return r;
  }

  mutable std::mutex mu_;
  std::map<std::string, nlohmann::json> slices_;
  int64_t rv_ = 1;
  int requests_ = 0;
};

}  // namespace topodra::node::testing
