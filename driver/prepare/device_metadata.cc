#include "driver/prepare/device_metadata.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

// Text any reader can take, whatever bytes a published string carried: nlohmann's print with
// an indent of 2, bytes that are not UTF-8 as U+FFFD.
std::string Dump(const json& j) {
  return j.dump(2, ' ', false, nlohmann::detail::error_handler_t::replace);
}

void AppendQuoted(std::string* out, const std::string& s) {
  out->append(json(s).dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace));
}

// `j` as Dump prints it, as the value of a key whose object's members are indented by `indent`
// spaces: every line after the first indented that much more. A printed JSON string never holds
// a raw newline, so every "\n" is a line break.
void AppendIndented(std::string* out, const json& j, size_t indent) {
  const std::string text = Dump(j);
  size_t from = 0;
  for (size_t nl; (nl = text.find('\n', from)) != std::string::npos; from = nl + 1) {
    out->append(text, from, nl + 1 - from);
    out->append(indent, ' ');
  }
  out->append(text, from, std::string::npos);
}

struct RequestGroup {
  std::string base;
  // Full request name ("<main>" or "<main>/<sub>") -> its devices, in order of appearance.
  std::vector<std::pair<std::string, std::vector<const MetadataDevice*>>> requests;
};

// The document as nlohmann prints an ordered_json with an indent of 2 (Go's order: the fixed
// members in the KEP's order, the attributes sorted by name as Go writes a map, which is how a
// json object keeps them), printed directly rather than built as a tree and printed: the tree of
// every attribute copied into an ordered_json and printed cost more than the rest of a prepare's
// planning. Everything after the apiVersion's value: the caller puts the head and the version
// before it (the two versions of the file differ only there).
std::string DocumentAfterVersion(const claims::Claim& claim, const std::string& driver,
                                 const RequestGroup& group, std::vector<std::string>* notes) {
  std::string out = "\",\n  \"metadata\": {\n    \"name\": ";
  AppendQuoted(&out, claim.name);
  out += ",\n    \"namespace\": ";
  AppendQuoted(&out, claim.namespace_name);
  out += ",\n    \"uid\": ";
  AppendQuoted(&out, claim.uid);
  out += ",\n    \"generation\": 1\n  },\n";
  if (!claim.pod_claim_name.empty()) {
    out += "  \"podClaimName\": ";
    AppendQuoted(&out, claim.pod_claim_name);
    out += ",\n";
  }
  out += "  \"requests\": ";
  if (group.requests.empty()) out += "[]";
  for (size_t i = 0; i < group.requests.size(); ++i) {
    const auto& [name, devices] = group.requests[i];
    out += i == 0 ? "[\n    {\n      \"name\": " : ",\n    {\n      \"name\": ";
    AppendQuoted(&out, name);
    out += ",\n      \"devices\": ";
    if (devices.empty()) out += "[]";
    for (size_t j = 0; j < devices.size(); ++j) {
      const MetadataDevice* d = devices[j];
      std::vector<std::string> dropped;
      const json attributes = MetadataAttributes(driver, d->decided, d->published, &dropped);
      if (notes != nullptr && !dropped.empty()) {
        notes->push_back(absl::StrCat(
            "request \"", name, "\" device \"", d->name, "\": ", dropped.size(),
            " attribute(s) left out of the device metadata (at most ", kMaxMetadataAttributes,
            " attributes and ", kMaxMetadataValues, " values): ", absl::StrJoin(dropped, ", ")));
      }
      out +=
          j == 0 ? "[\n        {\n          \"driver\": " : ",\n        {\n          \"driver\": ";
      AppendQuoted(&out, driver);
      out += ",\n          \"pool\": ";
      AppendQuoted(&out, d->pool);
      out += ",\n          \"name\": ";
      AppendQuoted(&out, d->name);
      if (!attributes.empty()) {
        out += ",\n          \"attributes\": ";
        AppendIndented(&out, attributes, 10);
      }
      out += "\n        }";
    }
    if (!devices.empty()) out += "\n      ]";
    out += "\n    }";
  }
  if (!group.requests.empty()) out += "\n  ]";
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
    f.content = BothVersions(DocumentAfterVersion(claim, driver, g, &plan.notes));
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

json MetadataFilesToJson(const std::vector<MetadataFile>& files) {
  json out = json::array();
  for (const MetadataFile& f : files) {
    out.push_back({{"request", f.request},
                   {"hostPath", f.host_path},
                   {"content", f.content},
                   {"cdiFile", f.cdi_file},
                   {"cdiSpec", cdi::ToJson(f.cdi_spec)},
                   {"cdiId", f.cdi_id}});
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
                           {"content", &f.content},
                           {"cdiFile", &f.cdi_file},
                           {"cdiId", &f.cdi_id}}) {
      auto it = e.find(key);
      if (it == e.end() || !it->is_string())
        return bad(absl::StrCat(at, ".", key, " is not a string"));
      *to = it->get<std::string>();
    }
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

}  // namespace topodra::prepare
