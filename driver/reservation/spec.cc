#include "driver/reservation/spec.h"

#include <charconv>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace topodra::reservation {
namespace {

using json = nlohmann::json;

std::string Show(const json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 80) + "...";
  return text;
}

absl::Status Invalid(const std::string& path, const json& value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", Show(value), " ", why));
}

absl::Status TypeError(const std::string& path, const char* expected, const json& got) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": expected ", expected, ", got ", got.type_name(), " ", Show(got)));
}

// Absent and null both mean "not set".
const json* Member(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<std::string>> OptString(const json& object, const char* key,
                                                     const std::string& path, size_t max_len) {
  const json* v = Member(object, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return TypeError(path, "a string", *v);
  const std::string& s = v->get_ref<const std::string&>();
  if (s.empty()) return Invalid(path, *v, "is empty");
  if (s.size() > max_len) return Invalid(path, *v, absl::StrCat("is longer than ", max_len));
  return std::optional<std::string>(s);
}

absl::StatusOr<std::optional<int>> OptInt(const json& object, const char* key,
                                          const std::string& path, int64_t min, int64_t max) {
  const json* v = Member(object, key);
  if (v == nullptr) return std::optional<int>();
  if (!v->is_number_integer()) return TypeError(path, "an integer", *v);
  const int64_t n = v->get<int64_t>();
  if (n < min || n > max)
    return Invalid(path, *v, absl::StrCat("is not in [", min, ", ", max, "]"));
  return std::optional<int>(static_cast<int>(n));
}

absl::StatusOr<bool> OptBool(const json& object, const char* key, const std::string& path,
                             bool fallback) {
  const json* v = Member(object, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return TypeError(path, "a boolean", *v);
  return v->get<bool>();
}

absl::StatusOr<CpuWant> ParseCpus(const json& j) {
  const std::string path = "spec.cpus";
  if (!j.is_object()) return TypeError(path, "an object", j);
  CpuWant want;
  absl::StatusOr<std::optional<int>> count = OptInt(j, "count", path + ".count", 1, 65536);
  if (!count.ok()) return count.status();
  absl::StatusOr<std::optional<std::string>> cpuset =
      OptString(j, "cpuset", path + ".cpuset", 1024);
  if (!cpuset.ok()) return cpuset.status();
  if (!*count && !*cpuset) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": needs count or cpuset"));
  }
  if (*cpuset) {
    absl::StatusOr<CpuSet> set = CpuSet::Parse(**cpuset);
    if (!set.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".cpuset: ", set.status().message()));
    }
    if (set->Empty()) return Invalid(path + ".cpuset", **cpuset, "names no CPU");
    if (*count && **count != set->Size()) {
      return Invalid(
          path + ".count", **count,
          absl::StrCat("differs from the ", set->Size(), " CPUs of cpuset \"", **cpuset, "\""));
    }
    want.cpuset = *set;
  }
  want.count = *count ? **count : want.cpuset->Size();
  absl::StatusOr<std::optional<int>> numa = OptInt(j, "numaNode", path + ".numaNode", 0, 65535);
  if (!numa.ok()) return numa.status();
  absl::StatusOr<std::optional<int>> socket = OptInt(j, "socket", path + ".socket", 0, 65535);
  if (!socket.ok()) return socket.status();
  want.numa_node = *numa;
  want.socket = *socket;
  return want;
}

absl::StatusOr<GpuWant> ParseGpus(const json& j) {
  const std::string path = "spec.gpus";
  if (!j.is_object()) return TypeError(path, "an object", j);
  GpuWant want;
  absl::StatusOr<std::optional<int>> count = OptInt(j, "count", path + ".count", 1, 256);
  if (!count.ok()) return count.status();
  if (const json* devices = Member(j, "devices"); devices != nullptr) {
    if (!devices->is_array()) return TypeError(path + ".devices", "an array", *devices);
    if (devices->size() > 256)
      return Invalid(path + ".devices", devices->size(), "entries, over 256");
    for (size_t i = 0; i < devices->size(); ++i) {
      const json& d = (*devices)[i];
      const std::string dpath = absl::StrCat(path, ".devices[", i, "]");
      if (!d.is_string()) return TypeError(dpath, "a string", d);
      const std::string& name = d.get_ref<const std::string&>();
      if (name.empty() || name.size() > 63) return Invalid(dpath, d, "is not a device name");
      for (const std::string& seen : want.devices) {
        if (seen == name) return Invalid(dpath, d, "is listed twice");
      }
      want.devices.push_back(name);
    }
  }
  if (!*count && want.devices.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": needs count or devices"));
  }
  if (*count && !want.devices.empty() && **count != static_cast<int>(want.devices.size())) {
    return Invalid(path + ".count", **count,
                   absl::StrCat("differs from the ", want.devices.size(), " devices listed"));
  }
  want.count = *count ? **count : static_cast<int>(want.devices.size());
  return want;
}

