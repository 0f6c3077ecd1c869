// The head of an HTTP/1.x request as the daemon's HTTP listeners (/metrics, /healthz, /readyz)
// read it from the network: bytes in, a verdict out; no I/O. The listeners answer one request
// per connection and read no body, so only the request line matters; header lines are checked
// for shape (RFC 9112 section 5) and otherwise ignored.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace topodra::metrics {

struct RequestHead {
  std::string method;  // "GET"
  std::string path;    // the request target without its query: "/healthz"
};

struct HeadParse {
  enum Kind {
    kIncomplete,  // no blank line yet and nothing wrong so far: read more
    kComplete,    // `head` holds the request
    kBad,         // not an HTTP/1.x request head: answer 400 and close
    kTooLarge,    // no end of head within the bound: answer 431 and close
  };
  Kind kind = kIncomplete;
  RequestHead head;
  std::string error;  // kBad, kTooLarge: what was wrong, quoting (a bounded excerpt of) the bytes
};

// Looks at the bytes of a connection received so far. A head longer than `max_head_bytes`
// (blank line included) is kTooLarge, whether or not its end has arrived; a bad request line is
// kBad as soon as it is complete, without waiting for the rest.
HeadParse ParseRequestHead(std::string_view bytes, size_t max_head_bytes);

}  // namespace topodra::metrics
