#include "driver/prepare/device_metadata.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/json_print.h"
#include "common/status.h"
#include "driver/prepare/identifiers.h"

namespace topodra::prepare {
namespace {

using json = nlohmann::json;

// NAME_MAX of Linux file systems: "<ns>_<name>" is one path component.
constexpr size_t kMaxComponent = 255;

// How many values an attribute counts for against kMaxMetadataValues: a list its elements.
int ValueCount(const json& attribute) {
  if (!attribute.is_object() || attribute.size() != 1) return 1;
  const json& v = attribute.begin().value();
  return v.is_array() ? static_cast<int>(v.size()) : 1;
}

std::string Qualified(const std::string& driver, const std::string& name) {
  return absl::StrContains(name, '/') ? name : absl::StrCat(driver, "/", name);
}

// Text any reader can take, whatever bytes a published string carried: nlohmann's print (with
// an indent of 2 for the documents), bytes that are not UTF-8 as U+FFFD.
void AppendQuoted(std::string* out, const json& s) { AppendJson(s, /*indent=*/-1, 0, out); }

// `j` as the value of a key whose object's members are indented by `indent` spaces: every line
// after the first indented that much more.
void AppendIndented(std::string* out, const json& j, int indent) {
  AppendJson(j, /*indent=*/2, indent, out);
}

struct RequestGroup {
  std::string base;
  // Full request name ("<main>" or "<main>/<sub>") -> its devices, in order of appearance.
  std::vector<std::pair<std::string, std::vector<const MetadataDevice*>>> requests;
};

// The v1beta1 object of one base request, as the tree the state stores (compact, keys sorted).
// The file's text is printed from it (ContentOf), so what start restores from the stored tree is
// what prepare wrote, byte for byte. Its numbers are attribute values of resource.k8s.io's
// DeviceAttribute ("int" an int64, "ints" a list of them: topodra's CPU counts and NUMA nodes, a
// slice's published ints; the other kinds strings and bools), never a float. Keep it so: the
// state's fast decoder (state::canonical) accepts integers of at most 18 digits and no other
// numbers, and one float or longer integer in a stored document would send every start through the
// full parse of that state (still correct, the cost the fast decoder took away).
json Document(const claims::Claim& claim, const std::string& driver, const RequestGroup& group,
              std::vector<std::string>* notes) {
  json requests = json::array();
  for (const auto& [name, devices] : group.requests) {
    json list = json::array();
    for (const MetadataDevice* d : devices) {
      std::vector<std::string> dropped;
      json attributes = MetadataAttributes(driver, d->decided, d->published, &dropped);
      if (notes != nullptr && !dropped.empty()) {
        notes->push_back(absl::StrCat(
            "request \"", name, "\" device \"", d->name, "\": ", dropped.size(),
            " attribute(s) left out of the device metadata (at most ", kMaxMetadataAttributes,
            " attributes and ", kMaxMetadataValues, " values): ", absl::StrJoin(dropped, ", ")));
      }
      json device = {{"driver", driver}, {"pool", d->pool}, {"name", d->name}};
      if (!attributes.empty()) device["attributes"] = std::move(attributes);
      list.push_back(std::move(device));
    }
    requests.push_back({{"name", name}, {"devices", std::move(list)}});
  }
  json doc = {{"kind", "DeviceMetadata"},
              {"apiVersion", kMetadataApiV1beta1},
              {"metadata",
               {{"name", claim.name},
                {"namespace", claim.namespace_name},
                {"uid", claim.uid},
                {"generation", 1}}},
              {"requests", std::move(requests)}};
  if (!claim.pod_claim_name.empty()) doc["podClaimName"] = claim.pod_claim_name;
  return doc;
}

// The string member `key` of `object`, or nullptr.
const json* StringMember(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? &*it : nullptr;
}

// True when `object` has exactly the members `required` plus any of `optional`.
bool HasMembers(const json& object, std::initializer_list<const char*> required,
                std::initializer_list<const char*> optional = {}) {
  if (!object.is_object()) return false;
  size_t found = 0;
  for (const char* key : required) {
    if (!object.contains(key)) return false;
    ++found;
  }
  for (const char* key : optional) found += object.contains(key) ? 1 : 0;
  return found == object.size();
}

// Everything of the printed document after the apiVersion's value, as nlohmann prints an
// ordered_json with an indent of 2 in Go's order (the fixed members in the KEP's order, the
// attributes sorted by name as Go writes a map, which is how a json object keeps them), printed
// directly rather than through an ordered copy of the tree: that copy of every attribute cost
// more than the rest of a prepare's planning. The caller puts the head and the version before it
// (the two versions of the file differ only there). kChecked refuses (nullopt) a `doc` not of
// Document's shape: a stored document is read with it. Unchecked (the planner, printing the tree
// Document has just built) skips the member-set and type checks, which were a tenth of a prepare's
// metadata planning; it still gives nullopt rather than dereference a missing string member.
template <bool kChecked>
std::optional<std::string> DocumentAfterVersion(const json& doc) {
  if constexpr (kChecked) {
    if (!HasMembers(doc, {"kind", "apiVersion", "metadata", "requests"}, {"podClaimName"})) {
      return std::nullopt;
    }
  }
  const json& meta = doc["metadata"];
  const json& requests = doc["requests"];
  const json* pod_claim_name = StringMember(doc, "podClaimName");
  if constexpr (kChecked) {
    if (!HasMembers(meta, {"name", "namespace", "uid", "generation"}) || !requests.is_array() ||
        (doc.contains("podClaimName") && pod_claim_name == nullptr) || meta["generation"] != 1) {
      return std::nullopt;
    }
  }
  const json* name = StringMember(meta, "name");
  const json* ns = StringMember(meta, "namespace");
  const json* uid = StringMember(meta, "uid");
  if (name == nullptr || ns == nullptr || uid == nullptr) return std::nullopt;
  std::string out = "\",\n  \"metadata\": {\n    \"name\": ";
  AppendQuoted(&out, *name);
  out += ",\n    \"namespace\": ";
  AppendQuoted(&out, *ns);
  out += ",\n    \"uid\": ";
  AppendQuoted(&out, *uid);
  out += ",\n    \"generation\": 1\n  },\n";
  if (pod_claim_name != nullptr) {
    out += "  \"podClaimName\": ";
    AppendQuoted(&out, *pod_claim_name);
    out += ",\n";
  }
  out += "  \"requests\": ";
  if (requests.empty()) out += "[]";
  for (size_t i = 0; i < requests.size(); ++i) {
    const json& request = requests[i];
    if constexpr (kChecked) {
      if (!HasMembers(request, {"name", "devices"}) || !request["devices"].is_array()) {
        return std::nullopt;
      }
    }
    const json* request_name = StringMember(request, "name");
    const json& devices = request["devices"];
    if (request_name == nullptr) return std::nullopt;
    out += i == 0 ? "[\n    {\n      \"name\": " : ",\n    {\n      \"name\": ";
    AppendQuoted(&out, *request_name);
    out += ",\n      \"devices\": ";
    if (devices.empty()) out += "[]";
    for (size_t j = 0; j < devices.size(); ++j) {
      const json& d = devices[j];
      if constexpr (kChecked) {
        if (!HasMembers(d, {"driver", "pool", "name"}, {"attributes"})) return std::nullopt;
      }
      const json* driver = StringMember(d, "driver");
      const json* pool = StringMember(d, "pool");
      const json* device_name = StringMember(d, "name");
      const auto attributes = d.find("attributes");
      if (driver == nullptr || pool == nullptr || device_name == nullptr ||
          (attributes != d.end() && !attributes->is_object())) {
        return std::nullopt;
      }
      out +=
          j == 0 ? "[\n        {\n          \"driver\": " : ",\n        {\n          \"driver\": ";
      AppendQuoted(&out, *driver);
      out += ",\n          \"pool\": ";
      AppendQuoted(&out, *pool);
      out += ",\n          \"name\": ";
      AppendQuoted(&out, *device_name);
      if (attributes != d.end()) {
        out += ",\n          \"attributes\": ";
        AppendIndented(&out, *attributes, 10);
      }
      out += "\n        }";
    }
    if (!devices.empty()) out += "\n      ]";
    out += "\n    }";
  }
  if (!requests.empty()) out += "\n  ]";
  out += "\n}";
  return out;
}

// The file's content: the v1beta1 document, then the same with the v1alpha1 apiVersion, each
// ended by a newline. "kind" is printed first, "apiVersion" second.
std::string BothVersions(const std::string& after_version) {
  constexpr absl::string_view head = "{\n  \"kind\": \"DeviceMetadata\",\n  \"apiVersion\": \"";
  return absl::StrCat(head, kMetadataApiV1beta1, after_version, "\n", head, kMetadataApiV1alpha1,
                      after_version, "\n");
}

}  // namespace

std::string MetadataClaimDir(const std::string& root, const std::string& ns,
                             const std::string& name) {
  return absl::StrCat(root, "/", ns, "_", name);
}

std::string MetadataHostPath(const std::string& root, const std::string& ns,
                             const std::string& name, const std::string& base_request) {
  return absl::StrCat(MetadataClaimDir(root, ns, name), "/", base_request, "/", kMetadataFileName);
}

std::string MetadataRootOf(const std::string& host_path, const std::string& driver) {
  absl::string_view rest = host_path;
  if (!absl::ConsumeSuffix(&rest, absl::StrCat("/", kMetadataFileName))) return "";
  for (int part = 0; part < 2; ++part) {  // the request's directory, then the claim's
    const size_t slash = rest.rfind('/');
    if (slash == absl::string_view::npos || slash + 1 == rest.size()) return "";
    rest = rest.substr(0, slash);
  }
  const std::string tail = absl::StrCat("/", driver, "/", kMetadataDirName);
  if (!absl::StartsWith(rest, "/") || !absl::EndsWith(rest, tail)) return "";
  return std::string(rest);
}

std::string MetadataContainerPath(const std::string& driver, const std::string& claim_name,
                                  const std::string& pod_claim_name,
                                  const std::string& base_request) {
  const bool from_template = !pod_claim_name.empty();
  return absl::StrCat(kContainerMetadataRoot, "/",
                      from_template ? "resourceclaimtemplates" : "resourceclaims", "/",
                      from_template ? pod_claim_name : claim_name, "/", base_request, "/", driver,
                      "-metadata.json");
}

std::string MetadataCdiKind(const std::string& driver) { return driver + "/metadata"; }

std::string MetadataCdiFileName(const std::string& driver, const std::string& claim_uid,
                                const std::string& base_request) {
  return absl::StrCat(driver, "_metadata_", claim_uid, "_", base_request, ".json");
}

bool IsMetadataCdiFileOf(const std::string& driver, const std::string& file_name) {
  const std::string prefix = driver + "_metadata_";
  return absl::StartsWith(file_name, prefix) && absl::EndsWith(file_name, ".json") &&
         file_name.size() > prefix.size() + 5;
}

std::vector<MetadataAttribute> CpuRequestAttributes(const topology::Topology& topo,
                                                    const CpuSet& cpus) {
  std::vector<MetadataAttribute> out;
  const std::string list = cpus.ToString();
  if (list.size() <= kMaxMetadataString) {
    out.emplace_back(kCpusetAttribute, json{{"string", list}});
  } else {
    // Ranges are never cut: each piece is a list of its own.
    json parts = json::array();
    std::string piece;
    for (absl::string_view range : absl::StrSplit(list, ',')) {
      if (!piece.empty() && piece.size() + 1 + range.size() > kMaxMetadataString) {
        parts.push_back(piece);
        piece.clear();
      }
      absl::StrAppend(&piece, piece.empty() ? "" : ",", range);
    }
    if (!piece.empty()) parts.push_back(piece);
    out.emplace_back(kCpusetPartsAttribute, json{{"strings", parts}});
  }
  std::set<int> numa;
  for (int cpu : cpus) {
    if (const int n = topo.NumaOf(cpu); n >= 0) numa.insert(n);
  }
  if (!numa.empty()) out.emplace_back(kNumaNodesAttribute, json{{"ints", numa}});
  return out;
}

json MetadataAttributes(const std::string& driver, const std::vector<MetadataAttribute>& decided,
                        const json& published, std::vector<std::string>* dropped) {
  json out = json::object();
  int values = 0;
  auto add = [&](const std::string& name, const json& value) {
    if (out.contains(name)) return;
    const int n = ValueCount(value);
    if (static_cast<int>(out.size()) >= kMaxMetadataAttributes || values + n > kMaxMetadataValues) {
      if (dropped != nullptr) dropped->push_back(name);
      return;
    }
    out[name] = value;
    values += n;
  };
  for (const auto& [name, value] : decided) add(Qualified(driver, name), value);
  if (published.is_object()) {
    for (const auto& [name, value] : published.items()) add(Qualified(driver, name), value);
  }
  return out;
}

absl::StatusOr<DeviceMetadataPlan> PlanDeviceMetadata(const claims::Claim& claim,
                                                      const std::string& driver,
                                                      const std::string& root,
                                                      const std::vector<MetadataDevice>& devices) {
  // The names become paths: those of the object the API server sent are checked like the ones
  // the kubelet sent (ClaimService compares only the uid).
  if (absl::Status id = ValidateClaimIdentity(claim.namespace_name, claim.name, claim.uid);
      !id.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("claim ", ShowClaimRef(claim.namespace_name, claim.name),
                     ": no device metadata path can be built: ", Message(id)));
  }
  const std::string who = absl::StrCat("claim ", claim.Ref());
  if (!claim.pod_claim_name.empty() && !IsDnsLabel(claim.pod_claim_name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": annotation ", kPodClaimNameAnnotation, " ", ShowValue(claim.pod_claim_name),
        " is not a DNS-1123 label (a pod's resourceClaims[].name): the device "
        "metadata path cannot be built from it"));
  }
  std::vector<RequestGroup> groups;
  for (const MetadataDevice& d : devices) {
    const std::string base = claims::BaseRequest(d.request);
    if (!IsDnsLabel(base)) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": request ", ShowValue(base),
                       " is not a DNS-1123 label: the device metadata path cannot be built "
                       "from it"));
    }
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const RequestGroup& x) { return x.base == base; });
    if (g == groups.end()) g = groups.insert(groups.end(), RequestGroup{base, {}});
    auto r = std::find_if(g->requests.begin(), g->requests.end(),
                          [&](const auto& x) { return x.first == d.request; });
    if (r == g->requests.end()) r = g->requests.insert(g->requests.end(), {d.request, {}});
    r->second.push_back(&d);
  }
  DeviceMetadataPlan plan;
  if (groups.empty()) return plan;
  const std::string dir_name = absl::StrCat(claim.namespace_name, "_", claim.name);
  if (dir_name.size() > kMaxComponent) {
    plan.notes.push_back(
        absl::StrCat("no device metadata: the directory name \"<namespace>_<name>\" would be ",
                     dir_name.size(), " bytes, more than the ", kMaxComponent,
                     " a file name may have; read the CDI environment instead"));
    return plan;
  }
  for (const RequestGroup& g : groups) {
    MetadataFile f;
    f.request = g.base;
    f.host_path = MetadataHostPath(root, claim.namespace_name, claim.name, g.base);
    f.document = Document(claim, driver, g, &plan.notes);
    std::optional<std::string> after = DocumentAfterVersion</*kChecked=*/false>(f.document);
    if (!after) {
      return absl::InternalError(
          absl::StrCat(who, ": the device metadata of request \"", g.base, "\" cannot be printed"));
    }
    f.content = BothVersions(*after);
    f.cdi_file = MetadataCdiFileName(driver, claim.uid, g.base);
    f.cdi_spec.cdi_version = kMetadataCdiVersion;
    f.cdi_spec.kind = MetadataCdiKind(driver);
    cdi::Device device;
    device.name = absl::StrCat(claim.uid, "_", g.base);
    device.container_edits.mounts.push_back(
        {f.host_path,
         MetadataContainerPath(driver, claim.name, claim.pod_claim_name, g.base),
         {"ro", "bind"},
         ""});
    f.cdi_spec.devices.push_back(std::move(device));
    absl::StatusOr<std::string> id =
        cdi::QualifiedName(f.cdi_spec.kind, f.cdi_spec.devices[0].name);
    absl::Status valid = id.ok() ? cdi::Validate(f.cdi_spec) : id.status();
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": cannot describe the device metadata in CDI: ", Message(valid)));
    }
    f.cdi_id = *id;
    plan.files.push_back(std::move(f));
  }
  return plan;
}