absl::StatusOr<LabelSelector> ParseSelector(const json& j, const std::string& path) {
  if (!j.is_object()) return TypeError(path, "an object", j);
  LabelSelector sel;
  if (const json* labels = Member(j, "matchLabels"); labels != nullptr) {
    if (!labels->is_object()) return TypeError(path + ".matchLabels", "an object", *labels);
    for (const auto& [k, v] : labels->items()) {
      if (!v.is_string()) {
        return TypeError(absl::StrCat(path, ".matchLabels[\"", k, "\"]"), "a string", v);
      }
      sel.match_labels.emplace(k, v.get<std::string>());
    }
  }
  if (const json* exprs = Member(j, "matchExpressions"); exprs != nullptr) {
    if (!exprs->is_array()) return TypeError(path + ".matchExpressions", "an array", *exprs);
    for (size_t i = 0; i < exprs->size(); ++i) {
      const json& e = (*exprs)[i];
      const std::string epath = absl::StrCat(path, ".matchExpressions[", i, "]");
      if (!e.is_object()) return TypeError(epath, "an object", e);
      LabelRequirement r;
      absl::StatusOr<std::optional<std::string>> key = OptString(e, "key", epath + ".key", 317);
      if (!key.ok()) return key.status();
      if (!*key) return absl::InvalidArgumentError(absl::StrCat(epath, ".key: missing"));
      r.key = **key;
      absl::StatusOr<std::optional<std::string>> op =
          OptString(e, "operator", epath + ".operator", 32);
      if (!op.ok()) return op.status();
      if (!*op) return absl::InvalidArgumentError(absl::StrCat(epath, ".operator: missing"));
      if (**op == "In") {
        r.op = LabelRequirement::Op::kIn;
      } else if (**op == "NotIn") {
        r.op = LabelRequirement::Op::kNotIn;
      } else if (**op == "Exists") {
        r.op = LabelRequirement::Op::kExists;
      } else if (**op == "DoesNotExist") {
        r.op = LabelRequirement::Op::kDoesNotExist;
      } else {
        return Invalid(epath + ".operator", **op, "is not In, NotIn, Exists or DoesNotExist");
      }
      if (const json* values = Member(e, "values"); values != nullptr) {
        if (!values->is_array()) return TypeError(epath + ".values", "an array", *values);
        for (size_t k = 0; k < values->size(); ++k) {
          const json& v = (*values)[k];
          if (!v.is_string()) {
            return TypeError(absl::StrCat(epath, ".values[", k, "]"), "a string", v);
          }
          r.values.push_back(v.get<std::string>());
        }
      }
      const bool set_op = r.op == LabelRequirement::Op::kIn || r.op == LabelRequirement::Op::kNotIn;
      if (set_op && r.values.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(epath, ".values: ", **op, " needs at least one value"));
      }
      if (!set_op && !r.values.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(epath, ".values: ", **op, " takes no values"));
      }
      sel.match_expressions.push_back(std::move(r));
    }
  }
  return sel;
}

absl::StatusOr<Owner> ParseOwner(const json& j, const std::string& path) {
  if (!j.is_object()) return TypeError(path, "an object", j);
  Owner o;
  absl::StatusOr<std::optional<std::string>> ns =
      OptString(j, "namespace", path + ".namespace", 63);
  if (!ns.ok()) return ns.status();
  o.ns = *ns;
  absl::StatusOr<std::optional<std::string>> name =
      OptString(j, "claimName", path + ".claimName", 253);
  if (!name.ok()) return name.status();
  o.claim_name = *name;
  if (const json* sel = Member(j, "claimSelector"); sel != nullptr) {
    absl::StatusOr<LabelSelector> s = ParseSelector(*sel, path + ".claimSelector");
    if (!s.ok()) return s.status();
    // An empty selector matches every claim (as in Kubernetes): here that would open the
    // reservation to everyone, which is never what an owner list means.
    if (s->match_labels.empty() && s->match_expressions.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".claimSelector: empty (it would match every claim)"));
    }
    o.claim_selector = *std::move(s);
  }
  if (const json* c = Member(j, "controller"); c != nullptr) {
    const std::string cpath = path + ".controller";
    if (!c->is_object()) return TypeError(cpath, "an object", *c);
    ControllerMatch m;
    for (auto [key, out, required] :
         {std::tuple<const char*, std::string*, bool>{"apiVersion", &m.api_version, false},
          {"kind", &m.kind, true},
          {"name", &m.name, true},
          {"uid", &m.uid, false}}) {
      absl::StatusOr<std::optional<std::string>> v =
          OptString(*c, key, absl::StrCat(cpath, ".", key), 317);
      if (!v.ok()) return v.status();
      if (!*v && required) {
        return absl::InvalidArgumentError(absl::StrCat(cpath, ".", key, ": missing"));
      }
      if (*v) *out = **v;
    }
    o.controller = std::move(m);
  }
  // An owner without fields would match every claim: a reservation for everyone is no
  // reservation, and a typo must not silently open it.
  if (!o.ns && !o.claim_name && !o.claim_selector && !o.controller) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": names nothing to match (namespace, claimName, claimSelector or controller)"));
  }
  return o;
}

}  // namespace

