// RestClient over our own HTTP/1.1 client on OpenSSL (issue 19: libcurl and the libraries it
// pulls in were 9 MB of the idle daemon's 24 MB). Non-blocking sockets driven by poll() in slices
// of at most kPollIntervalMs, so a request notices its cancellation flag and a watch its stop
// flag promptly; WakeWatches cuts a watch's wait short through an eventfd in its poll set.
// Kept-alive connections wait in a small pool, each used by one request at a time. The parsing
// of what the server sends is pure and lives in http_parse.{h,cc}.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/json_text.h"
#include "driver/kube/http_parse.h"
#include "driver/kube/rest_client.h"

namespace topodra::kube {
namespace {

using Clock = std::chrono::steady_clock;

// strerror is not thread-safe.
std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

constexpr std::size_t kMaxBodyBytes = 256 << 20;      // a large list response
constexpr std::size_t kMaxErrorBodyBytes = 1 << 20;   // non-2xx bodies (Status objects)
constexpr std::size_t kMaxWatchLineBytes = 16 << 20;  // one watch event
constexpr std::size_t kMaxTokenBytes = 1 << 20;
constexpr std::size_t kShownBodyChars = 200;
constexpr std::size_t kReadChunk = 64 << 10;
constexpr int kPollIntervalMs = 50;
// A watch has no overall timeout; it is abandoned as dead when it delivers less than 1 byte/s for
// this long: twice the server-side timeoutSeconds (at least a minute), or, without one, just over
// the API server's longest request timeout (2 x the default 30 min min-request-timeout).
constexpr long kMinWatchSilenceS = 60;
constexpr long kDefaultWatchSilenceS = 3660;
// At most this many idle kept-alive connections: enough for the claim fetches and slice writes
// that run at once.
constexpr std::size_t kMaxIdleConnections = 16;

std::string Truncate(absl::string_view s, std::size_t max) {
  if (s.size() <= max) return std::string(s);
  return absl::StrCat(s.substr(0, max), "...");
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read token file \"", path, "\": ", ErrnoText(errno)));
  }
  std::string data(kMaxTokenBytes + 1, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<std::size_t>(in.gcount()));
  if (data.size() > kMaxTokenBytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("token file \"", path, "\" is larger than ", kMaxTokenBytes, " bytes"));
  }
  std::string token(absl::StripAsciiWhitespace(data));
  if (token.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("token file \"", path, "\" is empty"));
  }
  return token;
}

absl::Status CheckReadable(const std::string& path, const char* what) {
  if (path.empty() || std::ifstream(path)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cannot read ", what, " \"", path, "\": ", ErrnoText(errno)));
}

// OpenSSL's queued errors of this thread as text (and the queue emptied).
std::string SslErrors() {
  std::string text;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&text, text.empty() ? "" : "; ", buf);
  }
  return text.empty() ? "no further detail" : text;
}

using SslCtx = std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)>;
using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;

Bio MemBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
}

// The PEM certificates of `pem` added to the context's trust store; an error when there is none.
absl::Status AddCaData(SSL_CTX* ctx, const std::string& pem) {
  Bio bio = MemBio(pem);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, cert) == 1) ++added;
    X509_free(cert);
  }
  ERR_clear_error();  // the end of the PEM data reads as an error
  if (added == 0) {
    return absl::FailedPreconditionError("CA data holds no PEM certificate");
  }
  return absl::OkStatus();
}

absl::Status UseClientCertData(SSL_CTX* ctx, const std::string& pem) {
  Bio bio = MemBio(pem);
  X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
  if (cert == nullptr || SSL_CTX_use_certificate(ctx, cert) != 1) {
    X509_free(cert);
    return absl::FailedPreconditionError(
        absl::StrCat("client certificate data is not a PEM certificate: ", SslErrors()));
  }
  X509_free(cert);
  // The rest of the PEM text is the chain.
  while (X509* extra = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx, extra) != 1) X509_free(extra);
  }
  ERR_clear_error();
  return absl::OkStatus();
}

// The passphrase callback of an encrypted key: none. OpenSSL's default asks on the terminal,
// which would hang a daemon; with this the load fails and the error names the key.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*userdata*/) { return 0; }

absl::Status UseClientKeyData(SSL_CTX* ctx, const std::string& pem) {
  Bio bio = MemBio(pem);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr);
  const bool ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  if (!ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("client key data is not an unencrypted PEM private key: ", SslErrors()));
  }
  return absl::OkStatus();
}

