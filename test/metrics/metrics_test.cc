// The daemon's metrics: the text a scrape returns after what the services reported, the
// --metrics-address and --health-address forms, and the endpoints served over real HTTP, also
// while hostile clients hold connections open.
#include "driver/metrics/metrics.h"
#include "test/testing/http_get.h"

#include <curl/curl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "driver/metrics/metrics_server.h"
#include "test/testing/slow_clients.h"

namespace topodra::metrics {
namespace {

using ::testing::HasSubstr;

MetricsOptions Options() {
  MetricsOptions o;
  o.version = "1.2.3";
  o.drivers = {"dra.cpu"};
  o.resources = {"topodra.io/gpu"};
  return o;
}

// The line of `text` that starts with `series` followed by a space; its value.
std::string Value(const std::string& text, const std::string& series) {
  const std::string key = "\n" + series + " ";
  const size_t at = ("\n" + text).find(key);
  if (at == std::string::npos) return "<missing>";
  const size_t start = at + key.size() - 1;
  return text.substr(start, text.find('\n', start) - start);
}

TEST(MetricsTest, SeriesExistAtZeroBeforeAnyEvent) {
  Metrics m(Options());
  const std::string text = m.Render();
  EXPECT_EQ(Value(text, R"(topodra_build_info{version="1.2.3"})"), "1");
  EXPECT_EQ(Value(text, R"(topodra_prepare_total{driver="dra.cpu",result="ok"})"), "0");
  EXPECT_EQ(Value(text, R"(topodra_prepare_total{driver="dra.cpu",result="error"})"), "0");
  EXPECT_EQ(Value(text, R"(topodra_unprepare_total{driver="dra.cpu",result="ok"})"), "0");
  EXPECT_EQ(
      Value(text,
            R"(topodra_device_plugin_allocations_total{resource="topodra.io/gpu",result="ok"})"),
      "0");
  EXPECT_EQ(Value(text, "topodra_cpus_allocated"), "0");
  EXPECT_THAT(text, HasSubstr("# TYPE topodra_prepare_duration_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("# HELP topodra_cpus_available Online CPUs a claim can still get "
                              "exclusively: not in --reserved-cpus"));
  EXPECT_THAT(text, HasSubstr("# HELP topodra_cpus_shared CPUs of the shared pool"));
  EXPECT_EQ(Value(text, "topodra_cpus_shared"), "0");
}

TEST(MetricsTest, CountsAndTimesClaimsByDriverAndResult) {
  Metrics m(Options());
  m.OnPrepare("dra.cpu", true, 0.0003);
  m.OnPrepare("dra.cpu", true, 0.002);
  m.OnPrepare("dra.cpu", false, 0.5);
  m.OnPrepare("gpu.topodra.io", true, 20);  // a driver not named up front still counts
  m.OnUnprepare("dra.cpu", false, 0.00005);
  m.OnDevicePluginAllocate("topodra.io/gpu", false);
  m.OnDevicePluginAllocate("topodra.io/gpu", true);
  m.OnDevicePluginAllocate("topodra.io/gpu", true);
  const std::string text = m.Render();
  EXPECT_EQ(Value(text, R"(topodra_prepare_total{driver="dra.cpu",result="ok"})"), "2");
  EXPECT_EQ(Value(text, R"(topodra_prepare_total{driver="dra.cpu",result="error"})"), "1");
  EXPECT_EQ(Value(text, R"(topodra_prepare_total{driver="gpu.topodra.io",result="ok"})"), "1");
  EXPECT_EQ(Value(text, R"(topodra_unprepare_total{driver="dra.cpu",result="error"})"), "1");
  EXPECT_EQ(Value(text, R"(topodra_unprepare_total{driver="dra.cpu",result="ok"})"), "0");
  EXPECT_EQ(
      Value(text,
            R"(topodra_device_plugin_allocations_total{resource="topodra.io/gpu",result="ok"})"),
      "2");
  EXPECT_EQ(
      Value(text,
            R"(topodra_device_plugin_allocations_total{resource="topodra.io/gpu",result="error"})"),
      "1");
  // Buckets are cumulative: 0.0003 is in le=0.0005 but not le=0.00025.
  EXPECT_EQ(
      Value(
          text,
          R"(topodra_prepare_duration_seconds_bucket{driver="dra.cpu",result="ok",le="0.00025"})"),
      "0");
  EXPECT_EQ(
      Value(text,
            R"(topodra_prepare_duration_seconds_bucket{driver="dra.cpu",result="ok",le="0.0005"})"),
      "1");
  EXPECT_EQ(
      Value(text,
            R"(topodra_prepare_duration_seconds_bucket{driver="dra.cpu",result="ok",le="0.0025"})"),
      "2");
  EXPECT_EQ(
      Value(text,
            R"(topodra_prepare_duration_seconds_bucket{driver="dra.cpu",result="ok",le="0.0001"})"),
      "0");
  EXPECT_EQ(Value(text, R"(topodra_prepare_duration_seconds_count{driver="dra.cpu",result="ok"})"),
            "2");
  EXPECT_EQ(Value(text, R"(topodra_prepare_duration_seconds_sum{driver="dra.cpu",result="ok"})"),
            "0.0023");
  // 20 s is past the last bucket (10 s): only in +Inf.
  EXPECT_EQ(
      Value(
          text,
          R"(topodra_prepare_duration_seconds_bucket{driver="gpu.topodra.io",result="ok",le="10"})"),
      "0");
  EXPECT_EQ(
      Value(
          text,
          R"(topodra_prepare_duration_seconds_bucket{driver="gpu.topodra.io",result="ok",le="+Inf"})"),
      "1");
  EXPECT_EQ(
      Value(
          text,
          R"(topodra_unprepare_duration_seconds_bucket{driver="dra.cpu",result="error",le="0.0001"})"),
      "1");
}

TEST(MetricsTest, GaugesAndPublishErrorsComeFromTheSnapshotAtEachScrape) {
  Metrics m(Options());
  NodeSnapshot snap;
  snap.cpus_allocated = 6;
  snap.cpus_available = 24;
  snap.cpus_shared = 27;
  snap.cpus_reserved = 2;
  snap.gpus_allocated = 1;
  snap.slice_publish_errors = {{"dra.cpu", 3}, {"gpu.topodra.io", 0}};
  m.SetSnapshotSource([&] { return snap; });
  std::string text = m.Render();
  EXPECT_EQ(Value(text, "topodra_cpus_allocated"), "6");
  EXPECT_EQ(Value(text, "topodra_cpus_available"), "24");
  EXPECT_EQ(Value(text, "topodra_cpus_shared"), "27");
  EXPECT_EQ(Value(text, "topodra_cpus_reserved"), "2");
  EXPECT_EQ(Value(text, "topodra_gpus_allocated"), "1");
  EXPECT_EQ(Value(text, R"(topodra_slice_publish_errors_total{driver="dra.cpu"})"), "3");
  EXPECT_EQ(Value(text, R"(topodra_slice_publish_errors_total{driver="gpu.topodra.io"})"), "0");

  // The publisher's running total: the counter follows it, not adds it again.
  snap.cpus_allocated = 0;
  snap.slice_publish_errors["dra.cpu"] = 5;
  text = m.Render();
  EXPECT_EQ(Value(text, "topodra_cpus_allocated"), "0");
  EXPECT_EQ(Value(text, R"(topodra_slice_publish_errors_total{driver="dra.cpu"})"), "5");
  text = m.Render();
  EXPECT_EQ(Value(text, R"(topodra_slice_publish_errors_total{driver="dra.cpu"})"), "5");
}

TEST(ListeningPortsForTest, Forms) {
  struct Case {
    std::string address;
    std::string want;  // "" for disabled, "!" prefix for an error containing the rest
  };
  const Case cases[] = {
      {":9477", "9477"},
      {"127.0.0.1:9477", "127.0.0.1:9477"},
      {"0.0.0.0:1", "0.0.0.0:1"},
      {"[::1]:65535", "[::1]:65535"},
      {"", ""},
      {"none", ""},
      {"9477", "!no port"},
      {":0", "!port \"0\" is not a number from 1 to 65535"},
      {":65536", "!port \"65536\""},
      {":", "!port \"\""},
      {":+80", "!port \"+80\""},
      {":9477x", "!port \"9477x\""},
      {"localhost:9477", "!host \"localhost\" is not an IPv4"},
      {"[zz]:9477", "!host \"[zz]\" is not an IPv6 address"},
      {"1.2.3:9477", "!host \"1.2.3\""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::optional<std::string>> got = ListeningPortsFor(c.address);
    if (c.want.starts_with("!")) {
      ASSERT_FALSE(got.ok()) << c.address;
      EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.want.substr(1))) << c.address;
      EXPECT_THAT(std::string(got.status().message()), HasSubstr("\"" + c.address + "\""));
    } else {
      ASSERT_TRUE(got.ok()) << c.address << ": " << got.status();
      EXPECT_EQ(got->value_or(""), c.want) << c.address;
      EXPECT_EQ(got->has_value(), !c.want.empty()) << c.address;
    }
  }
}

using Response = ::topodra::testing::HttpResponse;
Response Get(int port, const std::string& path) { return ::topodra::testing::HttpGet(port, path); }

TEST(MetricsServerTest, ServesMetricsAndProbes) {
  Probe health, ready{false, "driver dra.cpu: not registered with the kubelet"};
  Endpoints e;
  e.metrics = [] { return std::string("topodra_x 1\n"); };
  e.health = [&] { return health; };
  e.ready = [&] { return ready; };
  // Port 0: the kernel picks a free one.
  absl::StatusOr<std::unique_ptr<MetricsServer>> s = MetricsServer::Start("127.0.0.1:0", e);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ((*s)->ports().size(), 1u);
  const int port = (*s)->ports()[0];
  ASSERT_GT(port, 0);

  Response m = Get(port, "/metrics");
  EXPECT_EQ(m.code, 200);
  EXPECT_EQ(m.body, "topodra_x 1\n");
  EXPECT_EQ(m.content_type, kTextContentType);
  Response h = Get(port, "/healthz");
  EXPECT_EQ(h.code, 200);
  EXPECT_EQ(h.body, "ok\n");
  Response r = Get(port, "/readyz");
  EXPECT_EQ(r.code, 503);
  EXPECT_EQ(r.body, "driver dra.cpu: not registered with the kubelet\n");

  ready = Probe{};
  health = Probe{false, "the main loop has not run for 99 s"};
  EXPECT_EQ(Get(port, "/readyz").code, 200);
  h = Get(port, "/healthz");
  EXPECT_EQ(h.code, 503);
  EXPECT_EQ(h.body, "the main loop has not run for 99 s\n");
  EXPECT_EQ(Get(port, "/nothing").code, 404);
}

TEST(MetricsServerTest, AHandlerThatThrowsIsA500NotACrash) {
  Endpoints e;
  e.metrics = []() -> std::string { throw std::runtime_error("boom"); };
  e.health = [] { return Probe{}; };
  e.ready = [] { return Probe{}; };
  absl::StatusOr<std::unique_ptr<MetricsServer>> s = MetricsServer::Start("127.0.0.1:0", e);
  ASSERT_TRUE(s.ok()) << s.status();
  Response m = Get((*s)->ports()[0], "/metrics");
  EXPECT_EQ(m.code, 500);
  EXPECT_THAT(m.body, HasSubstr("boom"));
  EXPECT_EQ(Get((*s)->ports()[0], "/healthz").code, 200);
}

TEST(MetricsServerTest, AnAddressInUseIsAnError) {
  Endpoints e;
  e.metrics = [] { return std::string(); };
  e.health = e.ready = [] { return Probe{}; };
  absl::StatusOr<std::unique_ptr<MetricsServer>> first = MetricsServer::Start("127.0.0.1:0", e);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->ports()[0]);
  absl::StatusOr<std::unique_ptr<MetricsServer>> second = MetricsServer::Start(taken, e);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(),
            "metrics address \"" + taken +
                "\": already in use: another process listens there (another topodra daemon on "
                "this node? its /metrics and probes would answer for this one); choose a free "
                "address, or none to serve no metrics and probes");
}

