// PrintJson prints what nlohmann's dump(indent, ' ', false, replace) prints, byte for byte: CDI
// spec files, device metadata files and the state's canonical form depend on it. The compact
// print's strings are tested further by test/state/compact_json_test.cc.
#include "common/json_print.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace topodra {
namespace {

using json = nlohmann::json;

std::string Nlohmann(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

std::vector<json> Cases() {
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls.push_back(static_cast<char>(c));
  return {
      nullptr,
      true,
      0,
      int64_t{-9223372036854775807LL - 1},
      uint64_t{18446744073709551615ULL},
      1.5,
      "quote \" backslash \\ tab \t newline \n del \x7f",
      controls,
      "caf\xc3\xa9 \xf0\x9f\x98\x80",  // valid UTF-8
      "bad \xff utf-8 \xc3",           // replaced
      json::array(),
      json::object(),
      json{{"empty", json::object()}, {"none", json::array()}, {"one", {1}}},
      json{{"b", 1}, {"a", {1, "x\ny", nullptr, 2.25}}, {"\xc3\xa9", {{"k\t", false}}}},
      json::array({json::array({json::object(), json::array({1, 2})}), json{{"k", {{"k", 1}}}}}),
      json{{"bin", json::binary({1, 2, 3})}, {"list", {json::binary({4}, 7)}}},
      json::parse(R"({"cdiVersion":"0.5.0","containerEdits":{"env":["A=1","B=2"]},
                      "devices":[{"containerEdits":{"mounts":[{"containerPath":"/c",
                      "hostPath":"/h","options":["ro","bind"]}]},"name":"d"}],"kind":"x/y"})"),
  };
}

TEST(PrintJsonTest, PrintsWhatNlohmannPrintsAtEveryIndent) {
  for (const json& j : Cases()) {
    for (int indent : {-1, 0, 1, 2, 4}) {
      EXPECT_EQ(PrintJson(j, indent), Nlohmann(j, indent)) << "indent " << indent << "\n"
                                                           << Nlohmann(j, indent);
    }
  }
}

// A value printed at `at` is what the same value prints as inside a document that puts it there:
// the document's text holds it byte for byte.
TEST(PrintJsonTest, AValueAtAnIndentIsItsPrintInsideADocument) {
  for (const json& j : Cases()) {
    for (int indent : {0, 2, 3}) {
      for (int depth : {1, 2, 3}) {
        json doc = j;
        for (int d = 0; d < depth; ++d) doc = json{{"k", doc}};
        std::string want = Nlohmann(doc, indent);
        // Cut the wrapping off: each level adds "{\n" + indent spaces + "\"k\": " before and
        // "\n" + its own indentation + "}" after.
        size_t head = 0, tail = 0;
        for (int d = 0; d < depth; ++d) {
          head += 2 + static_cast<size_t>((d + 1) * indent) + 5;
          tail += 2 + static_cast<size_t>(d * indent);
        }
        want = want.substr(head, want.size() - head - tail);
        std::string got = "prefix";
        AppendJson(j, indent, depth * indent, &got);
        EXPECT_EQ(got, "prefix" + want) << "indent " << indent << " depth " << depth;
      }
    }
  }
  // Compact ignores `at`.
  std::string got;
  AppendJson(json{{"a", {1, 2}}}, -1, 8, &got);
  EXPECT_EQ(got, R"({"a":[1,2]})");
}

// Random trees of every kind of value, strings with the bytes on either side of the escaper's
// boundaries.
json RandomValue(std::mt19937& rng, int depth) {
  const unsigned char edges[] = {0x00, 0x1f, 0x20, 0x22, 0x5c, 0x7e, 0x7f, 0x80, 0xc3, 0xa9, 'a'};
  auto text = [&] {
    std::string s(rng() % 20, '\0');
    for (char& c : s) {
      const unsigned r = rng();
      c = static_cast<char>(r % 5 == 0 ? edges[(r >> 8) % sizeof(edges)] : 'a' + (r >> 8) % 26);
    }
    return s;
  };
  const int kind = static_cast<int>(rng() % (depth > 3 ? 6 : 8));
  switch (kind) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int64_t>(rng()) - (int64_t{1} << 31);
    case 3:
      return static_cast<uint64_t>(rng()) << 20;
    case 4:
      return text();
    case 5:
      return static_cast<double>(rng() % 1000) / 8;
    case 6: {
      json a = json::array();
      for (unsigned n = rng() % 4; n > 0; --n) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (unsigned n = rng() % 4; n > 0; --n) o[text()] = RandomValue(rng, depth + 1);
      return o;
    }
  }
}

TEST(PrintJsonTest, RandomTreesPrintAsNlohmannPrintsThem) {
  std::mt19937 rng(1907);
  for (int n = 0; n < 3000; ++n) {
    const json j = RandomValue(rng, 0);
    for (int indent : {-1, 2}) {
      ASSERT_EQ(PrintJson(j, indent), Nlohmann(j, indent)) << Nlohmann(j, indent);
    }
  }
}

}  // namespace
}  // namespace topodra