std::optional<std::string> MetadataContentOf(const json& document) {
  if (!document.is_object() || document.value("kind", json()) != "DeviceMetadata" ||
      document.value("apiVersion", json()) != kMetadataApiV1beta1) {
    return std::nullopt;
  }
  std::optional<std::string> after = DocumentAfterVersion</*kChecked=*/true>(document);
  if (!after) return std::nullopt;
  return BothVersions(*after);
}

namespace {

// One stored file without its content or document.
json StoredFileHead(const MetadataFile& f) {
  return {{"request", f.request},
          {"hostPath", f.host_path},
          {"cdiFile", f.cdi_file},
          {"cdiSpec", cdi::ToJson(f.cdi_spec)},
          {"cdiId", f.cdi_id}};
}

}  // namespace

json MetadataFilesToJson(const std::vector<MetadataFile>& files) {
  json out = json::array();
  for (const MetadataFile& f : files) {
    json e = StoredFileHead(f);
    if (f.document.is_null()) {
      e["content"] = f.content;
    } else {
      e["document"] = f.document;
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<MetadataFile>> MetadataFilesFromJson(const json& j) {
  auto bad = [](const std::string& what) {
    return absl::DataLossError(absl::StrCat("stored device metadata: ", what));
  };
  if (!j.is_array()) return bad("not a list");
  std::vector<MetadataFile> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& e = j[i];
    const std::string at = absl::StrCat("[", i, "]");
    if (!e.is_object()) return bad(at + " is not an object");
    MetadataFile f;
    for (auto [key, to] : {std::pair<const char*, std::string*>{"request", &f.request},
                           {"hostPath", &f.host_path},
                           {"cdiFile", &f.cdi_file},
                           {"cdiId", &f.cdi_id}}) {
      auto it = e.find(key);
      if (it == e.end() || !it->is_string())
        return bad(absl::StrCat(at, ".", key, " is not a string"));
      *to = it->get<std::string>();
    }
    absl::StatusOr<std::string> content = StoredMetadataContent(e);
    if (!content.ok()) return bad(absl::StrCat(at, ".", content.status().message()));
    f.content = *std::move(content);
    if (const auto doc = e.find("document"); doc != e.end()) f.document = *doc;
    auto spec = e.find("cdiSpec");
    if (spec == e.end()) return bad(at + ".cdiSpec is missing");
    absl::StatusOr<cdi::Spec> s = cdi::FromJson(spec->dump());
    if (!s.ok()) return bad(absl::StrCat(at, ".cdiSpec: ", Message(s.status())));
    f.cdi_spec = *std::move(s);
    if (!absl::StartsWith(f.host_path, "/") || f.cdi_file.empty()) {
      return bad(at + ": hostPath must be absolute and cdiFile set");
    }
    out.push_back(std::move(f));
  }
  return out;
}

absl::StatusOr<std::string> StoredMetadataContent(const json& entry) {
  const auto content = entry.find("content");
  const auto document = entry.find("document");
  if ((content == entry.end()) == (document == entry.end())) {
    return absl::DataLossError("holds neither or both of \"content\" and \"document\"");
  }
  if (content != entry.end()) {
    if (!content->is_string()) return absl::DataLossError("content is not a string");
    return content->get<std::string>();
  }
  std::optional<std::string> printed = MetadataContentOf(*document);
  if (!printed) {
    return absl::DataLossError(
        absl::StrCat("document is not a ", kMetadataApiV1beta1, " DeviceMetadata as written"));
  }
  return *std::move(printed);
}

}  // namespace topodra::prepare