absl::StatusOr<absl::Duration> ParseDuration(const std::string& text) {
  if (text.empty() || text.size() > 32) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a duration"));
  }
  absl::Duration total = absl::ZeroDuration();
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    int64_t n = 0;
    if (j == i || std::from_chars(text.data() + i, text.data() + j, n).ec != std::errc()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", text, "\" is not a duration (e.g. 30m, 2h, 1h30m)"));
    }
    size_t k = j;
    while (k < text.size() && !(text[k] >= '0' && text[k] <= '9')) ++k;
    const std::string unit = text.substr(j, k - j);
    if (unit == "ms") {
      total += absl::Milliseconds(n);
    } else if (unit == "s") {
      total += absl::Seconds(n);
    } else if (unit == "m") {
      total += absl::Minutes(n);
    } else if (unit == "h") {
      total += absl::Hours(n);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", text, "\" is not a duration (units ms, s, m, h)"));
    }
    i = k;
  }
  return total;
}

absl::StatusOr<absl::Time> ParseRfc3339(const std::string& text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not an RFC 3339 time"));
  }
  return t;
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(absl::ToUnixSeconds(t)),
                          absl::UTCTimeZone());
}

absl::StatusOr<Spec> ParseSpec(const json& j) {
  if (!j.is_object()) return TypeError("spec", "an object", j);
  Spec spec;
  absl::StatusOr<std::optional<std::string>> node = OptString(j, "nodeName", "spec.nodeName", 253);
  if (!node.ok()) return node.status();
  if (!*node) return absl::InvalidArgumentError("spec.nodeName: missing");
  spec.node_name = **node;
  if (const json* cpus = Member(j, "cpus"); cpus != nullptr) {
    absl::StatusOr<CpuWant> w = ParseCpus(*cpus);
    if (!w.ok()) return w.status();
    spec.cpus = *std::move(w);
  }
  if (const json* gpus = Member(j, "gpus"); gpus != nullptr) {
    absl::StatusOr<GpuWant> w = ParseGpus(*gpus);
    if (!w.ok()) return w.status();
    spec.gpus = *std::move(w);
  }
  if (!spec.cpus && !spec.gpus) {
    return absl::InvalidArgumentError("spec: holds neither cpus nor gpus");
  }
  const json* owners = Member(j, "owners");
  if (owners == nullptr) return absl::InvalidArgumentError("spec.owners: missing");
  if (!owners->is_array()) return TypeError("spec.owners", "an array", *owners);
  if (owners->empty() || owners->size() > 16) {
    return Invalid("spec.owners", owners->size(), "owners (want 1 to 16)");
  }
  for (size_t i = 0; i < owners->size(); ++i) {
    absl::StatusOr<Owner> o = ParseOwner((*owners)[i], absl::StrCat("spec.owners[", i, "]"));
    if (!o.ok()) return o.status();
    spec.owners.push_back(*std::move(o));
  }
  absl::StatusOr<std::optional<std::string>> ttl = OptString(j, "ttl", "spec.ttl", 32);
  if (!ttl.ok()) return ttl.status();
  absl::StatusOr<std::optional<std::string>> expires = OptString(j, "expires", "spec.expires", 64);
  if (!expires.ok()) return expires.status();
  if (*ttl && *expires) {
    return absl::InvalidArgumentError("spec: ttl and expires are mutually exclusive");
  }
  if (*ttl) {
    absl::StatusOr<absl::Duration> d = ParseDuration(**ttl);
    if (!d.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.ttl: ", d.status().message()));
    }
    // Ten years: longer is a mistake, and far-future times do not fit RFC 3339's 4-digit year.
    if (*d > absl::Hours(24 * 3660)) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.ttl: \"", **ttl, "\" is longer than ten years"));
    }
    spec.ttl = *d;
  }
  if (*expires) {
    absl::StatusOr<absl::Time> t = ParseRfc3339(**expires);
    if (!t.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.expires: ", t.status().message()));
    }
    if (*t > absl::FromCivil(absl::CivilSecond(9999, 12, 31, 23, 59, 59), absl::UTCTimeZone())) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.expires: \"", **expires, "\" is after the year 9999"));
    }
    spec.expires = *t;
  }
  absl::StatusOr<bool> pre = OptBool(j, "preAllocation", "spec.preAllocation", false);
  if (!pre.ok()) return pre.status();
  spec.pre_allocation = *pre;
  absl::StatusOr<bool> once = OptBool(j, "allocateOnce", "spec.allocateOnce", true);
  if (!once.ok()) return once.status();
  spec.allocate_once = *once;
  return spec;
}

