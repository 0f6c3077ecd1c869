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

CpuSet::CpuSet(CpuSet&& other) noexcept
    : first_word_(std::exchange(other.first_word_, 0)), words_(std::move(other.words_)) {
  other.words_.clear();
}

CpuSet& CpuSet::operator=(CpuSet&& other) noexcept {
  if (this != &other) {
    first_word_ = std::exchange(other.first_word_, 0);
    words_ = std::move(other.words_);
    other.words_.clear();
  }
  return *this;
}

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
  if (cpu < 0 || cpu > kMaxCpuId) return false;
  return (WordAt(static_cast<size_t>(cpu) / kWordBits) >> (cpu % kWordBits)) & 1;
}

void CpuSet::Add(int cpu) {
  if (cpu < 0 || cpu > kMaxCpuId) return;
  const size_t word = static_cast<size_t>(cpu) / kWordBits;
  Cover(word, word);
  words_[word - static_cast<size_t>(first_word_)] |= uint64_t{1} << (cpu % kWordBits);
}

void CpuSet::Remove(int cpu) {
  if (cpu < 0 || cpu > kMaxCpuId) return;
  const size_t word = static_cast<size_t>(cpu) / kWordBits;
  if (word < static_cast<size_t>(first_word_) || word >= EndWord()) return;
  words_[word - static_cast<size_t>(first_word_)] &= ~(uint64_t{1} << (cpu % kWordBits));
  Trim();
}

void CpuSet::AddRange(int first, int last) {
  first = std::max(first, 0);
  last = std::min(last, kMaxCpuId);
  if (last < first) return;
  const size_t first_word = static_cast<size_t>(first) / kWordBits;
  const size_t last_word = static_cast<size_t>(last) / kWordBits;
  Cover(first_word, last_word);
  // Both end masks are non-zero, so the window stays trimmed.
  const uint64_t first_mask = kAllOnes << (first % kWordBits);
  const uint64_t last_mask = kAllOnes >> (kWordBits - 1 - last % kWordBits);
  const size_t lo = first_word - static_cast<size_t>(first_word_);
  const size_t hi = last_word - static_cast<size_t>(first_word_);
  if (lo == hi) {
    words_[lo] |= first_mask & last_mask;
    return;
  }
  words_[lo] |= first_mask;
  std::fill(words_.begin() + static_cast<std::ptrdiff_t>(lo + 1),
            words_.begin() + static_cast<std::ptrdiff_t>(hi), kAllOnes);
  words_[hi] |= last_mask;
}

int CpuSet::Size() const {
  int n = 0;
  for (uint64_t w : words_) n += std::popcount(w);
  return n;
}

std::optional<int> CpuSet::First() const {
  if (words_.empty()) return std::nullopt;
  // Trimming guarantees the first word is non-zero.
  return first_word_ * kWordBits + std::countr_zero(words_.front());
}

std::optional<int> CpuSet::Last() const {
  if (words_.empty()) return std::nullopt;
  // Trimming guarantees the last word is non-zero.
  return static_cast<int>(EndWord() - 1) * kWordBits + (kWordBits - 1) -
         std::countl_zero(words_.back());
}

// The binary operations build their result at its final (trimmed) size, so each allocates at
// most once and leaves no slack capacity behind in sets the daemon keeps.

CpuSet CpuSet::Union(const CpuSet& other) const {
  if (other.words_.empty()) return *this;
  if (words_.empty()) return other;
  const size_t lo = static_cast<size_t>(std::min(first_word_, other.first_word_));
  const size_t end = std::max(EndWord(), other.EndWord());
  CpuSet result;
  result.first_word_ = static_cast<int32_t>(lo);
  result.words_.resize(end - lo);
  // Each operand's end words are non-zero, so the union is already trimmed.
  std::copy(words_.begin(), words_.end(),
            result.words_.begin() + static_cast<std::ptrdiff_t>(first_word_ - result.first_word_));
  const size_t shift = static_cast<size_t>(other.first_word_ - result.first_word_);
  for (size_t i = 0; i < other.words_.size(); ++i) result.words_[shift + i] |= other.words_[i];
  return result;
}

CpuSet CpuSet::Intersection(const CpuSet& other) const {
  const size_t lo = static_cast<size_t>(std::max(first_word_, other.first_word_));
  const size_t end = std::min(EndWord(), other.EndWord());
  // Narrow to the non-zero part first so the result is allocated at its final size.
  size_t first = lo;
  while (first < end && (WordAt(first) & other.WordAt(first)) == 0) ++first;
  if (first >= end) return CpuSet();
  size_t last = end - 1;
  while ((WordAt(last) & other.WordAt(last)) == 0) --last;
  CpuSet result;
  result.first_word_ = static_cast<int32_t>(first);
  result.words_.reserve(last - first + 1);
  for (size_t w = first; w <= last; ++w) result.words_.push_back(WordAt(w) & other.WordAt(w));
  return result;
}

CpuSet CpuSet::Difference(const CpuSet& other) const {
  const size_t lo = static_cast<size_t>(first_word_);
  const size_t end = EndWord();
  size_t first = lo;
  while (first < end && (WordAt(first) & ~other.WordAt(first)) == 0) ++first;
  if (first >= end) return CpuSet();
  size_t last = end - 1;
  while ((WordAt(last) & ~other.WordAt(last)) == 0) --last;
  CpuSet result;
  result.first_word_ = static_cast<int32_t>(first);
  result.words_.reserve(last - first + 1);
  for (size_t w = first; w <= last; ++w) result.words_.push_back(WordAt(w) & ~other.WordAt(w));
  return result;
}