TEST(MetricsServerTest, AnAddressOfAnotherMachineIsAnError) {
  Endpoints e;
  e.metrics = [] { return std::string(); };
  e.health = e.ready = [] { return Probe{}; };
  // TEST-NET-1 (RFC 5737): never an address of this machine.
  absl::StatusOr<std::unique_ptr<MetricsServer>> s = MetricsServer::Start("192.0.2.1:9477", e);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "metrics address \"192.0.2.1:9477\": not an address of this machine");
}

// The attack of issue 15: connections that never send a request and connections that send one
// byte a second, kept open (re-opened when closed) while the kubelet probes. Every probe must be
// answered within the kubelet's kind of timeout; with civetweb's 2 threads and 10 s request
// timeout none was.
void ExpectProbesSurviveSlowClients(int port) {
  ::topodra::testing::SlowClients attack(port, /*idle=*/64, /*trickle=*/8);
  int answered = 0;
  std::string failures;
  for (int i = 0; i < 25; ++i) {
    const Response r = ::topodra::testing::HttpGet(port, "/healthz", /*timeout_ms=*/2000);
    if (r.code == 200 && r.body == "ok\n") {
      ++answered;
    } else {
      failures += " probe " + std::to_string(i) + ": code " + std::to_string(r.code) + ";";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(answered, 25) << "unanswered:" << failures;
}

Endpoints AlwaysWell() {
  Endpoints e;
  e.metrics = [] { return std::string("topodra_x 1\n"); };
  e.health = e.ready = [] { return Probe{}; };
  return e;
}

TEST(MetricsServerTest, SlowClientsDoNotStarveProbesOnTheMetricsPort) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> s =
      MetricsServer::Start("127.0.0.1:0", AlwaysWell());
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectProbesSurviveSlowClients((*s)->ports()[0]);
}

TEST(MetricsServerTest, SlowClientsDoNotStarveProbesOnTheHealthPort) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> s =
      MetricsServer::Start("127.0.0.1:0", AlwaysWell(), Serving::kProbes);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectProbesSurviveSlowClients((*s)->ports()[0]);
}

