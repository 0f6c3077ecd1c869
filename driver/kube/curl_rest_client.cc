// RestClient over libcurl. Every call builds its own easy handle and drives it through its own
// multi handle, polling at most kPollInterval at a time so a watch notices its stop flag promptly
// (curl_easy_perform may sit in poll for a second between progress callbacks); WakeWatches cuts
// that wait short with curl_multi_wakeup. Only the daemon executable (topodra-daemon) links this,
// so the other CLI commands never load libcurl.
#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <exception>
#include <fstream>
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
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/json_text.h"
#include "driver/kube/rest_client.h"

namespace topodra::kube {
namespace {

// strerror is not thread-safe.
std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

constexpr std::size_t kMaxBodyBytes = 256 << 20;      // a large list response
constexpr std::size_t kMaxErrorBodyBytes = 1 << 20;   // non-2xx bodies (Status objects)
constexpr std::size_t kMaxWatchLineBytes = 16 << 20;  // one watch event
constexpr std::size_t kMaxTokenBytes = 1 << 20;
constexpr std::size_t kShownBodyChars = 200;
constexpr long kPollIntervalMs = 50;
// A watch has no overall timeout; it is abandoned as dead when it delivers less than 1 byte/s for
// this long: twice the server-side timeoutSeconds (at least a minute), or, without one, just over
// the API server's longest request timeout (2 x the default 30 min min-request-timeout).
constexpr long kMinWatchSilenceS = 60;
constexpr long kDefaultWatchSilenceS = 3660;

using EasyHandle = std::unique_ptr<CURL, decltype(&curl_easy_cleanup)>;
using HeaderList = std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)>;

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

// The query parameter timeoutSeconds of a watch path, or 0.
long WatchTimeoutSeconds(const std::string& path) {
  const std::size_t query = path.find('?');
  if (query == std::string::npos) return 0;
  absl::string_view rest = absl::string_view(path).substr(query + 1);
  while (!rest.empty()) {
    const std::size_t amp = rest.find('&');
    absl::string_view param = rest.substr(0, amp);
    if (absl::ConsumePrefix(&param, "timeoutSeconds=")) {
      long seconds = 0;
      return absl::SimpleAtoi(param, &seconds) && seconds > 0 ? seconds : 0;
    }
    if (amp == absl::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return 0;
}

absl::Status CurlError(const std::string& what, CURLcode code, const char* errbuf) {
  absl::StatusCode status_code = absl::StatusCode::kUnavailable;
  if (code == CURLE_OPERATION_TIMEDOUT) status_code = absl::StatusCode::kDeadlineExceeded;
  if (code == CURLE_SSL_CERTPROBLEM || code == CURLE_SSL_CACERT_BADFILE ||
      code == CURLE_SSL_CRL_BADFILE) {
    status_code = absl::StatusCode::kFailedPrecondition;  // our configuration, not the network
  }
  if (code == CURLE_OUT_OF_MEMORY || code == CURLE_BAD_FUNCTION_ARGUMENT ||
      code == CURLE_UNKNOWN_OPTION || code == CURLE_NOT_BUILT_IN) {
    status_code = absl::StatusCode::kInternal;
  }
  std::string message = absl::StrCat(what, ": ", curl_easy_strerror(code));
  if (errbuf != nullptr && errbuf[0] != '\0') absl::StrAppend(&message, ": ", errbuf);
  return absl::Status(status_code, message);
}

// curl_global_init, once per process and thread-safe (the call itself is not, before libcurl
// 7.84); later calls return the same result. Never cleaned up: handles may outlive any one client.
absl::Status GlobalInit() {
  static const absl::Status* const status = [] {
    const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
    return new absl::Status(
        init == CURLE_OK
            ? absl::OkStatus()
            : absl::InternalError(absl::StrCat("curl_global_init: ", curl_easy_strerror(init))));
  }();
  return *status;
}

// The text of a Warning header value: `299 - "text"` -> text (RFC 7234 quoted-string).
std::string WarningText(absl::string_view value) {
  const std::size_t open = value.find('"');
  if (open == absl::string_view::npos) return std::string(value);
  std::string text;
  for (std::size_t i = open + 1; i < value.size(); ++i) {
    if (value[i] == '\\' && i + 1 < value.size()) {
      text.push_back(value[++i]);
    } else if (value[i] == '"') {
      return text;
    } else {
      text.push_back(value[i]);
    }
  }
  return std::string(value);  // unterminated: keep it as it came
}

// State of one transfer, shared with the libcurl callbacks.
struct Transfer {
  const WatchHandler* on_event = nullptr;  // set for a watch
  const std::atomic<bool>* stop = nullptr;
  std::chrono::milliseconds timeout{0};  // > 0: shorter than the client's (RequestLimits)
  std::string what;                      // "GET /path" for messages

  long http_code = 0;
  std::string reason_phrase;
  std::vector<std::string> warnings;
  std::string body;  // the response body, or for a 2xx watch the unfinished line
  absl::Status stream_error;
  bool stopped = false;  // the handler or the stop flag ended the watch

  bool Success() const { return http_code >= 200 && http_code <= 299; }
  bool StopRequested() const { return stop != nullptr && stop->load(); }

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

  // Appends received bytes; false aborts the transfer.
  bool Receive(const char* data, std::size_t size) {
    if (on_event == nullptr || !Success()) {
      const std::size_t limit =
          on_event == nullptr && Success() ? kMaxBodyBytes : kMaxErrorBodyBytes;
      if (body.size() + size > limit) {
        if (!Success()) return true;  // an error body: the start is enough to report
        stream_error = absl::ResourceExhaustedError(
            absl::StrCat(what, ": response body larger than ", limit, " bytes"));
        return false;
      }
      body.append(data, size);
      return true;
    }
    std::size_t scan = body.size();
    body.append(data, size);
    std::size_t start = 0;
    for (std::size_t nl; (nl = body.find('\n', scan)) != std::string::npos; scan = start) {
      if (!DeliverLine(absl::string_view(body).substr(start, nl - start))) return false;
      start = nl + 1;
    }
    body.erase(0, start);
    if (body.size() > kMaxWatchLineBytes) {
      stream_error = absl::ResourceExhaustedError(
          absl::StrCat("watch ", what, ": event line longer than ", kMaxWatchLineBytes, " bytes"));
      return false;
    }
    return true;
  }
};

void OnHeaderLine(Transfer* t, absl::string_view raw) {
  const absl::string_view line = absl::StripTrailingAsciiWhitespace(raw);
  if (absl::StartsWith(line, "HTTP/")) {  // a new response (after 100 Continue, say)
    t->warnings.clear();
    t->reason_phrase.clear();
    // "HTTP/1.1 404 Not Found"; HTTP/2 has no reason phrase. The body callbacks need the code
    // before the transfer ends.
    const std::size_t sp1 = line.find(' ');
    const std::size_t sp2 = sp1 == absl::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 != absl::string_view::npos &&
        !absl::SimpleAtoi(
            line.substr(sp1 + 1, sp2 == absl::string_view::npos ? sp2 : sp2 - sp1 - 1),
            &t->http_code)) {
      t->http_code = 0;
    }
    if (sp2 != absl::string_view::npos) t->reason_phrase = std::string(line.substr(sp2 + 1));
  } else if (line.size() > 8 && absl::StartsWithIgnoreCase(line, "warning:")) {
    t->warnings.push_back(WarningText(absl::StripAsciiWhitespace(line.substr(8))));
  }
}

// libcurl callbacks: nothing may unwind through libcurl's C frames (std::bad_alloc included).
std::size_t OnBody(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  try {
    return t->Receive(data, size * count) ? size * count : 0;
  } catch (...) {
    t->stream_error = absl::ResourceExhaustedError(absl::StrCat(t->what, ": out of memory"));
    return 0;
  }
}

std::size_t OnHeader(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  try {
    OnHeaderLine(t, absl::string_view(data, size * count));
    return size * count;
  } catch (...) {
    t->stream_error = absl::ResourceExhaustedError(absl::StrCat(t->what, ": out of memory"));
    return 0;
  }
}

// The parts of ClusterConfig::server, for tls-server-name.
struct ServerUrl {
  std::string scheme, host, port, prefix;  // host keeps IPv6 brackets
};

absl::StatusOr<ServerUrl> ParseServer(const std::string& server) {
  ServerUrl url;
  const std::size_t scheme_end = server.find("://");
  if (scheme_end == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("server \"", server, "\" is not a URL"));
  }
  url.scheme = absl::AsciiStrToLower(server.substr(0, scheme_end));
  if (url.scheme != "https" && url.scheme != "http") {
    return absl::InvalidArgumentError(
        absl::StrCat("server \"", server, "\" is not an http(s) URL"));
  }
  const std::size_t authority_start = scheme_end + 3;
  const std::size_t slash = server.find('/', authority_start);
  const std::string authority = server.substr(authority_start, slash - authority_start);
  url.prefix = slash == std::string::npos ? "" : server.substr(slash);
  const std::size_t bracket = authority.rfind(']');
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    url.host = authority.substr(0, colon);
    url.port = authority.substr(colon + 1);
  } else {
    url.host = authority;
    url.port = url.scheme == "https" ? "443" : "80";
  }
  if (url.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("server \"", server, "\" has no host"));
  }
  return url;
}

