#include "test/integration/fake_apiserver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "curl/curl.h"

#ifndef TOPODRA_FAKE_APISERVER_PY
#error "TOPODRA_FAKE_APISERVER_PY must be the path of fake_apiserver.py"
#endif

namespace topodra::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::seconds kStartTimeout{10};
constexpr std::chrono::seconds kStopTimeout{5};
constexpr size_t kStderrTailBytes = 4000;

std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r: returns a pointer to the message (in buf or static).
  return std::string(strerror_r(err, buf, sizeof buf));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open \"", path, "\""));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write \"", path, "\""));
  return absl::OkStatus();
}

std::string Tail(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  return "..." + text.substr(text.size() - max_bytes);
}

// Reaps `pid` if it has exited; returns its wait status then.
bool Reaped(pid_t pid, int* wait_status) {
  for (;;) {
    pid_t r = waitpid(pid, wait_status, WNOHANG);
    if (r == pid) return true;
    if (r == 0) return false;
    if (errno == EINTR) continue;
    return true;  // ECHILD: already gone
  }
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return absl::StrCat("killed by signal ", WTERMSIG(wait_status));
  return "ended";
}

// fork/exec of argv with stdin from /dev/null and stdout/stderr appended to files. The child
// gets SIGKILL when the thread that spawned it ends, so it cannot outlive the test.
absl::StatusOr<pid_t> SpawnChild(const std::vector<std::string>& argv,
                                 const std::string& stdout_path, const std::string& stderr_path) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int out = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  auto close_all = [&] {
    for (int fd : {devnull, out, err}) {
      if (fd >= 0) close(fd);
    }
  };
  if (devnull < 0 || out < 0 || err < 0) {
    int e = errno;
    close_all();
    return absl::InternalError(
        absl::StrCat("cannot open log files in \"", stdout_path, "\": ", ErrnoText(e)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close_all();
    return absl::InternalError(absl::StrCat("fork: ", ErrnoText(e)));
  }
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    dup2(devnull, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    close_range(3, ~0U, 0);
    execv(args[0], args.data());
    static const char kMsg[] = "fake_apiserver harness: execv failed\n";
    ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    (void)ignored;
    _exit(127);
  }
  close_all();
  return pid;
}

// Runs a short command (openssl) to completion; its output goes to `log`.
absl::Status RunCommand(const std::vector<std::string>& argv, const std::string& log) {
  absl::StatusOr<pid_t> pid = SpawnChild(argv, log, log);
  if (!pid.ok()) return pid.status();
  int wait_status = 0;
  for (;;) {
    if (waitpid(*pid, &wait_status, 0) == *pid) break;
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", ErrnoText(errno)));
  }
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) return absl::OkStatus();
  absl::StatusOr<std::string> output = ReadFile(log);
  return absl::InternalError(absl::StrCat("\"", absl::StrJoin(argv, " "), "\" ",
                                          DescribeExit(wait_status), ": ",
                                          Tail(output.ok() ? *output : "", 2000)));
}

// The port written by the server (one decimal line, written atomically), or nullopt while the
// file is not there yet.
std::optional<int> ReadPortFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return std::nullopt;
  int port = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port) || port <= 0 || port > 65535) {
    return std::nullopt;
  }
  return port;
}

std::string YamlQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

absl::StatusOr<std::unique_ptr<FakeApiServer>> FakeApiServer::Start(FakeApiServerOptions opts) {
  if (opts.mtls) opts.tls = true;
  std::unique_ptr<FakeApiServer> server(new FakeApiServer(std::move(opts)));
  char dir_template[] = "/tmp/topodra-fake-apiserver-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError(absl::StrCat("fake API server: mkdtemp: ", ErrnoText(errno)));
  }
  server->dir_ = dir_template;
  if (server->opts_.tls) {
    absl::Status pki = server->MakePki();
    if (!pki.ok())
      return absl::Status(pki.code(), absl::StrCat("fake API server: ", pki.message()));
  }
  absl::Status spawned = server->Spawn(0);
  if (!spawned.ok()) return spawned;
  return server;
}

