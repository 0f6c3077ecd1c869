// Tests of the C++ harness around fake_apiserver.py: start over HTTP and HTTPS, requests with
// libcurl and a raw socket, restart on the same port with an empty store, stop, and the Api()
// helpers for ResourceClaims and DeviceClasses.
#include "test/integration/fake_apiserver.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace topodra::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr char kNodeUid[] = "3f1e2d4c-5b6a-4978-8a9b-0c1d2e3f4a5b";
constexpr char kPodUid[] = "9b8e7d6c-5a4f-4e3d-8c2b-1a0f9e8d7c6b";
constexpr char kClaims[] = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims";

struct HttpResult {
  CURLcode curl = CURLE_OK;
  long code = 0;
  std::string body;
};

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::string body;
  std::string ca_file;  // empty: system trust store
  std::string token;
  std::string client_cert, client_key;
};

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

HttpResult Fetch(const HttpRequest& req) {
  HttpResult result;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    result.curl = CURLE_FAILED_INIT;
    return result;
  }
  curl_slist* headers = curl_slist_append(nullptr, "Accept: application/json");
  headers = curl_slist_append(headers, "Content-Type: application/json");
  std::string auth;
  if (!req.token.empty()) {
    auth = "Authorization: Bearer " + req.token;
    headers = curl_slist_append(headers, auth.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &result.body);
  if (!req.body.empty()) curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req.body.c_str());
  if (!req.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, req.ca_file.c_str());
  if (!req.client_cert.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT, req.client_cert.c_str());
    curl_easy_setopt(curl, CURLOPT_SSLKEY, req.client_key.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  result.curl = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.code);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return result;
}

HttpResult Get(const FakeApiServer& server, const std::string& path) {
  HttpRequest req;
  req.url = server.url() + path;
  req.ca_file = server.ca_file();
  req.token = server.token();
  return Fetch(req);
}

HttpResult Post(const FakeApiServer& server, const std::string& path, const std::string& body) {
  HttpRequest req;
  req.method = "POST";
  req.url = server.url() + path;
  req.body = body;
  req.ca_file = server.ca_file();
  req.token = server.token();
  return Fetch(req);
}

// A plain HTTP/1.1 GET over a raw socket; returns the whole response ("" on failure).
std::string RawGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request =
        "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = recv(fd, buf, sizeof buf, 0)) > 0) response.append(buf, n);
    }
  }
  close(fd);
  return response;
}

bool PortAcceptsConnections(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

std::string SliceJson(const std::string& name) {
  nlohmann::json slice = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceSlice"},
      {"metadata", {{"name", name}}},
      {"spec",
       {{"driver", "cpu.topodra.io"},
        {"nodeName", "node-a"},
        {"pool", {{"name", "node-a"}, {"generation", 1}, {"resourceSliceCount", 1}}},
        {"devices", {{{"name", "cpu-0"}, {"capacity", {{"cpus", {{"value", "4"}}}}}}}}}}};
  return slice.dump();
}

nlohmann::json Json(const HttpResult& r) {
  return nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
}

TEST(FakeApiServerHarness, ServesPlainHttp) {
  FakeApiServerOptions opts;
  opts.nodes = {{"node-a", kNodeUid}};
  auto server = FakeApiServer::Start(opts);
  ASSERT_TRUE(server.ok()) << server.status();
  const FakeApiServer& s = **server;
  EXPECT_EQ(s.url(), absl::StrCat("http://127.0.0.1:", s.port()));
  EXPECT_EQ(s.ca_file(), "");
  EXPECT_GT(s.pid(), 0);

  const std::string health = RawGet(s.port(), "/healthz");
  EXPECT_THAT(health, StartsWith("HTTP/1.1 200 "));
  EXPECT_TRUE(absl::EndsWith(health, "\r\n\r\nok")) << health;

  HttpResult node = Get(s, "/api/v1/nodes/node-a");
  ASSERT_EQ(node.curl, CURLE_OK);
  EXPECT_EQ(node.code, 200);
  EXPECT_EQ(Json(node)["metadata"]["uid"], kNodeUid);

  HttpResult created = Post(s, kSlices, SliceJson("slice-a"));
  EXPECT_EQ(created.code, 201) << created.body;
  HttpResult list = Get(s, kSlices);
  EXPECT_EQ(list.code, 200);
  nlohmann::json items = Json(list)["items"];
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0]["metadata"]["name"], "slice-a");

  auto requests = s.Requests();
  ASSERT_TRUE(requests.ok()) << requests.status();
  ASSERT_EQ(requests->size(), 3u) << requests->dump();
  EXPECT_EQ((*requests)[1]["method"], "POST");
  EXPECT_EQ((*requests)[1]["path"], kSlices);
  EXPECT_EQ((*requests)[1]["code"], 201);
}

