#include "driver/publish/slice_builder.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_text.h"
#include "driver/publish/names.h"
#include "driver/publish/slice_json.h"

namespace topodra::publish {
namespace {

bool HasList(const Attributes& attrs) {
  return std::any_of(attrs.begin(), attrs.end(),
                     [](const auto& kv) { return std::holds_alternative<StringList>(kv.second); });
}

// Taints, counters and (1.36+) list attributes lower the device limit of the slice.
bool UsesAdvancedFeatures(const Device& d) {
  return d.extra.contains("taints") || d.extra.contains("consumesCounters") ||
         HasList(d.attributes);
}

int DeviceLimit(const std::vector<Device>& devices, const SliceLimits& limits,
                const std::vector<DeviceMixin>& mixins = {}) {
  for (const Device& d : devices) {
    if (UsesAdvancedFeatures(d)) return limits.max_devices_with_taints;
  }
  for (const DeviceMixin& m : mixins) {
    if (HasList(m.attributes)) return limits.max_devices_with_taints;
  }
  return limits.max_devices;
}

// One attribute or capacity as found on a device while collecting: equal exactly when the key and
// the value are, so identical entries of different devices meet. Keys are numbered (devices of a
// slice share a handful of keys) and values point into the device's maps (nothing is erased while
// collecting). Hashed, not ordered: encoding or comparing values as text was most of the mixin
// form's cost, and the order of the fields decides nothing (a group's fields go into a mixin's
// sorted maps).
struct FieldRef {
  bool capacity = false;
  uint32_t key = 0;
  const AttributeValue* attribute = nullptr;  // set for an attribute
  const std::string* quantity = nullptr;      // set for a capacity: its value
};

size_t Mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

size_t HashValue(const AttributeValue& v) {
  const size_t tag = v.index();
  if (const int64_t* i = std::get_if<int64_t>(&v)) return Mix(tag, std::hash<int64_t>()(*i));
  if (const bool* b = std::get_if<bool>(&v)) return Mix(tag, *b ? 1 : 0);
  if (const std::string* str = std::get_if<std::string>(&v)) {
    return Mix(tag, std::hash<std::string_view>()(*str));
  }
  if (const Version* ver = std::get_if<Version>(&v)) {
    return Mix(tag, std::hash<std::string_view>()(ver->value));
  }
  size_t h = tag;
  for (const std::string& e : std::get<StringList>(v).values) {
    h = Mix(h, std::hash<std::string_view>()(e));
  }
  return h;
}

struct FieldRefHash {
  size_t operator()(const FieldRef& f) const {
    const size_t h = Mix(f.key, f.capacity ? 1 : 0);
    return Mix(h,
               f.capacity ? std::hash<std::string_view>()(*f.quantity) : HashValue(*f.attribute));
  }
};

struct FieldRefEq {
  bool operator()(const FieldRef& a, const FieldRef& b) const {
    if (a.capacity != b.capacity || a.key != b.key) return false;
    return a.capacity ? *a.quantity == *b.quantity : *a.attribute == *b.attribute;
  }
};

// The devices holding a field, and its key and value (copied: devices lose their copies to
// mixins) with the length of its JSON text, which the savings estimate counts.
struct Holding {
  bool capacity = false;
  const std::string* key = nullptr;  // in Holdings::keys
  std::vector<size_t> devices;
  size_t json_size = 0;
  std::optional<AttributeValue> attribute;
  std::optional<Capacity> capacity_value;
};
struct Holdings {
  std::deque<std::string> keys;  // every key seen, once (attributes and capacities apart)
  std::vector<Holding> fields;
};

// Numbers the keys of a slice's devices. Devices of a slice mostly carry the same keys in the
// same order, so the key at each position of the previous device is tried first.
class KeyNumbers {
 public:
  explicit KeyNumbers(std::deque<std::string>& keys) : keys_(keys) {}
  uint32_t Of(size_t position, const std::string& key) {
    if (position < at_.size() && keys_[at_[position]] == key) return at_[position];
    auto [it, added] = ids_.try_emplace(key, static_cast<uint32_t>(keys_.size()));
    if (added) keys_.push_back(key);
    if (position >= at_.size()) at_.resize(position + 1);
    at_[position] = it->second;
    return it->second;
  }

