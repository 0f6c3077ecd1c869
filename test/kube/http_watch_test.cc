#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "driver/kube/rest_client.h"
#include "gtest/gtest.h"
#include "test/kube/stub_server.h"

namespace topodra::kube {
namespace {

using nlohmann::json;
using testing::StubServer;
using testing::TempDir;

constexpr char kPath[] = "/apis/resource.k8s.io/v1/resourceslices?watch=true&timeoutSeconds=30";

json Event(const std::string& type, int n) {
  return {{"type", type}, {"object", {{"metadata", {{"resourceVersion", std::to_string(n)}}}}}};
}
std::string Line(const std::string& type, int n) { return Event(type, n).dump() + "\n"; }

json WatchRoute(json chunks, double hold = 0) {
  return json::array({{{"path", kPath}, {"chunks", std::move(chunks)}, {"hold", hold}}});
}

std::unique_ptr<RestClient> MustClient(const StubServer& stub) {
  ClusterConfig config;
  config.server = stub.url();
  absl::StatusOr<std::unique_ptr<RestClient>> client = NewHttpRestClient(config);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

struct Recorder {
  std::vector<json> events;
  WatchHandler Handler() {
    return [this](const json& event) {
      events.push_back(event);
      return true;
    };
  }
};

TEST(HttpWatchTest, EventsSplitAcrossChunksAndSeveralPerChunk) {
  const std::string a = Line("ADDED", 1), m = Line("MODIFIED", 2), d = Line("DELETED", 3);
  const std::string b = Line("BOOKMARK", 4);
  StubServer stub(WatchRoute({a.substr(0, 10), json{{"sleep", 0.05}}, a.substr(10) + m + "\n",
                              d.substr(0, d.size() - 1), json{{"sleep", 0.05}}, "\r\n" + b}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  Recorder recorder;
  std::atomic<bool> stop{false};
  const absl::Status s = client->Watch(kPath, recorder.Handler(), &stop);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(recorder.events, (std::vector<json>{Event("ADDED", 1), Event("MODIFIED", 2),
                                                Event("DELETED", 3), Event("BOOKMARK", 4)}));
}

TEST(HttpWatchTest, LastLineWithoutNewlineIsDelivered) {
  StubServer stub(WatchRoute({Line("ADDED", 1) + Event("DELETED", 2).dump()}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  Recorder recorder;
  const absl::Status s = client->Watch(kPath, recorder.Handler(), nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(recorder.events, (std::vector<json>{Event("ADDED", 1), Event("DELETED", 2)}));
}

TEST(HttpWatchTest, StopFlagEndsWatchPromptly) {
  // Without the stop the second event would arrive after 20 s.
  StubServer stub(WatchRoute({Line("ADDED", 1), json{{"sleep", 20}}, Line("ADDED", 2)}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int> seen{0};
  std::chrono::steady_clock::time_point stopped_at;
  std::thread stopper([&] {
    while (seen.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stopped_at = std::chrono::steady_clock::now();
    stop = true;
  });
  absl::Status s = client->Watch(
      kPath,
      [&](const json&) {
        ++seen;
        return true;
      },
      &stop);
  const auto returned_at = std::chrono::steady_clock::now();
  stopper.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(seen.load(), 1);
  const auto latency =
      std::chrono::duration_cast<std::chrono::milliseconds>(returned_at - stopped_at);
  std::cout << "watch returned " << latency.count() << " ms after stop was set\n";
  // Not a performance figure: a watch that ignored the flag would only end with the server's
  // next event, 20 s later.
  EXPECT_LT(latency, std::chrono::seconds(10));
}

// WakeWatches makes a watch look at its flag: one whose flag is not set goes on (and gets what
// the server sends later), one whose flag is set ends with the events it had.
TEST(HttpWatchTest, WakeWatchesEndsOnlyAWatchWhoseStopIsSet) {
  StubServer stub(WatchRoute({Line("ADDED", 1), json{{"sleep", 0.3}}, Line("ADDED", 2),
                              json{{"sleep", 20}}, Line("ADDED", 3)}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  client->WakeWatches();  // none running: nothing to do
  std::atomic<bool> stop{false};
  std::atomic<int> seen{0};
  std::thread waker([&] {
    while (seen.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (int i = 0; i < 20; ++i) client->WakeWatches();  // flag not set: the watch goes on
    while (seen.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stop = true;
    client->WakeWatches();
  });
  absl::Status s = client->Watch(
      kPath,
      [&](const json&) {
        ++seen;
        return true;
      },
      &stop);
  waker.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(seen.load(), 2);
}

TEST(HttpWatchTest, StopAlreadySetReturnsWithoutEvents) {
  StubServer stub(WatchRoute({Line("ADDED", 1)}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  Recorder recorder;
  std::atomic<bool> stop{true};
  EXPECT_TRUE(client->Watch(kPath, recorder.Handler(), &stop).ok());
  EXPECT_TRUE(recorder.events.empty());
}

TEST(HttpWatchTest, HandlerReturningFalseEndsWatch) {
  StubServer stub(
      WatchRoute({Line("ADDED", 1), Line("ADDED", 2), json{{"sleep", 20}}, Line("ADDED", 3)}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  std::vector<json> events;
  absl::Status s = client->Watch(
      kPath,
      [&](const json& event) {
        events.push_back(event);
        return false;
      },
      nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(events, std::vector<json>{Event("ADDED", 1)});
}

TEST(HttpWatchTest, UnparsableLineIsAnErrorNamingIt) {
  StubServer stub(WatchRoute({Line("ADDED", 1) + "this is not json\n" + Line("ADDED", 2)}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  Recorder recorder;
  absl::Status s = client->Watch(kPath, recorder.Handler(), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(),
            absl::StrCat("watch GET ", kPath, ": unparsable event line \"this is not json\""));
  EXPECT_EQ(recorder.events, std::vector<json>{Event("ADDED", 1)});
}

TEST(HttpWatchTest, NonObjectLineIsAnError) {
  StubServer stub(WatchRoute({"[1,2]\n"}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  Recorder recorder;
  absl::Status s = client->Watch(kPath, recorder.Handler(), nullptr);
  EXPECT_EQ(s.message(), absl::StrCat("watch GET ", kPath, ": unparsable event line \"[1,2]\""));
}

TEST(HttpWatchTest, OverlongLineIsAnError) {
  StubServer stub(WatchRoute({"{\"type\":\"", json{{"text", "x"}, {"repeat", 17 << 20}}}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  Recorder recorder;
  absl::Status s = client->Watch(kPath, recorder.Handler(), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            absl::StrCat("watch GET ", kPath, ": event line longer than 16777216 bytes"));
  EXPECT_TRUE(recorder.events.empty());
}

TEST(HttpWatchTest, HttpErrorOnConnectIsMapped) {
  StubServer stub(json::array({{{"path", kPath},
                                {"status", 410},
                                {"body",
                                 {{"kind", "Status"},
                                  {"reason", "Expired"},
                                  {"message", "too old resource version: 5 (9)"},
                                  {"code", 410}}}}}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  Recorder recorder;
  absl::Status s = client->Watch(kPath, recorder.Handler(), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(HttpCodeOf(s), 410);
  EXPECT_EQ(s.message(),
            absl::StrCat("GET ", kPath, ": HTTP 410 Expired: too old resource version: 5 (9)"));
  EXPECT_TRUE(recorder.events.empty());
}

TEST(HttpWatchTest, RetriesConnectWithRotatedToken) {
  TempDir dir;
  StubServer stub(
      json::array({{{"path", kPath}, {"require_token", "new"}, {"chunks", {Line("ADDED", 7)}}}}));
  ClusterConfig config;
  config.server = stub.url();
  config.token_file = dir.Write("token", "old");
  absl::StatusOr<std::unique_ptr<RestClient>> client = NewHttpRestClient(config);
  ASSERT_TRUE(client.ok()) << client.status();
  dir.Write("token", "new");
  Recorder recorder;
  EXPECT_TRUE((*client)->Watch(kPath, recorder.Handler(), nullptr).ok());
  EXPECT_EQ(recorder.events, std::vector<json>{Event("ADDED", 7)});
  EXPECT_EQ(stub.Requests().size(), 2u);
}

TEST(HttpWatchTest, ThrowingHandlerBecomesAnError) {
  StubServer stub(WatchRoute({Line("ADDED", 1)}));
  auto client = MustClient(stub);
  ASSERT_NE(client, nullptr);
  absl::Status s = client->Watch(
      kPath, [](const json&) -> bool { throw std::runtime_error("boom"); }, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), absl::StrCat("watch GET ", kPath, ": handler threw: boom"));
}

}  // namespace
}  // namespace topodra::kube