TEST(FakeApiServerHarness, ServesHttpsWithCaAndToken) {
  FakeApiServerOptions opts;
  opts.tls = true;
  opts.token = "t0ken-for-tests";
  auto server = FakeApiServer::Start(opts);
  ASSERT_TRUE(server.ok()) << server.status();
  FakeApiServer& s = **server;
  EXPECT_EQ(s.url(), absl::StrCat("https://127.0.0.1:", s.port()));
  ASSERT_TRUE(std::filesystem::exists(s.ca_file()));

  HttpRequest anonymous;
  anonymous.url = s.url() + kSlices;
  anonymous.ca_file = s.ca_file();
  HttpResult denied = Fetch(anonymous);
  ASSERT_EQ(denied.curl, CURLE_OK);
  EXPECT_EQ(denied.code, 401);
  EXPECT_EQ(Json(denied)["reason"], "Unauthorized");

  HttpResult list = Get(s, kSlices);
  EXPECT_EQ(list.code, 200);
  EXPECT_EQ(Json(list)["kind"], "ResourceSliceList");

  HttpRequest by_name;  // the certificate also names localhost
  by_name.url = absl::StrCat("https://localhost:", s.port(), "/healthz");
  by_name.ca_file = s.ca_file();
  HttpResult health = Fetch(by_name);
  EXPECT_EQ(health.code, 200);
  EXPECT_EQ(health.body, "ok");

  HttpRequest untrusted = anonymous;  // the system trust store does not know our CA
  untrusted.ca_file = "";
  EXPECT_EQ(Fetch(untrusted).curl, CURLE_PEER_FAILED_VERIFICATION);

  EXPECT_THAT(RawGet(s.port(), "/healthz"), Not(HasSubstr("ok")));  // plain HTTP on TLS port
  EXPECT_TRUE(s.Reset().ok());  // the control port is plain HTTP even when the API is TLS
}

TEST(FakeApiServerHarness, MutualTls) {
  FakeApiServerOptions opts;
  opts.mtls = true;
  auto server = FakeApiServer::Start(opts);
  ASSERT_TRUE(server.ok()) << server.status();
  const FakeApiServer& s = **server;
  HttpRequest req;
  req.url = s.url() + kSlices;
  req.ca_file = s.ca_file();
  EXPECT_NE(Fetch(req).curl, CURLE_OK);
  req.client_cert = s.client_cert_file();
  req.client_key = s.client_key_file();
  HttpResult ok = Fetch(req);
  EXPECT_EQ(ok.curl, CURLE_OK);
  EXPECT_EQ(ok.code, 200);
}

TEST(FakeApiServerHarness, RestartKeepsPortWithEmptyStore) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  FakeApiServer& s = **server;
  const int port = s.port();
  const pid_t old_pid = s.pid();
  HttpResult created = Post(s, kSlices, SliceJson("slice-a"));
  ASSERT_EQ(created.code, 201) << created.body;
  const std::string old_rv = Json(created)["metadata"]["resourceVersion"];

  ASSERT_TRUE(s.Restart().ok());
  EXPECT_EQ(s.port(), port);
  EXPECT_NE(s.pid(), old_pid);
  EXPECT_FALSE(ProcessExists(old_pid));
  HttpResult list = Get(s, kSlices);
  ASSERT_EQ(list.code, 200);
  EXPECT_TRUE(Json(list)["items"].empty());
  EXPECT_GT(std::stoll(Json(list)["metadata"]["resourceVersion"].get<std::string>()),
            std::stoll(old_rv));

  // A watch resumed from the old server's resourceVersion is told to relist.
  HttpResult watch = Get(s, absl::StrCat(kSlices, "?watch=1&resourceVersion=", old_rv));
  EXPECT_EQ(watch.code, 200);
  nlohmann::json event = nlohmann::json::parse(watch.body, nullptr, false);
  EXPECT_EQ(event["type"], "ERROR");
  EXPECT_EQ(event["object"]["code"], 410);
  EXPECT_EQ(event["object"]["reason"], "Expired");
}