 private:
  std::deque<std::string>& keys_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<uint32_t> at_;  // position in a device's map -> the key last seen there
};

void CollectFields(const std::vector<Device>& devices, Holdings& out) {
  std::unordered_map<FieldRef, size_t, FieldRefHash, FieldRefEq> index;
  index.reserve(devices.size() * 4);
  KeyNumbers attribute_keys(out.keys), capacity_keys(out.keys);
  auto holding = [&](const FieldRef& ref) -> Holding& {
    auto [it, added] = index.try_emplace(ref, out.fields.size());
    if (added) {
      out.fields.emplace_back();
      out.fields.back().capacity = ref.capacity;
      out.fields.back().key = &out.keys[ref.key];
    }
    return out.fields[it->second];
  };
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& d = devices[i];
    size_t position = 0;
    for (const auto& [k, v] : d.attributes) {
      Holding& h = holding(FieldRef{false, attribute_keys.Of(position++, k), &v, nullptr});
      if (!h.attribute) {
        h.json_size = AttributeJsonSize(v);
        h.attribute = v;
      }
      h.devices.push_back(i);
    }
    position = 0;
    for (const auto& [k, c] : d.capacity) {
      // A request policy is only valid on a device that allows multiple allocations, which a
      // mixin cannot say; servers may validate mixins on their own, so such capacities stay put.
      if (c.request_policy) continue;
      Holding& h = holding(FieldRef{true, capacity_keys.Of(position++, k), nullptr, &c.value});
      if (!h.capacity_value) {
        h.json_size = CapacityJsonSize(c);
        h.capacity_value = c;
      }
      h.devices.push_back(i);
    }
  }
}

// Fields shared by exactly the same devices form one candidate mixin. It is worth having when
// it saves bytes: the fields written once instead of n times, minus the mixin's own envelope and
// one include reference per device.
struct Group {
  std::vector<size_t> devices;  // sorted
  std::vector<const Holding*> fields;
  long Saving() const {
    long field_bytes = 0;
    for (const Holding* f : fields) {
      field_bytes += static_cast<long>(f->key->size() + f->json_size) + 4;
    }
    const long n = static_cast<long>(devices.size());
    constexpr long kMixinEnvelope = 32;  // {"name":"m12","attributes":{}},
    constexpr long kIncludeRef = 6;      // ,"m12"
    return (n - 1) * field_bytes - kMixinEnvelope - n * kIncludeRef;
  }
};

bool Nested(const std::vector<size_t>& a, const std::vector<size_t>& b) {
  if (std::includes(a.begin(), a.end(), b.begin(), b.end())) return true;
  if (std::includes(b.begin(), b.end(), a.begin(), a.end())) return true;
  std::vector<size_t> common;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
  return common.empty();
}

// Erases from `from` every key of `keys`: one walk over both (their keys are in the same order),
// not a search per key.
template <typename Map, typename Keys>
void EraseKeysOf(Map& from, const Keys& keys) {
  auto it = from.begin();
  for (const auto& kv : keys) {
    while (it != from.end() && it->first < kv.first) ++it;
    if (it == from.end()) return;
    if (it->first == kv.first) it = from.erase(it);
  }
}

DeviceMixin MixinOf(std::string name, const std::vector<const Group*>& parts) {
  DeviceMixin mixin;
  mixin.name = std::move(name);
  for (const Group* g : parts) {
    for (const Holding* f : g->fields) {
      if (f->capacity) {
        mixin.capacity[*f->key] = *f->capacity_value;
      } else {
        mixin.attributes[*f->key] = *f->attribute;
      }
    }
  }
  return mixin;
}

// Moves fields shared by several devices of the slice into mixins. Groups that nest (machine,
// socket, NUMA node, L3: a laminar family) are merged per device into one mixin, so a device
// includes one mixin for its place in the hierarchy; groups that cut across it (e.g. the same
// per-socket core id in several sockets) get a mixin of their own as a further include.
void CompactSlice(Slice& slice, const SliceLimits& limits) {
  Holdings holders;
  CollectFields(slice.devices, holders);
  std::map<std::vector<size_t>, Group> by_devices;
  for (const Holding& held : holders.fields) {
    const std::vector<size_t>& devs = held.devices;
    if (devs.size() < 2) continue;
    auto [it, added] = by_devices.try_emplace(devs);
    if (added) it->second.devices = devs;
    it->second.fields.push_back(&held);
  }
  std::vector<Group> groups;
  for (auto& [devs, g] : by_devices) {
    if (g.Saving() > 0) groups.push_back(std::move(g));
  }
  // Largest device sets first, so enclosing groups are seen before the ones inside them; ties
  // broken by content for a deterministic result.
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.devices.size() != b.devices.size()) return a.devices.size() > b.devices.size();
    return a.devices < b.devices;
  });
  std::vector<const Group*> laminar, cross;
  for (const Group& g : groups) {
    const bool nests = std::all_of(laminar.begin(), laminar.end(),
                                   [&](const Group* h) { return Nested(h->devices, g.devices); });
    (nests ? laminar : cross).push_back(&g);
  }

  std::vector<std::vector<std::string>> includes(slice.devices.size());
  auto add_mixin = [&](DeviceMixin mixin, const std::vector<size_t>& devs) {
    if (static_cast<int>(slice.mixins.size()) >= limits.max_mixins) return;
    std::vector<size_t> users;
    for (size_t di : devs) {
      // A device past the include limit keeps these fields inline.
      if (static_cast<int>(includes[di].size()) < limits.max_includes_per_device)
        users.push_back(di);
    }
    if (users.size() < 2) return;
    for (size_t di : users) {
      Device& d = slice.devices[di];
      EraseKeysOf(d.attributes, mixin.attributes);
      EraseKeysOf(d.capacity, mixin.capacity);
      includes[di].push_back(mixin.name);
    }
    slice.mixins.push_back(std::move(mixin));
  };

  std::map<std::vector<const Group*>, std::vector<size_t>> by_signature;
  {
    std::vector<std::vector<const Group*>> signature(slice.devices.size());
    for (const Group* g : laminar) {
      for (size_t di : g->devices) signature[di].push_back(g);
    }
    for (size_t di = 0; di < slice.devices.size(); ++di) {
      if (!signature[di].empty()) by_signature[signature[di]].push_back(di);
    }
  }
  std::vector<std::pair<std::vector<const Group*>, std::vector<size_t>>> ordered(
      by_signature.begin(), by_signature.end());
  // Mixins appear in the order of their first device, so they read top-down like the devices.
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.second.front() < b.second.front(); });
  for (const auto& [parts, devs] : ordered) {
    add_mixin(MixinOf(absl::StrCat("m", slice.mixins.size()), parts), devs);
  }
  for (const Group* g : cross) {
    add_mixin(MixinOf(absl::StrCat("m", slice.mixins.size()), {g}), g->devices);
  }
  for (size_t di = 0; di < slice.devices.size(); ++di) {
    slice.devices[di].includes = std::move(includes[di]);
  }
}

