#include "driver/state/canonical_json.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace topodra::state::canonical {
namespace {

using json = nlohmann::json;

// What the fast path of the state files accepts must be exactly the canonical printer's text of
// what the full parser reads from it.
TEST(CanonicalJsonTest, AcceptsOnlyTheCanonicalPrintersText) {
  const std::vector<std::string> canonical = {"null",
                                              "true",
                                              "false",
                                              "0",
                                              "-7",
                                              "123456789012345678",
                                              R"("")",
                                              R"("a b/c")",
                                              R"("\"\\\b\f\n\r\t")",
                                              R"("\u0001\u001f")",
                                              "\"\x7f\"",
                                              "\"\xc3\xbcnic\xf0\x9f\x98\x80\"",
                                              "[]",
                                              "{}",
                                              R"([1,"x",[null],{}])",
                                              R"({"a":1,"b":{"c":[true]},"bb":"x"})",
                                              R"({"A":1,"a":2})"};
  std::vector<Piece> pieces;
  for (const std::string& text : canonical) {
    SCOPED_TRACE(text);
    EXPECT_EQ(ScanCanonical(text, 32), text.size());
    EXPECT_EQ(ScanCanonicalPieces(text, 32, 3, &pieces), text.size());
    EXPECT_EQ(json::parse(text).dump(-1, ' ', false, json::error_handler_t::replace), text);
  }
  EXPECT_EQ(ScanCanonical("", 32), 0u);  // 0: no value
  const std::vector<std::string> not_canonical = {
      " 1",
      "[1, 2]",
      "{\"a\": 1}",
      "1.5",
      "1e3",
      "-0",
      "01",
      "1234567890123456789",  // may not stay an integer
      R"({"b":1,"a":2})",     // keys out of order
      R"({"a":1,"a":2})",     // twice
      R"({"\u0061":1})",      // a key with an escape
      R"("\/")",
      R"("\u0041")",
      R"("\u000a")",           // \n has a short escape
      R"("\u001F")",           // uppercase hex
      "\"\x01\"",              // a raw control character
      "\"\xc0\xaf\"",          // overlong
      "\"\xed\xa0\x80\"",      // a surrogate
      "\"\xf4\x90\x80\x80\"",  // past U+10FFFF
      "\"\xc3\"",              // cut short
      "[1,]",
      "{\"a\"}",
      "tru",
      "[",
      "\"abc",
  };
  for (const std::string& text : not_canonical) {
    SCOPED_TRACE(text);
    EXPECT_NE(ScanCanonical(text, 32), text.size());
    EXPECT_NE(ScanCanonicalPieces(text, 32, 3, &pieces), text.size());
  }
  // A value followed by more text: the value's length.
  EXPECT_EQ(ScanCanonical(R"({"a":1},{"b":2})", 32), 7u);
}

TEST(CanonicalJsonTest, NestingIsBounded) {
  EXPECT_EQ(ScanCanonical("[[[]]]", 3), 6u);
  EXPECT_EQ(ScanCanonical("[[[]]]", 2), 0u);
  EXPECT_EQ(ScanCanonical(R"({"a":{"b":{}}})", 2), 0u);
}