TEST(FakeApiServerHarness, StopEndsProcessAndFreesPort) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const pid_t pid = (*server)->pid();
  EXPECT_TRUE(PortAcceptsConnections(port));
  ASSERT_TRUE((*server)->Stop().ok());
  EXPECT_EQ((*server)->pid(), -1);
  EXPECT_FALSE(ProcessExists(pid));
  EXPECT_FALSE(PortAcceptsConnections(port));
  EXPECT_TRUE((*server)->Stop().ok());  // idempotent
  EXPECT_FALSE((*server)->Reset().ok());

  auto second = FakeApiServer::Start();
  ASSERT_TRUE(second.ok()) << second.status();
  const pid_t second_pid = (*second)->pid();
  const std::string dir = (*second)->temp_dir();
  ASSERT_TRUE(std::filesystem::exists(dir));
  second->reset();  // the destructor stops the process and removes the temporary files
  EXPECT_FALSE(ProcessExists(second_pid));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(FakeApiServerHarness, ControlHelpers) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  FakeApiServer& s = **server;
  ASSERT_TRUE(s.FailNext(2, 503).ok());
  EXPECT_EQ(Get(s, kSlices).code, 503);
  EXPECT_EQ(Get(s, kSlices).code, 503);
  EXPECT_EQ(Get(s, kSlices).code, 200);

  ASSERT_EQ(Post(s, kSlices, SliceJson("slice-a")).code, 201);
  auto state = s.State();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)["objects"], 1);
  EXPECT_EQ((*state)["openWatches"], 0);
  ASSERT_TRUE(s.Reset().ok());
  EXPECT_TRUE(Json(Get(s, kSlices))["items"].empty());
  EXPECT_TRUE(s.CloseWatches().ok());
  ASSERT_TRUE(s.ClearRequests().ok());
  auto requests = s.Requests();
  ASSERT_TRUE(requests.ok());
  EXPECT_TRUE(requests->empty());
  EXPECT_FALSE(s.Control("GET", "/__control/nothing").ok());
}

TEST(FakeApiServerHarness, StartupFailureCarriesStderr) {
  FakeApiServerOptions opts;
  opts.versions = {"v9"};
  auto server = FakeApiServer::Start(opts);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("--versions"));
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("exited with code 2"));
}

TEST(FakeApiServerHarness, WritesKubeconfig) {
  FakeApiServerOptions opts;
  opts.tls = true;
  opts.token = "abc";
  auto server = FakeApiServer::Start(opts);
  ASSERT_TRUE(server.ok()) << server.status();
  const FakeApiServer& s = **server;
  const std::string path = s.temp_dir() + "/kubeconfig";
  ASSERT_EQ(s.WriteKubeconfig(path), path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("server: \"" + s.url() + "\"\n"));
  EXPECT_THAT(text.str(), HasSubstr("certificate-authority: \"" + s.ca_file() + "\"\n"));
  EXPECT_THAT(text.str(), HasSubstr("token: \"abc\"\n"));
  EXPECT_THAT(text.str(), HasSubstr("current-context: fake-apiserver\n"));
  EXPECT_EQ(s.WriteKubeconfig("/nonexistent-dir/kubeconfig"), "");
}

nlohmann::json ClaimJson(const std::string& name, const std::string& ns = "team-a") {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec",
           {{"devices",
             {{"requests", {{{"name", "cpus"}, {"exactly", {{"deviceClassName", "cpu"}}}}}},
              {"config",
               {{{"requests", {"cpus"}},
                 {"opaque",
                  {{"driver", "cpu.topodra.io"},
                   {"parameters", {{"kind", "CpuConfig"}, {"exclusive", true}}}}}}}}}}}}};
}

