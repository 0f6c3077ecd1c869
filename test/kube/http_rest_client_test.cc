#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "driver/kube/rest_client.h"
#include "gtest/gtest.h"
#include "test/kube/stub_server.h"

namespace topodra::kube {
namespace {

using nlohmann::json;
using testing::StubServer;
using testing::TempDir;

ClusterConfig ConfigFor(const StubServer& stub) {
  ClusterConfig config;
  config.server = stub.url();
  config.token = "static-token";
  config.timeout = std::chrono::seconds(10);
  return config;
}

std::unique_ptr<RestClient> MustClient(const ClusterConfig& config) {
  absl::StatusOr<std::unique_ptr<RestClient>> client = NewHttpRestClient(config);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

json Echo(const std::string& method, const std::string& path, int status = 200) {
  return {{"method", method}, {"path", path}, {"echo", true}, {"status", status}};
}

TEST(HttpRestClientTest, GetSendsAcceptAndBearerToken) {
  StubServer stub(json::array({Echo("GET", "/api/v1/nodes/n1")}));
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/api/v1/nodes/n1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->http_code, 200);
  EXPECT_EQ(r->body["method"], "GET");
  EXPECT_EQ(r->body["path"], "/api/v1/nodes/n1");
  EXPECT_EQ(r->body["body"], nullptr);
  EXPECT_EQ(r->body["headers"]["accept"], "application/json");
  EXPECT_EQ(r->body["headers"]["authorization"], "Bearer static-token");
  EXPECT_EQ(r->body["headers"]["user-agent"], "topodra/0.1");
  EXPECT_FALSE(r->body["headers"].contains("content-type"));
  EXPECT_TRUE(r->warnings.empty());
}

TEST(HttpRestClientTest, PostPutDeleteSendJsonBodies) {
  const std::string path = "/apis/resource.k8s.io/v1/resourceslices";
  StubServer stub(json::array(
      {Echo("POST", path, 201), Echo("PUT", path + "/s1"), Echo("DELETE", path + "/s1")}));
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  const json slice = {{"kind", "ResourceSlice"}, {"metadata", {{"name", "s1"}}}};

  absl::StatusOr<Response> r = client->Post(path, slice);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->http_code, 201);
  EXPECT_EQ(r->body["method"], "POST");
  EXPECT_EQ(r->body["body"], slice);
  EXPECT_EQ(r->body["headers"]["content-type"], "application/json");

  r = client->Put(path + "/s1", slice);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->http_code, 200);
  EXPECT_EQ(r->body["method"], "PUT");
  EXPECT_EQ(r->body["path"], path + "/s1");
  EXPECT_EQ(r->body["body"], slice);

  const json options = {{"kind", "DeleteOptions"}, {"preconditions", {{"uid", "u-1"}}}};
  r = client->Delete(path + "/s1", options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["method"], "DELETE");
  EXPECT_EQ(r->body["body"], options);

  r = client->Delete(path + "/s1", json());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["method"], "DELETE");
  EXPECT_EQ(r->body["body"], nullptr);
  EXPECT_FALSE(r->body["headers"].contains("content-type"));
}

TEST(HttpRestClientTest, QueryAndServerPathPrefixArePreserved) {
  const std::string query = "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" +
                            UrlEncode("spec.driver=dra.cpu,spec.nodeName=n1") + "&limit=10";
  StubServer stub(json::array({Echo("GET", "/k8s/clusters/c1" + query)}));
  ClusterConfig config = ConfigFor(stub);
  config.server += "/k8s/clusters/c1/";
  auto client = MustClient(config);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get(query);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["path"],
            "/k8s/clusters/c1/apis/resource.k8s.io/v1/resourceslices?fieldSelector="
            "spec.driver%3Ddra.cpu%2Cspec.nodeName%3Dn1&limit=10");
}

TEST(HttpRestClientTest, EmptySuccessBodyIsNull) {
  StubServer stub(json::array({{{"path", "/empty"}, {"status", 200}}}));
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/empty");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->http_code, 200);
  EXPECT_TRUE(r->body.is_null());
}

struct ErrorCase {
  int http;
  std::string reason;
  absl::StatusCode code;
};

