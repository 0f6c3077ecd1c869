// CompactJson prints what nlohmann's dump(-1, ' ', false, replace) prints, byte for byte: the
// state files' canonical form depends on it.
#include "driver/state/compact_json.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace topodra::state {
namespace {

using json = nlohmann::json;

std::string Nlohmann(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

TEST(CompactJsonTest, PrintsWhatNlohmannPrints) {
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls.push_back(static_cast<char>(c));
  const json cases[] = {
      nullptr,
      true,
      false,
      0,
      -1,
      int64_t{-9223372036854775807LL - 1},
      uint64_t{18446744073709551615ULL},
      1.5,
      -0.0,
      1e300,
      "",
      "plain",
      "quote \" backslash \\ slash / tab \t newline \n cr \r bs \b ff \f del \x7f",
      controls,
      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",  // valid UTF-8
      "bad \xff\xfe utf-8 \xc3",                    // replaced
      json::array(),
      json::object(),
      json{{"b", 1}, {"a", {1, "x\ny", nullptr}}, {"\xc3\xa9", {{"k\t", false}}}},
      json::parse(
          R"({"file":"f.json","metadata":[{"content":"{\n  \"a\": [1, 2]\n}\n","hostPath":"/x/y"}],"spec":{"cdiVersion":"0.6.0"}})"),
      json::binary({1, 2, 3}),
  };
  for (const json& j : cases) {
    EXPECT_EQ(CompactJson(j), Nlohmann(j)) << Nlohmann(j);
  }
}

TEST(CompactJsonTest, RandomStringsPrintAsNlohmannPrintsThem) {
  // The bytes on either side of every boundary the word-at-a-time test draws, often; any byte
  // now and then; lengths across several words.
  const unsigned char edges[] = {0x00, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c,
                                 0x5d, 0x7e, 0x7f, 0x80, 0xc3, 0xa9, 'a',  'Z'};
  std::mt19937 rng(19);
  for (int n = 0; n < 20000; ++n) {
    std::string s(rng() % 40, '\0');
    const int rare = 1 + static_cast<int>(rng() % 64);
    for (char& c : s) {
      const unsigned r = rng();
      c = static_cast<char>(r % rare == 0 ? edges[(r >> 8) % sizeof(edges)]
                            : r % 97 == 0 ? (r >> 8) % 256
                                          : 'a' + (r >> 8) % 26);
    }
    const json j = {{s, s}, {"list", {s, 1, s}}};
    ASSERT_EQ(CompactJson(j), Nlohmann(j)) << Nlohmann(j);
  }
}

}  // namespace
}  // namespace topodra::state
