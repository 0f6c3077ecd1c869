#include "driver/state/canonical_json.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace topodra::state::canonical {
namespace {

using json = nlohmann::json;

// Texts that are not the canonical printer's text of any value.
std::vector<std::string> NotCanonical() {
  return {
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
}

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
  const std::vector<std::string> not_canonical = NotCanonical();
  for (const std::string& text : not_canonical) {
    SCOPED_TRACE(text);
    EXPECT_NE(ScanCanonical(text, 32), text.size());
    EXPECT_NE(ScanCanonicalPieces(text, 32, 3, &pieces), text.size());
  }
  // A value followed by more text: the value's length.
  EXPECT_EQ(ScanCanonical(R"({"a":1},{"b":2})", 32), 7u);
}

// ScanCanonical and ScanCanonicalPieces of `text` copied to a heap buffer of exactly its size, so
// that a read past its end shows under ASan; both must agree.
size_t ScanExact(absl::string_view text) {
  std::unique_ptr<char[]> copy(new char[text.size()]);
  std::memcpy(copy.get(), text.data(), text.size());
  const absl::string_view exact(copy.get(), text.size());
  std::vector<Piece> pieces;
  const size_t scanned = ScanCanonical(exact, 32);
  EXPECT_EQ(ScanCanonicalPieces(exact, 32, 3, &pieces), scanned);
  return scanned;
}

// Whether `text` is the canonical printer's text of what the full parser reads from it.
bool IsCanonical(const std::string& text) {
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !parsed.is_discarded() &&
         parsed.dump(-1, ' ', false, json::error_handler_t::replace) == text;
}

// Strings of 16 bytes and more are scanned 16 bytes at a time (PlainRun16) while 16 are left:
// what a short string may not hold is refused there too, wherever it sits among those 16 bytes,
// and no scan reads past the end of the text, however it is cut.
TEST(CanonicalJsonTest, LongStringsAreCheckedAsShortOnes) {
  std::vector<std::string> inside;       // put inside long strings
  std::vector<std::string> must_refuse;  // ... and refused there
  for (const std::string& text : NotCanonical()) {
    inside.push_back(text);
    if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
      must_refuse.push_back(text.substr(1, text.size() - 2));  // a bad string's contents
    }
  }
  // Invalid UTF-8: stray continuation bytes, bytes that never appear, sequences cut short,
  // overlong forms, past U+10FFFF.
  for (const char* bad : {"\x80", "\xbf", "\xfe", "\xff", "\xc3", "\xc3(", "\xe2\x82", "\xe2\x82(",
                          "\xc1\xbf", "\xe0\x80\x80", "\xf0\x80\x80\x80", "\xf5\x80\x80\x80",
                          "\xed\xbf\xbf", "\x1f", "\x7f\x80"}) {
    must_refuse.push_back(bad);
  }
  inside.insert(inside.end(), must_refuse.begin(), must_refuse.end());
  for (const std::string& in : inside) {
    const bool must = std::find(must_refuse.begin(), must_refuse.end(), in) != must_refuse.end();
    for (int k = 0; k <= 16; ++k) {
      const std::string text = "\"" + std::string(k, 'a') + in + std::string(20, 'a') + "\"";
      SCOPED_TRACE(absl::StrCat("k=", k, " ", absl::CHexEscape(text)));
      const bool canonical = IsCanonical(text);
      if (must) {
        EXPECT_FALSE(canonical);
      }
      EXPECT_EQ(ScanExact(text) == text.size(), canonical);
      // Cut anywhere: a string cut short is no value, but it may end at a quote inside.
      for (size_t n = 0; n < text.size(); ++n) {
        const std::string cut = text.substr(0, n);
        EXPECT_EQ(ScanExact(cut) == n && n > 0, IsCanonical(cut)) << n;
      }
    }
  }
  // The same bytes in a valid string are read at every offset.
  for (const char* good : {"\xc3\xbc", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\\n", "\\u0001"}) {
    for (int k = 0; k <= 16; ++k) {
      const std::string text = "\"" + std::string(k, 'a') + good + std::string(20, 'a') + "\"";
      EXPECT_EQ(ScanExact(text), text.size()) << absl::CHexEscape(text);
    }
  }
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
  // A text it refuses lists nothing (not the pieces it saw before the fault).
  EXPECT_EQ(ScanCanonicalPieces(R"({"a":1,"b":01})", 32, 3, &pieces), 0u);
  EXPECT_TRUE(pieces.empty());
  EXPECT_EQ(ScanCanonicalPieces(R"({"a":[1,{"c":2}],"b":)", 32, 3, &pieces), 0u);
  EXPECT_TRUE(pieces.empty());
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
