// The daemon's JSON log lines: one valid JSON object per line whatever the message holds.
#include "cmd/logging.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace topodra::cmd {
namespace {

TEST(JsonEscapeTest, Table) {
  struct Case {
    std::string in, want;
  };
  const Case cases[] = {
      {"plain", "plain"},
      {R"(claim default/c: cpuset "5-2": reversed)",
       R"(claim default/c: cpuset \"5-2\": reversed)"},
      {"a\\b", R"(a\\b)"},
      {"two\nlines\r\tx", R"(two\nlines\r\tx)"},
      {std::string("nul\0x", 5), R"(nul\u0000x)"},
      {"\x01\x1f\x7f", R"(\u0001\u001f\u007f)"},
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
      {"bad \xff byte", R"(bad \ufffd byte)"},
      {"cut \xe2\x82", R"(cut \ufffd\ufffd)"},
      {"overlong \xc0\xaf", R"(overlong \ufffd\ufffd)"},
      {"surrogate \xed\xa0\x80", R"(surrogate \ufffd\ufffd\ufffd)"},
      {"", ""},
  };
  for (const Case& c : cases) EXPECT_EQ(JsonEscape(c.in), c.want) << c.in;
}

TEST(JsonFormatterTest, EveryLineIsOneJsonObjectWithTheMessage) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  sink->set_formatter(NewJsonFormatter());
  spdlog::logger logger("test", sink);
  logger.set_level(spdlog::level::trace);
  const std::string messages[] = {
      R"(claim default/gpu-claim: opaque parameters: key "cpuset" value "0-3\n" is not a cpuset)",
      "multi\nline\twith \"quotes\" and \\ and \x01 and \xff",
      "{\"looks\":\"like json\"}",
  };
  for (const std::string& m : messages) logger.warn("{}", m);
  logger.flush();

  std::istringstream lines(out.str());
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ASSERT_LT(n, 3) << line;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << "not one JSON object: " << line;
    EXPECT_EQ(j.size(), 3u) << line;
    EXPECT_EQ(j["level"], "warning") << line;
    EXPECT_THAT(j["time"].get<std::string>(),
                ::testing::MatchesRegex(R"(^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$)"));
    std::string want = messages[n];
    if (n == 1) want.replace(want.size() - 1, 1, "\xef\xbf\xbd");  // the bad byte as U+FFFD
    EXPECT_EQ(j["msg"], want);
    ++n;
  }
  EXPECT_EQ(n, 3);
}

}  // namespace
}  // namespace topodra::cmd
