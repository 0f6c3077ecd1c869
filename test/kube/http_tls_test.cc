#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "driver/kube/rest_client.h"
#include "gtest/gtest.h"
#include "test/kube/stub_server.h"

namespace topodra::kube {
namespace {

using nlohmann::json;
using testing::ReadFile;
using testing::StubServer;
using testing::StubTls;
using testing::TempDir;

// Test PKI made with the openssl CLI: ca signs server (127.0.0.1), named (kube.test only), client
// (CN topodra-client) and the intermediate inter, which signs via-inter (127.0.0.1); other-ca
// signs nothing we serve. client-encrypted.key is client.key under a passphrase.
constexpr char kMakePki[] = R"(set -e
ec() { echo -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes; }
for ca in ca other-ca; do
  openssl req -x509 $(ec) -keyout $ca.key -out $ca.crt -days 2 -subj /CN=topodra-$ca \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
done
leaf() {
  openssl req $(ec) -keyout $1.key -out $1.csr -subj /CN=$2
  printf "$3" > $1.ext
  openssl x509 -req -in $1.csr -CA ${4:-ca}.crt -CAkey ${4:-ca}.key -CAcreateserial -days 2 \
    -extfile $1.ext -out $1.crt
}
leaf server 127.0.0.1 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n'
leaf named kube.test 'subjectAltName=DNS:kube.test\nextendedKeyUsage=serverAuth\n'
leaf client topodra-client 'extendedKeyUsage=clientAuth\n'
leaf inter topodra-inter 'basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n'
leaf via-inter 127.0.0.1 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' inter
openssl pkey -in client.key -aes256 -passout pass:secret -out client-encrypted.key
)";

class HttpTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_ = new TempDir();
    pki_->Write("make-pki.sh", kMakePki);
    const std::string command =
        absl::StrCat("cd '", pki_->path(), "' && /bin/sh make-pki.sh >openssl.log 2>&1");
    const int rc = std::system(command.c_str());  // NOLINT(concurrency-mt-unsafe)
    ASSERT_EQ(rc, 0) << ReadFile(pki_->File("openssl.log"));
  }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }
  static std::string Pki(const std::string& name) { return pki_->File(name); }

  static StubTls ServerTls(const std::string& leaf = "server") {
    return {Pki(leaf + ".crt"), Pki(leaf + ".key"), ""};
  }
  static ClusterConfig Config(const StubServer& stub) {
    ClusterConfig config;
    config.server = stub.url();
    return config;
  }
  static absl::StatusOr<Response> Get(const ClusterConfig& config, const std::string& path) {
    absl::StatusOr<std::unique_ptr<RestClient>> client = NewHttpRestClient(config);
    if (!client.ok()) return client.status();
    return (*client)->Get(path);
  }

  static TempDir* pki_;
};
TempDir* HttpTlsTest::pki_ = nullptr;

const json kEcho = json::array({{{"path", "/echo"}, {"echo", true}}});

TEST_F(HttpTlsTest, TrustsCaFromFile) {
  StubServer stub(kEcho, ServerTls());
  ClusterConfig config = Config(stub);
  config.ca_file = Pki("ca.crt");
  absl::StatusOr<Response> r = Get(config, "/echo");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["path"], "/echo");
  EXPECT_EQ(r->body["client_cn"], nullptr);
}

TEST_F(HttpTlsTest, TrustsCaFromData) {
  StubServer stub(kEcho, ServerTls());
  ClusterConfig config = Config(stub);
  config.ca_data = ReadFile(Pki("ca.crt"));
  absl::StatusOr<Response> r = Get(config, "/echo");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["path"], "/echo");
}

TEST_F(HttpTlsTest, CaHoldingOnlyTheIssuingIntermediateIsEnough) {
  StubServer stub(kEcho, ServerTls("via-inter"));
  ClusterConfig from_file = Config(stub);
  from_file.ca_file = Pki("inter.crt");
  ClusterConfig from_data = Config(stub);
  from_data.ca_data = ReadFile(Pki("inter.crt"));
  for (const ClusterConfig& config : {from_file, from_data}) {
    absl::StatusOr<Response> r = Get(config, "/echo");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body["path"], "/echo");
  }
  EXPECT_EQ(stub.Requests().size(), 2u);
}