absl::StatusOr<Object> ParseObject(const json& j) {
  if (!j.is_object()) return TypeError("reservation", "an object", j);
  const json* meta = Member(j, "metadata");
  if (meta == nullptr || !meta->is_object()) {
    return absl::InvalidArgumentError("reservation: metadata missing");
  }
  Object o;
  for (auto [key, out] : {std::pair<const char*, std::string*>{"name", &o.name},
                          {"uid", &o.uid},
                          {"resourceVersion", &o.resource_version}}) {
    const json* v = Member(*meta, key);
    if (v != nullptr && v->is_string()) *out = v->get<std::string>();
  }
  if (o.name.empty() || o.uid.empty()) {
    return absl::InvalidArgumentError("reservation: metadata.name or metadata.uid missing");
  }
  if (const json* g = Member(*meta, "generation"); g != nullptr && g->is_number_integer()) {
    o.generation = g->get<int64_t>();
  }
  if (const json* c = Member(*meta, "creationTimestamp"); c != nullptr && c->is_string()) {
    if (absl::StatusOr<absl::Time> t = ParseRfc3339(c->get<std::string>()); t.ok()) o.created = *t;
  }
  o.deleting = Member(*meta, "deletionTimestamp") != nullptr;
  if (const json* s = Member(j, "spec"); s != nullptr) o.spec = *s;
  if (const json* s = Member(j, "status"); s != nullptr && s->is_object()) o.status = *s;
  absl::StatusOr<Spec> spec = ParseSpec(o.spec);
  if (spec.ok()) {
    o.parsed = *std::move(spec);
  } else {
    o.spec_error = std::string(spec.status().message());
  }
  return o;
}

bool Matches(const LabelSelector& selector, const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : selector.match_labels) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  for (const LabelRequirement& r : selector.match_expressions) {
    auto it = labels.find(r.key);
    const bool has = it != labels.end();
    auto in_values = [&] {
      for (const std::string& v : r.values) {
        if (has && it->second == v) return true;
      }
      return false;
    };
    switch (r.op) {
      case LabelRequirement::Op::kIn:
        if (!in_values()) return false;
        break;
      case LabelRequirement::Op::kNotIn:
        if (in_values()) return false;
        break;
      case LabelRequirement::Op::kExists:
        if (!has) return false;
        break;
      case LabelRequirement::Op::kDoesNotExist:
        if (has) return false;
        break;
    }
  }
  return true;
}

bool Matches(const Owner& owner, const claims::Claim& claim) {
  if (owner.ns && *owner.ns != claim.namespace_name) return false;
  if (owner.claim_name && *owner.claim_name != claim.name) return false;
  if (owner.claim_selector && !Matches(*owner.claim_selector, claim.labels)) return false;
  if (owner.controller) {
    if (!claim.controller) return false;
    const ControllerMatch& m = *owner.controller;
    const claims::ControllerRef& c = *claim.controller;
    if (m.kind != c.kind || m.name != c.name) return false;
    if (!m.api_version.empty() && m.api_version != c.api_version) return false;
    if (!m.uid.empty() && m.uid != c.uid) return false;
  }
  return true;
}

bool IsOwner(const Spec& spec, const claims::Claim& claim) {
  for (const Owner& o : spec.owners) {
    if (Matches(o, claim)) return true;
  }
  return false;
}

std::optional<absl::Time> ExpiryOf(const Spec& spec, absl::Time created) {
  if (spec.expires) return *spec.expires;
  if (spec.ttl) return created + *spec.ttl;
  return std::nullopt;
}

}  // namespace topodra::reservation
