// Starts test/integration/fake_apiserver.py (a fake Kubernetes API server, Python standard
// library only; PyYAML when CRDs are given) as a child process for gtest-based tests, waits until
// it listens and gives its URL, CA and token. The server enforces the real API's rules for
// ResourceSlices, ResourceClaims (with their /status subresource) and DeviceClasses (schema,
// validation limits, resourceVersion conflicts, watch with bookmarks and 410 Expired, field
// selectors, dry-run, strict field validation), and serves the custom resources of the
// CustomResourceDefinition YAML files in `crds` (e.g. charts/topodra/crds/*.yaml) with their
// structural schema (pruning, defaults, validation), x-kubernetes-validations rules (a CEL subset:
// has(), !, &&, ||, ==, != on self/oldSelf paths), status subresource, generation and
// selectableFields. A CRD the fake cannot serve exactly makes Start() fail with the server's
// message. See the script's docstring and --help.
//
// Besides the API port the server always opens a plain-HTTP control port (also when the API is
// TLS) on which the control helpers below talk to /__control/*.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace topodra::testing {

struct FakeApiServerOptions {
  bool tls = false;   // HTTPS with a throwaway CA and a server cert for 127.0.0.1 and localhost
  bool mtls = false;  // additionally require client certs signed by that CA (implies tls)
  std::string token;  // when set, every API request needs "Authorization: Bearer <token>"
  std::vector<std::string> versions = {"v1", "v1beta2"};  // resource.k8s.io versions served
  bool accept_mixins = false;  // KEP-5234 fields in the schema (default: unknown fields)
  // false: spec.devices[].taints of ResourceSlices are silently dropped (--device-taints drop),
  // as by an API server whose DRADeviceTaints feature gate is off.
  bool device_taints = true;
  std::vector<std::string> crds;  // CustomResourceDefinition YAML files to serve (--crd each)
  std::vector<std::pair<std::string, std::string>> nodes;  // Node name -> UID
  int watch_history = 1000;  // events kept; watches from older resourceVersions get 410
  double bookmark_interval_s = 1.0;
  std::vector<std::string> extra_args;  // more flags for fake_apiserver.py
  std::string python = "/usr/bin/python3";
};

class FakeApiServer {
 public:
  // Generates the PKI with the openssl CLI (when tls), spawns the server with fork/exec and
  // waits up to 10 s for it to listen. If it dies first, the error carries its stderr tail.
  static absl::StatusOr<std::unique_ptr<FakeApiServer>> Start(FakeApiServerOptions opts = {});

  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;
  ~FakeApiServer();  // Stop(), then removes the temporary directory (certs, kubeconfigs, logs)

  std::string url() const;  // "http://127.0.0.1:PORT" or "https://127.0.0.1:PORT"
  int port() const { return port_; }
  std::string ca_file() const { return ca_file_; }  // PEM of the CA (tls only, else "")
  std::string client_cert_file() const { return client_cert_file_; }  // mtls only
  std::string client_key_file() const { return client_key_file_; }    // mtls only
  std::string token() const { return opts_.token; }
  pid_t pid() const { return pid_; }  // -1 when stopped
  std::string temp_dir() const { return dir_; }

  // SIGTERM, then SIGKILL after 5 s; waits for the process so its port is free on return.
  absl::Status Stop();
  // A fresh process on the same port with an empty store, like an API server whose etcd was
  // wiped. Its resourceVersions are higher than the old ones, so watches resumed from an old
  // resourceVersion get 410 Expired.
  absl::Status Restart();

  // A kubeconfig (YAML) with this server, its CA, token and client cert; returns path, or ""
  // when the file cannot be written.
  std::string WriteKubeconfig(const std::string& path) const;

  // The last lines the server wrote to stderr (tracebacks, bind errors).
  std::string StderrTail() const;

  // /__control/* over the plain-HTTP control port: `method` "GET"/"POST"/"DELETE",
  // `path_and_query` like "/__control/fail?count=2&code=503". Returns the response body of a 2xx.
  absl::StatusOr<std::string> Control(const std::string& method,
                                      const std::string& path_and_query) const;
  absl::Status Reset();  // forget all objects; open watches end with 410 Expired
  absl::Status FailNext(int count, int http_code);  // the next `count` API requests fail
  absl::Status CloseWatches();                      // end every open watch stream
  // [{method, path, query, code}] of the API requests since start (or the last ClearRequests).
  absl::StatusOr<nlohmann::json> Requests() const;
  absl::Status ClearRequests();
  // {resourceVersion, oldestWatchableResourceVersion, openWatches, objects}
  absl::StatusOr<nlohmann::json> State() const;

  // One request to the API port (over HTTPS with the CA, client cert and bearer token when the
  // server has them), e.g. Api("GET", "/apis/resource.k8s.io/v1/deviceclasses"). `body`, when
  // given, is sent as JSON: "application/merge-patch+json" for PATCH, "application/json"
  // otherwise. Returns the parsed JSON body of a 2xx answer. Other answers become an error
  // whose message is "<METHOD> <path>: HTTP <code>: <body>", with the code mapped as
  //   404 -> NotFound, 409 -> AlreadyExists (reason AlreadyExists) or Aborted (Conflict),
  //   422 -> InvalidArgument, any other -> Unknown;
  // transport failures are Unavailable, a 2xx body that is not JSON is Internal.
  absl::StatusOr<nlohmann::json> Api(const std::string& method, const std::string& path_and_query,
                                     const nlohmann::json* body = nullptr) const;

  // Conveniences on Api() for resource.k8s.io, in the version the object's apiVersion names
  // when the server serves it, else v1 when served, else the first configured version.
  // POSTs a ResourceClaim to the namespace of its metadata.namespace ("default" when unset);
  // returns the stored object (uid, resourceVersion, defaults, empty status).
  absl::StatusOr<nlohmann::json> CreateClaim(const nlohmann::json& claim) const;
  // GETs the claim, sets status.allocation and status.reservedFor (removed when empty) and PUTs
  // it to .../resourceclaims/<name>/status; returns the stored object. The server refuses to
  // change an existing allocation (InvalidArgument) and a concurrent write is Aborted.
  absl::StatusOr<nlohmann::json> AllocateClaim(
      const std::string& ns, const std::string& name, const nlohmann::json& allocation,
      const nlohmann::json& reserved_for = nlohmann::json::array()) const;
  // POSTs a (cluster-scoped) DeviceClass; returns the stored object.
  absl::StatusOr<nlohmann::json> CreateDeviceClass(const nlohmann::json& cls) const;

 private:
  explicit FakeApiServer(FakeApiServerOptions opts) : opts_(std::move(opts)) {}
  absl::Status MakePki();
  absl::Status Spawn(int port);
  // "/apis/resource.k8s.io/<version>" for an object with this apiVersion (see CreateClaim).
  std::string ResourcePrefix(const nlohmann::json& obj) const;

  FakeApiServerOptions opts_;
  std::string dir_;
  std::string ca_file_, server_cert_file_, server_key_file_;
  std::string client_cert_file_, client_key_file_;
  pid_t pid_ = -1;
  int port_ = 0;
  int control_port_ = 0;
};

}  // namespace topodra::testing