TEST_F(HttpTlsTest, EncryptedClientKeyIsAnErrorNamingIt) {
  ClusterConfig from_file;
  from_file.server = "https://127.0.0.1:6443";
  from_file.ca_file = Pki("ca.crt");
  from_file.client_cert_file = Pki("client.crt");
  from_file.client_key_file = Pki("client-encrypted.key");
  absl::StatusOr<std::unique_ptr<RestClient>> client = NewHttpRestClient(from_file);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(client.status().message())
                .rfind(absl::StrCat("client key file \"", Pki("client-encrypted.key"),
                                    "\" is not an unencrypted PEM private key: "),
                       0),
            0u)
      << client.status();

  ClusterConfig from_data = from_file;
  from_data.client_key_file.clear();
  from_data.client_key_data = ReadFile(Pki("client-encrypted.key"));
  client = NewHttpRestClient(from_data);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(client.status().message())
                .rfind("client key data is not an unencrypted PEM private key: ", 0),
            0u)
      << client.status();
}

// The kubelet rotates its certificates by renaming new files over the old ones; a client made
// before the rotation uses the new files for its next connection.
TEST_F(HttpTlsTest, RotatedCaFileIsUsedForNewConnections) {
  StubServer stub(kEcho, ServerTls());
  TempDir dir;
  ClusterConfig config = Config(stub);
  config.ca_file = dir.Write("ca.crt", ReadFile(Pki("other-ca.crt")));
  config.token_refresh = std::chrono::milliseconds(0);
  absl::StatusOr<std::unique_ptr<RestClient>> client = NewHttpRestClient(config);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<Response> r = (*client)->Get("/echo");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();

  const std::string rotated = dir.Write("ca.crt.new", ReadFile(Pki("ca.crt")));
  ASSERT_EQ(std::rename(rotated.c_str(), config.ca_file.c_str()), 0);
  r = (*client)->Get("/echo");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["path"], "/echo");
}

TEST_F(HttpTlsTest, WrongCaIsRejected) {
  StubServer stub(kEcho, ServerTls());
  ClusterConfig from_file = Config(stub);
  from_file.ca_file = Pki("other-ca.crt");
  ClusterConfig from_data = Config(stub);
  from_data.ca_data = ReadFile(Pki("other-ca.crt"));
  for (const ClusterConfig& config : {from_file, from_data}) {
    absl::StatusOr<Response> r = Get(config, "/echo");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(std::string(r.status().message())
                  .rfind("GET /echo: SSL peer certificate or SSH remote key was not OK: ", 0),
              0u)
        << r.status();
  }
  EXPECT_TRUE(stub.Requests().empty());
}

TEST_F(HttpTlsTest, InsecureSkipVerifyAcceptsAnyCertificate) {
  StubServer stub(kEcho, ServerTls());
  ClusterConfig config = Config(stub);
  config.ca_file = Pki("other-ca.crt");
  config.insecure_skip_tls_verify = true;
  absl::StatusOr<Response> r = Get(config, "/echo");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["path"], "/echo");
}

TEST_F(HttpTlsTest, PresentsClientCertificateFromFileOrData) {
  StubServer stub(kEcho, {Pki("server.crt"), Pki("server.key"), Pki("ca.crt")});
  ClusterConfig files = Config(stub);
  files.ca_file = Pki("ca.crt");
  files.client_cert_file = Pki("client.crt");
  files.client_key_file = Pki("client.key");
  ClusterConfig data = Config(stub);
  data.ca_data = ReadFile(Pki("ca.crt"));
  data.client_cert_data = ReadFile(Pki("client.crt"));
  data.client_key_data = ReadFile(Pki("client.key"));
  for (const ClusterConfig& config : {files, data}) {
    absl::StatusOr<Response> r = Get(config, "/echo");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body["client_cn"], "topodra-client");
  }
  ClusterConfig none = Config(stub);
  none.ca_file = Pki("ca.crt");
  absl::StatusOr<Response> r = Get(none, "/echo");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(stub.Requests().size(), 2u);
}

TEST_F(HttpTlsTest, TlsServerNameIsUsedForVerificationNotForConnecting) {
  StubServer stub(kEcho, ServerTls("named"));
  ClusterConfig config = Config(stub);
  config.ca_file = Pki("ca.crt");
  absl::StatusOr<Response> r = Get(config, "/echo");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << "certificate has no IP SAN";

  config.tls_server_name = "kube.test";
  r = Get(config, "/echo");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body["headers"]["host"], absl::StrCat("127.0.0.1:", stub.port()));
}

}  // namespace
}  // namespace topodra::kube