nlohmann::json AllocationJson(const std::string& device) {
  return {{"devices",
           {{"results",
             {{{"request", "cpus"},
               {"driver", "cpu.topodra.io"},
               {"pool", "node-a"},
               {"device", device}}}}}},
          {"nodeSelector",
           {{"nodeSelectorTerms",
             {{{"matchFields",
                {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"node-a"}}}}}}}}}}};
}

nlohmann::json PodRef() {
  return nlohmann::json::array({{{"resource", "pods"}, {"name", "pod-a"}, {"uid", kPodUid}}});
}

TEST(FakeApiServerHarness, ClaimAndDeviceClassHelpers) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  const FakeApiServer& s = **server;

  auto cls = s.CreateDeviceClass(
      {{"metadata", {{"name", "cpu"}}},
       {"spec",
        {{"selectors", {{{"cel", {{"expression", "device.driver == \"cpu.topodra.io\""}}}}}}}}});
  ASSERT_TRUE(cls.ok()) << cls.status();
  EXPECT_EQ((*cls)["kind"], "DeviceClass");
  EXPECT_FALSE((*cls)["metadata"]["uid"].get<std::string>().empty());
  auto got_cls = s.Api("GET", "/apis/resource.k8s.io/v1/deviceclasses/cpu");
  ASSERT_TRUE(got_cls.ok()) << got_cls.status();
  EXPECT_EQ(*got_cls, *cls);

  auto created = s.CreateClaim(ClaimJson("claim-a"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["namespace"], "team-a");
  EXPECT_FALSE((*created)["metadata"]["uid"].get<std::string>().empty());
  EXPECT_EQ((*created)["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"],
            "ExactCount");
  EXPECT_EQ((*created)["status"], nlohmann::json::object());

  auto allocated = s.AllocateClaim("team-a", "claim-a", AllocationJson("cpu-0"), PodRef());
  ASSERT_TRUE(allocated.ok()) << allocated.status();
  EXPECT_EQ((*allocated)["status"]["allocation"], AllocationJson("cpu-0"));
  EXPECT_EQ((*allocated)["status"]["reservedFor"], PodRef());
  EXPECT_EQ((*allocated)["metadata"]["uid"], (*created)["metadata"]["uid"]);
  EXPECT_NE((*allocated)["metadata"]["resourceVersion"], (*created)["metadata"]["resourceVersion"]);

  auto got = s.Api("GET", absl::StrCat(kClaims, "/claim-a"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, *allocated);
  auto listed = s.Api("GET", "/apis/resource.k8s.io/v1/resourceclaims");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ((*listed)["items"].size(), 1u);
  nlohmann::json item = *allocated;  // list items of built-in types carry no kind/apiVersion
  item.erase("kind");
  item.erase("apiVersion");
  EXPECT_EQ((*listed)["items"][0], item);

  // A merge patch of /status (what a driver does for status.devices).
  nlohmann::json patch = {{"status",
                           {{"devices",
                             {{{"driver", "cpu.topodra.io"},
                               {"pool", "node-a"},
                               {"device", "cpu-0"},
                               {"data", {{"cpus", "0-3"}}}}}}}}};
  auto patched = s.Api("PATCH", absl::StrCat(kClaims, "/claim-a/status"), &patch);
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["status"]["devices"][0]["data"]["cpus"], "0-3");
  EXPECT_EQ((*patched)["status"]["allocation"], AllocationJson("cpu-0"));

  auto deleted = s.Api("DELETE", absl::StrCat(kClaims, "/claim-a"));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ((*deleted)["status"], "Success");
}

