#include "common/json_parse.h"

#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace topodra::files {

absl::StatusOr<nlohmann::json> ParseJsonBounded(absl::string_view text, int max_depth) {
  using nlohmann::json;
  bool too_deep = false;
  json doc;
  try {
    doc = json::parse(
        text.begin(), text.end(),
        [&too_deep, max_depth](int depth, json::parse_event_t, json&) {
          if (depth > max_depth) too_deep = true;
          return !too_deep;
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/false);
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
