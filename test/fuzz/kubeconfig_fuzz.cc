// ParseKubeconfig on arbitrary text: any input is a status, never a crash, a hang or a leak; an
// accepted config is one the client can use.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "driver/kube/rest_client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<topodra::kube::ClusterConfig> config =
      topodra::kube::ParseKubeconfig(text, "/base");
  if (!config.ok()) {
    if (config.status().message().empty()) std::abort();
    return 0;
  }
  const std::string& server = config->server;
  if (server.rfind("https://", 0) != 0 && server.rfind("http://", 0) != 0) std::abort();
  if (server.back() == '/') std::abort();
  // Relative file names are resolved against the base directory.
  for (const std::string* path : {&config->ca_file, &config->token_file, &config->client_cert_file,
                                  &config->client_key_file}) {
    if (!path->empty() && path->front() != '/') std::abort();
  }
  const bool cert = !config->client_cert_file.empty() || !config->client_cert_data.empty();
  const bool key = !config->client_key_file.empty() || !config->client_key_data.empty();
  if (cert != key) std::abort();
  return 0;
}
