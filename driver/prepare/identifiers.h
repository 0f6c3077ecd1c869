// The identifiers of a claim as the kubelet sends them (namespace, name, uid), checked against the
// API's limits before anything uses them (log lines, GET paths, CDI file names), and a bounded
// way to show an outside value in a message. Pure: values in, values out.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace topodra::prepare {

// A namespace is a DNS-1123 label (Kubernetes ValidateNamespaceName).
inline constexpr std::size_t kMaxNamespaceLength = 63;
// A ResourceClaim's metadata.name is a DNS-1123 subdomain (shared/spec k8s-api-cdi.md §1.7).
inline constexpr std::size_t kMaxClaimNameLength = 253;
// metadata.uid is set by the API server: a UUID (36 characters). 128 leaves room for any other
// server-made form while bounding what reaches logs and file names.
inline constexpr std::size_t kMaxUidLength = 128;
// How much of a refused value a message quotes.
inline constexpr std::size_t kShownLength = 64;

// `"value"` with non-printable bytes escaped; longer than `shown` bytes: the first `shown`
// bytes, `..."` and the total length, as in `"aaaa..." (1048576 bytes)`.
std::string ShowValue(absl::string_view value, std::size_t shown = kShownLength);

// "ns/name" when both are within their limits and plain, else each part that is not shown by
// ShowValue: safe to put in any message or log line.
std::string ShowClaimRef(absl::string_view ns, absl::string_view name);

// A DNS-1123 label of at most 63 characters: what request names and a pod's resourceClaims[].name
// are, and so safe as one path component.
bool IsDnsLabel(absl::string_view s);

// OK, or InvalidArgument whose message is one sentence naming the identifier and the rule it
// breaks, quoting at most kShownLength bytes of it:
//   namespace: non-empty DNS-1123 label, at most 63 characters ([a-z0-9]([-a-z0-9]*[a-z0-9])?);
//   name: non-empty DNS-1123 subdomain, at most 253 characters (dot-separated labels);
//   uid: 1 to 128 characters out of [A-Za-z0-9-] (a UUID is 36).
absl::Status ValidateClaimIdentity(absl::string_view ns, absl::string_view name,
                                   absl::string_view uid);

}  // namespace topodra::prepare
