#include "driver/node/config.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cdi/spec.h"

namespace topodra::node {

absl::StatusOr<Enforce> ParseEnforce(const std::string& s) {
  if (s == "cgroup") return Enforce::kCgroup;
  if (s == "none") return Enforce::kNone;
  return absl::InvalidArgumentError(
      absl::StrCat("invalid value \"", s, "\" (want cgroup or none)"));
}

const char* EnforceName(Enforce e) { return e == Enforce::kCgroup ? "cgroup" : "none"; }

absl::StatusOr<std::set<DevicePluginKind>> ParseDevicePlugins(const std::string& s) {
  if (s == "none") return std::set<DevicePluginKind>{};
  if (s == "gpu") return std::set<DevicePluginKind>{DevicePluginKind::kGpu};
  if (s == "cpu") return std::set<DevicePluginKind>{DevicePluginKind::kCpu};
  if (s == "gpu,cpu" || s == "cpu,gpu") {
    return std::set<DevicePluginKind>{DevicePluginKind::kGpu, DevicePluginKind::kCpu};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid value \"", s, "\" (want none, gpu, cpu or gpu,cpu)"));
}

std::string NormalDir(const std::string& dir) {
  if (dir.empty()) return dir;
  std::string out = std::filesystem::path(dir).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

absl::StatusOr<std::string> ParseHostDir(const std::string& dir) {
  if (dir.empty()) return dir;
  if (dir.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("\"", dir, "\" is not an absolute path"));
  }
  return NormalDir(dir);
}

absl::Status ValidateResourceName(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos ||
      name.substr(0, slash).ends_with("kubernetes.io") || name.starts_with("requests.")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resource name \"", name,
        "\" is not an extended resource name (want <domain>/<name>, not in kubernetes.io)"));
  }
  if (absl::Status st = cdi::ValidateKind(name); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource name \"", name, "\": ", std::string(st.message())));
  }
  return absl::OkStatus();
}

absl::Status Validate(const NodeConfig& config, const topology::Topology& topo) {
  if (absl::Status st = publish::ValidateOptions(config.publish, topo); !st.ok()) return st;
  for (DevicePluginKind kind : config.device_plugin.kinds) {
    if (absl::Status st = ValidateResourceName(config.device_plugin.resource(kind)); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--device-plugin-",
                                                     kind == DevicePluginKind::kGpu ? "gpu" : "cpu",
                                                     "-resource: ", st.message()));
    }
  }
  if (config.topology_refresh < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--topology-refresh: ", absl::FormatDuration(config.topology_refresh),
                     " is shorter than a second"));
  }
  if (config.device_plugin.reclaim_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device-plugin-reclaim-interval: ",
        absl::FormatDuration(config.device_plugin.reclaim_interval), " is not positive"));
  }
  return absl::OkStatus();
}

}  // namespace topodra::node
