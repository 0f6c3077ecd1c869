#include <stdlib.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "driver/kube/rest_client.h"
#include "gtest/gtest.h"
#include "test/kube/stub_server.h"

namespace topodra::kube {
namespace {

using testing::TempDir;

// Every field, so a table row states the whole expected configuration.
void ExpectConfigEq(const ClusterConfig& got, const ClusterConfig& want) {
  EXPECT_EQ(got.server, want.server);
  EXPECT_EQ(got.ca_file, want.ca_file);
  EXPECT_EQ(got.ca_data, want.ca_data);
  EXPECT_EQ(got.insecure_skip_tls_verify, want.insecure_skip_tls_verify);
  EXPECT_EQ(got.tls_server_name, want.tls_server_name);
  EXPECT_EQ(got.token, want.token);
  EXPECT_EQ(got.token_file, want.token_file);
  EXPECT_EQ(got.client_cert_file, want.client_cert_file);
  EXPECT_EQ(got.client_key_file, want.client_key_file);
  EXPECT_EQ(got.client_cert_data, want.client_cert_data);
  EXPECT_EQ(got.client_key_data, want.client_key_data);
  EXPECT_EQ(got.timeout.count(), want.timeout.count());
}

std::string B64(const std::string& s) { return absl::Base64Escape(s); }

// A kubeconfig with current context "ctx" -> cluster "c1" + user "u1", plus decoys.
std::string Kubeconfig(const std::string& cluster_body, const std::string& user_body) {
  return absl::StrCat(R"(apiVersion: v1
kind: Config
current-context: ctx
contexts:
- name: other
  context: {cluster: decoy, user: decoy}
- name: ctx
  context:
    cluster: c1
    user: u1
    namespace: default
clusters:
- name: decoy
  cluster: {server: "https://decoy:1"}
- name: c1
  cluster:
)",
                      cluster_body, R"(
users:
- name: decoy
  user: {token: decoy-token}
- name: u1
  user:
)",
                      user_body, "\n");
}

ClusterConfig Server(const std::string& server) {
  ClusterConfig c;
  c.server = server;
  return c;
}

struct OkCase {
  std::string name;
  std::string yaml;
  ClusterConfig want;
};

std::vector<OkCase> OkCases() {
  std::vector<OkCase> cases;
  {
    ClusterConfig c = Server("https://k.example:6443");
    c.ca_file = "/base/ca.pem";
    c.token = "abc";
    cases.push_back({"relative CA file, token, trailing slash stripped",
                     Kubeconfig("    server: https://k.example:6443/\n"
                                "    certificate-authority: ca.pem",
                                "    token: abc"),
                     c});
  }
  {
    ClusterConfig c = Server("https://10.1.2.3");
    c.ca_data = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
    c.insecure_skip_tls_verify = true;
    c.tls_server_name = "kube.internal";
    cases.push_back({"CA data wins over file, insecure, tls-server-name",
                     Kubeconfig(absl::StrCat("    server: https://10.1.2.3\n"
                                             "    certificate-authority: ignored.pem\n"
                                             "    certificate-authority-data: ",
                                             B64(c.ca_data),
                                             "\n    insecure-skip-tls-verify: true\n"
                                             "    tls-server-name: kube.internal"),
                                "    {}"),
                     c});
  }
  {
    ClusterConfig c = Server("http://127.0.0.1:8080/prefix");
    c.ca_file = "/etc/k8s/ca.pem";
    c.client_cert_file = "/etc/k8s/client.pem";
    c.client_key_file = "/base/keys/client.key";
    cases.push_back({"absolute paths kept, relative client key resolved",
                     Kubeconfig("    server: http://127.0.0.1:8080/prefix\n"
                                "    certificate-authority: /etc/k8s/ca.pem",
                                "    client-certificate: /etc/k8s/client.pem\n"
                                "    client-key: keys/client.key"),
                     c});
  }
  {
    ClusterConfig c = Server("https://k:443");
    c.client_cert_data = "CERT PEM";
    c.client_key_data = "KEY PEM";
    cases.push_back(
        {"client certificate and key data win over files",
         Kubeconfig("    server: https://k:443",
                    absl::StrCat("    client-certificate: c.pem\n"
                                 "    client-key: k.pem\n"
                                 "    client-certificate-data: ",
                                 B64("CERT PEM"), "\n    client-key-data: ", B64("KEY PEM"))),
         c});
  }
  {
    ClusterConfig c = Server("https://k:443");
    c.token_file = "/base/secrets/token";
    cases.push_back({"relative tokenFile",
                     Kubeconfig("    server: https://k:443", "    tokenFile: secrets/token"), c});
  }
  {
    ClusterConfig c = Server("https://k:443");
    c.token = "inline";
    cases.push_back(
        {"token wins over tokenFile",
         Kubeconfig("    server: https://k:443", "    token: inline\n    tokenFile: /var/token"),
         c});
  }
  {
    ClusterConfig c = Server("https://k:443");
    cases.push_back(
        {"insecure-skip-tls-verify false",
         Kubeconfig("    server: https://k:443\n    insecure-skip-tls-verify: false", "    {}"),
         c});
  }
  cases.push_back({"context without a user",
                   "current-context: ctx\n"
                   "contexts: [{name: ctx, context: {cluster: c1}}]\n"
                   "clusters: [{name: c1, cluster: {server: 'https://anon:6443'}}]\n",
                   Server("https://anon:6443")});
  return cases;
}

