#include "driver/state/canonical_json.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace topodra::state::canonical {
namespace {

// Integers of up to 18 digits are int64 values whichever way they are read; longer ones may turn
// into floats, whose printed form is not their text.
constexpr int kMaxDigits = 18;

// The bytes a canonical string holds as they are: printable ASCII but '"' and '\\'.
constexpr std::array<bool, 256> MakePlain() {
  std::array<bool, 256> plain{};
  for (int c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
  return plain;
}
constexpr std::array<bool, 256> kPlain = MakePlain();
// The characters after a backslash of the short escapes: \" \\ \b \f \n \r \t.
constexpr std::array<bool, 256> MakeShortEscape() {
  std::array<bool, 256> escape{};
  for (const char c : {'"', '\\', 'b', 'f', 'n', 'r', 't'})
    escape[static_cast<unsigned char>(c)] = true;
  return escape;
}
constexpr std::array<bool, 256> kShortEscape = MakeShortEscape();

// The length of the run of plain bytes (kPlain) at p, at most 16, 16 bytes at a time: the device
// metadata texts inside a state file have an escape every few bytes, so a byte loop paid a few
// instructions for each byte and a word at a time (SWAR) rarely found a whole plain word.
#if defined(__SSE2__)
inline int PlainRun16(const char* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  // Signed bytes: the non-ASCII ones (0x80 and up) are negative, so "less than 0x20" takes them
  // with the control characters.
  const __m128i special = _mm_or_si128(
      _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
      _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
  const int mask = _mm_movemask_epi8(special);
  return mask == 0 ? 16 : __builtin_ctz(static_cast<unsigned>(mask));
}
#endif

class Scanner {
 public:
  Scanner(absl::string_view text, int max_depth, int record_depth = 0,
          std::vector<Piece>* pieces = nullptr)
      : t_(text), max_depth_(max_depth), record_depth_(record_depth), pieces_(pieces) {}

  // True when a canonical value starts at pos_; pos_ is then after it.
  bool Value(int depth) {
    if (pos_ >= t_.size()) return false;
    switch (t_[pos_]) {
      case '{':
        return depth < max_depth_ && Object(depth + 1);
      case '[':
        return depth < max_depth_ && Array(depth + 1);
      case '"':
        return String(nullptr);
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        return Number();
    }
  }
  size_t pos() const { return pos_; }

 private:
  bool Literal(absl::string_view word) {
    if (t_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // "0" or -?[1-9][0-9]*, not "-0".
  bool Number() {
    size_t p = pos_;
    if (p < t_.size() && t_[p] == '-') ++p;
    const size_t first = p;
    while (p < t_.size() && t_[p] >= '0' && t_[p] <= '9') ++p;
    const size_t digits = p - first;
    if (digits == 0 || digits > kMaxDigits) return false;
    if (t_[first] == '0' && (digits > 1 || first != pos_)) return false;
    pos_ = p;
    return true;
  }

  // The escapes the canonical printer writes: \" \\ \b \f \n \r \t, and \u00xx (lowercase) for
  // the other control characters; everything else as it is, in valid UTF-8. `plain` (when not
  // null) is set to whether the string had no escape at all.
  bool String(bool* plain) {
    if (plain != nullptr) *plain = true;
    // In locals: a store to pos_ per byte cannot be kept in a register (the text is char, which
    // may alias it), and strings are most of a state file's bytes.
    const char* const data = t_.data();
    const char* const end = data + t_.size();
    const char* p = data + pos_ + 1;  // after the opening quote
    for (;;) {
#if defined(__SSE2__)
      while (end - p >= 16) {
        const int run = PlainRun16(p);
        p += run;
        if (run < 16) break;
      }
#endif
      while (p < end && kPlain[static_cast<unsigned char>(*p)]) ++p;  // the plain run at once
      if (p == end) return false;
      const unsigned char c = static_cast<unsigned char>(*p);
      if (c == '"') {
        pos_ = static_cast<size_t>(p + 1 - data);
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        if (plain != nullptr) *plain = false;
        if (p + 1 < end && kShortEscape[static_cast<unsigned char>(p[1])]) {
          p += 2;
          continue;
        }
        pos_ = static_cast<size_t>(p - data);
        if (!Escape()) return false;
      } else {
        pos_ = static_cast<size_t>(p - data);
        if (!Utf8()) return false;
      }
      p = data + pos_;
    }
  }

  bool Escape() {
    if (pos_ + 1 >= t_.size()) return false;
    const char e = t_[pos_ + 1];
    if (kShortEscape[static_cast<unsigned char>(e)]) {
      pos_ += 2;
      return true;
    }
    // \u00xx for a control character that has no short escape.
    if (e != 'u' || pos_ + 6 > t_.size() || t_.substr(pos_ + 2, 2) != "00") return false;
    auto hex = [](char h) {
      return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
    };
    const int hi = hex(t_[pos_ + 4]);
    const int lo = hex(t_[pos_ + 5]);
    if (hi < 0 || lo < 0) return false;
    const int c = hi * 16 + lo;
    if (c >= 0x20 || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') return false;
    pos_ += 6;
    return true;
  }

  // One multi-byte UTF-8 sequence as RFC 3629 allows it (no overlong forms, no surrogates, at
  // most U+10FFFF).
  bool Utf8() {
    const auto byte = [this](size_t i) -> int {
      return pos_ + i < t_.size() ? static_cast<unsigned char>(t_[pos_ + i]) : -1;
    };
    const int b0 = byte(0);
    int n = 0;
    int lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      n = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      n = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    const int b1 = byte(1);
    if (b1 < lo || b1 > hi) return false;
    for (int i = 2; i < n; ++i) {
      const int b = byte(i);
      if (b < 0x80 || b > 0xBF) return false;
    }
    pos_ += n;
    return true;
  }

  bool Object(int depth) {
    ++pos_;  // {
    if (pos_ < t_.size() && t_[pos_] == '}') {
      ++pos_;
      return true;
    }
    absl::string_view previous;
    bool first = true;
    while (pos_ < t_.size() && t_[pos_] == '"') {
      const size_t start = pos_;
      bool plain = false;
      if (!String(&plain) || !plain) return false;
      const absl::string_view key = t_.substr(start + 1, pos_ - start - 2);
      // std::map's order, as the printer writes them: byte order, no duplicates.
      if (!first && !(previous < key)) return false;
      previous = key;
      first = false;
      if (pos_ >= t_.size() || t_[pos_] != ':') return false;
      ++pos_;
      if (!RecordedValue(depth, key)) return false;
      if (pos_ >= t_.size()) return false;
      if (t_[pos_] == '}') {
        ++pos_;
        return true;
      }
      if (t_[pos_] != ',') return false;
      ++pos_;
    }
    return false;
  }

  bool Array(int depth) {
    ++pos_;  // [
    if (pos_ < t_.size() && t_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (RecordedValue(depth, absl::string_view())) {
      if (pos_ >= t_.size()) return false;
      if (t_[pos_] == ']') {
        ++pos_;
        return true;
      }
      if (t_[pos_] != ',') return false;
      ++pos_;
    }
    return false;
  }

  // Value, listed in pieces_ when `depth` is at most record_depth_.
  bool RecordedValue(int depth, absl::string_view key) {
    if (pieces_ == nullptr || depth > record_depth_) return Value(depth);
    const size_t index = pieces_->size();
    const size_t start = pos_;
    pieces_->push_back(Piece{depth, key, absl::string_view()});
    if (!Value(depth)) return false;
    (*pieces_)[index].value = t_.substr(start, pos_ - start);
    return true;
  }

  absl::string_view t_;
  int max_depth_;
  int record_depth_;
  std::vector<Piece>* pieces_;
  size_t pos_ = 0;
};

// The end of the value at `pos` of text ScanCanonical accepted: strings and brackets only.
size_t SkipChecked(absl::string_view t, size_t pos) {
  int depth = 0;
  for (size_t i = pos; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '"') {
      // The closing quote: the next one not escaped (preceded by an even run of backslashes).
      for (;;) {
        const void* q = std::memchr(t.data() + i + 1, '"', t.size() - i - 1);
        if (q == nullptr) return t.size();
        i = static_cast<size_t>(static_cast<const char*>(q) - t.data());
        size_t backslashes = 0;
        while (t[i - 1 - backslashes] == '\\') ++backslashes;
        if (backslashes % 2 == 0) break;
      }
      if (depth == 0) return i + 1;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
      if (depth < 0) return i;  // the end of the enclosing container
    } else if (c == ',' && depth == 0) {
      return i;
    }
  }
  return t.size();
}

}  // namespace

size_t ScanCanonical(absl::string_view text, int max_depth) {
  Scanner s(text, max_depth);
  return s.Value(0) ? s.pos() : 0;
}

size_t ScanCanonicalPieces(absl::string_view text, int max_depth, int record_depth,
                           std::vector<Piece>* pieces) {
  pieces->clear();
  Scanner s(text, max_depth, record_depth, pieces);
  if (s.Value(0)) return s.pos();
  pieces->clear();  // a partial list, whose last piece has no value yet
  return 0;
}

size_t PieceEnd(const std::vector<Piece>& pieces, size_t i) {
  size_t end = i + 1;
  while (end < pieces.size() && pieces[end].depth > pieces[i].depth) ++end;
  return end;
}

bool ObjectMembers(absl::string_view object, Members* out) {
  out->clear();
  if (object.size() < 2 || object.front() != '{' || object.back() != '}') return false;
  size_t pos = 1;
  while (pos < object.size() - 1) {
    const size_t key_end = object.find('"', pos + 1);  // keys have no escapes
    if (object[pos] != '"' || key_end == absl::string_view::npos) return false;
    const absl::string_view key = object.substr(pos + 1, key_end - pos - 1);
    const size_t value = key_end + 2;  // after '":'
    const size_t end = SkipChecked(object, value);
    out->emplace_back(key, object.substr(value, end - value));
    pos = end + 1;  // after ',' (or past the closing brace)
  }
  return true;
}

bool ArrayElements(absl::string_view array, std::vector<absl::string_view>* out) {
  out->clear();
  if (array.size() < 2 || array.front() != '[' || array.back() != ']') return false;
  size_t pos = 1;
  while (pos < array.size() - 1) {
    const size_t end = SkipChecked(array, pos);
    out->push_back(array.substr(pos, end - pos));
    pos = end + 1;
  }
  return true;
}

bool PlainString(absl::string_view value, absl::string_view* out) {
  if (value.size() < 2 || value.front() != '"' || value.back() != '"') return false;
  const absl::string_view inner = value.substr(1, value.size() - 2);
  if (inner.find('\\') != absl::string_view::npos) return false;
  *out = inner;
  return true;
}

bool UnescapedString(absl::string_view quoted, std::string* out) {
  if (quoted.size() < 2 || quoted.front() != '"' || quoted.back() != '"') return false;
  out->clear();
  out->reserve(quoted.size());
  for (size_t i = 1; i + 1 < quoted.size(); ++i) {
    // The run up to the next escape, at once.
    const size_t escape = std::min(quoted.find('\\', i), quoted.size() - 1);
    out->append(quoted.data() + i, escape - i);
    i = escape;
    if (i + 1 >= quoted.size()) break;
    if (i + 2 >= quoted.size()) return false;
    switch (quoted[++i]) {
      case '"':
        *out += '"';
        break;
      case '\\':
        *out += '\\';
        break;
      case 'b':
        *out += '\b';
        break;
      case 'f':
        *out += '\f';
        break;
      case 'n':
        *out += '\n';
        break;
      case 'r':
        *out += '\r';
        break;
      case 't':
        *out += '\t';
        break;
      case 'u': {
        // \u00xx: a control character (ScanCanonical allows no other \u).
        int v = 0;
        if (i + 4 >= quoted.size()) return false;
        for (int k = 1; k <= 4; ++k) {
          const char h = quoted[i + k];
          const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
          if (d < 0) return false;
          v = v * 16 + d;
        }
        if (v >= 0x20) return false;
        *out += static_cast<char>(v);
        i += 4;
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

}  // namespace topodra::state::canonical
