#include "driver/publish/slice_json.h"

#include <charconv>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"

namespace topodra::publish {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::StatusOr<std::string> String(const json& j, const std::string& path) {
  if (!j.is_string()) return Bad(path, "must be a string");
  return j.get<std::string>();
}

absl::StatusOr<int64_t> Int(const json& j, const std::string& path) {
  if (!j.is_number_integer()) return Bad(path, "must be an integer");
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return Bad(path, "is out of range");
  }
  return j.get<int64_t>();
}

// Quantities are strings in the API, but hand-written YAML often has plain integers.
absl::StatusOr<std::string> Quantity(const json& j, const std::string& path) {
  if (j.is_number_integer()) return DumpJson(j);
  if (!j.is_string()) return Bad(path, "must be a quantity string");
  return j.get<std::string>();
}

// One-member object {key: value}. nlohmann's initializer-list constructor copies each element
// and inspects the list to tell an object from an array: with thousands of attributes per pool
// it was most of the cost of building a slice's JSON.
json Member(const char* key, json value) {
  json out(json::value_t::object);
  out.get_ref<json::object_t&>().emplace(key, std::move(value));
  return out;
}

// Our maps are sorted as JSON objects are: each member goes in at the end, without a search.
template <typename Map, typename F>
json SortedObject(const Map& m, F to_json) {
  json out(json::value_t::object);
  json::object_t& o = out.get_ref<json::object_t&>();
  for (const auto& [k, v] : m) o.emplace_hint(o.end(), k, to_json(v));
  return out;
}

json CapacityMap(const Capacities& caps) { return SortedObject(caps, CapacityToJson); }

absl::Status ParseAttributes(const json& j, const std::string& path, Attributes* out) {
  if (!j.is_object()) return Bad(path, "must be an object");
  for (const auto& [k, v] : j.items()) {
    absl::StatusOr<AttributeValue> a = AttributeFromJson(v);
    if (!a.ok()) return Bad(absl::StrCat(path, "[\"", k, "\"]"), std::string(a.status().message()));
    (*out)[k] = *std::move(a);
  }
  return absl::OkStatus();
}

absl::Status ParseCapacities(const json& j, const std::string& path, Capacities* out) {
  if (!j.is_object()) return Bad(path, "must be an object");
  for (const auto& [k, v] : j.items()) {
    absl::StatusOr<Capacity> c = CapacityFromJson(v);
    if (!c.ok()) return Bad(absl::StrCat(path, "[\"", k, "\"]"), std::string(c.status().message()));
    (*out)[k] = *std::move(c);
  }
  return absl::OkStatus();
}

absl::Status ParseNames(const json& j, const std::string& path, std::vector<std::string>* out) {
  if (!j.is_array()) return Bad(path, "must be a list of names");
  for (size_t i = 0; i < j.size(); ++i) {
    absl::StatusOr<std::string> s = String(j[i], absl::StrCat(path, "[", i, "]"));
    if (!s.ok()) return s.status();
    out->push_back(*std::move(s));
  }
  return absl::OkStatus();
}

// name, attributes and capacity, which devices and mixins share. Returns false for other keys.
bool ParseShared(const std::string& k, const json& v, const std::string& p, std::string* name,
                 Attributes* attrs, Capacities* caps, absl::Status* st) {
  if (k == "name") {
    absl::StatusOr<std::string> s = String(v, p);
    if (s.ok()) {
      *name = *s;
    } else {
      *st = s.status();
    }
  } else if (k == "attributes") {
    *st = ParseAttributes(v, p, attrs);
  } else if (k == "capacity") {
    *st = ParseCapacities(v, p, caps);
  } else {
    return false;
  }
  return true;
}

absl::StatusOr<Device> DeviceFromJson(const json& j, const std::string& path) {
  if (!j.is_object()) return Bad(path, "must be an object");
  Device d;
  for (const auto& [k, v] : j.items()) {
    const std::string p = absl::StrCat(path, ".", k);
    absl::Status st;
    if (!ParseShared(k, v, p, &d.name, &d.attributes, &d.capacity, &st)) {
      if (k == "includes") {
        st = ParseNames(v, p, &d.includes);
      } else if (k == "allowMultipleAllocations") {
        if (!v.is_boolean()) return Bad(p, "must be a boolean");
        d.allow_multiple_allocations = v.get<bool>();
      } else {
        d.extra[k] = v;
      }
    }
    if (!st.ok()) return st;
  }
  if (d.name.empty()) return Bad(path + ".name", "is required");
  return d;
}