TEST(ParseKubeconfigTest, ValidConfigs) {
  for (const OkCase& c : OkCases()) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<ClusterConfig> config = ParseKubeconfig(c.yaml, "/base");
    ASSERT_TRUE(config.ok()) << config.status();
    ExpectConfigEq(*config, c.want);
  }
}

TEST(ParseKubeconfigTest, BaseDirWithTrailingSlashAndEmpty) {
  const std::string yaml =
      Kubeconfig("    server: https://k\n    certificate-authority: ca", "    {}");
  absl::StatusOr<ClusterConfig> config = ParseKubeconfig(yaml, "/base/");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ca_file, "/base/ca");
  config = ParseKubeconfig(yaml, "");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ca_file, "ca");
}

struct ErrorCase {
  std::string name;
  std::string yaml;
  absl::StatusCode code;
  std::string message;
};

TEST(ParseKubeconfigTest, Errors) {
  const std::string server = "    server: https://k:443";
  const std::vector<ErrorCase> cases = {
      {"empty document", "", absl::StatusCode::kInvalidArgument, "kubeconfig: not a YAML map"},
      {"a list", "- a\n- b\n", absl::StatusCode::kInvalidArgument, "kubeconfig: not a YAML map"},
      {"no current-context", "clusters: []\n", absl::StatusCode::kInvalidArgument,
       "kubeconfig: current-context is not set"},
      {"empty current-context", "current-context: ''\n", absl::StatusCode::kInvalidArgument,
       "kubeconfig: current-context is not set"},
      {"context not found", "current-context: dev\ncontexts: [{name: prod, context: {}}]\n",
       absl::StatusCode::kNotFound, "kubeconfig: context \"dev\" not found in contexts"},
      {"contexts not a list", "current-context: dev\ncontexts: {dev: 1}\n",
       absl::StatusCode::kInvalidArgument, "kubeconfig: contexts is not a list"},
      {"context body missing", "current-context: dev\ncontexts: [{name: dev}]\n",
       absl::StatusCode::kInvalidArgument, "kubeconfig: context \"dev\" has no context map"},
      {"context names no cluster", "current-context: dev\ncontexts: [{name: dev, context: {}}]\n",
       absl::StatusCode::kInvalidArgument, "kubeconfig: context \"dev\" names no cluster"},
      {"cluster not found",
       "current-context: dev\ncontexts: [{name: dev, context: {cluster: c2, user: u1}}]\n"
       "clusters: [{name: c1, cluster: {server: 'https://x'}}]\n",
       absl::StatusCode::kNotFound, "kubeconfig: cluster \"c2\" not found in clusters"},
      {"user not found",
       "current-context: dev\ncontexts: [{name: dev, context: {cluster: c1, user: u2}}]\n"
       "clusters: [{name: c1, cluster: {server: 'https://x'}}]\n",
       absl::StatusCode::kNotFound, "kubeconfig: user \"u2\" not found in users"},
      {"no server", Kubeconfig("    certificate-authority: ca.pem", "    {}"),
       absl::StatusCode::kInvalidArgument, "kubeconfig: cluster \"c1\" has no server"},
      {"server not a URL", Kubeconfig("    server: k.example:6443", "    {}"),
       absl::StatusCode::kInvalidArgument,
       "kubeconfig: cluster \"c1\": server \"k.example:6443\" is not an http(s) URL"},
      {"server not a string", Kubeconfig("    server: {a: b}", "    {}"),
       absl::StatusCode::kInvalidArgument, "kubeconfig: cluster \"c1\": server is not a string"},
      {"bad base64 CA data",
       Kubeconfig(server + "\n    certificate-authority-data: 'not*base64'", "    {}"),
       absl::StatusCode::kInvalidArgument,
       "kubeconfig: cluster \"c1\": certificate-authority-data: invalid base64"},
      {"bad base64 client cert data",
       Kubeconfig(server, "    client-certificate-data: '%%%'\n    client-key-data: a2V5"),
       absl::StatusCode::kInvalidArgument,
       "kubeconfig: user \"u1\": client-certificate-data: invalid base64"},
      {"bad base64 client key data",
       Kubeconfig(server, "    client-certificate-data: Y2VydA==\n    client-key-data: 'a!b'"),
       absl::StatusCode::kInvalidArgument,
       "kubeconfig: user \"u1\": client-key-data: invalid base64"},
      {"bad boolean", Kubeconfig(server + "\n    insecure-skip-tls-verify: maybe", "    {}"),
       absl::StatusCode::kInvalidArgument,
       "kubeconfig: cluster \"c1\": insecure-skip-tls-verify: invalid boolean \"maybe\""},
      {"certificate without key", Kubeconfig(server, "    client-certificate: c.pem"),
       absl::StatusCode::kInvalidArgument,
       "kubeconfig: user \"u1\": client certificate without client key"},
      {"key without certificate", Kubeconfig(server, "    client-key-data: a2V5"),
       absl::StatusCode::kInvalidArgument,
       "kubeconfig: user \"u1\": client key without client certificate"},
      {"exec plugin only", Kubeconfig(server, "    exec: {command: aws}"),
       absl::StatusCode::kUnimplemented,
       "kubeconfig: user \"u1\": exec and auth-provider credentials are not supported"},
      {"token not a string", Kubeconfig(server, "    token: [a, b]"),
       absl::StatusCode::kInvalidArgument, "kubeconfig: user \"u1\": token is not a string"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<ClusterConfig> config = ParseKubeconfig(c.yaml, "/base");
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), c.code);
    EXPECT_EQ(config.status().message(), c.message);
  }
}

