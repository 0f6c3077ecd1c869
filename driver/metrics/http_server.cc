#include "driver/metrics/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "driver/metrics/http_request.h"

namespace topodra::metrics {
namespace {

constexpr uint64_t kListenTag = 0;
constexpr uint64_t kWakeTag = 1;
// How long the listening socket is left unwatched when no descriptor can be freed to refuse a
// connection: it stays readable while its backlog holds one, which would spin the loop.
constexpr std::chrono::milliseconds kListenPause{100};

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

HttpResponse Text(int code, std::string body) {
  HttpResponse r;
  r.code = code;
  r.body = std::move(body);
  return r;
}

// Nothing may throw into the loop or the worker (STYLE.md): a failing handler is a 500.
HttpResponse Call(const HttpRoute& route) {
  try {
    return route.handler();
  } catch (const std::exception& e) {
    return Text(500, absl::StrCat("internal error: ", e.what(), "\n"));
  } catch (...) {
    return Text(500, "internal error\n");
  }
}

// A socket address for `host` ("" is IPv4's any) and `port`; false when host is no IP literal.
bool SocketAddress(const std::string& host, int port, sockaddr_storage* out, socklen_t* len) {
  *out = {};
  if (host.find(':') != std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in6*>(out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(*a);
    return inet_pton(AF_INET6, host.c_str(), &a->sin6_addr) == 1;
  }
  auto* a = reinterpret_cast<sockaddr_in*>(out);
  a->sin_family = AF_INET;
  a->sin_port = htons(static_cast<uint16_t>(port));
  *len = sizeof(*a);
  return host.empty() || inet_pton(AF_INET, host.c_str(), &a->sin_addr) == 1;
}

// "9477", "127.0.0.1:9477", "[::1]:9477" as host ("" for every IPv4 interface, brackets
// removed) and port.
void SplitListeningPorts(const std::string& ports, std::string* host, int* port) {
  const size_t colon = ports.rfind(':');
  *port = std::atoi(ports.c_str() + (colon == std::string::npos ? 0 : colon + 1));
  *host = colon == std::string::npos ? "" : ports.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[') *host = host->substr(1, host->size() - 2);
}

std::string WhyNotBound(int err, const HttpServerOptions& o) {
  switch (err) {
    case EADDRINUSE:
      return absl::StrCat("already in use: ", o.in_use_hint);
    case EADDRNOTAVAIL:
      return "not an address of this machine";
    case EACCES:
      return "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)";
    default:
      return std::strerror(err);
  }
}

void Watch(int epoll_fd, int op, int fd, uint64_t tag, uint32_t events) {
  epoll_event e{};
  e.events = events;
  e.data.u64 = tag;
  (void)::epoll_ctl(epoll_fd, op, fd, &e);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listening_ports,
                                                              std::vector<HttpRoute> routes,
                                                              HttpServerOptions options) {
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->options_ = std::move(options);
  // Every connection holds a descriptor of the daemon: never more than an eighth of its limit,
  // so that a flood of connections leaves it descriptors for its own files and sockets.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    s->options_.max_connections =
        std::clamp<size_t>(files.rlim_cur / 8, 1, s->options_.max_connections);
  }
  s->routes_ = std::move(routes);
  const std::string shown =
      listening_ports.find(':') == std::string::npos ? ":" + listening_ports : listening_ports;
  auto fail = [&](const std::string& why) {
    return absl::UnavailableError(absl::StrCat(s->options_.what, " \"", shown, "\": ", why));
  };
  std::string host;
  int port = 0;
  SplitListeningPorts(listening_ports, &host, &port);
  sockaddr_storage addr;
  socklen_t len = 0;
  if (!SocketAddress(host, port, &addr, &len)) return fail("not an IP address");
  s->listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return fail(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  // A port left in TIME_WAIT by our previous run is free.
  (void)::setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (addr.ss_family == AF_INET6) {
    (void)::setsockopt(s->listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  }
  if (::bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(s->listen_fd_, 128) != 0) {
    return fail(WhyNotBound(errno, s->options_));
  }
  len = sizeof(addr);
  if (::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return fail(absl::StrCat("getsockname: ", std::strerror(errno)));
  }
  s->port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  s->epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  s->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->epoll_fd_ < 0 || s->wake_fd_ < 0)
    return fail(absl::StrCat("epoll: ", std::strerror(errno)));
  s->spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  Watch(s->epoll_fd_, EPOLL_CTL_ADD, s->listen_fd_, kListenTag, EPOLLIN);
  Watch(s->epoll_fd_, EPOLL_CTL_ADD, s->wake_fd_, kWakeTag, EPOLLIN);
  if (std::any_of(s->routes_.begin(), s->routes_.end(),
                  [](const HttpRoute& r) { return r.slow; })) {
    s->worker_ = std::thread([p = s.get()] { p->Work(); });
  }
  s->loop_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

HttpServer::~HttpServer() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_cv_.notify_all();
  }
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  if (loop_.joinable()) loop_.join();
  if (worker_.joinable()) worker_.join();
  for (auto& [id, c] : connections_) ::close(c.fd);
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_, spare_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void HttpServer::Loop() {
  std::vector<epoll_event> events(64);
  while (!stop_.load()) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                               MillisecondsToNextDeadline());
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        AcceptAll();
      } else if (tag == kWakeTag) {
        uint64_t count = 0;
        (void)!::read(wake_fd_, &count, sizeof(count));
        TakeFinished();
      } else {
        OnEvents(tag, events[i].events);
      }
    }
    ExpireDeadlines();
    if (listen_resume_ <= Clock::now()) {
      listen_resume_ = Clock::time_point::max();
      Watch(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, kListenTag, EPOLLIN);
    }
  }
}

