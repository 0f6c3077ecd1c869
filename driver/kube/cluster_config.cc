// InClusterConfig and kubeconfig parsing. Everything read here is outside input: a hostile or
// broken kubeconfig yields an error naming the entry and field, never a crash or a secret.
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "driver/kube/rest_client.h"
#include "yaml-cpp/yaml.h"

namespace topodra::kube {
namespace {

// strerror is not thread-safe.
std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

// A kubeconfig or service-account file larger than this is not one.
constexpr std::size_t kMaxFileBytes = 16 << 20;

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " \"", path, "\": ", ErrnoText(errno)));
  }
  std::string data;
  char buf[65536];
  while (in) {
    in.read(buf, sizeof(buf));
    data.append(buf, static_cast<std::size_t>(in.gcount()));
    if (data.size() > kMaxFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " \"", path, "\" is larger than ", kMaxFileBytes, " bytes"));
    }
  }
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("error reading ", what, " \"", path, "\""));
  }
  return data;
}

std::string Quote(const std::string& s) {
  constexpr std::size_t kMax = 100;
  std::string shown = s.size() > kMax ? s.substr(0, kMax) + "..." : s;
  return absl::StrCat("\"", absl::CEscape(shown), "\"");
}

// yaml-cpp throws on Type() of a missing ("zombie") node, so check IsDefined first.
bool IsMap(const YAML::Node& n) { return n.IsDefined() && n.IsMap(); }
bool IsSequence(const YAML::Node& n) { return n.IsDefined() && n.IsSequence(); }
bool IsScalar(const YAML::Node& n) { return n.IsDefined() && n.IsScalar(); }

std::string ResolvePath(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  if (base_dir.back() == '/') return base_dir + path;
  return base_dir + "/" + path;
}

// Field accessors over a YAML map. `where` names the entry for error messages
// ("cluster \"prod\"").
class Fields {
 public:
  Fields(const YAML::Node& map, std::string where) : map_(map), where_(std::move(where)) {}

  // Absent or null -> "" ; a non-scalar value is an error.
  absl::StatusOr<std::string> String(const char* key) const {
    const YAML::Node value = map_[key];
    if (!value.IsDefined() || value.IsNull()) return std::string();
    if (!value.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(where_, ": ", key, " is not a string"));
    }
    return value.Scalar();
  }

  absl::StatusOr<bool> Bool(const char* key) const {
    const YAML::Node value = map_[key];
    if (!value.IsDefined() || value.IsNull()) return false;
    bool result = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, result)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where_, ": ", key, ": invalid boolean ",
                       value.IsScalar() ? Quote(value.Scalar()) : std::string("(not a scalar)")));
    }
    return result;
  }

  // A base64 field; the value itself is never quoted since it is usually a secret.
  absl::StatusOr<std::string> Base64(const char* key) const {
    absl::StatusOr<std::string> text = String(key);
    if (!text.ok()) return text.status();
    std::string compact;
    for (char c : *text) {
      if (!absl::ascii_isspace(static_cast<unsigned char>(c))) compact.push_back(c);
    }
    std::string decoded;
    if (!absl::Base64Unescape(compact, &decoded)) {
      return absl::InvalidArgumentError(absl::StrCat(where_, ": ", key, ": invalid base64"));
    }
    return decoded;
  }

  bool Has(const char* key) const {
    const YAML::Node value = map_[key];
    return value.IsDefined() && !value.IsNull();
  }

 private:
  YAML::Node map_;
  std::string where_;
};

// The `kind` entry named `name` in the top-level list `list_key`, and its `kind` body, e.g.
// clusters[] {name: prod, cluster: {...}}.
absl::StatusOr<YAML::Node> FindNamed(const YAML::Node& root, const char* list_key, const char* kind,
                                     const std::string& name) {
  const YAML::Node list = root[list_key];
  if (list.IsDefined() && !list.IsNull() && !list.IsSequence()) {
    return absl::InvalidArgumentError(absl::StrCat(list_key, " is not a list"));
  }
  if (IsSequence(list)) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      const YAML::Node entry = list[i];
      if (!IsMap(entry)) continue;
      const YAML::Node entry_name = entry["name"];
      if (!IsScalar(entry_name) || entry_name.Scalar() != name) continue;
      const YAML::Node body = entry[kind];
      if (!IsMap(body)) {
        return absl::InvalidArgumentError(
            absl::StrCat(kind, " ", Quote(name), " has no ", kind, " map"));
      }
      return body;
    }
  }
  return absl::NotFoundError(absl::StrCat(kind, " ", Quote(name), " not found in ", list_key));
}

