// Text of an absl::Status for messages and logs.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace topodra {

// The status message alone, without the code prefix ToString() adds: our messages already say
// what failed, and they are compared in tests and shown to users verbatim. Built from data and
// size because Debian's absl::string_view is its own type, not std::string_view.
inline std::string Message(const absl::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

}  // namespace topodra