// The TLS context of a client: TLS >= 1.2, the configured trust, the client certificate.
absl::StatusOr<SslCtx> NewTlsContext(const ClusterConfig& config) {
  SslCtx ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("SSL_CTX_new: ", SslErrors()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // A peer closing without close_notify is an end of stream; the HTTP framing tells whether the
  // body was whole.
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_default_passwd_cb(ctx.get(), NoPassphrase);
  // A configured CA is the only one trusted, as in client-go; none: the system store.
  if (!config.ca_data.empty()) {
    if (absl::Status s = AddCaData(ctx.get(), config.ca_data); !s.ok()) return s;
  } else if (!config.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), config.ca_file.c_str(), nullptr) != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CA file \"", config.ca_file, "\" holds no usable PEM certificate: ", SslErrors()));
    }
  } else if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the system CA store: ", SslErrors()));
  }
  // Any configured certificate is an anchor, as in Go's x509 and libcurl >= 7.68: a CA file
  // holding only the intermediate that issued the server's certificate must do.
  if (!config.ca_data.empty() || !config.ca_file.empty()) {
    X509_STORE_set_flags(SSL_CTX_get_cert_store(ctx.get()), X509_V_FLAG_PARTIAL_CHAIN);
  }
  SSL_CTX_set_verify(ctx.get(), config.insecure_skip_tls_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                     nullptr);
  if (!config.client_cert_data.empty()) {
    if (absl::Status s = UseClientCertData(ctx.get(), config.client_cert_data); !s.ok()) return s;
  } else if (!config.client_cert_file.empty() &&
             SSL_CTX_use_certificate_chain_file(ctx.get(), config.client_cert_file.c_str()) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("client certificate file \"", config.client_cert_file,
                     "\" is not a PEM certificate: ", SslErrors()));
  }
  if (!config.client_key_data.empty()) {
    if (absl::Status s = UseClientKeyData(ctx.get(), config.client_key_data); !s.ok()) return s;
  } else if (!config.client_key_file.empty() &&
             SSL_CTX_use_PrivateKey_file(ctx.get(), config.client_key_file.c_str(),
                                         SSL_FILETYPE_PEM) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("client key file \"", config.client_key_file,
                     "\" is not an unencrypted PEM private key: ", SslErrors()));
  }
  const bool has_cert = !config.client_cert_data.empty() || !config.client_cert_file.empty();
  const bool has_key = !config.client_key_data.empty() || !config.client_key_file.empty();
  if (has_cert && has_key && SSL_CTX_check_private_key(ctx.get()) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("client key does not match the client certificate: ", SslErrors()));
  }
  return ctx;
}

// What identifies the current versions of the CA, client certificate and key files: a rotation
// renames a new file over the old (a new inode) or rewrites it (a new mtime or size).
std::string TlsFilesStamp(const ClusterConfig& config) {
  std::string stamp;
  for (const std::string* path :
       {&config.ca_file, &config.client_cert_file, &config.client_key_file}) {
    struct stat st {};
    if (path->empty() || stat(path->c_str(), &st) != 0) {
      absl::StrAppend(&stamp, "-;");
      continue;
    }
    absl::StrAppend(&stamp, st.st_dev, ":", st.st_ino, ":", st.st_mtim.tv_sec, ".",
                    st.st_mtim.tv_nsec, ":", st.st_size, ";");
  }
  return stamp;
}

// One TCP (and maybe TLS) connection, used by one request at a time.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  ~Connection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  int fd() const { return fd_; }
  SSL* ssl() const { return ssl_; }
  void set_ssl(SSL* ssl) { ssl_ = ssl; }
  // Bytes read past the end of the last response (a server may pipeline nothing, but a stray
  // CRLF is allowed); also the head of the response being read.
  std::string pending;

  // An idle kept-alive connection the server may have closed: readable means EOF (or bytes we
  // never asked for), either way not reusable.
  bool LooksAlive() const {
    if (!pending.empty()) return false;
    if (ssl_ != nullptr && SSL_pending(ssl_) > 0) return false;
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }

 private:
  int fd_;
  SSL* ssl_ = nullptr;
};

// What one request waits for and what may interrupt it.
struct Wait {
  Clock::time_point deadline = Clock::time_point::max();
  const std::atomic<bool>* stop = nullptr;
  std::function<bool()> caller_gone;  // RequestLimits::caller_gone
  int wake_fd = -1;                   // a watch's eventfd (WakeWatches)
  bool stopped = false;
  std::string what;  // "GET /path"
  // A watch: less than 1 byte/s over this window is a dead connection (0: no such rule).
  std::chrono::seconds low_speed_window{0};
  Clock::time_point window_start;
  std::uint64_t window_bytes = 0;

  bool StopRequested() const {
    return (stop != nullptr && stop->load()) || (caller_gone && caller_gone());
  }
};

enum class IoResult { kReady, kStopped, kError };

class HttpRestClient : public RestClient {
 public:
  explicit HttpRestClient(ClusterConfig config)
      : config_(std::move(config)), tls_(nullptr, SSL_CTX_free) {}
  ~HttpRestClient() override = default;
  HttpRestClient(const HttpRestClient&) = delete;
  HttpRestClient& operator=(const HttpRestClient&) = delete;

  absl::Status Init() {
    absl::StatusOr<http::ServerUrl> url = http::ParseServerUrl(config_.server);
    if (!url.ok()) return url.status();
    url_ = *std::move(url);
    // The Host header names the server we connect to; with tls_server_name too (only the TLS
    // name and the certificate check use that one).
    host_header_ = url_.default_port && config_.tls_server_name.empty()
                       ? url_.host
                       : absl::StrCat(url_.host, ":", url_.port);
    for (const auto& [path, what] : {std::pair{&config_.ca_file, "CA file"},
                                     {&config_.client_cert_file, "client certificate file"},
                                     {&config_.client_key_file, "client key file"}}) {
      if (absl::Status s = CheckReadable(*path, what); !s.ok()) return s;
    }
    WarnAboutIgnoredProxy();
    token_ = config_.token;
    if (!config_.token_file.empty()) {
      absl::StatusOr<std::string> token = ReadToken(config_.token_file);
      if (!token.ok()) return token.status();
      token_ = *std::move(token);
      token_read_at_ = Clock::now();
    }
    if (url_.scheme == "https") {
      absl::StatusOr<SslCtx> ctx = NewTlsContext(config_);
      if (!ctx.ok()) return ctx.status();
      tls_ = *std::move(ctx);
      tls_stamp_ = TlsFilesStamp(config_);
      tls_checked_at_ = Clock::now();
      verify_name_ =
          http::Unbracketed(config_.tls_server_name.empty() ? url_.host : config_.tls_server_name);
    }
    return absl::OkStatus();
  }