// Undoes CompactSlice on a slice whose devices included nothing before it: every field a device
// lost to a mixin is in that mixin with the same value, so putting them back is the flat slice.
void Uncompact(Slice& slice) {
  std::map<std::string_view, const DeviceMixin*> mixins;
  for (const DeviceMixin& m : slice.mixins) mixins.emplace(m.name, &m);
  for (Device& d : slice.devices) {
    for (const std::string& inc : d.includes) {
      const DeviceMixin& m = *mixins.at(inc);
      d.attributes.insert(m.attributes.begin(), m.attributes.end());
      d.capacity.insert(m.capacity.begin(), m.capacity.end());
    }
    d.includes.clear();
  }
  slice.mixins.clear();
}

// The device's attributes after its includes are applied, as pointers into the device and its
// mixins (no copies: every device of every slice is checked).
using FlatView = std::map<std::string_view, const AttributeValue*>;
FlatView FlatAttributes(const Device& d, const std::map<std::string, const DeviceMixin*>& mixins) {
  FlatView out;
  for (const std::string& inc : d.includes) {
    auto it = mixins.find(inc);
    if (it == mixins.end()) continue;
    for (const auto& [k, v] : it->second->attributes) out[k] = &v;
  }
  for (const auto& [k, v] : d.attributes) out[k] = &v;
  return out;
}