absl::StatusOr<DeviceMixin> MixinFromJson(const json& j, const std::string& path) {
  if (!j.is_object()) return Bad(path, "must be an object");
  DeviceMixin m;
  for (const auto& [k, v] : j.items()) {
    const std::string p = absl::StrCat(path, ".", k);
    absl::Status st;
    if (!ParseShared(k, v, p, &m.name, &m.attributes, &m.capacity, &st)) {
      return Bad(p, "unknown field");
    }
    if (!st.ok()) return st;
  }
  if (m.name.empty()) return Bad(path + ".name", "is required");
  return m;
}

}  // namespace

json AttributeToJson(const AttributeValue& v) {
  if (const int64_t* i = std::get_if<int64_t>(&v)) return Member("int", *i);
  if (const bool* b = std::get_if<bool>(&v)) return Member("bool", *b);
  if (const std::string* s = std::get_if<std::string>(&v)) return Member("string", *s);
  if (const StringList* l = std::get_if<StringList>(&v)) return Member("strings", l->values);
  return Member("version", std::get<Version>(v).value);
}

json AttributesToJson(const Attributes& attributes) {
  return SortedObject(attributes, AttributeToJson);
}

absl::StatusOr<AttributeValue> AttributeFromJson(const json& j) {
  if (!j.is_object() || j.size() != 1) {
    return absl::InvalidArgumentError(
        "must have exactly one of int, bool, string, version, strings");
  }
  const std::string k = j.begin().key();
  const json& v = j.begin().value();
  if (k == "int") {
    absl::StatusOr<int64_t> i = Int(v, "int");
    if (!i.ok()) return i.status();
    return AttributeValue(*i);
  }
  if (k == "bool") {
    if (!v.is_boolean()) return Bad("bool", "must be a boolean");
    return AttributeValue(v.get<bool>());
  }
  if (k == "string" || k == "version") {
    absl::StatusOr<std::string> s = String(v, k);
    if (!s.ok()) return s.status();
    if (k == "string") return AttributeValue(*s);
    return AttributeValue(Version{*s});
  }
  if (k == "strings") {
    if (!v.is_array() || v.empty()) return Bad("strings", "must be a non-empty list of strings");
    StringList l;
    for (size_t i = 0; i < v.size(); ++i) {
      absl::StatusOr<std::string> s = String(v[i], absl::StrCat("strings[", i, "]"));
      if (!s.ok()) return s.status();
      l.values.push_back(*std::move(s));
    }
    return AttributeValue(std::move(l));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported attribute type \"", k, "\" (want int, bool, string, version or strings)"));
}

json CapacityToJson(const Capacity& c) {
  json out = Member("value", c.value);
  if (c.request_policy) {
    const RequestPolicy& p = *c.request_policy;
    json rp = json::object();
    if (p.default_value) rp["default"] = *p.default_value;
    if (!p.valid_values.empty()) rp["validValues"] = p.valid_values;
    if (p.valid_range) {
      json r{{"min", p.valid_range->min}};
      if (p.valid_range->max) r["max"] = *p.valid_range->max;
      if (p.valid_range->step) r["step"] = *p.valid_range->step;
      rp["validRange"] = std::move(r);
    }
    out["requestPolicy"] = std::move(rp);
  }
  return out;
}

