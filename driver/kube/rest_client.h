// A small Kubernetes REST client: JSON over HTTP(S) with bearer tokens or client certificates.
// Only the verbs topodra needs; resource-specific paths live with their users (publish/, claims/).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace topodra::kube {

// Where the API server is and how to authenticate: from the in-cluster service account or a
// kubeconfig file.
struct ClusterConfig {
  std::string server;   // "https://10.0.0.1:443" (no trailing slash)
  std::string ca_file;  // PEM file, then the only CA trusted; no CA at all: system store
  std::string ca_data;  // PEM text (kubeconfig certificate-authority-data, decoded)
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;
  std::string token;       // bearer token
  std::string token_file;  // re-read on 401 and periodically (rotating SA tokens)
  std::string client_cert_file, client_key_file;  // mTLS, PEM files
  std::string client_cert_data, client_key_data;  // mTLS, PEM text (decoded)
  std::chrono::milliseconds timeout{10000};       // per request (and connect), except watches
  // token_file is re-read before a request when the last read is older than this (client-go:
  // one minute); 0 re-reads before every request.
  std::chrono::milliseconds token_refresh{60000};
};

// KUBERNETES_SERVICE_HOST/PORT + /var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}.
// sa_dir is a parameter so tests can point it at a temporary directory.
absl::StatusOr<ClusterConfig> InClusterConfig(
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");
// The current context of a kubeconfig file (YAML).
absl::StatusOr<ClusterConfig> KubeconfigConfig(const std::string& path);
// The same from kubeconfig text, without I/O: relative file names (certificate-authority,
// client-certificate, client-key, tokenFile) are resolved against base_dir, the file's directory.
// Base64 fields are decoded; `token` wins over `tokenFile`, *-data over the file variants.
absl::StatusOr<ClusterConfig> ParseKubeconfig(const std::string& yaml_text,
                                              const std::string& base_dir);

// Errors map HTTP codes onto absl codes and keep the HTTP code and the server's Status message:
// 400 InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 404 NotFound,
// 409 AlreadyExists (reason AlreadyExists) or Aborted (Conflict), 410 OutOfRange (Expired/Gone),
// 422 InvalidArgument, 429 ResourceExhausted, 5xx Unavailable, connect failure Unavailable,
// timeout DeadlineExceeded; any other 4xx FailedPrecondition, other codes Unknown.
// Message: "<VERB> <path>: HTTP <code> <reason>: <server message>" (reason and message from the
// v1 Status body, else the HTTP reason phrase and the start of the raw body). A 2xx body that is
// not JSON is Internal.
std::optional<int> HttpCodeOf(const absl::Status& status);  // from the status payload
// The error of an HTTP answer `http_code` with the v1 Status `reason` (may be empty), mapped as
// above and carrying the code for HttpCodeOf; `text` is the whole message. For clients of any
// transport (the HTTP one, the in-memory fake of the tests).
absl::Status HttpError(int http_code, const std::string& reason, const std::string& text);

struct Response {
  int http_code = 0;
  nlohmann::json body;
  // "Warning:" headers (e.g. unknown fields dropped): the quoted text of `299 - "text"`, else
  // the raw header value.
  std::vector<std::string> warnings;
};

// Limits of one request, tighter than the client's own (ClusterConfig::timeout).
struct RequestLimits {
  // > 0: the whole request (connect included) takes at most this long, when that is shorter than
  // the client's timeout; DeadlineExceeded after it.
  std::chrono::milliseconds timeout{0};
  // Polled at least every 50 ms: true abandons the request (Cancelled). May be null.
  const std::atomic<bool>* cancelled = nullptr;
  // The same, asked on the thread that runs the request, for a caller that keeps its
  // cancellation check on its own thread (a gRPC handler's, in ClaimService). May be empty.
  std::function<bool()> caller_gone;
};

// One watch event as the server sent it: {"type": "...", "object": {...}}. Return false to stop.
using WatchHandler = std::function<bool(const nlohmann::json& event)>;

class RestClient {
 public:
  virtual ~RestClient() = default;
  // path is everything after the server URL, query included ("/apis/...?...").
  virtual absl::StatusOr<Response> Get(const std::string& path) = 0;
  // Get within `limits`. Test doubles that do not override it ignore the limits.
  virtual absl::StatusOr<Response> GetWithin(const std::string& path,
                                             const RequestLimits& /*limits*/) {
    return Get(path);
  }
  virtual absl::StatusOr<Response> Post(const std::string& path, const nlohmann::json& body) = 0;
  virtual absl::StatusOr<Response> Put(const std::string& path, const nlohmann::json& body) = 0;
  virtual absl::StatusOr<Response> Delete(const std::string& path, const nlohmann::json& body) = 0;
  // Streams newline-delimited watch events until the server ends the stream (OkStatus), the
  // handler returns false or *stop becomes true (OkStatus), or an error: an HTTP error on
  // connect (mapped as above), a line that is not a JSON object or is longer than 16 MiB, a
  // broken connection. *stop (may be null) is polled at least every 50 ms, also while the
  // stream is idle. No overall timeout: the watch ends with DeadlineExceeded after less than
  // 1 byte/s for max(2 x timeoutSeconds, 60 s), or 61 min when the path has no timeoutSeconds.
  // on_event runs on the calling thread; an exception from it becomes an Internal error.
  virtual absl::Status Watch(const std::string& path, const WatchHandler& on_event,
                             const std::atomic<bool>* stop) = 0;
  // Makes every Watch of this client blocked at the moment look at its stop flag now, so one
  // that is set ends at once rather than at the next poll. Call it after setting the flag: a
  // watch between its look at the flag and its wait still wakes (the HTTP client keeps the
  // wake-up for its next poll). The 50 ms poll of Watch stays for flags set without a wake-up.
  virtual void WakeWatches() {}
};

// The implementation: our own HTTP/1.1 client on OpenSSL (http_rest_client.cc). Thread-safe.
// Connections are kept alive in a pool of up to 16, each used by one request at a time; every
// watch has a connection of its own. With token_file set, a 401 re-reads the file and, when the
// token changed, retries the request once. tls_server_name: SNI and the certificate check use
// that name while the connection goes to the server's host, named in the Host header. Ignores
// SIGPIPE when it is not handled (TLS writes through the socket with write()).
absl::StatusOr<std::unique_ptr<RestClient>> NewHttpRestClient(const ClusterConfig& config);

// "spec.driver=dra.cpu,spec.nodeName=n1" -> percent-encoded for a query string.
std::string UrlEncode(const std::string& s);

}  // namespace topodra::kube
