#include "cmd/run_config.h"

#include "absl/strings/str_cat.h"
#include "cmd/enforcement.h"
#include "driver/metrics/metrics_server.h"

namespace topodra::cmd {
namespace {

absl::Status Prefixed(const char* flag, const absl::Status& st) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", st.message()));
}

// What the flags say about where the daemon serves and writes.
absl::Status FillPaths(const RunCommand& cmd, node::NodeConfig* c) {
  c->kubelet_root_dir = node::NormalDir(cmd.kubelet_root_dir);
  c->cdi_dir = cmd.cdi_dir;
  c->state_dir = cmd.state_dir;
  c->host_root = cmd.host_root;
  absl::StatusOr<std::string> metadata_dir = node::ParseHostDir(cmd.device_metadata_dir);
  if (!metadata_dir.ok()) return Prefixed("--device-metadata-dir", metadata_dir.status());
  c->device_metadata_dir = *metadata_dir;
  c->cgroup_root = cmd.cgroup_root;
  c->hook_dir = cmd.hook_dir;
  c->metrics_address = cmd.metrics_address;
  c->health_address = cmd.health_address;
  absl::StatusOr<std::optional<std::string>> metrics =
      metrics::ListeningPortsFor(cmd.metrics_address);
  if (!metrics.ok()) return Prefixed("--metrics-address", metrics.status());
  c->metrics_listen = *metrics;
  absl::StatusOr<std::optional<std::string>> health =
      metrics::ListeningPortsFor(cmd.health_address, "health address");
  if (!health.ok()) return Prefixed("--health-address", health.status());
  c->health_listen = *health;
  return absl::OkStatus();
}

absl::Status FillDevicePlugins(const RunCommand& cmd, node::NodeConfig* c) {
  absl::StatusOr<std::set<node::DevicePluginKind>> kinds =
      node::ParseDevicePlugins(cmd.device_plugin);
  if (!kinds.ok()) return Prefixed("--device-plugin", kinds.status());
  c->device_plugin.kinds = *kinds;
  c->device_plugin.gpu_resource = cmd.device_plugin_gpu_resource;
  c->device_plugin.cpu_resource = cmd.device_plugin_cpu_resource;
  c->device_plugin.reclaim_interval =
      absl::Milliseconds(static_cast<int64_t>(cmd.device_plugin_reclaim_seconds * 1000));
  c->device_plugin.pod_resources_socket = cmd.pod_resources_socket;
  absl::StatusOr<deviceclass::CheckMode> check =
      deviceclass::ParseCheckMode(cmd.extended_resource_check);
  if (!check.ok()) return Prefixed("--extended-resource-check", check.status());
  c->device_plugin.extended_resource_check = *check;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<node::NodeConfig> NodeConfigFromFlags(const RunCommand& cmd,
                                                     const topology::Topology& topo) {
  node::NodeConfig c;
  absl::StatusOr<publish::PublishOptions> opts = PublishOptionsFromFlags(cmd.publish, topo);
  if (!opts.ok()) return opts.status();
  c.publish = *std::move(opts);
  absl::StatusOr<publish::MixinMode> mixins = publish::ParseMixinMode(cmd.slice_mixins);
  if (!mixins.ok()) return Prefixed("--slice-mixins", mixins.status());
  c.slice_mixins = *mixins;
  absl::StatusOr<publish::TaintMode> taints = publish::ParseTaintMode(cmd.reservation_taints);
  if (!taints.ok()) return Prefixed("--reservation-taints", taints.status());
  c.reservation_taints = *taints;
  // PublishOptionsFromFlags checked both; the daemon asks the server, so auto builds the fields
  // and the publisher strips what the server does not keep.
  c.list_attributes = *publish::ParseFeatureMode(cmd.publish.list_attributes, "list attribute");
  c.node_allocatable =
      *publish::ParseFeatureMode(cmd.publish.node_allocatable_mapping, "node-allocatable mapping");
  c.publish.pcie_root_lists = c.list_attributes != publish::FeatureMode::kOff;
  c.publish.node_allocatable = c.node_allocatable != publish::FeatureMode::kOff;
  if (cmd.reservations != "on" && cmd.reservations != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--reservations: invalid value \"", cmd.reservations, "\" (want on or off)"));
  }
  c.reservations = cmd.reservations == "on";
  if (cmd.dra_health != "on" && cmd.dra_health != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dra-health: invalid value \"", cmd.dra_health, "\" (want on or off)"));
  }
  c.dra_health = cmd.dra_health == "on";
  if (cmd.device_metadata != "on" && cmd.device_metadata != "off") {
    return absl::InvalidArgumentError(absl::StrCat("--device-metadata: invalid value \"",
                                                   cmd.device_metadata, "\" (want on or off)"));
  }
  c.device_metadata = cmd.device_metadata == "on";
  absl::StatusOr<Enforcement> enforcement = ResolveEnforcement(cmd);
  if (!enforcement.ok()) return enforcement.status();
  absl::StatusOr<node::Enforce> enforce = node::ParseEnforce(enforcement->mode);
  if (!enforce.ok()) return Prefixed("--enforce", enforce.status());
  c.enforce = *enforce;
  c.enforce_note = enforcement->note;
  c.strict_cpu_reservation = cmd.strict_cpu_reservation;
  if (cmd.numa_memory != "claim" && cmd.numa_memory != "none") {
    return absl::InvalidArgumentError(absl::StrCat("--numa-memory: invalid value \"",
                                                   cmd.numa_memory, "\" (want claim or none)"));
  }
  c.numa_memory = cmd.numa_memory == "claim";
  c.topology_refresh = absl::Seconds(std::max(1, cmd.topology_refresh_seconds));
  c.version = TOPODRA_VERSION_STRING;
  if (absl::Status st = FillPaths(cmd, &c); !st.ok()) return st;
  if (absl::Status st = FillDevicePlugins(cmd, &c); !st.ok()) return st;
  if (absl::Status st = node::Validate(c, topo); !st.ok()) return st;
  return c;
}

}  // namespace topodra::cmd