TEST(ParseKubeconfigTest, InvalidYamlIsAnErrorNotAnException) {
  for (const std::string yaml : {"current-context: [", "a: b: c", "{{{{", "\t- x\n  y: :"}) {
    SCOPED_TRACE(yaml);
    absl::StatusOr<ClusterConfig> config = ParseKubeconfig(yaml, "/base");
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(config.status().message()).rfind("kubeconfig: invalid YAML: ", 0), 0u)
        << config.status();
  }
}

TEST(KubeconfigConfigTest, ReadsFileAndResolvesAgainstItsDirectory) {
  TempDir dir;
  std::filesystem::create_directory(dir.File("kube"));
  const std::string path = dir.Write(
      "kube/config", Kubeconfig("    server: https://k:443\n    certificate-authority: ca.pem",
                                "    tokenFile: token"));
  absl::StatusOr<ClusterConfig> config = KubeconfigConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ca_file, dir.File("kube/ca.pem"));
  EXPECT_EQ(config->token_file, dir.File("kube/token"));
}

TEST(KubeconfigConfigTest, ErrorsNameTheFile) {
  TempDir dir;
  absl::StatusOr<ClusterConfig> config = KubeconfigConfig(dir.File("missing"));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(config.status().message(),
            absl::StrCat("cannot read kubeconfig \"", dir.File("missing"),
                         "\": No such file or directory"));

  const std::string path = dir.Write("config", "clusters: []\n");
  config = KubeconfigConfig(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            absl::StrCat("kubeconfig \"", path, "\": current-context is not set"));
}

