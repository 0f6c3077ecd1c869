#include "test/testing/fake_rest_client.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace topodra::testing {
namespace {

using nlohmann::json;

std::string UrlDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    int hex = 0;
    if (s[i] == '%' && i + 2 < s.size() && absl::SimpleHexAtoi(s.substr(i + 1, 2), &hex)) {
      out.push_back(static_cast<char>(hex));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

const json& At(const json& j, const std::string& key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string Text(const json& j) {
  if (j.is_null()) return "";
  return j.is_string() ? j.get<std::string>() : j.dump();
}

std::string Meta(const json& obj, const char* key) { return Text(At(At(obj, "metadata"), key)); }

std::string ReasonOf(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "";
  }
}

// An error as the libcurl client reports the server's v1 Status.
absl::Status Error(const std::string& verb, const std::string& path, int code,
                   const std::string& reason, const std::string& message) {
  return kube::HttpError(code, reason,
                         absl::StrCat(verb == "WATCH" ? "GET" : verb, " ", path, ": HTTP ", code,
                                      " ", reason, ": ", message));
}

std::string Plural(const std::string& collection) {
  return collection.substr(collection.rfind('/') + 1);
}

// "/apis/topodra.io/v1alpha1/reservations" -> "topodra.io/v1alpha1"; "/api/v1/nodes" -> "v1".
std::string ApiVersion(const std::string& collection) {
  std::vector<std::string> parts = absl::StrSplit(collection, '/', absl::SkipEmpty());
  if (parts.size() == 3 && parts[0] == "api") return parts[1];
  if (parts.size() == 4) return parts[1] + "/" + parts[2];
  return "";
}

json ExpiredStatus(const std::string& message) {
  return {{"type", "ERROR"},
          {"object",
           {{"kind", "Status"},
            {"apiVersion", "v1"},
            {"metadata", json::object()},
            {"status", "Failure"},
            {"message", message},
            {"reason", "Expired"},
            {"code", 410}}}};
}

// Selector terms "key=value", "key==value", "key!=value"; `value_of(key)` gives the object's.
template <typename ValueOf, typename Has>
bool Matches(const std::string& selector, ValueOf value_of, Has has) {
  for (absl::string_view term : absl::StrSplit(selector, ',', absl::SkipEmpty())) {
    std::string t(term);
    size_t op = t.find("!=");
    if (op != std::string::npos) {
      if (value_of(t.substr(0, op)) == t.substr(op + 2)) return false;
      continue;
    }
    op = t.find('=');
    if (op == std::string::npos) {  // label existence: "k", "!k"
      if (!t.empty() && t[0] == '!' ? has(t.substr(1)) : !has(t)) return false;
      continue;
    }
    const size_t value = t.compare(op, 2, "==") == 0 ? op + 2 : op + 1;
    if (value_of(t.substr(0, op)) != t.substr(value)) return false;
  }
  return true;
}

}  // namespace

bool FieldSelectorMatches(const std::string& selector, const json& object) {
  auto value_of = [&](const std::string& key) {
    const json* j = &object;
    for (absl::string_view part : absl::StrSplit(key, '.')) j = &At(*j, std::string(part));
    return Text(*j);
  };
  return Matches(selector, value_of,
                 [&](const std::string& key) { return !value_of(key).empty(); });
}

bool LabelSelectorMatches(const std::string& selector, const json& object) {
  const json& labels = At(At(object, "metadata"), "labels");
  return Matches(
      selector, [&](const std::string& key) { return Text(At(labels, key)); },
      [&](const std::string& key) { return labels.is_object() && labels.contains(key); });
}

void FakeRestClient::Serve(const std::string& collection, const std::string& kind,
                           bool status_subresource) {
  std::lock_guard<std::mutex> lock(mu_);
  Collection& c = collections_[collection];
  c.kind = kind;
  c.status_subresource = status_subresource;
  Changed();
}

void FakeRestClient::Unserve(const std::string& collection) {
  std::lock_guard<std::mutex> lock(mu_);
  collections_.erase(collection);
  for (OpenWatch* w : watches_) {
    if (w->collection == collection) w->end = true;
  }
  Changed();
}

std::optional<json> FakeRestClient::Object(const std::string& collection,
                                           const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto c = collections_.find(collection);
  if (c == collections_.end()) return std::nullopt;
  auto it = c->second.objects.find(name);
  if (it == c->second.objects.end()) return std::nullopt;
  return it->second;
}

std::vector<json> FakeRestClient::Objects(const std::string& collection) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<json> out;
  auto c = collections_.find(collection);
  if (c == collections_.end()) return out;
  for (const auto& [name, obj] : c->second.objects) out.push_back(obj);
  return out;
}