  // libcurl honoured the proxy variables; we connect directly (no CONNECT tunnel), so say so
  // where it would have gone through a proxy.
  void WarnAboutIgnoredProxy() const {
    const std::vector<const char*> names =
        url_.scheme == "https"
            ? std::vector<const char*>{"https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}
            : std::vector<const char*>{"http_proxy", "all_proxy", "ALL_PROXY"};
    for (const char* name : names) {
      const char* proxy = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
      if (proxy == nullptr || *proxy == '\0') continue;
      const char* no_proxy = std::getenv("no_proxy");               // NOLINT(concurrency-mt-unsafe)
      if (no_proxy == nullptr) no_proxy = std::getenv("NO_PROXY");  // NOLINT(concurrency-mt-unsafe)
      if (no_proxy != nullptr && http::NoProxyCovers(no_proxy, url_.host)) return;
      spdlog::warn(
          "{} is set but ignored: the API server {} is reached directly (no proxy support), and "
          "NO_PROXY (\"{}\") does not name its host \"{}\"",
          name, config_.server, no_proxy == nullptr ? "" : no_proxy, http::Unbracketed(url_.host));
      return;
    }
  }

  absl::StatusOr<Response> Get(const std::string& path) override {
    return Request("GET", path, nullptr);
  }
  absl::StatusOr<Response> GetWithin(const std::string& path,
                                     const RequestLimits& limits) override {
    return Request("GET", path, nullptr, limits);
  }
  absl::StatusOr<Response> Post(const std::string& path, const nlohmann::json& body) override {
    return Request("POST", path, &body);
  }
  absl::StatusOr<Response> Put(const std::string& path, const nlohmann::json& body) override {
    return Request("PUT", path, &body);
  }
  absl::StatusOr<Response> Delete(const std::string& path, const nlohmann::json& body) override {
    return Request("DELETE", path, &body);
  }

  void WakeWatches() override {
    std::lock_guard<std::mutex> lock(watches_mutex_);
    // An eventfd stays readable until its watch drains it, so a wake-up that comes before the
    // watch's poll is kept for it.
    for (const int fd : watches_) {
      const std::uint64_t one = 1;
      (void)!write(fd, &one, sizeof(one));
    }
  }

  absl::Status Watch(const std::string& path, const WatchHandler& on_event,
                     const std::atomic<bool>* stop) override {
    const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake < 0) {
      return absl::InternalError(absl::StrCat("watch GET ", path, ": eventfd: ", ErrnoText(errno)));
    }
    const WakeableWatch wakeable(this, wake);
    Exchange x;
    x.on_event = &on_event;
    x.wait.stop = stop;
    x.wait.wake_fd = wake;
    const long server_timeout = http::WatchTimeoutSeconds(path);
    x.wait.low_speed_window =
        std::chrono::seconds(server_timeout > 0 ? std::max(2 * server_timeout, kMinWatchSilenceS)
                                                : kDefaultWatchSilenceS);
    if (absl::Status s = Run("GET", path, "", x); !s.ok()) return s;
    if (x.stopped) return absl::OkStatus();
    if (!x.Success()) return ErrorOf("GET", path, x);
    // The server ended the stream; a last line without its newline still counts.
    if (!x.DeliverLine(x.body) && !x.stopped) return x.stream_error;
    return absl::OkStatus();
  }

 private:
  // One request and its response, shared by the transport and the body consumers.
  struct Exchange {
    const WatchHandler* on_event = nullptr;  // set for a watch
    Wait wait;
    std::chrono::milliseconds timeout{0};  // > 0: shorter than the client's (RequestLimits)
    std::string what;                      // "GET /path"

    int http_code = 0;
    std::string reason_phrase;
    std::vector<std::string> warnings;
    std::string body;  // the response body, or for a 2xx watch the unfinished line
    absl::Status stream_error;
    bool stopped = false;  // the handler or the stop flag ended the watch

    bool Success() const { return http_code >= 200 && http_code <= 299; }
    bool StopRequested() const { return wait.StopRequested(); }

    // One complete watch line; false ends the transfer (stopped or stream_error set).
    bool DeliverLine(absl::string_view line) {
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (absl::StripAsciiWhitespace(line).empty()) return true;
      if (StopRequested()) {
        stopped = true;
        return false;
      }
      nlohmann::json event = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
      if (event.is_discarded() || !event.is_object()) {
        stream_error =
            absl::InternalError(absl::StrCat("watch ", what, ": unparsable event line \"",
                                             absl::CEscape(Truncate(line, kShownBodyChars)), "\""));
        return false;
      }
      try {
        if (!(*on_event)(event)) {
          stopped = true;
          return false;
        }
      } catch (const std::exception& e) {
        stream_error =
            absl::InternalError(absl::StrCat("watch ", what, ": handler threw: ", e.what()));
        return false;
      } catch (...) {
        stream_error = absl::InternalError(absl::StrCat("watch ", what, ": handler threw"));
        return false;
      }
      return true;
    }

