// The response parser of the daemon's API client (driver/kube/http_parse.h), which the API
// server (or anything between it and the node) feeds. Besides not crashing: a head's size never
// exceeds the input, its code is a 3-digit number, a complete head stays the same when more
// bytes follow, and the chunked decoder gives the same data whatever the pieces it is fed in.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include "absl/strings/string_view.h"

#include "driver/kube/http_parse.h"

namespace {

using topodra::kube::http::ChunkedDecoder;

// The decoded data (or "!error") of `body` fed `step` bytes at a time.
std::string Decode(absl::string_view body, std::size_t step) {
  ChunkedDecoder decoder;
  std::string out;
  for (std::size_t at = 0; at < body.size() && !decoder.done(); at += step) {
    const auto n = decoder.Feed(body.substr(at, step), &out);
    if (!n.ok()) return "!error";
    if (*n > step) std::abort();
  }
  return decoder.done() ? out : out + "!unfinished";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = topodra::kube::http;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const auto parsed = http::ParseResponseHead(input);
  if (parsed.ok() && parsed->has_value()) {
    const http::ParsedHead& p = **parsed;
    if (p.size > input.size() || p.head.code < 100 || p.head.code > 999) std::abort();
    const auto again = http::ParseResponseHead(std::string(input) + "\r\n\r\nX: y\r\n");
    if (!again.ok() || !again->has_value() || (*again)->size != p.size ||
        (*again)->head.code != p.head.code || (*again)->head.headers != p.head.headers) {
      std::abort();
    }
    (void)http::FramingOf(p.head);
    const absl::string_view body = input.substr(p.size);
    const std::string whole = Decode(body, body.size() + 1);
    if (Decode(body, 1) != whole || Decode(body, 7) != whole) std::abort();
  }
  (void)http::ParseServerUrl(std::string(input.substr(0, 200)));
  (void)http::WatchTimeoutSeconds(input);
  (void)http::WarningText(input);
  return 0;
}