// Sets or unsets an environment variable for one test and restores it afterwards (tests are
// single-threaded).
// NOLINTBEGIN(concurrency-mt-unsafe)
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};
// NOLINTEND(concurrency-mt-unsafe)

struct InCluster {
  InCluster(std::optional<std::string> host, std::optional<std::string> port)
      : host_env("KUBERNETES_SERVICE_HOST", std::move(host)),
        port_env("KUBERNETES_SERVICE_PORT", std::move(port)) {}
  ScopedEnv host_env, port_env;
  TempDir sa;
};

TEST(InClusterConfigTest, ReadsEnvironmentAndServiceAccount) {
  InCluster env("10.96.0.1", "443");
  env.sa.Write("token", "sa-token\n");
  env.sa.Write("ca.crt", "CA");
  absl::StatusOr<ClusterConfig> config = InClusterConfig(env.sa.path());
  ASSERT_TRUE(config.ok()) << config.status();
  ClusterConfig want = Server("https://10.96.0.1:443");
  want.token = "sa-token";
  want.token_file = env.sa.File("token");
  want.ca_file = env.sa.File("ca.crt");
  ExpectConfigEq(*config, want);
}

TEST(InClusterConfigTest, BracketsIpv6Hosts) {
  InCluster env("fd00:10:96::1", "6443");
  env.sa.Write("token", "t");
  env.sa.Write("ca.crt", "CA");
  absl::StatusOr<ClusterConfig> config = InClusterConfig(env.sa.path());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://[fd00:10:96::1]:6443");
}

TEST(InClusterConfigTest, Errors) {
  {
    InCluster env(std::nullopt, "443");
    absl::StatusOr<ClusterConfig> config = InClusterConfig(env.sa.path());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(config.status().message(),
              "not running in a cluster: KUBERNETES_SERVICE_HOST is not set");
  }
  {
    InCluster env("10.0.0.1", std::nullopt);
    EXPECT_EQ(InClusterConfig(env.sa.path()).status().message(),
              "not running in a cluster: KUBERNETES_SERVICE_PORT is not set");
  }
  {
    InCluster env("10.0.0.1", "https");
    absl::StatusOr<ClusterConfig> config = InClusterConfig(env.sa.path());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(config.status().message(), "KUBERNETES_SERVICE_PORT \"https\" is not a port number");
  }
  {
    InCluster env("10.0.0.1", "443");
    env.sa.Write("ca.crt", "CA");
    absl::StatusOr<ClusterConfig> config = InClusterConfig(env.sa.path());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(config.status().message(),
              absl::StrCat("cannot read service account token \"", env.sa.File("token"),
                           "\": No such file or directory"));
  }
  {
    InCluster env("10.0.0.1", "443");
    env.sa.Write("token", "t");
    absl::StatusOr<ClusterConfig> config = InClusterConfig(env.sa.path());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(config.status().message(),
              absl::StrCat("cannot read service account CA \"", env.sa.File("ca.crt"),
                           "\": No such file or directory"));
  }
}

}  // namespace
}  // namespace topodra::kube