uint64_t FakeRestClient::resource_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rv_;
}

void FakeRestClient::FailNext(int n, int http_code, const std::string& path_part) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.push_back({n, http_code, path_part});
}

void FakeRestClient::Refuse(bool refuse) {
  std::lock_guard<std::mutex> lock(mu_);
  refuse_ = refuse;
  Changed();
}

void FakeRestClient::Compact() {
  std::lock_guard<std::mutex> lock(mu_);
  history_.clear();
  oldest_rv_ = rv_;
}

void FakeRestClient::ExpireWatches() {
  std::lock_guard<std::mutex> lock(mu_);
  for (OpenWatch* w : watches_) {
    w->queue.push_back(ExpiredStatus("the watch fell behind: too old resource version"));
    w->end = true;
  }
  Changed();
}

void FakeRestClient::EndWatches() {
  std::lock_guard<std::mutex> lock(mu_);
  for (OpenWatch* w : watches_) w->end = true;
  Changed();
}

void FakeRestClient::SendBookmarks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (OpenWatch* w : watches_) {
    if (!w->bookmarks) continue;
    w->queue.push_back({{"type", "BOOKMARK"},
                        {"object",
                         {{"kind", collections_[w->collection].kind},
                          {"metadata", {{"resourceVersion", std::to_string(rv_)}}}}}});
  }
  Changed();
}

void FakeRestClient::Restart(uint64_t next_resource_version) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [path, c] : collections_) c.objects.clear();
  history_.clear();
  if (next_resource_version > 0) rv_ = next_resource_version;
  oldest_rv_ = rv_;
  for (OpenWatch* w : watches_) {
    w->queue.clear();
    w->broken = absl::UnavailableError("the API server restarted: connection reset");
  }
  Changed();
}

void FakeRestClient::SetClock(std::function<absl::Time()> now) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ = std::move(now);
}

void FakeRestClient::SetBeforeRequest(
    std::function<void(const std::string& verb, const std::string& path)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  before_ = std::move(hook);
}

std::vector<FakeRestClient::Request> FakeRestClient::Requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

std::vector<std::string> FakeRestClient::RequestLines() const {
  std::vector<std::string> out;
  for (const Request& r : Requests()) out.push_back(absl::StrCat(r.verb, " ", r.path, " ", r.code));
  return out;
}

void FakeRestClient::ClearRequests() {
  std::lock_guard<std::mutex> lock(mu_);
  requests_.clear();
}

int FakeRestClient::open_watches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(watches_.size());
}

bool FakeRestClient::Await(const std::function<bool()>& condition,
                           std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen = changes_;
    }
    if (condition()) return true;
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return changes_ != seen; })) {
      lock.unlock();
      return condition();
    }
  }
}

bool FakeRestClient::WatchesIdle(int n) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(watches_.size()) != n) return false;
  for (const OpenWatch* w : watches_) {
    if (!w->waiting || !w->queue.empty() || w->end || !w->broken.ok() ||
        (w->stop != nullptr && w->stop->load())) {
      return false;
    }
  }
  return true;
}

void FakeRestClient::Changed() {
  ++changes_;
  cv_.notify_all();
}