TEST(HttpRestClientTest, MapsHttpErrorsWithServerStatus) {
  const std::vector<ErrorCase> cases = {
      {400, "BadRequest", absl::StatusCode::kInvalidArgument},
      {401, "Unauthorized", absl::StatusCode::kUnauthenticated},
      {403, "Forbidden", absl::StatusCode::kPermissionDenied},
      {404, "NotFound", absl::StatusCode::kNotFound},
      {409, "AlreadyExists", absl::StatusCode::kAlreadyExists},
      {409, "Conflict", absl::StatusCode::kAborted},
      {410, "Expired", absl::StatusCode::kOutOfRange},
      {422, "Invalid", absl::StatusCode::kInvalidArgument},
      {429, "TooManyRequests", absl::StatusCode::kResourceExhausted},
      {500, "InternalError", absl::StatusCode::kUnavailable},
      {503, "ServiceUnavailable", absl::StatusCode::kUnavailable},
      {405, "MethodNotAllowed", absl::StatusCode::kFailedPrecondition},
  };
  json routes = json::array();
  for (const ErrorCase& c : cases) {
    routes.push_back({{"path", absl::StrCat("/e/", c.http, "/", c.reason)},
                      {"status", c.http},
                      {"body",
                       {{"kind", "Status"},
                        {"apiVersion", "v1"},
                        {"status", "Failure"},
                        {"reason", c.reason},
                        {"message", absl::StrCat("slices \"s1\" says ", c.reason)},
                        {"code", c.http}}}});
  }
  StubServer stub(routes);
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.reason);
    const std::string path = absl::StrCat("/e/", c.http, "/", c.reason);
    absl::StatusOr<Response> r = client->Post(path, json::object());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code);
    EXPECT_EQ(HttpCodeOf(r.status()), c.http);
    EXPECT_EQ(Message(r.status()), absl::StrCat("POST ", path, ": HTTP ", c.http, " ", c.reason,
                                                ": slices \"s1\" says ", c.reason));
  }
}

TEST(HttpRestClientTest, ErrorWithoutStatusBodyUsesReasonPhraseAndRawBody) {
  StubServer stub(json::array({
      {{"path", "/gw"}, {"status", 502}, {"body_text", "<html>upstream down</html>\n"}},
      {{"path", "/long"}, {"status", 500}, {"body_text", std::string(1000, 'x')}},
      {{"path", "/vap"},
       {"status", 422},
       {"body", {{"kind", "Status"}, {"message", "denied by policy"}, {"code", 422}}}},
  }));
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/gw");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(HttpCodeOf(r.status()), 502);
  EXPECT_EQ(Message(r.status()), "GET /gw: HTTP 502 Bad Gateway: <html>upstream down</html>");

  r = client->Get("/long");
  EXPECT_EQ(Message(r.status()),
            "GET /long: HTTP 500 Internal Server Error: " + std::string(200, 'x') + "...");

  r = client->Get("/vap");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(r.status()), "GET /vap: HTTP 422 Unprocessable Entity: denied by policy");
}

// Past 1 MiB an error body is not read on: the held final chunk would otherwise keep the request
// until its deadline (DeadlineExceeded instead of the HTTP error).
TEST(HttpRestClientTest, ErrorBodyOverTheLimitEndsTheExchange) {
  StubServer stub(json::array({
      {{"path", "/huge"},
       {"status", 500},
       {"chunks", json::array({{{"text", "y"}, {"repeat", (1 << 20) + 4096}}})},
       {"hold", 120}},
      Echo("GET", "/after"),
  }));
  ClusterConfig config = ConfigFor(stub);
  config.timeout = std::chrono::seconds(60);
  auto client = MustClient(config);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/huge");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(HttpCodeOf(r.status()), 500);
  EXPECT_EQ(Message(r.status()),
            "GET /huge: HTTP 500 Internal Server Error: " + std::string(200, 'y') + "...");
  r = client->Get("/after");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["path"], "/after");
}

// We never send Upgrade, so a 101 is a broken server; its connection must not go back to the
// pool.
TEST(HttpRestClientTest, SwitchingProtocolsIsAProtocolError) {
  StubServer stub(json::array({
      {{"path", "/up"}, {"status", 101}, {"body_text", "{}"}},
      Echo("GET", "/after"),
  }));
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/up");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Message(r.status()),
            "GET /up: invalid HTTP response from the server: 101 Switching Protocols to a "
            "request without Upgrade");
  EXPECT_EQ(HttpCodeOf(r.status()), std::nullopt);
  r = client->Get("/after");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["path"], "/after");
}

// The server drops a kept-alive connection just as the next request goes out on it: the request
// goes once more on a fresh connection, unseen by the caller.
TEST(HttpRestClientTest, KeptAliveConnectionDroppedByTheServerIsRetriedOnce) {
  StubServer stub(json::array({
      {{"path", "/first"}, {"body", {{"n", 1}}}, {"hang_up_next", true}},
      Echo("GET", "/second"),
  }));
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/first");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["n"], 1);
  r = client->Get("/second");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["path"], "/second");
  const std::vector<json> requests = stub.Requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0]["path"], "/first");
  EXPECT_EQ(requests[1]["method"], "hung-up");
  EXPECT_EQ(requests[1]["path"], "GET /second HTTP/1.1");
  EXPECT_EQ(requests[2]["path"], "/second");
}