absl::Status CheckValue(const std::string& where, const Device& d, const std::string_view k,
                        const AttributeValue& v, const SliceLimits& limits) {
  const StringList* l = std::get_if<StringList>(&v);
  if (l == nullptr) return absl::OkStatus();
  if (l->values.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": device \"", d.name, "\": list attribute \"", std::string(k), "\" is empty"));
  }
  for (const std::string& e : l->values) {
    if (static_cast<int>(e.size()) > limits.max_string_length) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": device \"", d.name, "\": attribute \"", std::string(k),
                       "\" value \"", e, "\" is longer than ", limits.max_string_length, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status TooManyValues(const std::string& where, const Device& d, int values,
                           const SliceLimits& limits) {
  if (values <= limits.max_attribute_values_per_device) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, ": device \"", d.name, "\" has ", values,
                                                 " attribute values, more than ",
                                                 limits.max_attribute_values_per_device));
}

absl::Status CheckValues(const std::string& where, const Device& d,
                         const std::map<std::string, const DeviceMixin*>& mixins,
                         const SliceLimits& limits) {
  int values = 0;
  auto check = [&](std::string_view k, const AttributeValue& v) {
    values += ValueCount(v);
    return CheckValue(where, d, k, v, limits);
  };
  if (d.includes.empty()) {
    for (const auto& [k, v] : d.attributes) {
      if (absl::Status st = check(k, v); !st.ok()) return st;
    }
  } else {
    for (const auto& [k, v] : FlatAttributes(d, mixins)) {
      if (absl::Status st = check(k, *v); !st.ok()) return st;
    }
  }
  return TooManyValues(where, d, values, limits);
}

// How many keys two maps of the same ordering have in common.
template <typename A, typename B>
int SharedKeys(const A& a, const B& b) {
  int n = 0;
  auto i = a.begin();
  auto j = b.begin();
  while (i != a.end() && j != b.end()) {
    const int c = i->first.compare(j->first);
    if (c == 0) ++n;
    if (c <= 0) ++i;
    if (c >= 0) ++j;
  }
  return n;
}

// Attributes and capacities after flattening: the device's own, plus the names its mixins add.
struct FlatCounts {
  int attributes = 0;
  int capacities = 0;
};
FlatCounts FlatCount(const Device& d, const std::map<std::string, const DeviceMixin*>& mixins) {
  FlatCounts count{static_cast<int>(d.attributes.size()), static_cast<int>(d.capacity.size())};
  if (d.includes.empty()) return count;
  if (d.includes.size() == 1) {
    // One mixin (the common case): its names the device does not have, in one walk over both.
    auto it = mixins.find(d.includes.front());
    if (it == mixins.end()) return count;
    count.attributes += static_cast<int>(it->second->attributes.size()) -
                        SharedKeys(it->second->attributes, d.attributes);
    count.capacities += static_cast<int>(it->second->capacity.size()) -
                        SharedKeys(it->second->capacity, d.capacity);
    return count;
  }
  std::set<std::pair<bool, std::string_view>> added;
  for (const std::string& inc : d.includes) {
    auto it = mixins.find(inc);
    if (it == mixins.end()) continue;
    for (const auto& [k, v] : it->second->attributes) {
      if (!d.attributes.contains(k) && added.insert({false, k}).second) ++count.attributes;
    }
    for (const auto& [k, v] : it->second->capacity) {
      if (!d.capacity.contains(k) && added.insert({true, k}).second) ++count.capacities;
    }
  }
  return count;
}

// Whether any device or mixin of the slice has a list attribute: without one, every flattened
// attribute is one value and none needs looking at.
bool SliceHasLists(const Slice& s) {
  auto has = [](const Attributes& a) { return HasList(a); };
  return std::any_of(s.devices.begin(), s.devices.end(),
                     [&](const Device& d) { return has(d.attributes); }) ||
         std::any_of(s.mixins.begin(), s.mixins.end(),
                     [&](const DeviceMixin& m) { return has(m.attributes); });
}