TEST(MetricsServerTest, TheHealthAddressServesOnlyTheProbes) {
  Endpoints e = AlwaysWell();
  e.ready = [] { return Probe{false, "driver dra.cpu: not registered with the kubelet"}; };
  absl::StatusOr<std::unique_ptr<MetricsServer>> s =
      MetricsServer::Start("127.0.0.1:0", e, Serving::kProbes);
  ASSERT_TRUE(s.ok()) << s.status();
  const int port = (*s)->ports()[0];
  EXPECT_EQ(Get(port, "/healthz").code, 200);
  const Response r = Get(port, "/readyz");
  EXPECT_EQ(r.code, 503);
  EXPECT_EQ(r.body, "driver dra.cpu: not registered with the kubelet\n");
  const Response m = Get(port, "/metrics");
  EXPECT_EQ(m.code, 404);
  EXPECT_EQ(m.body, "no /metrics here\n");
}

TEST(MetricsServerTest, AHealthAddressInUseIsAnErrorNamingIt) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> first =
      MetricsServer::Start("127.0.0.1:0", AlwaysWell(), Serving::kProbes);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->ports()[0]);
  absl::StatusOr<std::unique_ptr<MetricsServer>> second =
      MetricsServer::Start(taken, AlwaysWell(), Serving::kProbes);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(),
            "health address \"" + taken +
                "\": already in use: another process listens there (another topodra daemon on "
                "this node? its probes would answer for this one); choose a free address, or none "
                "to serve no separate probes");
}

TEST(ListeningPortsForTest, TheHealthAddressIsNamedInItsErrors) {
  absl::StatusOr<std::optional<std::string>> got =
      ListeningPortsFor("localhost:9478", "health address");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(
      got.status().message(),
      "health address \"localhost:9478\": host \"localhost\" is not an IPv4 address or [IPv6] "
      "address (want :port, host:port or none)");
}

}  // namespace
}  // namespace topodra::metrics
