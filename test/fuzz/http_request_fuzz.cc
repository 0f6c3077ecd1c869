// The request-head parser of the daemon's HTTP listeners, which anyone who reaches the metrics
// port feeds. Besides not crashing: a verdict is final once the head is complete (bytes after it
// change nothing), a complete head names a path without its query, and errors stay short.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "driver/metrics/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using topodra::metrics::HeadParse;
  using topodra::metrics::ParseRequestHead;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // A small bound too, so that inputs reach it.
  for (const size_t bound : {size_t{64}, size_t{8192}}) {
    const HeadParse p = ParseRequestHead(input, bound);
    if (p.error.size() > 300) std::abort();
    if (p.kind == HeadParse::kIncomplete && (input.size() >= bound || !p.error.empty())) {
      std::abort();
    }
    if (p.kind != HeadParse::kComplete) continue;
    if (p.head.method.empty() || p.head.path.empty() || p.head.path.front() != '/' ||
        p.head.path.find('?') != std::string::npos) {
      std::abort();
    }
    const HeadParse more = ParseRequestHead(std::string(input) + "GET /x HTTP/1.1\r\n", bound);
    if (more.kind != HeadParse::kComplete || more.head.method != p.head.method ||
        more.head.path != p.head.path) {
      std::abort();
    }
  }
  return 0;
}
