#include "driver/publish/resource_slice_api.h"

#include "absl/strings/str_cat.h"
#include "common/json_text.h"

namespace topodra::publish {
namespace {

constexpr char kFieldManager[] = "topodra";

std::string Selector(const std::string& driver, const std::string& node) {
  return kube::UrlEncode(absl::StrCat("spec.driver=", driver, ",spec.nodeName=", node));
}

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

absl::StatusOr<ResourceSliceApi::SliceList> ResourceSliceApi::List(const std::string& driver,
                                                                   const std::string& node) {
  absl::StatusOr<kube::Response> r;
  for (const char* version : {"v1", "v1beta2"}) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      version_ = version;
    }
    r = client_->Get(absl::StrCat(Collection(), "?fieldSelector=", Selector(driver, node)));
    if (r.ok() || !IsHttp404(r.status())) break;
  }
  if (!r.ok()) return r.status();
  SliceList out;
  const nlohmann::json& body = r->body;
  if (!body.is_object() || !body.contains("items") || !body["items"].is_array()) {
    return absl::InternalError(
        absl::StrCat("list of resourceslices: unexpected body ", DumpJson(body).substr(0, 200)));
  }
  for (const nlohmann::json& item : body["items"]) out.items.push_back(item);
  out.resource_version = StringField(Field(body, "metadata"), "resourceVersion");
  return out;
}

absl::Status ResourceSliceApi::Watch(const std::string& driver, const std::string& node,
                                     const std::string& resource_version, int timeout_seconds,
                                     const kube::WatchHandler& handler,
                                     const std::atomic<bool>* stop) {
  const std::string path = absl::StrCat(
      Collection(), "?watch=true&allowWatchBookmarks=true&fieldSelector=", Selector(driver, node),
      "&resourceVersion=", kube::UrlEncode(resource_version), "&timeoutSeconds=", timeout_seconds);
  return client_->Watch(path, handler, stop);
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