void FakeRestClient::WakeWatches() {
  std::lock_guard<std::mutex> lock(mu_);
  Changed();
}

void FakeRestClient::Record(const std::string& verb, const std::string& path, int code) {
  requests_.push_back({verb, path, code});
  Changed();
}

absl::Status FakeRestClient::Fault(const std::string& verb, const std::string& path) {
  if (refuse_) {
    Record(verb, path, 0);
    return absl::UnavailableError(
        absl::StrCat(verb == "WATCH" ? "GET" : verb, " ", path, ": Couldn't connect to server"));
  }
  for (Failure& f : failures_) {
    if (f.left <= 0 || path.find(f.path_part) == std::string::npos) continue;
    --f.left;
    Record(verb, path, f.code);
    return Error(verb, path, f.code, ReasonOf(f.code), "injected failure");
  }
  return absl::OkStatus();
}

absl::StatusOr<FakeRestClient::Target> FakeRestClient::Parse(const std::string& verb,
                                                             const std::string& path) const {
  Target t;
  const size_t q = path.find('?');
  const std::string base = path.substr(0, q);
  if (q != std::string::npos) {
    for (absl::string_view kv : absl::StrSplit(path.substr(q + 1), '&', absl::SkipEmpty())) {
      const size_t eq = kv.find('=');
      t.query[std::string(kv.substr(0, eq))] =
          eq == absl::string_view::npos ? "" : UrlDecode(std::string(kv.substr(eq + 1)));
    }
  }
  for (const auto& [collection, c] : collections_) {
    if (base == collection) {
      t.collection = collection;
      return t;
    }
    if (base.rfind(collection + "/", 0) != 0) continue;
    std::vector<std::string> rest =
        absl::StrSplit(base.substr(collection.size() + 1), '/', absl::SkipEmpty());
    if (rest.size() == 1 || (rest.size() == 2 && rest[1] == "status" && c.status_subresource)) {
      t.collection = collection;
      t.name = UrlDecode(rest[0]);
      t.status = rest.size() == 2;
      return t;
    }
  }
  return Error(verb, path, 404, "NotFound", "the server could not find the requested resource");
}

void FakeRestClient::Emit(const std::string& collection, const std::string& type, const json& obj) {
  history_.push_back({rv_, collection, type, obj});
  for (OpenWatch* w : watches_) {
    if (w->collection == collection && FieldSelectorMatches(w->field_selector, obj) &&
        LabelSelectorMatches(w->label_selector, obj)) {
      w->queue.push_back({{"type", type}, {"object", obj}});
    }
  }
}

absl::StatusOr<kube::Response> FakeRestClient::Get(const std::string& path) {
  return Answer("GET", path, nullptr);
}
absl::StatusOr<kube::Response> FakeRestClient::Post(const std::string& path, const json& body) {
  return Answer("POST", path, &body);
}
absl::StatusOr<kube::Response> FakeRestClient::Put(const std::string& path, const json& body) {
  return Answer("PUT", path, &body);
}
absl::StatusOr<kube::Response> FakeRestClient::Delete(const std::string& path, const json& body) {
  return Answer("DELETE", path, &body);
}

absl::StatusOr<kube::Response> FakeRestClient::Answer(const std::string& verb,
                                                      const std::string& path, const json* body) {
  std::function<void(const std::string&, const std::string&)> before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    before = before_;
  }
  if (before) before(verb, path);
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status st = Fault(verb, path); !st.ok()) return st;
  absl::StatusOr<Target> t = Parse(verb, path);
  absl::StatusOr<kube::Response> r;
  if (!t.ok()) {
    r = t.status();
  } else if (verb != "GET") {
    r = Write(verb, path, *t, body);
  } else if (!t->name.empty()) {
    const Collection& c = collections_[t->collection];
    auto it = c.objects.find(t->name);
    if (it == c.objects.end()) {
      r = Error(verb, path, 404, "NotFound",
                absl::StrCat(Plural(t->collection), " \"", t->name, "\" not found"));
    } else {
      r = kube::Response{200, it->second, {}};
    }
  } else {
    const Collection& c = collections_[t->collection];
    json items = json::array();
    for (const auto& [name, obj] : c.objects) {
      if (FieldSelectorMatches(t->query["fieldSelector"], obj) &&
          LabelSelectorMatches(t->query["labelSelector"], obj)) {
        items.push_back(obj);
      }
    }
    r = kube::Response{200,
                       {{"kind", c.kind + "List"},
                        {"apiVersion", ApiVersion(t->collection)},
                        {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                        {"items", items}},
                       {}};
  }
  if (!r.ok()) {
    Record(verb, path, kube::HttpCodeOf(r.status()).value_or(500));
  } else {
    Record(verb, path, r->http_code);
  }
  return r;
}

