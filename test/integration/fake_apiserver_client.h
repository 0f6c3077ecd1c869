// A REST client of the fake API server, as the daemon would make one from its kubeconfig (TLS
// CA and token when the server uses them), for tests and benchmarks that talk to it directly.
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "driver/kube/rest_client.h"
#include "test/integration/fake_apiserver.h"

namespace topodra::testing {

// nullptr (and the reason on stderr) when the client cannot be made.
inline std::unique_ptr<kube::RestClient> ClientFor(const FakeApiServer& server,
                                                   std::chrono::milliseconds timeout) {
  kube::ClusterConfig c;
  c.server = server.url();
  c.ca_file = server.ca_file();
  c.token = server.token();
  c.timeout = timeout;
  absl::StatusOr<std::unique_ptr<kube::RestClient>> client = kube::NewHttpRestClient(c);
  if (!client.ok()) {
    std::fprintf(stderr, "client of the fake API server: %s\n",
                 std::string(client.status().message()).c_str());
    return nullptr;
  }
  return *std::move(client);
}

}  // namespace topodra::testing
