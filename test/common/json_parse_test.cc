// ParseJsonBounded: the nesting bound, and that text within it parses as nlohmann would.
#include "common/json_parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace topodra::files {
namespace {

using ::testing::HasSubstr;

std::string Nested(int levels, const std::string& inner) {
  return std::string(levels, '[') + inner + std::string(levels, ']');
}

TEST(ParseJsonBoundedTest, NestingUpToTheBoundParses) {
  for (const std::string& text : {Nested(4, ""), Nested(4, "1"), Nested(2, "{\"a\":[1]}")}) {
    SCOPED_TRACE(text);
    absl::StatusOr<nlohmann::json> j = ParseJsonBounded(text, 4);
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(*j, nlohmann::json::parse(text));
  }
}

TEST(ParseJsonBoundedTest, DeeperThanTheBoundIsAnError) {
  for (const std::string& text :
       {Nested(6, "1"), Nested(100, ""), "{\"a\":" + Nested(5, "1") + "}"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<nlohmann::json> j = ParseJsonBounded(text, 4);
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(j.status().message(), HasSubstr("nested deeper than 4 levels"));
  }
}

// One level past the bound holding nothing is what the parser's own depth count allows.
TEST(ParseJsonBoundedTest, AnEmptyContainerOneLevelPastTheBoundParses) {
  absl::StatusOr<nlohmann::json> j = ParseJsonBounded(Nested(5, ""), 4);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(*j, nlohmann::json::parse(Nested(5, "")));
}

// Brackets in strings, escaped quotes and backslashes among them, are not nesting.
TEST(ParseJsonBoundedTest, BracketsInStringsDoNotCount) {
  const std::string text = R"({"a":"[[[[[[{{{{","b":["\"[[[[[[","\\",["x\\\"]]]]"]]})";
  absl::StatusOr<nlohmann::json> j = ParseJsonBounded(text, 3);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(*j, nlohmann::json::parse(text));
  EXPECT_EQ((*j)["b"][2][0], "x\\\"]]]]");
}

TEST(ParseJsonBoundedTest, MalformedTextIsAnErrorWhateverItsBrackets) {
  for (const std::string& text : {std::string("{\"a\":"), std::string("[1,]"),
                                  std::string("\"[[[["), std::string("]]]]"), Nested(100, "1,")}) {
    SCOPED_TRACE(text);
    absl::StatusOr<nlohmann::json> j = ParseJsonBounded(text, 4);
    ASSERT_FALSE(j.ok());
    EXPECT_THAT(j.status().message(), HasSubstr("malformed JSON"));
  }
}

}  // namespace
}  // namespace topodra::files