absl::StatusOr<Capacity> CapacityFromJson(const json& j) {
  if (!j.is_object() || !j.contains("value")) return Bad("capacity", "must have a value");
  Capacity c;
  for (const auto& [k, v] : j.items()) {
    if (k == "value") {
      absl::StatusOr<std::string> q = Quantity(v, "value");
      if (!q.ok()) return q.status();
      c.value = *q;
    } else if (k == "requestPolicy") {
      if (!v.is_object()) return Bad("requestPolicy", "must be an object");
      RequestPolicy p;
      for (const auto& [pk, pv] : v.items()) {
        if (pk == "default") {
          absl::StatusOr<std::string> s = String(pv, "requestPolicy.default");
          if (!s.ok()) return s.status();
          p.default_value = *s;
        } else if (pk == "validValues") {
          if (absl::Status st = ParseNames(pv, "requestPolicy.validValues", &p.valid_values);
              !st.ok()) {
            return st;
          }
        } else if (pk == "validRange") {
          if (!pv.is_object() || !pv.contains("min")) {
            return Bad("requestPolicy.validRange", "must be an object with a min");
          }
          ValidRange r;
          for (const auto& [rk, rv] : pv.items()) {
            absl::StatusOr<std::string> q = Quantity(rv, "requestPolicy.validRange." + rk);
            if (!q.ok()) return q.status();
            if (rk == "min") {
              r.min = *q;
            } else if (rk == "max") {
              r.max = *q;
            } else if (rk == "step") {
              r.step = *q;
            } else {
              return Bad("requestPolicy.validRange." + rk, "unknown field");
            }
          }
          p.valid_range = std::move(r);
        } else {
          return Bad(absl::StrCat("requestPolicy.", pk), "unknown field");
        }
      }
      c.request_policy = std::move(p);
    } else {
      return Bad(k, "unknown field");
    }
  }
  return c;
}

json SliceToJson(const Slice& s, const std::string& api_version) {
  json spec = s.extra_spec.is_object() ? s.extra_spec : json::object();
  spec["driver"] = s.driver;
  spec["pool"] = {
      {"name", s.pool}, {"generation", s.generation}, {"resourceSliceCount", s.slice_count}};
  if (!s.node_name.empty()) spec["nodeName"] = s.node_name;
  if (!s.mixins.empty()) {
    json mixins = json::array();
    for (const DeviceMixin& m : s.mixins) {
      json jm{{"name", m.name}};
      if (!m.attributes.empty()) jm["attributes"] = AttributesToJson(m.attributes);
      if (!m.capacity.empty()) jm["capacity"] = CapacityMap(m.capacity);
      mixins.push_back(std::move(jm));
    }
    spec["mixins"] = {{"device", std::move(mixins)}};
  }
  json devices = json::array();
  for (const Device& d : s.devices) {
    json jd = d.extra.is_object() ? d.extra : json::object();
    jd["name"] = d.name;
    if (!d.includes.empty()) jd["includes"] = d.includes;
    if (!d.attributes.empty()) jd["attributes"] = AttributesToJson(d.attributes);
    if (!d.capacity.empty()) jd["capacity"] = CapacityMap(d.capacity);
    if (d.allow_multiple_allocations) jd["allowMultipleAllocations"] = true;
    devices.push_back(std::move(jd));
  }
  spec["devices"] = std::move(devices);
  return {{"apiVersion", api_version},
          {"kind", "ResourceSlice"},
          {"metadata", s.metadata.is_object() ? s.metadata : json::object()},
          {"spec", std::move(spec)}};
}

namespace {

// The printed length of a JSON string: plain printable ASCII is the text and two quotes; anything
// that may be escaped or replaced (control bytes, quotes, backslashes, non-ASCII) is printed to
// be counted.
size_t StringJsonSize(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == '"' || c == '\\' || c >= 0x7f) {
      return DumpJson(json(std::string(s))).size();
    }
  }
  return s.size() + 2;
}

size_t IntJsonSize(int64_t v) {
  char buf[24];
  return static_cast<size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf);
}

// {"k":v,...} counted member by member.
struct ObjectSize {
  size_t members = 0;
  size_t bytes = 0;
  void Add(std::string_view key, size_t value_size) {
    bytes += StringJsonSize(key) + 1 + value_size;
    ++members;
  }
  size_t Total() const { return 2 + bytes + (members > 0 ? members - 1 : 0); }
};

size_t StringsJsonSize(const std::vector<std::string>& v) {
  size_t n = 2 + (v.empty() ? 0 : v.size() - 1);
  for (const std::string& s : v) n += StringJsonSize(s);
  return n;
}

size_t AttributeMapSize(const Attributes& attrs) {
  ObjectSize o;
  for (const auto& [k, v] : attrs) o.Add(k, AttributeJsonSize(v));
  return o.Total();
}

size_t CapacityMapSize(const Capacities& caps) {
  ObjectSize o;
  for (const auto& [k, c] : caps) o.Add(k, CapacityJsonSize(c));
  return o.Total();
}