    // Body bytes; false ends the transfer (stream_error or stopped set).
    bool Receive(absl::string_view data) {
      if (on_event == nullptr || !Success()) {
        const std::size_t limit =
            on_event == nullptr && Success() ? kMaxBodyBytes : kMaxErrorBodyBytes;
        if (body.size() + data.size() > limit) {
          if (!Success()) {
            // An error body: the start is enough to report, and reading the rest could take
            // until the deadline; the connection is closed instead.
            const absl::string_view head = data.substr(0, limit - body.size());
            body.append(head.data(), head.size());
            return false;
          }
          stream_error = absl::ResourceExhaustedError(
              absl::StrCat(what, ": response body larger than ", limit, " bytes"));
          return false;
        }
        body.append(data.data(), data.size());
        return true;
      }
      std::size_t scan = body.size();
      body.append(data.data(), data.size());
      std::size_t start = 0;
      for (std::size_t nl; (nl = body.find('\n', scan)) != std::string::npos; scan = start) {
        if (!DeliverLine(absl::string_view(body).substr(start, nl - start))) return false;
        start = nl + 1;
      }
      body.erase(0, start);
      if (body.size() > kMaxWatchLineBytes) {
        stream_error = absl::ResourceExhaustedError(absl::StrCat(
            "watch ", what, ": event line longer than ", kMaxWatchLineBytes, " bytes"));
        return false;
      }
      return true;
    }
  };

  absl::StatusOr<Response> Request(const char* verb, const std::string& path,
                                   const nlohmann::json* body, const RequestLimits& limits = {}) {
    std::string payload;
    if (body != nullptr && !body->is_null()) {
      try {
        payload = body->dump();
      } catch (const std::exception& e) {  // invalid UTF-8 in a string
        return absl::InvalidArgumentError(
            absl::StrCat(verb, " ", path, ": cannot serialize request body: ", e.what()));
      }
    }
    Exchange x;
    x.wait.stop = limits.cancelled;
    x.wait.caller_gone = limits.caller_gone;
    x.timeout = limits.timeout;
    if (absl::Status s = Run(verb, path, payload, x); !s.ok()) return s;
    if (x.stopped) {
      return absl::CancelledError(
          absl::StrCat(verb, " ", path, ": abandoned: the caller no longer waits for it"));
    }
    if (!x.Success()) return ErrorOf(verb, path, x);
    Response response;
    response.http_code = x.http_code;
    response.warnings = std::move(x.warnings);
    if (!absl::StripAsciiWhitespace(x.body).empty()) {
      response.body = nlohmann::json::parse(x.body, nullptr, false);
      if (response.body.is_discarded()) {
        return absl::InternalError(
            absl::StrCat(verb, " ", path, ": HTTP ", x.http_code, " response is not JSON: \"",
                         absl::CEscape(Truncate(x.body, kShownBodyChars)), "\""));
      }
    }
    return response;
  }

  // Runs the exchange, once more with a re-read token after a 401. Returns transport and stream
  // errors; HTTP errors are left in x.http_code for the caller.
  absl::Status Run(const char* verb, const std::string& path, const std::string& payload,
                   Exchange& x) {
    const WatchHandler* on_event = x.on_event;
    const Wait wait = x.wait;
    const std::chrono::milliseconds limit = x.timeout;
    const Clock::time_point start = Clock::now();
    const std::chrono::milliseconds timeout =
        limit.count() > 0 ? std::min(limit, config_.timeout) : config_.timeout;
    for (int attempt = 0;; ++attempt) {
      x = Exchange();
      x.on_event = on_event;
      x.wait = wait;
      x.what = absl::StrCat(verb, " ", path);
      x.wait.what = x.what;
      // Requests end by one deadline, the 401 retry included; a watch's connect and head have
      // the client's timeout, its body none (the low-speed rule instead).
      x.wait.deadline = start + timeout;
      x.wait.window_start = Clock::now();
      const std::string token = CurrentToken();
      if (absl::Status s = RunOnce(verb, path, payload, token, x); !s.ok()) return s;
      if (x.http_code != 401 || attempt > 0 || !ReloadTokenAfter401(token)) return x.stream_error;
    }
  }

  std::string RequestText(const char* verb, const std::string& path, const std::string& payload,
                          const std::string& token) const {
    std::string text =
        absl::StrCat(verb, " ", url_.prefix, path, " HTTP/1.1\r\nHost: ", host_header_,
                     "\r\nUser-Agent: topodra/0.1\r\nAccept: application/json\r\n");
    if (!token.empty()) absl::StrAppend(&text, "Authorization: Bearer ", token, "\r\n");
    const std::string v = verb;
    if (!payload.empty() || v == "POST" || v == "PUT") {
      if (!payload.empty()) absl::StrAppend(&text, "Content-Type: application/json\r\n");
      absl::StrAppend(&text, "Content-Length: ", payload.size(), "\r\n");
    }
    absl::StrAppend(&text, "\r\n", payload);
    return text;
  }

