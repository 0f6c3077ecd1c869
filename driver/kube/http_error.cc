// The absl::Status of an HTTP error answer, shared by every RestClient so callers can test codes
// the same way whatever the transport.
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "driver/kube/rest_client.h"

namespace topodra::kube {
namespace {

constexpr char kHttpCodePayload[] = "type.topodra.dev/kube.HttpCode";

absl::StatusCode CodeForHttp(int http, const std::string& reason) {
  switch (http) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    default:
      if (http >= 500 && http <= 599) return absl::StatusCode::kUnavailable;
      if (http >= 400 && http <= 499) return absl::StatusCode::kFailedPrecondition;
      return absl::StatusCode::kUnknown;
  }
}

}  // namespace

absl::Status HttpError(int http_code, const std::string& reason, const std::string& text) {
  absl::Status error(CodeForHttp(http_code, reason), text);
  error.SetPayload(kHttpCodePayload, absl::Cord(absl::StrCat(http_code)));
  return error;
}

std::optional<int> HttpCodeOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kHttpCodePayload);
  int code = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &code)) return std::nullopt;
  return code;
}

}  // namespace topodra::kube
