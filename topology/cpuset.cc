#include "topology/cpuset.h"

#include <algorithm>
#include <charconv>
#include <ostream>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace topodra {
namespace {

constexpr uint64_t kAllOnes = ~uint64_t{0};

// Debian's Abseil is built with its own absl::string_view rather than an alias of
// std::string_view, so the two do not convert implicitly.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Escaped so that control bytes and quotes in hostile input cannot garble logs or events.
std::string Quote(std::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(Absl(s)), "\"");
}

absl::Status Invalid(std::string_view input, std::string_view detail) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid cpuset ", Quote(input), ": ", Absl(detail)));
}

// Deliberately not std::isspace: that is locale dependent and UB for negative chars.
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Parses one non-empty id token starting at byte offset pos of input. The value saturates
// instead of accumulating, so arbitrarily long digit strings cannot overflow.
absl::Status ParseId(std::string_view input, std::string_view token, size_t pos, int* out) {
  for (char c : token) {
    if (c < '0' || c > '9') {
      return Invalid(input, absl::StrCat(Quote(token), " at position ", pos, " is not a CPU id"));
    }
  }
  int value = 0;
  for (char c : token) {
    value = value * 10 + (c - '0');
    if (value > CpuSet::kMaxCpuId) {
      return Invalid(input, absl::StrCat("CPU id ", Absl(token), " at position ", pos,
                                         " exceeds the maximum ", CpuSet::kMaxCpuId));
    }
  }
  *out = value;
  return absl::OkStatus();
}

// Parses one comma-separated element ("N" or "N-M") located at byte offset pos of input.
absl::Status ParseElement(std::string_view input, std::string_view element, size_t pos,
                          CpuSet* set) {
  if (element.empty()) {
    return Invalid(input, absl::StrCat("empty element at position ", pos));
  }
  const size_t dash = element.find('-');
  if (dash == std::string_view::npos) {
    int id = 0;
    if (absl::Status s = ParseId(input, element, pos, &id); !s.ok()) return s;
    set->Add(id);
    return absl::OkStatus();
  }
  if (element.find('-', dash + 1) != std::string_view::npos) {
    return Invalid(input, absl::StrCat("element ", Quote(element), " at position ", pos,
                                       " has more than one '-'"));
  }
  const std::string_view lo = element.substr(0, dash);
  const std::string_view hi = element.substr(dash + 1);
  if (lo.empty()) {
    return Invalid(input, absl::StrCat("range ", Quote(element), " at position ", pos,
                                       " has no first CPU id"));
  }
  if (hi.empty()) {
    return Invalid(
        input, absl::StrCat("range ", Quote(element), " at position ", pos, " has no last CPU id"));
  }
  int first = 0;
  int last = 0;
  if (absl::Status s = ParseId(input, lo, pos, &first); !s.ok()) return s;
  if (absl::Status s = ParseId(input, hi, pos + dash + 1, &last); !s.ok()) return s;
  if (last < first) {
    return Invalid(input, absl::StrCat("reversed range ", Quote(element), " at position ", pos));
  }
  set->AddRange(first, last);
  return absl::OkStatus();
}

void AppendInt(std::string& out, int value) {
  char buf[16];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, end);
}

}  // namespace

CpuSet::CpuSet(std::initializer_list<int> ids) {
  for (int id : ids) Add(id);
}

CpuSet CpuSet::Range(int first, int last) {
  CpuSet set;
  set.AddRange(first, last);
  return set;
}

