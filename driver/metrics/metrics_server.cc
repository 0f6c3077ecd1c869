#include "driver/metrics/metrics_server.h"

#include <CivetServer.h>
#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "driver/metrics/metrics.h"

namespace topodra::metrics {
namespace {

void Respond(mg_connection* conn, int code, const char* content_type, const std::string& body) {
  const char* reason = code == 200 ? "OK" : code == 503 ? "Service Unavailable" : "Error";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: "
            "no-store\r\nConnection: close\r\n\r\n",
            code, reason, content_type, body.size());
  mg_write(conn, body.data(), body.size());
}

// Nothing may throw into a civetweb thread (STYLE.md): a failing callback is a 500.
class Handler : public CivetHandler {
 public:
  using Fn = std::function<void(mg_connection*)>;
  explicit Handler(Fn fn) : fn_(std::move(fn)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    try {
      fn_(conn);
    } catch (const std::exception& e) {
      Respond(conn, 500, "text/plain; charset=utf-8", absl::StrCat("internal error: ", e.what()));
    } catch (...) {
      Respond(conn, 500, "text/plain; charset=utf-8", "internal error");
    }
    return true;
  }

 private:
  Fn fn_;
};

void RespondProbe(mg_connection* conn, const Probe& p) {
  Respond(conn, p.ok ? 200 : 503, "text/plain; charset=utf-8",
          p.ok ? std::string("ok\n") : p.message + "\n");
}

// civetweb logs to stderr by itself; our log is spdlog's, and Start reports what failed.
int Quiet(const mg_connection*, const char*) { return 1; }

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

// civetweb's listening_ports ("9477", "127.0.0.1:9477", "[::1]:9477") as host ("" for every
// IPv4 interface, brackets removed) and port.
void SplitListeningPorts(const std::string& ports, std::string* host, int* port) {
  const size_t colon = ports.rfind(':');
  *port = std::atoi(ports.c_str() + (colon == std::string::npos ? 0 : colon + 1));
  *host = colon == std::string::npos ? "" : ports.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[') *host = host->substr(1, host->size() - 2);
}

// The address as the user wrote it for --metrics-address.
std::string Shown(const std::string& ports) {
  return ports.find(':') == std::string::npos ? ":" + ports : ports;
}

// civetweb says only that it has no context; binding the address ourselves tells why.
std::string WhyNotListening(const std::string& ports) {
  std::string host;
  int port = 0;
  SplitListeningPorts(ports, &host, &port);
  sockaddr_storage addr;
  socklen_t len = 0;
  if (!SocketAddress(host, port, &addr, &len)) return "not an IP address";
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::StrCat("socket: ", std::strerror(errno));
  const int one = 1;
  // As civetweb does: a port left in TIME_WAIT by our previous run is free.
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int err = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 1) != 0) {
    err = errno;
  }
  ::close(fd);
  switch (err) {
    case 0:
      return "civetweb could not start a server there";
    case EADDRINUSE:
      return "already in use: another process listens there (another topodra daemon on this "
             "node? its /metrics and probes would answer for this one); choose a free address, "
             "or none to serve no metrics and probes";
    case EADDRNOTAVAIL:
      return "not an address of this machine";
    case EACCES:
      return "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)";
    default:
      return std::strerror(err);
  }
}

// Connects to the server and hangs up at once: civetweb's accept loop polls its listening sockets
// up to 2 s at a time (SOCKET_TIMEOUT_QUANTUM) before it looks at its stop flag again, and this
// ends that poll. The connection carries no request, so the worker that gets it closes it.
void Wake(const std::string& host, int port) {
  sockaddr_storage addr;
  socklen_t len = 0;
  if (!SocketAddress(host, port, &addr, &len)) return;
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  ::close(fd);
}

}  // namespace

absl::StatusOr<std::optional<std::string>> ListeningPortsFor(const std::string& address) {
  if (address.empty() || address == "none") return std::optional<std::string>();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address \"", address, "\": ", why,
                                                   " (want :port, host:port or none)"));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  const std::string host = address.substr(0, colon);
  const std::string port_text = address.substr(colon + 1);
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return bad(absl::StrCat("port \"", port_text, "\" is not a number from 1 to 65535"));
  }
  if (host.empty()) return std::optional<std::string>(port_text);
  unsigned char buf[16];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) != 1) {
      return bad(absl::StrCat("host \"", host, "\" is not an IPv6 address"));
    }
    return std::optional<std::string>(address);
  }
  if (inet_pton(AF_INET, host.c_str(), buf) != 1) {
    return bad(absl::StrCat("host \"", host, "\" is not an IPv4 address or [IPv6] address"));
  }
  return std::optional<std::string>(address);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listening_ports, Endpoints endpoints) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->endpoints_ = std::move(endpoints);
  MetricsServer* self = s.get();
  s->handlers_.push_back(std::make_unique<Handler>([self](mg_connection* conn) {
    Respond(conn, 200, kTextContentType, self->endpoints_.metrics());
  }));
  s->handlers_.push_back(std::make_unique<Handler>(
      [self](mg_connection* conn) { RespondProbe(conn, self->endpoints_.health()); }));
  s->handlers_.push_back(std::make_unique<Handler>(
      [self](mg_connection* conn) { RespondProbe(conn, self->endpoints_.ready()); }));
  CivetCallbacks callbacks;
  callbacks.log_message = Quiet;
  const std::vector<std::string> options = {
      "listening_ports", listening_ports, "num_threads", "2", "request_timeout_ms", "10000"};
  try {
    s->server_ = std::make_unique<CivetServer>(options, &callbacks);
  } catch (const std::exception&) {
    // CivetServer's own text ("null context when constructing CivetServer") says nothing useful.
    return absl::UnavailableError(absl::StrCat("metrics address \"", Shown(listening_ports),
                                               "\": ", WhyNotListening(listening_ports)));
  }
  std::string host;
  int port = 0;
  SplitListeningPorts(listening_ports, &host, &port);
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  s->wake_host_ = host;
  s->wake_ports_ = s->server_->getListeningPorts();
  s->server_->addHandler("/metrics", s->handlers_[0].get());
  s->server_->addHandler("/healthz", s->handlers_[1].get());
  s->server_->addHandler("/readyz", s->handlers_[2].get());
  return s;
}

MetricsServer::~MetricsServer() {
  if (server_ == nullptr) return;
  std::atomic<bool> closed{false};
  std::thread closer([this, &closed] {
    server_->close();
    closed = true;
  });
  // The stop flag is set at some moment inside close(): wake the accept loop until it has seen it.
  // Its poll lasts 2 s, so after 2.5 s of knocking nothing is left to wake; close() may still be
  // waiting for a slow request, and by then the port may belong to someone else.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
  while (!closed.load() && std::chrono::steady_clock::now() < give_up) {
    for (int port : wake_ports_) Wake(wake_host_, port);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  closer.join();
}

std::vector<int> MetricsServer::ports() const { return server_->getListeningPorts(); }

}  // namespace topodra::metrics