std::string Where(const Slice& s, size_t index) {
  const std::string name = StringField(s.metadata, "name");
  return name.empty() ? absl::StrCat("slice ", index) : absl::StrCat("slice \"", name, "\"");
}

}  // namespace

bool HasTaints(const Pool& pool) {
  return std::any_of(pool.devices.begin(), pool.devices.end(),
                     [](const Device& d) { return d.extra.contains("taints"); });
}

namespace {

bool TaintedUnhealthy(const Device& d) {
  if (!d.extra.is_object()) return false;
  auto taints = d.extra.find("taints");
  if (taints == d.extra.end() || !taints->is_array()) return false;
  return std::any_of(taints->begin(), taints->end(), [](const nlohmann::json& t) {
    return t.is_object() && t.value("key", "") == kUnhealthyTaintKey;
  });
}

}  // namespace

Pool WithoutTaints(Pool pool) {
  // The unhealthy taint is what keeps new claims off a broken GPU; where it cannot be published
  // the GPU is left out instead, or a server without taints would hand it out.
  std::erase_if(pool.devices, TaintedUnhealthy);
  for (Device& d : pool.devices) {
    if (d.extra.is_object()) d.extra.erase("taints");
  }
  return pool;
}

std::string SliceName(const std::string& node, const std::string& driver, int index) {
  std::string name = absl::StrCat(node, "-", driver, "-", index);
  if (name.size() <= 253) return name;
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across builds and machines
  for (char c : node + "/" + driver) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::string prefix = node.substr(0, 200);
  while (!prefix.empty() && (prefix.back() == '-' || prefix.back() == '.')) prefix.pop_back();
  return absl::StrFormat("%s-%016x-%d", prefix, h, index);
}

absl::Status ValidateSlices(const std::vector<Slice>& slices, const SliceLimits& limits) {
  std::set<std::string> device_names;
  for (size_t si = 0; si < slices.size(); ++si) {
    const Slice& s = slices[si];
    const std::string where = Where(s, si);
    const int max_devices = DeviceLimit(s.devices, limits, s.mixins);
    if (static_cast<int>(s.devices.size()) > max_devices) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has ", s.devices.size(), " devices, more than the limit of ", max_devices));
    }
    if (static_cast<int>(s.mixins.size()) > limits.max_mixins) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has ", s.mixins.size(), " mixins, more than ", limits.max_mixins));
    }
    std::map<std::string, const DeviceMixin*> mixins;
    const bool lists = SliceHasLists(s);
    int total = 0;
    for (const DeviceMixin& m : s.mixins) {
      if (!IsDnsLabel(m.name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": mixin name \"", m.name, "\" is not a DNS label"));
      }
      if (!mixins.emplace(m.name, &m).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": duplicate mixin name \"", m.name, "\""));
      }
      total += static_cast<int>(m.attributes.size() + m.capacity.size());
    }
    for (const Device& d : s.devices) {
      if (!IsDnsLabel(d.name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": device name \"", d.name, "\" is not a DNS label"));
      }
      if (!device_names.insert(d.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": duplicate device name \"", d.name, "\" in the pool"));
      }
      if (static_cast<int>(d.includes.size()) > limits.max_includes_per_device) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": device \"", d.name, "\" includes ",
                                                       d.includes.size(), " mixins, more than ",
                                                       limits.max_includes_per_device));
      }
      for (const std::string& inc : d.includes) {
        if (!mixins.count(inc)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": device \"", d.name, "\" includes unknown mixin \"", inc, "\""));
        }
      }
      const FlatCounts counts = FlatCount(d, mixins);
      const int flat = counts.attributes + counts.capacities;
      if (flat > limits.max_attributes_per_device) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": device \"", d.name, "\" has ", flat, " attributes and capacities, more than ",
            limits.max_attributes_per_device));
      }
      if (absl::Status st = lists ? CheckValues(where, d, mixins, limits)
                                  : TooManyValues(where, d, counts.attributes, limits);
          !st.ok()) {
        return st;
      }
      total += OwnFieldCount(d);
    }
    if (total > limits.max_attributes_per_slice) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has ", total,
                                                     " attributes and capacities, more than ",
                                                     limits.max_attributes_per_slice));
    }
  }
  return absl::OkStatus();
}

