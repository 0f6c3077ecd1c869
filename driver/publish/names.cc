#include "driver/publish/names.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace topodra::publish {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool IsCIdentifier(std::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    const std::string_view label =
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!IsDnsLabel(label)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsDriverName(std::string_view s) { return s.size() <= 63 && IsDnsSubdomain(s); }

bool IsQualifiedName(std::string_view s) {
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) return IsCIdentifier(s);
  const std::string_view domain = s.substr(0, slash);
  return domain.size() <= 63 && IsDnsSubdomain(domain) && IsCIdentifier(s.substr(slash + 1));
}

std::string ReservationCpuDeviceName(const std::string& reservation) {
  constexpr std::string_view kPrefix = "cpudevresv-";
  constexpr size_t kMaxLabel = 63;
  constexpr size_t kHashSuffix = 9;  // "-" + 8 hex digits
  std::string part = reservation;
  for (char& c : part) {
    if (c == '.') c = '-';
  }
  const std::string plain = std::string(kPrefix) + part;
  if (IsDnsSubdomain(reservation) && plain.size() <= kMaxLabel) return plain;

  // Anything else is made a label by hand: lower case, other characters as '-'.
  for (char& c : part) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (!IsLowerAlnum(c)) c = '-';
  }
  part.resize(std::min(part.size(), kMaxLabel - kPrefix.size() - kHashSuffix));
  while (!part.empty() && part.back() == '-') part.pop_back();
  uint32_t h = 2166136261u;  // FNV-1a: stable across builds, machines and restarts
  for (char c : reservation) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", h);
  return std::string(kPrefix) + part + (part.empty() ? "" : "-") + hex;
}

// absl::StrFormat("cpudev%03d") parsed its format at every call: a tenth of building the
// devices of a 1024-CPU machine, and CpuDeviceCpus names them all again.
std::string IndividualCpuDeviceName(int index) {
  return absl::StrCat("cpudev", absl::Dec(index, absl::kZeroPad3));
}

}  // namespace topodra::publish
