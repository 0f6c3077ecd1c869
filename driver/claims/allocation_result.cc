#include "driver/claims/allocation_result.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace topodra::claims {
namespace {

using json = nlohmann::json;

absl::Status TypeError(const std::string& path, const char* expected, const json& got) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": expected ", expected, ", got ", got.type_name()));
}

// Kubernetes omits empty fields but clients may send explicit nulls; both mean "absent".
const json* Member(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status ReadString(const json& object, const char* key, const std::string& path, bool required,
                        std::string& out) {
  const json* value = Member(object, key);
  if (value == nullptr) {
    if (required) return absl::InvalidArgumentError(absl::StrCat(path, ": missing"));
    return absl::OkStatus();
  }
  if (!value->is_string()) return TypeError(path, "a string", *value);
  out = value->get_ref<const std::string&>();
  if (required && out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty"));
  return absl::OkStatus();
}

absl::StatusOr<DeviceResult> ParseResult(const json& j, const std::string& path) {
  if (!j.is_object()) return TypeError(path, "an object", j);
  DeviceResult r;
  if (absl::Status s = ReadString(j, "request", path + ".request", true, r.request); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadString(j, "driver", path + ".driver", true, r.driver); !s.ok()) return s;
  if (absl::Status s = ReadString(j, "pool", path + ".pool", true, r.pool); !s.ok()) return s;
  if (absl::Status s = ReadString(j, "device", path + ".device", true, r.device); !s.ok()) return s;
  if (absl::Status s = ReadString(j, "shareID", path + ".shareID", false, r.share_id); !s.ok()) {
    return s;
  }
  if (const json* admin = Member(j, "adminAccess"); admin != nullptr) {
    if (!admin->is_boolean()) return TypeError(path + ".adminAccess", "a boolean", *admin);
    r.admin_access = admin->get<bool>();
  }
  if (const json* capacity = Member(j, "consumedCapacity"); capacity != nullptr) {
    const std::string cpath = path + ".consumedCapacity";
    if (!capacity->is_object()) return TypeError(cpath, "an object", *capacity);
    for (const auto& [name, quantity] : capacity->items()) {
      if (!quantity.is_string()) {
        return TypeError(absl::StrCat(cpath, "[\"", name, "\"]"), "a quantity string", quantity);
      }
      r.consumed_capacity.emplace(name, quantity.get_ref<const std::string&>());
    }
  }
  return r;
}

absl::StatusOr<DeviceConfig> ParseConfig(const json& j, const std::string& path) {
  if (!j.is_object()) return TypeError(path, "an object", j);
  DeviceConfig c;
  std::string source;
  if (absl::Status s = ReadString(j, "source", path + ".source", true, source); !s.ok()) return s;
  if (source == "FromClass") {
    c.source = ConfigSource::kFromClass;
  } else if (source == "FromClaim") {
    c.source = ConfigSource::kFromClaim;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path, ".source: unknown source \"", source,
                                                   "\" (expected FromClass or FromClaim)"));
  }
  if (const json* requests = Member(j, "requests"); requests != nullptr) {
    const std::string rpath = path + ".requests";
    if (!requests->is_array()) return TypeError(rpath, "an array", *requests);
    if (requests->size() > static_cast<size_t>(kMaxRequestsPerConfig)) {
      return absl::InvalidArgumentError(absl::StrCat(
          rpath, ": ", requests->size(), " entries, more than ", kMaxRequestsPerConfig));
    }
    for (size_t i = 0; i < requests->size(); ++i) {
      const json& request = (*requests)[i];
      if (!request.is_string()) {
        return TypeError(absl::StrCat(rpath, "[", i, "]"), "a string", request);
      }
      c.requests.push_back(request.get_ref<const std::string&>());
    }
  }
  const json* opaque = Member(j, "opaque");
  if (opaque == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".opaque: missing (the only config kind this driver understands)"));
  }
  if (!opaque->is_object()) return TypeError(path + ".opaque", "an object", *opaque);
  if (absl::Status s = ReadString(*opaque, "driver", path + ".opaque.driver", true, c.driver);
      !s.ok()) {
    return s;
  }
  const json* parameters = Member(*opaque, "parameters");
  if (parameters == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".opaque.parameters: missing"));
  }
  if (!parameters->is_object()) {
    return TypeError(path + ".opaque.parameters", "an object", *parameters);
  }
  c.parameters = *parameters;
  return c;
}

}  // namespace

const char* ConfigSourceName(ConfigSource source) {
  return source == ConfigSource::kFromClass ? "FromClass" : "FromClaim";
}

std::string Claim::Ref() const { return absl::StrCat(namespace_name, "/", name); }