namespace {

// `pool` is a Pool& whose devices are moved, or a const Pool& whose devices are copied.
template <typename PoolRef>
absl::StatusOr<std::vector<Slice>> BuildSlicesOf(PoolRef& pool, SliceForm form,
                                                 const SliceLimits& limits) {
  const size_t per_slice = static_cast<size_t>(DeviceLimit(pool.devices, limits));
  std::vector<Slice> slices;
  for (size_t start = 0; start < pool.devices.size() || slices.empty(); start += per_slice) {
    Slice s;
    s.driver = pool.driver;
    s.pool = pool.name;
    s.node_name = pool.node_name;
    const size_t end = std::min(pool.devices.size(), start + per_slice);
    auto first = pool.devices.begin() + static_cast<long>(std::min(start, end));
    auto last = pool.devices.begin() + static_cast<long>(end);
    if constexpr (std::is_const_v<PoolRef>) {
      s.devices.assign(first, last);
    } else {
      s.devices.assign(std::make_move_iterator(first), std::make_move_iterator(last));
    }
    if (form == SliceForm::kMixins) {
      // The savings estimate is per group; the exact size decides, so a mixin form is never
      // larger than the flat one (small pools have little to share). Compacted in place and
      // flattened back when it does not pay: copying every device's maps cost more than the
      // compaction.
      const size_t flat_size = SliceJsonSize(s);
      const bool own_includes = std::any_of(s.devices.begin(), s.devices.end(),
                                            [](const Device& d) { return !d.includes.empty(); });
      if (own_includes) {
        Slice compact = s;
        CompactSlice(compact, limits);
        if (SliceJsonSize(compact) < flat_size) s = std::move(compact);
      } else {
        CompactSlice(s, limits);
        if (SliceJsonSize(s) >= flat_size) Uncompact(s);
      }
    }
    slices.push_back(std::move(s));
    if (end == pool.devices.size()) break;
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    slices[i].slice_count = static_cast<int64_t>(slices.size());
    slices[i].metadata["name"] = SliceName(pool.node_name, pool.driver, static_cast<int>(i));
  }
  if (absl::Status st = ValidateSlices(slices, limits); !st.ok()) return st;
  return slices;
}

}  // namespace

absl::StatusOr<std::vector<Slice>> BuildSlices(const Pool& pool, SliceForm form,
                                               const SliceLimits& limits) {
  return BuildSlicesOf(pool, form, limits);
}

absl::StatusOr<std::vector<Slice>> BuildSlices(Pool&& pool, SliceForm form,
                                               const SliceLimits& limits) {
  return BuildSlicesOf(pool, form, limits);
}

absl::StatusOr<std::vector<Slice>> Flatten(const std::vector<Slice>& slices,
                                           const SliceLimits& limits) {
  if (absl::Status st = ValidateSlices(slices, limits); !st.ok()) return st;
  std::vector<Slice> out = slices;
  for (Slice& s : out) {
    std::map<std::string, const DeviceMixin*> mixins;
    for (const DeviceMixin& m : s.mixins) mixins.emplace(m.name, &m);
    for (Device& d : s.devices) {
      Attributes attrs;
      Capacities caps;
      for (const std::string& inc : d.includes) {
        const DeviceMixin& m = *mixins.at(inc);
        for (const auto& [k, v] : m.attributes) attrs[k] = v;
        for (const auto& [k, c] : m.capacity) caps[k] = c;
      }
      for (auto& [k, v] : d.attributes) attrs[k] = std::move(v);
      for (auto& [k, c] : d.capacity) caps[k] = std::move(c);
      d.attributes = std::move(attrs);
      d.capacity = std::move(caps);
      d.includes.clear();
    }
    s.mixins.clear();
  }
  if (absl::Status st = ValidateSlices(out, limits); !st.ok()) return st;
  return out;
}

}  // namespace topodra::publish
