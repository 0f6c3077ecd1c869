#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cmd/commands.h"
#include "cmd/yaml_json.h"
#include "common/json_text.h"
#include "driver/publish/slice_builder.h"
#include "driver/publish/slice_features.h"
#include "driver/publish/slice_json.h"

namespace topodra::cmd {
namespace {

void Print(const nlohmann::json& doc, const std::string& format, std::ostream& out) {
  if (format == "yaml") {
    out << ToYaml(doc);
  } else {
    out << DumpJson(doc, 2) << "\n";
  }
}

}  // namespace

std::string DefaultNodeName() {
  if (const char* env = std::getenv("NODE_NAME"); env != nullptr && *env != '\0') return env;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  std::string name = host;
  // Node names are lower-case DNS subdomains; kubelet lower-cases the host name the same way.
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

absl::StatusOr<publish::PublishOptions> PublishOptionsFromFlags(const PublishFlags& flags,
                                                                const topology::Topology& topo) {
  publish::PublishOptions o;
  o.node_name = flags.node_name.empty() ? DefaultNodeName() : flags.node_name;
  o.cpu_driver = flags.cpu_driver;
  o.gpu_driver = flags.gpu_driver;
  absl::StatusOr<publish::CpuDeviceMode> mode = publish::ParseCpuDeviceMode(flags.cpu_device_mode);
  if (!mode.ok())
    return absl::InvalidArgumentError(absl::StrCat("--cpu-device-mode: ", mode.status().message()));
  o.cpu_mode = *mode;
  absl::StatusOr<publish::GroupBy> group = publish::ParseGroupBy(flags.group_by);
  if (!group.ok())
    return absl::InvalidArgumentError(absl::StrCat("--group-by: ", group.status().message()));
  o.group_by = *group;
  absl::StatusOr<CpuSet> reserved = CpuSet::Parse(flags.reserved_cpus);
  if (!reserved.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--reserved-cpus: ", reserved.status().message()));
  o.reserved_cpus = *reserved;
  if (flags.gpus != "auto" && flags.gpus != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus: invalid value \"", flags.gpus, "\" (want auto or none)"));
  }
  o.gpus = flags.gpus == "auto";
  absl::StatusOr<publish::FeatureMode> lists =
      publish::ParseFeatureMode(flags.list_attributes, "list attribute");
  if (!lists.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--list-attributes: ", lists.status().message()));
  o.pcie_root_lists = *lists == publish::FeatureMode::kOn;
  absl::StatusOr<publish::FeatureMode> mapping =
      publish::ParseFeatureMode(flags.node_allocatable_mapping, "node-allocatable mapping");
  if (!mapping.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node-allocatable-mapping: ", mapping.status().message()));
  }
  o.node_allocatable = *mapping == publish::FeatureMode::kOn;
  if (absl::Status st = publish::ValidateOptions(o, topo); !st.ok()) return st;
  return o;
}

int RunSlices(const SlicesCommand& cmd, std::ostream& out, std::ostream& err) {
  int code = kExitOk;
  std::optional<topology::Topology> topo = DiscoverOrReport(cmd.topology, "slices", err, &code);
  if (!topo) return code;
  absl::StatusOr<publish::PublishOptions> opts = PublishOptionsFromFlags(cmd.publish, *topo);
  if (!opts.ok()) {
    err << "topodra slices: error: " << opts.status().message() << "\n";
    return kExitUsage;
  }
  std::vector<publish::Slice> all;
  for (const publish::Pool& pool : publish::BuildPools(*topo, *opts)) {
    absl::StatusOr<std::vector<publish::Slice>> slices = publish::BuildSlices(
        pool, cmd.flatten ? publish::SliceForm::kFlat : publish::SliceForm::kMixins);
    if (!slices.ok()) {
      err << "topodra slices: error: " << slices.status().message() << "\n";
      return kExitFailure;
    }
    all.insert(all.end(), slices->begin(), slices->end());
  }
  Print(publish::SliceListToJson(all), cmd.output, out);
  return kExitOk;
}

int RunFlatten(const FlattenCommand& cmd, std::istream& in, std::ostream& out, std::ostream& err) {
  std::stringstream text;
  if (cmd.file == "-") {
    text << in.rdbuf();
  } else {
    std::ifstream f(cmd.file);
    if (!f) {
      err << "topodra flatten: error: cannot read \"" << cmd.file << "\"\n";
      return kExitUsage;
    }
    text << f.rdbuf();
  }
  absl::StatusOr<nlohmann::json> doc = ParseJsonOrYaml(text.str());
  absl::StatusOr<std::vector<publish::Slice>> slices =
      doc.ok() ? publish::SlicesFromDocument(*doc) : doc.status();
  if (!slices.ok()) {
    err << "topodra flatten: error: " << cmd.file << ": " << slices.status().message() << "\n";
    return kExitUsage;
  }
  // Devices must be unique per pool, so each pool (driver + pool name) is flattened as a unit;
  // the output keeps the input order.
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> pools;
  for (size_t i = 0; i < slices->size(); ++i) {
    pools[{(*slices)[i].driver, (*slices)[i].pool}].push_back(i);
  }
  std::vector<publish::Slice> flat(slices->size());
  for (const auto& [key, indexes] : pools) {
    std::vector<publish::Slice> group;
    for (size_t i : indexes) group.push_back((*slices)[i]);
    absl::StatusOr<std::vector<publish::Slice>> f = publish::Flatten(group);
    if (!f.ok()) {
      err << "topodra flatten: error: pool \"" << key.second << "\" of driver \"" << key.first
          << "\": " << f.status().message() << "\n";
      return kExitUsage;
    }
    for (size_t k = 0; k < indexes.size(); ++k) flat[indexes[k]] = std::move((*f)[k]);
  }
  std::string api_version = publish::kResourceApiV1;
  if (doc->is_object() && StringField(*doc, "kind") == "ResourceSlice") {
    api_version = StringField(*doc, "apiVersion", api_version);
  }
  if (flat.size() == 1 && StringField(*doc, "kind") == "ResourceSlice") {
    Print(publish::SliceToJson(flat[0], api_version), cmd.output, out);
  } else {
    Print(publish::SliceListToJson(flat), cmd.output, out);
  }
  return kExitOk;
}

}  // namespace topodra::cmd
