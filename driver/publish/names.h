// Kubernetes name formats (spec §1.7), shared by slice building, flattening and flag checks.
#pragma once

#include <string>
#include <string_view>

namespace topodra::publish {

bool IsDnsLabel(std::string_view s);      // <= 63, [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool IsDnsSubdomain(std::string_view s);  // <= 253, dot-separated DNS labels
bool IsDriverName(std::string_view s);    // <= 63 and a DNS subdomain
// Attribute / capacity key: C identifier <= 32, optionally prefixed by "<domain <= 63>/".
bool IsQualifiedName(std::string_view s);

// Devices held for a Reservation carry its name in this string attribute (so owners' claims can
// select them) and, unless taints are off, a NoSchedule taint with this key and the name as value
// (so nobody else's claim gets them).
inline constexpr char kReservationAttribute[] = "topodra.io/reservation";
inline constexpr char kReservationTaintKey[] = "topodra.io/reservation";
// An unhealthy GPU (driver/health) stays published with a NoSchedule taint of this key, its
// value the cause ("aer-fatal", "link-down", ...), so no new claim gets it; the taint goes when
// the GPU recovers.
inline constexpr char kUnhealthyTaintKey[] = "gpu.topodra.io/unhealthy";

// The grouped-mode CPU device of a Reservation: "cpudevresv-" + the name with '.' replaced by
// '-'. When that exceeds 63 characters (or the name is not a DNS subdomain), the name part is cut
// and followed by "-" + 8 hex digits of the FNV-1a hash of the whole name, so distinct long names
// stay distinct. Always a DNS label; the prefix keeps it apart from the group devices.
std::string ReservationCpuDeviceName(const std::string& reservation);

// The individual-mode CPU device numbered `index` (>= 0): "cpudev" + at least three digits,
// zero-padded ("cpudev007", "cpudev1024").
std::string IndividualCpuDeviceName(int index);

}  // namespace topodra::publish