// The members of `extra` that SliceToJson keeps (those it does not set itself).
template <typename Sets>
void AddKept(const json& extra, Sets sets, ObjectSize& o) {
  if (!extra.is_object()) return;
  for (const auto& [k, v] : extra.items()) {
    if (!sets(k)) o.Add(k, DumpJson(v).size());
  }
}

size_t DeviceJsonSize(const Device& d) {
  ObjectSize o;
  AddKept(
      d.extra,
      [&](const std::string& k) {
        return k == "name" || (k == "includes" && !d.includes.empty()) ||
               (k == "attributes" && !d.attributes.empty()) ||
               (k == "capacity" && !d.capacity.empty()) ||
               (k == "allowMultipleAllocations" && d.allow_multiple_allocations);
      },
      o);
  o.Add("name", StringJsonSize(d.name));
  if (!d.includes.empty()) o.Add("includes", StringsJsonSize(d.includes));
  if (!d.attributes.empty()) o.Add("attributes", AttributeMapSize(d.attributes));
  if (!d.capacity.empty()) o.Add("capacity", CapacityMapSize(d.capacity));
  if (d.allow_multiple_allocations) o.Add("allowMultipleAllocations", 4);
  return o.Total();
}

size_t MixinJsonSize(const DeviceMixin& m) {
  ObjectSize o;
  o.Add("name", StringJsonSize(m.name));
  if (!m.attributes.empty()) o.Add("attributes", AttributeMapSize(m.attributes));
  if (!m.capacity.empty()) o.Add("capacity", CapacityMapSize(m.capacity));
  return o.Total();
}

template <typename T, typename Size>
size_t ArraySize(const std::vector<T>& items, Size size) {
  size_t n = 2 + (items.empty() ? 0 : items.size() - 1);
  for (const T& item : items) n += size(item);
  return n;
}

}  // namespace

size_t AttributeJsonSize(const AttributeValue& v) {
  ObjectSize o;
  if (const int64_t* i = std::get_if<int64_t>(&v)) {
    o.Add("int", IntJsonSize(*i));
  } else if (const bool* b = std::get_if<bool>(&v)) {
    o.Add("bool", *b ? 4 : 5);
  } else if (const std::string* s = std::get_if<std::string>(&v)) {
    o.Add("string", StringJsonSize(*s));
  } else if (const StringList* l = std::get_if<StringList>(&v)) {
    o.Add("strings", StringsJsonSize(l->values));
  } else {
    o.Add("version", StringJsonSize(std::get<Version>(v).value));
  }
  return o.Total();
}

size_t CapacityJsonSize(const Capacity& c) {
  if (c.request_policy) return DumpJson(CapacityToJson(c)).size();  // rare: printed to count
  ObjectSize o;
  o.Add("value", StringJsonSize(c.value));
  return o.Total();
}

size_t SliceJsonSize(const Slice& s, const std::string& api_version) {
  ObjectSize spec;
  AddKept(
      s.extra_spec,
      [&](const std::string& k) {
        return k == "driver" || k == "pool" || k == "devices" ||
               (k == "nodeName" && !s.node_name.empty()) || (k == "mixins" && !s.mixins.empty());
      },
      spec);
  spec.Add("driver", StringJsonSize(s.driver));
  ObjectSize pool;
  pool.Add("name", StringJsonSize(s.pool));
  pool.Add("generation", IntJsonSize(s.generation));
  pool.Add("resourceSliceCount", IntJsonSize(s.slice_count));
  spec.Add("pool", pool.Total());
  if (!s.node_name.empty()) spec.Add("nodeName", StringJsonSize(s.node_name));
  if (!s.mixins.empty()) {
    ObjectSize mixins;
    mixins.Add("device", ArraySize(s.mixins, MixinJsonSize));
    spec.Add("mixins", mixins.Total());
  }
  spec.Add("devices", ArraySize(s.devices, DeviceJsonSize));
  ObjectSize top;
  top.Add("apiVersion", StringJsonSize(api_version));
  top.Add("kind", StringJsonSize("ResourceSlice"));
  top.Add("metadata", s.metadata.is_object() ? DumpJson(s.metadata).size() : 2);
  top.Add("spec", spec.Total());
  return top.Total();
}