  // One attempt: a pooled connection (or a fresh one), the request, the response.
  absl::Status RunOnce(const char* verb, const std::string& path, const std::string& payload,
                       const std::string& token, Exchange& x) {
    const bool watch = x.on_event != nullptr;
    const std::string request = RequestText(verb, path, payload, token);
    for (int fresh = 0; fresh < 2; ++fresh) {
      std::unique_ptr<Connection> conn = watch || fresh > 0 ? nullptr : TakeIdle();
      const bool reused = conn != nullptr;
      if (!reused) {
        absl::StatusOr<std::unique_ptr<Connection>> made = Connect(x.wait, watch);
        if (!made.ok()) return made.status();
        if (*made == nullptr) {  // stopped while connecting
          x.stopped = true;
          return absl::OkStatus();
        }
        conn = *std::move(made);
      }
      bool got_bytes = false;
      bool reusable = false;
      absl::Status s = Exchange1(*conn, request, x, got_bytes, reusable);
      // A kept-alive connection the server closed meanwhile fails (closed, reset) before any
      // answer: the request never reached it, so it goes once more on a fresh connection. Not
      // after a timeout: a slow server may have the request.
      if (!s.ok() && s.code() == absl::StatusCode::kUnavailable && reused && !got_bytes &&
          !x.stopped) {
        continue;
      }
      if (s.ok() && reusable) GiveBackIdle(std::move(conn));
      return s;
    }
    return absl::InternalError(absl::StrCat(x.what, ": no connection"));
  }

  // Writes the request and reads the response into x (body through x.Receive). A returned error
  // is the transport's; got_bytes tells whether any of the response arrived.
  absl::Status Exchange1(Connection& conn, const std::string& request, Exchange& x, bool& got_bytes,
                         bool& reusable) {
    if (absl::Status s = WriteAll(conn, request, x.wait); !s.ok() || x.wait.stopped) {
      x.stopped = x.wait.stopped;
      return x.stopped ? absl::OkStatus() : s;
    }
    // The head.
    std::optional<http::ParsedHead> parsed;
    while (true) {
      absl::StatusOr<std::optional<http::ParsedHead>> head = http::ParseResponseHead(conn.pending);
      if (!head.ok()) return ProtocolError(x, head.status());
      if (head->has_value()) {
        parsed = **std::move(head);
        conn.pending.erase(0, parsed->size);
        // We never ask for an upgrade; after a 101 the connection speaks something else.
        if (parsed->head.code == 101) {
          return ProtocolError(x, absl::InvalidArgumentError(
                                      "101 Switching Protocols to a request without Upgrade"));
        }
        if (parsed->head.code >= 200) break;
        parsed.reset();  // 1xx: another head follows
        continue;
      }
      absl::StatusOr<bool> more = ReadMore(conn, x.wait, conn.pending);
      if (!more.ok()) return more.status();
      if (x.wait.stopped) {
        x.stopped = true;
        return absl::OkStatus();
      }
      if (!*more) {
        return absl::UnavailableError(absl::StrCat(
            x.what, conn.pending.empty() ? ": Server returned nothing (no headers, no data)"
                                         : ": connection closed in the response head"));
      }
      got_bytes = true;
    }
    got_bytes = true;
    x.http_code = parsed->head.code;
    x.reason_phrase = parsed->head.reason;
    for (const std::string& w : http::HeaderValues(parsed->head, "warning")) {
      x.warnings.push_back(http::WarningText(w));
    }
    absl::StatusOr<http::BodyFraming> framing = http::FramingOf(parsed->head);
    if (!framing.ok()) return ProtocolError(x, framing.status());
    // A watch's body has no deadline, only the low-speed rule.
    if (x.on_event != nullptr && x.Success()) {
      x.wait.deadline = Clock::time_point::max();
      x.wait.window_start = Clock::now();
      x.wait.window_bytes = 0;
    } else {
      x.wait.low_speed_window = std::chrono::seconds(0);
    }
    absl::StatusOr<bool> whole = ReadBody(conn, *framing, x);
    if (!whole.ok()) return whole.status();
    reusable = *whole && framing->keep_alive && conn.pending.empty() && x.on_event == nullptr;
    return absl::OkStatus();
  }

  // Reads the body as framed; true when it ended as framed (the connection may be reused),
  // false when the exchange stopped early (stop flag, handler, a body error in x).
  absl::StatusOr<bool> ReadBody(Connection& conn, const http::BodyFraming& framing, Exchange& x) {
    std::string data;
    http::ChunkedDecoder chunked;
    std::uint64_t left = framing.length;
    std::string raw = std::move(conn.pending);
    conn.pending.clear();
    auto done = [&] {
      return framing.kind == http::BodyFraming::kNone ||
             (framing.kind == http::BodyFraming::kLength && left == 0) ||
             (framing.kind == http::BodyFraming::kChunked && chunked.done());
    };
    while (true) {
      // Consume what has arrived.
      if (!raw.empty() && !done()) {
        data.clear();
        std::size_t used = 0;
        if (framing.kind == http::BodyFraming::kChunked) {
          absl::StatusOr<std::size_t> n = chunked.Feed(raw, &data);
          if (!n.ok()) return ProtocolError(x, n.status());
          used = *n;
        } else if (framing.kind == http::BodyFraming::kLength) {
          used = static_cast<std::size_t>(std::min<std::uint64_t>(left, raw.size()));
          left -= used;
          data.assign(raw, 0, used);
        } else {
          used = raw.size();
          data = raw;
        }
        raw.erase(0, used);
        if (!data.empty() && !x.Receive(data)) return false;
      }
      if (done()) {
        conn.pending = std::move(raw);
        return true;
      }
      if (x.StopRequested()) {
        x.stopped = true;
        return false;
      }
      absl::StatusOr<bool> more = ReadMore(conn, x.wait, raw);
      if (!more.ok()) return more.status();
      if (x.wait.stopped) {
        x.stopped = true;
        return false;
      }
      if (!*more) {  // end of stream
        if (framing.kind == http::BodyFraming::kUntilClose) return false;
        return absl::UnavailableError(
            absl::StrCat(x.what, ": connection closed before the end of the response body"));
      }
    }
  }