absl::StatusOr<Claim> ParseClaim(const json& j) {
  if (!j.is_object()) return TypeError("claim", "an object", j);
  Claim claim;
  const json* metadata = Member(j, "metadata");
  if (metadata == nullptr) return absl::InvalidArgumentError("metadata: missing");
  if (!metadata->is_object()) return TypeError("metadata", "an object", *metadata);
  if (absl::Status s = ReadString(*metadata, "uid", "metadata.uid", true, claim.uid); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadString(*metadata, "namespace", "metadata.namespace", true, claim.namespace_name);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadString(*metadata, "name", "metadata.name", true, claim.name); !s.ok()) {
    return s;
  }

  if (const json* labels = Member(*metadata, "labels"); labels != nullptr) {
    if (!labels->is_object()) return TypeError("metadata.labels", "an object", *labels);
    for (const auto& [k, v] : labels->items()) {
      if (!v.is_string()) {
        return TypeError(absl::StrCat("metadata.labels[\"", k, "\"]"), "a string", v);
      }
      claim.labels.emplace(k, v.get_ref<const std::string&>());
    }
  }
  if (const json* annotations = Member(*metadata, "annotations"); annotations != nullptr) {
    if (!annotations->is_object()) {
      return TypeError("metadata.annotations", "an object", *annotations);
    }
    constexpr char kPodClaimName[] = "resource.kubernetes.io/pod-claim-name";
    if (const json* v = Member(*annotations, kPodClaimName); v != nullptr) {
      if (!v->is_string()) {
        return TypeError(absl::StrCat("metadata.annotations[\"", kPodClaimName, "\"]"), "a string",
                         *v);
      }
      claim.pod_claim_name = v->get<std::string>();
    }
  }
  if (const json* refs = Member(*metadata, "ownerReferences"); refs != nullptr) {
    if (!refs->is_array()) return TypeError("metadata.ownerReferences", "an array", *refs);
    for (size_t i = 0; i < refs->size(); ++i) {
      const json& r = (*refs)[i];
      const std::string rpath = absl::StrCat("metadata.ownerReferences[", i, "]");
      if (!r.is_object()) return TypeError(rpath, "an object", r);
      const json* controller = Member(r, "controller");
      if (controller == nullptr || !controller->is_boolean() || !controller->get<bool>()) continue;
      ControllerRef c;
      for (auto [key, out] : {std::pair<const char*, std::string*>{"apiVersion", &c.api_version},
                              {"kind", &c.kind},
                              {"name", &c.name},
                              {"uid", &c.uid}}) {
        if (absl::Status s = ReadString(r, key, absl::StrCat(rpath, ".", key), false, *out);
            !s.ok()) {
          return s;
        }
      }
      claim.controller = std::move(c);
    }
  }

  const json* status = Member(j, "status");
  if (status == nullptr) return claim;
  if (!status->is_object()) return TypeError("status", "an object", *status);
  // Only for log lines: entries that are not well-formed pods are skipped, never an error.
  if (const json* reserved = Member(*status, "reservedFor");
      reserved != nullptr && reserved->is_array()) {
    for (const json& r : *reserved) {
      if (r.is_object() && r.value("resource", json()) == "pods" && r.contains("name") &&
          r["name"].is_string()) {
        claim.pods.push_back(claim.namespace_name + "/" + r["name"].get<std::string>());
      }
    }
  }
  const json* allocation = Member(*status, "allocation");
  if (allocation == nullptr) return claim;
  if (!allocation->is_object()) return TypeError("status.allocation", "an object", *allocation);
  claim.allocated = true;
  const json* devices = Member(*allocation, "devices");
  if (devices == nullptr) return claim;
  const std::string dpath = "status.allocation.devices";
  if (!devices->is_object()) return TypeError(dpath, "an object", *devices);

  if (const json* results = Member(*devices, "results"); results != nullptr) {
    const std::string rpath = dpath + ".results";
    if (!results->is_array()) return TypeError(rpath, "an array", *results);
    if (results->size() > static_cast<size_t>(kMaxResults)) {
      return absl::InvalidArgumentError(
          absl::StrCat(rpath, ": ", results->size(), " entries, more than ", kMaxResults));
    }
    for (size_t i = 0; i < results->size(); ++i) {
      absl::StatusOr<DeviceResult> r = ParseResult((*results)[i], absl::StrCat(rpath, "[", i, "]"));
      if (!r.ok()) return r.status();
      claim.results.push_back(*std::move(r));
    }
  }
  if (const json* configs = Member(*devices, "config"); configs != nullptr) {
    const std::string cpath = dpath + ".config";
    if (!configs->is_array()) return TypeError(cpath, "an array", *configs);
    if (configs->size() > static_cast<size_t>(kMaxConfigs)) {
      return absl::InvalidArgumentError(
          absl::StrCat(cpath, ": ", configs->size(), " entries, more than ", kMaxConfigs));
    }
    for (size_t i = 0; i < configs->size(); ++i) {
      absl::StatusOr<DeviceConfig> c = ParseConfig((*configs)[i], absl::StrCat(cpath, "[", i, "]"));
      if (!c.ok()) return c.status();
      claim.configs.push_back(*std::move(c));
    }
  }
  return claim;
}

std::string BaseRequest(std::string_view request) {
  return std::string(request.substr(0, request.find('/')));
}

std::vector<const DeviceResult*> ResultsForDriver(const Claim& claim, std::string_view driver) {
  std::vector<const DeviceResult*> out;
  for (const DeviceResult& r : claim.results) {
    if (r.driver == driver) out.push_back(&r);
  }
  return out;
}

std::vector<const DeviceConfig*> ConfigsFor(const Claim& claim, const DeviceResult& result,
                                            std::string_view driver) {
  const std::string base = BaseRequest(result.request);
  auto applies = [&](const DeviceConfig& c) {
    if (c.driver != driver) return false;
    if (c.requests.empty()) return true;
    for (const std::string& r : c.requests) {
      if (r == base || r == result.request) return true;
    }
    return false;
  };
  std::vector<const DeviceConfig*> out;
  for (ConfigSource source : {ConfigSource::kFromClass, ConfigSource::kFromClaim}) {
    for (const DeviceConfig& c : claim.configs) {
      if (c.source == source && applies(c)) out.push_back(&c);
    }
  }
  return out;
}

}  // namespace topodra::claims
