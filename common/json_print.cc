#include "common/json_print.h"

#include <bit>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace topodra {
namespace {

using json = nlohmann::json;

std::string Nlohmann(const json& value, int indent) {
  return value.dump(indent, ' ', false, json::error_handler_t::replace);
}

constexpr uint64_t kOnes = 0x0101010101010101ULL;
constexpr uint64_t kHigh = 0x8080808080808080ULL;

// The high bit of each byte of `w` that is below 0x20, '"', '\\' or above 0x7F, by the usual
// word-at-a-time tests ((v - n*ones) & ~v: a byte below n). A borrow may flag a byte above a
// flagged one, never below: the lowest flag is always a byte that needs handling.
uint64_t SpecialBytes(uint64_t w) {
  const uint64_t quote = w ^ (0x22 * kOnes);
  const uint64_t backslash = w ^ (0x5C * kOnes);
  return (w | ((w - 0x20 * kOnes) & ~w) | ((quote - kOnes) & ~quote) |
          ((backslash - kOnes) & ~backslash)) &
         kHigh;
}

// A string as nlohmann prints it. ASCII is escaped here, jumping a word at a time to the next
// byte that needs it; a string with any byte above 0x7F goes to nlohmann, which checks its UTF-8
// (and replaces what is not, "replace").
void AppendString(const std::string& s, std::string* out) {
  const size_t mark = out->size();
  out->push_back('"');
  const char* data = s.data();
  const size_t n = s.size();
  size_t plain = 0;  // start of the run not yet copied
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, data + i, sizeof(w));
      // The first byte in memory the lowest, so that borrows run toward later bytes.
      if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
      const uint64_t special = SpecialBytes(w);
      if (special == 0) {
        i += 8;
        continue;
      }
      i += static_cast<size_t>(std::countr_zero(special)) / 8;
    }
    const unsigned char c = static_cast<unsigned char>(data[i]);
    if (c >= 0x80) {
      out->resize(mark);
      out->append(Nlohmann(json(s), -1));
      return;
    }
    if (c >= 0x20 && c != '"' && c != '\\') {  // the tail, byte by byte
      ++i;
      continue;
    }
    out->append(data + plain, i - plain);
    plain = ++i;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default: {
        const char* hex = "0123456789abcdef";
        const char u[] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xF]};
        out->append(u, sizeof(u));
      }
    }
  }
  out->append(data + plain, n - plain);
  out->push_back('"');
}

// nlohmann's own print of a value this printer leaves to it (floating point in its shortest
// form, binary, discarded), its lines after the first indented `at` spaces more.
void AppendByNlohmann(const json& value, int indent, int at, std::string* out) {
  const std::string text = Nlohmann(value, indent);
  size_t from = 0;
  for (size_t nl; (nl = text.find('\n', from)) != std::string::npos; from = nl + 1) {
    out->append(text, from, nl + 1 - from);
    out->append(static_cast<size_t>(at), ' ');
  }
  out->append(text, from, std::string::npos);
}

// `at`: the indentation of the line the value starts on (pretty only).
void Append(const json& value, int indent, int at, std::string* out) {
  const bool pretty = indent >= 0;
  switch (value.type()) {
    case json::value_t::null:
      out->append("null");
      return;
    case json::value_t::boolean:
      out->append(value.get<bool>() ? "true" : "false");
      return;
    case json::value_t::number_integer:
      absl::StrAppend(out, value.get<int64_t>());
      return;
    case json::value_t::number_unsigned:
      absl::StrAppend(out, value.get<uint64_t>());
      return;
    case json::value_t::string:
      AppendString(value.get_ref<const std::string&>(), out);
      return;
    case json::value_t::array: {
      if (value.empty()) {
        out->append("[]");
        return;
      }
      out->append(pretty ? "[\n" : "[");
      bool first = true;
      for (const json& e : value.get_ref<const json::array_t&>()) {
        if (!first) out->append(pretty ? ",\n" : ",");
        first = false;
        if (pretty) out->append(static_cast<size_t>(at + indent), ' ');
        Append(e, indent, at + indent, out);
      }
      if (pretty) {
        out->push_back('\n');
        out->append(static_cast<size_t>(at), ' ');
      }
      out->push_back(']');
      return;
    }
    case json::value_t::object: {
      if (value.empty()) {
        out->append("{}");
        return;
      }
      out->append(pretty ? "{\n" : "{");
      bool first = true;
      // The map itself: items() would make an iteration proxy per member.
      for (const auto& [key, e] : value.get_ref<const json::object_t&>()) {
        if (!first) out->append(pretty ? ",\n" : ",");
        first = false;
        if (pretty) out->append(static_cast<size_t>(at + indent), ' ');
        AppendString(key, out);
        out->append(pretty ? ": " : ":");
        Append(e, indent, at + indent, out);
      }
      if (pretty) {
        out->push_back('\n');
        out->append(static_cast<size_t>(at), ' ');
      }
      out->push_back('}');
      return;
    }
    default:  // floating point, binary, discarded
      AppendByNlohmann(value, indent, at, out);
      return;
  }
}

}  // namespace

void AppendJsonString(const std::string& s, std::string* out) { AppendString(s, out); }

void AppendJson(const json& value, int indent, int at, std::string* out) {
  Append(value, indent < 0 ? -1 : indent, indent < 0 ? 0 : at, out);
}

}  // namespace topodra
