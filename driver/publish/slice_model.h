// ResourceSlice content as plain values (resource.k8s.io v1, spec k8s-api-cdi.md §1), plus the
// KEP-5234 mixin fields. Building, compacting, flattening and publishing all work on these; JSON
// lives in slice_json.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "nlohmann/json.hpp"

namespace topodra::publish {

// The API's limits (spec §1.8, 1.36 column) and KEP-5234's proposed mixin limits (§1.10).
struct SliceLimits {
  int max_devices = 128;
  int max_devices_with_taints = 64;    // when any device uses taints, counters or list attributes
  int max_attributes_per_device = 32;  // attributes + capacities, after flattening
  // Attribute values of a device, a list counting each element (1.36+, addendum §5.2).
  int max_attribute_values_per_device = 48;
  int max_includes_per_device = 8;
  int max_mixins = 128;
  int max_attributes_per_slice = 4096;  // over devices and mixins, with mixins
  int max_string_length = 64;
};

struct Version {
  std::string value;
  bool operator==(const Version&) const = default;
};

// A list-typed attribute ("strings", DRAListTypeAttributes, alpha in 1.36 and 1.37): non-empty,
// each element at most 64 bytes, every element counts against the 48 values of a device.
struct StringList {
  std::vector<std::string> values;
  bool operator==(const StringList&) const = default;
};

// Exactly one of int, bool, string, version, strings.
using AttributeValue = std::variant<int64_t, bool, std::string, Version, StringList>;

// Values an attribute counts against max_attribute_values_per_device.
inline int ValueCount(const AttributeValue& v) {
  if (const StringList* l = std::get_if<StringList>(&v)) return static_cast<int>(l->values.size());
  return 1;
}

struct ValidRange {
  std::string min;
  std::optional<std::string> max;
  std::optional<std::string> step;
  bool operator==(const ValidRange&) const = default;
};

struct RequestPolicy {
  std::optional<std::string> default_value;
  std::vector<std::string> valid_values;
  std::optional<ValidRange> valid_range;
  bool operator==(const RequestPolicy&) const = default;
};

struct Capacity {
  std::string value;  // a Quantity, e.g. "64" or "16Gi"
  std::optional<RequestPolicy> request_policy;
  bool operator==(const Capacity&) const = default;
};

using Attributes = std::map<std::string, AttributeValue>;  // qualified name -> value
using Capacities = std::map<std::string, Capacity>;

struct Device {
  std::string name;
  std::vector<std::string> includes;  // mixin names, applied in order
  Attributes attributes;
  Capacities capacity;
  bool allow_multiple_allocations = false;
  // Device fields topodra does not model (taints, consumesCounters, ...), kept verbatim so
  // `topodra flatten` round-trips foreign slices.
  nlohmann::json extra = nlohmann::json::object();
  bool operator==(const Device&) const = default;
};

struct DeviceMixin {
  std::string name;
  Attributes attributes;
  Capacities capacity;
  bool operator==(const DeviceMixin&) const = default;
};

struct Slice {
  nlohmann::json metadata = nlohmann::json::object();  // name, generateName, ownerReferences...
  std::string driver;
  std::string pool;
  int64_t generation = 0;
  int64_t slice_count = 1;
  std::string node_name;
  std::vector<DeviceMixin> mixins;
  std::vector<Device> devices;
  nlohmann::json extra_spec = nlohmann::json::object();  // spec fields not modelled
  bool operator==(const Slice&) const = default;
};

// All devices one driver publishes for this node, before splitting into slices.
struct Pool {
  std::string driver;
  std::string name;  // = node name
  std::string node_name;
  std::vector<Device> devices;
  bool operator==(const Pool&) const = default;
};

// Number of attributes + capacities a device carries itself (without its includes).
inline int OwnFieldCount(const Device& d) {
  return static_cast<int>(d.attributes.size() + d.capacity.size());
}

}  // namespace topodra::publish