TEST(HttpRestClientTest, NonJsonSuccessBodyIsAnErrorNamingThePath) {
  StubServer stub(json::array({{{"path", "/html"}, {"body_text", "<html>hi</html>"}}}));
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/html");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Message(r.status()), "GET /html: HTTP 200 response is not JSON: \"<html>hi</html>\"");
  EXPECT_EQ(HttpCodeOf(r.status()), std::nullopt);
}

TEST(HttpRestClientTest, TimeoutIsDeadlineExceeded) {
  StubServer stub(json::array({{{"path", "/slow"}, {"delay", 5}, {"body", json::object()}}}));
  ClusterConfig config = ConfigFor(stub);
  config.timeout = std::chrono::milliseconds(300);
  auto client = MustClient(config);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/slow");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Message(r.status()).rfind("GET /slow: Timeout was reached: ", 0), 0u) << r.status();
}

// Issue 15 item 11: a caller's limits shorten a request (never lengthen it) and can abandon it.
TEST(HttpRestClientTest, GetWithinHonoursTheCallersTimeoutAndCancellation) {
  StubServer stub(json::array({{{"path", "/slow"}, {"delay", 5}, {"body", json::object()}}}));
  ClusterConfig config = ConfigFor(stub);
  config.timeout = std::chrono::seconds(20);
  auto client = MustClient(config);
  ASSERT_NE(client, nullptr);

  RequestLimits limits;
  limits.timeout = std::chrono::milliseconds(300);
  absl::StatusOr<Response> r = client->GetWithin("/slow", limits);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(Message(r.status()).rfind("GET /slow: Timeout was reached: ", 0), 0u) << r.status();

  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancelled = true;
  });
  limits = RequestLimits();
  limits.cancelled = &cancelled;
  r = client->GetWithin("/slow", limits);
  canceller.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_EQ(Message(r.status()), "GET /slow: abandoned: the caller no longer waits for it");

  // A caller asked on the request's own thread (a gRPC handler fetching its one claim itself).
  const std::thread::id here = std::this_thread::get_id();
  const auto gone_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  std::atomic<bool> asked_elsewhere{false};
  limits = RequestLimits();
  limits.caller_gone = [&] {
    if (std::this_thread::get_id() != here) asked_elsewhere = true;
    return std::chrono::steady_clock::now() >= gone_at;
  };
  r = client->GetWithin("/slow", limits);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_EQ(Message(r.status()), "GET /slow: abandoned: the caller no longer waits for it");
  EXPECT_FALSE(asked_elsewhere);

  // Longer than the client's own: the client's holds.
  config.timeout = std::chrono::milliseconds(300);
  auto short_client = MustClient(config);
  ASSERT_NE(short_client, nullptr);
  limits = RequestLimits();
  limits.timeout = std::chrono::seconds(60);
  r = short_client->GetWithin("/slow", limits);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
}

TEST(HttpRestClientTest, ConnectionRefusedIsUnavailable) {
  // A bound but not listening socket: connecting to its port is refused.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ClusterConfig config;
  config.server = absl::StrCat("http://127.0.0.1:", ntohs(addr.sin_port));
  auto client = MustClient(config);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/x");
  close(fd);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Message(r.status())
                .rfind(absl::StrCat("GET /x: Couldn't connect to server: Failed to connect to "
                                    "127.0.0.1 port ",
                                    ntohs(addr.sin_port), " "),
                       0),
            0u)
      << r.status();
}

TEST(HttpRestClientTest, CapturesWarningHeaders) {
  StubServer stub(json::array(
      {{{"path", "/w"},
        {"status", 201},
        {"headers", json::array({json::array({"Warning", R"(299 - "unknown field \"spec.foo\"")"}),
                                 json::array({"Warning", "299 - \"second\""}),
                                 json::array({"Warning", "unquoted text"})})},
        {"body", {{"ok", true}}}}}));
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Post("/w", json::object());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->warnings,
            (std::vector<std::string>{"unknown field \"spec.foo\"", "second", "unquoted text"}));
  EXPECT_EQ(r->body, json({{"ok", true}}));
}

TEST(HttpRestClientTest, RereadsTokenFileAfter401AndRetriesOnce) {
  TempDir dir;
  StubServer stub(json::array({{{"path", "/x"}, {"require_token", "new"}, {"body", {{"n", 1}}}}}));
  ClusterConfig config = ConfigFor(stub);
  config.token = "";
  config.token_file = dir.Write("token", "old\n");
  auto client = MustClient(config);
  ASSERT_NE(client, nullptr);
  dir.Write("token", "new\n");
  absl::StatusOr<Response> r = client->Get("/x");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, json({{"n", 1}}));
  const std::vector<json> requests = stub.Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0]["authorization"], "Bearer old");
  EXPECT_EQ(requests[1]["authorization"], "Bearer new");
}

