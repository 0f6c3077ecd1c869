// The event-loop HTTP server behind /metrics, /healthz and /readyz: what it answers to good and
// bad requests, and how it bounds what a client can hold (head deadline, head size, connection
// cap with eviction of the oldest, slow handlers off the loop).
#include "driver/metrics/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "test/testing/http_get.h"
#include "test/testing/slow_clients.h"

namespace topodra::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::topodra::testing::ClosedByPeer;
using ::topodra::testing::ConnectLoopback;
using ::topodra::testing::RawExchange;

HttpRoute Fixed(const std::string& path, int code, const std::string& body) {
  return HttpRoute{path, [code, body] {
                     HttpResponse r;
                     r.code = code;
                     r.body = body;
                     return r;
                   }};
}

// Deadlines far beyond any test, so that only what a test does closes a connection.
HttpServerOptions Patient() {
  HttpServerOptions o;
  o.head_timeout = std::chrono::seconds(600);
  o.write_timeout = std::chrono::seconds(600);
  return o;
}

std::unique_ptr<HttpServer> MustStart(std::vector<HttpRoute> routes, HttpServerOptions o) {
  absl::StatusOr<std::unique_ptr<HttpServer>> s =
      HttpServer::Start("127.0.0.1:0", std::move(routes), std::move(o));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(HttpServerTest, AnswersEachRequestOnceAndCloses) {
  auto s =
      MustStart({Fixed("/healthz", 200, "ok\n"), Fixed("/readyz", 503, "not yet\n")}, Patient());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(RawExchange(s->port(), "GET /healthz?verbose=1 HTTP/1.1\r\nHost: x\r\n\r\n"),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "
            "3\r\nCache-Control: no-store\r\nConnection: close\r\n\r\nok\n");
  EXPECT_EQ(RawExchange(s->port(), "GET /readyz HTTP/1.0\r\n\r\n"),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 8\r\nCache-Control: no-store\r\nConnection: close\r\n\r\nnot yet\n");
  const ::topodra::testing::HttpResponse r = ::topodra::testing::HttpGet(s->port(), "/healthz");
  EXPECT_EQ(r.code, 200);
  EXPECT_EQ(r.body, "ok\n");
}

TEST(HttpServerTest, RefusesWhatIsNotAGetOfAKnownPath) {
  auto s = MustStart({Fixed("/healthz", 200, "ok\n")}, Patient());
  ASSERT_NE(s, nullptr);
  const int port = s->port();
  std::string r = RawExchange(port, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 404 Not Found\r\n"));
  EXPECT_THAT(r, HasSubstr("\r\n\r\nno /metrics here\n"));
  r = RawExchange(port, "POST /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  r = RawExchange(port, "GET /healthz HTTP/2.0\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  EXPECT_THAT(r, HasSubstr("version \"HTTP/2.0\" is not HTTP/1.0 or HTTP/1.1\n"));
  // Rejected as soon as the request line is complete: no need to wait for a head that never ends.
  r = RawExchange(port, "\x16\x03\x01 hello TLS\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 400 Bad Request\r\n"));
}

TEST(HttpServerTest, AHeadLongerThanTheBoundIsRefused) {
  HttpServerOptions o = Patient();
  o.max_head_bytes = 1024;
  auto s = MustStart({Fixed("/healthz", 200, "ok\n")}, o);
  ASSERT_NE(s, nullptr);
  const std::string r = RawExchange(
      s->port(), "GET /healthz HTTP/1.1\r\nX-Big: " + std::string(5000, 'a') + "\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
  EXPECT_THAT(r, HasSubstr("request head is longer than 1024 bytes\n"));
}

TEST(HttpServerTest, AClientThatDoesNotFinishItsHeadInTimeIsClosedEvenIfItKeepsSending) {
  HttpServerOptions o = Patient();
  o.head_timeout = std::chrono::milliseconds(300);
  auto s = MustStart({Fixed("/healthz", 200, "ok\n")}, o);
  ASSERT_NE(s, nullptr);
  const int idle = ConnectLoopback(s->port());
  const int trickle = ConnectLoopback(s->port());
  ASSERT_GE(idle, 0);
  ASSERT_GE(trickle, 0);
  EXPECT_TRUE(ClosedByPeer(idle, 20000));
  // One byte every 50 ms: never a pause as long as the deadline, yet the deadline counts from
  // the connection's start, so it is closed all the same.
  bool closed = false;
  const std::string head = "GET /healthz HTTP/1.1\r\nX-Slow: ";
  for (int i = 0; i < 400 && !closed; ++i) {
    const char c = i < static_cast<int>(head.size()) ? head[i] : 'a';
    (void)::send(trickle, &c, 1, MSG_NOSIGNAL);
    closed = ClosedByPeer(trickle, 50);
  }
  EXPECT_TRUE(closed) << "a client trickling its head for 20 s was not closed";
  ::close(idle);
  ::close(trickle);
  EXPECT_EQ(s->evictions(), 0u);
}

TEST(HttpServerTest, AtTheCapANewConnectionClosesTheOldestIdleOne) {
  HttpServerOptions o = Patient();
  o.max_connections = 8;
  auto s = MustStart({Fixed("/healthz", 200, "ok\n")}, o);
  ASSERT_NE(s, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(ConnectLoopback(s->port()));
    ASSERT_GE(idle.back(), 0);
    // A probe between two idle connections makes sure the server accepted them in this order;
    // it fits beside the idle ones while they leave a slot free.
    if (i < 7) {
      ASSERT_EQ(::topodra::testing::HttpGet(s->port(), "/healthz").code, 200);
    }
  }
  EXPECT_EQ(s->evictions(), 0u);
  // All 8 slots idle: the probe takes the slot of the oldest.
  EXPECT_EQ(::topodra::testing::HttpGet(s->port(), "/healthz").code, 200);
  EXPECT_EQ(s->evictions(), 1u);
  EXPECT_TRUE(ClosedByPeer(idle[0], 10000)) << "the oldest idle connection is still open";
  for (size_t i = 1; i < idle.size(); ++i) {
    EXPECT_FALSE(ClosedByPeer(idle[i], 0)) << "idle connection " << i << " was closed";
  }
  for (int fd : idle) ::close(fd);
}

TEST(HttpServerTest, IdleConnectionsBeyondTheCapDoNotKeepProbesOut) {
  HttpServerOptions o = Patient();
  o.max_connections = 16;
  auto s = MustStart({Fixed("/healthz", 200, "ok\n")}, o);
  ASSERT_NE(s, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) idle.push_back(ConnectLoopback(s->port()));
  int answered = 0;
  for (int i = 0; i < 25; ++i) {
    answered += ::topodra::testing::HttpGet(s->port(), "/healthz", /*timeout_ms=*/2000).code == 200;
  }
  EXPECT_EQ(answered, 25);
  // The 64 idle ones left 16 slots taken by the last 16 of them, and the first probe evicted one
  // more; each later probe found the slot of the one before free again.
  EXPECT_EQ(s->evictions(), 64u - 16u + 1u);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(ClosedByPeer(idle[i], i < 49 ? 10000 : 0), i < 49) << "idle connection " << i;
  }
  for (int fd : idle) ::close(fd);
}

// A flood of connections must not take the descriptors the daemon needs for its own files.
TEST(HttpServerTest, TheCapIsAnEighthOfTheDescriptorLimitWhenThatIsLess) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_GE(saved.rlim_cur, 256u);
  rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  HttpServerOptions o = Patient();
  o.max_connections = 512;
  auto s = MustStart({Fixed("/healthz", 200, "ok\n")}, o);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_NE(s, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(ConnectLoopback(s->port()));
  EXPECT_EQ(::topodra::testing::HttpGet(s->port(), "/healthz").code, 200);
  // 256 / 8 = 32 slots: 8 idle connections evicted by the others, one by the probe.
  EXPECT_EQ(s->evictions(), 9u);
  for (int fd : idle) ::close(fd);
}

TEST(HttpServerTest, ASlowHandlerDoesNotHoldUpTheQuickOnes) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  HttpRoute slow{"/metrics",
                 [released] {
                   released.wait();
                   HttpResponse r;
                   r.body = "scraped\n";
                   return r;
                 },
                 /*slow=*/true};
  auto s = MustStart({slow, Fixed("/healthz", 200, "ok\n")}, Patient());
  ASSERT_NE(s, nullptr);
  const int port = s->port();
  std::future<::topodra::testing::HttpResponse> scrape = std::async(
      std::launch::async, [port] { return ::topodra::testing::HttpGet(port, "/metrics"); });
  // The scrape is stuck in its handler; probes are still answered.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(::topodra::testing::HttpGet(port, "/healthz", /*timeout_ms=*/2000).code, 200);
  }
  EXPECT_EQ(scrape.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  release.set_value();
  const ::topodra::testing::HttpResponse r = scrape.get();
  EXPECT_EQ(r.code, 200);
  EXPECT_EQ(r.body, "scraped\n");
}

// A client that keeps sending after its request must not hold the loop: what comes after the
// answer is discarded a bounded read at a time, and only for a bounded time.
TEST(HttpServerTest, AClientStreamingAfterItsRequestDoesNotKeepProbesOut) {
  auto s = MustStart({Fixed("/healthz", 200, "ok\n")}, Patient());
  ASSERT_NE(s, nullptr);
  const int port = s->port();
  std::atomic<bool> stop{false};
  std::atomic<int> streams{0};
  auto stream = [&] {
    const std::string junk(1 << 20, 'x');
    while (!stop.load()) {
      const int fd = ConnectLoopback(port);
      if (fd < 0) continue;
      streams.fetch_add(1);
      const std::string request = "GET /healthz HTTP/1.1\r\n\r\n" + junk;
      // Blocks while the server's buffer is full; fails once the server has closed.
      for (bool first = true; !stop.load(); first = false) {
        const std::string& chunk = first ? request : junk;
        if (::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0) break;
      }
      ::close(fd);
    }
  };
  std::vector<std::thread> streamers;
  for (int i = 0; i < 3; ++i) streamers.emplace_back(stream);
  while (streams.load() == 0) std::this_thread::yield();
  int answered = 0;
  for (int i = 0; i < 25; ++i) {
    if (::topodra::testing::HttpGet(port, "/healthz", /*timeout_ms=*/5000).code != 200) break;
    ++answered;
  }
  stop = true;
  s.reset();  // closes the streamers' connections, so that their sends return
  for (std::thread& t : streamers) t.join();
  EXPECT_EQ(answered, 25);
}

// A handler for /metrics that counts its calls; the first waits until released.
struct CountedScrape {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> renders{0};
  HttpRoute Route() {
    return HttpRoute{"/metrics",
                     [this] {
                       if (renders.fetch_add(1) == 0) released.wait();
                       HttpResponse r;
                       r.body = "scraped\n";
                       return r;
                     },
                     /*slow=*/true};
  }
  // False when no render started within 10 s.
  bool WaitForFirst() const {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (renders.load() == 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    return renders.load() > 0;
  }
};

// Sends `request` on a new connection and returns it; the probe that follows is answered after
// the loop has seen the request (epoll reports descriptors in the order they became ready).
int SendAndSync(int port, const std::string& request) {
  const int fd = ConnectLoopback(port);
  if (fd >= 0) (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  EXPECT_EQ(::topodra::testing::HttpGet(port, "/healthz").code, 200);
  return fd;
}

void Reset(int fd) {
  const linger abort{1, 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
  ::close(fd);
}

TEST(HttpServerTest, AScrapeWhoseClientIsGoneIsNotRendered) {
  CountedScrape scrape;
  HttpServerOptions o = Patient();
  o.max_queued_jobs = 100;
  auto s = MustStart({scrape.Route(), Fixed("/healthz", 200, "ok\n")}, o);
  ASSERT_NE(s, nullptr);
  const int port = s->port();
  const int first = SendAndSync(port, "GET /metrics HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(scrape.WaitForFirst());
  Reset(first);
  // The worker is held in the first render; these queue behind it and are reset.
  for (int i = 0; i < 40; ++i) Reset(SendAndSync(port, "GET /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(::topodra::testing::HttpGet(port, "/healthz").code, 200);  // resets seen
  scrape.release.set_value();
  // Rendered after whatever was queued before it.
  EXPECT_EQ(::topodra::testing::HttpGet(port, "/metrics").code, 200);
  EXPECT_EQ(scrape.renders.load(), 2);
}

TEST(HttpServerTest, ScrapesBeyondTheQueueBoundAreA503) {
  CountedScrape scrape;
  HttpServerOptions o = Patient();
  o.max_queued_jobs = 2;
  auto s = MustStart({scrape.Route(), Fixed("/healthz", 200, "ok\n")}, o);
  ASSERT_NE(s, nullptr);
  const int port = s->port();
  std::vector<int> waiting;
  waiting.push_back(SendAndSync(port, "GET /metrics HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(scrape.WaitForFirst());
  for (int i = 0; i < 2; ++i) waiting.push_back(SendAndSync(port, "GET /metrics HTTP/1.1\r\n\r\n"));
  const std::string r = RawExchange(port, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(r, HasSubstr("\r\n\r\n2 requests for /metrics are waiting already\n"));
  scrape.release.set_value();
  for (int fd : waiting) {
    EXPECT_TRUE(ClosedByPeer(fd, 10000));
    ::close(fd);
  }
  EXPECT_EQ(scrape.renders.load(), 3);
}

// Out of descriptors with none of its own to free, the server refuses a connection at once
// instead of leaving it in the backlog, which keeps the listening socket readable and the loop
// spinning.
TEST(HttpServerTest, WithoutADescriptorForItAConnectionIsRefusedOnce) {
  auto s = MustStart({Fixed("/healthz", 200, "ok\n")}, Patient());
  ASSERT_NE(s, nullptr);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(s->port()));
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_GE(saved.rlim_cur, 256u);
  rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd = ::dup(client); fd >= 0; fd = ::dup(client)) filler.push_back(fd);
  const bool connected = ::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  const bool refused = connected && ClosedByPeer(client, 10000);
  for (int fd : filler) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ::close(client);
  EXPECT_TRUE(connected);
  EXPECT_TRUE(refused) << "the connection was left pending";
  EXPECT_EQ(s->refusals(), 1u);
  EXPECT_EQ(s->evictions(), 0u);
  EXPECT_EQ(::topodra::testing::HttpGet(s->port(), "/healthz").code, 200);
}

TEST(HttpServerTest, AThrowingHandlerIsA500) {
  HttpRoute boom{"/metrics", []() -> HttpResponse { throw std::runtime_error("boom"); }, true};
  HttpRoute quick{"/healthz", []() -> HttpResponse { throw 42; }};
  auto s = MustStart({boom, quick}, Patient());
  ASSERT_NE(s, nullptr);
  ::topodra::testing::HttpResponse r = ::topodra::testing::HttpGet(s->port(), "/metrics");
  EXPECT_EQ(r.code, 500);
  EXPECT_EQ(r.body, "internal error: boom\n");
  r = ::topodra::testing::HttpGet(s->port(), "/healthz");
  EXPECT_EQ(r.code, 500);
  EXPECT_EQ(r.body, "internal error\n");
}

TEST(HttpServerTest, AnAddressOfAnotherMachineIsAnError) {
  HttpServerOptions o;
  o.what = "health address";
  // TEST-NET-1 (RFC 5737): never an address of this machine.
  absl::StatusOr<std::unique_ptr<HttpServer>> s = HttpServer::Start("192.0.2.1:9478", {}, o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "health address \"192.0.2.1:9478\": not an address of this machine");
}

}  // namespace
}  // namespace topodra::metrics
