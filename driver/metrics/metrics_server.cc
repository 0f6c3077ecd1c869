#include "driver/metrics/metrics_server.h"

#include <arpa/inet.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "driver/metrics/http_server.h"
#include "driver/metrics/metrics.h"

namespace topodra::metrics {
namespace {

HttpResponse ProbeResponse(const Probe& p) {
  HttpResponse r;
  r.code = p.ok ? 200 : 503;
  r.body = p.ok ? std::string("ok\n") : p.message + "\n";
  return r;
}

}  // namespace

absl::StatusOr<std::optional<std::string>> ListeningPortsFor(const std::string& address,
                                                             const std::string& what) {
  if (address.empty() || address == "none") return std::optional<std::string>();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", address, "\": ", why, " (want :port, host:port or none)"));
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
    const std::string& listening_ports, Endpoints endpoints, Serving serving) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->endpoints_ = std::move(endpoints);
  const MetricsServer* self = s.get();
  std::vector<HttpRoute> routes = {
      {"/healthz", [self] { return ProbeResponse(self->endpoints_.health()); }},
      {"/readyz", [self] { return ProbeResponse(self->endpoints_.ready()); }},
  };
  HttpServerOptions o;
  if (serving == Serving::kMetricsAndProbes) {
    routes.push_back(HttpRoute{"/metrics",
                               [self] {
                                 HttpResponse r;
                                 r.content_type = kTextContentType;
                                 r.body = self->endpoints_.metrics();
                                 return r;
                               },
                               /*slow=*/true});
    o.what = "metrics address";
    o.in_use_hint =
        "another process listens there (another topodra daemon on this node? its /metrics and "
        "probes would answer for this one); choose a free address, or none to serve no metrics "
        "and probes";
    // Scrapers and whoever else reaches the port. A slot costs at most the 8 KiB head bound, so
    // the cap is set high: eviction of the oldest is the last resort, and a new connection that
    // waits long to send its request can lose its slot to a flood of newer ones.
    o.max_connections = 512;
    o.write_timeout = std::chrono::seconds(10);
  } else {
    o.what = "health address";
    o.in_use_hint =
        "another process listens there (another topodra daemon on this node? its probes would "
        "answer for this one); choose a free address, or none to serve no separate probes";
    // The kubelet needs two slots a period; the rest are for whoever else connects on the node,
    // so that holding them all takes hundreds of connections (see above for why not fewer).
    o.max_connections = 256;
    o.write_timeout = std::chrono::seconds(2);
  }
  o.head_timeout = std::chrono::seconds(2);
  o.max_head_bytes = 8192;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(listening_ports, std::move(routes), std::move(o));
  if (!server.ok()) return server.status();
  s->server_ = *std::move(server);
  return s;
}

MetricsServer::~MetricsServer() = default;

std::vector<int> MetricsServer::ports() const { return {server_->port()}; }

uint64_t MetricsServer::evictions() const { return server_->evictions(); }

}  // namespace topodra::metrics
