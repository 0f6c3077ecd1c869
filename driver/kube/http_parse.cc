#include "driver/kube/http_parse.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace topodra::kube::http {
namespace {

constexpr std::size_t kMaxChunkLineBytes = 4096;
constexpr std::size_t kMaxTrailerBytes = 64 << 10;

std::string Shown(absl::string_view s) {
  constexpr std::size_t kMax = 80;
  return absl::CEscape(s.size() <= kMax ? s : s.substr(0, kMax));
}

// RFC 9110 tchar.
bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

absl::StatusOr<ResponseHead> ParseStatusLine(absl::string_view line) {
  // "HTTP/1.1 200 OK"; the reason phrase may be empty or missing.
  ResponseHead head;
  if (line.size() < 12 || !absl::StartsWith(line, "HTTP/1.") ||
      !absl::ascii_isdigit(static_cast<unsigned char>(line[7])) || line[8] != ' ' ||
      (line.size() > 12 && line[12] != ' ')) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed HTTP status line \"", Shown(line), "\""));
  }
  head.minor_version = line[7] - '0';
  for (int i = 9; i < 12; ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(line[i]))) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed HTTP status line \"", Shown(line), "\""));
    }
    head.code = head.code * 10 + (line[i] - '0');
  }
  if (head.code < 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed HTTP status line \"", Shown(line), "\""));
  }
  if (line.size() > 13) head.reason = std::string(line.substr(13));
  return head;
}

}  // namespace

absl::StatusOr<ServerUrl> ParseServerUrl(const std::string& server) {
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
  while (!url.prefix.empty() && url.prefix.back() == '/') url.prefix.pop_back();
  if (authority.find('@') != std::string::npos ||
      url.prefix.find_first_of("?#") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("server \"", server, "\" has user info, a query or a fragment"));
  }
  const std::size_t bracket = authority.rfind(']');
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    url.host = authority.substr(0, colon);
    url.port = authority.substr(colon + 1);
    int port = 0;
    if (!absl::SimpleAtoi(url.port, &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("server \"", server, "\" has an invalid port"));
    }
  } else {
    url.host = authority;
    url.port = url.scheme == "https" ? "443" : "80";
    url.default_port = true;
  }
  if (url.host.empty() || url.host == "[]") {
    return absl::InvalidArgumentError(absl::StrCat("server \"", server, "\" has no host"));
  }
  if ((url.host.front() == '[') != (url.host.back() == ']') ||
      url.host.find_first_of(" \t\r\n/") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("server \"", server, "\" has an invalid host"));
  }
  return url;
}

std::string Unbracketed(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

absl::StatusOr<std::optional<ParsedHead>> ParseResponseHead(absl::string_view data) {
  std::size_t end = data.find("\r\n\r\n");
  std::size_t terminator = 4;
  // A server may end lines with a bare LF (RFC 9112 section 2.2 lets a recipient accept it).
  if (const std::size_t lf = data.find("\n\n"); lf != absl::string_view::npos && lf < end) {
    end = lf;
    terminator = 2;
  }
  if (end == absl::string_view::npos) {
    if (data.size() > kMaxHeadBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("HTTP response head longer than ", kMaxHeadBytes, " bytes"));
    }
    return std::nullopt;
  }
  if (end + terminator > kMaxHeadBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HTTP response head longer than ", kMaxHeadBytes, " bytes"));
  }
  std::vector<absl::string_view> lines = absl::StrSplit(data.substr(0, end), '\n');
  for (absl::string_view& line : lines) absl::ConsumeSuffix(&line, "\r");
  absl::StatusOr<ResponseHead> head = ParseStatusLine(lines[0]);
  if (!head.ok()) return head.status();
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const absl::string_view line = lines[i];
    const std::size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0) {
      // Also obsolete line folding (a line starting with a space), which RFC 9112 lets a client
      // reject.
      return absl::InvalidArgumentError(
          absl::StrCat("malformed HTTP header line \"", Shown(line), "\""));
    }
    const absl::string_view name = line.substr(0, colon);
    for (const char c : name) {
      if (!IsTokenChar(c)) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed HTTP header name \"", Shown(name), "\""));
      }
    }
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (value.find_first_of(absl::string_view("\r\0", 2)) != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed HTTP header value \"", Shown(value), "\""));
    }
    head->headers.emplace_back(absl::AsciiStrToLower(name), std::string(value));
  }
  return ParsedHead{*std::move(head), end + terminator};
}

std::vector<std::string> HeaderValues(const ResponseHead& head, absl::string_view name) {
  std::vector<std::string> values;
  for (const auto& [n, v] : head.headers) {
    if (n == name) values.push_back(v);
  }
  return values;
}