TEST(HttpRestClientTest, UnchangedTokenAfter401IsNotRetried) {
  TempDir dir;
  StubServer stub(json::array({{{"path", "/x"}, {"require_token", "new"}, {"body", {{"n", 1}}}}}));
  ClusterConfig config = ConfigFor(stub);
  config.token_file = dir.Write("token", "old");
  auto client = MustClient(config);
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Get("/x");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(HttpCodeOf(r.status()), 401);
  EXPECT_EQ(Message(r.status()), "GET /x: HTTP 401 Unauthorized: Unauthorized");
  EXPECT_EQ(stub.Requests().size(), 1u);
}

TEST(HttpRestClientTest, RereadsStaleTokenFileBeforeRequest) {
  TempDir dir;
  StubServer stub(json::array({Echo("GET", "/x")}));
  ClusterConfig config = ConfigFor(stub);
  config.token_file = dir.Write("token", "first");
  config.token_refresh = std::chrono::milliseconds(0);
  auto client = MustClient(config);
  ASSERT_NE(client, nullptr);
  dir.Write("token", "second");
  absl::StatusOr<Response> r = client->Get("/x");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["headers"]["authorization"], "Bearer second");
  EXPECT_EQ(stub.Requests().size(), 1u);
}

TEST(HttpRestClientTest, ConcurrentRequestsShareOneClient) {
  TempDir dir;
  json routes = json::array();
  for (int i = 0; i < 8; ++i) routes.push_back(Echo("GET", absl::StrCat("/t/", i)));
  StubServer stub(routes);
  ClusterConfig config = ConfigFor(stub);
  config.token_file = dir.Write("token", "shared");
  config.token_refresh = std::chrono::milliseconds(0);  // every request re-reads the file
  auto client = MustClient(config);
  ASSERT_NE(client, nullptr);
  std::vector<absl::StatusOr<Response>> results(8, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { results[i] = client->Get(absl::StrCat("/t/", i)); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_EQ(results[i]->body["path"], absl::StrCat("/t/", i));
    EXPECT_EQ(results[i]->body["headers"]["authorization"], "Bearer shared");
  }
  EXPECT_EQ(stub.Requests().size(), 8u);
}

TEST(HttpRestClientTest, ConstructionErrorsNameTheValue) {
  TempDir dir;
  ClusterConfig config;
  config.server = "ftp://k:21";
  EXPECT_EQ(Message(NewHttpRestClient(config).status()),
            "server \"ftp://k:21\" is not an http(s) URL");
  config.server = "";
  EXPECT_EQ(Message(NewHttpRestClient(config).status()), "server \"\" is not a URL");

  config.server = "https://k:6443";
  config.token_file = dir.File("token");
  absl::Status s = NewHttpRestClient(config).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(s), absl::StrCat("cannot read token file \"", dir.File("token"),
                                     "\": No such file or directory"));
  dir.Write("token", " \n");
  EXPECT_EQ(Message(NewHttpRestClient(config).status()),
            absl::StrCat("token file \"", dir.File("token"), "\" is empty"));

  config.token_file = "";
  config.ca_file = dir.File("ca.crt");
  EXPECT_EQ(
      Message(NewHttpRestClient(config).status()),
      absl::StrCat("cannot read CA file \"", dir.File("ca.crt"), "\": No such file or directory"));
}

TEST(HttpRestClientTest, UnserializableBodyIsRejectedBeforeSending) {
  StubServer stub(json::array({Echo("POST", "/x")}));
  auto client = MustClient(ConfigFor(stub));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Response> r = client->Post("/x", json{{"bad", "\xff\xfe"}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(r.status()).rfind("POST /x: cannot serialize request body: ", 0), 0u);
  EXPECT_TRUE(stub.Requests().empty());
}

TEST(UrlEncodeTest, EncodesAllButUnreserved) {
  EXPECT_EQ(UrlEncode("spec.driver=dra.cpu,spec.nodeName=n1"),
            "spec.driver%3Ddra.cpu%2Cspec.nodeName%3Dn1");
  EXPECT_EQ(UrlEncode("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(UrlEncode("a b/c?d&e+f%\xc3\xbc"), "a%20b%2Fc%3Fd%26e%2Bf%25%C3%BC");
  EXPECT_EQ(UrlEncode(""), "");
}

TEST(HttpCodeOfTest, OnlyHttpErrorsCarryACode) {
  EXPECT_EQ(HttpCodeOf(absl::OkStatus()), std::nullopt);
  EXPECT_EQ(HttpCodeOf(absl::NotFoundError("x")), std::nullopt);
}

}  // namespace
}  // namespace topodra::kube
