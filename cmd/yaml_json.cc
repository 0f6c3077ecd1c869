#include "cmd/yaml_json.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"

namespace topodra::cmd {
namespace {

using nlohmann::json;

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool ParseFloat(const std::string& s, double* out) {
  if (s.empty() || s.find_first_of("0123456789") == std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

// Offset of the first byte that is not part of well-formed UTF-8, or npos.
size_t InvalidUtf8At(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string::npos;
}

// YAML escapes ("\uD800") can produce bytes that are not UTF-8 even from valid UTF-8 text.
const std::string& CheckedScalar(const YAML::Node& n) {
  if (InvalidUtf8At(n.Scalar()) != std::string::npos) {
    throw YAML::Exception(n.Mark(), "scalar is not valid UTF-8 after unescaping");
  }
  return n.Scalar();
}

json ScalarToJson(const YAML::Node& n) {
  const std::string& s = CheckedScalar(n);
  if (n.Tag() == "!") return s;  // quoted: always a string
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  int64_t i = 0;
  if (ParseInt(s, &i)) return i;
  double d = 0;
  if (ParseFloat(s, &d)) return d;
  return s;
}

json NodeToJson(const YAML::Node& n, int depth) {
  if (depth > 200) throw YAML::Exception(n.Mark(), "nesting too deep");
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return ScalarToJson(n);
    case YAML::NodeType::Sequence: {
      json arr = json::array();
      for (const YAML::Node& c : n) arr.push_back(NodeToJson(c, depth + 1));
      return arr;
    }
    case YAML::NodeType::Map: {
      json obj = json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar())
          throw YAML::Exception(kv.first.Mark(), "map keys must be scalars");
        obj[CheckedScalar(kv.first)] = NodeToJson(kv.second, depth + 1);
      }
      return obj;
    }
  }
  return nullptr;
}

// Kubernetes tooling reads YAML 1.1, where plain scalars such as yes, off, 0x1f or 0002:01:00.0
// (a base-60 number) are not strings. Only unmistakable words stay plain.
bool NeedsQuotes(const std::string& s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s.front())) || s.back() == ' ') {
    return true;
  }
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '/' &&
        c != '-' && c != ' ') {
      return true;
    }
  }
  std::string lower = s;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* word : {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}) {
    if (lower == word) return true;
  }
  return false;
}

void Emit(YAML::Emitter& out, const json& j) {
  switch (j.type()) {
    case json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [k, v] : j.items()) {
        out << YAML::Key;
        if (NeedsQuotes(k)) out << YAML::DoubleQuoted;
        out << k << YAML::Value;
        Emit(out, v);
      }
      out << YAML::EndMap;
      break;
    case json::value_t::array:
      out << YAML::BeginSeq;
      for (const json& v : j) Emit(out, v);
      out << YAML::EndSeq;
      break;
    case json::value_t::string: {
      const std::string s = j.get<std::string>();
      if (NeedsQuotes(s)) out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case json::value_t::null:
      out << YAML::Null;
      break;
    default:
      out << DumpJson(j);
      break;
  }
}

}  // namespace

absl::StatusOr<json> ParseJsonOrYaml(const std::string& text) {
  // Kubernetes objects are UTF-8; checking up front keeps every later string valid, so JSON
  // written from them round-trips.
  if (const size_t bad = InvalidUtf8At(text); bad != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("input is not valid UTF-8 at byte ", bad));
  }
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) return j;
  try {
    return NodeToJson(YAML::Load(text), 0);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("neither JSON nor YAML: line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  }
}

std::string ToYaml(const json& j) {
  YAML::Emitter out;
  Emit(out, j);
  return std::string(out.c_str()) + "\n";
}

}  // namespace topodra::cmd