void HttpServer::AcceptAll() {
  // A few at a time, the loop reading between batches: a probe accepted in a burst of new
  // connections has its request read before the burst could make it the oldest at the cap.
  const size_t batch = std::max<size_t>(1, options_.max_connections / 4);
  for (size_t accepted = 0; accepted < batch; ++accepted) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: free one of ours; when none can go (the rest of the process holds
        // them), refuse the connection with the spare, as leaving it in the backlog would keep
        // the listening socket readable and the loop spinning.
        if (ReclaimSlot() || RefuseOne()) continue;
        listen_resume_ = Clock::now() + kListenPause;
        Watch(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, kListenTag, 0);
      }
      return;  // EAGAIN: the backlog is empty
    }
    if (connections_.size() >= options_.max_connections && !ReclaimSlot()) {
      ::close(fd);  // every slot is being answered: this one will be soon again
      continue;
    }
    const uint64_t id = next_id_++;
    Connection& c = connections_[id];
    c.fd = fd;
    c.opened = Clock::now();
    c.deadline = c.opened + options_.head_timeout;
    Watch(epoll_fd_, EPOLL_CTL_ADD, fd, id, EPOLLIN);
  }
}

// A slot for a new connection: one already answered and lingering goes first (no eviction: its
// answer is sent), else the oldest not being answered.
bool HttpServer::ReclaimSlot() {
  auto closing = std::find_if(connections_.begin(), connections_.end(),
                              [](const auto& e) { return e.second.state == State::kClosing; });
  if (closing == connections_.end()) return EvictOldest();
  Close(closing->first);
  return true;
}

// Accepts one connection on the spare descriptor and closes it at once; false without a spare.
bool HttpServer::RefuseOne() {
  if (spare_fd_ < 0) return false;
  ::close(spare_fd_);
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    refusals_.fetch_add(1);  // before the close: whoever sees the close sees the count
    ::close(fd);
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return true;
}

bool HttpServer::EvictOldest() {
  auto oldest = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->second.state == State::kHandling) continue;
    if (oldest == connections_.end() || it->second.opened < oldest->second.opened) oldest = it;
  }
  if (oldest == connections_.end()) return false;
  evictions_.fetch_add(1);  // before the close: whoever sees the close sees the count
  Close(oldest->first);
  return true;
}

void HttpServer::OnEvents(uint64_t id, uint32_t events) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if (c.state == State::kHandling) {
    // epoll reports a reset even for a socket watched for nothing: the client is gone, and its
    // answer, when the worker has it, finds no connection.
    if (events & (EPOLLHUP | EPOLLERR)) Close(id);
    return;
  }
  if (c.state == State::kReading && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
    Read(id, c);
  } else if (c.state == State::kWriting && (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))) {
    Write(id, c);
  } else if (c.state == State::kClosing) {
    Discard(id, c);
  }
}

