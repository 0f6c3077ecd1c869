// Pool -> ResourceSlices, in KEP-5234 mixin form or flat, and the one flatten function that turns
// the first into the second. Pure: values in, values out.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "driver/publish/slice_model.h"

namespace topodra::publish {

enum class SliceForm { kMixins, kFlat };

// Splits the pool into as few slices as the device limit allows (devices stay in name order, so
// a slice holds whole NUMA nodes where it can). In mixin form, attributes and capacities shared
// by several devices of a slice move into that slice's spec.mixins.device and the devices
// include them. Every slice carries generation 0 and resourceSliceCount = number of slices; the
// publisher sets the generation. Fails only when a device alone breaks a limit.
absl::StatusOr<std::vector<Slice>> BuildSlices(const Pool& pool, SliceForm form,
                                               const SliceLimits& limits = {});
// The same, moving the pool's devices into the slices instead of copying them.
absl::StatusOr<std::vector<Slice>> BuildSlices(Pool&& pool, SliceForm form,
                                               const SliceLimits& limits = {});

// Applies KEP-5234: each device gets its mixins' attributes and capacities in include order, a
// later mixin overriding an earlier one and the device's own values overriding both; includes and
// spec.mixins disappear. Errors name the slice and device: an unknown mixin, a duplicate mixin or
// device name (devices must be unique across the pool), too many includes, or a limit exceeded
// after flattening.
absl::StatusOr<std::vector<Slice>> Flatten(const std::vector<Slice>& slices,
                                           const SliceLimits& limits = {});

// Checks one pool's slices against the limits in the form they are in (mixin or flat).
absl::Status ValidateSlices(const std::vector<Slice>& slices, const SliceLimits& limits = {});

// Device taints (spec §1.4, feature gate DRADeviceTaints): whether any device of the pool has
// them, and the pool without them, for API servers that do not store them or when they are
// turned off. Taints lower the device limit of a slice (64 instead of 128), so a pool without
// them may need fewer slices.
bool HasTaints(const Pool& pool);
Pool WithoutTaints(Pool pool);

// Deterministic slice names, so a restarted daemon finds its own slices and a lost create
// response cannot leave a duplicate behind: "<node>-<driver>-<index>", shortened with a hash
// when that would exceed 253 characters.
std::string SliceName(const std::string& node, const std::string& driver, int index);

}  // namespace topodra::publish
