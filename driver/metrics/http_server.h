// A small HTTP/1.x server for the daemon's /metrics, /healthz and /readyz that clients cannot
// starve: one thread runs an epoll loop over non-blocking sockets, so an idle or slow client
// holds a connection slot, never a thread. Each connection gets one request (answered with
// Connection: close) and must deliver its head within a short deadline; when every slot is
// taken the oldest connection not being answered is closed to make room. Quick handlers (the
// probes) run on the loop itself; slow ones (a scrape renders every series) run on a worker
// thread so the loop keeps answering probes meanwhile.
//
// Why not civetweb (which served these before): it gives each connection a worker thread from
// accept until the request is read, so as many idle connections as it has threads left every
// probe waiting in its queue, and the kubelet restarted the daemon.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace topodra::metrics {

struct HttpResponse {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpRoute {
  std::string path;  // exact match, query ignored
  std::function<HttpResponse()> handler;
  // Runs on the worker thread, one request at a time, instead of on the loop.
  bool slow = false;
};

struct HttpServerOptions {
  // Names the address in errors: "metrics address", "health address".
  std::string what = "metrics address";
  // Follows "already in use: " when the address is taken: what to do about it.
  std::string in_use_hint = "another process listens there";
  // Open connections; at the cap a new one closes the oldest not being answered. Lowered to an
  // eighth of RLIMIT_NOFILE's soft limit when that is less.
  size_t max_connections = 64;
  // From accept to the end of the request head.
  std::chrono::milliseconds head_timeout{2000};
  // From the answer being ready to its last byte taken by the client.
  std::chrono::milliseconds write_timeout{10000};
  size_t max_head_bytes = 8192;
  // After the answer: how long the client may take to close its side while what it still sends
  // is discarded (one bounded read per readiness event, so a client that never stops sending
  // cannot hold the loop).
  std::chrono::milliseconds close_linger{1000};
  // Slow requests waiting for the worker (beside the one it runs); more are answered 503.
  size_t max_queued_jobs = 4;
};

class HttpServer {
 public:
  // Listens on `listening_ports` ("9477" for every IPv4 interface, "127.0.0.1:9477",
  // "[::1]:9477"; port 0 lets the kernel choose) and serves `routes` (GET only) until destroyed.
  // Fails when the address cannot be bound, saying why; errors quote the address.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listening_ports,
                                                           std::vector<HttpRoute> routes,
                                                           HttpServerOptions options);
  ~HttpServer();  // returns once the loop and the worker have stopped; a running handler ends
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Connections closed to make room for a newer one (since start).
  uint64_t evictions() const { return evictions_.load(); }
  // Connections closed unanswered because the process had no descriptor to spare (since start).
  uint64_t refusals() const { return refusals_.load(); }

 private:
  using Clock = std::chrono::steady_clock;
  enum class State { kReading, kHandling, kWriting, kClosing };
  struct Connection {
    int fd = -1;
    Clock::time_point opened;
    Clock::time_point deadline;  // of the current state; none while kHandling
    State state = State::kReading;
    std::string in;
    std::string out;
    size_t sent = 0;
  };
  struct Job {
    uint64_t id;
    size_t route;
  };
  struct Done {
    uint64_t id;
    HttpResponse response;
  };

  HttpServer() = default;
  void Loop();
  void AcceptAll();
  bool ReclaimSlot();
  bool EvictOldest();
  bool RefuseOne();
  void OnEvents(uint64_t id, uint32_t events);
  void Read(uint64_t id, Connection& c);
  void Dispatch(uint64_t id, Connection& c, const std::string& method, const std::string& path);
  void Respond(uint64_t id, Connection& c, const HttpResponse& r);
  void Write(uint64_t id, Connection& c);
  void Discard(uint64_t id, Connection& c);
  void Close(uint64_t id);
  void ExpireDeadlines();
  int MillisecondsToNextDeadline() const;
  void TakeFinished();
  void Work();

  HttpServerOptions options_;
  std::vector<HttpRoute> routes_;
  int port_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop, or the worker finished a job
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> refusals_{0};
  int spare_fd_ = -1;  // /dev/null, given up to accept and close a connection at EMFILE
  // Out of descriptors with no spare: the listening socket is not watched until then.
  Clock::time_point listen_resume_ = Clock::time_point::max();
  uint64_t next_id_ = 2;  // 0 and 1 tag the listening socket and the eventfd in epoll
  std::unordered_map<uint64_t, Connection> connections_;  // the loop's only
  std::thread loop_;

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<Job> jobs_;   // guarded by mu_
  std::deque<Done> done_;  // guarded by mu_
  std::thread worker_;     // only when a route is slow
};

}  // namespace topodra::metrics