absl::StatusOr<BodyFraming> FramingOf(const ResponseHead& head) {
  BodyFraming framing;
  bool close = head.minor_version == 0;  // HTTP/1.0: no persistent connections assumed
  for (const std::string& value : HeaderValues(head, "connection")) {
    for (absl::string_view option : absl::StrSplit(value, ',')) {
      option = absl::StripAsciiWhitespace(option);
      if (absl::EqualsIgnoreCase(option, "close")) close = true;
      if (absl::EqualsIgnoreCase(option, "keep-alive") && head.minor_version == 0) close = false;
    }
  }
  if ((head.code >= 100 && head.code < 200) || head.code == 204 || head.code == 304) {
    framing.kind = BodyFraming::kNone;
    framing.keep_alive = !close;
    return framing;
  }
  const std::vector<std::string> codings = HeaderValues(head, "transfer-encoding");
  if (!codings.empty()) {
    std::vector<std::string> all;
    for (const std::string& value : codings) {
      for (absl::string_view coding : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
        all.push_back(absl::AsciiStrToLower(absl::StripAsciiWhitespace(coding)));
      }
    }
    // We ask for no compression, so chunked is the only coding an answer may have.
    if (all.size() != 1 || all[0] != "chunked") {
      return absl::InvalidArgumentError(absl::StrCat("unsupported HTTP Transfer-Encoding \"",
                                                     Shown(absl::StrJoin(codings, ", ")), "\""));
    }
    framing.kind = BodyFraming::kChunked;
    // With a Content-Length too, the message may be an attempt at request smuggling: read it
    // by its chunks and do not reuse the connection (RFC 9112 section 6.1).
    framing.keep_alive = !close && HeaderValues(head, "content-length").empty();
    return framing;
  }
  const std::vector<std::string> lengths = HeaderValues(head, "content-length");
  if (lengths.empty()) {
    framing.kind = BodyFraming::kUntilClose;
    framing.keep_alive = false;
    return framing;
  }
  std::optional<std::uint64_t> length;
  for (const std::string& value : lengths) {
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      part = absl::StripAsciiWhitespace(part);
      std::uint64_t n = 0;
      const bool digits =
          !part.empty() && part.size() <= 18 && std::all_of(part.begin(), part.end(), [](char c) {
            return absl::ascii_isdigit(static_cast<unsigned char>(c));
          });
      if (!digits || !absl::SimpleAtoi(part, &n) || (length.has_value() && *length != n)) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid HTTP Content-Length \"", Shown(value), "\""));
      }
      length = n;
    }
  }
  framing.kind = BodyFraming::kLength;
  framing.length = *length;
  framing.keep_alive = !close;
  return framing;
}

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

long WatchTimeoutSeconds(absl::string_view path) {
  const std::size_t query = path.find('?');
  if (query == absl::string_view::npos) return 0;
  for (absl::string_view param : absl::StrSplit(path.substr(query + 1), '&')) {
    if (absl::ConsumePrefix(&param, "timeoutSeconds=")) {
      long seconds = 0;
      return absl::SimpleAtoi(param, &seconds) && seconds > 0 ? seconds : 0;
    }
  }
  return 0;
}

absl::StatusOr<std::size_t> ChunkedDecoder::Feed(absl::string_view in, std::string* out) {
  std::size_t used = 0;
  while (used < in.size() && state_ != State::kDone) {
    if (state_ == State::kData) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, in.size() - used));
      out->append(in.data() + used, n);
      used += n;
      remaining_ -= n;
      if (remaining_ == 0) state_ = State::kDataEnd;
      continue;
    }
    const std::size_t lf = in.find('\n', used);
    const std::size_t take = (lf == absl::string_view::npos ? in.size() : lf) - used;
    if (line_.size() + take > kMaxChunkLineBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("HTTP chunk line longer than ", kMaxChunkLineBytes, " bytes"));
    }
    line_.append(in.data() + used, take);
    used += take;
    if (lf == absl::string_view::npos) break;
    ++used;  // the LF
    if (absl::Status s = EndOfLine(); !s.ok()) return s;
    line_.clear();
  }
  return used;
}

absl::Status ChunkedDecoder::EndOfLine() {
  absl::string_view line = line_;
  absl::ConsumeSuffix(&line, "\r");
  switch (state_) {
    case State::kSize: {
      // "1a2b;ext=value": hex digits, then optional extensions we ignore.
      const absl::string_view digits = line.substr(0, line.find_first_of("; \t"));
      if (digits.empty() || digits.size() > 15) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed HTTP chunk size \"", Shown(line), "\""));
      }
      std::uint64_t size = 0;
      for (const char c : digits) {
        const int v = absl::ascii_isdigit(static_cast<unsigned char>(c)) ? c - '0'
                      : (c >= 'a' && c <= 'f')                           ? c - 'a' + 10
                      : (c >= 'A' && c <= 'F')                           ? c - 'A' + 10
                                                                         : -1;
        if (v < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("malformed HTTP chunk size \"", Shown(line), "\""));
        }
        size = size * 16 + static_cast<std::uint64_t>(v);
      }
      remaining_ = size;
      state_ = size == 0 ? State::kTrailer : State::kData;
      return absl::OkStatus();
    }
    case State::kDataEnd:
      if (!line.empty()) {
        return absl::InvalidArgumentError("HTTP chunk data longer than its size");
      }
      state_ = State::kSize;
      return absl::OkStatus();
    case State::kTrailer:
      if (line.empty()) {
        state_ = State::kDone;
        return absl::OkStatus();
      }
      trailer_bytes_ += line_.size() + 1;
      if (trailer_bytes_ > kMaxTrailerBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("HTTP trailers longer than ", kMaxTrailerBytes, " bytes"));
      }
      return absl::OkStatus();
    case State::kData:
    case State::kDone:
      break;
  }
  return absl::InternalError("chunked decoder: line in a state without lines");
}

bool NoProxyCovers(absl::string_view no_proxy, const std::string& host) {
  const std::string name = absl::AsciiStrToLower(Unbracketed(host));
  for (absl::string_view entry : absl::StrSplit(no_proxy, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry == "*") return true;
    absl::ConsumePrefix(&entry, ".");
    std::string domain = absl::AsciiStrToLower(Unbracketed(std::string(entry)));
    if (domain.empty()) continue;
    if (name == domain || absl::EndsWith(name, absl::StrCat(".", domain))) return true;
  }
  return false;
}

}  // namespace topodra::kube::http