absl::StatusOr<CpuSet> CpuSet::Parse(std::string_view text) {
  const std::string_view input = text;
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  for (size_t i = 0; i < text.size(); ++i) {
    if (IsSpace(text[i])) {
      return Invalid(input, absl::StrCat("unexpected whitespace ", Quote(text.substr(i, 1)),
                                         " at position ", i));
    }
  }
  CpuSet set;
  if (text.empty()) return set;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const size_t end = comma == std::string_view::npos ? text.size() : comma;
    if (absl::Status s = ParseElement(input, text.substr(pos, end - pos), pos, &set); !s.ok()) {
      return s;
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return set;
}

std::string CpuSet::ToString() const {
  std::string out;
  for (int first = NextSet(0); first >= 0;) {
    const int last = NextClear(first) - 1;
    if (!out.empty()) out.push_back(',');
    AppendInt(out, first);
    if (last > first) {
      out.push_back('-');
      AppendInt(out, last);
    }
    first = NextSet(last + 1);
  }
  return out;
}

bool CpuSet::Contains(int cpu) const {
  if (cpu < 0) return false;
  const size_t word = static_cast<size_t>(cpu) / kWordBits;
  if (word >= words_.size()) return false;
  return (words_[word] >> (cpu % kWordBits)) & 1;
}

void CpuSet::Add(int cpu) {
  if (cpu < 0 || cpu > kMaxCpuId) return;
  const size_t word = static_cast<size_t>(cpu) / kWordBits;
  if (word >= words_.size()) words_.resize(word + 1);
  words_[word] |= uint64_t{1} << (cpu % kWordBits);
}

void CpuSet::Remove(int cpu) {
  if (cpu < 0) return;
  const size_t word = static_cast<size_t>(cpu) / kWordBits;
  if (word >= words_.size()) return;
  words_[word] &= ~(uint64_t{1} << (cpu % kWordBits));
  Trim();
}

void CpuSet::AddRange(int first, int last) {
  first = std::max(first, 0);
  last = std::min(last, kMaxCpuId);
  if (last < first) return;
  const size_t first_word = static_cast<size_t>(first) / kWordBits;
  const size_t last_word = static_cast<size_t>(last) / kWordBits;
  if (last_word >= words_.size()) words_.resize(last_word + 1);
  const uint64_t first_mask = kAllOnes << (first % kWordBits);
  const uint64_t last_mask = kAllOnes >> (kWordBits - 1 - last % kWordBits);
  if (first_word == last_word) {
    words_[first_word] |= first_mask & last_mask;
    return;
  }
  words_[first_word] |= first_mask;
  std::fill(words_.begin() + first_word + 1, words_.begin() + last_word, kAllOnes);
  words_[last_word] |= last_mask;
}

int CpuSet::Size() const {
  int n = 0;
  for (uint64_t w : words_) n += std::popcount(w);
  return n;
}

std::optional<int> CpuSet::First() const {
  const int first = NextSet(0);
  if (first < 0) return std::nullopt;
  return first;
}

std::optional<int> CpuSet::Last() const {
  if (words_.empty()) return std::nullopt;
  // Trimming guarantees the last word is non-zero.
  return static_cast<int>(words_.size() - 1) * kWordBits + (kWordBits - 1) -
         std::countl_zero(words_.back());
}

CpuSet CpuSet::Union(const CpuSet& other) const {
  CpuSet result = *this;
  result |= other;
  return result;
}

CpuSet CpuSet::Intersection(const CpuSet& other) const {
  CpuSet result = *this;
  result &= other;
  return result;
}

CpuSet CpuSet::Difference(const CpuSet& other) const {
  CpuSet result = *this;
  result -= other;
  return result;
}

CpuSet& CpuSet::operator|=(const CpuSet& other) {
  if (other.words_.size() > words_.size()) words_.resize(other.words_.size());
  for (size_t i = 0; i < other.words_.size(); ++i) words_[i] |= other.words_[i];
  return *this;
}

CpuSet& CpuSet::operator&=(const CpuSet& other) {
  if (words_.size() > other.words_.size()) words_.resize(other.words_.size());
  for (size_t i = 0; i < words_.size(); ++i) words_[i] &= other.words_[i];
  Trim();
  return *this;
}

CpuSet& CpuSet::operator-=(const CpuSet& other) {
  const size_t n = std::min(words_.size(), other.words_.size());
  for (size_t i = 0; i < n; ++i) words_[i] &= ~other.words_[i];
  Trim();
  return *this;
}

bool CpuSet::IsSubsetOf(const CpuSet& other) const {
  // Both are trimmed, so a longer set has a member beyond other's last word.
  if (words_.size() > other.words_.size()) return false;
  for (size_t i = 0; i < words_.size(); ++i) {
    if (words_[i] & ~other.words_[i]) return false;
  }
  return true;
}

bool CpuSet::Intersects(const CpuSet& other) const {
  const size_t n = std::min(words_.size(), other.words_.size());
  for (size_t i = 0; i < n; ++i) {
    if (words_[i] & other.words_[i]) return true;
  }
  return false;
}

std::vector<int> CpuSet::ToVector() const {
  std::vector<int> out;
  out.reserve(static_cast<size_t>(Size()));
  for (int cpu : *this) out.push_back(cpu);
  return out;
}

int CpuSet::NextSet(int from) const {
  if (from < 0) from = 0;
  size_t word = static_cast<size_t>(from) / kWordBits;
  if (word >= words_.size()) return -1;
  uint64_t bits = words_[word] & (kAllOnes << (from % kWordBits));
  while (bits == 0) {
    if (++word >= words_.size()) return -1;
    bits = words_[word];
  }
  return static_cast<int>(word) * kWordBits + std::countr_zero(bits);
}

int CpuSet::NextClear(int from) const {
  if (from < 0) from = 0;
  size_t word = static_cast<size_t>(from) / kWordBits;
  if (word >= words_.size()) return from;
  uint64_t clear = ~words_[word] & (kAllOnes << (from % kWordBits));
  while (clear == 0) {
    if (++word >= words_.size()) return static_cast<int>(word) * kWordBits;
    clear = ~words_[word];
  }
  return static_cast<int>(word) * kWordBits + std::countr_zero(clear);
}

void CpuSet::Trim() {
  while (!words_.empty() && words_.back() == 0) words_.pop_back();
}

std::ostream& operator<<(std::ostream& os, const CpuSet& set) { return os << set.ToString(); }

}  // namespace topodra
