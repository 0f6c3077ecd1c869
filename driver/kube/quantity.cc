#include "driver/kube/quantity.h"

#include <cmath>
#include <string>

namespace topodra::kube {
namespace {

struct Suffix {
  const char* text;
  long double factor;
};

constexpr Suffix kSuffixes[] = {
    {"Ki", 1024.0L},
    {"Mi", 1024.0L * 1024},
    {"Gi", 1024.0L * 1024 * 1024},
    {"Ti", 1024.0L * 1024 * 1024 * 1024},
    {"Pi", 1024.0L * 1024 * 1024 * 1024 * 1024},
    {"Ei", 1024.0L * 1024 * 1024 * 1024 * 1024 * 1024},
    {"n", 1e-9L},
    {"u", 1e-6L},
    {"m", 1e-3L},
    {"k", 1e3L},
    {"M", 1e6L},
    {"G", 1e9L},
    {"T", 1e12L},
    {"P", 1e15L},
    {"E", 1e18L},
};

}  // namespace

std::optional<long double> ParseQuantity(std::string_view s) {
  if (s.empty() || s.size() > 64) return std::nullopt;
  size_t i = 0;
  bool negative = false;
  if (s[i] == '+' || s[i] == '-') negative = s[i++] == '-';
  long double value = 0;
  size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    value = value * 10 + (s[i++] - '0');
    ++digits;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    long double scale = 0.1L;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      value += (s[i++] - '0') * scale;
      scale /= 10;
      ++digits;
    }
  }
  if (digits == 0) return std::nullopt;
  const std::string_view rest = s.substr(i);
  if (rest.empty()) return negative ? -value : value;
  // "1e3" / "1E3" / "1e-3" is a decimal exponent; "1E" alone is exa and "1Ei" exbi.
  if ((rest[0] == 'e' || rest[0] == 'E') && rest.size() > 1 &&
      ((rest[1] >= '0' && rest[1] <= '9') || rest[1] == '+' || rest[1] == '-')) {
    size_t j = 1;
    bool neg_exp = false;
    if (rest[j] == '+' || rest[j] == '-') neg_exp = rest[j++] == '-';
    int exp = 0;
    size_t exp_digits = 0;
    while (j < rest.size() && rest[j] >= '0' && rest[j] <= '9' && exp < 1000) {
      exp = exp * 10 + (rest[j++] - '0');
      ++exp_digits;
    }
    if (exp_digits == 0 || j != rest.size()) return std::nullopt;
    value *= std::pow(10.0L, neg_exp ? -exp : exp);
    return negative ? -value : value;
  }
  for (const Suffix& suffix : kSuffixes) {
    if (rest == suffix.text) return (negative ? -value : value) * suffix.factor;
  }
  return std::nullopt;
}

bool QuantitiesEqual(std::string_view a, std::string_view b) {
  const std::optional<long double> x = ParseQuantity(a);
  const std::optional<long double> y = ParseQuantity(b);
  if (!x || !y) return false;
  const long double scale = std::max(std::fabs(*x), std::fabs(*y));
  return std::fabs(*x - *y) <= scale * 1e-12L;
}

}  // namespace topodra::kube