  absl::Status ProtocolError(const Exchange& x, const absl::Status& s) const {
    return absl::UnavailableError(
        absl::StrCat(x.what, ": invalid HTTP response from the server: ", s.message()));
  }

  // Waits until fd is ready for `events`, the stop flag is set (wait.stopped), a watch is woken,
  // or the deadline or low-speed rule ends it (DeadlineExceeded).
  absl::StatusOr<bool> WaitFor(int fd, short events, Wait& wait) {
    while (true) {
      if (wait.StopRequested()) {
        wait.stopped = true;
        return false;
      }
      const Clock::time_point now = Clock::now();
      if (now >= wait.deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(wait.what, ": Timeout was reached: no answer within the request's time"));
      }
      if (wait.low_speed_window.count() > 0 && now - wait.window_start >= wait.low_speed_window) {
        if (wait.window_bytes < static_cast<std::uint64_t>(wait.low_speed_window.count())) {
          return absl::DeadlineExceededError(
              absl::StrCat(wait.what, ": Timeout was reached: less than 1 byte/s for ",
                           wait.low_speed_window.count(), " s"));
        }
        wait.window_start = now;
        wait.window_bytes = 0;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wait.deadline - now);
      const int ms = static_cast<int>(std::clamp<long long>(left.count() + 1, 1, kPollIntervalMs));
      pollfd fds[2] = {{fd, events, 0}, {wait.wake_fd, POLLIN, 0}};
      const int n = poll(fds, wait.wake_fd >= 0 ? 2 : 1, ms);
      if (n < 0 && errno != EINTR) {
        return absl::InternalError(absl::StrCat(wait.what, ": poll: ", ErrnoText(errno)));
      }
      if (n <= 0) continue;
      if (wait.wake_fd >= 0 && (fds[1].revents & POLLIN) != 0) {
        std::uint64_t count = 0;
        (void)!read(wait.wake_fd, &count, sizeof(count));
      }
      if (fds[0].revents != 0) return true;
    }
  }

  // Appends what the connection has to *out: true for bytes, false for the end of the stream
  // (or wait.stopped).
  absl::StatusOr<bool> ReadMore(Connection& conn, Wait& wait, std::string& out) {
    char buf[kReadChunk];
    while (true) {
      ssize_t n = 0;
      short want = POLLIN;
      if (conn.ssl() != nullptr) {
        ERR_clear_error();
        const int r = SSL_read(conn.ssl(), buf, sizeof(buf));
        if (r > 0) {
          n = r;
        } else {
          const int e = SSL_get_error(conn.ssl(), r);
          if (e == SSL_ERROR_ZERO_RETURN) return false;
          if (e == SSL_ERROR_WANT_WRITE) {
            want = POLLOUT;
          } else if (e != SSL_ERROR_WANT_READ) {
            const int err = errno;
            return absl::UnavailableError(
                absl::StrCat(wait.what, ": Failure when receiving data from the peer: ",
                             e == SSL_ERROR_SYSCALL && err != 0 ? ErrnoText(err) : SslErrors()));
          }
          n = -1;
        }
      } else {
        n = recv(conn.fd(), buf, sizeof(buf), 0);
        if (n == 0) return false;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return absl::UnavailableError(absl::StrCat(
              wait.what, ": Failure when receiving data from the peer: ", ErrnoText(errno)));
        }
      }
      if (n > 0) {
        out.append(buf, static_cast<std::size_t>(n));
        wait.window_bytes += static_cast<std::uint64_t>(n);
        return true;
      }
      absl::StatusOr<bool> ready = WaitFor(conn.fd(), want, wait);
      if (!ready.ok()) return ready.status();
      if (!*ready) return false;  // stopped
    }
  }

  absl::Status WriteAll(Connection& conn, absl::string_view data, Wait& wait) {
    while (!data.empty()) {
      short want = POLLOUT;
      ssize_t n = 0;
      if (conn.ssl() != nullptr) {
        ERR_clear_error();
        const int r = SSL_write(conn.ssl(), data.data(), static_cast<int>(data.size()));
        if (r > 0) {
          n = r;
        } else {
          const int e = SSL_get_error(conn.ssl(), r);
          if (e == SSL_ERROR_WANT_READ) {
            want = POLLIN;
          } else if (e != SSL_ERROR_WANT_WRITE) {
            const int err = errno;
            return absl::UnavailableError(
                absl::StrCat(wait.what, ": Failure when sending data to the peer: ",
                             e == SSL_ERROR_SYSCALL && err != 0 ? ErrnoText(err) : SslErrors()));
          }
          n = -1;
        }
      } else {
        n = send(conn.fd(), data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return absl::UnavailableError(absl::StrCat(
              wait.what, ": Failure when sending data to the peer: ", ErrnoText(errno)));
        }
      }
      if (n > 0) {
        data.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      absl::StatusOr<bool> ready = WaitFor(conn.fd(), want, wait);
      if (!ready.ok()) return ready.status();
      if (!*ready) return absl::OkStatus();  // stopped
    }
    return absl::OkStatus();
  }

  // A new connection to the server (TCP, then TLS for https), or nullptr when wait.stop was set
  // meanwhile.
  absl::StatusOr<std::unique_ptr<Connection>> Connect(Wait& wait, bool watch) {
    const Clock::time_point start = Clock::now();
    const std::string host = http::Unbracketed(url_.host);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    // No AI_ADDRCONFIG: it makes an IPv6 literal fail on a host without a global IPv6 address
    // (and ::1 counts for nothing), where libcurl connected.
    addrinfo* found = nullptr;
    // getaddrinfo has no timeout of its own; the API server is an IP address in every config
    // the kubelet or kubeadm writes, and a name resolves through the node's resolver.
    if (const int rc = getaddrinfo(host.c_str(), url_.port.c_str(), &hints, &found); rc != 0) {
      return absl::UnavailableError(absl::StrCat(wait.what, ": Couldn't resolve host name: \"",
                                                 host, "\": ", gai_strerror(rc)));
    }
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> list(found, freeaddrinfo);
    int last_error = ECONNREFUSED;
    for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      auto conn = std::make_unique<Connection>(
          socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
      if (conn->fd() < 0) {
        last_error = errno;
        continue;
      }
      const int one = 1;
      setsockopt(conn->fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      if (watch) {
        // A peer gone without a FIN is noticed within minutes rather than at the low-speed limit.
        const int idle = 30;
        const int interval = 10;
        setsockopt(conn->fd(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        setsockopt(conn->fd(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        setsockopt(conn->fd(), IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
      }
      if (connect(conn->fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
          last_error = errno;
          continue;
        }
        absl::StatusOr<bool> ready = WaitFor(conn->fd(), POLLOUT, wait);
        if (!ready.ok()) return ready.status();
        if (!*ready) return nullptr;
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(conn->fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          last_error = err;
          continue;
        }
      }
      if (url_.scheme != "https") return conn;
      absl::Status s = Handshake(*conn, wait);
      if (!s.ok()) return s;
      if (wait.stopped) return nullptr;
      return conn;
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    return absl::UnavailableError(
        absl::StrCat(wait.what, ": Couldn't connect to server: Failed to connect to ", host,
                     " port ", url_.port, " after ", ms, " ms: ", ErrnoText(last_error)));
  }

  absl::Status Handshake(Connection& conn, Wait& wait) {
    SSL* ssl = NewSsl();
    if (ssl == nullptr) return absl::InternalError(absl::StrCat("SSL_new: ", SslErrors()));
    conn.set_ssl(ssl);
    SSL_set_fd(ssl, conn.fd());
    in6_addr ip{};
    const bool is_ip = inet_pton(AF_INET, verify_name_.c_str(), &ip) == 1 ||
                       inet_pton(AF_INET6, verify_name_.c_str(), &ip) == 1;
    // SNI carries names only (RFC 6066), never an address.
    if (!is_ip) SSL_set_tlsext_host_name(ssl, verify_name_.c_str());
    if (!config_.insecure_skip_tls_verify) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      const int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, verify_name_.c_str())
                           : X509_VERIFY_PARAM_set1_host(param, verify_name_.c_str(), 0);
      if (ok != 1) {
        return absl::InternalError(
            absl::StrCat(wait.what, ": cannot set the name to verify \"", verify_name_, "\""));
      }
    }
    while (true) {
      ERR_clear_error();
      const int r = SSL_connect(ssl);
      if (r == 1) return absl::OkStatus();
      const int e = SSL_get_error(ssl, r);
      short want = 0;
      if (e == SSL_ERROR_WANT_READ) want = POLLIN;
      if (e == SSL_ERROR_WANT_WRITE) want = POLLOUT;
      if (want == 0) {
        const long verify = SSL_get_verify_result(ssl);
        if (verify != X509_V_OK) {
          ERR_clear_error();
          return absl::UnavailableError(absl::StrCat(
              wait.what, ": SSL peer certificate or SSH remote key was not OK: ",
              X509_verify_cert_error_string(verify), " (server name \"", verify_name_, "\")"));
        }
        const int err = errno;
        return absl::UnavailableError(
            absl::StrCat(wait.what, ": SSL connect error: ",
                         e == SSL_ERROR_SYSCALL && err != 0 ? ErrnoText(err) : SslErrors()));
      }
      absl::StatusOr<bool> ready = WaitFor(conn.fd(), want, wait);
      if (!ready.ok()) return ready.status();
      if (!*ready) return absl::OkStatus();  // stopped
    }
  }

  // The SSL of a new connection. libcurl built a TLS context per connection and so followed
  // rotated files (the kubelet's kubelet-client-current.pem); we rebuild ours when a file
  // changed, looking at most every token_refresh. Connections already open keep their context.
  SSL* NewSsl() {
    std::lock_guard<std::mutex> lock(tls_mutex_);
    const Clock::time_point now = Clock::now();
    if (now - tls_checked_at_ >= config_.token_refresh) {
      tls_checked_at_ = now;
      std::string stamp = TlsFilesStamp(config_);
      if (stamp != tls_stamp_) {
        // Remembered even when the rebuild fails: a broken file warns once, not per connection.
        tls_stamp_ = std::move(stamp);
        if (absl::StatusOr<SslCtx> ctx = NewTlsContext(config_); ctx.ok()) {
          tls_ = *std::move(ctx);
          spdlog::info("TLS files of the API server connection changed: reloaded them");
        } else {
          spdlog::warn(
              "TLS files of the API server connection changed but cannot be used, "
              "keeping the previous ones: {}",
              std::string(ctx.status().message()));
        }
      }
    }
    // The SSL holds its own reference to the context, which may be replaced after this.
    return SSL_new(tls_.get());
  }

  absl::Status ErrorOf(const char* verb, const std::string& path, const Exchange& x) const {
    const nlohmann::json status = nlohmann::json::parse(x.body, nullptr, false);
    const bool is_status = StringField(status, "kind") == "Status";
    std::string reason = is_status ? StringField(status, "reason") : "";
    std::string message = is_status ? StringField(status, "message") : "";
    if (reason.empty()) reason = x.reason_phrase;
    if (!is_status) message = Truncate(absl::StripAsciiWhitespace(x.body), kShownBodyChars);
    std::string text = absl::StrCat(verb, " ", path, ": HTTP ", x.http_code);
    if (!reason.empty()) absl::StrAppend(&text, " ", reason);
    if (!message.empty()) absl::StrAppend(&text, ": ", message);
    return kube::HttpError(x.http_code, reason, text);
  }

  // The token for the next request, re-read from token_file when older than token_refresh. A
  // failed re-read keeps the previous token (the kubelet swaps the file atomically, so a failure
  // is transient or the old token is the best we have).
  std::string CurrentToken() {
    std::lock_guard<std::mutex> lock(token_mutex_);
    const auto now = Clock::now();
    if (!config_.token_file.empty() && now - token_read_at_ >= config_.token_refresh) {
      token_read_at_ = now;
      if (absl::StatusOr<std::string> token = ReadToken(config_.token_file); token.ok()) {
        token_ = *std::move(token);
      }
    }
    return token_;
  }

  // After a 401 with `used`: re-reads token_file; true when there is a different token to retry
  // with (possibly read meanwhile by another request).
  bool ReloadTokenAfter401(const std::string& used) {
    if (config_.token_file.empty()) return false;
    std::lock_guard<std::mutex> lock(token_mutex_);
    if (absl::StatusOr<std::string> token = ReadToken(config_.token_file); token.ok()) {
      token_ = *std::move(token);
      token_read_at_ = Clock::now();
    }
    return token_ != used;
  }

  std::unique_ptr<Connection> TakeIdle() {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    while (!idle_.empty()) {
      std::unique_ptr<Connection> conn = std::move(idle_.back());
      idle_.pop_back();
      if (conn->LooksAlive()) return conn;
    }
    return nullptr;
  }

  void GiveBackIdle(std::unique_ptr<Connection> conn) {
    std::lock_guard<std::mutex> lock(idle_mutex_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(conn));
  }

  // A running watch's eventfd, known to WakeWatches while it lives.
  class WakeableWatch {
   public:
    WakeableWatch(HttpRestClient* client, int fd) : client_(client), fd_(fd) {
      std::lock_guard<std::mutex> lock(client_->watches_mutex_);
      client_->watches_.insert(fd_);
    }
    ~WakeableWatch() {
      {
        std::lock_guard<std::mutex> lock(client_->watches_mutex_);
        client_->watches_.erase(fd_);
      }
      close(fd_);
    }
    WakeableWatch(const WakeableWatch&) = delete;
    WakeableWatch& operator=(const WakeableWatch&) = delete;

   private:
    HttpRestClient* client_;
    int fd_;
  };

  ClusterConfig config_;
  http::ServerUrl url_;
  std::string host_header_;
  std::string verify_name_;  // the name (or address) the server's certificate must carry

  std::mutex tls_mutex_;
  SslCtx tls_;                        // null for http://; guarded by tls_mutex_ after Init
  std::string tls_stamp_;             // guarded by tls_mutex_
  Clock::time_point tls_checked_at_;  // guarded by tls_mutex_

  std::mutex watches_mutex_;
  std::set<int> watches_;  // guarded by watches_mutex_

  std::mutex idle_mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by idle_mutex_

  std::mutex token_mutex_;
  std::string token_;
  Clock::time_point token_read_at_;
};

}  // namespace

std::string UrlEncode(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (const char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(byte) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xF]);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RestClient>> NewHttpRestClient(const ClusterConfig& config) {
  // A TLS connection writes through its socket with write(): a peer that closed would raise
  // SIGPIPE, which kills by default. The daemon ignores it anyway (cmd/run_command.cc).
  static const bool sigpipe_ignored = [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
    return true;
  }();
  (void)sigpipe_ignored;
  auto client = std::make_unique<HttpRestClient>(config);
  if (absl::Status s = client->Init(); !s.ok()) return s;
  return std::unique_ptr<RestClient>(std::move(client));
}

}  // namespace topodra::kube
