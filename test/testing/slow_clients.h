// Hostile HTTP clients for tests of the daemon's endpoints: raw TCP connections to 127.0.0.1 that
// send nothing (idle) or one byte of a request head per second (trickle), re-opened whenever the
// server closes them, for as long as the attack object lives. Also a raw one-shot exchange.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace topodra::testing {

// A connected socket to 127.0.0.1:port, or -1.
inline int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the peer has closed `fd` (or reset it) within `wait_ms`; unread data is discarded.
inline bool ClosedByPeer(int fd, int wait_ms) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) <= 0) return false;
    char buf[512];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) return true;
  }
}

// Sends `request` on a new connection and reads until the server closes it (up to `wait_ms`).
inline std::string RawExchange(int port, const std::string& request, int wait_ms = 10000) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "<no connection>";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string out;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (std::chrono::steady_clock::now() < give_up) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// `idle` connections that never send a byte and `trickle` connections that send one byte of a
// request head per second, kept open against `port` (re-opened when closed) until destroyed.
class SlowClients {
 public:
  SlowClients(int port, int idle, int trickle) : port_(port) {
    fds_.assign(static_cast<size_t>(idle + trickle), -1);
    trickle_from_ = static_cast<size_t>(idle);
    for (int& fd : fds_) fd = ConnectLoopback(port_);
    thread_ = std::thread([this] { Run(); });
  }
  ~SlowClients() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  SlowClients(const SlowClients&) = delete;
  SlowClients& operator=(const SlowClients&) = delete;

  // Connections the server closed and this re-opened.
  int reopened() const { return reopened_.load(); }

 private:
  void Run() {
    static constexpr char kHead[] = "GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa";
    std::vector<size_t> next(fds_.size(), 0);
    auto last_byte = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      const bool send_byte =
          std::chrono::steady_clock::now() - last_byte >= std::chrono::seconds(1);
      if (send_byte) last_byte = std::chrono::steady_clock::now();
      for (size_t i = 0; i < fds_.size(); ++i) {
        if (fds_[i] >= 0 && !ClosedByPeer(fds_[i], 0)) {
          if (send_byte && i >= trickle_from_) {
            const char c = kHead[next[i]++ % (sizeof(kHead) - 1)];
            (void)::send(fds_[i], &c, 1, MSG_NOSIGNAL);
          }
          continue;
        }
        if (fds_[i] >= 0) ::close(fds_[i]);
        fds_[i] = ConnectLoopback(port_);
        next[i] = 0;
        reopened_.fetch_add(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  const int port_;
  size_t trickle_from_ = 0;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<int> reopened_{0};
  std::thread thread_;
};

}  // namespace topodra::testing
