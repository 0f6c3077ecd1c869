#include "driver/metrics/http_request.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace topodra::metrics {
namespace {

// Errors quote what they reject, but never more than this much of a stranger's bytes.
constexpr size_t kQuoted = 40;

std::string Quote(std::string_view bytes) {
  const bool cut = bytes.size() > kQuoted;
  return absl::StrCat(
      "\"", absl::CEscape(absl::string_view(bytes.data(), std::min(bytes.size(), kQuoted))),
      cut ? "...\"" : "\"");
}

// RFC 9110 section 5.6.2.
bool IsTokenChar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return IsTokenChar(static_cast<unsigned char>(c));
  });
}

// A field value: visible characters, space, tab and obs-text; no other control character.
bool IsFieldValue(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == '\t' || (c >= 0x20 && c != 0x7f);
  });
}

HeadParse Bad(std::string why) {
  HeadParse p;
  p.kind = HeadParse::kBad;
  p.error = std::move(why);
  return p;
}

// "GET /healthz HTTP/1.1" (without its CRLF).
HeadParse ParseRequestLine(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Bad(absl::StrCat("request line ", Quote(line),
                            " is not \"<method> <target> HTTP/1.x\" with single spaces"));
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(method)) return Bad(absl::StrCat("method ", Quote(method), " is not a token"));
  if (target.empty() || target.front() != '/' ||
      !std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return Bad(absl::StrCat("target ", Quote(target), " is not an absolute path"));
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return Bad(absl::StrCat("version ", Quote(version), " is not HTTP/1.0 or HTTP/1.1"));
  }
  HeadParse p;
  p.kind = HeadParse::kComplete;
  p.head.method = std::string(method);
  p.head.path = std::string(target.substr(0, target.find('?')));
  return p;
}

// "Name: value" (without its CRLF).
std::string FieldLineError(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') {
    return absl::StrCat("header line ", Quote(line), " is folded (obsolete line folding)");
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !IsToken(line.substr(0, colon))) {
    return absl::StrCat("header line ", Quote(line), " is not \"<name>: <value>\"");
  }
  if (!IsFieldValue(line.substr(colon + 1))) {
    return absl::StrCat("header line ", Quote(line), " has a control character in its value");
  }
  return "";
}

}  // namespace

HeadParse ParseRequestHead(std::string_view bytes, size_t max_head_bytes) {
  const std::string_view seen = bytes.substr(0, max_head_bytes);
  HeadParse request;
  size_t at = 0;
  for (bool first = true;; first = false) {
    const size_t lf = seen.find('\n', at);
    if (lf == std::string_view::npos) break;
    if (lf == at || seen[lf - 1] != '\r') {
      return Bad(
          absl::StrCat("line ", Quote(seen.substr(at, lf + 1 - at)), " does not end in CRLF"));
    }
    const std::string_view line = seen.substr(at, lf - 1 - at);
    if (line.find('\r') != std::string_view::npos || line.find('\0') != std::string_view::npos) {
      return Bad(absl::StrCat("line ", Quote(line), " has a bare CR or a NUL"));
    }
    at = lf + 1;
    if (first) {
      request = ParseRequestLine(line);
      if (request.kind == HeadParse::kBad) return request;
      continue;
    }
    if (line.empty()) return request;  // the blank line: the head is complete
    if (std::string error = FieldLineError(line); !error.empty()) return Bad(std::move(error));
  }
  if (bytes.size() < max_head_bytes) return HeadParse{};
  HeadParse p;
  p.kind = HeadParse::kTooLarge;
  p.error = absl::StrCat("request head is longer than ", max_head_bytes, " bytes");
  return p;
}

}  // namespace topodra::metrics
