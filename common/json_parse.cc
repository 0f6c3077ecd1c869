#include "common/json_parse.h"

#include <algorithm>
#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace topodra::files {

namespace {

// The most arrays and objects open at once, counting brackets outside strings. Exact for valid
// JSON; for malformed text the parser fails whatever this says.
int NestingOf(absl::string_view text) {
  int depth = 0;
  int most = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      most = std::max(most, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return most;
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJsonBounded(absl::string_view text, int max_depth) {
  using nlohmann::json;
  bool too_deep = false;
  json doc;
  // A document within the bound parses without the per-value callback, which costs about as
  // much as the parse itself (the state files of thousands of claims are read at every start).
  const bool shallow = NestingOf(text) <= max_depth;
  try {
    if (shallow) {
      doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true,
                        /*ignore_comments=*/false);
    } else {
      doc = json::parse(
          text.begin(), text.end(),
          [&too_deep, max_depth](int depth, json::parse_event_t, json&) {
            if (depth > max_depth) too_deep = true;
            return !too_deep;
          },
          /*allow_exceptions=*/true, /*ignore_comments=*/false);
    }
  } catch (const json::exception& e) {
    // what() is "[json.exception.parse_error.101] parse error at line 1, ..."; the tag in
    // brackets helps nobody reading the message.
    absl::string_view what = e.what();
    if (const size_t end = what.find("] "); absl::StartsWith(what, "[") && end != what.npos) {
      what.remove_prefix(end + 2);
    }
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON: ", what));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse JSON: ", e.what()));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON: nested deeper than ", max_depth, " levels"));
  }
  return doc;
}

}  // namespace topodra::files