FakeApiServer::~FakeApiServer() {
  (void)Stop();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string FakeApiServer::url() const {
  return absl::StrCat(opts_.tls ? "https" : "http", "://127.0.0.1:", port_);
}

absl::Status FakeApiServer::MakePki() {
  const std::string conf = dir_ + "/openssl.cnf";
  absl::Status s = WriteFile(conf,
                             "[req]\n"
                             "distinguished_name = dn\n"
                             "prompt = no\n"
                             "[dn]\n"
                             "CN = placeholder\n"
                             "[v3_ca]\n"
                             "basicConstraints = critical,CA:TRUE\n"
                             "keyUsage = critical,keyCertSign,cRLSign\n"
                             "subjectKeyIdentifier = hash\n");
  if (!s.ok()) return s;
  s = WriteFile(dir_ + "/server.ext",
                "basicConstraints = CA:FALSE\n"
                "keyUsage = critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage = serverAuth\n"
                "subjectAltName = IP:127.0.0.1,DNS:localhost\n");
  if (!s.ok()) return s;
  s = WriteFile(dir_ + "/client.ext",
                "basicConstraints = CA:FALSE\n"
                "keyUsage = critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage = clientAuth\n");
  if (!s.ok()) return s;

  const std::string log = dir_ + "/openssl.log";
  const std::vector<std::string> ec_key = {"-newkey", "ec", "-pkeyopt",
                                           "ec_paramgen_curve:prime256v1", "-nodes"};
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    return RunCommand(args, log);
  };
  ca_file_ = dir_ + "/ca.crt";
  std::vector<std::string> ca = {"req", "-x509", "-config", conf, "-extensions", "v3_ca"};
  ca.insert(ca.end(), ec_key.begin(), ec_key.end());
  ca.insert(ca.end(), {"-keyout", dir_ + "/ca.key", "-out", ca_file_, "-days", "2", "-subj",
                       "/CN=topodra-fake-apiserver-ca"});
  if (s = run(ca); !s.ok()) return s;

  auto issue = [&](const std::string& who, const std::string& cn) -> absl::Status {
    std::vector<std::string> csr = {"req", "-new", "-config", conf};
    csr.insert(csr.end(), ec_key.begin(), ec_key.end());
    csr.insert(csr.end(), {"-keyout", dir_ + "/" + who + ".key", "-out", dir_ + "/" + who + ".csr",
                           "-subj", "/CN=" + cn});
    if (absl::Status r = run(csr); !r.ok()) return r;
    return run({"x509", "-req", "-in", dir_ + "/" + who + ".csr", "-CA", ca_file_, "-CAkey",
                dir_ + "/ca.key", "-CAcreateserial", "-out", dir_ + "/" + who + ".crt", "-days",
                "2", "-extfile", dir_ + "/" + who + ".ext"});
  };
  if (s = issue("server", "127.0.0.1"); !s.ok()) return s;
  server_cert_file_ = dir_ + "/server.crt";
  server_key_file_ = dir_ + "/server.key";
  if (opts_.mtls) {
    if (s = issue("client", "topodra-test-client"); !s.ok()) return s;
    client_cert_file_ = dir_ + "/client.crt";
    client_key_file_ = dir_ + "/client.key";
  }
  return absl::OkStatus();
}