absl::StatusOr<kube::Response> FakeRestClient::Write(const std::string& verb,
                                                     const std::string& where, const Target& t,
                                                     const json* body) {
  Collection& c = collections_[t.collection];
  const std::string plural = Plural(t.collection);
  auto conflict = [&](const std::string& message) {
    return Error(verb, where, 409, "Conflict", message);
  };
  if (verb == "POST") {
    if (!t.name.empty() || body == nullptr || !body->is_object()) {
      return Error(verb, where, 405, "MethodNotAllowed", "POST to an object");
    }
    json obj = *body;
    std::string name = Meta(obj, "name");
    if (name.empty() && !Meta(obj, "generateName").empty()) {
      name = absl::StrCat(Meta(obj, "generateName"), "x", ++uid_counter_);
    }
    if (name.empty()) {
      return Error(verb, where, 422, "Invalid", "metadata.name: Required value");
    }
    if (c.objects.count(name)) {
      return kube::HttpError(409, "AlreadyExists",
                             absl::StrCat(verb, " ", where, ": HTTP 409 AlreadyExists: ", plural,
                                          " \"", name, "\" already exists"));
    }
    obj["metadata"]["name"] = name;
    obj["metadata"].erase("generateName");
    obj["metadata"]["uid"] = absl::StrCat("uid-", ++uid_counter_);
    obj["metadata"]["generation"] = 1;
    obj["metadata"]["creationTimestamp"] =
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", now_ ? now_() : absl::Now(), absl::UTCTimeZone());
    if (c.status_subresource) obj.erase("status");
    if (t.query.count("dryRun")) return kube::Response{201, obj, {}};
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    c.objects[name] = obj;
    Emit(t.collection, "ADDED", obj);
    return kube::Response{201, obj, {}};
  }
  auto it = c.objects.find(t.name);
  if (t.name.empty()) return Error(verb, where, 405, "MethodNotAllowed", "on a collection");
  if (it == c.objects.end()) {
    return Error(verb, where, 404, "NotFound", absl::StrCat(plural, " \"", t.name, "\" not found"));
  }
  json& stored = it->second;
  if (verb == "DELETE") {
    const json pre = body == nullptr ? json() : At(*body, "preconditions");
    const std::string uid = Text(At(pre, "uid")), rv = Text(At(pre, "resourceVersion"));
    if (!uid.empty() && uid != Meta(stored, "uid")) {
      return conflict(absl::StrCat("Precondition failed: UID in precondition: ", uid,
                                   ", UID in object meta: ", Meta(stored, "uid")));
    }
    if (!rv.empty() && rv != Meta(stored, "resourceVersion")) {
      return conflict(
          absl::StrCat("Precondition failed: ResourceVersion in precondition: ", rv,
                       ", ResourceVersion in object meta: ", Meta(stored, "resourceVersion")));
    }
    json obj = stored;
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    c.objects.erase(it);
    Emit(t.collection, "DELETED", obj);
    return kube::Response{200, obj, {}};
  }
  // PUT
  if (body == nullptr || !body->is_object() || Meta(*body, "name") != t.name) {
    return Error(verb, where, 400, "BadRequest",
                 "the name of the object does not match the name on the URL");
  }
  const std::string sent_rv = Meta(*body, "resourceVersion");
  if (!sent_rv.empty() && sent_rv != Meta(stored, "resourceVersion")) {
    return conflict(absl::StrCat("Operation cannot be fulfilled on ", plural, " \"", t.name,
                                 "\": the object has been modified; please apply your changes "
                                 "to the latest version and try again"));
  }
  json obj = stored;
  if (t.status) {
    obj["status"] = At(*body, "status");
  } else {
    obj = *body;
    for (const char* k : {"uid", "generation", "resourceVersion"}) {
      obj["metadata"][k] = stored["metadata"][k];
    }
    if (c.status_subresource) {
      obj.erase("status");
      if (stored.contains("status")) obj["status"] = stored["status"];
    }
    if (At(obj, "spec") != At(stored, "spec")) {
      obj["metadata"]["generation"] = At(stored["metadata"], "generation").get<int64_t>() + 1;
    }
  }
  if (obj == stored) return kube::Response{200, obj, {}};  // no change, no new version
  obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
  stored = obj;
  Emit(t.collection, "MODIFIED", obj);
  return kube::Response{200, obj, {}};
}

