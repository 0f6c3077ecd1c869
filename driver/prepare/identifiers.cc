#include "driver/prepare/identifiers.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace topodra::prepare {
namespace {

bool IsLabelChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }
bool IsAlnumLower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// [a-z0-9]([-a-z0-9]*[a-z0-9])?, any length (the caller checks it).
bool IsLabelText(absl::string_view s) {
  if (s.empty() || !IsAlnumLower(s.front()) || !IsAlnumLower(s.back())) return false;
  for (char c : s) {
    if (!IsLabelChar(c)) return false;
  }
  return true;
}

// Labels separated by single dots; like Kubernetes' IsDNS1123Subdomain, only the total length is
// limited.
bool IsSubdomainText(absl::string_view s) {
  for (absl::string_view rest = s;;) {
    const std::size_t dot = rest.find('.');
    if (!IsLabelText(rest.substr(0, dot))) return false;
    if (dot == absl::string_view::npos) return true;
    rest.remove_prefix(dot + 1);
  }
}

bool IsUidText(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

absl::Status Refuse(const char* what, absl::string_view value, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(what, " ", ShowValue(value), " ", rule));
}

}  // namespace

bool IsDnsLabel(absl::string_view s) { return s.size() <= 63 && IsLabelText(s); }

std::string ShowValue(absl::string_view value, std::size_t shown) {
  if (value.size() <= shown) return absl::StrCat("\"", absl::CHexEscape(value), "\"");
  return absl::StrCat("\"", absl::CHexEscape(value.substr(0, shown)), "...\" (", value.size(),
                      " bytes)");
}

std::string ShowClaimRef(absl::string_view ns, absl::string_view name) {
  const bool plain_ns = ns.size() <= kMaxNamespaceLength && IsLabelText(ns);
  const bool plain_name = name.size() <= kMaxClaimNameLength && IsSubdomainText(name);
  return absl::StrCat(plain_ns ? std::string(ns) : ShowValue(ns), "/",
                      plain_name ? std::string(name) : ShowValue(name));
}

absl::Status ValidateClaimIdentity(absl::string_view ns, absl::string_view name,
                                   absl::string_view uid) {
  if (ns.empty() || name.empty() || uid.empty()) {
    return absl::InvalidArgumentError("namespace, name and uid are required");
  }
  if (ns.size() > kMaxNamespaceLength) {
    return Refuse("namespace", ns,
                  absl::StrCat("is longer than ", kMaxNamespaceLength,
                               " characters, the limit of a namespace (a DNS-1123 label)"));
  }
  if (!IsLabelText(ns)) {
    return Refuse("namespace", ns,
                  "is not a DNS-1123 label (lower-case letters, digits and '-', starting and "
                  "ending with a letter or digit)");
  }
  if (name.size() > kMaxClaimNameLength) {
    return Refuse(
        "name", name,
        absl::StrCat("is longer than ", kMaxClaimNameLength,
                     " characters, the limit of a ResourceClaim name (a DNS-1123 subdomain)"));
  }
  if (!IsSubdomainText(name)) {
    return Refuse("name", name,
                  "is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each "
                  "dot-separated part starting and ending with a letter or digit)");
  }
  if (uid.size() > kMaxUidLength) {
    return Refuse("uid", uid,
                  absl::StrCat("is longer than ", kMaxUidLength,
                               " characters (the API server's uids are 36-character UUIDs)"));
  }
  if (!IsUidText(uid)) {
    return Refuse("uid", uid,
                  "has characters other than letters, digits and '-' (the API server's uids are "
                  "UUIDs)");
  }
  return absl::OkStatus();
}

}  // namespace topodra::prepare
