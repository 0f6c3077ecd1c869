// Device fields behind alpha feature gates that a node may publish only when the API server keeps
// them: list-typed attributes (DRAListTypeAttributes, KEP-5491) and node-allocatable accounting
// (DRANodeAllocatableResources, KEP-5517), whose 1.36 and 1.37 shapes are incompatible
// (shared/spec addendum §4-§5). The device builder emits the 1.37 shape; the publisher converts
// or strips once it knows what the server keeps. Pure.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "driver/publish/slice_model.h"

namespace topodra::publish {

// The 1.37 field (protobuf 14): {<resource>: {mapping: {capacityKey, capacityMultiplier} |
// {deviceMultiplier}, overhead: {perPod, perContainer}}}.
inline constexpr char kNodeAllocatableResources[] = "nodeAllocatableResources";
// The 1.36 field (protobuf 13, tombstoned in 1.37): {<resource>: {capacityKey?,
// allocationMultiplier?}}.
inline constexpr char kNodeAllocatableResourceMappings[] = "nodeAllocatableResourceMappings";

enum class FeatureMode { kAuto, kOn, kOff };
// auto | on | off; `what` names the feature in the error.
absl::StatusOr<FeatureMode> ParseFeatureMode(const std::string& s, const std::string& what);
const char* FeatureModeName(FeatureMode m);

// Which node-allocatable field a server keeps: none (gate off, or before 1.36), 1.36 or 1.37.
enum class NodeAllocatableField { kNone, kV136, kV137 };
const char* NodeAllocatableFieldName(NodeAllocatableField f);  // "none", the field's JSON name

bool HasListAttributes(const Pool& pool);
// The pool for a server without list attributes: every list attribute removed (the scalar ones
// stay, so nothing changes for such a server).
Pool WithoutListAttributes(Pool pool);

// Whether any device carries kNodeAllocatableResources (as the device builder emits it).
bool HasNodeAllocatable(const Pool& pool);
// The pool with its node-allocatable entries in the shape `field` names: kV137 unchanged, kV136
// converted (capacityKey + capacityMultiplier -> capacityKey + allocationMultiplier,
// deviceMultiplier -> allocationMultiplier; overhead has no 1.36 form and is left out), kNone
// removed.
Pool WithNodeAllocatableField(Pool pool, NodeAllocatableField field);

}  // namespace topodra::publish
