// The pure parts of the daemon's HTTP/1.1 client (http_rest_client.cc): the server URL, the
// response head (status line and headers), the body's framing and chunked transfer decoding.
// Bytes in, values out, no I/O: the API server's answers are outside input, so these are
// table-tested (test/kube/http_parse_test.cc) and fuzzed (test/fuzz/http_response_fuzz.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace topodra::kube::http {

// The parts of ClusterConfig::server ("https://host:port/prefix").
struct ServerUrl {
  std::string scheme;         // "http" or "https"
  std::string host;           // as written, IPv6 brackets kept
  std::string port;           // as written, else the scheme's default
  bool default_port = false;  // the port was not written
  std::string prefix;         // path prefix without its trailing slashes, may be empty
};
absl::StatusOr<ServerUrl> ParseServerUrl(const std::string& server);
// "[::1]" -> "::1"; other hosts unchanged.
std::string Unbracketed(const std::string& host);
// Whether a NO_PROXY value (comma-separated names, "*" for all) exempts `host` (brackets
// allowed) from a proxy: an entry equal to the host, or a domain the host is in (".example.com"
// and "example.com" alike). Case-insensitive; CIDR ranges and ports are not understood.
bool NoProxyCovers(absl::string_view no_proxy, const std::string& host);

// A response's status line and headers.
struct ResponseHead {
  int minor_version = 1;  // HTTP/1.<minor>
  int code = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
};

// The longest head we accept (status line and every header): the API server's are < 1 KiB.
inline constexpr std::size_t kMaxHeadBytes = 64 << 10;

// Parses the head at the start of `data`. nullopt: incomplete, read more. Otherwise the head and
// how many bytes of `data` it took (the body starts there). An error for a malformed head or one
// longer than kMaxHeadBytes.
struct ParsedHead {
  ResponseHead head;
  std::size_t size = 0;
};
absl::StatusOr<std::optional<ParsedHead>> ParseResponseHead(absl::string_view data);

// How the body after a head ends.
struct BodyFraming {
  enum Kind { kNone, kLength, kChunked, kUntilClose } kind = kNone;
  std::uint64_t length = 0;  // kLength
  bool keep_alive = false;   // the connection can carry another request afterwards
};
// For a response to a request other than HEAD (topodra sends none). An error for a framing we
// cannot follow (conflicting Content-Length, a transfer coding other than chunked).
absl::StatusOr<BodyFraming> FramingOf(const ResponseHead& head);

// The values of the headers named `name` (lower case), in order.
std::vector<std::string> HeaderValues(const ResponseHead& head, absl::string_view name);

// The text of a Warning header value: `299 - "text"` -> text (RFC 7234 quoted-string); anything
// else as it came.
std::string WarningText(absl::string_view value);

// The query parameter timeoutSeconds of a watch path, or 0.
long WatchTimeoutSeconds(absl::string_view path);

// Incremental decoder of a chunked body (RFC 9112 section 7.1): feed it what arrives, in pieces
// of any size; it appends the data to *out and stops at the end of the body (trailers skipped).
class ChunkedDecoder {
 public:
  // Consumes from `in`; returns how many bytes it took (fewer than in.size() only once done()).
  absl::StatusOr<std::size_t> Feed(absl::string_view in, std::string* out);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  absl::Status EndOfLine();  // a complete line_ in state kSize / kDataEnd / kTrailer
  State state_ = State::kSize;
  std::string line_;  // the current size, data-end or trailer line, without its LF
  std::uint64_t remaining_ = 0;
  std::size_t trailer_bytes_ = 0;
};

}  // namespace topodra::kube::http
