#include "driver/kube/informer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace topodra::kube {
namespace {

using nlohmann::json;

// Never throws: events and lists come from outside.
std::string StringOf(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto v = j.find(key);
  return v != j.end() && v->is_string() ? v->get<std::string>() : "";
}

std::string StringAt(const json& j, const char* object, const char* key) {
  if (!j.is_object()) return "";
  auto o = j.find(object);
  if (o == j.end() || !o->is_object()) return "";
  auto v = o->find(key);
  return v != o->end() && v->is_string() ? v->get<std::string>() : "";
}

// Nothing listens where the API server should be (the client's text, no HTTP answer).
bool Refused(const absl::Status& st) {
  return !HttpCodeOf(st) && st.code() == absl::StatusCode::kUnavailable &&
         absl::StrContains(st.message(), "Couldn't connect");
}

void RealWait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
              std::chrono::milliseconds d, const std::function<bool()>& done) {
  cv.wait_for(lock, d, done);
}

}  // namespace

Informer::Informer(RestClient* client, InformerOptions options, InformerHandler* handler)
    : client_(client), opts_(std::move(options)), handler_(handler) {
  if (!opts_.wait) opts_.wait = RealWait;
  if (!opts_.collections.empty()) collection_ = opts_.collections.front();
}

std::string Informer::collection() const {
  std::lock_guard<std::mutex> lock(mu_);
  return collection_;
}

std::string Informer::resource_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_version_;
}

void Informer::Stop() {
  stopped_ = true;
  Wake();
}

void Informer::Wake() {
  {
    // Under the lock, so a backoff wait cannot miss it between its test and its sleep.
    std::lock_guard<std::mutex> lock(mu_);
    interrupt_ = true;
  }
  cv_.notify_all();
  client_->WakeWatches();
}

absl::Status Informer::List() {
  const std::string query =
      opts_.field_selector.empty() ? "" : "?fieldSelector=" + UrlEncode(opts_.field_selector);
  absl::StatusOr<Response> r = absl::NotFoundError("no collection to list");
  std::string collection;
  for (const std::string& c : opts_.collections) {
    collection = c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      collection_ = c;
    }
    r = client_->Get(c + query);
    if (r.ok() || HttpCodeOf(r.status()) != 404) break;
  }
  if (!r.ok()) return handler_->OnListError(r.status());
  const json& body = r->body;
  if (!body.is_object() || !body.contains("items") || !body["items"].is_array()) {
    return absl::InternalError(
        absl::StrCat("list of ", collection.substr(collection.rfind('/') + 1), ": unexpected body ",
                     body.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 200)));
  }
  std::vector<json> items(body["items"].begin(), body["items"].end());
  if (absl::Status st = handler_->OnList(std::move(items)); !st.ok()) return st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    resource_version_ = StringAt(body, "metadata", "resourceVersion");
  }
  need_list_ = false;
  return absl::OkStatus();
}

bool Informer::OnWatchEvent(const json& event) {
  watch_delivered_ = true;
  const std::string type = StringOf(event, "type");
  if (type == "ERROR") {
    // 410 Gone / Expired: our resourceVersion is too old (or the store was wiped).
    need_list_ = true;
    return false;
  }
  const json& object = event.is_object() && event.contains("object") ? event["object"] : json();
  const std::string rv = StringAt(object, "metadata", "resourceVersion");
  if (!rv.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    resource_version_ = rv;
  }
  if (type == "BOOKMARK") return true;
  switch (handler_->OnEvent(type, object)) {
    case InformerHandler::Next::kContinue:
      return true;
    case InformerHandler::Next::kRelist:
      need_list_ = true;
      return false;
    case InformerHandler::Next::kSync:
      return false;
  }
  return true;
}

absl::Status Informer::Watch() {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    path = absl::StrCat(collection_, "?watch=true&allowWatchBookmarks=true");
    if (!opts_.field_selector.empty()) {
      absl::StrAppend(&path, "&fieldSelector=", UrlEncode(opts_.field_selector));
    }
    absl::StrAppend(&path, "&resourceVersion=", UrlEncode(resource_version_),
                    "&timeoutSeconds=", opts_.watch_timeout_seconds);
  }
  watch_delivered_ = false;
  absl::Status st = client_->Watch(
      path, [this](const json& e) { return OnWatchEvent(e); }, &interrupt_);
  // A stream that ended normally resumes from the last resourceVersion; one that failed starts
  // again from a list.
  if (!st.ok() || resource_version().empty()) need_list_ = true;
  return st;
}

bool Informer::Backoff(std::chrono::milliseconds* backoff, const absl::Status& error) {
  const bool refused = opts_.refused_max_backoff.count() > 0 && Refused(error);
  const std::chrono::milliseconds wait =
      refused ? std::min(*backoff, opts_.refused_max_backoff) : *backoff;
  {
    std::unique_lock<std::mutex> lock(mu_);
    opts_.wait(lock, cv_, wait, [this] { return interrupt_.load(); });
  }
  // While nothing listens the backoff stays small too, so the first error of a server that is
  // still starting (503, 429) does not inherit what a minute of refused connections grew.
  *backoff = std::min(*backoff * 2, refused ? std::min(opts_.refused_max_backoff, opts_.max_backoff)
                                            : opts_.max_backoff);
  return !stopped_.load();
}

void Informer::Run() {
  std::chrono::milliseconds backoff = opts_.initial_backoff;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      interrupt_ = stopped_.load();
    }
    if (stopped_) break;
    absl::Status st = absl::OkStatus();
    if (need_list_) st = List();
    if (st.ok()) st = handler_->Sync();
    if (!st.ok()) {
      if (stopped_) break;
      handler_->OnResult(st);
      if (!Backoff(&backoff, st)) break;
      continue;
    }
    handler_->OnResult(st);
    if (interrupt_) continue;  // woken while syncing: there is new work already
    st = Watch();
    // The backoff starts over once a watch was up (it delivered a line or ran to its end): a
    // server that lists but refuses every watch (RBAC without watch) is not hammered.
    if (st.ok() || watch_delivered_) backoff = opts_.initial_backoff;
    if (st.ok() || stopped_) continue;
    handler_->OnResult(st);
    if (!Backoff(&backoff, st)) break;
  }
}

}  // namespace topodra::kube
