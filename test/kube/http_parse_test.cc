#include "driver/kube/http_parse.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace topodra::kube::http {
namespace {

struct UrlCase {
  std::string server;
  std::string error;  // empty: parses
  std::string scheme, host, port, prefix;
  bool default_port = false;
};

TEST(HttpParseTest, ServerUrls) {
  const std::vector<UrlCase> cases = {
      {"https://10.0.0.1:6443", "", "https", "10.0.0.1", "6443", "", false},
      {"https://kube.example", "", "https", "kube.example", "443", "", true},
      {"HTTP://k", "", "http", "k", "80", "", true},
      {"https://[fd00::1]:443/k8s/c1/", "", "https", "[fd00::1]", "443", "/k8s/c1", false},
      {"https://[fd00::1]", "", "https", "[fd00::1]", "443", "", true},
      {"ftp://k:21", "server \"ftp://k:21\" is not an http(s) URL", "", "", "", ""},
      {"", "server \"\" is not a URL", "", "", "", ""},
      {"https://:443", "server \"https://:443\" has no host", "", "", "", ""},
      {"https://k:0", "server \"https://k:0\" has an invalid port", "", "", "", ""},
      {"https://k:x", "server \"https://k:x\" has an invalid port", "", "", "", ""},
      {"https://k:65536", "server \"https://k:65536\" has an invalid port", "", "", "", ""},
      {"https://u@k", "server \"https://u@k\" has user info, a query or a fragment", "", "", "",
       ""},
      {"https://k/p?q", "server \"https://k/p?q\" has user info, a query or a fragment", "", "", "",
       ""},
      {"https://[fd00::1", "server \"https://[fd00::1\" has an invalid host", "", "", "", ""},
  };
  for (const UrlCase& c : cases) {
    SCOPED_TRACE(c.server);
    absl::StatusOr<ServerUrl> url = ParseServerUrl(c.server);
    if (!c.error.empty()) {
      EXPECT_EQ(url.status().message(), c.error);
      continue;
    }
    ASSERT_TRUE(url.ok()) << url.status();
    EXPECT_EQ(url->scheme, c.scheme);
    EXPECT_EQ(url->host, c.host);
    EXPECT_EQ(url->port, c.port);
    EXPECT_EQ(url->prefix, c.prefix);
    EXPECT_EQ(url->default_port, c.default_port);
  }
  EXPECT_EQ(Unbracketed("[::1]"), "::1");
  EXPECT_EQ(Unbracketed("k"), "k");
}

TEST(HttpParseTest, NoProxyCovers) {
  struct Case {
    const char* no_proxy;
    const char* host;
    bool covered;
  };
  const std::vector<Case> cases = {
      {"", "10.0.0.1", false},
      {"*", "10.0.0.1", true},
      {"10.0.0.1", "10.0.0.1", true},
      {"10.0.0.2, 10.0.0.1", "10.0.0.1", true},
      {"10.0.0.10", "10.0.0.1", false},
      {"10.0.0.0/8", "10.0.0.1", false},  // CIDR is not understood
      {"example.com", "api.example.com", true},
      {" .example.com ", "api.example.com", true},
      {"Example.COM", "api.example.com", true},
      {"example.com", "api.notexample.com", false},
      {"api.example.com", "example.com", false},
      {"::1", "[::1]", true},
      {"[::1]", "[::1]", true},
      {",,", "kube", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(NoProxyCovers(c.no_proxy, c.host), c.covered)
        << "NO_PROXY \"" << c.no_proxy << "\", host \"" << c.host << "\"";
  }
}

TEST(HttpParseTest, HeadIsIncompleteUntilTheBlankLine) {
  for (const std::string& partial : {std::string(""), std::string("HTTP/1.1 200 OK\r\n"),
                                     std::string("HTTP/1.1 200 OK\r\nA: b\r\n\r")}) {
    absl::StatusOr<std::optional<ParsedHead>> head = ParseResponseHead(partial);
    ASSERT_TRUE(head.ok()) << head.status();
    EXPECT_FALSE(head->has_value()) << partial;
  }
  EXPECT_EQ(ParseResponseHead(std::string(kMaxHeadBytes + 1, 'x')).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(HttpParseTest, ParsesStatusLineAndHeaders) {
  const std::string text =
      "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nWarning:  299 - \"a\" \r\n"
      "warning: 299 - \"b\"\r\nContent-Length: 2\r\n\r\n{}";
  absl::StatusOr<std::optional<ParsedHead>> parsed = ParseResponseHead(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->has_value());
  const ParsedHead& p = **parsed;
  EXPECT_EQ(p.size, text.size() - 2);
  EXPECT_EQ(p.head.code, 201);
  EXPECT_EQ(p.head.reason, "Created");
  EXPECT_EQ(p.head.minor_version, 1);
  EXPECT_EQ(HeaderValues(p.head, "warning"),
            (std::vector<std::string>{"299 - \"a\"", "299 - \"b\""}));
  EXPECT_EQ(HeaderValues(p.head, "content-type"), std::vector<std::string>{"application/json"});

  // Bare LF line ends, no reason phrase, HTTP/1.0.
  parsed = ParseResponseHead("HTTP/1.0 404\nA: 1\n\nrest");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->has_value());
  EXPECT_EQ((*parsed)->head.code, 404);
  EXPECT_EQ((*parsed)->head.reason, "");
  EXPECT_EQ((*parsed)->head.minor_version, 0);
  EXPECT_EQ((*parsed)->size, 19u);
}

TEST(HttpParseTest, MalformedHeadsAreErrors) {
  const std::vector<std::string> bad = {
      "HTTP/2 200 OK\r\n\r\n",
      "HTTP/1.1 20 OK\r\n\r\n",
      "HTTP/1.1 2000 OK\r\n\r\n",
      "HTTP/1.1 abc OK\r\n\r\n",
      "HTTP/1.1 099 x\r\n\r\n",
      "ICY 200 OK\r\n\r\n",
      "HTTP/1.1 200 OK\r\nNoColon\r\n\r\n",
      "HTTP/1.1 200 OK\r\n: v\r\n\r\n",
      "HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n",
      "HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n",
      "HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n",
  };
  for (const std::string& text : bad) {
    absl::StatusOr<std::optional<ParsedHead>> parsed = ParseResponseHead(text);
    EXPECT_FALSE(parsed.ok()) << absl::CEscape(text);
  }
}

struct FramingCase {
  std::string head;
  bool ok;
  BodyFraming::Kind kind = BodyFraming::kNone;
  std::uint64_t length = 0;
  bool keep_alive = false;
};

TEST(HttpParseTest, BodyFraming) {
  const std::vector<FramingCase> cases = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", true, BodyFraming::kLength, 12, true},
      {"HTTP/1.1 200 OK\r\nContent-Length: 12, 12\r\n\r\n", true, BodyFraming::kLength, 12, true},
      {"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nContent-Length: 13\r\n\r\n", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", false},
      {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, BodyFraming::kChunked, 0,
       true},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nContent-Length: 5\r\n\r\n", true,
       BodyFraming::kChunked, 0, false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n", false},
      {"HTTP/1.1 200 OK\r\n\r\n", true, BodyFraming::kUntilClose, 0, false},
      {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n", true,
       BodyFraming::kLength, 1, false},
      {"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", true, BodyFraming::kLength, 1, false},
      {"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n", true,
       BodyFraming::kLength, 1, true},
      {"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", true, BodyFraming::kNone, 0, true},
      {"HTTP/1.1 304 Not Modified\r\n\r\n", true, BodyFraming::kNone, 0, true},
  };
  for (const FramingCase& c : cases) {
    SCOPED_TRACE(c.head);
    absl::StatusOr<std::optional<ParsedHead>> parsed = ParseResponseHead(c.head);
    ASSERT_TRUE(parsed.ok() && parsed->has_value()) << parsed.status();
    absl::StatusOr<BodyFraming> framing = FramingOf((*parsed)->head);
    ASSERT_EQ(framing.ok(), c.ok) << framing.status();
    if (!c.ok) continue;
    EXPECT_EQ(framing->kind, c.kind);
    EXPECT_EQ(framing->length, c.length);
    EXPECT_EQ(framing->keep_alive, c.keep_alive);
  }
}

// Decodes `body` fed in pieces of `step` bytes; the data, or the error's message.
std::string Decode(const std::string& body, std::size_t step, std::size_t* used_total = nullptr) {
  ChunkedDecoder decoder;
  std::string out;
  std::size_t used = 0;
  for (std::size_t at = 0; at < body.size() && !decoder.done(); at += step) {
    absl::StatusOr<std::size_t> n = decoder.Feed(absl::string_view(body).substr(at, step), &out);
    if (!n.ok()) return "error: " + std::string(n.status().message());
    used += *n;
  }
  if (used_total != nullptr) *used_total = used;
  return decoder.done() ? out : out + " (unfinished)";
}

TEST(HttpParseTest, ChunkedDecoding) {
  struct Case {
    std::string body, want;
  };
  const std::vector<Case> cases = {
      {"0\r\n\r\n", ""},
      {"5\r\nhello\r\n0\r\n\r\n", "hello"},
      {"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world"},
      {"A;name=value\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n", "0123456789"},
      {"a \r\n0123456789\r\n0\r\n\r\n", "0123456789"},
      {"5\nhello\n0\n\n", "hello"},
      {"5\r\nhello\r\n", "hello (unfinished)"},
      {"5\r\nhelloX\r\n0\r\n\r\n", "error: HTTP chunk data longer than its size"},
      {"g\r\n", "error: malformed HTTP chunk size \"g\""},
      {"\r\n", "error: malformed HTTP chunk size \"\""},
      {"1234567890123456\r\n", "error: malformed HTTP chunk size \"1234567890123456\""},
      {std::string(5000, '1'), "error: HTTP chunk line longer than 4096 bytes"},
  };
  for (const Case& c : cases) {
    for (const std::size_t step : {std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
      SCOPED_TRACE(absl::StrCat(absl::CEscape(c.body.substr(0, 40)), " step ", step));
      EXPECT_EQ(Decode(c.body, step), c.want);
    }
  }
  // What follows the end of the body is left for the next response.
  std::size_t used = 0;
  EXPECT_EQ(Decode("2\r\nab\r\n0\r\n\r\nHTTP/1.1", 1000, &used), "ab");
  EXPECT_EQ(used, 12u);
}

TEST(HttpParseTest, WarningTextAndWatchTimeout) {
  EXPECT_EQ(WarningText("299 - \"unknown field \\\"x\\\"\""), "unknown field \"x\"");
  EXPECT_EQ(WarningText("unquoted"), "unquoted");
  EXPECT_EQ(WarningText("299 - \"open"), "299 - \"open");
  EXPECT_EQ(WatchTimeoutSeconds("/a?watch=true&timeoutSeconds=30"), 30);
  EXPECT_EQ(WatchTimeoutSeconds("/a?timeoutSeconds=x"), 0);
  EXPECT_EQ(WatchTimeoutSeconds("/a?timeoutSeconds=-3"), 0);
  EXPECT_EQ(WatchTimeoutSeconds("/a"), 0);
}

}  // namespace
}  // namespace topodra::kube::http