class CurlRestClient : public RestClient {
 public:
  explicit CurlRestClient(ClusterConfig config) : config_(std::move(config)) {}
  ~CurlRestClient() override {
    // Their connections may hold TLS sessions of the share: gone first.
    for (CURLM* m : idle_multis_) curl_multi_cleanup(m);
    if (share_ != nullptr) curl_share_cleanup(share_);
  }
  CurlRestClient(const CurlRestClient&) = delete;
  CurlRestClient& operator=(const CurlRestClient&) = delete;

  absl::Status Init() {
    // Requests share TLS sessions and DNS. Not the connection cache: libcurl does not support
    // sharing connections between concurrent threads (CURLSHOPT_SHARE, "It is not supported to
    // share connections between multiple concurrent threads"; a known concurrency bug), and
    // claim GETs and slice writes run several at a time. Kept-alive connections live in the
    // multi handles of idle_multis_ instead, one request at a time each.
    share_ = curl_share_init();
    if (share_ != nullptr) {
      bool ok =
          curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, &LockShare) == CURLSHE_OK &&
          curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, &UnlockShare) == CURLSHE_OK &&
          curl_share_setopt(share_, CURLSHOPT_USERDATA, static_cast<void*>(this)) == CURLSHE_OK;
      for (curl_lock_data d : {CURL_LOCK_DATA_SSL_SESSION, CURL_LOCK_DATA_DNS}) {
        ok = ok && curl_share_setopt(share_, CURLSHOPT_SHARE, d) == CURLSHE_OK;
      }
      if (!ok) {
        curl_share_cleanup(share_);
        share_ = nullptr;  // each request on its own connection, as before
      }
    }
    while (!config_.server.empty() && config_.server.back() == '/') config_.server.pop_back();
    absl::StatusOr<ServerUrl> url = ParseServer(config_.server);
    if (!url.ok()) return url.status();
    base_url_ = config_.server;
    if (!config_.tls_server_name.empty()) {
      // libcurl has no option for the TLS name alone: address the server by that name (so SNI
      // and certificate verification use it), connect to the real host instead and send the
      // real host in the Host header.
      std::string name = config_.tls_server_name;
      if (name.find(':') != std::string::npos && name.front() != '[') name = "[" + name + "]";
      base_url_ = absl::StrCat(url->scheme, "://", name, ":", url->port, url->prefix);
      connect_to_ = absl::StrCat(name, ":", url->port, ":", url->host, ":", url->port);
      host_header_ = absl::StrCat("Host: ", url->host, ":", url->port);
    }
    for (const auto& [path, what] : {std::pair{&config_.ca_file, "CA file"},
                                     {&config_.client_cert_file, "client certificate file"},
                                     {&config_.client_key_file, "client key file"}}) {
      if (absl::Status s = CheckReadable(*path, what); !s.ok()) return s;
    }
    token_ = config_.token;
    if (!config_.token_file.empty()) {
      absl::StatusOr<std::string> token = ReadToken(config_.token_file);
      if (!token.ok()) return token.status();
      token_ = *std::move(token);
      token_read_at_ = std::chrono::steady_clock::now();
    }
    return absl::OkStatus();
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
    // The multi handle's own wake-up pipe: its curl_multi_poll returns at once, and a wake-up
    // that comes before the poll is kept for it, so none is lost between the flag and the poll.
    for (CURLM* multi : watches_) curl_multi_wakeup(multi);
  }

  absl::Status Watch(const std::string& path, const WatchHandler& on_event,
                     const std::atomic<bool>* stop) override {
    Transfer t;
    t.on_event = &on_event;
    t.stop = stop;
    if (absl::Status s = Run("GET", path, "", t); !s.ok()) return s;
    if (t.stopped) return absl::OkStatus();
    if (!t.Success()) return HttpError("GET", path, t);
    // The server ended the stream; a last line without its newline still counts.
    if (!t.DeliverLine(t.body) && !t.stopped) return t.stream_error;
    return absl::OkStatus();
  }

 private:
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
    Transfer t;
    t.stop = limits.cancelled;
    t.timeout = limits.timeout;
    if (absl::Status s = Run(verb, path, payload, t); !s.ok()) return s;
    if (t.stopped) {
      return absl::CancelledError(
          absl::StrCat(verb, " ", path, ": abandoned: the caller no longer waits for it"));
    }
    if (!t.Success()) return HttpError(verb, path, t);
    Response response;
    response.http_code = static_cast<int>(t.http_code);
    response.warnings = std::move(t.warnings);
    if (!absl::StripAsciiWhitespace(t.body).empty()) {
      response.body = nlohmann::json::parse(t.body, nullptr, false);
      if (response.body.is_discarded()) {
        return absl::InternalError(
            absl::StrCat(verb, " ", path, ": HTTP ", t.http_code, " response is not JSON: \"",
                         absl::CEscape(Truncate(t.body, kShownBodyChars)), "\""));
      }
    }
    return response;
  }

  // Runs the transfer, once more with a re-read token after a 401. Returns transport and stream
  // errors; HTTP errors are left in t.http_code for the caller.
  absl::Status Run(const char* verb, const std::string& path, const std::string& payload,
                   Transfer& t) {
    const WatchHandler* on_event = t.on_event;
    const std::atomic<bool>* stop = t.stop;
    const std::chrono::milliseconds timeout = t.timeout;
    const auto start = std::chrono::steady_clock::now();
    for (int attempt = 0;; ++attempt) {
      t = Transfer();
      t.on_event = on_event;
      t.stop = stop;
      // A retry after a 401 has what is left of a caller's limit, at least 1 ms (0 is none).
      t.timeout = timeout.count() > 0
                      ? std::max(std::chrono::milliseconds(1),
                                 timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::steady_clock::now() - start))
                      : timeout;
      t.what = absl::StrCat(verb, " ", path);
      const std::string token = CurrentToken();
      if (absl::Status s = RunOnce(verb, path, payload, token, t); !s.ok()) return s;
      if (t.http_code != 401 || attempt > 0 || !ReloadTokenAfter401(token)) return t.stream_error;
    }
  }

  absl::Status RunOnce(const char* verb, const std::string& path, const std::string& payload,
                       const std::string& token, Transfer& t) {
    const bool watch = t.on_event != nullptr;
    EasyHandle easy(curl_easy_init(), curl_easy_cleanup);
    // Short requests reuse an idle multi handle and the kept-alive connection in its cache (a
    // claim GET skips the TCP and TLS handshakes, most of its cost); watches hold theirs for
    // minutes and get a fresh one.
    PooledMulti multi(this, watch ? curl_multi_init() : TakeMulti(), !watch);
    if (easy == nullptr || multi.get() == nullptr) {
      return absl::InternalError(absl::StrCat(t.what, ": cannot create a curl handle"));
    }
    CURL* h = easy.get();
    char errbuf[CURL_ERROR_SIZE] = {};
    HeaderList headers(nullptr, curl_slist_free_all);
    auto add_header = [this, &headers](const std::string& line) {
      curl_slist* next = curl_slist_append(headers.get(), line.c_str());
      if (next != nullptr) {
        (void)headers.release();
        headers.reset(next);
      }
      return next != nullptr;
    };
    bool ok = add_header("Accept: application/json") && add_header("Expect:");
    if (!payload.empty()) ok = ok && add_header("Content-Type: application/json");
    if (!token.empty()) ok = ok && add_header("Authorization: Bearer " + token);
    if (!host_header_.empty()) ok = ok && add_header(host_header_);
    HeaderList connect_to(nullptr, curl_slist_free_all);
    if (!connect_to_.empty()) connect_to.reset(curl_slist_append(nullptr, connect_to_.c_str()));
    if (!ok || (!connect_to_.empty() && connect_to == nullptr)) {
      return absl::InternalError(absl::StrCat(t.what, ": out of memory building headers"));
    }

    const std::string url = base_url_ + path;
    CURLcode rc = CURLE_OK;
    auto set = [this, &rc, h](CURLoption option, auto value) {
      if (rc == CURLE_OK) rc = curl_easy_setopt(h, option, value);
    };
    set(CURLOPT_URL, url.c_str());
    set(CURLOPT_PROTOCOLS_STR, "http,https");
    set(CURLOPT_NOSIGNAL, 1L);
    set(CURLOPT_ERRORBUFFER, errbuf);
    set(CURLOPT_USERAGENT, "topodra/0.1");
    set(CURLOPT_HTTPHEADER, headers.get());
    set(CURLOPT_ACCEPT_ENCODING, "");
    set(CURLOPT_HEADERFUNCTION, &OnHeader);
    set(CURLOPT_HEADERDATA, static_cast<void*>(&t));
    set(CURLOPT_WRITEFUNCTION, &OnBody);
    set(CURLOPT_WRITEDATA, static_cast<void*>(&t));
    const std::chrono::milliseconds timeout =
        t.timeout.count() > 0 ? std::min(t.timeout, config_.timeout) : config_.timeout;
    set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
    if (watch) {
      const long server_timeout = WatchTimeoutSeconds(path);
      set(CURLOPT_LOW_SPEED_LIMIT, 1L);
      set(CURLOPT_LOW_SPEED_TIME, server_timeout > 0
                                      ? std::max(2 * server_timeout, kMinWatchSilenceS)
                                      : kDefaultWatchSilenceS);
      set(CURLOPT_TCP_KEEPALIVE, 1L);
      set(CURLOPT_TCP_KEEPIDLE, 30L);
      set(CURLOPT_TCP_KEEPINTVL, 10L);
    } else {
      set(CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
    }
    if (std::string(verb) != "GET") set(CURLOPT_CUSTOMREQUEST, verb);
    const bool sends_body =
        !payload.empty() || std::string(verb) == "POST" || std::string(verb) == "PUT";
    if (sends_body) {
      set(CURLOPT_POSTFIELDS, payload.c_str());
      set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
    }
    if (share_ != nullptr) set(CURLOPT_SHARE, share_);
    SetTls(set, connect_to.get());
    if (rc != CURLE_OK) {
      return CurlError(absl::StrCat(t.what, ": setting up curl"), rc, errbuf);
    }

    if (curl_multi_add_handle(multi.get(), h) != CURLM_OK) {
      return absl::InternalError(absl::StrCat(t.what, ": curl_multi_add_handle failed"));
    }
    // Declared after `multi`, so it is gone from watches_ before the handle is cleaned up.
    const WakeableWatch wakeable(this, watch ? multi.get() : nullptr);
    CURLcode result = CURLE_OK;
    for (int running = 1; running != 0;) {
      if (t.StopRequested()) {
        t.stopped = true;
        break;
      }
      CURLMcode mc = curl_multi_perform(multi.get(), &running);
      if (mc == CURLM_OK && running != 0) {
        mc = curl_multi_poll(multi.get(), nullptr, 0, kPollIntervalMs, nullptr);
      }
      if (mc != CURLM_OK) {
        curl_multi_remove_handle(multi.get(), h);
        return absl::InternalError(absl::StrCat(t.what, ": ", curl_multi_strerror(mc)));
      }
    }
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi.get(), &queued)) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == h) result = msg->data.result;
    }
    curl_multi_remove_handle(multi.get(), h);
    if (t.stopped || !t.stream_error.ok()) return absl::OkStatus();  // the caller looks at t
    if (result != CURLE_OK) return CurlError(t.what, result, errbuf);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &t.http_code);
    return absl::OkStatus();
  }

  template <typename Set>
  void SetTls(Set& set, curl_slist* connect_to) {
    set(CURLOPT_SSLVERSION, static_cast<long>(CURL_SSLVERSION_TLSv1_2));
    if (connect_to != nullptr) set(CURLOPT_CONNECT_TO, connect_to);
    // A configured CA is the only one trusted, as in client-go.
    if (!config_.ca_data.empty()) {
      curl_blob blob{const_cast<char*>(config_.ca_data.data()), config_.ca_data.size(),
                     CURL_BLOB_COPY};
      set(CURLOPT_CAINFO, static_cast<const char*>(nullptr));
      set(CURLOPT_CAPATH, static_cast<const char*>(nullptr));
      set(CURLOPT_CAINFO_BLOB, &blob);
    } else if (!config_.ca_file.empty()) {
      set(CURLOPT_CAINFO, config_.ca_file.c_str());
      set(CURLOPT_CAPATH, static_cast<const char*>(nullptr));
    }
    if (config_.insecure_skip_tls_verify) {
      set(CURLOPT_SSL_VERIFYPEER, 0L);
      set(CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (!config_.client_cert_data.empty()) {
      curl_blob blob{const_cast<char*>(config_.client_cert_data.data()),
                     config_.client_cert_data.size(), CURL_BLOB_COPY};
      set(CURLOPT_SSLCERT_BLOB, &blob);
      set(CURLOPT_SSLCERTTYPE, "PEM");
    } else if (!config_.client_cert_file.empty()) {
      set(CURLOPT_SSLCERT, config_.client_cert_file.c_str());
      set(CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (!config_.client_key_data.empty()) {
      curl_blob blob{const_cast<char*>(config_.client_key_data.data()),
                     config_.client_key_data.size(), CURL_BLOB_COPY};
      set(CURLOPT_SSLKEY_BLOB, &blob);
      set(CURLOPT_SSLKEYTYPE, "PEM");
    } else if (!config_.client_key_file.empty()) {
      set(CURLOPT_SSLKEY, config_.client_key_file.c_str());
      set(CURLOPT_SSLKEYTYPE, "PEM");
    }
  }

  absl::Status HttpError(const char* verb, const std::string& path, const Transfer& t) const {
    const nlohmann::json status = nlohmann::json::parse(t.body, nullptr, false);
    const bool is_status = StringField(status, "kind") == "Status";
    std::string reason = is_status ? StringField(status, "reason") : "";
    std::string message = is_status ? StringField(status, "message") : "";
    if (reason.empty()) reason = t.reason_phrase;
    if (!is_status) message = Truncate(absl::StripAsciiWhitespace(t.body), kShownBodyChars);
    std::string text = absl::StrCat(verb, " ", path, ": HTTP ", t.http_code);
    if (!reason.empty()) absl::StrAppend(&text, " ", reason);
    if (!message.empty()) absl::StrAppend(&text, ": ", message);
    return kube::HttpError(static_cast<int>(t.http_code), reason, text);
  }

  // The token for the next request, re-read from token_file when older than token_refresh. A
  // failed re-read keeps the previous token (the kubelet swaps the file atomically, so a failure
  // is transient or the old token is the best we have).
  std::string CurrentToken() {
    std::lock_guard<std::mutex> lock(token_mutex_);
    const auto now = std::chrono::steady_clock::now();
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
      token_read_at_ = std::chrono::steady_clock::now();
    }
    return token_ != used;
  }

  // A running watch's multi handle, known to WakeWatches while it lives.
  class WakeableWatch {
   public:
    WakeableWatch(CurlRestClient* client, CURLM* multi) : client_(client), multi_(multi) {
      if (multi_ == nullptr) return;
      std::lock_guard<std::mutex> lock(client_->watches_mutex_);
      client_->watches_.insert(multi_);
    }
    ~WakeableWatch() {
      if (multi_ == nullptr) return;
      std::lock_guard<std::mutex> lock(client_->watches_mutex_);
      client_->watches_.erase(multi_);
    }
    WakeableWatch(const WakeableWatch&) = delete;
    WakeableWatch& operator=(const WakeableWatch&) = delete;

   private:
    CurlRestClient* client_;
    CURLM* multi_;
  };

  std::mutex watches_mutex_;
  std::set<CURLM*> watches_;  // guarded by watches_mutex_

  // A multi handle used by one request at a time, given back to the pool afterwards (or cleaned
  // up, for watches). Declared after the easy handle, so it goes first: every path removes the
  // easy handle from it before returning.
  class PooledMulti {
   public:
    PooledMulti(CurlRestClient* client, CURLM* multi, bool pooled)
        : client_(client), multi_(multi), pooled_(pooled) {}
    ~PooledMulti() {
      if (multi_ == nullptr) return;
      if (pooled_) {
        client_->GiveBackMulti(multi_);
      } else {
        curl_multi_cleanup(multi_);
      }
    }
    PooledMulti(const PooledMulti&) = delete;
    PooledMulti& operator=(const PooledMulti&) = delete;
    CURLM* get() const { return multi_; }

   private:
    CurlRestClient* client_;
    CURLM* multi_;
    bool pooled_;
  };

  // At most this many idle handles (and so kept-alive connections) are kept: enough for the
  // claim fetches and slice writes that run at once.
  static constexpr std::size_t kMaxIdleMultis = 16;
  CURLM* TakeMulti() {
    {
      std::lock_guard<std::mutex> lock(idle_mutex_);
      if (!idle_multis_.empty()) {
        CURLM* m = idle_multis_.back();
        idle_multis_.pop_back();
        return m;
      }
    }
    return curl_multi_init();
  }
  void GiveBackMulti(CURLM* m) {
    {
      std::lock_guard<std::mutex> lock(idle_mutex_);
      if (idle_multis_.size() < kMaxIdleMultis) {
        idle_multis_.push_back(m);
        return;
      }
    }
    curl_multi_cleanup(m);
  }
  std::mutex idle_mutex_;
  std::vector<CURLM*> idle_multis_;  // guarded by idle_mutex_

  ClusterConfig config_;
  std::string base_url_;     // server, or addressed by tls_server_name
  std::string connect_to_;   // CURLOPT_CONNECT_TO entry for tls_server_name
  std::string host_header_;  // "Host: <real host>:<port>" for tls_server_name
  std::mutex token_mutex_;
  CURLSH* share_ = nullptr;
  std::mutex share_mutexes_[CURL_LOCK_DATA_LAST];

  static void LockShare(CURL*, curl_lock_data data, curl_lock_access, void* self) {
    static_cast<CurlRestClient*>(self)->share_mutexes_[data].lock();
  }
  static void UnlockShare(CURL*, curl_lock_data data, void* self) {
    static_cast<CurlRestClient*>(self)->share_mutexes_[data].unlock();
  }
  std::string token_;
  std::chrono::steady_clock::time_point token_read_at_;
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

absl::StatusOr<std::unique_ptr<RestClient>> NewCurlRestClient(const ClusterConfig& config) {
  if (absl::Status s = GlobalInit(); !s.ok()) return s;
  auto client = std::make_unique<CurlRestClient>(config);
  if (absl::Status s = client->Init(); !s.ok()) return s;
  return std::unique_ptr<RestClient>(std::move(client));
}

}  // namespace topodra::kube