absl::Status ParseCluster(const YAML::Node& cluster, const std::string& name,
                          const std::string& base_dir, ClusterConfig& config) {
  const Fields fields(cluster, absl::StrCat("cluster ", Quote(name)));
  absl::StatusOr<std::string> server = fields.String("server");
  if (!server.ok()) return server.status();
  while (!server->empty() && server->back() == '/') server->pop_back();
  if (server->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster ", Quote(name), " has no server"));
  }
  if (!absl::StartsWith(*server, "https://") && !absl::StartsWith(*server, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("cluster ", Quote(name), ": server ",
                                                   Quote(*server), " is not an http(s) URL"));
  }
  config.server = *server;

  absl::StatusOr<std::string> ca_data = fields.Base64("certificate-authority-data");
  if (!ca_data.ok()) return ca_data.status();
  absl::StatusOr<std::string> ca_file = fields.String("certificate-authority");
  if (!ca_file.ok()) return ca_file.status();
  if (!ca_data->empty()) {
    config.ca_data = *std::move(ca_data);
  } else {
    config.ca_file = ResolvePath(base_dir, *ca_file);
  }

  absl::StatusOr<bool> insecure = fields.Bool("insecure-skip-tls-verify");
  if (!insecure.ok()) return insecure.status();
  config.insecure_skip_tls_verify = *insecure;
  absl::StatusOr<std::string> server_name = fields.String("tls-server-name");
  if (!server_name.ok()) return server_name.status();
  config.tls_server_name = *std::move(server_name);
  return absl::OkStatus();
}

absl::Status ParseUser(const YAML::Node& user, const std::string& name, const std::string& base_dir,
                       ClusterConfig& config) {
  const std::string where = absl::StrCat("user ", Quote(name));
  const Fields fields(user, where);
  absl::StatusOr<std::string> token = fields.String("token");
  if (!token.ok()) return token.status();
  absl::StatusOr<std::string> token_file = fields.String("tokenFile");
  if (!token_file.ok()) return token_file.status();
  // As in kubectl: an inline token takes precedence over tokenFile.
  if (!token->empty()) {
    config.token = *std::move(token);
  } else {
    config.token_file = ResolvePath(base_dir, *token_file);
  }

  absl::StatusOr<std::string> cert_data = fields.Base64("client-certificate-data");
  if (!cert_data.ok()) return cert_data.status();
  absl::StatusOr<std::string> key_data = fields.Base64("client-key-data");
  if (!key_data.ok()) return key_data.status();
  absl::StatusOr<std::string> cert_file = fields.String("client-certificate");
  if (!cert_file.ok()) return cert_file.status();
  absl::StatusOr<std::string> key_file = fields.String("client-key");
  if (!key_file.ok()) return key_file.status();
  if (!cert_data->empty()) {
    config.client_cert_data = *std::move(cert_data);
  } else {
    config.client_cert_file = ResolvePath(base_dir, *cert_file);
  }
  if (!key_data->empty()) {
    config.client_key_data = *std::move(key_data);
  } else {
    config.client_key_file = ResolvePath(base_dir, *key_file);
  }
  const bool has_cert = !config.client_cert_data.empty() || !config.client_cert_file.empty();
  const bool has_key = !config.client_key_data.empty() || !config.client_key_file.empty();
  if (has_cert != has_key) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, has_cert ? ": client certificate without client key"
                                     : ": client key without client certificate"));
  }
  const bool has_credentials = !config.token.empty() || !config.token_file.empty() || has_cert;
  if (!has_credentials && (fields.Has("exec") || fields.Has("auth-provider"))) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": exec and auth-provider credentials are not supported"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterConfig> ParseRoot(const YAML::Node& root, const std::string& base_dir) {
  if (!IsMap(root)) return absl::InvalidArgumentError("not a YAML map");
  const YAML::Node current = root["current-context"];
  if (!IsScalar(current) || current.Scalar().empty()) {
    return absl::InvalidArgumentError("current-context is not set");
  }
  const std::string& context_name = current.Scalar();
  absl::StatusOr<YAML::Node> context = FindNamed(root, "contexts", "context", context_name);
  if (!context.ok()) return context.status();

  const Fields context_fields(*context, absl::StrCat("context ", Quote(context_name)));
  absl::StatusOr<std::string> cluster_name = context_fields.String("cluster");
  if (!cluster_name.ok()) return cluster_name.status();
  absl::StatusOr<std::string> user_name = context_fields.String("user");
  if (!user_name.ok()) return user_name.status();
  if (cluster_name->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("context ", Quote(context_name), " names no cluster"));
  }

  ClusterConfig config;
  absl::StatusOr<YAML::Node> cluster = FindNamed(root, "clusters", "cluster", *cluster_name);
  if (!cluster.ok()) return cluster.status();
  if (absl::Status s = ParseCluster(*cluster, *cluster_name, base_dir, config); !s.ok()) return s;
  // A context without a user is valid (anonymous access).
  if (!user_name->empty()) {
    absl::StatusOr<YAML::Node> user = FindNamed(root, "users", "user", *user_name);
    if (!user.ok()) return user.status();
    if (absl::Status s = ParseUser(*user, *user_name, base_dir, config); !s.ok()) return s;
  }
  return config;
}

