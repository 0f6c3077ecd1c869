// The request-head parser of the daemon's HTTP endpoints: a table of heads and verdicts, and the
// bound on the head's size whether or not its end has arrived.
#include "driver/metrics/http_request.h"

#include <gtest/gtest.h>

#include <string>

namespace topodra::metrics {
namespace {

const char* KindName(HeadParse::Kind k) {
  switch (k) {
    case HeadParse::kIncomplete:
      return "incomplete";
    case HeadParse::kComplete:
      return "complete";
    case HeadParse::kBad:
      return "bad";
    case HeadParse::kTooLarge:
      return "too large";
  }
  return "?";
}

TEST(ParseRequestHeadTest, Table) {
  struct Case {
    std::string bytes;
    HeadParse::Kind kind;
    std::string method_or_error;  // the method when complete, else the error
    std::string path = "";
  };
  const Case cases[] = {
      {"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:9478\r\nUser-Agent: kube-probe/1.35\r\n\r\n",
       HeadParse::kComplete, "GET", "/healthz"},
      {"GET /readyz HTTP/1.0\r\n\r\n", HeadParse::kComplete, "GET", "/readyz"},
      {"GET /metrics?x=1&y HTTP/1.1\r\n\r\n", HeadParse::kComplete, "GET", "/metrics"},
      {"HEAD / HTTP/1.1\r\nX-Empty:\r\nX-Tab:\tv \t\r\nX-Utf8: \xc3\xa9\r\n\r\n",
       HeadParse::kComplete, "HEAD", "/"},
      // What follows the head (a body, a second request) is not the parser's business.
      {"POST /healthz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", HeadParse::kComplete, "POST",
       "/healthz"},
      {"", HeadParse::kIncomplete, ""},
      {"GET /healthz HTTP/1.1", HeadParse::kIncomplete, ""},
      {"GET /healthz HTTP/1.1\r\n", HeadParse::kIncomplete, ""},
      {"GET /healthz HTTP/1.1\r\nHost: x\r\n\r", HeadParse::kIncomplete, ""},
      {"\r\nGET / HTTP/1.1\r\n\r\n", HeadParse::kBad,
       "request line \"\" is not \"<method> <target> HTTP/1.x\" with single spaces"},
      {"GET  /healthz HTTP/1.1\r\n", HeadParse::kBad,
       "request line \"GET  /healthz HTTP/1.1\" is not \"<method> <target> HTTP/1.x\" with "
       "single spaces"},
      {"GET /healthz\r\n", HeadParse::kBad,
       "request line \"GET /healthz\" is not \"<method> <target> HTTP/1.x\" with single spaces"},
      {"G(T /healthz HTTP/1.1\r\n", HeadParse::kBad, "method \"G(T\" is not a token"},
      {"GET http://x/healthz HTTP/1.1\r\n", HeadParse::kBad,
       "target \"http://x/healthz\" is not an absolute path"},
      {"GET /a\x7f HTTP/1.1\r\n", HeadParse::kBad, "target \"/a\\177\" is not an absolute path"},
      {"GET / HTTP/1.2\r\n", HeadParse::kBad, "version \"HTTP/1.2\" is not HTTP/1.0 or HTTP/1.1"},
      {"GET / HTTP/1.1\n\n", HeadParse::kBad, "line \"GET / HTTP/1.1\\n\" does not end in CRLF"},
      {"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", HeadParse::kBad,
       "line \"Host: a\\rb\" has a bare CR or a NUL"},
      {std::string("GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n", 29), HeadParse::kBad,
       "line \"Host: a\\000b\" has a bare CR or a NUL"},
      {"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", HeadParse::kBad,
       "header line \" folded\" is folded (obsolete line folding)"},
      {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", HeadParse::kBad,
       "header line \"Host : a\" is not \"<name>: <value>\""},
      {"GET / HTTP/1.1\r\nno colon\r\n\r\n", HeadParse::kBad,
       "header line \"no colon\" is not \"<name>: <value>\""},
      {"GET / HTTP/1.1\r\nX: a\x01\r\n\r\n", HeadParse::kBad,
       "header line \"X: a\\001\" has a control character in its value"},
      // A bad request line is refused before the rest of the head arrives.
      {std::string("\x16\x03\x01\x02\x00 TLS hello\r\n", 17), HeadParse::kBad,
       "line \"\\026\\003\\001\\002\\000 TLS hello\" has a bare CR or a NUL"},
      // Quoted, but never more than 40 bytes of it.
      {"GET /" + std::string(100, 'a') + " HTTP/1.1 x\r\n", HeadParse::kBad,
       "request line \"GET /" + std::string(35, 'a') +
           "...\" is not \"<method> <target> HTTP/1.x\" with single spaces"},
  };
  for (const Case& c : cases) {
    const HeadParse p = ParseRequestHead(c.bytes, 8192);
    EXPECT_EQ(KindName(p.kind), std::string(KindName(c.kind))) << c.bytes;
    if (c.kind == HeadParse::kComplete) {
      EXPECT_EQ(p.head.method, c.method_or_error) << c.bytes;
      EXPECT_EQ(p.head.path, c.path) << c.bytes;
    } else {
      EXPECT_EQ(p.error, c.method_or_error) << c.bytes;
    }
  }
}

TEST(ParseRequestHeadTest, TheBoundCountsTheWholeHead) {
  const std::string head = "GET /healthz HTTP/1.1\r\nX: " + std::string(60, 'a') + "\r\n\r\n";
  ASSERT_EQ(head.size(), 90u);
  EXPECT_EQ(ParseRequestHead(head, 90).kind, HeadParse::kComplete);
  HeadParse p = ParseRequestHead(head, 89);
  EXPECT_EQ(p.kind, HeadParse::kTooLarge);
  EXPECT_EQ(p.error, "request head is longer than 89 bytes");
  // Without its end: incomplete below the bound, too large at it.
  const std::string open = head.substr(0, 60);
  EXPECT_EQ(ParseRequestHead(open, 61).kind, HeadParse::kIncomplete);
  EXPECT_EQ(ParseRequestHead(open, 60).kind, HeadParse::kTooLarge);
}

}  // namespace
}  // namespace topodra::metrics