TEST(FakeApiServerHarness, ApiErrorsMapToStatusCodes) {
  auto server = FakeApiServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  FakeApiServer& s = **server;
  ASSERT_TRUE(s.CreateClaim(ClaimJson("claim-a")).ok());
  ASSERT_TRUE(s.AllocateClaim("team-a", "claim-a", AllocationJson("cpu-0")).ok());

  // 422: an allocation is immutable once set.
  auto changed = s.AllocateClaim("team-a", "claim-a", AllocationJson("cpu-1"));
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kInvalidArgument) << changed.status();
  EXPECT_THAT(std::string(changed.status().message()), HasSubstr("HTTP 422: "));
  EXPECT_THAT(std::string(changed.status().message()), HasSubstr("field is immutable"));
  // 422: opaque parameters must be a JSON object.
  nlohmann::json bad = ClaimJson("claim-b");
  bad["spec"]["devices"]["config"][0]["opaque"]["parameters"] = "not an object";
  auto invalid = s.CreateClaim(bad);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument) << invalid.status();
  EXPECT_THAT(std::string(invalid.status().message()), HasSubstr("must be valid JSON object"));

  // 404
  auto missing = s.Api("GET", absl::StrCat(kClaims, "/nothing"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("GET " + std::string(kClaims) + "/nothing: HTTP 404: "));
  EXPECT_EQ(s.AllocateClaim("team-a", "nothing", AllocationJson("cpu-0")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(s.Api("GET", "/apis/resource.k8s.io/v1/nothings").status().code(),
            absl::StatusCode::kNotFound);

  // 409: AlreadyExists on create, Aborted for a stale resourceVersion.
  EXPECT_EQ(s.CreateClaim(ClaimJson("claim-a")).status().code(), absl::StatusCode::kAlreadyExists);
  nlohmann::json stale = {{"metadata", {{"name", "claim-a"}, {"resourceVersion", "1"}}},
                          {"status", nlohmann::json::object()}};
  auto conflict = s.Api("PUT", absl::StrCat(kClaims, "/claim-a/status"), &stale);
  EXPECT_EQ(conflict.status().code(), absl::StatusCode::kAborted) << conflict.status();

  // Anything else is Unknown, with the code in the message: 400 for a strict decoding error,
  // 405 for a verb the resource does not have.
  nlohmann::json unknown_field = ClaimJson("claim-c");
  unknown_field["spec"]["bogus"] = 1;
  auto strict = s.Api("POST", absl::StrCat(kClaims, "?fieldValidation=Strict"), &unknown_field);
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kUnknown) << strict.status();
  EXPECT_THAT(std::string(strict.status().message()), HasSubstr("HTTP 400: "));
  EXPECT_THAT(std::string(strict.status().message()),
              HasSubstr("unknown field \\\"spec.bogus\\\""));
  auto not_allowed = s.Api("POST", "/apis/resource.k8s.io/v1/resourceclaims", &unknown_field);
  EXPECT_THAT(std::string(not_allowed.status().message()), HasSubstr("HTTP 405: "));

  ASSERT_TRUE(s.FailNext(1, 503).ok());
  auto unavailable = s.Api("GET", kClaims);
  EXPECT_EQ(unavailable.status().code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(std::string(unavailable.status().message()), HasSubstr("HTTP 503: "));

  ASSERT_TRUE(s.Stop().ok());
  EXPECT_EQ(s.Api("GET", kClaims).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FakeApiServerHarness, ApiOverMutualTlsWithToken) {
  FakeApiServerOptions opts;
  opts.mtls = true;
  opts.token = "claims-t0ken";
  opts.versions = {"v1beta2"};
  auto server = FakeApiServer::Start(opts);
  ASSERT_TRUE(server.ok()) << server.status();
  const FakeApiServer& s = **server;
  nlohmann::json claim = ClaimJson("claim-a");
  claim.erase("apiVersion");  // the helpers then use the version the server serves
  auto created = s.CreateClaim(claim);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["apiVersion"], "resource.k8s.io/v1beta2");
  auto allocated = s.AllocateClaim("team-a", "claim-a", AllocationJson("cpu-0"), PodRef());
  ASSERT_TRUE(allocated.ok()) << allocated.status();
  auto listed = s.Api("GET", "/apis/resource.k8s.io/v1beta2/namespaces/team-a/resourceclaims");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ((*listed)["items"].size(), 1u);
  EXPECT_EQ((*listed)["items"][0]["status"]["reservedFor"], PodRef());
  auto requests = s.Requests();
  ASSERT_TRUE(requests.ok());
  for (const nlohmann::json& r : *requests) EXPECT_NE(r["code"], 401) << r.dump();
}

}  // namespace
}  // namespace topodra::testing