absl::Status FakeRestClient::Watch(const std::string& path, const kube::WatchHandler& on_event,
                                   const std::atomic<bool>* stop) {
  std::unique_lock<std::mutex> lock(mu_);
  if (absl::Status st = Fault("WATCH", path); !st.ok()) return st;
  absl::StatusOr<Target> t = Parse("WATCH", path);
  if (!t.ok()) {
    Record("WATCH", path, 404);
    return t.status();
  }
  Record("WATCH", path, 200);
  OpenWatch w;
  w.collection = t->collection;
  w.field_selector = t->query["fieldSelector"];
  w.label_selector = t->query["labelSelector"];
  w.bookmarks = t->query["allowWatchBookmarks"] == "true";
  w.stop = stop;
  auto matches = [&](const json& obj) {
    return FieldSelectorMatches(w.field_selector, obj) &&
           LabelSelectorMatches(w.label_selector, obj);
  };
  const std::string from = t->query["resourceVersion"];
  uint64_t rv = 0;
  if (from.empty() || from == "0") {
    for (const auto& [name, obj] : collections_[w.collection].objects) {
      if (matches(obj)) w.queue.push_back({{"type", "ADDED"}, {"object", obj}});
    }
  } else if (!absl::SimpleAtoi(from, &rv) || rv < oldest_rv_ || rv > rv_) {
    w.queue.push_back(
        ExpiredStatus(absl::StrCat("too old resource version: ", from, " (", oldest_rv_, ")")));
    w.end = true;
  } else {
    for (const Event& e : history_) {
      if (e.rv > rv && e.collection == w.collection && matches(e.object)) {
        w.queue.push_back({{"type", e.type}, {"object", e.object}});
      }
    }
  }
  watches_.push_back(&w);
  absl::Status result;
  while (true) {
    auto stopped = [&] { return stop != nullptr && stop->load(); };
    auto ready = [&] { return stopped() || !w.queue.empty() || w.end || !w.broken.ok(); };
    if (!ready()) {
      w.waiting = true;
      Changed();
      cv_.wait(lock, ready);
      w.waiting = false;
    }
    if (stopped()) break;
    if (!w.broken.ok()) {
      result = w.broken;
      break;
    }
    if (w.queue.empty()) break;  // ended
    const json event = std::move(w.queue.front());
    w.queue.erase(w.queue.begin());
    lock.unlock();
    bool more = false;
    try {
      more = on_event(event);
    } catch (const std::exception& e) {
      result = absl::InternalError(absl::StrCat("watch handler: ", e.what()));
    }
    lock.lock();
    if (!more) break;
  }
  watches_.erase(std::find(watches_.begin(), watches_.end(), &w));
  Changed();
  return result;
}

}  // namespace topodra::testing