void HttpServer::Read(uint64_t id, Connection& c) {
  bool ended = false;  // the client sent all it will (half-closed), or the connection broke
  while (c.in.size() < options_.max_head_bytes) {
    char buf[4096];
    const size_t want = std::min(sizeof(buf), options_.max_head_bytes - c.in.size());
    const ssize_t got = ::recv(c.fd, buf, want, 0);
    if (got > 0) {
      c.in.append(buf, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    ended = got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    break;
  }
  const HeadParse p = ParseRequestHead(c.in, options_.max_head_bytes);
  switch (p.kind) {
    case HeadParse::kIncomplete:
      if (ended) Close(id);
      return;
    case HeadParse::kBad:
      Respond(id, c, Text(400, p.error + "\n"));
      return;
    case HeadParse::kTooLarge:
      Respond(id, c, Text(431, p.error + "\n"));
      return;
    case HeadParse::kComplete:
      Dispatch(id, c, p.head.method, p.head.path);
      return;
  }
}

void HttpServer::Dispatch(uint64_t id, Connection& c, const std::string& method,
                          const std::string& path) {
  const auto route = std::find_if(routes_.begin(), routes_.end(),
                                  [&](const HttpRoute& r) { return r.path == path; });
  if (route == routes_.end()) {
    Respond(id, c, Text(404, absl::StrCat("no ", path.substr(0, 64), " here\n")));
    return;
  }
  if (method != "GET") {
    Respond(id, c, Text(405, "only GET\n"));
    return;
  }
  if (!route->slow) {
    Respond(id, c, Call(*route));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (jobs_.size() < options_.max_queued_jobs) {
      jobs_.push_back(Job{id, static_cast<size_t>(route - routes_.begin())});
      work_cv_.notify_one();
      c.state = State::kHandling;
    }
  }
  if (c.state != State::kHandling) {
    Respond(id, c,
            Text(503, absl::StrCat(options_.max_queued_jobs, " requests for ", path,
                                   " are waiting already\n")));
    return;
  }
  c.deadline = Clock::time_point::max();
  Watch(epoll_fd_, EPOLL_CTL_MOD, c.fd, id, 0);
}

void HttpServer::Respond(uint64_t id, Connection& c, const HttpResponse& r) {
  c.out = absl::StrCat("HTTP/1.1 ", r.code, " ", Reason(r.code),
                       "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                       "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n", r.body);
  c.sent = 0;
  c.state = State::kWriting;
  c.deadline = Clock::now() + options_.write_timeout;
  c.in.clear();
  c.in.shrink_to_fit();
  Watch(epoll_fd_, EPOLL_CTL_MOD, c.fd, id, EPOLLOUT);
  Write(id, c);
}

void HttpServer::Write(uint64_t id, Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;
  }
  if (c.sent < c.out.size()) {
    Close(id);  // the connection broke
    return;
  }
  // Whatever the client sent after its head (a body we do not read) would make close() send a
  // reset that can destroy the answer before the client reads it: end our side and discard what
  // still comes until the client closes, a bounded read per event and for a bounded time.
  ::shutdown(c.fd, SHUT_WR);
  c.state = State::kClosing;
  c.deadline = Clock::now() + options_.close_linger;
  c.out.clear();
  c.out.shrink_to_fit();
  Watch(epoll_fd_, EPOLL_CTL_MOD, c.fd, id, EPOLLIN);
}

void HttpServer::Discard(uint64_t id, Connection& c) {
  char sink[16384];
  const ssize_t n = ::recv(c.fd, sink, sizeof(sink), 0);
  if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return;
  Close(id);  // the client closed its side, or the connection broke
}

void HttpServer::Close(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  if (it->second.state == State::kHandling) {
    // Not rendered for nobody: a client that resets its scrapes must not queue work.
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(jobs_, [id](const Job& j) { return j.id == id; });
  }
  ::close(it->second.fd);  // also leaves the epoll set
  connections_.erase(it);
}

void HttpServer::ExpireDeadlines() {
  const Clock::time_point now = Clock::now();
  std::vector<uint64_t> late;
  for (const auto& [id, c] : connections_) {
    if (c.deadline <= now) late.push_back(id);
  }
  for (uint64_t id : late) Close(id);
}

int HttpServer::MillisecondsToNextDeadline() const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& [id, c] : connections_) next = std::min(next, c.deadline);
  next = std::min(next, listen_resume_);
  if (next == Clock::time_point::max()) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60000));
}

void HttpServer::TakeFinished() {
  std::deque<Done> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(done_);
  }
  for (Done& d : done) {
    auto it = connections_.find(d.id);
    if (it != connections_.end()) Respond(d.id, it->second, d.response);
  }
}

void HttpServer::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_.load() || !jobs_.empty(); });
    if (stop_.load()) return;
    const Job job = jobs_.front();
    jobs_.pop_front();
    lock.unlock();
    HttpResponse r = Call(routes_[job.route]);
    lock.lock();
    done_.push_back(Done{job.id, std::move(r)});
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

}  // namespace topodra::metrics
