#include "driver/metrics/metrics_server.h"

#include <CivetServer.h>
#include <arpa/inet.h>
#include <civetweb.h>

#include <cstdlib>
#include <exception>
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
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("serve metrics on \"", listening_ports, "\": ", e.what()));
  }
  s->server_->addHandler("/metrics", s->handlers_[0].get());
  s->server_->addHandler("/healthz", s->handlers_[1].get());
  s->server_->addHandler("/readyz", s->handlers_[2].get());
  return s;
}

MetricsServer::~MetricsServer() {
  if (server_ != nullptr) server_->close();
}

std::vector<int> MetricsServer::ports() const { return server_->getListeningPorts(); }

}  // namespace topodra::metrics