absl::StatusOr<Slice> SliceFromJson(const json& j) {
  if (!j.is_object()) return Bad("ResourceSlice", "must be an object");
  if (StringField(j, "kind") != "ResourceSlice") {
    return Bad("kind", absl::StrCat("must be ResourceSlice, got ",
                                    j.contains("kind") ? DumpJson(j["kind"]) : "nothing"));
  }
  Slice s;
  if (j.contains("metadata")) {
    if (!j["metadata"].is_object()) return Bad("metadata", "must be an object");
    s.metadata = j["metadata"];
  }
  const std::string name = StringField(s.metadata, "name");
  const std::string ctx = name.empty() ? "spec" : absl::StrCat("ResourceSlice \"", name, "\" spec");
  if (!j.contains("spec") || !j["spec"].is_object()) return Bad(ctx, "is required");
  for (const auto& [k, v] : j["spec"].items()) {
    const std::string p = absl::StrCat(ctx, ".", k);
    if (k == "driver") {
      absl::StatusOr<std::string> d = String(v, p);
      if (!d.ok()) return d.status();
      s.driver = *d;
    } else if (k == "nodeName") {
      absl::StatusOr<std::string> n = String(v, p);
      if (!n.ok()) return n.status();
      s.node_name = *n;
    } else if (k == "pool") {
      if (!v.is_object()) return Bad(p, "must be an object");
      absl::StatusOr<std::string> pn = String(v.value("name", json()), p + ".name");
      if (!pn.ok()) return pn.status();
      s.pool = *pn;
      absl::StatusOr<int64_t> gen = Int(v.value("generation", json(0)), p + ".generation");
      if (!gen.ok()) return gen.status();
      s.generation = *gen;
      absl::StatusOr<int64_t> count =
          Int(v.value("resourceSliceCount", json(1)), p + ".resourceSliceCount");
      if (!count.ok()) return count.status();
      s.slice_count = *count;
    } else if (k == "mixins") {
      if (!v.is_object()) return Bad(p, "must be an object");
      for (const auto& [mk, mv] : v.items()) {
        if (mk != "device") return Bad(absl::StrCat(p, ".", mk), "is not supported by topodra");
        if (!mv.is_array()) return Bad(p + ".device", "must be a list");
        for (size_t i = 0; i < mv.size(); ++i) {
          absl::StatusOr<DeviceMixin> m = MixinFromJson(mv[i], absl::StrCat(p, ".device[", i, "]"));
          if (!m.ok()) return m.status();
          s.mixins.push_back(*std::move(m));
        }
      }
    } else if (k == "devices") {
      if (!v.is_array()) return Bad(p, "must be a list");
      for (size_t i = 0; i < v.size(); ++i) {
        absl::StatusOr<Device> d = DeviceFromJson(v[i], absl::StrCat(p, "[", i, "]"));
        if (!d.ok()) return d.status();
        s.devices.push_back(*std::move(d));
      }
    } else {
      s.extra_spec[k] = v;
    }
  }
  if (s.driver.empty()) return Bad(ctx + ".driver", "is required");
  return s;
}

json SliceListToJson(const std::vector<Slice>& slices, const std::string& api_version) {
  json items = json::array();
  for (const Slice& s : slices) items.push_back(SliceToJson(s, api_version));
  return {{"apiVersion", "v1"}, {"kind", "List"}, {"metadata", json::object()}, {"items", items}};
}

absl::StatusOr<std::vector<Slice>> SlicesFromDocument(const json& doc) {
  if (!doc.is_object()) return Bad("document", "must be an object");
  std::vector<Slice> out;
  const std::string kind = StringField(doc, "kind");
  if (kind == "List" || kind == "ResourceSliceList") {
    if (!doc.contains("items") || !doc["items"].is_array()) return Bad("items", "must be a list");
    for (size_t i = 0; i < doc["items"].size(); ++i) {
      // Items of a list the API server returns carry no kind of their own.
      json item = doc["items"][i];
      if (item.is_object() && !item.contains("kind")) item["kind"] = "ResourceSlice";
      absl::StatusOr<Slice> s = SliceFromJson(item);
      if (!s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("items[", i, "]: ", std::string(s.status().message())));
      }
      out.push_back(*std::move(s));
    }
    return out;
  }
  absl::StatusOr<Slice> s = SliceFromJson(doc);
  if (!s.ok()) return s.status();
  out.push_back(*std::move(s));
  return out;
}

}  // namespace topodra::publish
