// Kubernetes resource quantities (driver/kube/quantity.h) as a table: the forms the API server
// accepts and canonicalises to, and the texts that are not quantities.
#include "driver/kube/quantity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>

namespace topodra::kube {
namespace {

TEST(QuantityTest, Parse) {
  struct Case {
    const char* text;
    std::optional<long double> want;
  };
  const Case cases[] = {
      {"0", 0.0L},
      {"64", 64.0L},
      {"+4", 4.0L},
      {"-4", -4.0L},
      {"1.5", 1.5L},
      {".5", 0.5L},
      {"5.", 5.0L},
      {"500m", 0.5L},
      {"250u", 250e-6L},
      {"3n", 3e-9L},
      {"1k", 1e3L},
      {"2M", 2e6L},
      {"3G", 3e9L},
      {"1T", 1e12L},
      {"1P", 1e15L},
      {"1E", 1e18L},
      {"1Ki", 1024.0L},
      {"16Gi", 16.0L * 1024 * 1024 * 1024},
      {"1Ei", 1024.0L * 1024 * 1024 * 1024 * 1024 * 1024},
      {"1e3", 1e3L},
      {"1E3", 1e3L},
      {"12e-1", 1.2L},
      {"1e+2", 100.0L},
      {"", std::nullopt},
      {"-", std::nullopt},
      {".", std::nullopt},
      {"m", std::nullopt},
      {"four", std::nullopt},
      {"1 Gi", std::nullopt},
      {"1gi", std::nullopt},
      {"1K", std::nullopt},
      {"1Gib", std::nullopt},
      {"1e", std::nullopt},
      {"1e+", std::nullopt},
      {"1e3m", std::nullopt},
      {"1e10000", std::nullopt},
      {"0x10", std::nullopt},
      {"1111111111111111111111111111111111111111111111111111111111111111", 1.111111111111111e63L},
      {"11111111111111111111111111111111111111111111111111111111111111111", std::nullopt},
  };
  for (const Case& c : cases) {
    const std::optional<long double> got = ParseQuantity(c.text);
    ASSERT_EQ(got.has_value(), c.want.has_value()) << '"' << c.text << '"';
    if (got) {
      EXPECT_NEAR(static_cast<double>(*got), static_cast<double>(*c.want),
                  std::fabs(static_cast<double>(*c.want)) * 1e-12 + 1e-18)
          << c.text;
    }
  }
}

TEST(QuantityTest, EqualByValue) {
  struct Case {
    const char* a;
    const char* b;
    bool want;
  };
  const Case cases[] = {
      {"1", "1", true},
      {"1000m", "1", true},
      {"1k", "1000", true},
      {"1Ki", "1024", true},
      {"1e3", "1k", true},
      {"0.5", "500m", true},
      {"16Gi", "17179869184", true},
      {"1k", "1Ki", false},
      {"1", "2", false},
      {"-1", "1", false},
      {"0", "0m", true},
      {"four", "four", false},
      {"", "", false},
      {"1", "one", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(QuantitiesEqual(c.a, c.b), c.want) << c.a << " vs " << c.b;
    EXPECT_EQ(QuantitiesEqual(c.b, c.a), c.want) << c.b << " vs " << c.a;
  }
}

}  // namespace
}  // namespace topodra::kube