absl::Status FakeApiServer::Spawn(int port) {
  const std::string port_file = dir_ + "/port";
  const std::string control_port_file = dir_ + "/control-port";
  std::error_code ignored;
  std::filesystem::remove(port_file, ignored);
  std::filesystem::remove(control_port_file, ignored);

  std::vector<std::string> argv = {opts_.python,
                                   TOPODRA_FAKE_APISERVER_PY,
                                   "--port",
                                   absl::StrCat(port),
                                   "--port-file",
                                   port_file,
                                   "--control-port-file",
                                   control_port_file,
                                   "--log",
                                   dir_ + "/requests.log",
                                   "--versions",
                                   absl::StrJoin(opts_.versions, ","),
                                   "--mixins",
                                   opts_.accept_mixins ? "accept" : "reject",
                                   "--device-taints",
                                   opts_.device_taints ? "accept" : "drop",
                                   "--watch-history",
                                   absl::StrCat(opts_.watch_history),
                                   "--bookmark-interval",
                                   absl::StrCat(opts_.bookmark_interval_s)};
  for (const auto& [name, uid] : opts_.nodes) {
    argv.push_back("--node");
    argv.push_back(name + "=" + uid);
  }
  for (const std::string& crd : opts_.crds) {
    argv.push_back("--crd");
    argv.push_back(crd);
  }
  if (opts_.tls) {
    argv.insert(argv.end(), {"--tls-cert", server_cert_file_, "--tls-key", server_key_file_});
    if (opts_.mtls) argv.insert(argv.end(), {"--client-ca", ca_file_});
  }
  if (!opts_.token.empty()) argv.insert(argv.end(), {"--token", opts_.token});
  argv.insert(argv.end(), opts_.extra_args.begin(), opts_.extra_args.end());

  absl::StatusOr<pid_t> pid = SpawnChild(argv, dir_ + "/stdout.log", dir_ + "/stderr.log");
  if (!pid.ok()) {
    return absl::Status(pid.status().code(),
                        absl::StrCat("fake API server: ", pid.status().message()));
  }
  pid_ = *pid;

  const auto deadline = Clock::now() + kStartTimeout;
  for (;;) {
    if (std::optional<int> got = ReadPortFile(port_file)) {
      std::optional<int> control = ReadPortFile(control_port_file);
      if (!control) {
        (void)Stop();
        return absl::InternalError("fake API server: no control port file");
      }
      if (port != 0 && *got != port) {
        (void)Stop();
        return absl::InternalError(
            absl::StrCat("fake API server: asked for port ", port, ", got ", *got));
      }
      port_ = *got;
      control_port_ = *control;
      return absl::OkStatus();
    }
    int wait_status = 0;
    if (Reaped(pid_, &wait_status)) {
      pid_ = -1;
      return absl::UnavailableError(absl::StrCat("fake API server ", TOPODRA_FAKE_APISERVER_PY, " ",
                                                 DescribeExit(wait_status),
                                                 " before listening; stderr: ", StderrTail()));
    }
    if (Clock::now() > deadline) {
      (void)Stop();
      return absl::DeadlineExceededError(absl::StrCat("fake API server did not listen within ",
                                                      kStartTimeout.count(),
                                                      " s; stderr: ", StderrTail()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

absl::Status FakeApiServer::Stop() {
  if (pid_ <= 0) return absl::OkStatus();
  const pid_t pid = pid_;
  pid_ = -1;
  int wait_status = 0;
  if (kill(pid, SIGTERM) != 0 && errno == ESRCH) {
    Reaped(pid, &wait_status);
    return absl::OkStatus();
  }
  const auto deadline = Clock::now() + kStopTimeout;
  while (Clock::now() < deadline) {
    if (Reaped(pid, &wait_status)) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  for (;;) {
    if (waitpid(pid, &wait_status, 0) == pid || errno != EINTR) break;
  }
  return absl::OkStatus();
}

absl::Status FakeApiServer::Restart() {
  if (port_ == 0) return absl::FailedPreconditionError("fake API server was never started");
  if (absl::Status s = Stop(); !s.ok()) return s;
  return Spawn(port_);
}

std::string FakeApiServer::WriteKubeconfig(const std::string& path) const {
  std::string yaml = absl::StrCat(
      "apiVersion: v1\n"
      "kind: Config\n"
      "clusters:\n"
      "- name: fake-apiserver\n"
      "  cluster:\n"
      "    server: ",
      YamlQuote(url()), "\n");
  if (opts_.tls) absl::StrAppend(&yaml, "    certificate-authority: ", YamlQuote(ca_file_), "\n");
  absl::StrAppend(&yaml,
                  "contexts:\n"
                  "- name: fake-apiserver\n"
                  "  context:\n"
                  "    cluster: fake-apiserver\n"
                  "    user: fake-apiserver\n"
                  "current-context: fake-apiserver\n"
                  "users:\n"
                  "- name: fake-apiserver\n");
  if (opts_.token.empty() && !opts_.mtls) {
    absl::StrAppend(&yaml, "  user: {}\n");
  } else {
    absl::StrAppend(&yaml, "  user:\n");
    if (!opts_.token.empty()) absl::StrAppend(&yaml, "    token: ", YamlQuote(opts_.token), "\n");
    if (opts_.mtls) {
      absl::StrAppend(&yaml, "    client-certificate: ", YamlQuote(client_cert_file_), "\n",
                      "    client-key: ", YamlQuote(client_key_file_), "\n");
    }
  }
  if (!WriteFile(path, yaml).ok()) return "";
  return path;
}

std::string FakeApiServer::StderrTail() const {
  absl::StatusOr<std::string> text = ReadFile(dir_ + "/stderr.log");
  if (!text.ok()) return "";
  return Tail(*text, kStderrTailBytes);
}

absl::StatusOr<std::string> FakeApiServer::Control(const std::string& method,
                                                   const std::string& path_and_query) const {
  const std::string what = absl::StrCat(method, " ", path_and_query);
  if (pid_ <= 0 || control_port_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": fake API server is not running"));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat(what, ": socket: ", ErrnoText(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(control_port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return absl::UnavailableError(
        absl::StrCat(what, ": connect to control port ", control_port_, ": ", ErrnoText(errno)));
  }
  const std::string request = absl::StrCat(
      method, " ", path_and_query,
      " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat(what, ": send: ", ErrnoText(errno)));
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[8192];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat(what, ": recv: ", ErrnoText(errno)));
    if (n == 0) break;
    response.append(buf, static_cast<size_t>(n));
    if (response.size() > (64u << 20)) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": response larger than 64 MiB"));
    }
  }
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody" (the server sends Content-Length and closes).
  const size_t header_end = response.find("\r\n\r\n");
  int code = 0;
  if (header_end == std::string::npos || response.size() < 12 ||
      !absl::SimpleAtoi(absl::string_view(response).substr(9, 3), &code)) {
    return absl::InternalError(
        absl::StrCat(what, ": malformed HTTP response \"", Tail(response, 200), "\""));
  }
  std::string body = response.substr(header_end + 4);
  if (code < 200 || code > 299) {
    return absl::InternalError(absl::StrCat(what, ": HTTP ", code, ": ", Tail(body, 500)));
  }
  return body;
}

absl::Status FakeApiServer::Reset() { return Control("POST", "/__control/reset").status(); }

absl::Status FakeApiServer::FailNext(int count, int http_code) {
  return Control("POST", absl::StrCat("/__control/fail?count=", count, "&code=", http_code))
      .status();
}

absl::Status FakeApiServer::CloseWatches() {
  return Control("POST", "/__control/close-watches").status();
}

absl::Status FakeApiServer::ClearRequests() {
  return Control("DELETE", "/__control/requests").status();
}

namespace {
absl::StatusOr<nlohmann::json> ParseJson(const absl::StatusOr<std::string>& body,
                                         const std::string& what) {
  if (!body.ok()) return body.status();
  nlohmann::json parsed = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::InternalError(
        absl::StrCat(what, ": response is not JSON: \"", Tail(*body, 200), "\""));
  }
  return parsed;
}
}  // namespace

absl::StatusOr<nlohmann::json> FakeApiServer::Requests() const {
  return ParseJson(Control("GET", "/__control/requests"), "GET /__control/requests");
}

absl::StatusOr<nlohmann::json> FakeApiServer::State() const {
  return ParseJson(Control("GET", "/__control/state"), "GET /__control/state");
}

namespace {

constexpr char kResourceGroup[] = "resource.k8s.io";

size_t AppendToString(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// The status for a non-2xx answer (see FakeApiServer::Api).
absl::Status HttpError(const std::string& what, long code, const std::string& body) {
  const std::string message = absl::StrCat(what, ": HTTP ", code, ": ", Tail(body, 2000));
  switch (code) {
    case 404:
      return absl::NotFoundError(message);
    case 409: {
      nlohmann::json status = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (status.is_object() && status.value("reason", "") == "AlreadyExists") {
        return absl::AlreadyExistsError(message);
      }
      return absl::AbortedError(message);
    }
    case 422:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnknownError(message);
  }
}

}  // namespace

absl::StatusOr<nlohmann::json> FakeApiServer::Api(const std::string& method,
                                                  const std::string& path_and_query,
                                                  const nlohmann::json* body) const {
  const std::string what = absl::StrCat(method, " ", path_and_query);
  if (pid_ <= 0 || port_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": fake API server is not running"));
  }
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::InternalError(absl::StrCat(what, ": curl_easy_init failed"));
  struct Cleanup {
    CURL* curl;
    curl_slist* headers = nullptr;
    ~Cleanup() {
      curl_slist_free_all(headers);
      curl_easy_cleanup(curl);
    }
  } cleanup{curl};
  cleanup.headers = curl_slist_append(cleanup.headers, "Accept: application/json");
  const std::string content_type =
      method == "PATCH" ? "application/merge-patch+json" : "application/json";
  const std::string payload = body != nullptr ? body->dump() : "";
  if (body != nullptr) {
    cleanup.headers = curl_slist_append(cleanup.headers, ("Content-Type: " + content_type).c_str());
  }
  if (!opts_.token.empty()) {
    cleanup.headers =
        curl_slist_append(cleanup.headers, ("Authorization: Bearer " + opts_.token).c_str());
  }
  // No "Expect: 100-continue" round trip for larger bodies.
  cleanup.headers = curl_slist_append(cleanup.headers, "Expect:");
  const std::string full_url = url() + path_and_query;
  std::string response;
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_URL, full_url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, cleanup.headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROXY, "");  // never a proxy from the environment
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendToString);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
  if (body != nullptr) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, payload.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
  }
  if (opts_.tls) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, ca_file_.c_str());
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    if (opts_.mtls) {
      curl_easy_setopt(curl, CURLOPT_SSLCERT, client_cert_file_.c_str());
      curl_easy_setopt(curl, CURLOPT_SSLKEY, client_key_file_.c_str());
    }
  }
  const CURLcode rc = curl_easy_perform(curl);
  if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", error[0] != '\0' ? error : curl_easy_strerror(rc)));
  }
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  if (code < 200 || code > 299) return HttpError(what, code, response);
  if (response.empty()) return nlohmann::json();
  return ParseJson(response, what);
}