CpuSet& CpuSet::operator|=(const CpuSet& other) {
  if (other.words_.empty()) return *this;
  Cover(static_cast<size_t>(other.first_word_), other.EndWord() - 1);
  // Cover keeps other's window inside ours; other's end words are non-zero, so we stay trimmed.
  const size_t shift = static_cast<size_t>(other.first_word_ - first_word_);
  for (size_t i = 0; i < other.words_.size(); ++i) words_[shift + i] |= other.words_[i];
  return *this;
}

CpuSet& CpuSet::operator&=(const CpuSet& other) {
  const size_t lo = static_cast<size_t>(std::max(first_word_, other.first_word_));
  const size_t end = std::min(EndWord(), other.EndWord());
  if (lo >= end) {
    words_.clear();
    first_word_ = 0;
    return *this;
  }
  // Drop the words past the overlap, zero the ones below it and let Trim drop those.
  words_.resize(end - static_cast<size_t>(first_word_));
  for (size_t w = static_cast<size_t>(first_word_); w < end; ++w) {
    words_[w - static_cast<size_t>(first_word_)] &= w < lo ? 0 : other.WordAt(w);
  }
  Trim();
  return *this;
}

CpuSet& CpuSet::operator-=(const CpuSet& other) {
  const size_t lo = static_cast<size_t>(std::max(first_word_, other.first_word_));
  const size_t end = std::min(EndWord(), other.EndWord());
  if (lo >= end) return *this;
  for (size_t w = lo; w < end; ++w) {
    words_[w - static_cast<size_t>(first_word_)] &= ~other.WordAt(w);
  }
  Trim();
  return *this;
}

bool CpuSet::IsSubsetOf(const CpuSet& other) const {
  if (words_.empty()) return true;
  // Both are trimmed, so a window reaching outside other's has a member other lacks.
  if (first_word_ < other.first_word_ || EndWord() > other.EndWord()) return false;
  const size_t shift = static_cast<size_t>(first_word_ - other.first_word_);
  for (size_t i = 0; i < words_.size(); ++i) {
    if (words_[i] & ~other.words_[shift + i]) return false;
  }
  return true;
}

bool CpuSet::Intersects(const CpuSet& other) const {
  const size_t lo = static_cast<size_t>(std::max(first_word_, other.first_word_));
  const size_t end = std::min(EndWord(), other.EndWord());
  for (size_t w = lo; w < end; ++w) {
    if (WordAt(w) & other.WordAt(w)) return true;
  }
  return false;
}

std::vector<int> CpuSet::ToVector() const {
  std::vector<int> out;
  out.reserve(static_cast<size_t>(Size()));
  for (int cpu : *this) out.push_back(cpu);
  return out;
}

uint64_t CpuSet::WordAt(size_t word) const {
  const size_t first = static_cast<size_t>(first_word_);
  if (word < first || word >= first + words_.size()) return 0;
  return words_[word - first];
}

int CpuSet::NextSet(int from) const {
  if (from < 0) from = 0;
  const size_t first = static_cast<size_t>(first_word_);
  const size_t end = EndWord();
  size_t word = static_cast<size_t>(from) / kWordBits;
  if (word >= end) return -1;
  uint64_t bits;
  if (word < first) {
    // from lies below the window, so every stored bit is at or after it.
    word = first;
    bits = words_[0];
  } else {
    bits = words_[word - first] & (kAllOnes << (from % kWordBits));
  }
  while (bits == 0) {
    if (++word >= end) return -1;
    bits = words_[word - first];
  }
  return static_cast<int>(word) * kWordBits + std::countr_zero(bits);
}

int CpuSet::NextClear(int from) const {
  if (from < 0) from = 0;
  const size_t first = static_cast<size_t>(first_word_);
  const size_t end = EndWord();
  size_t word = static_cast<size_t>(from) / kWordBits;
  if (word < first || word >= end) return from;
  uint64_t clear = ~words_[word - first] & (kAllOnes << (from % kWordBits));
  while (clear == 0) {
    if (++word >= end) return static_cast<int>(word) * kWordBits;
    clear = ~words_[word - first];
  }
  return static_cast<int>(word) * kWordBits + std::countr_zero(clear);
}

void CpuSet::Cover(size_t lo, size_t hi) {
  if (words_.empty()) {
    words_.assign(hi - lo + 1, uint64_t{0});
    first_word_ = static_cast<int32_t>(lo);
    return;
  }
  const size_t first = static_cast<size_t>(first_word_);
  const size_t end = EndWord();
  const size_t new_first = std::min(lo, first);
  const size_t new_end = std::max(hi + 1, end);
  if (new_first == first) {
    if (new_end > end) words_.resize(new_end - first);
    return;
  }
  if (new_end == end) {
    // One insert: a single shift (or reallocation) however far down the window grows.
    words_.insert(words_.begin(), first - new_first, uint64_t{0});
  } else {
    std::vector<uint64_t> grown(new_end - new_first);
    std::copy(words_.begin(), words_.end(),
              grown.begin() + static_cast<std::ptrdiff_t>(first - new_first));
    words_ = std::move(grown);
  }
  first_word_ = static_cast<int32_t>(new_first);
}

void CpuSet::Trim() {
  while (!words_.empty() && words_.back() == 0) words_.pop_back();
  size_t leading = 0;
  while (leading < words_.size() && words_[leading] == 0) ++leading;
  if (leading > 0) {
    words_.erase(words_.begin(), words_.begin() + static_cast<std::ptrdiff_t>(leading));
    first_word_ += static_cast<int32_t>(leading);
  }
  if (words_.empty()) first_word_ = 0;
}

std::ostream& operator<<(std::ostream& os, const CpuSet& set) { return os << set.ToString(); }

}  // namespace topodra