absl::StatusOr<ClusterConfig> ParseLabelled(const std::string& yaml_text,
                                            const std::string& base_dir, const std::string& label) {
  auto fail = [&label](absl::StatusCode code, absl::string_view message) {
    return absl::Status(code, absl::StrCat(label, ": ", message));
  };
  if (yaml_text.size() > kMaxFileBytes) {
    return fail(absl::StatusCode::kInvalidArgument,
                absl::StrCat("larger than ", kMaxFileBytes, " bytes"));
  }
  // yaml-cpp reports syntax errors and misuse by throwing; nothing may escape from here.
  absl::StatusOr<ClusterConfig> config;
  try {
    config = ParseRoot(YAML::Load(yaml_text), base_dir);
  } catch (const YAML::Exception& e) {
    return fail(absl::StatusCode::kInvalidArgument, absl::StrCat("invalid YAML: ", e.what()));
  } catch (const std::exception& e) {
    return fail(absl::StatusCode::kInternal, e.what());
  } catch (...) {
    return fail(absl::StatusCode::kInternal, "unknown exception while parsing");
  }
  if (!config.ok()) return fail(config.status().code(), config.status().message());
  return config;
}

}  // namespace

absl::StatusOr<ClusterConfig> ParseKubeconfig(const std::string& yaml_text,
                                              const std::string& base_dir) {
  return ParseLabelled(yaml_text, base_dir, "kubeconfig");
}

absl::StatusOr<ClusterConfig> KubeconfigConfig(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, "kubeconfig");
  if (!text.ok()) return text.status();
  const std::size_t slash = path.rfind('/');
  const std::string base_dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  return ParseLabelled(*text, base_dir, absl::StrCat("kubeconfig \"", path, "\""));
}

absl::StatusOr<ClusterConfig> InClusterConfig(const std::string& sa_dir) {
  // Read once at startup; nothing in topodra sets the environment.
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");  // NOLINT(concurrency-mt-unsafe)
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");  // NOLINT(concurrency-mt-unsafe)
  if (host == nullptr || *host == '\0') {
    return absl::FailedPreconditionError(
        "not running in a cluster: KUBERNETES_SERVICE_HOST is not set");
  }
  if (port == nullptr || *port == '\0') {
    return absl::FailedPreconditionError(
        "not running in a cluster: KUBERNETES_SERVICE_PORT is not set");
  }
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 1 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("KUBERNETES_SERVICE_PORT ", Quote(port), " is not a port number"));
  }
  std::string host_part = host;
  if (host_part.find(':') != std::string::npos && host_part.front() != '[') {
    host_part = absl::StrCat("[", host_part, "]");
  }

  ClusterConfig config;
  config.server = absl::StrCat("https://", host_part, ":", port_number);
  config.token_file = ResolvePath(sa_dir, "token");
  config.ca_file = ResolvePath(sa_dir, "ca.crt");
  absl::StatusOr<std::string> token = ReadSmallFile(config.token_file, "service account token");
  if (!token.ok()) return token.status();
  config.token = std::string(absl::StripAsciiWhitespace(*token));
  if (config.token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("service account token \"", config.token_file, "\" is empty"));
  }
  if (std::ifstream ca(config.ca_file); !ca) {
    return absl::NotFoundError(absl::StrCat("cannot read service account CA \"", config.ca_file,
                                            "\": ", ErrnoText(errno)));
  }
  return config;
}

}  // namespace topodra::kube
