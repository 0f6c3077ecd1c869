// The shared message and JSON-field helpers (common/status.h, common/json_text.h): what every
// error message and every read of outside JSON goes through, as tables.
#include "common/status.h"

#include <gtest/gtest.h>

#include <string>

#include "common/json_text.h"

namespace topodra {
namespace {

using json = nlohmann::json;

TEST(MessageTest, IsTheMessageWithoutTheCode) {
  struct Case {
    absl::Status status;
    std::string want;
  };
  const Case cases[] = {
      {absl::OkStatus(), ""},
      {absl::InvalidArgumentError("CPU 7 is offline"), "CPU 7 is offline"},
      {absl::UnavailableError("a \"quoted\" name: 2"), "a \"quoted\" name: 2"},
      {absl::InternalError(std::string("nul\0inside", 10)), std::string("nul\0inside", 10)},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Message(c.status), c.want) << c.status;
  }
}

TEST(StringFieldTest, NeverThrowsOnOutsideInput) {
  struct Case {
    const char* name;
    json j;
    const char* key;
    const char* fallback;
    std::string want;
  };
  const Case cases[] = {
      {"string member", json{{"kind", "Status"}}, "kind", "", "Status"},
      {"missing member", json{{"kind", "Status"}}, "reason", "", ""},
      {"missing member with fallback", json::object(), "apiVersion", "v1", "v1"},
      {"number member", json{{"kind", 3}}, "kind", "x", "x"},
      {"null member", json{{"kind", nullptr}}, "kind", "", ""},
      {"object member", json{{"kind", json::object()}}, "kind", "", ""},
      {"array", json::array({"kind"}), "kind", "", ""},
      {"string", json("kind"), "kind", "f", "f"},
      {"null", json(), "kind", "", ""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(StringField(c.j, c.key, c.fallback), c.want) << c.name;
  }
}

TEST(FieldTest, IsNullUnlessAnObjectHasTheMember) {
  const json obj = {{"metadata", {{"name", "a"}}}, {"n", 1}};
  EXPECT_EQ(Field(obj, "metadata"), (json{{"name", "a"}}));
  EXPECT_EQ(Field(obj, "n"), json(1));
  EXPECT_TRUE(Field(obj, "spec").is_null());
  EXPECT_TRUE(Field(json::array({1}), "metadata").is_null());
  EXPECT_TRUE(Field(json("metadata"), "metadata").is_null());
  EXPECT_EQ(StringField(Field(obj, "metadata"), "name"), "a");
  EXPECT_EQ(StringField(Field(obj, "spec"), "name"), "");
}

TEST(DumpJsonTest, ReplacesInvalidUtf8InsteadOfThrowing) {
  const json j = {{"name", std::string("gpu\xff")}};
  EXPECT_EQ(DumpJson(j), "{\"name\":\"gpu\xEF\xBF\xBD\"}");
  EXPECT_EQ(DumpJson(json{{"a", 1}}, 1), "{\n \"a\": 1\n}");
}

}  // namespace
}  // namespace topodra
