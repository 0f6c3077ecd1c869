#include "driver/publish/resource_slice_api.h"

#include "absl/strings/str_cat.h"
#include "common/json_text.h"

namespace topodra::publish {
namespace {

constexpr char kFieldManager[] = "topodra";

bool IsHttp404(const absl::Status& s) { return kube::HttpCodeOf(s) == 404; }

}  // namespace

std::string ResourceSliceApi::api_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::StrCat("resource.k8s.io/", version_);
}

std::string ResourceSliceApi::Collection() const {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::StrCat("/apis/resource.k8s.io/", version_, "/resourceslices");
}

std::vector<std::string> ResourceSliceApi::Collections() {
  return {"/apis/resource.k8s.io/v1/resourceslices",
          "/apis/resource.k8s.io/v1beta2/resourceslices"};
}

void ResourceSliceApi::UseCollection(const std::string& collection) {
  // "/apis/resource.k8s.io/<version>/resourceslices"
  const std::string prefix = "/apis/resource.k8s.io/";
  if (collection.rfind(prefix, 0) != 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  version_ = collection.substr(prefix.size(), collection.find('/', prefix.size()) - prefix.size());
}

absl::StatusOr<kube::Response> ResourceSliceApi::Create(const nlohmann::json& slice, bool dry_run) {
  return client_->Post(absl::StrCat(Collection(), "?fieldManager=", kFieldManager,
                                    "&fieldValidation=Strict", dry_run ? "&dryRun=All" : ""),
                       slice);
}

absl::StatusOr<kube::Response> ResourceSliceApi::Update(const nlohmann::json& slice) {
  const std::string name = StringField(Field(slice, "metadata"), "name");
  return client_->Put(absl::StrCat(Collection(), "/", kube::UrlEncode(name),
                                   "?fieldManager=", kFieldManager, "&fieldValidation=Strict"),
                      slice);
}

absl::Status ResourceSliceApi::Delete(const std::string& name, const std::string& uid,
                                      const std::string& resource_version) {
  nlohmann::json options{
      {"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", "Background"}};
  if (!uid.empty()) {
    options["preconditions"] = {{"uid", uid}, {"resourceVersion", resource_version}};
  }
  absl::StatusOr<kube::Response> r =
      client_->Delete(absl::StrCat(Collection(), "/", kube::UrlEncode(name)), options);
  if (!r.ok() && !IsHttp404(r.status())) return r.status();
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResourceSliceApi::NodeUid(const std::string& node) {
  absl::StatusOr<kube::Response> r = client_->Get("/api/v1/nodes/" + kube::UrlEncode(node));
  if (!r.ok()) return r.status();
  const std::string uid = StringField(Field(r->body, "metadata"), "uid");
  if (uid.empty()) return absl::InternalError(absl::StrCat("node \"", node, "\" has no uid"));
  return uid;
}

}  // namespace topodra::publish