TEST(CanonicalJsonTest, SplitsObjectsAndArraysItScanned) {
  const std::string object = R"({"a":"x,}","b":[1,{"c":"]"}],"c":-3,"d":null})";
  ASSERT_EQ(ScanCanonical(object, 32), object.size());
  Members members;
  ASSERT_TRUE(ObjectMembers(object, &members));
  ASSERT_EQ(members.size(), 4u);
  EXPECT_EQ(members[0].first, "a");
  EXPECT_EQ(members[0].second, R"("x,}")");
  EXPECT_EQ(members[1].first, "b");
  EXPECT_EQ(members[1].second, R"([1,{"c":"]"}])");
  EXPECT_EQ(members[2].second, "-3");
  EXPECT_EQ(members[3].second, "null");
  std::vector<absl::string_view> elements;
  ASSERT_TRUE(ArrayElements(members[1].second, &elements));
  EXPECT_THAT(elements, testing::ElementsAre("1", R"({"c":"]"})"));
  ASSERT_TRUE(ArrayElements("[]", &elements));
  EXPECT_TRUE(elements.empty());
  ASSERT_TRUE(ObjectMembers("{}", &members));
  EXPECT_TRUE(members.empty());
  EXPECT_FALSE(ObjectMembers("[]", &members));
  EXPECT_FALSE(ArrayElements("{}", &elements));
  absl::string_view plain;
  EXPECT_TRUE(PlainString(R"("abc")", &plain));
  EXPECT_EQ(plain, "abc");
  EXPECT_FALSE(PlainString(R"("a\nb")", &plain));
  EXPECT_FALSE(PlainString("12", &plain));
}

// The one-pass split gives what ObjectMembers and ArrayElements give after the scan, a container
// before what is in it, down to the depth asked for.
TEST(CanonicalJsonTest, ScanCanonicalPiecesSplitsAsItChecks) {
  const std::string text = R"({"a":[{"k":"x,}","l":[1]},2],"b":"\"}","c":{}})";
  std::vector<Piece> pieces;
  ASSERT_EQ(ScanCanonicalPieces(text, 32, 3, &pieces), text.size());
  std::vector<std::string> got;
  for (const Piece& p : pieces) {
    got.push_back(absl::StrCat(p.depth, " ", p.key, "=", p.value));
  }
  EXPECT_THAT(got,
              testing::ElementsAre(R"(1 a=[{"k":"x,}","l":[1]},2])", R"(2 ={"k":"x,}","l":[1]})",
                                   R"(3 k="x,}")", R"(3 l=[1])", "2 =2", R"(1 b="\"}")", "1 c={}"));
  EXPECT_EQ(PieceEnd(pieces, 0), 5u);
  EXPECT_EQ(PieceEnd(pieces, 1), 4u);
  EXPECT_EQ(PieceEnd(pieces, 5), 6u);
  EXPECT_EQ(PieceEnd(pieces, 6), 7u);
  // Depth 1 only: the outer members.
  ASSERT_EQ(ScanCanonicalPieces(text, 32, 1, &pieces), text.size());
  Members members;
  ASSERT_TRUE(ObjectMembers(text, &members));
  ASSERT_EQ(pieces.size(), members.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].key, members[i].first);
    EXPECT_EQ(pieces[i].value, members[i].second);
  }
  // A text it refuses lists whatever it saw; the caller looks at the length only.
  EXPECT_EQ(ScanCanonicalPieces(R"({"a":1,"b":01})", 32, 3, &pieces), 0u);
}

// A string as the canonical printer writes it reads back as itself; what it never writes does
// not read at all (the caller then takes the full parser).
TEST(CanonicalJsonTest, UnescapedStringUndoesThePrintersEscapes) {
  const std::vector<std::string> strings = {"",
                                            "plain",
                                            "a\"b\\c",
                                            "\b\f\n\r\t",
                                            std::string("\x01\x1f\0", 3),
                                            "\x7f",
                                            "\xc3\xbcnic\xf0\x9f\x98\x80"};
  for (const std::string& s : strings) {
    const std::string printed = json(s).dump();
    ASSERT_EQ(ScanCanonical(printed, 1), printed.size()) << printed;
    std::string out = "left over";
    EXPECT_TRUE(UnescapedString(printed, &out)) << printed;
    EXPECT_EQ(out, s) << printed;
  }
  std::string out;
  for (const std::string bad : {R"("\/")", R"("\u0041")", R"("\u00")", R"("\x")", R"("a\")", R"(")",
                                R"(abc)", R"("\U001f")"}) {
    EXPECT_FALSE(UnescapedString(bad, &out)) << bad;
  }
}

}  // namespace
}  // namespace topodra::state::canonical