std::string FakeApiServer::ResourcePrefix(const nlohmann::json& obj) const {
  const auto served = [&](const std::string& v) {
    return std::find(opts_.versions.begin(), opts_.versions.end(), v) != opts_.versions.end();
  };
  std::string version;
  if (obj.is_object() && obj.contains("apiVersion") && obj["apiVersion"].is_string()) {
    const std::string api_version = obj["apiVersion"].get<std::string>();
    const std::string group_prefix = absl::StrCat(kResourceGroup, "/");
    if (absl::StartsWith(api_version, group_prefix) &&
        served(api_version.substr(group_prefix.size()))) {
      version = api_version.substr(group_prefix.size());
    }
  }
  if (version.empty()) {
    version = served("v1") || opts_.versions.empty() ? "v1" : opts_.versions.front();
  }
  return absl::StrCat("/apis/", kResourceGroup, "/", version);
}

absl::StatusOr<nlohmann::json> FakeApiServer::CreateClaim(const nlohmann::json& claim) const {
  if (!claim.is_object()) return absl::InvalidArgumentError("CreateClaim: not a JSON object");
  std::string ns = "default";
  const nlohmann::json* meta = claim.contains("metadata") ? &claim["metadata"] : nullptr;
  if (meta != nullptr && meta->is_object() && meta->contains("namespace") &&
      (*meta)["namespace"].is_string() && !(*meta)["namespace"].get<std::string>().empty()) {
    ns = (*meta)["namespace"].get<std::string>();
  }
  return Api("POST", absl::StrCat(ResourcePrefix(claim), "/namespaces/", ns, "/resourceclaims"),
             &claim);
}

absl::StatusOr<nlohmann::json> FakeApiServer::AllocateClaim(
    const std::string& ns, const std::string& name, const nlohmann::json& allocation,
    const nlohmann::json& reserved_for) const {
  const std::string path =
      absl::StrCat(ResourcePrefix(nlohmann::json()), "/namespaces/", ns, "/resourceclaims/", name);
  absl::StatusOr<nlohmann::json> claim = Api("GET", path);
  if (!claim.ok()) return claim.status();
  nlohmann::json& status = (*claim)["status"];
  if (!status.is_object()) status = nlohmann::json::object();
  status["allocation"] = allocation;
  if (reserved_for.is_array() && reserved_for.empty()) {
    status.erase("reservedFor");
  } else {
    status["reservedFor"] = reserved_for;
  }
  return Api("PUT", path + "/status", &*claim);
}

absl::StatusOr<nlohmann::json> FakeApiServer::CreateDeviceClass(const nlohmann::json& cls) const {
  return Api("POST", absl::StrCat(ResourcePrefix(cls), "/deviceclasses"), &cls);
}

}  // namespace topodra::testing
