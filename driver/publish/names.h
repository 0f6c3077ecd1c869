// Kubernetes name formats (spec §1.7), shared by slice building, flattening and flag checks.
#pragma once

#include <string_view>

namespace topodra::publish {

bool IsDnsLabel(std::string_view s);      // <= 63, [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool IsDnsSubdomain(std::string_view s);  // <= 253, dot-separated DNS labels
bool IsDriverName(std::string_view s);    // <= 63 and a DNS subdomain
// Attribute / capacity key: C identifier <= 32, optionally prefixed by "<domain <= 63>/".
bool IsQualifiedName(std::string_view s);

}  // namespace topodra::publish
